//===- Commands.cpp - mdlc's commands -------------------------------------===//

#include "Commands.h"

#include "mdl/AST/ASTDumper.h"
#include "mdl/Dialect/MDL/MDLOps.h"
#include "mdl/Driver/Frontend.h"
#include "mdl/Evaluate/Bind.h"
#include "mdl/Runtime/Json.h"
#include "mdl/Transforms/Passes.h"

#include "mlir/IR/MLIRContext.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/raw_ostream.h"

using namespace mdl;
using llvm::SmallVector;
using llvm::dyn_cast;

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
    if (a.rfind("--backend", 0) == 0) {
      auto v = value(i, "--backend");
      if (!v || v->empty())
        return usageError("--backend needs a name");
      options.backends.push_back(*v);
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

/// The one model of the file given on the command line.
static ModuleDeclOp theModel(mlir::ModuleOp top, const std::string &file) {
  SmallVector<ModuleDeclOp> models;
  for (auto m : top.getOps<ModuleDeclOp>())
    if (m.getModel())
      if (auto loc = dyn_cast<mlir::FileLineColLoc>(m.getLoc()))
        if (loc.getFilename() == file)
          models.push_back(m);
  if (models.size() != 1) {
    llvm::errs() << "mdlc: error: '" << file << "' declares "
                 << models.size() << " models; this command needs one\n";
    return {};
  }
  return models.front();
}

/// Loads the HF config for `model`: --hf-config, or its first example.
static std::unique_ptr<HFConfig> loadConfig(const Options &options,
                                            ModuleDeclOp model,
                                            mlir::MLIRContext &context) {
  std::string path = options.hfConfig;
  if (path.empty()) {
    std::vector<std::string> examples = exampleConfigPaths(model);
    if (examples.empty()) {
      model.emitError() << "model '" << model.getSymName()
                        << "' has no example config; pass --hf-config";
      return nullptr;
    }
    path = examples.front();
  }
  std::unique_ptr<HFConfig> config = HFConfig::load(path, context);
  if (config)
    for (const auto &[key, value] : options.sets)
      config->addOverride(key, value);
  return config;
}

static int runParams(const Options &options, mlir::ModuleOp top,
                     mlir::MLIRContext &context) {
  ModuleDeclOp model = theModel(top, options.files.front());
  if (!model)
    return 1;
  std::unique_ptr<HFConfig> config = loadConfig(options, model, context);
  if (!config)
    return 1;
  std::unique_ptr<Instantiation> inst = Instantiation::create(model, *config);
  if (!inst)
    return 1;
  std::string backendName =
      options.backends.empty() ? "hf" : options.backends.front();
  std::unique_ptr<Backend> backend = Backend::lookup(model, backendName);
  if (!backend)
    return 1;
  std::unique_ptr<BoundModel> bound = bindModel(*inst, *backend);
  if (!bound)
    return 1;
  RankContext ctx;
  std::vector<rt::TensorListing> tensors = rt::listTensors(bound->layout, ctx);
  std::sort(tensors.begin(), tensors.end(),
            [](const auto &a, const auto &b) { return a.name < b.name; });
  // Two entries naming one tensor is a bug in the spec.
  bool dup = false;
  for (size_t i = 1; i < tensors.size(); ++i)
    if (tensors[i].name == tensors[i - 1].name) {
      auto diag = bound->sources[tensors[i].spec->source]->emitError()
                  << "two layout entries name tensor '" << tensors[i].name
                  << "'";
      diag.attachNote(bound->sources[tensors[i - 1].spec->source]->getLoc())
          << "the other entry";
      dup = true;
    }
  if (dup)
    return 1;
  if (options.format == "json") {
    json::Value arr = json::Value::array();
    for (const rt::TensorListing &t : tensors) {
      json::Value o = json::Value::object();
      o.set("name", json::Value::string(t.name));
      json::Value shape = json::Value::array();
      for (int64_t d : t.shape)
        shape.push(json::Value::integer(d));
      o.set("shape", std::move(shape));
      o.set("dtype", json::Value::string(std::string(safetensorsName(t.dtype))));
      arr.push(std::move(o));
    }
    llvm::outs() << json::write(arr, 2) << "\n";
    return 0;
  }
  for (const rt::TensorListing &t : tensors) {
    llvm::outs() << t.name << "\t[";
    for (size_t i = 0; i < t.shape.size(); ++i)
      llvm::outs() << (i ? "," : "") << t.shape[i];
    llvm::outs() << "]\t" << safetensorsName(t.dtype) << "\n";
  }
  return 0;
}

/// Backends that lay out at least one module of `model`'s file set, in
/// declaration order.
static std::vector<std::string> backendsInUse(mlir::ModuleOp top) {
  std::vector<std::string> names;
  for (auto b : top.getOps<BackendOp>()) {
    bool used = llvm::any_of(top.getOps<LayoutOp>(), [&](LayoutOp l) {
      return l.getBackend() == b.getSymName();
    });
    if (used)
      names.push_back(b.getSymName().str());
  }
  return names;
}

static std::string humanCount(int64_t n) {
  char buf[32];
  if (n >= 1000000000)
    std::snprintf(buf, sizeof buf, "%.2fB", n / 1e9);
  else if (n >= 1000000)
    std::snprintf(buf, sizeof buf, "%.2fM", n / 1e6);
  else
    std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(n));
  return buf;
}

