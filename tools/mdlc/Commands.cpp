//===- Commands.cpp - mdlc's command line and shared helpers --------------===//

#include "Commands.h"

#include "mdl/AST/ASTDumper.h"
#include "mdl/Driver/Frontend.h"
#include "mdl/Evaluate/Check.h"
#include "mdl/Runtime/Base/Cli.h"
#include "mdl/Runtime/Base/File.h"

#include "mlir/IR/MLIRContext.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/raw_ostream.h"

using namespace mdl;
using llvm::SmallVector;
using llvm::StringRef;

static int usageError(const std::string &message) {
  llvm::errs() << cli::errorText("mdlc", message, /*usage=*/true);
  return 2;
}

std::optional<int> mdl::parseOptions(const std::vector<std::string> &args,
                                     Options &options, const char *usage) {
  static const char *kCommands[] = {"check", "params", "plan", "emit", "lora",
                                     "format"};
  using Result = std::optional<std::string>;
  auto path = [&](std::string name, std::string &out) {
    return cli::nonEmptyOption(name, "a path",
                               [&out](const std::string &v) { out = v; });
  };
  // An option whose value is one of `valid`.
  auto oneOf = [](std::string name, std::vector<std::string> valid,
                  std::string &out) {
    std::string message = name + " takes ";
    for (size_t i = 0; i < valid.size(); ++i)
      message += (i == 0                  ? ""
                  : i + 1 == valid.size() ? " or "
                                          : ", ") +
                 valid[i];
    return cli::valueOption({name}, [=, &out](const std::string &v) -> Result {
      if (!llvm::is_contained(valid, v))
        return message;
      out = v;
      return std::nullopt;
    });
  };

  cli::Args r(args);
  std::vector<cli::Option> table = {
      path("--hf-config", options.hfConfig),
      cli::keyValueOption("--set",
                          [&](std::string k, std::string v) {
                            options.sets.push_back({k, v});
                          }),
      cli::nonEmptyOption(
          "--backend", "a name",
          [&](const std::string &v) { options.backends.push_back(v); }),
      cli::valueOption(
          {"--grid"},
          [&](const std::string &v) -> Result {
            // The grid's axes may follow as separate arguments.
            std::string text = v;
            while (!r.done() && r.peek().find('=') != std::string::npos &&
                   r.peek()[0] != '-')
              text += " " + r.take();
            std::map<std::string, std::vector<int64_t>> grid;
            if (Result err = parseGrid(text, grid))
              return err;
            for (auto &[axis, values] : grid)
              options.grid[axis] = values;
            return std::nullopt;
          },
          "--grid needs axis=values, e.g. tp=1,2 pp=1,2"),
      cli::keyValueOption(
          "--choice",
          [&](std::string k, std::string v) { options.choices[k] = v; }),
      path("--hf-index", options.hfIndex),
      path("--hf-dir", options.hfDir),
      path("--hf-inventory", options.hfInventory),
      path("--mcore-dir", options.mcoreDir),
      oneOf("--format", {"text", "json", "svg", "diagram"}, options.format),
      cli::integerOption("--lora-rank", 1, 65536,
                         [&](int64_t n) { options.loraRank = n; }),
      path("--depfile", options.depfile),
      oneOf("--diagnostics-format", {"text", "json", "sarif"},
            options.diagnosticsFormat),
      path("--diagnostics-file", options.diagnosticsFile),
      cli::nonEmptyOption(
          "--tensor", "a regular expression",
          [&](const std::string &v) { options.tensorPattern = v; }),
      cli::flag({"--verbose", "-v"}, options.verbose),
      cli::flag({"--verify-diagnostics"}, options.verifyDiagnostics),
      cli::exitOption({"--list-checks"},
                      [] {
                        for (const CheckInfo &c : allChecks())
                          llvm::outs()
                              << c.id << "\t" << (*c.pass ? c.pass : "-")
                              << "\t" << c.guards << "\n";
                      }),
      cli::exitOption({"--version"},
                      [] { llvm::outs() << cli::versionLine("mdlc") << "\n"; }),
      cli::exitOption({"--help", "-h"}, [usage] { llvm::outs() << usage; }),
      cli::valueOption({"-emit", "--emit"},
                       [&](const std::string &what) -> Result {
                         if (what != "ast" && what != "mlir")
                           return "-emit takes ast or mlir, not '" + what + "'";
                         if (!options.command.empty())
                           return "-emit=" + what + " cannot follow a command";
                         options.command = what;
                         return std::nullopt;
                       }),
      cli::flag({"-i"}, options.inPlace),
      cli::valueOption(
          {"-I"},
          [&](const std::string &dir) -> Result {
            options.includeDirs.push_back(dir);
            return std::nullopt;
          },
          "-I needs a directory"),
      cli::valueOption(
          {"-o"},
          [&](const std::string &dir) -> Result {
            options.outputDir = dir;
            return std::nullopt;
          },
          "-o needs a directory"),
  };
  for (cli::Option &o :
       cli::parallelOptions(options.parallel, options.axesGiven, options.rank))
    table.push_back(std::move(o));

  cli::Parsed parsed =
      cli::parseArgs(r, table, [&](const std::string &a) -> Result {
        if (!options.command.empty()) {
          options.files.push_back(a);
          return std::nullopt;
        }
        if (!llvm::is_contained(kCommands, a))
          return "unknown command '" + a + "'" +
                 cli::didYouMean(a,
                                 {std::begin(kCommands), std::end(kCommands)});
        options.command = a;
        return std::nullopt;
      });
  if (parsed.error)
    return usageError(*parsed.error);
  if (parsed.exit)
    return 0;
  if (options.command.empty())
    return usageError("no command given");
  if (options.files.empty())
    return usageError("no input file");
  if (options.command != "check" && options.command != "format" &&
      options.files.size() != 1)
    return usageError(options.command + " takes one file");
  int sources = !options.hfDir.empty() + !options.hfIndex.empty() +
                !options.hfInventory.empty() + !options.mcoreDir.empty();
  if (sources > 1)
    return usageError(
        "give one of --hf-dir, --hf-index, --hf-inventory, --mcore-dir");
  if (sources && options.command != "check")
    return usageError("--hf-dir, --hf-index, --hf-inventory and --mcore-dir "
                      "are for check");
  if (options.verifyDiagnostics && options.diagnosticsFormat != "text")
    return usageError("--verify-diagnostics needs --diagnostics-format=text");
  if (options.inPlace && options.command != "format")
    return usageError("-i is for format");
  // A directory given as the config stands for its config.json; a
  // checkpoint directory gives its config unless one is named.
  if (!options.hfConfig.empty())
    options.hfConfig = cli::configPathOf(options.hfConfig);
  else if (!options.hfDir.empty() &&
           cli::isFile(cli::configPathOf(options.hfDir)))
    options.hfConfig = cli::configPathOf(options.hfDir);
  if (std::optional<std::string> why = options.parallel.checkBounds())
    return usageError(*why);
  if (options.command == "emit" && options.outputDir.empty())
    return usageError("emit needs -o DIR");
  if (options.command == "plan" && options.backends.size() != 1)
    return usageError("plan needs one --backend");
  bool picture = options.format == "svg" || options.format == "diagram";
  if (picture && options.command != "plan")
    return usageError("--format=" + options.format + " is for plan");
  if (picture && options.tensorPattern.empty())
    return usageError("--format=" + options.format +
                      " needs --tensor REGEX, e.g. --tensor 'layers\\.0\\.'");
  if (!options.tensorPattern.empty() && !picture)
    return usageError("--tensor is for plan --format=svg or diagram");
  if (options.command == "lora" && options.backends.size() != 1)
    return usageError("lora needs one --backend");
  return std::nullopt;
}

