//===- mdl-convert.cpp - Convert checkpoints between layouts --------------===//
//
//   mdl-convert --model NAME --from hf --to B --tp N --pp N --ep N --etp N
//               IN_DIR OUT_DIR [--rank R]
//   mdl-convert --model NAME --from B --to hf IN_DIR OUT_DIR
//   mdl-convert --model NAME --from B --to B2 --tp N ... IN_DIR OUT_DIR
//   mdl-convert --model NAME --from A --to B ... --adapters IN_DIR OUT_DIR
//   mdl-convert --list
//
// Every spec of the model library is compiled in (mdl_generate()). Exit
// codes: 0 done, 1 bad input (nothing partial is left), 2 bad usage.
//
//===----------------------------------------------------------------------===//

#include "Options.h"
#include "Processes.h"

#include "mdl/Runtime/Convert/Adapter.h"
#include "mdl/Runtime/Checkpoint/Checkpoint.h"
#include "mdl/Runtime/Checkpoint/DistCheckpoint.h"
#include "mdl/Runtime/Base/Cli.h"
#include "mdl/Runtime/Convert/CheckpointFiles.h"
#include "mdl/Runtime/Convert/Convert.h"
#include "mdl/Runtime/Base/DType.h"
#include "mdl/Runtime/Model/Detect.h"
#include "mdl/Runtime/Base/File.h"
#include "mdl/Runtime/Base/Json.h"
#include "mdl/Runtime/Convert/Progress.h"
#include "mdl/Runtime/Model/Lora.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <dirent.h>
#include <set>
#include <sys/stat.h>
#include <unistd.h>

using namespace mdl;
using namespace mdl::rt;
using mdl::convert::Options;
using mdl::convert::Processes;