/// `mdlc check`: every model of the files, with each example config (or
/// --hf-config), bound to each backend; one summary line per model and
/// config.
static int runCheck(const Options &options, mlir::ModuleOp top,
                    mlir::MLIRContext &context) {
  std::vector<std::string> backends =
      options.backends.empty() ? backendsInUse(top) : options.backends;
  bool ok = true;
  for (auto model : top.getOps<ModuleDeclOp>()) {
    if (!model.getModel())
      continue;
    auto loc = dyn_cast<mlir::FileLineColLoc>(model.getLoc());
    if (!loc || !llvm::is_contained(options.files, loc.getFilename().str()))
      continue;
    std::vector<std::string> configs;
    if (!options.hfConfig.empty())
      configs.push_back(options.hfConfig);
    else
      configs = exampleConfigPaths(model);
    if (configs.empty())
      llvm::outs() << model.getSymName()
                   << ": checked; no example config to instantiate\n";
    for (const std::string &path : configs) {
      std::unique_ptr<HFConfig> config = HFConfig::load(path, context);
      if (!config) {
        ok = false;
        continue;
      }
      for (const auto &[key, value] : options.sets)
        config->addOverride(key, value);
      std::unique_ptr<Instantiation> inst =
          Instantiation::create(model, *config);
      if (!inst) {
        ok = false;
        continue;
      }
      std::vector<const ConcreteParam *> params = inst->allParams();
      int64_t elements = 0;
      for (const ConcreteParam *p : params)
        elements += p->numElements();
      std::string line = model.getSymName().str() + " (" + path +
                         "): " + std::to_string(params.size()) +
                         " parameters, " + humanCount(elements) + " elements";
      for (const std::string &b : backends) {
        std::unique_ptr<Backend> backend = Backend::lookup(model, b);
        std::unique_ptr<BoundModel> bound =
            backend ? bindModel(*inst, *backend) : nullptr;
        if (!bound) {
          ok = false;
          continue;
        }
        size_t count = rt::listTensors(bound->layout, RankContext()).size();
        line += "; " + b + ": " + std::to_string(count) + " tensors";
      }
      llvm::outs() << line << "\n";
    }
  }
  return ok ? 0 : 1;
}

int mdl::runCommand(const Options &options, llvm::SourceMgr &sourceMgr,
                    mlir::MLIRContext &context) {
  for (const std::string &f : options.files) {
    auto buffer = llvm::MemoryBuffer::getFile(f, /*IsText=*/true);
    if (!buffer) {
      llvm::errs() << "mdlc: error: cannot open '" << f
                   << "': " << buffer.getError().message() << "\n";
      return 1;
    }
  }
  if (options.verifyDiagnostics)
    for (const std::string &f : options.files)
      if (auto buffer = llvm::MemoryBuffer::getFile(f, /*IsText=*/true))
        sourceMgr.AddNewSourceBuffer(std::move(*buffer), llvm::SMLoc());

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
  return runCheck(options, *fe.module, context);
}
