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

#include "mdl/Runtime/Adapter.h"
#include "mdl/Runtime/CheckpointDir.h"
#include "mdl/Runtime/Convert.h"
#include "mdl/Runtime/Json.h"

#include <cstdio>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>
#include <sys/stat.h>
#include <unistd.h>

using namespace mdl;
using namespace mdl::rt;

namespace {

const char *kUsage =
    R"(usage: mdl-convert [--model NAME] --from A --to B [options] IN_DIR OUT_DIR
       mdl-convert --list

Converts a checkpoint from layout A to layout B (hf, mcore-te, mcore-local,
vllm, ...). The model is the one whose spec serves config.json's
architectures and model_type, or NAME. IN_DIR holds config.json and, for
hf, the safetensors files (with model.safetensors.index.json when
sharded); for a backend, what mdl-convert wrote (plan.json, config.json,
the ranks' files). OUT_DIR gets config.json, plan.json, the source's other
files that are not weights (tokenizer, generation config, ...) and the
target's files: for hf model.safetensors, or shards with
model.safetensors.index.json above --max-shard-size; for a backend each
rank's files as its spec names them (mcore: mp_rank_TT_PPP[_EEE]/
model.safetensors, vllm: model-rank-R-part-P.safetensors).

Options:
  --tp N --pp N --ep N --etp N --vpp N --sp
                      the target's parallel configuration (a backend
                      source's comes from its plan.json)
  --first-stage-layers N, --last-stage-layers N
                      uneven first and last pipeline stages
  --rank R            convert only rank R of the target, reading only the
                      source files it needs (ranks convert in parallel)
  --set KEY=VALUE     override a key of config.json (e.g.
                      --set mtp_num_hidden_layers=0); never more stack
                      elements (MTP layers) than the checkpoint's config has
  --choice NAME=VALUE a storage variant (e.g. expert_storage=packed); by
                      default detected from an HF source
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
  --config FILE       the base model's config.json (default:
                      IN_DIR/config.json)
  --max-shard-size S  the largest file of an hf target or a split rank
                      (vllm), as save_pretrained reads it: 5GB (the
                      default, 10^9 bytes a GB), 500MB, 20KB, 2GiB, bytes
  --dtype T           bf16, fp16 or fp32: floating weights are converted
                      to T (rounded once, to nearest even), parameters the
                      spec gives a dtype of their own keep it; the output
                      config.json's torch_dtype says T
  --dry-run           print what each target rank would hold (directory,
                      name, shape, dtype) and write nothing
  --quiet             no progress line
  --list              the compiled-in models and backends
)";

int usage(const std::string &message) {
  std::fprintf(stderr, "mdl-convert: error: %s\n(run 'mdl-convert --help' "
                       "for usage)\n",
               message.c_str());
  return 2;
}

int fail(const std::string &message) {
  std::fprintf(stderr, "mdl-convert: error: %s\n", message.c_str());
  return 1;
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
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return false;
  std::stringstream s;
  s << in.rdbuf();
  out = s.str();
  return true;
}