ModuleDeclOp mdl::theModel(mlir::ModuleOp top, const std::string &file) {
  SmallVector<ModuleDeclOp> models, imported;
  for (auto m : top.getOps<ModuleDeclOp>()) {
    if (!m.getModel())
      continue;
    auto loc = llvm::dyn_cast<mlir::FileLineColLoc>(m.getLoc());
    (loc && loc.getFilename() == file ? models : imported).push_back(m);
  }
  // A file that declares no model (a backend added to a library) stands for
  // the model it imports.
  if (models.empty())
    models = imported;
  if (models.size() != 1) {
    // At the top of the file, or at the second model, with the others.
    mlir::Location loc = models.empty()
                             ? mlir::Location(mlir::FileLineColLoc::get(
                                   top.getContext(), file, 1, 1))
                             : models[1].getLoc();
    mlir::InFlightDiagnostic diag = mlir::emitError(loc);
    if (models.empty())
      diag << "'" << file << "' declares no model, nor imports one; this "
           << "command needs one";
    else
      diag << "'" << file << "' declares " << models.size()
           << " models; this command needs one";
    for (size_t i = 0; i < models.size(); ++i)
      if (i != 1)
        diag.attachNote(models[i].getLoc())
            << "model '" << models[i].getSymName() << "'";
    return {};
  }
  return models.front();
}

