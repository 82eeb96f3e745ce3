//===- Frontend.h - From spec files to verified IR -------------*- C++ -*-===//
//
// The steps every tool takes first: load, analyse, generate IR. Shared by
// `mdlc` and the tests' tools so that they report the same errors the same
// way.
//
//===----------------------------------------------------------------------===//

#ifndef MDL_DRIVER_FRONTEND_H
#define MDL_DRIVER_FRONTEND_H

#include "mdl/Sema/Sema.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"

#include <memory>
#include <string>
#include <vector>

namespace llvm {
class SourceMgr;
} // namespace llvm

namespace mdl {

struct FrontendResult {
  std::unique_ptr<Program> program;
  mlir::OwningOpRef<mlir::ModuleOp> module;
};

/// How far the front end goes.
enum class FrontendStage { Parse, Analyze, GenerateIR };

/// Loads `paths` and what they import; then, up to `stage`, analyses them
/// and lowers them to the mdl dialect. Diagnostics go to the context's
/// handler. On failure the result's members are null.
FrontendResult runFrontend(const std::vector<std::string> &paths,
                           const LoadOptions &options,
                           llvm::SourceMgr &sourceMgr,
                           mlir::MLIRContext &context,
                           FrontendStage stage = FrontendStage::GenerateIR);

} // namespace mdl

#endif // MDL_DRIVER_FRONTEND_H