/// Writes a small file atomically.
bool writeFile(const std::string &path, const std::string &text,
               std::string &error) {
  std::string tmp = path + ".tmp." + std::to_string(getpid());
  {
    std::ofstream out(tmp, std::ios::binary);
    out << text;
    if (!out) {
      error = "cannot write '" + path + "'";
      std::remove(tmp.c_str());
      return false;
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    error = "cannot write '" + path + "'";
    std::remove(tmp.c_str());
    return false;
  }
  return true;
}

std::string norm(std::string s) {
  for (char &c : s)
    if (c == '-')
      c = '_';
  return s;
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
  return c.tp > 0 && c.pp > 0 && c.ep > 0 && c.etp > 0 && c.vpp > 0;
}

/// Compares the stacks of two instances of one model: an override may ask
/// for fewer elements than the checkpoint's config, never more.
std::optional<std::string> deeperThan(Instance &asked, Instance &has,
                                      const std::string &configPath) {
  for (auto &[name, elements] : asked.stacks) {
    auto it = has.stacks.find(name);
    size_t have = it == has.stacks.end() ? 0 : it->second.size();
    std::string stack = asked.path.empty() ? name : asked.path + "." + name;
    if (elements.size() > have)
      return "the overrides ask for " + std::to_string(elements.size()) +
             " elements of stack '" + stack + "', but the checkpoint's " +
             "config (" + configPath + ") has " + std::to_string(have);
    for (size_t i = 0; i < elements.size(); ++i)
      if (auto e = deeperThan(*elements[i], *it->second[i], configPath))
        return e;
  }
  for (auto &[name, child] : asked.instances) {
    auto it = has.instances.find(name);
    if (it == has.instances.end())
      return "the overrides ask for " + child->describe() +
             ", which the checkpoint's config (" + configPath +
             ") does not have";
    if (child->module == it->second->module)
      if (auto e = deeperThan(*child, *it->second, configPath))
        return e;
  }
  return std::nullopt;
}

struct Cleanup {
  std::vector<std::string> files, dirs;
  bool armed = true;
  ~Cleanup() {
    if (!armed)
      return;
    for (auto it = files.rbegin(); it != files.rend(); ++it)
      std::remove(it->c_str());
    for (auto it = dirs.rbegin(); it != dirs.rend(); ++it)
      rmdir(it->c_str());
  }
};

bool makeDir(const std::string &path, Cleanup &cleanup, std::string &error) {
  if (isDir(path))
    return true;
  if (mkdir(path.c_str(), 0755) != 0) {
    error = "cannot create directory '" + path + "': " + std::strerror(errno);
    return false;
  }
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

} // namespace

int main(int argc, char **argv) {
  std::string model, fromName, toName;
  std::vector<std::string> positional;
  ParallelConfig target;
  int64_t onlyRank = -1;
  bool quiet = false, list = false, parallelGiven = false, dryRun = false;
  bool adapters = false;
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
    if (a == "--list") {
      list = true;
    } else if (a == "--quiet") {
      quiet = true;
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
    } else if (a == "--sp") {
      target.sp = true;
      parallelGiven = true;
    } else if (flag == "--model" || flag == "--from" || flag == "--to") {
      if (!value(v) || v.empty())
        return usage(flag + " needs a name");
      (flag == "--model" ? model : flag == "--from" ? fromName : toName) =
          norm(v);
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
               flag == "--first-stage-layers" ||
               flag == "--last-stage-layers") {
      char *end = nullptr;
      if (!value(v) || v.empty())
        return usage(flag + " needs a number");
      long long n = std::strtoll(v.c_str(), &end, 10);
      if (*end || n < (flag == "--rank" ? 0 : 1) || n > 1000000)
        return usage(flag + " takes a " +
                     (flag == "--rank" ? "non-negative" : "positive") +
                     " integer, not '" + v + "'");
      if (flag == "--rank")
        onlyRank = n;
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
    // Each model with the backends it converts between and what it serves.
    for (const Generated *g : registry()) {
      std::string serves;
      for (const auto *values : {&g->model.modelTypes, &g->model.architectures})
        for (const std::string &s : *values)
          serves += (serves.empty() ? "" : ",") + s;
      std::printf("%s\t%s\t%s\t%s\n", g->model.name.c_str(),
                  g->backend.name.c_str(), g->model.spec.c_str(),
                  serves.c_str());
    }
    return 0;
  }
  if (fromName.empty() || toName.empty())
    return usage("--from and --to are required");
  if (positional.size() != 2)
    return usage("give IN_DIR and OUT_DIR");
  if (fromName == toName)
    return usage("--from and --to name the same layout");
  const std::string &inDir = positional[0], &outDir = positional[1];
  if (!isDir(inDir))
    return fail("'" + inDir + "' is not a directory");
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
  std::set<std::string> known;
  for (const Generated *g : registry())
    if (g->model.name == model)
      any = g;
    else
      known.insert(g->model.name);
  if (!any) {
    std::string names;
    for (const std::string &k : known)
      names += (names.empty() ? "" : ", ") + k;
    return fail("no model named '" + model + "' is compiled in (known: " +
                names + ")");
  }
  auto backendDecl = [&](const std::string &name) -> const BackendDecl * {
    if (name == "hf")
      return &any->hf;
    const Generated *g = findGenerated(model, name);
    return g ? &g->backend : nullptr;
  };
  const BackendDecl *fromDecl = backendDecl(fromName),
                    *toDecl = backendDecl(toName);
  if (!fromDecl || !toDecl)
    return fail("model '" + model + "' has no backend '" +
                (fromDecl ? toName : fromName) + "'");

  // The source: an HF checkpoint, or what mdl-convert wrote.
  ParallelConfig source;
  std::map<std::string, std::string> sourceChoices = choicesGiven;
  FactorNames sourceNames;
  if (fromName != "hf") {
    std::string text, error;
    if (!readFile(inDir + "/plan.json", text))
      return fail("'" + inDir + "' has no plan.json: a " + fromName +
                  " checkpoint is read from what mdl-convert wrote");
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
  if (toName == "hf")
    target = ParallelConfig();
  else if (!parallelGiven && fromName != "hf")
    target = source;

  // Instantiate once; both sides bind the same instance, but for a cast
  // target.
  std::string error;
  std::optional<HFConfig> plain = HFConfig::load(configPath, error);
  if (!plain)
    return fail(error);
  HFConfig config = *plain;
  for (const auto &[k, v] : load.overrides)
    config.addOverride(k, v);
  std::shared_ptr<Model> instance = Model::create(any->model, config, error);
  if (!instance)
    return fail(error);
  if (!load.overrides.empty()) {
    std::unique_ptr<Model> original = Model::create(any->model, *plain, error);
    if (!original)
      return fail(error);
    if (auto deeper =
            deeperThan(instance->root(), original->root(), configPath))
      return fail(*deeper);
  }
  // The dtype of the model's weights is its config's.
  std::vector<std::pair<std::string, std::string>> configKeys = load.overrides;
  std::shared_ptr<Model> targetInstance = instance;
  if (castTo) {
    std::string name(torchName(*castTo));
    configKeys.push_back({"torch_dtype", name});
    HFConfig cast = config;
    for (const char *key : {"torch_dtype", "dtype"})
      cast.addOverride(key, name);
    if (!(targetInstance = Model::create(any->model, cast, error)))
      return fail(error);
  }

  // An HF source's storage variants are read from its files.
  std::shared_ptr<Checkpoint> hfInput;
  if (fromName == "hf" && !adapters) {
    hfInput = Checkpoint::open(inDir, error);
    if (!hfInput)
      return fail(error);
    std::vector<std::map<std::string, std::string>> combos = {{}};
    for (const auto &[name, options] : fromDecl->choices) {
      std::vector<std::map<std::string, std::string>> next;
      for (const auto &c : combos)
        for (const std::string &o : options)
          if (!choicesGiven.count(name) || choicesGiven[name] == o) {
            next.push_back(c);
            next.back()[name] = o;
          }
      combos = std::move(next);
    }
    size_t best = 0, bestCount = 0;
    for (size_t i = 0; i < combos.size(); ++i) {
      std::unique_ptr<Binding> b =
          Binding::bind(instance, *fromDecl, combos[i], error);
      if (!b)
        return fail(error);
      size_t count = 0;
      for (const RankTensor &t : b->rankTensors(ParallelConfig(), 0))
        count += hfInput->find(t.name) != nullptr;
      if (count > bestCount)
        best = i, bestCount = count;
    }
    sourceChoices = combos.empty() ? choicesGiven : combos[best];
  }
  std::unique_ptr<Binding> from =
      Binding::bind(instance, *fromDecl, sourceChoices, error);
  // The storage variants travel with the checkpoint: a backend written
  // from packed HF experts converts back to packed ones.
  std::map<std::string, std::string> targetChoices = sourceChoices;
  for (const auto &[k, v] : choicesGiven)
    targetChoices[k] = v;
  std::unique_ptr<Binding> to =
      from ? Binding::bind(targetInstance, *toDecl, targetChoices, error)
           : nullptr;
  if (!from || !to)
    return fail(error);
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

  if (dryRun) {
    for (int64_t r = 0; r < ranks; ++r) {
      if (onlyRank >= 0 && r != onlyRank)
        continue;
      // A rank at the top of the checkpoint is named by its files.
      std::string dir = toName == "hf" ? "." : to->rankDir(target, r);
      if (dir.empty())
        dir = to->rankFile(target, r);
      for (const RankTensor &t : to->rankTensors(target, r)) {
        std::string shape;
        for (int64_t d : t.shape)
          shape += (shape.empty() ? "" : ",") + std::to_string(d);
        std::printf("%s\t%s\t[%s]\t%s\n", dir.c_str(), t.name.c_str(),
                    shape.c_str(), std::string(safetensorsName(t.dtype)).c_str());
      }
    }
    return 0;
  }

  std::vector<int64_t> todo;
  for (int64_t r = 0; r < ranks; ++r)
    if (onlyRank < 0 || r == onlyRank)
      todo.push_back(r);
  // Adapters are small: all of them are converted before anything is
  // written.
  std::unique_ptr<Binding> hfBinding;
  std::vector<Adapters> adapterOutputs;
  // Backends that load HF-PEFT adapters (vLLM) keep them as they are.
  bool adaptersFromHf = from->adapterBackend() == "hf",
       adaptersToHf = to->adapterBackend() == "hf";
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
    std::optional<std::vector<Adapters>> converted = convertAdapters(
        *hf, *from, source, adaptersFromHf, sourceNames, *to, target,
        adaptersToHf, inDir, adaptersToHf ? std::vector<int64_t>{0} : todo,
        error);
    if (!converted)
      return fail(error);
    adapterOutputs = std::move(*converted);
  }

  Converter converter(*from, source, *to, target);
  std::set<int64_t> needed;
  if (!adapters)
    for (int64_t r : todo)
      for (int64_t s : converter.sourcesOf(r))
        needed.insert(s);
  for (int64_t s : needed) {
    std::shared_ptr<Checkpoint> ckpt = hfInput;
    if (!ckpt) {
      std::optional<std::vector<std::string>> paths =
          rankFiles(*from, source, s, inDir, error);
      if (!paths || !(ckpt = Checkpoint::openFiles(*paths, error)))
        return fail(error);
    }
    if (!converter.addSource(s, ckpt, error))
      return fail(error);
  }

  // Outputs: new files only, removed again on any failure.
  Cleanup cleanup;
  if (onlyRank < 0 && isDir(outDir)) {
    std::string probe;
    if (exists(outDir + "/plan.json"))
      return fail("'" + outDir + "' already holds a conversion");
  }
  if (!makeDir(outDir, cleanup, error))
    return fail(error);
  bool tty = !quiet && isatty(2);
  OutputFiles output = planOutputFiles(*to, target, todo, outDir,
                                       toName == "hf", maxShard);
  std::vector<std::string> files;
  if (adapters) {
    output.dirs = {outDir};
    for (int64_t r : adaptersToHf ? std::vector<int64_t>{0} : todo) {
      std::string dir =
          adaptersToHf ? outDir : outDir + "/" + to->rankDir(target, r);
      output.dirs.push_back(dir);
      files.push_back(dir + "/adapter_model.safetensors");
    }
  }
  for (const std::string &dir : output.dirs)
    if (!makeDir(dir, cleanup, error))
      return fail(error);
  auto progress = [&](const ConvertProgress &p) {
    if (tty)
      std::fprintf(stderr, "\r%lld/%lld files, %lld/%lld tensors, %.2f/%.2f GB ",
                   (long long)p.ranksDone, (long long)p.ranksTotal,
                   (long long)p.tensorsDone, (long long)p.tensorsTotal,
                   p.bytesDone / 1e9, p.bytesTotal / 1e9);
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
    if (readFile(inDir + "/adapter_config.json", peft)) {
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
      if (!writeFile(outDir + "/adapter_config.json",
                     json::write(*config, 2) + "\n", error))
        return fail(error);
      if (!existed)
        cleanup.files.push_back(outDir + "/adapter_config.json");
    }
  } else {
    bool written = converter.writeFiles(
        output.files, error, progress,
        [&](size_t i) { cleanup.files.push_back(output.files[i].path); });
    if (tty)
      std::fputc('\n', stderr);
    if (!written)
      return fail(error);
  }
  // What is not a weight travels with the weights.
  if (!carryFiles(inDir, outDir,
                  {"config.json", "plan.json", "adapter_config.json"},
                  cleanup.files, error))
    return fail(error);

  // config.json and plan.json describe what was written.
  std::string configText;
  readFile(configPath, configText);
  json::ParseError perr;
  std::optional<json::Value> outConfig = json::parse(configText, perr);
  if (outConfig) {
    bool changed = !configKeys.empty();
    // The overrides and the dtype hold in the output's config.
    for (const auto &[k, v] : configKeys)
      setConfigKey(*outConfig, k, v);
    if (castTo)
      setConfigKey(*outConfig, "dtype", std::string(torchName(*castTo)),
                   /*create=*/false);
    // A target that holds FP8 weights dequantized is a checkpoint of the
    // dequantized model: its config describes no quantization.
    const std::vector<TensorSpec> &targetTensors = to->layout().tensors;
    if (std::any_of(targetTensors.begin(), targetTensors.end(),
                    [](const TensorSpec &t) { return t.dequantized; }))
      changed |= outConfig->erase("quantization_config");
    if (changed)
      configText = json::write(*outConfig, 2) + "\n";
  }
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
  json::Value derived = json::Value::array();
  for (const ModelLayout::DerivedTensor &d : to->derived()) {
    json::Value j = json::Value::object();
    j.set("name", json::Value::string(d.name));
    j.set("recompute", json::Value::strings(d.recompute));
    derived.push(std::move(j));
  }
  plan.set("derived", std::move(derived));
  std::vector<std::pair<std::string, std::string>> small = {
      {outDir + "/config.json", configText},
      {outDir + "/plan.json", json::write(plan, 2) + "\n"}};
  if (!output.indexPath.empty() && !adapters)
    small.push_back({output.indexPath, output.indexText});
  for (auto [path, text] : small) {
    bool existed = exists(path);
    if (!writeFile(path, text, error))
      return fail(error);
    if (!existed)
      cleanup.files.push_back(path);
  }
  cleanup.armed = false;
  return 0;
}
