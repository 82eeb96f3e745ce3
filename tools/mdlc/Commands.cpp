//===- Commands.cpp - mdlc's commands -------------------------------------===//

#include "Commands.h"

#include "mdl/AST/ASTDumper.h"
#include "mdl/Dialect/MDL/MDLOps.h"
#include "mdl/Driver/Frontend.h"

#include "mlir/IR/MLIRContext.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/raw_ostream.h"

using namespace mdl;

static int usageError(const std::string &message) {
  llvm::errs() << "mdlc: error: " << message
               << "\n(run 'mdlc --help' for usage)\n";
  return 2;
}

std::optional<int> mdl::parseOptions(const std::vector<std::string> &args,
                                     Options &options, const char *usage) {
  auto value = [&](size_t &i, const std::string &flag) -> std::optional<std::string> {
    const std::string &a = args[i];
    if (a.size() > flag.size() && a.compare(0, flag.size() + 1, flag + "=") == 0)
      return a.substr(flag.size() + 1);
    if (a == flag && i + 1 < args.size())
      return args[++i];
    return std::nullopt;
  };
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string &a = args[i];
    if (a == "--help" || a == "-h") {
      llvm::outs() << usage;
      return 0;
    }
    if (a == "--version") {
      llvm::outs() << "mdlc (MDL) 0.1.0\n";
      return 0;
    }
    if (a.rfind("-emit=", 0) == 0 || a.rfind("--emit=", 0) == 0) {
      std::string what = a.substr(a.find('=') + 1);
      if (what != "ast" && what != "mlir")
        return usageError("-emit takes ast or mlir, not '" + what + "'");
      if (!options.command.empty())
        return usageError("-emit=" + what + " cannot follow a command");
      options.command = what;
      continue;
    }
    if (a == "--verify-diagnostics") {
      options.verifyDiagnostics = true;
      continue;
    }
    if (a == "-I" || a.rfind("-I", 0) == 0) {
      if (a == "-I") {
        if (i + 1 >= args.size())
          return usageError("-I needs a directory");
        options.includeDirs.push_back(args[++i]);
      } else {
        options.includeDirs.push_back(a.substr(2));
      }
      continue;
    }
    if (a.rfind("--hf-config", 0) == 0) {
      auto v = value(i, "--hf-config");
      if (!v)
        return usageError("--hf-config needs a file");
      options.hfConfig = *v;
      continue;
    }
    if (a.rfind("--set", 0) == 0) {
      auto v = value(i, "--set");
      size_t eq = v ? v->find('=') : std::string::npos;
      if (!v || eq == std::string::npos || eq == 0)
        return usageError("--set takes KEY=VALUE");
      options.sets.push_back({v->substr(0, eq), v->substr(eq + 1)});
      continue;
    }
    if (a.rfind("--format", 0) == 0) {
      auto v = value(i, "--format");
      if (!v || (*v != "text" && *v != "json"))
        return usageError("--format takes text or json");
      options.format = *v;
      continue;
    }
    if (!a.empty() && a[0] == '-' && a != "-")
      return usageError("unknown option '" + a + "'");
    if (options.command.empty()) {
      if (a != "check" && a != "params")
        return usageError("unknown command '" + a + "'");
      options.command = a;
      continue;
    }
    options.files.push_back(a);
  }
  if (options.command.empty())
    return usageError("no command given");
  if (options.files.empty())
    return usageError("no input file");
  if (options.command != "check" && options.files.size() != 1)
    return usageError(options.command + " takes one file");
  return std::nullopt;
}

int mdl::runCommand(const Options &options, llvm::SourceMgr &sourceMgr,
                    mlir::MLIRContext &context) {
  if (options.verifyDiagnostics)
    for (const std::string &f : options.files)
      if (auto buffer = llvm::MemoryBuffer::getFile(f, /*IsText=*/true))
        sourceMgr.AddNewSourceBuffer(std::move(*buffer), llvm::SMLoc());

  LoadOptions load;
  load.includeDirs = options.includeDirs;
  bool needIR = options.command != "ast";
  FrontendResult fe =
      runFrontend(options.files, load, sourceMgr, context, needIR);
  if (!fe.program)
    return 1;
  if (options.command == "ast") {
    for (const ast::File *f : fe.program->mainFiles)
      ast::dump(*f, sourceMgr, llvm::outs());
    return 0;
  }
  if (options.command == "mlir") {
    fe.module->print(llvm::outs());
    llvm::outs() << "\n";
    return 0;
  }
  return 0;
}