std::string mdl::configPath(const Options &options, ModuleDeclOp model) {
  if (!options.hfConfig.empty())
    return options.hfConfig;
  std::vector<std::string> examples = exampleConfigPaths(model);
  if (examples.empty()) {
    model.emitError() << "model '" << model.getSymName()
                      << "' has no example config; pass --hf-config";
    return "";
  }
  return examples.front();
}

int mdl::runCommand(const Options &options, llvm::SourceMgr &sourceMgr,
                    mlir::MLIRContext &context) {
  if (options.command == "format")
    return runFormat(options, sourceMgr, context);
  for (const std::string &f : options.files) {
    std::string text, error;
    if (!rt::readFile(f, text, error)) {
      llvm::errs() << "mdlc: error: " << error << "\n";
      return 1;
    }
    // Diagnostics are verified against comments of the files given.
    if (options.verifyDiagnostics)
      sourceMgr.AddNewSourceBuffer(
          llvm::MemoryBuffer::getMemBufferCopy(text, f), llvm::SMLoc());
  }

  LoadOptions load;
  load.includeDirs = options.includeDirs;
  FrontendResult fe = runFrontend(options.files, load, sourceMgr, context,
                                  options.command == "ast"
                                      ? FrontendStage::Parse
                                      : FrontendStage::GenerateIR);
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
  if (options.command == "params")
    return runParams(options, *fe.module, context);
  if (options.command == "plan")
    return runPlan(options, *fe.module, context);
  if (options.command == "emit")
    return runEmit(options, *fe.module, context);
  if (options.command == "lora")
    return runLora(options, *fe.module, context);
  return runCheck(options, *fe.module, context);
}

BoundSpec mdl::bindSpec(const Options &options, mlir::ModuleOp top,
                        mlir::MLIRContext &context,
                        const std::string &backendName) {
  BoundSpec out;
  ModuleDeclOp model = theModel(top, options.files.front());
  if (!model)
    return out;
  std::string path = configPath(options, model);
  if (path.empty())
    return out;
  std::unique_ptr<SpecDecls> decls = SpecDecls::build(model);
  if (!decls)
    return out;
  std::optional<rt::HFConfig> config =
      loadEngineConfig(path, options.sets, context);
  if (!config)
    return out;
  std::shared_ptr<rt::Model> instance = instantiate(*decls, std::move(*config));
  if (!instance)
    return out;
  const rt::BackendDecl *backend = decls->backend(backendName);
  if (!backend)
    return out;
  std::string error;
  out.binding =
      rt::Binding::bind(std::move(instance), *backend, options.choices, error);
  if (!out.binding) {
    emitEngineError(error, model.getLoc());
    return out;
  }
  out.decls = std::move(decls);
  out.configPath = path;
  return out;
}

void mdl::warnDefaultAxes(const Options &options, const rt::ModelLayout &m) {
  if (llvm::is_contained(m.mesh, MeshAxis::TP) && !options.axesGiven.count("tp"))
    llvm::errs() << "mdlc: warning: no --tp given: " << m.backend
                 << " splits tensors over tp; showing tp=1\n";
}

bool mdl::reportInvalid(const rt::Planner &planner, const Options &options) {
  if (planner.valid())
    return false;
  const rt::ModelLayout &m = planner.model();
  llvm::errs() << "mdlc: error: " << options.parallel.str()
               << " is not a valid configuration of " << m.model << " on "
               << m.backend << ":\n";
  for (const std::string &why : planner.invalidReasons())
    llvm::errs() << "  " << why << "\n";
  return true;
}
