//===- Frontend.cpp - From spec files to verified IR ----------------------===//

#include "mdl/Driver/Frontend.h"

#include "mdl/Dialect/MDL/MDLOps.h"
#include "mdl/MLIRGen/MLIRGen.h"

#include "mlir/IR/MLIRContext.h"

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
  }
  result.program = std::move(program);
  return result;
}
