//===- mdl-opt.cpp - Run passes on mdl dialect IR -------------------------===//

#include "mdl/Dialect/MDL/MDLOps.h"
#include "mdl/Transforms/Passes.h"

#include "mlir/IR/DialectRegistry.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "mlir/Transforms/Passes.h"

int main(int argc, char **argv) {
  mlir::DialectRegistry registry;
  registry.insert<mdl::MDLDialect>();
  mlir::registerCanonicalizerPass();
  mlir::registerCSEPass();
  mdl::registerMDLPasses();
  return mlir::asMainReturnCode(
      mlir::MlirOptMain(argc, argv, "MDL optimizer driver\n", registry));
}