namespace {

/// The processes of this conversion. When they talk to each other, an
/// error is held until they agree, so that the first is printed once.
Processes *processes = nullptr;
std::string heldError;
/// The failure the processes agreed on at a meeting point.
std::optional<Processes::Outcome> agreedFailure;

void printError(int code, const std::string &message) {
  std::fputs(cli::errorText("mdl-convert", message, code == 2).c_str(), stderr);
}

int report(int code, const std::string &message) {
  if (processes && processes->communicate())
    heldError = message;
  else
    printError(code, message);
  return code;
}

int usage(const std::string &message) { return report(2, message); }

int fail(const std::string &message) { return report(1, message); }

/// Whether every process got here without failing (always, for processes
/// that do not talk to each other).
bool othersSucceeded() {
  if (!processes->communicate())
    return true;
  Processes::Outcome outcome = processes->agree(0, "");
  if (outcome.code == 0)
    return true;
  agreedFailure = outcome;
  return false;
}

/// The names in directory `dir` but . and .., sorted.
std::vector<std::string> entriesOf(const std::string &dir) {
  std::vector<std::string> out;
  if (DIR *d = opendir(dir.c_str())) {
    while (dirent *e = readdir(d))
      if (std::strcmp(e->d_name, ".") && std::strcmp(e->d_name, ".."))
        out.push_back(e->d_name);
    closedir(d);
  }
  std::sort(out.begin(), out.end());
  return out;
}

bool isDir(const std::string &p) {
  struct stat st;
  return stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

bool exists(const std::string &p) {
  struct stat st;
  return stat(p.c_str(), &st) == 0;
}

/// What Megatron-Core checks of a checkpoint's args when it loads one:
/// num_layers (the staged stack's), hidden_size and num_attention_heads
/// (the HF config's, nested under text_config or not), at tp = pp = 1.
std::vector<std::pair<std::string, int64_t>>
megatronArgs(const std::string &configPath, const ModelLayout &m) {
  std::vector<std::pair<std::string, int64_t>> out = {
      {"num_layers", m.stagedLayers}};
  std::string text, error;
  json::ParseError perr;
  std::optional<json::Value> config;
  if (rt::readFile(configPath, text, error))
    config = json::parse(text, perr);
  if (config && config->kind() == json::Value::Object) {
    const json::Value *nested = config->get("text_config");
    for (const char *key : {"hidden_size", "num_attention_heads"}) {
      const json::Value *v =
          nested && nested->kind() == json::Value::Object ? nested->get(key)
                                                          : nullptr;
      if (!v)
        v = config->get(key);
      if (v && v->kind() == json::Value::Int)
        out.push_back({key, v->asInt()});
    }
  }
  out.push_back({"tensor_model_parallel_size", 1});
  out.push_back({"pipeline_model_parallel_size", 1});
  return out;
}

bool readFile(const std::string &path, std::string &out) {
  std::string error;
  return rt::readFile(path, out, error);
}

json::Value configJson(const ParallelConfig &c) {
  json::Value j = json::Value::object();
  for (auto [name, size] : kParallelSizes)
    j.set(std::string(name), json::Value::integer(c.*size));
  j.set("sp", json::Value::boolean(c.sp));
  if (c.firstStageLayers)
    j.set("first_stage_layers", json::Value::integer(*c.firstStageLayers));
  if (c.lastStageLayers)
    j.set("last_stage_layers", json::Value::integer(*c.lastStageLayers));
  return j;
}

bool parseConfigJson(const json::Value &j, ParallelConfig &c) {
  for (auto [name, size] : kParallelSizes)
    if (const json::Value *x = j.get(name); x && x->kind() == json::Value::Int)
      c.*size = x->asInt();
  if (const json::Value *x = j.get("sp"); x && x->kind() == json::Value::Bool)
    c.sp = x->asBool();
  if (const json::Value *x = j.get("first_stage_layers"))
    c.firstStageLayers = x->asInt();
  if (const json::Value *x = j.get("last_stage_layers"))
    c.lastStageLayers = x->asInt();
  return !c.checkBounds();
}

/// What this process created, removed again unless the conversion
/// succeeded.
struct Cleanup {
  std::vector<std::string> files, dirs;
  bool armed = true;
  void removeFiles() {
    for (auto it = files.rbegin(); it != files.rend(); ++it)
      std::remove(it->c_str());
    files.clear();
  }
  /// Removes the directories, deepest first; those not empty yet (another
  /// process's files or directories in them) are kept for another try.
  void removeDirs() {
    std::vector<std::string> kept;
    for (auto it = dirs.rbegin(); it != dirs.rend(); ++it)
      if (rmdir(it->c_str()) != 0 && errno == ENOTEMPTY)
        kept.insert(kept.begin(), *it);
    dirs = std::move(kept);
  }
  ~Cleanup() {
    if (armed) {
      removeFiles();
      removeDirs();
    }
  }
};

bool makeDir(const std::string &path, Cleanup &cleanup, std::string &error) {
  bool created;
  if (!makeDirectory(path, created, error))
    return false;
  if (created)
    cleanup.dirs.push_back(path);
  return true;
}

/// The adapters of every target rank in `todo` (HF-PEFT's, for an hf
/// target), from those in `inDir`. A backend source is read whole, through
/// HF's modules.
std::optional<std::vector<Adapters>>
convertAdapters(const Binding &hf, const Binding &from,
                const ParallelConfig &source, bool fromHf,
                const FactorNames &fromNames, const Binding &to,
                const ParallelConfig &target, bool toHf,
                const std::string &inDir, const std::vector<int64_t> &todo,
                std::string &error) {
  auto read = [&](const std::string &path) -> std::optional<Adapters> {
    std::unique_ptr<SafetensorsFile> file = SafetensorsFile::open(path, error);
    if (!file)
      return std::nullopt;
    return readAdapters(*file, error, fromHf ? FactorNames() : fromNames);
  };
  std::optional<Adapters> peft;
  if (fromHf) {
    peft = read(inDir + "/adapter_model.safetensors");
  } else {
    std::vector<Adapters> ranks;
    for (int64_t r = 0; r < Binding::numRanks(source); ++r) {
      std::optional<Adapters> a = read(inDir + "/" + from.rankDir(source, r) +
                                       "/adapter_model.safetensors");
      if (!a)
        return std::nullopt;
      ranks.push_back(std::move(*a));
    }
    peft = adaptersToHf(hf, from, source, ranks, error);
  }
  if (!peft)
    return std::nullopt;
  if (toHf)
    return std::vector<Adapters>{std::move(*peft)};
  std::vector<Adapters> out;
  for (int64_t r : todo) {
    std::optional<Adapters> a =
        adaptersToBackend(hf, to, target, r, *peft, error);
    if (!a)
      return std::nullopt;
    out.push_back(std::move(*a));
  }
  return out;
}

std::vector<Converter::TargetFile>
shareOfFiles(const std::vector<Converter::TargetFile> &files);

/// --list: each model with the backends it converts between, what it serves
/// and the backend's mesh axes ("-" for none).
int listModels() {
  for (const Generated *g : registry()) {
    std::string serves, mesh;
    for (const auto *values : {&g->model.modelTypes, &g->model.architectures})
      for (const std::string &s : *values)
        serves += (serves.empty() ? "" : ",") + s;
    for (MeshAxis axis : g->backend.mesh)
      mesh += (mesh.empty() ? "" : ",") + std::string(meshAxisName(axis));
    std::printf("%s\t%s\t%s\t%s\t%s\n", g->model.name.c_str(),
                g->backend.name.c_str(), g->model.spec.c_str(), serves.c_str(),
                mesh.empty() ? "-" : mesh.c_str());
  }
  return 0;
}

/// One conversion, in the steps convertMain() runs in order. Each step
/// returns the exit code when the conversion ends there (having said why),
/// nullopt to go on; what it finds is kept for the steps after it.
class Conversion {
public:
  Conversion(Options &o, Cleanup &cleanup) : o(o), cleanup(cleanup) {}

  /// What the options alone get wrong; IN_DIR and OUT_DIR checked.
  std::optional<int> checkCommandLine();
  /// The model (named, or the one serving the config) and the source's and
  /// target's backends; the defaults that bite said.
  std::optional<int> findLayouts();
  /// What a backend source says of itself in its plan.json.
  std::optional<int> readSourcePlan();
  /// The model as the checkpoint holds it (an HF source's variants and
  /// open config entries detected) and as asked (overrides, --dtype), and
  /// both sides bound.
  std::optional<int> bind();
  /// The source's rank files and configuration and the target's
  /// configuration, both valid.
  std::optional<int> settleConfigurations();
  /// The target ranks written and, with --adapters, their adapters.
  std::optional<int> planRanks();
  /// The converter, the files this process writes and the source files
  /// they are read from.
  std::optional<int> openSources();
  /// Refuses an output that holds a conversion; --dry-run prints what each
  /// target rank would hold and ends here.
  std::optional<int> checkOutput();
  /// Once every process got this far: the output directories created and
  /// the ranks' files (or adapters) written.
  std::optional<int> writeRanks();
  /// Once every process wrote its files, the first writes the shared ones:
  /// the source's files that are not weights, config.json, plan.json, a
  /// tracker and an index.
  std::optional<int> commit();

private:
  /// A source rank's files, opened once.
  std::shared_ptr<Checkpoint> openRank(const std::string &path,
                                       std::string &error);
  /// What plan.json says of the conversion.
  json::Value planJson() const;

  Options &o;
  Cleanup &cleanup;
  std::string inDir, outDir, configPath;
  /// Whether the processes share the target's files out.
  bool shared = false;

  /// The generated units of the model: any of them knows the HF layout.
  const Generated *any = nullptr;
  const BackendDecl *fromDecl = nullptr, *toDecl = nullptr;

  /// The source: its configuration, storage variants and adapter names,
  /// and the config entries the config leaves open, as the checkpoint
  /// settles them. A backend checkpoint without plan.json (one a training
  /// run saved) is not `described`: its configuration is found from its
  /// rank files.
  ParallelConfig source;
  std::map<std::string, std::string> sourceChoices;
  FactorNames sourceNames;
  std::vector<std::pair<std::string, std::string>> settled;
  bool described = true;
  /// An HF source's files, and what was detected from them.
  std::shared_ptr<Checkpoint> hfInput;
  std::string detected;
  /// A backend source's rank files.
  std::optional<SourceFiles> sourceFiles;
  std::map<std::string, std::shared_ptr<Checkpoint>> opened;

  /// The model as asked, bound to both sides; `heldFrom` binds the model
  /// as the checkpoint holds it when overrides dropped some of it.
  std::shared_ptr<Model> instance;
  std::map<std::string, std::string> targetChoices;
  std::unique_ptr<Binding> from, to, heldFrom;

  /// The target ranks written, and the adapters of `adapterRanks`.
  std::vector<int64_t> todo, adapterRanks;
  std::vector<Adapters> adapterOutputs;
  /// Backends that load HF-PEFT adapters (vLLM) keep them as they are.
  bool adaptersToHf = false;

  std::unique_ptr<Converter> converter;
  OutputFormat format;
  OutputFiles output;
  std::unique_ptr<ProgressReporter> reporter;
  ConvertProgress last;
};

std::optional<int> Conversion::checkCommandLine() {
  if (std::optional<std::string> why = o.target.checkBounds())
    return usage(*why);
  shared = processes->count() > 1;
  if (shared && o.onlyRank >= 0)
    return usage("--rank converts one rank; a conversion spread over "
                 "processes shares out every rank");
  // One process speaks for all.
  if (processes->index() != 0)
    o.quiet = true;
  if (o.fromName.empty() || o.toName.empty())
    return usage("--from and --to are required");
  if (o.positional.size() != 2)
    return usage("give IN_DIR and OUT_DIR");
  inDir = o.positional[0];
  outDir = o.positional[1];
  if (!isDir(inDir))
    return fail("'" + inDir + "' is not a directory");
  // The input is never written: OUT_DIR may not be, hold or lie in it.
  std::vector<std::string> inputs = {inDir};
  if (!o.configGiven.empty())
    inputs.push_back(o.configGiven);
  if (std::optional<std::string> why = outputOverlapsInput(outDir, inputs))
    return fail(*why);
  configPath = o.configGiven.empty() ? inDir + "/config.json" : o.configGiven;
  return std::nullopt;
}

std::optional<int> Conversion::findLayouts() {
  if (o.model.empty()) {
    // The spec that serves the checkpoint's config.
    std::string error;
    std::optional<HFConfig> config = HFConfig::load(configPath, error);
    const ModelDecl *serving = config ? servingModel(*config, error) : nullptr;
    if (!serving)
      return fail(error);
    o.model = serving->name;
    if (!o.quiet)
      std::fprintf(stderr, "mdl-convert: %s is served by %s\n",
                   configPath.c_str(), o.model.c_str());
  }
  std::vector<std::string> knownModels, knownBackends = {"hf"};
  for (const Generated *g : registry()) {
    if (g->model.name == o.model) {
      any = g;
      knownBackends.push_back(g->backend.name);
    }
    if (std::find(knownModels.begin(), knownModels.end(), g->model.name) ==
        knownModels.end())
      knownModels.push_back(g->model.name);
  }
  if (!any)
    return fail("no model named '" + o.model + "' is compiled in" +
                cli::didYouMean(o.model, knownModels));
  auto backendDecl = [&](const std::string &name) -> const BackendDecl * {
    if (name == "hf")
      return &any->hf;
    const Generated *g = findGenerated(o.model, name);
    return g ? &g->backend : nullptr;
  };
  // A distributed checkpoint (Megatron's torch_dist) of backend B has the
  // layout of backend B_dist: read so when the input is one.
  if (o.fromName != "hf" && backendDecl(o.fromName + "_dist") &&
      !findDistCheckpoint(inDir).empty()) {
    o.fromName += "_dist";
    if (!o.quiet)
      std::fprintf(stderr, "mdl-convert: %s is a distributed checkpoint: "
                            "reading it as %s\n",
                   inDir.c_str(), o.fromName.c_str());
  }
  if (o.distOut) {
    if (o.toName == "hf" || !backendDecl(o.toName + "_dist"))
      return fail("--format torch_dist: backend " + o.toName +
                  " has no distributed checkpoint layout (no backend " +
                  o.toName + "_dist)");
    o.toName += "_dist";
  }
  fromDecl = backendDecl(o.fromName);
  toDecl = backendDecl(o.toName);
  if (!fromDecl || !toDecl) {
    const std::string &unknown = fromDecl ? o.toName : o.fromName;
    return fail("model '" + o.model + "' has no backend '" + unknown + "'" +
                cli::didYouMean(unknown, knownBackends));
  }
  // Defaults that bite are said: an HF target is never sharded, and a
  // backend target without a parallel configuration gets tp=1.
  bool parallelGiven = !o.parallelGiven.empty();
  if (!o.quiet && o.toName == "hf" && parallelGiven)
    std::fprintf(stderr,
                 "mdl-convert: warning: an HF checkpoint is not sharded: "
                 "--tp, --pp, --ep, --etp and --vpp are ignored with --to hf\n");
  else if (!o.quiet && o.fromName == "hf" && !parallelGiven && o.onlyRank < 0 &&
           !o.adapters &&
           std::find(toDecl->mesh.begin(), toDecl->mesh.end(), MeshAxis::TP) !=
               toDecl->mesh.end())
    std::fprintf(stderr,
                 "mdl-convert: warning: no --tp given: %s splits tensors over "
                 "tp; converting to tp=1\n",
                 o.toName.c_str());
  return std::nullopt;
}

std::optional<int> Conversion::readSourcePlan() {
  sourceChoices = o.choicesGiven;
  std::string planText, planError;
  described = o.fromName == "hf" ||
              rt::readFile(inDir + "/plan.json", planText, planError);
  if (!described && exists(inDir + "/plan.json"))
    return fail(planError);
  if (!described && o.configGiven.empty())
    return fail("'" + inDir + "' has no plan.json: to read a " + o.fromName +
                " checkpoint a training run saved, give the model's HF "
                "config.json with --config");
  if (!described && o.adapters)
    return fail("'" + inDir + "' has no plan.json: adapters are read from "
                "what mdl-convert --adapters wrote");
  if (o.fromName == "hf" || !described)
    return std::nullopt;
  json::ParseError perr;
  std::optional<json::Value> plan = json::parse(planText, perr);
  if (!plan || plan->kind() != json::Value::Object)
    return fail(inDir + "/plan.json: invalid JSON");
  const json::Value *m = plan->get("model"), *b = plan->get("backend"),
                    *c = plan->get("configuration");
  if (!m || !b || !c || m->kind() != json::Value::String ||
      b->kind() != json::Value::String || !parseConfigJson(*c, source))
    return fail(inDir + "/plan.json lacks model, backend or configuration");
  if (m->asString() != o.model || b->asString() != o.fromName)
    return fail(inDir + " holds " + m->asString() + " on " + b->asString() +
                ", not " + o.model + " on " + o.fromName);
  const json::Value *holdsAdapters = plan->get("adapters");
  if (o.adapters !=
      (holdsAdapters && holdsAdapters->kind() == json::Value::Bool &&
       holdsAdapters->asBool()))
    return fail(inDir + " holds " +
                (o.adapters ? "weights, not LoRA adapters"
                            : "LoRA adapters (convert them with --adapters)"));
  if (const json::Value *ch = plan->get("choices"))
    for (const auto &[k, v] : ch->members())
      if (!sourceChoices.count(k) && v.kind() == json::Value::String)
        sourceChoices[k] = v.asString();
  // What the HF checkpoint it came from settled is part of its config.
  if (const json::Value *d = plan->get("detected"))
    for (const auto &[k, v] : d->members())
      settled.push_back({k, json::write(v)});
  // The overrides the source was written with stay in force.
  std::vector<std::pair<std::string, std::string>> &overrides =
      o.load.overrides;
  if (const json::Value *ov = plan->get("overrides"))
    for (const auto &[k, v] : ov->members())
      if (v.kind() == json::Value::String &&
          std::none_of(overrides.begin(), overrides.end(),
                       [&](const auto &given) { return given.first == k; }))
        overrides.insert(overrides.begin(), {k, v.asString()});
  if (const json::Value *n = plan->get("adapter_names");
      n && n->kind() == json::Value::Array && n->elements().size() == 2 &&
      n->elements()[0].kind() == json::Value::String &&
      n->elements()[1].kind() == json::Value::String)
    sourceNames = {n->elements()[0].asString(), n->elements()[1].asString()};
  return std::nullopt;
}

std::optional<int> Conversion::bind() {
  // Instantiate once; both sides bind the same instance, but for a cast
  // target.
  std::string error;
  std::optional<HFConfig> plain = HFConfig::load(configPath, error);
  if (!plain)
    return fail(error);
  // An HF source's storage variants and open config entries are read from
  // its files, once the config alone is known to be sound.
  const std::vector<std::pair<std::string, std::string>> &overrides =
      o.load.overrides;
  bool detect = o.fromName == "hf" && !o.adapters;
  std::optional<OpenedModel> opened = openModel(
      any->model, *fromDecl, *plain, settled, overrides, sourceChoices,
      nullptr, configPath, error);
  if (opened && detect) {
    hfInput = Checkpoint::open(inDir, error);
    if (!hfInput)
      return fail(error);
    opened = openModel(
        any->model, *fromDecl, *plain, settled, overrides, sourceChoices,
        [&](const std::string &name) { return hfInput->find(name) != nullptr; },
        configPath, error);
  }
  if (!opened)
    return fail(error);
  std::shared_ptr<Model> held = opened->held.model;
  sourceChoices = opened->held.choices;
  settled = opened->held.values;
  detected = opened->held.note;
  instance = opened->instance;
  const HFConfig &config = opened->config;
  // The target's weights in another dtype: an instance whose config says
  // it (the output's config.json says it too).
  std::shared_ptr<Model> targetInstance = instance;
  if (o.castTo) {
    std::string name(torchName(*o.castTo));
    HFConfig cast = config;
    for (const char *key : {"torch_dtype", "dtype"})
      cast.addOverride(key, name);
    if (!(targetInstance = Model::create(any->model, cast, error)))
      return fail(error);
  }
  // Adapters are for the modules a backend builds with LoRA enabled.
  if (o.adapters)
    selectLoraModules(fromDecl->choices, sourceChoices);
  from = Binding::bind(instance, *fromDecl, sourceChoices, error);
  // The storage variants travel with the checkpoint: a backend written
  // from packed HF experts converts back to packed ones.
  targetChoices = sourceChoices;
  for (const auto &[k, v] : o.choicesGiven)
    targetChoices[k] = v;
  if (o.adapters)
    selectLoraModules(toDecl->choices, targetChoices);
  to = from ? Binding::bind(targetInstance, *toDecl, targetChoices, error)
            : nullptr;
  heldFrom = to && held != instance
                 ? Binding::bind(held, *fromDecl, sourceChoices, error)
                 : nullptr;
  if (!from || !to || (held != instance && !heldFrom))
    return fail(error);
  return std::nullopt;
}

std::shared_ptr<Checkpoint> Conversion::openRank(const std::string &path,
                                                 std::string &error) {
  std::shared_ptr<Checkpoint> &c = opened[path];
  if (!c)
    c = Checkpoint::open(path, error);
  return c;
}

std::optional<int> Conversion::settleConfigurations() {
  // Rank directories (Megatron's, maybe under a tracker); a backend whose
  // ranks are files at the top (vLLM's sharded_state) is read by rank.
  std::string error;
  if (o.fromName != "hf" && !o.adapters) {
    sourceFiles = findRankFiles(*from, inDir, error);
    if (!sourceFiles)
      return fail(error);
    if (!described && !sourceFiles->rankFiles.empty()) {
      std::optional<ParallelConfig> found = inferConfig(
          *from, *sourceFiles,
          [&](const std::string &path, std::string &err) {
            return openRank(path, err);
          },
          error);
      if (!found)
        return fail(error);
      source = *found;
    }
  }
  ParallelConfig &target = o.target;
  if (o.toName == "hf")
    target = ParallelConfig();
  else if (o.parallelGiven.empty() && o.fromName != "hf")
    target = source;
  for (auto [b, c, name] : {std::tuple{from.get(), source, o.fromName},
                            std::tuple{to.get(), target, o.toName}}) {
    std::vector<std::string> why = b->validate(c);
    if (!why.empty()) {
      std::string all;
      for (const std::string &w : why)
        all += "\n  " + w;
      return fail(c.str() + " is not a valid configuration of " + o.model +
                  " on " + name + ":" + all);
    }
  }
  int64_t ranks = Binding::numRanks(target);
  if (o.onlyRank >= ranks)
    return fail("rank " + std::to_string(o.onlyRank) + " does not exist: " +
                target.str() + " has " + std::to_string(ranks) + " ranks");
  return std::nullopt;
}

std::optional<int> Conversion::planRanks() {
  // A backend's own format holds the files of the ranks that save; so does
  // --format safetensors for a backend whose own files are safetensors at
  // the top (vLLM: its (tp, ep) pairs that are no process have no file).
  bool everyRank = o.adapters || o.toName == "hf" ||
                   (o.safetensorsOut && !to->rankDir(o.target, 0).empty());
  for (int64_t r = 0; r < Binding::numRanks(o.target); ++r)
    if (o.onlyRank >= 0 ? r == o.onlyRank
                        : everyRank || to->rankSaved(o.target, r))
      todo.push_back(r);
  adaptersToHf = to->adapterBackend() == "hf";
  if (!o.adapters)
    return std::nullopt;
  // Adapters are small: all of them are converted before anything is
  // written, by the first process when there are several.
  if (processes->index() == 0)
    adapterRanks = adaptersToHf ? std::vector<int64_t>{0} : todo;
  std::string error;
  std::unique_ptr<Binding> hfBinding;
  const Binding *hf = o.fromName == "hf" ? from.get()
                      : o.toName == "hf" ? to.get()
                                         : nullptr;
  if (!hf) {
    hfBinding = Binding::bind(instance, any->hf, sourceChoices, error);
    if (!hfBinding)
      return fail(error);
    hf = hfBinding.get();
  }
  std::optional<std::vector<Adapters>> converted = convertAdapters(
      *hf, *from, source, from->adapterBackend() == "hf", sourceNames, *to,
      o.target, adaptersToHf, inDir, adapterRanks, error);
  if (!converted)
    return fail(error);
  adapterOutputs = std::move(*converted);
  return std::nullopt;
}

std::optional<int> Conversion::openSources() {
  converter = std::make_unique<Converter>(*from, source, *to, o.target);
  if (o.threads)
    converter->setThreads(unsigned(o.threads));
  converter->setDirectIO(o.directIO);
  std::string error;
  // Every rank that saves must be there; others may be (safetensors).
  if (sourceFiles && !sourceFiles->rankFiles.empty()) {
    std::set<int64_t> present;
    for (int64_t r = 0; r < Binding::numRanks(source); ++r) {
      std::string dir = from->rankDir(source, r);
      if (sourceFiles->rankFiles.count(dir))
        present.insert(r);
      else if (from->rankSaved(source, r))
        return fail("'" + sourceFiles->rankRoot + "' has no rank directory " +
                    dir + " (rank " + std::to_string(r) + " of " +
                    source.str() + ")");
    }
    converter->restrictSources(present);
  } else if (sourceFiles) {
    // Files at the top, one set per rank that saves (vLLM's processes):
    // the other (tp, ep) pairs have none.
    std::set<int64_t> saved;
    for (int64_t r = 0; r < Binding::numRanks(source); ++r)
      if (from->rankSaved(source, r))
        saved.insert(r);
    if (int64_t(saved.size()) < Binding::numRanks(source))
      converter->restrictSources(saved);
  }
  bool toHf = o.toName == "hf";
  // A backend that keeps its ranks' files at the top of the checkpoint has
  // no directory per rank to put a model.safetensors in: its own files,
  // safetensors already, are the rank's files (each rank writing a
  // model.safetensors at the top would overwrite the others').
  bool rankDirs = !to->rankDir(o.target, 0).empty();
  format.kind = toHf ? OutputFormat::HF
                : (o.safetensorsOut && rankDirs) || o.adapters
                    ? OutputFormat::RankSafetensors
                    : OutputFormat::Backend;
  format.maxBytes = o.maxShard;
  format.iteration = o.iteration;
  output = planOutputFiles(*to, o.target, todo, outDir, format);
  if (o.distOut)
    output.commonArgs = megatronArgs(configPath, to->layout());
  if (shared && !o.adapters)
    output.files = shareOfFiles(output.files);
  std::set<int64_t> needed;
  if (!o.adapters)
    for (const Converter::TargetFile &f : output.files)
      for (int64_t s : converter->sourcesOf(f.rank))
        needed.insert(s);
  for (int64_t s : needed) {
    std::shared_ptr<Checkpoint> ckpt = hfInput;
    if (!ckpt) {
      // A rank directory's file, or the parts of a rank at the top of the
      // checkpoint (vLLM's sharded_state).
      std::optional<std::vector<std::string>> paths =
          sourceFiles->filesOf(*from, source, s, error);
      if (paths)
        ckpt = sourceFiles->rankFiles.empty()
                   ? Checkpoint::openFiles(*paths, error)
                   : openRank(paths->front(), error);
      if (!ckpt)
        return fail(error);
    }
    if (!converter->addSource(s, ckpt, error,
                              heldFrom
                                  ? droppedTensors(*heldFrom, *from, source, s)
                                  : std::set<std::string>()))
      return fail(error);
  }
  // A copy that differs from what it copies would be lost without a word.
  if (!o.replaceCopies)
    if (std::optional<std::string> differs = converter->differingCopy())
      return fail(*differs);
  return std::nullopt;
}

std::optional<int> Conversion::checkOutput() {
  // Outputs: new files only, removed again on any failure.
  // Processes that each write their share into one directory cannot tell
  // another's files from what was there before.
  bool likeRank = o.onlyRank >= 0 || (shared && !processes->communicate());
  // Such a process refuses only to write over a file of its own share.
  if (likeRank && !o.overwrite)
    for (const Converter::TargetFile &f : output.files)
      if (exists(f.path))
        return fail("'" + f.path +
                    "' exists (an earlier conversion's or another "
                    "checkpoint's file): --overwrite writes over it");
  if (!likeRank && !o.overwrite && isDir(outDir)) {
    if (exists(outDir + "/plan.json"))
      return fail("'" + outDir +
                  "' already holds a conversion (--overwrite writes over it)");
    std::vector<std::string> held = entriesOf(outDir);
    if (!held.empty()) {
      std::string names;
      for (size_t i = 0; i < held.size() && i < 3; ++i)
        names += (i ? ", '" : "'") + held[i] + "'";
      if (held.size() > 3)
        names += " and " + std::to_string(held.size() - 3) + " more";
      return fail("'" + outDir + "' is not empty (it holds " + names +
                  ") and is no output of mdl-convert: give --overwrite to "
                  "write into it");
    }
  }
  if (!o.quiet && isatty(2) && !detected.empty())
    std::fprintf(stderr, "detected from the checkpoint: %s\n",
                 detected.c_str());
  if (!o.dryRun)
    return std::nullopt;
  // A dry run checks what the run does, then prints instead of writing.
  std::vector<int64_t> printed =
      processes->index() == 0 ? todo : std::vector<int64_t>();
  // A rank at the top of the checkpoint is named by the file that holds
  // each tensor, as the run would name it.
  std::map<std::pair<int64_t, std::string>, std::string> fileOf;
  for (const Converter::TargetFile &f :
       planOutputFiles(*to, o.target, printed, outDir, format).files) {
    std::string name = f.path.substr(f.path.rfind('/') + 1);
    if (f.tensors.empty())
      fileOf[{f.rank, ""}] = name;
    for (const std::string &t : f.tensors)
      fileOf[{f.rank, t}] = name;
  }
  for (int64_t r : printed) {
    std::string dir = o.toName == "hf" ? "." : to->rankDir(o.target, r);
    for (const RankTensor &t : to->rankTensors(o.target, r)) {
      std::string where = dir;
      if (where.empty()) {
        auto it = fileOf.find({r, t.name});
        if (it == fileOf.end())
          it = fileOf.find({r, ""});
        where = it == fileOf.end() ? "." : it->second;
      }
      std::printf("%s\t%s\t%s\t%s\n", where.c_str(), t.name.c_str(),
                  shapeText(t.shape).c_str(),
                  std::string(safetensorsName(t.dtype)).c_str());
    }
  }
  return 0;
}

std::optional<int> Conversion::writeRanks() {
  // Nothing is created unless every process got this far.
  if (!othersSucceeded())
    return 1;
  std::string error;
  if (!makeDir(outDir, cleanup, error) ||
      !makeDir(output.rankRoot, cleanup, error))
    return fail(error);
  reporter = std::make_unique<ProgressReporter>(
      o.quiet ? ProgressMode::None
              : *parseProgressMode(o.progressName, isatty(2)),
      stderr, o.progressInterval);
  std::vector<std::string> files;
  if (o.adapters) {
    output.dirs = {outDir};
    for (int64_t r : adapterRanks) {
      std::string dir =
          adaptersToHf ? outDir : outDir + "/" + to->rankDir(o.target, r);
      output.dirs.push_back(dir);
      files.push_back(dir + "/adapter_model.safetensors");
    }
  }
  // The directories of the files this process writes.
  auto holdsOwnFile = [&](const std::string &dir) {
    return !shared || o.adapters ||
           std::any_of(output.files.begin(), output.files.end(),
                       [&](const Converter::TargetFile &f) {
                         return f.path.compare(0, dir.size() + 1, dir + "/") ==
                                0;
                       });
  };
  for (const std::string &dir : output.dirs)
    if (holdsOwnFile(dir) && !makeDir(dir, cleanup, error))
      return fail(error);
  // The ranks are written in parallel; a file is removed again on failure
  // once it is complete (the converter removes incomplete ones).
  if (!o.adapters) {
    bool done = converter->writeFiles(
        output.files, error,
        [&](const ConvertProgress &p) {
          last = p;
          reporter->update(p);
        },
        [&](size_t i) { cleanup.files.push_back(output.files[i].path); },
        [&](size_t i) {
          return makeRankWriter(output.files[i].path, output, o.target,
                                to.get(), output.files[i].rank);
        });
    if (!done) {
      reporter->finish(last, error);
      return fail(error);
    }
    return std::nullopt;
  }
  // HF-PEFT names its adapters after the wrapped model.
  for (size_t i = 0; i < files.size(); ++i) {
    if (!writeAdapters(adapterOutputs[i],
                       adaptersToHf ? "base_model.model." : "", files[i], error,
                       adaptersToHf || !o.namesGiven ? FactorNames()
                                                     : *o.namesGiven))
      return fail(error);
    cleanup.files.push_back(files[i]);
  }
  // The PEFT configuration, with every module's scale alpha / r kept.
  std::string peft;
  if (processes->index() != 0 ||
      !readFile(inDir + "/adapter_config.json", peft))
    return std::nullopt;
  json::ParseError perr;
  std::optional<json::Value> sourceConfig = json::parse(peft, perr);
  if (!sourceConfig)
    return fail(inDir + "/adapter_config.json: invalid JSON");
  // The modules of every rank written (pipeline stages differ).
  Adapters modules;
  for (const Adapters &rank : adapterOutputs)
    modules.insert(rank.begin(), rank.end());
  std::optional<json::Value> config =
      adapterConfig(*sourceConfig, modules, error);
  if (!config)
    return fail(error);
  bool existed = exists(outDir + "/adapter_config.json");
  if (!writeFileAtomically(outDir + "/adapter_config.json",
                           json::write(*config, 2) + "\n", error))
    return fail(error);
  if (!existed)
    cleanup.files.push_back(outDir + "/adapter_config.json");
  return std::nullopt;
}

json::Value Conversion::planJson() const {
  json::Value plan = json::Value::object();
  plan.set("model", json::Value::string(o.model));
  plan.set("backend", json::Value::string(o.toName));
  plan.set("configuration", configJson(o.target));
  plan.set("source", json::Value::string(inDir));
  plan.set("from", json::Value::string(o.fromName));
  if (o.adapters)
    plan.set("adapters", json::Value::boolean(true));
  if (o.adapters && !adaptersToHf && o.namesGiven)
    plan.set("adapter_names",
             json::Value::strings({o.namesGiven->a, o.namesGiven->b}));
  json::Value choices = json::Value::object();
  for (const auto &[k, v] : targetChoices)
    choices.set(k, json::Value::string(v));
  plan.set("choices", std::move(choices));
  json::Value overrides = json::Value::object();
  for (const auto &[k, v] : o.load.overrides)
    overrides.set(k, json::Value::string(v));
  plan.set("overrides", std::move(overrides));
  json::Value detectedValues = json::Value::object();
  for (const auto &[k, v] : settled) {
    json::ParseError perr;
    std::optional<json::Value> j = json::parse(v, perr);
    detectedValues.set(k, j ? std::move(*j) : json::Value::string(v));
  }
  plan.set("detected", std::move(detectedValues));
  json::Value derived = json::Value::array();
  for (const ModelLayout::DerivedTensor &d : to->derived()) {
    json::Value j = json::Value::object();
    j.set("name", json::Value::string(d.name));
    j.set("recompute", json::Value::strings(d.recompute));
    derived.push(std::move(j));
  }
  plan.set("derived", std::move(derived));
  return plan;
}

std::optional<int> Conversion::commit() {
  if (!othersSucceeded())
    return 1;
  if (processes->communicate() && processes->index() != 0)
    return std::nullopt;
  // What is not a weight travels with the weights.
  std::string error;
  if (!carryFiles(inDir, outDir,
                  {"config.json", "plan.json", "adapter_config.json"},
                  cleanup.files, error))
    return fail(error);
  // config.json and plan.json describe what was written.
  std::string configText;
  readFile(configPath, configText);
  configText =
      outputConfigText(configText, o.load.overrides, o.castTo, to->layout());
  std::vector<std::pair<std::string, std::string>> tops = {
      {outDir + "/config.json", configText},
      {outDir + "/plan.json", json::write(planJson(), 2) + "\n"}};
  if (!output.tracker.empty())
    tops.emplace_back(output.tracker, output.trackerText);
  if (!output.indexPath.empty() && !o.adapters)
    tops.emplace_back(output.indexPath, output.indexText);
  for (const auto &[path, text] : tops) {
    bool existed = exists(path);
    if (!writeFileAtomically(path, text, error))
      return fail(error);
    if (!existed)
      cleanup.files.push_back(path);
  }
  if (!o.adapters)
    reporter->finish(last);
  return std::nullopt;
}

int convertMain(int argc, char **argv, Cleanup &cleanup) {
  Options options;
  cli::Parsed parsed = convert::parseCommandLine(argc, argv, options);
  if (parsed.error)
    return usage(*parsed.error);
  if (parsed.exit)
    return 0;
  if (options.list)
    return listModels();
  Conversion conversion(options, cleanup);
  using Step = std::optional<int> (Conversion::*)();
  for (Step step : {&Conversion::checkCommandLine, &Conversion::findLayouts,
                    &Conversion::readSourcePlan, &Conversion::bind,
                    &Conversion::settleConfigurations, &Conversion::planRanks,
                    &Conversion::openSources, &Conversion::checkOutput,
                    &Conversion::writeRanks, &Conversion::commit})
    if (std::optional<int> code = (conversion.*step)())
      return *code;
  return 0;
}

/// Which of `files` this process writes: its share of them, balanced by
/// bytes over the processes.
std::vector<Converter::TargetFile>
shareOfFiles(const std::vector<Converter::TargetFile> &files) {
  std::vector<uint64_t> sizes;
  for (const Converter::TargetFile &f : files)
    sizes.push_back(f.bytes);
  std::vector<int64_t> owner =
      convert::balanceByBytes(sizes, processes->count());
  std::vector<Converter::TargetFile> mine;
  for (size_t i = 0; i < files.size(); ++i)
    if (owner[i] == processes->index())
      mine.push_back(files[i]);
  return mine;
}

/// The exit code every process agrees on; on failure, each removes what it
/// created and the first process prints the first failure.
int finish(int code, Cleanup &cleanup) {
  if (processes->communicate()) {
    Processes::Outcome outcome =
        agreedFailure ? *agreedFailure : processes->agree(code, heldError);
    code = outcome.code;
    if (code) {
      cleanup.removeFiles();
      // Every file is gone before any directory; a directory one process
      // made may hold another's, so each level waits for the one below
      // (the output, the rank root, a rank's directory).
      for (int level = 0; level < 3; ++level) {
        processes->barrier();
        cleanup.removeDirs();
      }
      if (processes->index() == 0)
        printError(code,
                   (outcome.process
                        ? "process " + std::to_string(outcome.process) + ": "
                        : "") +
                       outcome.message);
    }
  }
  cleanup.armed = code != 0;
  return code;
}

} // namespace

int main(int argc, char **argv) {
  std::string error;
  bool fromEnv = std::any_of(argv + 1, argv + argc, [](const char *a) {
    return std::strcmp(a, "--ranks-from-env") == 0;
  });
  std::unique_ptr<Processes> started = Processes::start(fromEnv, error);
  if (!started)
    return usage(error);
  processes = started.get();
  Cleanup cleanup;
  return finish(convertMain(argc, argv, cleanup), cleanup);
}
