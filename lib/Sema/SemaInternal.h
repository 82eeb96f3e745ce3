//===- SemaInternal.h - The analyzer shared by the Sema files ---*- C++ -*-===//
//
// Private to lib/Sema. The analyzer's checks are split over files by what
// they check: Sema.cpp (declarations and the driver), SemaExpr.cpp,
// SemaModule.cpp, SemaLayout.cpp and SemaBackend.cpp.
//
//===----------------------------------------------------------------------===//

#ifndef MDL_LIB_SEMA_SEMAINTERNAL_H
#define MDL_LIB_SEMA_SEMAINTERNAL_H

#include "mdl/Parse/Parser.h"
#include "mdl/Sema/Sema.h"

#include "mlir/IR/Diagnostics.h"
#include "llvm/ADT/SmallPtrSet.h"
#include "llvm/ADT/StringSet.h"

namespace mdl::sema {

/// What an expression may refer to where it appears.
struct ExprEnv {
  const ModuleScope *scope = nullptr;
  /// Names of a backend (its lets and those of its bases).
  const llvm::StringMap<ast::Type> *backendNames = nullptr;
  bool allowHf = false;
  bool allowContext = false;
  bool allowIs = false;
  /// How many hf() reads the checked expressions hold.
  int hfReads = 0;
  /// In a choice default, computed before any parallel configuration.
  bool choiceDefault = false;
  /// In a shard's condition: the parallel sizes alone, so that a split is
  /// the same on every rank and every instance of the module.
  bool sizesOnly = false;
  /// Local variables, innermost last.
  std::vector<std::pair<std::string, ast::Type>> locals;
};

class Analyzer {
public:
  Analyzer(Program &program, llvm::SourceMgr &sm, mlir::MLIRContext &ctx)
      : program(program), sm(sm), ctx(ctx) {}

  mlir::LogicalResult run();

private:
  mlir::Location loc(llvm::SMLoc l) { return toLocation(sm, ctx, l); }
  mlir::InFlightDiagnostic error(llvm::SMLoc l) {
    failed = true;
    return mlir::emitError(loc(l));
  }

  // Declarations (Sema.cpp) ------------------------------------------------
  void collectDecls();
  void buildScope(const ast::ModuleDecl *m);

  // Modules (SemaModule.cpp) -----------------------------------------------
  void checkModule(const ast::ModuleDecl *m);
  void checkExtends(const ast::ModuleDecl *m);
  void checkMember(const ast::ModuleDecl *m, const ast::Member *mem);
  void checkShape(const ModuleScope &scope, const ast::Shape &shape);
  /// A dimension (or a factor of one) appearing twice in a weight would
  /// make its axes ambiguous to every layout.
  void checkDistinctDims(const ModuleScope &scope, const ast::Ident &name,
                         std::initializer_list<const ast::Shape *> shapes,
                         const std::optional<ast::Ident> &expertDim);
  void checkDimName(const ModuleScope &scope, const ast::Ident &dim);
  void checkInstance(const ModuleScope &scope, const ast::InstanceExpr &ie,
                     ExprEnv &env);
  void checkCall(const ast::ModuleCall &call, ExprEnv &env);
  void checkValueCycles(const ModuleScope &scope);

  // Layouts (SemaLayout.cpp) -----------------------------------------------
  void checkRecompute(const std::vector<ast::Ident> &triggers);
  void checkLayout(const ast::LayoutDecl *l);
  void checkChoiceDefault(const ast::LayoutDecl &l, const ast::ModuleDecl &m,
                          const ModuleScope &scope,
                          const ast::ChoiceDefaultEntry &ch,
                          llvm::StringSet<> &seen);
  void checkTensorEntry(const ModuleScope &scope, const ast::TensorEntry &e,
                        ExprEnv &env);
  void checkTensorEntryBody(const ModuleScope &scope, const ast::TensorEntry &e,
                            ExprEnv &env);
  void checkTemplate(const ast::NameTemplate &t, ExprEnv &env,
                     bool allowFamily);

  // Backends (SemaBackend.cpp) ---------------------------------------------
  void checkBackend(const ast::BackendDecl *b);

  // Expressions (SemaExpr.cpp) ---------------------------------------------
  ast::Type check(ast::Expr *e, ExprEnv &env,
                  const ast::Type *expected = nullptr);
  ast::Type expect(ast::Expr *e, ExprEnv &env, const ast::Type &want,
                   llvm::StringRef what);
  ast::Type checkName(ast::NameRefExpr *e, ExprEnv &env);
  ast::Type checkCallExpr(ast::CallExpr *e, ExprEnv &env,
                          const ast::Type *expected);
  ast::Type typeOfSymbol(const ModuleScope &scope, const ModuleSymbol &sym,
                         llvm::SMLoc useLoc);
  bool isConstant(const ast::Expr *e);

  Program &program;
  llvm::SourceMgr &sm;
  mlir::MLIRContext &ctx;
  bool failed = false;
  /// Lets whose type is being inferred, to catch cyclic definitions.
  llvm::SmallPtrSet<const ast::Member *, 8> inferring;
  llvm::DenseMap<const ast::Member *, ast::Type> inferred;
  /// Backend names, per backend, including inherited lets.
  llvm::DenseMap<const ast::BackendDecl *, llvm::StringMap<ast::Type>>
      backendNames;
};

} // namespace mdl::sema

#endif // MDL_LIB_SEMA_SEMAINTERNAL_H
