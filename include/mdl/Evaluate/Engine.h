//===- Engine.h - The runtime's engine, driven by the compiler -*- C++ -*-===//
//
// The compiler instantiates and binds models with the runtime's engine
// (mdl/Runtime/Model/Model.h), on the declarations the C++ emitter prints, their
// expressions interpreted on the IR. Its errors name spec locations
// ("file:line:col"), which become diagnostics at those locations.
//
//===----------------------------------------------------------------------===//

#ifndef MDL_EVALUATE_ENGINE_H
#define MDL_EVALUATE_ENGINE_H

#include "mdl/Dialect/MDL/MDLOps.h"
#include "mdl/Runtime/Model/Generated.h"

#include <map>
#include <memory>
#include <string>

namespace mdl {

/// A spec's model and backends as the runtime's declarations. Backends are
/// built on first use; the IR is the front end's, normalised
/// (`mdl-prepare-emit`: bases folded in, `reads_context` set).
class SpecDecls {
public:
  /// The declarations of `model`; null after reporting errors.
  static std::unique_ptr<SpecDecls> build(ModuleDeclOp model);

  const rt::ModelDecl &model() const { return modelDecl; }
  ModuleDeclOp modelOp() const { return op; }
  /// The backend named `spelled` (`mcore-te` or `mcore_te`); null after
  /// reporting that there is none.
  const rt::BackendDecl *backend(llvm::StringRef spelled);
  /// The same, reporting at `loc` (a deploy naming it, say).
  const rt::BackendDecl *backend(llvm::StringRef spelled, mlir::Location loc);

private:
  ModuleDeclOp op;
  rt::ModelDecl modelDecl;
  std::map<std::string, std::unique_ptr<rt::BackendDecl>> backends;
};

/// Loads an HF config.json with `key=value` overrides; null after
/// reporting what fails.
std::optional<rt::HFConfig>
loadEngineConfig(const std::string &path,
                 const std::vector<std::pair<std::string, std::string>> &sets,
                 mlir::MLIRContext &context);

/// The example configs of a model, resolved against the directory of the
/// file that declares it.
std::vector<std::string> exampleConfigPaths(ModuleDeclOp model);

/// The location "file:line:col" names, or `fallback` when it names none.
mlir::Location locationOf(llvm::StringRef where, mlir::Location fallback);

/// Reports an error of the runtime at its location, else at `fallback`,
/// with its notes.
void emitEngineError(const rt::EvalError &error, mlir::Location fallback);
/// The same for an error as text (rt::EvalError::text(): "file:line:col:
/// message", then a line "file:line:col: note: message" per note).
void emitEngineError(llvm::StringRef error, mlir::Location fallback);

/// Instantiates `decls`' model for `config`; null after reporting every
/// error.
std::unique_ptr<rt::Model> instantiate(const SpecDecls &decls,
                                       rt::HFConfig config,
                                       bool raiseSingleStacks = false);

} // namespace mdl

#endif // MDL_EVALUATE_ENGINE_H
