//===- Commands.cpp - mdlc's command line and shared helpers --------------===//

#include "Commands.h"

#include "mdl/AST/ASTDumper.h"
#include "mdl/Driver/Frontend.h"
#include "mdl/Evaluate/Check.h"
#include "mdl/Runtime/Cli.h"
#include "mdl/Runtime/File.h"

#include "mlir/IR/MLIRContext.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/raw_ostream.h"

using namespace mdl;
using llvm::SmallVector;
using llvm::StringRef;

static int usageError(const std::string &message) {
  llvm::errs() << "mdlc: error: " << message
               << "\n(run 'mdlc --help' for usage)\n";
  return 2;
}

namespace {
/// Walks the arguments; `value` takes an option's value from `--opt=v` or
/// the next argument.
class ArgReader {
public:
  ArgReader(const std::vector<std::string> &args) : args(args) {}
  bool done() const { return i >= args.size(); }
  const std::string &peek() const { return args[i]; }
  std::string next() { return args[i++]; }
  /// If the current argument is `flag` or `flag=...`, consumes it and its
  /// value; `missing` is set when the value is absent.
  bool option(const std::string &flag, std::string &value, bool &missing) {
    if (done())
      return false;
    const std::string &a = args[i];
    if (a.compare(0, flag.size() + 1, flag + "=") == 0) {
      value = a.substr(flag.size() + 1);
      ++i;
      return true;
    }
    if (a != flag)
      return false;
    ++i;
    missing = i >= args.size();
    if (!missing)
      value = args[i++];
    return true;
  }

private:
  const std::vector<std::string> &args;
  size_t i = 0;
};

/// "; did you mean '--x'?" for an unknown option close to a known one.
std::string didYouMeanOption(const std::string &option) {
  static const std::vector<std::string> known = {
      "--hf-config", "--set", "--backend", "--grid", "--choice", "--tp",
      "--pp", "--ep", "--etp", "--cp", "--dp", "--vpp", "--sp",
      "--first-stage-layers", "--last-stage-layers", "--rank", "--hf-index",
      "--hf-dir", "--hf-inventory", "--format", "--lora-rank", "--depfile",
      "--diagnostics-format", "--diagnostics-file", "--tensor", "--verbose",
      "--verify-diagnostics", "--list-checks", "--version", "--help"};
  std::vector<std::string> close = cli::closestNames(option, known);
  return close.empty() ? "" : "; did you mean '" + close.front() + "'?";
}

bool parseKeyValue(const std::string &text, std::string &key,
                   std::string &value) {
  size_t eq = text.find('=');
  if (eq == std::string::npos || eq == 0)
    return false;
  key = text.substr(0, eq);
  value = text.substr(eq + 1);
  return true;
}
} // namespace

