//===- Frontend.cpp - From spec files to verified IR ----------------------===//

#include "mdl/Driver/Frontend.h"

#include "mdl/Dialect/MDL/MDLOps.h"
#include "mdl/MLIRGen/MLIRGen.h"
#include "mdl/Transforms/Passes.h"

#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"

using namespace mdl;

FrontendResult mdl::runFrontend(const std::vector<std::string> &paths,
                                const LoadOptions &options,
                                llvm::SourceMgr &sourceMgr,
                                mlir::MLIRContext &context,
                                FrontendStage stage) {
  context.getOrLoadDialect<MDLDialect>();
  FrontendResult result;
  std::unique_ptr<Program> program =
      loadProgram(paths, options, sourceMgr, context);
  if (!program)
    return result;
  if (stage != FrontendStage::Parse &&
      mlir::failed(analyze(*program, sourceMgr, context)))
    return result;
  if (stage == FrontendStage::GenerateIR) {
    result.module = mlirGen(*program, sourceMgr, context);
    if (!result.module)
      return result;
    // Normalised once, then only read: backends with their bases folded
    // in (as models with theirs already are), conditions that read the
    // parallel context marked.
    mlir::PassManager pm(&context);
    pm.addPass(createPrepareEmit());
    if (mlir::failed(pm.run(*result.module))) {
      result.module = nullptr;
      return result;
    }
  }
  result.program = std::move(program);
  return result;
}
