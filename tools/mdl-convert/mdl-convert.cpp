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

#include "Processes.h"

#include "mdl/Runtime/Adapter.h"
#include "mdl/Runtime/Checkpoint.h"
#include "mdl/Runtime/CheckpointLayout.h"
#include "mdl/Runtime/Cli.h"
#include "mdl/Runtime/CheckpointDir.h"
#include "mdl/Runtime/Convert.h"
#include "mdl/Runtime/DType.h"
#include "mdl/Runtime/Detect.h"
#include "mdl/Runtime/File.h"
#include "mdl/Runtime/Json.h"
#include "mdl/Runtime/Progress.h"
#include "mdl/Runtime/Lora.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <set>
#include <sstream>
#include <sys/stat.h>
#include <unistd.h>

using namespace mdl;
using namespace mdl::rt;
using mdl::convert::Processes;

namespace {

const char *kUsage =
    R"(usage: mdl-convert [--model NAME] --from A --to B [options] IN_DIR OUT_DIR
       mdl-convert --list

Converts a checkpoint from layout A to layout B (hf, mcore-te, mcore-local,
vllm, ...). The model is the one whose spec serves config.json's
architectures and model_type, or NAME. IN_DIR holds config.json and, for
hf, the safetensors files (with model.safetensors.index.json when
sharded); for a backend, what mdl-convert wrote (plan.json, config.json,
the ranks' files), or a checkpoint a training run saved (mcore: the
directory with latest_checkpointed_iteration.txt, a release/ or iter_*
directory, or one rank's directory; its configuration is found from its
rank directories, the model's config comes from --config). OUT_DIR gets
config.json, plan.json, the source's other files that are not weights
(tokenizer, generation config, ...) and the target's files: for hf
model.safetensors, or shards with model.safetensors.index.json above
--max-shard-size; for mcore Megatron's torch checkpoint
(latest_checkpointed_iteration.txt, and in release/ one
mp_rank_TT[_PPP][_EEE] directory per saved rank with a model_optim_rng.pt);
for vllm its sharded_state files, model-rank-R-part-P.safetensors.

Options:
  --tp N --pp N --ep N --etp N --vpp N --sp
                      the target's parallel configuration (a backend
                      source's comes from its plan.json)
  --first-stage-layers N, --last-stage-layers N
                      uneven first and last pipeline stages
  --rank R            convert only rank R of the target, reading only the
                      source files it needs (ranks convert in parallel)
  --set KEY=VALUE     override a key of config.json (e.g.
                      --set mtp_num_hidden_layers=0: the tensors of the
                      dropped MTP layers are skipped); never more stack
                      elements than the checkpoint holds
  --choice NAME=VALUE a storage variant (e.g. expert_storage=packed); by
                      default detected from an HF source, as are config
                      values its config leaves open (an MTP depth); or a
                      serving option (vLLM's lora=off|on, the modules it
                      builds with LoRA enabled; --adapters selects lora=on)
  --adapters          convert LoRA adapters instead of weights: IN_DIR
                      holds HF-PEFT's adapter_model.safetensors (for hf)
                      or what mdl-convert --adapters wrote; OUT_DIR gets
                      the same, one adapter_model.safetensors per rank for
                      a backend. Fused modules (linear_qkv, linear_fc1) get
                      their sources' adapters stacked along the rank, and
                      the HF modules of a fused adapter share its lora_A,
                      so every merged delta W is kept exactly
  --adapter-names A,B the adapters' factor names in a backend's files
                      (default lora_A,lora_B; Megatron-Bridge's:
                      adapter.linear_in,adapter.linear_out)
  --config FILE       the model's config.json (default:
                      IN_DIR/config.json; required for a checkpoint
                      without plan.json)
  --format safetensors
                      write a backend's ranks as model.safetensors in one
                      directory per rank at the top of OUT_DIR, rather
                      than in the backend's own format (--format native)
  --iteration N       save as iteration N (iter_000000N) rather than as a
                      release
  --max-shard-size S  the largest file of an hf target or a split rank
                      (vllm), as save_pretrained reads it: 5GB (the
                      default, 10^9 bytes a GB), 500MB, 20KB, 2GiB, bytes
  --dtype T           bf16, fp16 or fp32: floating weights are converted
                      to T (rounded once, to nearest even), parameters the
                      spec gives a dtype of their own keep it; the output
                      config.json's torch_dtype says T
  --dry-run           check the source as the conversion does, then print
                      what each target rank would hold (directory, name,
                      shape, dtype) and write nothing
  --ranks-from-env    convert this process's share of the target's files,
                      from torchrun's RANK and WORLD_SIZE or SLURM's
                      SLURM_PROCID and SLURM_NTASKS (as --rank does, each
                      process on its own). Under mpirun or srun, with MDL
                      built with MPI, the files are shared out without it
                      and the processes agree: any failure fails all, and
                      the output is committed once all succeeded
  --threads N         worker threads (default: the CPUs this process may
                      use, after its affinity mask and cgroup CPU quota)
  --progress=MODE     tty: one line redrawn with the rate and the time
                      left; log: a line every few seconds; json: one JSON
                      object per line (events progress, done, failed);
                      none; auto (the default): tty on a terminal, log
                      elsewhere. tty and log end with a summary (bytes,
                      tensors, ranks, time, throughput, threads)
  --progress-interval S
                      seconds between log and json lines (default 5)
  --quiet             no progress (--progress=none) and no warnings
  --list              the compiled-in models and backends
  --version           the version of MDL (", with MPI" when built with it)
)";

