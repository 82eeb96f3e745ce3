//===- Commands.h - mdlc's commands ----------------------------*- C++ -*-===//

#ifndef MDLC_COMMANDS_H
#define MDLC_COMMANDS_H

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace llvm {
class SourceMgr;
} // namespace llvm
namespace mlir {
class MLIRContext;
} // namespace mlir

namespace mdl {

struct Options {
  std::string command; // check, params, plan, emit, ast, mlir
  std::vector<std::string> files;
  std::vector<std::string> includeDirs;
  std::string hfConfig;
  std::vector<std::pair<std::string, std::string>> sets;
  std::string format = "text";
  std::vector<std::string> backends;
  bool verifyDiagnostics = false;
};

/// Parses the command line. Returns an exit code when the program should
/// stop now (help, version, bad usage), nullopt to go on.
std::optional<int> parseOptions(const std::vector<std::string> &args,
                                Options &options, const char *usage);

/// Runs the command; returns the exit code.
int runCommand(const Options &options, llvm::SourceMgr &sourceMgr,
               mlir::MLIRContext &context);

} // namespace mdl

#endif // MDLC_COMMANDS_H
