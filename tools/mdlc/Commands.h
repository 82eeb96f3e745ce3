//===- Commands.h - mdlc's commands ----------------------------*- C++ -*-===//

#ifndef MDLC_COMMANDS_H
#define MDLC_COMMANDS_H

#include "mdl/Dialect/MDL/MDLOps.h"
#include "mdl/Evaluate/Engine.h"
#include "mdl/Runtime/Model/Plan.h"

#include "mlir/IR/MLIRContext.h"
#include "llvm/Support/SourceMgr.h"

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace mdl {

struct Options {
  std::string command; // check, params, plan, ast, mlir
  std::vector<std::string> files;
  std::vector<std::string> includeDirs;
  std::string hfConfig;
  std::vector<std::pair<std::string, std::string>> sets;
  std::string format = "text";
  std::vector<std::string> backends;
  bool verifyDiagnostics = false;
  /// --diagnostics-format: text (as a compiler prints them), json or
  /// sarif; --diagnostics-file: where json and sarif go (default stderr).
  /// The parallel axes given on the command line (tp, pp, ...).
  std::set<std::string> axesGiven;
  /// check: name every invalid configuration and why.
  bool verbose = false;
  /// plan --format=svg|diagram: the tensors to draw (a regular expression
  /// searched in each tensor's name).
  std::string tensorPattern;
  /// format: rewrite the files rather than print them.
  bool inPlace = false;
  std::string diagnosticsFormat = "text", diagnosticsFile;
  /// --choice name=value: a backend's storage variant.
  std::map<std::string, std::string> choices;
  /// plan: the parallel configuration and the rank to show (-1: all).
  ParallelConfig parallel;
  int64_t rank = -1;
  /// check: the grid (axis -> values); empty for the default.
  std::map<std::string, std::vector<int64_t>> grid;
  /// check against a real checkpoint.
  std::string hfIndex, hfDir, hfInventory;
  /// check --mcore-dir: a Megatron-Core distributed checkpoint (torch_dist).
  std::string mcoreDir;
  /// lora: the adapters' rank.
  int64_t loraRank = 16;
  /// emit: where the generated files go, and a make-style list of the
  /// specs they come from.
  std::string outputDir, depfile;
};

/// Parses the command line. Returns an exit code when the program should
/// stop now (help, version, bad usage), nullopt to go on.
std::optional<int> parseOptions(const std::vector<std::string> &args,
                                Options &options, const char *usage);

/// Runs the command; returns the exit code.
int runCommand(const Options &options, llvm::SourceMgr &sourceMgr,
               mlir::MLIRContext &context);

// Shared by the commands -----------------------------------------------------

/// The one model declared in `file`; null (after a message) otherwise.
ModuleDeclOp theModel(mlir::ModuleOp top, const std::string &file);
/// The HF config's path: --hf-config, or the model's first example; ""
/// after an error.
std::string configPath(const Options &options, ModuleDeclOp model);
/// A spec's model bound to a backend by the runtime's engine.
struct BoundSpec {
  std::unique_ptr<SpecDecls> decls;
  std::unique_ptr<rt::Binding> binding;
  std::string configPath;
  /// Where a source id of the layout points in the spec.
  mlir::Location source(int id) const {
    return locationOf(binding->boundLayout().sources[size_t(id)],
                      decls->modelOp().getLoc());
  }
};
/// Binds the first file's model to `backend`, with the options' config and
/// choices; reports what fails and returns an empty BoundSpec then.
BoundSpec bindSpec(const Options &options, mlir::ModuleOp top,
                   mlir::MLIRContext &context, const std::string &backend);
/// Warns when the backend splits over tp and no --tp was given.
void warnDefaultAxes(const Options &options, const rt::ModelLayout &m);
/// Whether options.parallel is valid for `planner`'s layout; lists every
/// reason it is not.
bool reportInvalid(const rt::Planner &planner, const Options &options);

int runParams(const Options &options, mlir::ModuleOp top,
              mlir::MLIRContext &context);
int runPlan(const Options &options, mlir::ModuleOp top,
            mlir::MLIRContext &context);
int runEmit(const Options &options, mlir::ModuleOp top,
            mlir::MLIRContext &context);
int runLora(const Options &options, mlir::ModuleOp top,
            mlir::MLIRContext &context);
int runFormat(const Options &options, llvm::SourceMgr &sourceMgr,
              mlir::MLIRContext &context);
int runCheck(const Options &options, mlir::ModuleOp top,
             mlir::MLIRContext &context);

} // namespace mdl

#endif // MDLC_COMMANDS_H