/// The processes of this conversion. When they talk to each other, an
/// error is held until they agree, so that the first is printed once.
Processes *processes = nullptr;
std::string heldError;
/// The failure the processes agreed on at a meeting point.
std::optional<Processes::Outcome> agreedFailure;

void printError(int code, const std::string &message) {
  std::fprintf(stderr, "mdl-convert: error: %s\n%s", message.c_str(),
               code == 2 ? "(run 'mdl-convert --help' for usage)\n" : "");
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

bool isDir(const std::string &p) {
  struct stat st;
  return stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

bool exists(const std::string &p) {
  struct stat st;
  return stat(p.c_str(), &st) == 0;
}

bool readFile(const std::string &path, std::string &out) {
  std::string error;
  return rt::readFile(path, out, error);
}

json::Value configJson(const ParallelConfig &c) {
  json::Value j = json::Value::object();
  j.set("tp", json::Value::integer(c.tp));
  j.set("pp", json::Value::integer(c.pp));
  j.set("ep", json::Value::integer(c.ep));
  j.set("etp", json::Value::integer(c.etp));
  j.set("cp", json::Value::integer(c.cp));
  j.set("dp", json::Value::integer(c.dp));
  j.set("vpp", json::Value::integer(c.vpp));
  j.set("sp", json::Value::boolean(c.sp));
  if (c.firstStageLayers)
    j.set("first_stage_layers", json::Value::integer(*c.firstStageLayers));
  if (c.lastStageLayers)
    j.set("last_stage_layers", json::Value::integer(*c.lastStageLayers));
  return j;
}

bool parseConfigJson(const json::Value &j, ParallelConfig &c) {
  auto get = [&](const char *k, int64_t &v) {
    if (const json::Value *x = j.get(k); x && x->kind() == json::Value::Int)
      v = x->asInt();
  };
  get("tp", c.tp);
  get("pp", c.pp);
  get("ep", c.ep);
  get("etp", c.etp);
  get("cp", c.cp);
  get("dp", c.dp);
  get("vpp", c.vpp);
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

int convertMain(int argc, char **argv, Cleanup &cleanup) {
  std::string model, fromName, toName;
  std::vector<std::string> positional;
  ParallelConfig target;
  int64_t onlyRank = -1, threads = 0;
  std::string progressName = "auto";
  double progressInterval = 5;
  bool quiet = false, list = false, parallelGiven = false, dryRun = false;
  bool adapters = false, safetensorsOut = false;
  int64_t iteration = -1;
  std::string configGiven;
  uint64_t maxShard = 5'000'000'000;
  std::optional<DType> castTo;
  std::optional<FactorNames> namesGiven;
  LoadOptions load;
  std::map<std::string, std::string> choicesGiven;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&](std::string &out) {
      size_t eq = a.find('=');
      if (eq != std::string::npos) {
        out = a.substr(eq + 1);
        return true;
      }
      if (i + 1 >= argc)
        return false;
      out = argv[++i];
      return true;
    };
    auto flag = a.substr(0, a.find('='));
    std::string v;
    if (a == "--help" || a == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    }
    if (a == "--version") {
      // Whether it can spread a conversion over an MPI job.
      std::printf("%s%s\n", cli::versionLine("mdl-convert").c_str(),
                  Processes::haveMPI() ? ", with MPI" : "");
      return 0;
    }
    if (a == "--list") {
      list = true;
    } else if (a == "--quiet") {
      quiet = true;
    } else if (a == "--ranks-from-env") {
      // Read by main(), which starts the processes.
    } else if (flag == "--progress") {
      if (!value(v) || !parseProgressMode(v, false))
        return usage("--progress takes tty, log, json, none or auto");
      progressName = v;
    } else if (flag == "--progress-interval") {
      char *end = nullptr;
      if (!value(v) || v.empty() ||
          !((progressInterval = std::strtod(v.c_str(), &end)) >= 0) || *end)
        return usage("--progress-interval takes a number of seconds");
    } else if (a == "--dry-run") {
      dryRun = true;
    } else if (a == "--adapters") {
      adapters = true;
    } else if (flag == "--max-shard-size") {
      std::optional<uint64_t> n;
      if (!value(v) || !(n = parseByteSize(v)) || *n == 0)
        return usage("--max-shard-size takes a size such as 5GB, 500MB, "
                     "20KB or a number of bytes");
      maxShard = *n;
    } else if (flag == "--dtype") {
      if (!value(v) || (v != "bf16" && v != "fp16" && v != "fp32"))
        return usage("--dtype takes bf16, fp16 or fp32");
      castTo = v == "bf16" ? DType::BF16 : v == "fp16" ? DType::F16 : DType::F32;
    } else if (flag == "--adapter-names") {
      size_t comma = value(v) ? v.find(',') : std::string::npos;
      if (comma == std::string::npos || comma == 0 || comma + 1 == v.size() ||
          v.substr(0, comma) == v.substr(comma + 1))
        return usage("--adapter-names takes two names, A,B");
      namesGiven = FactorNames{v.substr(0, comma), v.substr(comma + 1)};
    } else if (flag == "--config") {
      if (!value(v) || v.empty())
        return usage("--config needs a file");
      configGiven = v;
    } else if (flag == "--format") {
      if (!value(v) || (v != "safetensors" && v != "native"))
        return usage("--format takes safetensors or native");
      safetensorsOut = v == "safetensors";
    } else if (flag == "--iteration") {
      char *end = nullptr;
      if (!value(v) || v.empty())
        return usage("--iteration needs a number");
      long long n = std::strtoll(v.c_str(), &end, 10);
      if (n < 0 || *end || n > 9999999)
        return usage("--iteration takes an iteration number (0 to 9999999)");
      iteration = n;
    } else if (a == "--sp") {
      target.sp = true;
      parallelGiven = true;
    } else if (flag == "--model" || flag == "--from" || flag == "--to") {
      if (!value(v) || v.empty())
        return usage(flag + " needs a name");
      // Model and backend names in either spelling and any case.
      (flag == "--model" ? model : flag == "--from" ? fromName : toName) =
          cli::normalizeBackendName(v);
    } else if (flag == "--set" || flag == "--choice") {
      if (!value(v) || v.find('=') == std::string::npos || v[0] == '=')
        return usage(flag + " takes KEY=VALUE");
      std::string key = v.substr(0, v.find('=')), val = v.substr(v.find('=') + 1);
      if (flag == "--set")
        load.overrides.push_back({key, val});
      else
        choicesGiven[key] = val;
    } else if (flag == "--tp" || flag == "--pp" || flag == "--ep" ||
               flag == "--etp" || flag == "--vpp" || flag == "--rank" ||
               flag == "--threads" || flag == "--first-stage-layers" ||
               flag == "--last-stage-layers") {
      if (!value(v) || v.empty())
        return usage(flag + " needs a number");
      bool count = flag == "--rank" || flag.find("stage") != std::string::npos;
      std::optional<int64_t> parsed = parseBoundedInt(
          v, count ? 0 : 1, count ? kMaxCount : kMaxAxisSize);
      if (!parsed)
        return usage(flag + " takes an integer from " + (count ? "0" : "1") +
                     " to " + std::to_string(count ? kMaxCount : kMaxAxisSize) +
                     ", not '" + v + "'");
      int64_t n = *parsed;
      if (flag == "--rank")
        onlyRank = n;
      else if (flag == "--threads")
        threads = n;
      else {
        parallelGiven = true;
        (flag == "--tp"    ? target.tp
         : flag == "--pp"  ? target.pp
         : flag == "--ep"  ? target.ep
         : flag == "--etp" ? target.etp
                           : target.vpp) = n;
        if (flag == "--first-stage-layers")
          target.firstStageLayers = n;
        if (flag == "--last-stage-layers")
          target.lastStageLayers = n;
      }
    } else if (!a.empty() && a[0] == '-') {
      return usage("unknown option '" + a + "'");
    } else {
      positional.push_back(a);
    }
  }
  if (list) {
    // Each model with the backends it converts between, what it serves and
    // the backend's mesh axes ("-" for none).
    for (const Generated *g : registry()) {
      std::string serves, mesh;
      for (const auto *values : {&g->model.modelTypes, &g->model.architectures})
        for (const std::string &s : *values)
          serves += (serves.empty() ? "" : ",") + s;
      for (MeshAxis axis : g->backend.mesh)
        mesh += (mesh.empty() ? "" : ",") + std::string(meshAxisName(axis));
      std::printf("%s\t%s\t%s\t%s\t%s\n", g->model.name.c_str(),
                  g->backend.name.c_str(), g->model.spec.c_str(),
                  serves.c_str(), mesh.empty() ? "-" : mesh.c_str());
    }
    return 0;
  }
  if (std::optional<std::string> why = target.checkBounds())
    return usage(*why);
  bool shared = processes->count() > 1;
  if (shared && onlyRank >= 0)
    return usage("--rank converts one rank; a conversion spread over "
                 "processes shares out every rank");
  // One process speaks for all.
  if (processes->index() != 0)
    quiet = true;
  if (fromName.empty() || toName.empty())
    return usage("--from and --to are required");
  if (positional.size() != 2)
    return usage("give IN_DIR and OUT_DIR");
  if (fromName == toName)
    return usage("--from and --to name the same layout");
  const std::string &inDir = positional[0], &outDir = positional[1];
  if (!isDir(inDir))
    return fail("'" + inDir + "' is not a directory");
  // The input is never written: OUT_DIR may not be, hold or lie in it.
  std::vector<std::string> inputs = {inDir};
  if (!configGiven.empty())
    inputs.push_back(configGiven);
  if (std::optional<std::string> why = outputOverlapsInput(outDir, inputs))
    return fail(*why);
  std::string configPath =
      configGiven.empty() ? inDir + "/config.json" : configGiven;
  if (model.empty()) {
    // The spec that serves the checkpoint's config.
    std::string error;
    std::optional<HFConfig> config = HFConfig::load(configPath, error);
    const ModelDecl *serving = config ? servingModel(*config, error) : nullptr;
    if (!serving)
      return fail(error);
    model = serving->name;
    if (!quiet)
      std::fprintf(stderr, "mdl-convert: %s is served by %s\n",
                   configPath.c_str(), model.c_str());
  }

  // The generated units of the model: any of them knows the HF layout.
  const Generated *any = nullptr;
  std::vector<std::string> knownModels, knownBackends = {"hf"};
  for (const Generated *g : registry()) {
    if (g->model.name == model) {
      any = g;
      knownBackends.push_back(g->backend.name);
    }
    if (std::find(knownModels.begin(), knownModels.end(), g->model.name) ==
        knownModels.end())
      knownModels.push_back(g->model.name);
  }
  if (!any)
    return fail("no model named '" + model + "' is compiled in" +
                cli::didYouMean(model, knownModels));
  auto backendDecl = [&](const std::string &name) -> const BackendDecl * {
    if (name == "hf")
      return &any->hf;
    const Generated *g = findGenerated(model, name);
    return g ? &g->backend : nullptr;
  };
  const BackendDecl *fromDecl = backendDecl(fromName),
                    *toDecl = backendDecl(toName);
  if (!fromDecl || !toDecl) {
    const std::string &unknown = fromDecl ? toName : fromName;
    return fail("model '" + model + "' has no backend '" + unknown + "'" +
                cli::didYouMean(unknown, knownBackends));
  }
  // Defaults that bite are said: an HF target is never sharded, and a
  // backend target without a parallel configuration gets tp=1.
  if (!quiet && toName == "hf" && parallelGiven)
    std::fprintf(stderr,
                 "mdl-convert: warning: an HF checkpoint is not sharded: "
                 "--tp, --pp, --ep, --etp and --vpp are ignored with --to hf\n");
  else if (!quiet && fromName == "hf" && !parallelGiven && onlyRank < 0 &&
           !adapters &&
           std::find(toDecl->mesh.begin(), toDecl->mesh.end(), MeshAxis::TP) !=
               toDecl->mesh.end())
    std::fprintf(stderr,
                 "mdl-convert: warning: no --tp given: %s splits tensors over "
                 "tp; converting to tp=1\n",
                 toName.c_str());

  // The source: an HF checkpoint, or what mdl-convert wrote.
  ParallelConfig source;
  std::map<std::string, std::string> sourceChoices = choicesGiven;
  FactorNames sourceNames;
  // Config entries the config leaves open, as the checkpoint settles them.
  std::vector<std::pair<std::string, std::string>> settled;
  std::string planText, planError;
  // A backend checkpoint without plan.json (one a training run saved) has
  // its configuration found from its rank files.
  bool described = fromName == "hf" ||
                   rt::readFile(inDir + "/plan.json", planText, planError);
  if (!described && exists(inDir + "/plan.json"))
    return fail(planError);
  if (!described && configGiven.empty())
    return fail("'" + inDir + "' has no plan.json: to read a " + fromName +
                " checkpoint a training run saved, give the model's HF "
                "config.json with --config");
  if (!described && adapters)
    return fail("'" + inDir + "' has no plan.json: adapters are read from "
                "what mdl-convert --adapters wrote");
  if (fromName != "hf" && described) {
    const std::string &text = planText;
    json::ParseError perr;
    std::optional<json::Value> plan = json::parse(text, perr);
    if (!plan || plan->kind() != json::Value::Object)
      return fail(inDir + "/plan.json: invalid JSON");
    const json::Value *m = plan->get("model"), *b = plan->get("backend"),
                      *c = plan->get("configuration");
    if (!m || !b || !c || m->kind() != json::Value::String ||
        b->kind() != json::Value::String || !parseConfigJson(*c, source))
      return fail(inDir + "/plan.json lacks model, backend or configuration");
    if (m->asString() != model || b->asString() != fromName)
      return fail(inDir + " holds " + m->asString() + " on " + b->asString() +
                  ", not " + model + " on " + fromName);
    const json::Value *holdsAdapters = plan->get("adapters");
    if (adapters != (holdsAdapters && holdsAdapters->kind() == json::Value::Bool &&
                     holdsAdapters->asBool()))
      return fail(inDir + " holds " +
                  (adapters ? "weights, not LoRA adapters"
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
    if (const json::Value *ov = plan->get("overrides"))
      for (const auto &[k, v] : ov->members())
        if (v.kind() == json::Value::String &&
            std::none_of(load.overrides.begin(), load.overrides.end(),
                         [&](const auto &o) { return o.first == k; }))
          load.overrides.insert(load.overrides.begin(), {k, v.asString()});
    if (const json::Value *n = plan->get("adapter_names");
        n && n->kind() == json::Value::Array && n->elements().size() == 2 &&
        n->elements()[0].kind() == json::Value::String &&
        n->elements()[1].kind() == json::Value::String)
      sourceNames = {n->elements()[0].asString(), n->elements()[1].asString()};
  }

  // Instantiate once; both sides bind the same instance, but for a cast
  // target.
  std::string error;
  std::optional<HFConfig> plain = HFConfig::load(configPath, error);
  if (!plain)
    return fail(error);
  for (const auto &[k, v] : settled)
    plain->addOverride(k, v);

  // The model as the checkpoint holds it. An HF source's storage variants
  // and open config entries are read from its files.
  // The config alone is checked first (its sizes bounded) before any
  // checkpoint is read.
  std::shared_ptr<Model> held = Model::create(any->model, *plain, error);
  if (!held)
    return fail(error);
  {
    // Sizes that make the layout unlistable (tensor families too large).
    std::string ignored; // binding errors are reported with the choices
    if (std::unique_ptr<Binding> unsharded =
            Binding::bind(held, *fromDecl, choicesGiven, ignored))
      for (const std::string &why : unsharded->validate(ParallelConfig()))
        return fail(why);
  }
  std::shared_ptr<Checkpoint> hfInput;
  std::string detected;
  if (fromName == "hf" && !adapters) {
    hfInput = Checkpoint::open(inDir, error);
    if (!hfInput)
      return fail(error);
    std::optional<Detection> d = detectCheckpoint(
        any->model, *fromDecl, *plain, load.overrides, choicesGiven,
        [&](const std::string &name) { return hfInput->find(name) != nullptr; },
        error);
    if (!d)
      return fail(error);
    held = d->model;
    sourceChoices = d->choices;
    settled = d->values;
    detected = d->note;
  }
  // The model asked for: overrides may lower a depth (the dropped
  // elements' tensors are skipped), never raise it.
  HFConfig config = *plain;
  for (const auto &[k, v] : settled)
    config.addOverride(k, v);
  for (const auto &[k, v] : load.overrides)
    config.addOverride(k, v);
  std::shared_ptr<Model> instance = held;
  if (!load.overrides.empty()) {
    instance = Model::create(any->model, config, error);
    if (!instance)
      return fail(error);
    if (auto deeper = deeperThan(instance->root(), held->root(), configPath))
      return fail(*deeper);
  }
  // The target's weights in another dtype: an instance whose config says
  // it (the output's config.json says it too).
  std::shared_ptr<Model> targetInstance = instance;
  if (castTo) {
    std::string name(torchName(*castTo));
    HFConfig cast = config;
    for (const char *key : {"torch_dtype", "dtype"})
      cast.addOverride(key, name);
    if (!(targetInstance = Model::create(any->model, cast, error)))
      return fail(error);
  }
  // Adapters are for the modules a backend builds with LoRA enabled.
  if (adapters)
    selectLoraModules(fromDecl->choices, sourceChoices);
  std::unique_ptr<Binding> from =
      Binding::bind(instance, *fromDecl, sourceChoices, error);
  // The storage variants travel with the checkpoint: a backend written
  // from packed HF experts converts back to packed ones.
  std::map<std::string, std::string> targetChoices = sourceChoices;
  for (const auto &[k, v] : choicesGiven)
    targetChoices[k] = v;
  if (adapters)
    selectLoraModules(toDecl->choices, targetChoices);
  std::unique_ptr<Binding> to =
      from ? Binding::bind(targetInstance, *toDecl, targetChoices, error)
           : nullptr;
  std::unique_ptr<Binding> heldFrom =
      to && held != instance
          ? Binding::bind(held, *fromDecl, sourceChoices, error)
          : nullptr;
  if (!from || !to || (held != instance && !heldFrom))
    return fail(error);
  // A backend source's rank files, opened once.
  std::optional<SourceLayout> sourceFiles;
  std::map<std::string, std::shared_ptr<Checkpoint>> opened;
  auto openRank = [&](const std::string &path, std::string &err) {
    std::shared_ptr<Checkpoint> &c = opened[path];
    if (!c)
      c = Checkpoint::open(path, err);
    return c;
  };
  // Rank directories (Megatron's, maybe under a tracker); a backend whose
  // ranks are files at the top (vLLM's sharded_state) is read by rank.
  if (fromName != "hf" && !adapters && !from->rankDir(source, 0).empty()) {
    sourceFiles = findRankFiles(*from, inDir, error);
    if (!sourceFiles)
      return fail(error);
    if (!described) {
      std::optional<ParallelConfig> found =
          inferConfig(*from, *sourceFiles, openRank, error);
      if (!found)
        return fail(error);
      source = *found;
    }
  }
  if (toName == "hf")
    target = ParallelConfig();
  else if (!parallelGiven && fromName != "hf")
    target = source;
  for (auto [b, c, name] : {std::tuple{from.get(), source, fromName},
                            std::tuple{to.get(), target, toName}}) {
    std::vector<std::string> why = b->validate(c);
    if (!why.empty()) {
      std::string all;
      for (const std::string &w : why)
        all += "\n  " + w;
      return fail(c.str() + " is not a valid configuration of " + model +
                  " on " + name + ":" + all);
    }
  }
  int64_t ranks = Binding::numRanks(target);
  if (onlyRank >= ranks)
    return fail("rank " + std::to_string(onlyRank) + " does not exist: " +
                target.str() + " has " + std::to_string(ranks) + " ranks");

  // A backend's own format holds the files of the ranks that save.
  auto written = [&](int64_t r) {
    if (onlyRank >= 0)
      return r == onlyRank;
    return adapters || toName == "hf" || safetensorsOut ||
           to->rankSaved(target, r);
  };
  std::vector<int64_t> todo;
  for (int64_t r = 0; r < ranks; ++r)
    if (written(r))
      todo.push_back(r);
  // Adapters are small: all of them are converted before anything is
  // written, by the first process when there are several.
  std::unique_ptr<Binding> hfBinding;
  std::vector<Adapters> adapterOutputs;
  // Backends that load HF-PEFT adapters (vLLM) keep them as they are.
  bool adaptersFromHf = from->adapterBackend() == "hf",
       adaptersToHf = to->adapterBackend() == "hf";
  std::vector<int64_t> adapterRanks;
  if (processes->index() == 0)
    adapterRanks = adaptersToHf ? std::vector<int64_t>{0} : todo;
  FactorNames targetNames = namesGiven ? *namesGiven : FactorNames();
  if (adapters) {
    const Binding *hf = fromName == "hf" ? from.get()
                        : toName == "hf" ? to.get()
                                         : nullptr;
    if (!hf) {
      hfBinding = Binding::bind(instance, any->hf, sourceChoices, error);
      if (!hfBinding)
        return fail(error);
      hf = hfBinding.get();
    }
    std::optional<std::vector<Adapters>> converted =
        convertAdapters(*hf, *from, source, adaptersFromHf, sourceNames, *to,
                        target, adaptersToHf, inDir, adapterRanks, error);
    if (!converted)
      return fail(error);
    adapterOutputs = std::move(*converted);
  }

  Converter converter(*from, source, *to, target);
  if (threads)
    converter.setThreads(unsigned(threads));
  std::set<int64_t> needed;
  // Every rank that saves must be there; others may be (safetensors).
  if (sourceFiles) {
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
    converter.restrictSources(present);
  }
  OutputLayout layout = outputLayout(
      *to, outDir, safetensorsOut || adapters || toName == "hf", iteration);
  OutputFiles output =
      planOutputFiles(*to, target, todo, layout.rankRoot, toName == "hf",
                      maxShard, layout.rankFile);
  if (shared && !adapters)
    output.files = shareOfFiles(output.files);
  if (!adapters)
    for (const Converter::TargetFile &f : output.files)
      for (int64_t s : converter.sourcesOf(f.rank))
        needed.insert(s);
  for (int64_t s : needed) {
    std::shared_ptr<Checkpoint> ckpt = hfInput;
    if (!ckpt) {
      if (sourceFiles) {
        ckpt = openRank(sourceFiles->rankFiles.at(from->rankDir(source, s)),
                        error);
      } else {
        // Ranks at the top of the checkpoint, in parts (vLLM's
        // sharded_state).
        std::optional<std::vector<std::string>> paths =
            rankFiles(*from, source, s, inDir, error);
        if (paths)
          ckpt = Checkpoint::openFiles(*paths, error);
      }
      if (!ckpt)
        return fail(error);
    }
    if (!converter.addSource(
            s, ckpt, error,
            heldFrom ? droppedTensors(*heldFrom, *from, source, s)
                     : std::set<std::string>()))
      return fail(error);
  }

  // Outputs: new files only, removed again on any failure.
  bool likeRank = onlyRank >= 0 || (shared && !processes->communicate());
  if (!likeRank && isDir(outDir) && exists(outDir + "/plan.json"))
    return fail("'" + outDir + "' already holds a conversion");
  if (!quiet && isatty(2) && !detected.empty())
    std::fprintf(stderr, "detected from the checkpoint: %s\n",
                 detected.c_str());
  // A dry run checks what the run does, then prints instead of writing.
  if (dryRun) {
    for (int64_t r : processes->index() == 0 ? todo : std::vector<int64_t>()) {
      // A rank at the top of the checkpoint is named by its files.
      std::string dir = toName == "hf" ? "." : to->rankDir(target, r);
      if (dir.empty())
        dir = to->rankFile(target, r);
      for (const RankTensor &t : to->rankTensors(target, r))
        std::printf("%s\t%s\t%s\t%s\n", dir.c_str(), t.name.c_str(),
                    shapeText(t.shape).c_str(),
                    std::string(safetensorsName(t.dtype)).c_str());
    }
    return 0;
  }
  // Nothing is created unless every process got this far.
  if (!othersSucceeded())
    return 1;
  if (!makeDir(outDir, cleanup, error) ||
      !makeDir(layout.rankRoot, cleanup, error))
    return fail(error);
  ProgressReporter reporter(
      quiet ? ProgressMode::None : *parseProgressMode(progressName, isatty(2)),
      stderr, progressInterval);
  ConvertProgress last;
  std::vector<std::string> files;
  if (adapters) {
    output.dirs = {outDir};
    for (int64_t r : adapterRanks) {
      std::string dir =
          adaptersToHf ? outDir : outDir + "/" + to->rankDir(target, r);
      output.dirs.push_back(dir);
      files.push_back(dir + "/adapter_model.safetensors");
    }
  }
  // The directories of the files this process writes.
  auto holdsOwnFile = [&](const std::string &dir) {
    return !shared || adapters ||
           std::any_of(output.files.begin(), output.files.end(),
                       [&](const Converter::TargetFile &f) {
                         return f.path.compare(0, dir.size() + 1, dir + "/") ==
                                0;
                       });
  };
  for (const std::string &dir : output.dirs)
    if (holdsOwnFile(dir) && !makeDir(dir, cleanup, error))
      return fail(error);
  auto progress = [&](const ConvertProgress &p) {
    last = p;
    reporter.update(p);
  };
  // The ranks are written in parallel; a file is removed again on failure
  // once it is complete (the converter removes incomplete ones).
  if (adapters) {
    // HF-PEFT names its adapters after the wrapped model.
    for (size_t i = 0; i < files.size(); ++i) {
      if (!writeAdapters(adapterOutputs[i],
                         adaptersToHf ? "base_model.model." : "", files[i],
                         error, adaptersToHf ? FactorNames() : targetNames))
        return fail(error);
      cleanup.files.push_back(files[i]);
    }
    // The PEFT configuration, with every module's scale alpha / r kept.
    std::string peft;
    if (processes->index() == 0 &&
        readFile(inDir + "/adapter_config.json", peft)) {
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
    }
  } else {
    bool done = converter.writeFiles(
        output.files, error, progress,
        [&](size_t i) { cleanup.files.push_back(output.files[i].path); },
        [&](size_t i) {
          return makeRankWriter(output.files[i].path, layout, target);
        });
    if (!done) {
      reporter.finish(last, error);
      return fail(error);
    }
  }
  // The files every process shares are written once all wrote theirs, by
  // the first.
  if (!othersSucceeded())
    return 1;
  if (processes->communicate() && processes->index() != 0)
    return 0;
  // What is not a weight travels with the weights.
  if (!carryFiles(inDir, outDir,
                  {"config.json", "plan.json", "adapter_config.json"},
                  cleanup.files, error))
    return fail(error);

  // config.json and plan.json describe what was written.
  std::string configText;
  readFile(configPath, configText);
  configText =
      outputConfigText(configText, load.overrides, castTo, to->layout());
  json::Value plan = json::Value::object();
  plan.set("model", json::Value::string(model));
  plan.set("backend", json::Value::string(toName));
  plan.set("configuration", configJson(target));
  plan.set("source", json::Value::string(inDir));
  plan.set("from", json::Value::string(fromName));
  if (adapters)
    plan.set("adapters", json::Value::boolean(true));
  if (adapters && !adaptersToHf && namesGiven)
    plan.set("adapter_names",
             json::Value::strings({namesGiven->a, namesGiven->b}));
  json::Value choices = json::Value::object();
  for (const auto &[k, v] : targetChoices)
    choices.set(k, json::Value::string(v));
  plan.set("choices", std::move(choices));
  json::Value overrides = json::Value::object();
  for (const auto &[k, v] : load.overrides)
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
  std::vector<std::pair<std::string, std::string>> tops = {
      {outDir + "/config.json", configText},
      {outDir + "/plan.json", json::write(plan, 2) + "\n"}};
  if (!layout.tracker.empty())
    tops.emplace_back(layout.tracker, layout.trackerText);
  if (!output.indexPath.empty() && !adapters)
    tops.emplace_back(output.indexPath, output.indexText);
  for (const auto &[path, text] : tops) {
    bool existed = exists(path);
    if (!writeFileAtomically(path, text, error))
      return fail(error);
    if (!existed)
      cleanup.files.push_back(path);
  }
  if (!adapters)
    reporter.finish(last);
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
