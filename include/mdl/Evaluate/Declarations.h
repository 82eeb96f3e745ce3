//===- Declarations.h - The runtime's declarations of a spec ---*- C++ -*-===//
//
// One walk of the IR builds the declarations the runtime instantiates and
// binds (rt::ModelDecl, rt::BackendDecl). The C++ emitter prints them as
// generated code; the compiler hands them to the runtime's engine with its
// expressions interpreted on the IR. What differs is only how a region
// becomes an expression (an ExprFactory).
//
//===----------------------------------------------------------------------===//

#ifndef MDL_EVALUATE_DECLARATIONS_H
#define MDL_EVALUATE_DECLARATIONS_H

#include "mdl/Dialect/MDL/MDLOps.h"
#include "mdl/Runtime/Model/Model.h"

#include "llvm/ADT/SmallVector.h"

#include <string>

namespace mdl {

/// Turns the value a region yields (its `result`th) into an expression.
class ExprFactory {
public:
  virtual ~ExprFactory();
  virtual rt::Expr make(mlir::Region &region, unsigned result) = 0;
  /// The expression of a region that may be empty (then none).
  rt::Expr makeOrNone(mlir::Region &region, unsigned result = 0) {
    return region.empty() ? rt::Expr() : make(region, result);
  }
};

struct DeclarationOptions {
  /// The spec file's name, as `ModelDecl::spec` gives it.
  std::string specName;
  /// Locations under this directory are written relative to it.
  std::string baseDir;
};

/// "file:line:col" of an op, relative to `baseDir` when under it; "" when
/// the op has no file location.
std::string whereOf(mlir::Operation *op, llvm::StringRef baseDir = "");

/// The runtime's spelling of a value type ("int", "list<string>"), which
/// `hf()` reads are checked against.
std::string typeSpelling(mlir::Type type);

/// A backend setting the runtime reads: the `let` a spec defines, and the
/// field of rt::BackendDecl it fills, with that field's C++ name.
struct BackendSetting {
  llvm::StringRef let, field;
  rt::Expr rt::BackendDecl::*member;
};
llvm::ArrayRef<BackendSetting> backendSettings();

/// The modules `model` instantiates, itself first, in discovery order.
llvm::SmallVector<ModuleDeclOp> reachableModules(ModuleDeclOp model);

/// The declarations of `model` and every module it reaches.
mlir::FailureOr<rt::ModelDecl>
buildModelDecl(ModuleDeclOp model, ExprFactory &exprs,
               const DeclarationOptions &options);

/// The declarations of `backend` with its layouts of the modules `model`
/// reaches. Its bases must be folded in already and `reads_context` set
/// (`mdl-prepare-emit`).
mlir::FailureOr<rt::BackendDecl>
buildBackendDecl(BackendOp backend, ModuleDeclOp model, ExprFactory &exprs,
                 const DeclarationOptions &options);

} // namespace mdl

#endif // MDL_EVALUATE_DECLARATIONS_H
