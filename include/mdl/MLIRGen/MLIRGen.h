//===- MLIRGen.h - Lower the MDL AST to the mdl dialect --------*- C++ -*-===//

#ifndef MDL_MLIRGEN_MLIRGEN_H
#define MDL_MLIRGEN_MLIRGEN_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"

namespace llvm {
class SourceMgr;
} // namespace llvm

namespace mdl {
struct Program;

/// Emits every declaration of an analysed program, in source order, into a
/// new top-level module, with file:line:col locations. Returns null (after
/// reporting) if the result does not verify, which means Sema missed
/// something.
mlir::OwningOpRef<mlir::ModuleOp> mlirGen(const Program &program,
                                          llvm::SourceMgr &sourceMgr,
                                          mlir::MLIRContext &context);

} // namespace mdl

#endif // MDL_MLIRGEN_MLIRGEN_H
