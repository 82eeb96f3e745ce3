//===- Sema.h - Loading, name resolution and type checking -----*- C++ -*-===//
//
// Loads spec files and everything they import, resolves names across files
// and checks types. Every error is a located MLIR diagnostic; analysis goes
// on after an error so that one run reports as many as it can.
//
//===----------------------------------------------------------------------===//

#ifndef MDL_SEMA_SEMA_H
#define MDL_SEMA_SEMA_H

#include "mdl/AST/AST.h"

#include "mlir/IR/MLIRContext.h"
#include "mlir/Support/LogicalResult.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Support/SourceMgr.h"

#include <memory>
#include <string>
#include <vector>

namespace mdl {

/// A name declared in a module: what it is and, for values, its type.
struct ModuleSymbol {
  enum Kind { Input, Config, Let, Dim, Param, Linear, Instance, Stack };
  Kind kind;
  const ast::Member *member = nullptr;    // null for Input
  const ast::ModuleParam *input = nullptr; // only for Input
  ast::Type type;                         // for Input, Config, Let, Dim
  ast::SMRange range;

  bool isValue() const {
    return kind == Input || kind == Config || kind == Let || kind == Dim;
  }
  /// Inputs of type `dim` and `dim` members may name dimensions.
  bool isDim() const {
    return kind == Dim || (kind == Input && type.kind == ast::Type::Dim);
  }
  bool isParamLike() const { return kind == Param || kind == Linear; }
};

/// The names of one module, in declaration order.
struct ModuleScope {
  const ast::ModuleDecl *decl = nullptr;
  llvm::MapVector<llvm::StringRef, ModuleSymbol> symbols;

  const ModuleSymbol *lookup(llvm::StringRef name) const {
    auto it = symbols.find(name);
    return it == symbols.end() ? nullptr : &it->second;
  }
};

/// Everything loaded for one compilation.
struct Program {
  std::vector<std::unique_ptr<ast::File>> files;
  /// The files named on the command line, in order.
  std::vector<const ast::File *> mainFiles;
  llvm::StringMap<const ast::ModuleDecl *> modules;
  llvm::StringMap<const ast::BackendDecl *> backends;
  std::vector<const ast::LayoutDecl *> layouts;
  /// Filled by analyze().
  llvm::DenseMap<const ast::ModuleDecl *, ModuleScope> scopes;

  const ModuleScope &scope(const ast::ModuleDecl *m) const {
    return scopes.find(m)->second;
  }
};

struct LoadOptions {
  /// Searched, in order, for imports not found beside the importing file.
  std::vector<std::string> includeDirs;
};

/// Parses `paths` and, transitively, what they import. Reports syntax
/// errors, missing files and import cycles (with the chain). Returns null if
/// anything failed.
std::unique_ptr<Program> loadProgram(const std::vector<std::string> &paths,
                                     const LoadOptions &options,
                                     llvm::SourceMgr &sourceMgr,
                                     mlir::MLIRContext &context);

/// Resolves names and checks types of everything in `program`.
mlir::LogicalResult analyze(Program &program, llvm::SourceMgr &sourceMgr,
                            mlir::MLIRContext &context);

/// A parameter reached from a module through a dotted name: `q`,
/// `experts.gate` (through an instance), `o.bias` (a linear's bias).
struct ParamRef {
  const ModuleScope *owner = nullptr;  // the module declaring the parameter
  const ModuleSymbol *symbol = nullptr; // a Param or a Linear
  bool bias = false;
  /// The instances walked through, outermost first.
  std::vector<std::string> instancePath;
};

/// Resolves `name` from `scope`; on failure returns nullopt and says why in
/// `why`. An instance chosen by `match` is walked through only when every arm
/// instantiates the same module.
std::optional<ParamRef> resolveParamRef(const Program &program,
                                        const ModuleScope &scope,
                                        const ast::QualifiedName &name,
                                        std::string &why);

/// The atomic dimensions of `dim` in `scope`: itself, or the factors of a
/// factored dimension, recursively.
std::vector<std::string> dimAtoms(const ModuleScope &scope,
                                  llvm::StringRef dim);

/// The builtin functions of the expression language.
enum class Builtin {
  Hf, Len, Range, Min, Max, Gcd, CeilDiv, Str, Pad, DType, Size, Sum, Primes, Chars,
  EndsWith
};
std::optional<Builtin> lookupBuiltin(llvm::StringRef name);
llvm::StringRef spelling(Builtin b);

/// The properties a backend's module class may set, and the type of each
/// (the roles it may be defined for are mdl::ModuleRole's).
std::optional<ast::Type::Kind> classPropertyType(llvm::StringRef property);

/// Events after which a derived tensor may be recomputed.
bool isRecomputeTrigger(llvm::StringRef name);

} // namespace mdl

#endif // MDL_SEMA_SEMA_H
