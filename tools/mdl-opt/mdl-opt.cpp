//===- mdl-opt.cpp - Run passes on mdl dialect IR -------------------------===//

#include "mdl/Dialect/MDL/MDLOps.h"
#include "mdl/Runtime/Base/Cli.h"
#include "mdl/Transforms/Passes.h"

#include "mlir/IR/DialectRegistry.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "mlir/Transforms/Passes.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/raw_ostream.h"

int main(int argc, char **argv) {
  // The options LLVM's libraries register when they load (code generation,
  // targets) mean nothing here: --help lists only what mlir-opt's driver
  // adds below (passes, IR printing, diagnostics).
  for (auto &[name, option] : llvm::cl::getRegisteredOptions())
    if (name != "help" && name != "version")
      option->setHiddenFlag(llvm::cl::ReallyHidden);
  llvm::cl::SetVersionPrinter([](llvm::raw_ostream &os) {
    os << mdl::cli::versionLine("mdl-opt") << "\n";
  });
  mlir::DialectRegistry registry;
  registry.insert<mdl::MDLDialect>();
  mlir::registerCanonicalizerPass();
  mlir::registerCSEPass();
  mdl::registerMDLPasses();
  return mlir::asMainReturnCode(
      mlir::MlirOptMain(argc, argv, "MDL optimizer driver\n", registry));
}