std::optional<int> mdl::parseOptions(const std::vector<std::string> &args,
                                     Options &options, const char *usage) {
  ArgReader r(args);
  static const char *kCommands[] = {"check", "params", "plan", "emit", "lora",
                                     "format"};
  static const char *kAxes[] = {"tp", "pp", "ep", "etp", "cp", "dp", "vpp"};
  while (!r.done()) {
    std::string value;
    bool missing = false;
    const std::string a = r.peek();
    if (a == "--help" || a == "-h") {
      llvm::outs() << usage;
      return 0;
    }
    if (a == "--version") {
      llvm::outs() << cli::versionLine("mdlc") << "\n";
      return 0;
    }
    if (a == "--list-checks") {
      for (const CheckInfo &c : allChecks())
        llvm::outs() << c.id << "\t" << (*c.pass ? c.pass : "-") << "\t"
                     << c.guards << "\n";
      return 0;
    }
    if (a.rfind("-emit=", 0) == 0 || a.rfind("--emit=", 0) == 0) {
      r.next();
      std::string what = a.substr(a.find('=') + 1);
      if (what != "ast" && what != "mlir")
        return usageError("-emit takes ast or mlir, not '" + what + "'");
      if (!options.command.empty())
        return usageError("-emit=" + what + " cannot follow a command");
      options.command = what;
      continue;
    }
    if (a == "-i") {
      r.next();
      options.inPlace = true;
      continue;
    }
    if (a == "--verbose" || a == "-v") {
      r.next();
      options.verbose = true;
      continue;
    }
    if (a == "--verify-diagnostics" || a == "--sp") {
      r.next();
      if (a == "--sp")
        options.parallel.sp = true;
      else
        options.verifyDiagnostics = true;
      continue;
    }
    if (a.rfind("-I", 0) == 0) {
      r.next();
      if (a != "-I") {
        options.includeDirs.push_back(a.substr(2));
        continue;
      }
      if (r.done())
        return usageError("-I needs a directory");
      options.includeDirs.push_back(r.next());
      continue;
    }
    auto optionWithValue = [&](const char *flag) {
      return r.option(flag, value, missing);
    };
    if (optionWithValue("--hf-config") || optionWithValue("--hf-index") ||
        optionWithValue("--hf-dir") || optionWithValue("--hf-inventory")) {
      if (missing || value.empty())
        return usageError(a.substr(0, a.find('=')) + " needs a path");
      std::string flag = a.substr(0, a.find('='));
      (flag == "--hf-config"  ? options.hfConfig
       : flag == "--hf-index" ? options.hfIndex
       : flag == "--hf-dir"   ? options.hfDir
                              : options.hfInventory) = value;
      continue;
    }
    if (optionWithValue("--set") || optionWithValue("--choice")) {
      std::string key, v;
      bool isSet = a.rfind("--set", 0) == 0;
      if (missing || !parseKeyValue(value, key, v))
        return usageError(std::string(isSet ? "--set" : "--choice") +
                          " takes KEY=VALUE");
      if (isSet)
        options.sets.push_back({key, v});
      else
        options.choices[key] = v;
      continue;
    }
    if (optionWithValue("--backend")) {
      if (missing || value.empty())
        return usageError("--backend needs a name");
      options.backends.push_back(value);
      continue;
    }
    if (optionWithValue("--depfile")) {
      if (missing || value.empty())
        return usageError("--depfile needs a path");
      options.depfile = value;
      continue;
    }
    if (a == "-o") {
      r.next();
      if (r.done())
        return usageError("-o needs a directory");
      options.outputDir = r.next();
      continue;
    }
    if (optionWithValue("--format")) {
      static const std::vector<std::string> formats = {"text", "json", "svg",
                                                       "diagram"};
      if (missing || !llvm::is_contained(formats, value))
        return usageError("--format takes text, json, svg or diagram");
      options.format = value;
      continue;
    }
    if (optionWithValue("--tensor")) {
      if (missing || value.empty())
        return usageError("--tensor needs a regular expression");
      options.tensorPattern = value;
      continue;
    }
    if (optionWithValue("--diagnostics-format")) {
      if (missing || (value != "text" && value != "json" && value != "sarif"))
        return usageError("--diagnostics-format takes text, json or sarif");
      options.diagnosticsFormat = value;
      continue;
    }
    if (optionWithValue("--diagnostics-file")) {
      if (missing || value.empty())
        return usageError("--diagnostics-file needs a path");
      options.diagnosticsFile = value;
      continue;
    }
    if (optionWithValue("--grid")) {
      if (missing)
        return usageError("--grid needs axis=values, e.g. tp=1,2 pp=1,2");
      // The grid's axes may follow as separate arguments.
      std::string text = value;
      while (!r.done() && r.peek().find('=') != std::string::npos &&
             r.peek()[0] != '-')
        text += " " + r.next();
      std::map<std::string, std::vector<int64_t>> grid;
      if (std::optional<std::string> err = parseGrid(text, grid))
        return usageError(*err);
      for (auto &[axis, values] : grid)
        options.grid[axis] = values;
      continue;
    }
    bool matched = false;
    for (const char *axis : kAxes) {
      if (!optionWithValue((std::string("--") + axis).c_str()))
        continue;
      matched = true;
      std::optional<int64_t> n =
          missing ? std::nullopt : parseBoundedInt(value, 1, kMaxAxisSize);
      if (!n)
        return usageError(std::string("--") + axis + " takes an integer from 1 to " +
                          std::to_string(kMaxAxisSize) + ", not '" + value + "'");
      options.axesGiven.insert(axis);
      ParallelConfig &p = options.parallel;
      StringRef name(axis);
      (name == "tp"    ? p.tp
       : name == "pp"  ? p.pp
       : name == "ep"  ? p.ep
       : name == "etp" ? p.etp
       : name == "cp"  ? p.cp
       : name == "dp"  ? p.dp
                       : p.vpp) = *n;
      break;
    }
    if (matched)
      continue;
    if (optionWithValue("--lora-rank")) {
      std::optional<int64_t> n =
          missing ? std::nullopt : parseBoundedInt(value, 1, 65536);
      if (!n)
        return usageError("--lora-rank takes an integer from 1 to 65536");
      options.loraRank = *n;
      continue;
    }
    if (optionWithValue("--first-stage-layers") ||
        optionWithValue("--last-stage-layers") || optionWithValue("--rank")) {
      std::string flag = a.substr(0, a.find('='));
      std::optional<int64_t> parsed =
          missing ? std::nullopt : parseBoundedInt(value, 0, kMaxCount);
      if (!parsed)
        return usageError(flag + " takes an integer from 0 to " +
                          std::to_string(kMaxCount) + ", not '" + value + "'");
      int64_t n = *parsed;
      if (flag == "--rank")
        options.rank = n;
      else if (flag == "--first-stage-layers")
        options.parallel.firstStageLayers = n;
      else
        options.parallel.lastStageLayers = n;
      continue;
    }
    r.next();
    if (!a.empty() && a[0] == '-' && a != "-")
      return usageError("unknown option '" + a + "'" +
                        didYouMeanOption(a.substr(0, a.find('='))));
    if (options.command.empty()) {
      if (!llvm::is_contained(kCommands, a))
        return usageError(
            "unknown command '" + a + "'" +
            cli::didYouMean(a, {std::begin(kCommands), std::end(kCommands)}));
      options.command = a;
      continue;
    }
    options.files.push_back(a);
  }
  if (options.command.empty())
    return usageError("no command given");
  if (options.files.empty())
    return usageError("no input file");
  if (options.command != "check" && options.command != "format" &&
      options.files.size() != 1)
    return usageError(options.command + " takes one file");
  int sources = !options.hfDir.empty() + !options.hfIndex.empty() +
                !options.hfInventory.empty();
  if (sources > 1)
    return usageError("give one of --hf-dir, --hf-index, --hf-inventory");
  if (sources && options.command != "check")
    return usageError("--hf-dir, --hf-index and --hf-inventory are for check");
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
    llvm::errs() << "mdlc: error: '" << file << "' declares "
                 << models.size() << " models; this command needs one\n";
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
