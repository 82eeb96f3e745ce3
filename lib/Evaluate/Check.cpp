//===- Check.cpp - Checking models over grids of configurations -----------===//

#include "mdl/Evaluate/Check.h"

#include "mdl/Runtime/Model/ChoiceReads.h"
#include "mdl/Runtime/Model/Detect.h"
#include "mdl/Runtime/Model/LayoutCheck.h"
#include "mdl/Runtime/Model/PlanCache.h"

#include "mlir/IR/Diagnostics.h"
#include "llvm/ADT/StringExtras.h"

#include <set>

using namespace mlir;
using namespace mdl;

llvm::ArrayRef<CheckInfo> mdl::allChecks() {
  static const CheckInfo checks[] = {
      {"coverage", "mdl-check-coverage",
       "every parameter is held exactly once on each rank that should hold "
       "it, whole: parameters silently dropped or left unmapped, experts "
       "overwritten or not gathered"},
      {"placement", "mdl-check-coverage",
       "tensors live on the pipeline stage of the parameters they hold: "
       "MTP layers mapped only for layer 0, layers on the wrong stage"},
      {"duplicate-name", "mdl-check-coverage",
       "no two tensors of a rank share a name, one overwriting the other: "
       "MTP layers mapped only for layer 0 (stacks of one element checked "
       "at two too)"},
      {"unplaced", "mdl-check-coverage",
       "every member of a model with a pipeline is placed on a stage"},
      {"shape", "mdl-check-shapes",
       "views hold as many elements as their axes; fused parts share a "
       "dtype; checkpoints match the spec's shapes"},
      {"fused-parts", "mdl-check-shapes",
       "the parts of a fused tensor agree on their shared dimensions"},
      {"reinterpret", "mdl-check-reinterpret",
       "no view reorders named dimensions: the 2-D GroupedMLP scramble"},
      {"fused-split", "mdl-check-fused-split",
       "an even split of a fused tensor does not cut across parts of "
       "different sizes: GDN in_proj mixed at TP > 1, QKV interleaves"},
      {"parallel", "mdl-check-parallel",
       "a requested parallel configuration is valid: heads, kv heads, "
       "experts, ffn sizes, vocab, GDN key heads, layers per stage"},
      {"deploy", "mdl-check-parallel",
       "the parallel configurations the spec says real deployments use "
       "(`deploy vllm tp=1,2,4,8;`) are valid"},
      {"stack-depth", "mdl-check-stack-depth",
       "no more stack elements (MTP layers) than the checkpoint's config has"},
      {"tied-head", "mdl-check-tied-vocab",
       "with tied embeddings the last stage still holds a head"},
      {"vocab-padding", "mdl-check-tied-vocab",
       "vocabulary padding rows never reach a checkpoint without tensor "
       "parallelism (HF)"},
      {"capability", "mdl-check-capabilities",
       "a module that needs a device capability the backend lacks has a "
       "fallback: PLE's host gather on NPUs"},
      {"derived", "mdl-check-derived",
       "caches derived from weights say when they are recomputed: stale "
       "conv1d caches after an online weight update"},
      {"checkpoint-missing", "mdl-check-checkpoint",
       "a real checkpoint holds every tensor the spec expects (renamed ones "
       "are named as such)"},
      {"checkpoint-unexpected", "mdl-check-checkpoint",
       "a real checkpoint holds nothing the spec does not describe"},
      {"checkpoint-shape", "mdl-check-checkpoint",
       "a real checkpoint's shapes are the spec's"},
      {"checkpoint-dtype", "mdl-check-checkpoint",
       "a real checkpoint's dtypes are the spec's"},
      {"checkpoint-config", "mdl-check-checkpoint",
       "config and checkpoint agree: MTP layers the config promises exist"},
      {"checkpoint-read", "mdl-check-checkpoint",
       "the checkpoint given can be read"},
      {"config", "", "the HF config can be read and has the types expected"},
      {"instantiate", "",
       "the model can be evaluated against the config (requires, keys, "
       "sizes)"},
      {"bind", "", "the model can be laid out for each backend"},
      {"block-scale", "",
       "FP8 block-scaled weights are stored so that their scales follow "
       "them"},
      {"mxfp4", "",
       "MXFP4 weights are stored so that their blocks and scales follow "
       "them"},
  };
  return checks;
}

std::vector<std::string> mdl::checksOfPass(llvm::StringRef pass) {
  std::vector<std::string> ids;
  for (const CheckInfo &c : allChecks())
    if (pass == c.pass)
      ids.push_back(c.id);
  return ids;
}

std::string CheckOptions::key() const {
  std::string k = hfConfig + "|" + checkpoint.path + "|" + checkpointBackend;
  for (const auto &[axis, values] : grid) {
    k += "|" + axis;
    for (int64_t v : values)
      k += "," + std::to_string(v);
  }
  for (const auto *list : {&sets, &backends, &choices, &files})
    for (const std::string &s : *list)
      k += "|" + s;
  return k;
}

std::optional<std::string>
mdl::parseGrid(llvm::StringRef text,
               std::map<std::string, std::vector<int64_t>> &out) {
  SmallVector<StringRef> items;
  text.split(items, ' ', -1, /*KeepEmpty=*/false);
  for (StringRef item : items) {
    auto [axis, values] = item.split('=');
    if (axis != "tp" && axis != "pp" && axis != "ep" && axis != "etp" &&
        axis != "cp" && axis != "dp" && axis != "vpp")
      return ("unknown grid axis '" + axis + "' (known: tp, pp, ep, etp, cp, "
              "dp, vpp)")
          .str();
    std::vector<int64_t> vs;
    SmallVector<StringRef> parts;
    values.split(parts, ',');
    for (StringRef p : parts) {
      std::optional<int64_t> v = parseBoundedInt(p, 1, kMaxAxisSize);
      if (!v)
        return ("grid values are integers from 1 to " + Twine(kMaxAxisSize) +
                "; '" + item + "' is not")
            .str();
      vs.push_back(*v);
    }
    out[axis.str()] = vs;
  }
  return std::nullopt;
}

/// The message with its stack indices replaced by `*`, so that one finding
/// stands for the same problem in every layer.
static std::string generalizeIndices(const std::string &message) {
  std::string out;
  for (size_t i = 0; i < message.size();) {
    size_t j = i;
    while (j < message.size() && isdigit(static_cast<unsigned char>(message[j])))
      ++j;
    bool dotted = j > i && i > 0 && message[i - 1] == '.' &&
                  (j == message.size() || message[j] == '.' ||
                   message[j] == '\'' || message[j] == ' ');
    if (dotted) {
      out += '*';
      i = j;
    } else {
      out += message[i++];
    }
  }
  return out;
}

void CheckSession::add(Finding f, const std::string &config) {
  auto key = std::make_tuple(f.check, generalizeIndices(f.message),
                             f.at.getAsOpaquePointer());
  auto it = index.find(key);
  if (it != index.end()) {
    Finding &old = found[it->second];
    if (old.firstConfig == config || config.empty())
      ++old.similar;
    else if (!old.configsSeen.count(config)) {
      old.configsSeen.insert(config);
      ++old.configs;
    }
    return;
  }
  f.firstConfig = config;
  f.configs = 1;
  f.configsSeen.insert(config);
  index[key] = found.size();
  found.push_back(std::move(f));
}

namespace {

/// Compares the stacks and instances of two instantiations of one model:
/// the overridden one may not have more than the checkpoint's config.
void compareDepths(
    rt::Instance &over, rt::Instance &orig, const std::string &configFile,
    llvm::function_ref<void(const std::string &, std::string)> report) {
  for (const rt::ChildDecl &c : over.module->children) {
    if (c.stack) {
      auto o = over.stacks.find(c.name);
      auto g = orig.stacks.find(c.name);
      size_t asked = o == over.stacks.end() ? 0 : o->second.size();
      size_t has = g == orig.stacks.end() ? 0 : g->second.size();
      std::string where = (over.path.empty() ? "" : over.path + ".") + c.name;
      if (asked > has)
        report(c.where, "the overrides ask for " + std::to_string(asked) +
                            " elements of stack '" + where +
                            "', but the checkpoint's config (" + configFile +
                            ") has " + std::to_string(has));
      for (size_t i = 0; i < std::min(asked, has); ++i)
        compareDepths(*o->second[i], *g->second[i], configFile, report);
      continue;
    }
    auto o = over.instances.find(c.name);
    auto g = orig.instances.find(c.name);
    if (o == over.instances.end())
      continue;
    if (g == orig.instances.end()) {
      report(c.where, "the overrides ask for '" + o->second->describe() +
                          "', which the checkpoint's config (" + configFile +
                          ") does not have");
      continue;
    }
    if (o->second->module == g->second->module)
      compareDepths(*o->second, *g->second, configFile, report);
  }
}

} // namespace

namespace {
/// While it lives, gives the errors reported without a check ID the ID of
/// the phase that reports them (reading the config, instantiating,
/// binding): every error of `mdlc check` has an ID.
class TagErrors {
public:
  TagErrors(MLIRContext &ctx, const char *id)
      : handler(&ctx, [id](Diagnostic &d) {
          if (d.getSeverity() == DiagnosticSeverity::Error && !hasId(d.str()))
            d << " [" << id << "]";
          return failure(); // printed by the next handler
        }) {}

  /// Whether `message` ends in a check ID: ` [lower-case-words]`.
  static bool hasId(StringRef message) {
    if (!message.consume_back("]"))
      return false;
    size_t open = message.rfind(" [");
    if (open == StringRef::npos || open + 2 == message.size())
      return false;
    return llvm::all_of(message.drop_front(open + 2), [](char c) {
      return (c >= 'a' && c <= 'z') || c == '-';
    });
  }

private:
  ScopedDiagnosticHandler handler;
};
} // namespace

/// The elements of a parameter (its sizes were checked not to overflow).
static int64_t elementsOf(const rt::ParamInstance &p) {
  int64_t n = 1;
  for (int64_t s : p.sizes)
    n *= s;
  return n;
}

/// Every parameter of an instantiated model, and their elements.
static std::pair<size_t, int64_t> countParams(rt::Model &inst) {
  std::pair<size_t, int64_t> out;
  inst.walk([&](rt::Instance &node) {
    for (const rt::ParamInstance &p : node.params) {
      ++out.first;
      out.second += elementsOf(p);
    }
  });
  return out;
}

/// `point` with the axes a backend's mesh lacks at 1.
static ParallelConfig onMesh(ParallelConfig point,
                             const std::vector<MeshAxis> &mesh) {
  for (size_t i = 0; i < kMeshAxisNames.size(); ++i) {
    auto axis = static_cast<MeshAxis>(i);
    if (llvm::is_contained(mesh, axis))
      continue;
    if (axis == MeshAxis::TP) point.tp = 1;
    if (axis == MeshAxis::PP) point.pp = 1, point.vpp = 1;
    if (axis == MeshAxis::EP) point.ep = 1;
    if (axis == MeshAxis::ETP) point.etp = 1;
    if (axis == MeshAxis::CP) point.cp = 1;
    if (axis == MeshAxis::DP) point.dp = 1;
  }
  return point;
}

/// Names depend on the pipeline layout only: pp, vpp and uneven stages.
static std::string pipelineKey(const ParallelConfig &point) {
  return std::to_string(point.pp) + "/" + std::to_string(point.vpp) + "/" +
         std::to_string(point.firstStageLayers.value_or(-1)) + "/" +
         std::to_string(point.lastStageLayers.value_or(-1));
}

/// Every combination of the options of `backend`'s choices, those in
/// `fixed` as given there; the first is the defaults' (as the model's
/// layout gives them, else each choice's first option).
static std::vector<std::map<std::string, std::string>>
choiceCombinations(rt::Model &inst, const rt::BackendDecl &backend,
                   const std::map<std::string, std::string> &fixed) {
  // A default that fails to evaluate is the binding's to report.
  std::map<std::string, std::string> defaults;
  std::string ignored;
  if (std::optional<std::map<std::string, std::string>> d =
          rt::defaultChoices(inst, backend, ignored))
    defaults = std::move(*d);
  std::vector<std::map<std::string, std::string>> combos = {{}};
  for (const auto &[name, options, where] : backend.choices) {
    std::vector<std::map<std::string, std::string>> next;
    auto it = fixed.find(name);
    // A fixed value that is no option stays, for the binding to refuse.
    std::vector<std::string> values =
        it == fixed.end() ? options : std::vector<std::string>{it->second};
    auto dflt = llvm::find(values, defaults[name]);
    if (dflt != values.end())
      std::rotate(values.begin(), dflt, dflt + 1);
    for (const auto &combo : combos)
      for (const std::string &o : values) {
        next.push_back(combo);
        next.back()[name] = o;
      }
    combos = std::move(next);
  }
  return combos;
}

/// The choices of `combo` that differ from `defaults`, as `name=value`
/// words: where a finding occurs.
static std::string
choiceLabel(const std::map<std::string, std::string> &combo,
            const std::map<std::string, std::string> &defaults) {
  std::string out;
  for (const auto &[name, value] : combo)
    if (defaults.at(name) != value)
      out += (out.empty() ? "" : " ") + name + "=" + value;
  return out;
}

namespace {

/// Binds `inst` to `backend`; nothing after reporting why it fails.
std::optional<rt::BoundLayout>
bindTo(rt::Model &inst, const rt::BackendDecl &backend,
       const std::map<std::string, std::string> &choices, Location loc) {
  std::vector<rt::EvalError> errors;
  std::optional<rt::BoundLayout> bound =
      rt::bindModel(inst, backend, choices, errors);
  for (const rt::EvalError &e : errors)
    emitEngineError(e, loc);
  return bound;
}

std::set<std::string> tensorNames(const rt::BoundLayout &bm) {
  std::set<std::string> out;
  for (const rt::TensorListing &t : rt::listTensors(bm.layout, {}))
    out.insert(t.name);
  return out;
}

} // namespace

void CheckSession::checkModel(
    ModuleDeclOp model, const std::string &configPath,
    const std::map<std::string, std::vector<int64_t>> &grid) {
  MLIRContext &ctx = *model.getContext();
  std::map<std::string, std::string> choices;
  for (const std::string &c : opts.choices) {
    size_t eq = c.find('=');
    choices[c.substr(0, eq)] = c.substr(eq + 1);
  }
  std::vector<std::pair<std::string, std::string>> sets;
  for (const std::string &s : opts.sets) {
    size_t eq = s.find('=');
    sets.push_back({s.substr(0, eq), s.substr(eq + 1)});
  }
  std::unique_ptr<SpecDecls> decls = SpecDecls::build(model);
  if (!decls) {
    ok = false;
    return;
  }
  // With a checkpoint, what the config leaves open is what it holds.
  std::optional<rt::Detection> detected;
  const rt::BackendDecl *ckptBackend = nullptr;
  if (opts.checkpoint.kind != CheckpointSource::None) {
    if (!checkpoint) {
      llvm::Expected<CheckpointContents> read =
          readCheckpointContents(opts.checkpoint);
      if (!read) {
        model.emitError() << llvm::toString(read.takeError())
                          << " [checkpoint-read]";
        ok = false;
        return;
      }
      checkpoint = std::move(*read);
    }
    {
      TagErrors tag(ctx, "bind");
      ckptBackend = decls->backend(opts.checkpointBackend);
    }
    if (!ckptBackend) {
      ok = false;
      return;
    }
    // Errors are the main instantiation's to report.
    std::string ignored;
    if (std::optional<rt::HFConfig> plain =
            rt::HFConfig::load(configPath, ignored))
      detected = rt::detectCheckpoint(
          decls->model(), *ckptBackend, *plain, sets, choices,
          [&](const std::string &name) { return checkpoint->count(name) > 0; },
          ignored);
  }
  auto load = [&](bool withSets) -> std::optional<rt::HFConfig> {
    std::optional<rt::HFConfig> c = loadEngineConfig(configPath, {}, ctx);
    if (c && detected)
      for (const auto &[k, v] : detected->values)
        c->addOverride(k, v);
    if (c && withSets)
      for (const auto &[k, v] : sets)
        c->addOverride(k, v);
    return c;
  };
  std::optional<rt::HFConfig> config;
  {
    TagErrors tag(ctx, "config");
    config = load(true);
  }
  if (!config) {
    ok = false;
    return;
  }
  std::unique_ptr<rt::Model> inst;
  {
    TagErrors tag(ctx, "instantiate");
    inst = instantiate(*decls, *config);
  }
  if (!inst) {
    ok = false;
    return;
  }
  std::string modelName = model.getSymName().str();

  // Overrides may lower a depth, never raise it past the checkpoint's.
  rt::Model *held = inst.get();
  std::unique_ptr<rt::Model> orig;
  if (!opts.sets.empty()) {
    ScopedDiagnosticHandler quiet(&ctx, [](Diagnostic &) { return success(); });
    if (std::optional<rt::HFConfig> plain = load(false))
      orig = instantiate(*decls, std::move(*plain));
    if (orig)
      compareDepths(inst->root(), orig->root(), configPath,
                    [&](const std::string &at, std::string message) {
                      add({"stack-depth", message,
                           locationOf(at, model.getLoc()), modelName, "",
                           configPath, "", 0},
                          "");
                    });
    held = orig.get();
  }

  if (ckptBackend)
    checkCheckpoint(model, *inst, held, *ckptBackend, configPath,
                    detected ? detected->choices : choices,
                    detected ? detected->note : "");

  std::vector<std::string> backends = opts.backends;
  if (backends.empty()) {
    ModuleOp top = getTopModule(model);
    for (auto b : top.getOps<BackendOp>())
      if (llvm::any_of(top.getOps<LayoutOp>(), [&](LayoutOp l) {
            return l.getBackend() == b.getSymName();
          }))
        backends.push_back(b.getSymName().str());
  }
  std::vector<ParallelConfig> points = rt::expandGrid(grid);
  std::map<std::string, rt::BoundLayout> defaultBindings;
  if (backends.empty()) {
    Summary sum;
    sum.model = modelName;
    sum.configFile = configPath;
    std::tie(sum.params, sum.elements) = countParams(*inst);
    sums.push_back(sum);
  }
  for (const std::string &spelled : backends) {
    const rt::BackendDecl *backend;
    {
      TagErrors tag(ctx, "bind");
      backend = decls->backend(spelled);
    }
    if (!backend) {
      ok = false;
      continue;
    }
    // Every combination of the backend's choices is checked; the defaults'
    // (the first) gives the summary. A check depends on the choices its
    // evaluations read alone: a combination that agrees with one checked
    // before on those has its findings, under its own label.
    std::vector<std::map<std::string, std::string>> combos =
        choiceCombinations(*inst, *backend, choices);
    struct Checked {
      std::set<std::string> reads;
      size_t combo;
      std::vector<std::pair<Finding, std::string>> found;
    };
    std::vector<Checked> checked;
    auto valueOf = [](const std::map<std::string, std::string> &combo,
                      const std::string &name) {
      auto it = combo.find(name);
      return it == combo.end() ? std::string() : it->second;
    };
    for (size_t ci = 0; ci < combos.size(); ++ci) {
      std::string label = choiceLabel(combos[ci], combos.front());
      auto same = llvm::find_if(checked, [&](const Checked &c) {
        return llvm::all_of(c.reads, [&](const std::string &name) {
          return valueOf(combos[ci], name) == valueOf(combos[c.combo], name);
        });
      });
      if (same != checked.end()) {
        for (const auto &[f, cfg] : same->found)
          add(f, cfg.empty() ? label
                 : label.empty() ? cfg
                                 : cfg + " " + label);
        continue;
      }
      Checked now;
      now.combo = ci;
      std::optional<rt::BoundLayout> bm;
      {
        rt::ChoiceReads reads;
        bm = checkBinding(model, *inst, *backend, combos[ci], label,
                          configPath, points, /*summarize=*/ci == 0,
                          &now.found);
        now.reads = reads.names();
      }
      if (!bm)
        continue;
      if (ci == 0)
        defaultBindings.emplace(backend->name, std::move(*bm));
      checked.push_back(std::move(now));
    }
  }

  // The parallel configurations the spec says real deployments use must
  // be valid.
  for (auto d : model.getBodyBlock().getOps<DeployOp>())
    checkDeploy(model, d, *decls, *inst, choices, configPath, defaultBindings);

  // A name that ignores a stack's index shows only with two elements:
  // stacks of one (an MTP block of depth 1) are named again at two.
  std::unique_ptr<rt::Model> two;
  {
    ScopedDiagnosticHandler quiet(&ctx, [](Diagnostic &) { return success(); });
    two = instantiate(*decls, *config, /*raiseSingleStacks=*/true);
  }
  if (!two || two->raisedStacks().empty())
    return;
  std::string label = "stack";
  for (const std::string &st : two->raisedStacks())
    label += " " + st;
  label += " at 2 elements";
  for (const std::string &spelled : backends) {
    ScopedDiagnosticHandler quiet(&ctx, [](Diagnostic &) { return success(); });
    const rt::BackendDecl *backend = decls->backend(spelled);
    if (!backend)
      continue;
    // As the spec names it, however the command line spelled it.
    const std::string &b = backend->name;
    std::optional<rt::BoundLayout> bm = bindTo(
        *two, *backend, choiceCombinations(*two, *backend, choices).front(),
        model.getLoc());
    if (!bm)
      continue;
    auto at = [&](int source) {
      return locationOf(bm->sources[size_t(source)], model.getLoc());
    };
    std::set<std::string> namedPipelines;
    rt::PlanCache cache(bm->layout);
    for (ParallelConfig point : points) {
      point = onMesh(point, bm->layout.mesh);
      rt::Planner planner(bm->layout, point);
      if (!planner.valid() || !namedPipelines.insert(pipelineKey(point)).second)
        continue;
      for (const rt::Problem &p : rt::checkNames(planner)) {
        Finding f{p.check, p.message,  at(p.source), modelName,
                  b,       configPath, "",           0};
        if (p.related >= 0)
          f.related = at(p.related);
        add(std::move(f), point.str() + " " + label);
      }
    }
  }
}

std::optional<rt::BoundLayout> CheckSession::checkBinding(
    ModuleDeclOp model, rt::Model &inst, const rt::BackendDecl &backend,
    const std::map<std::string, std::string> &combo, const std::string &label,
    const std::string &configPath, const std::vector<ParallelConfig> &points,
    bool summarize, std::vector<std::pair<Finding, std::string>> *record) {
  std::string modelName = model.getSymName().str();
  const std::string &b = backend.name;
  // Where a finding occurs: the parallel configuration and the choices
  // that are not their defaults.
  auto where = [&](const std::string &cfg) {
    return cfg.empty() ? label : label.empty() ? cfg : cfg + " " + label;
  };
  // Every finding of the binding, with the configuration it occurs in.
  auto emit = [&](Finding f, const std::string &cfg) {
    if (record)
      record->push_back({f, cfg});
    add(std::move(f), where(cfg));
  };
  std::optional<rt::BoundLayout> bm = bindChecked(model, inst, backend, combo);
  if (!bm)
    return bm;
  const rt::ModelLayout &layout = bm->layout;
  auto at = [&](int source) -> Location {
    return source >= 0 ? locationOf(bm->sources[size_t(source)], model.getLoc())
                       : model.getLoc();
  };
  auto finding = [&](std::string check, std::string message, int source,
                     const std::string &cfg, int related = -1) {
    Finding f{std::move(check), std::move(message), at(source), modelName,
              b, configPath, "", 0};
    if (related >= 0)
      f.related = at(related);
    emit(std::move(f), cfg);
  };

  // What does not depend on the parallel configuration.
  for (const auto &need : layout.needs) {
    auto cap = layout.capabilities.find(need.capability);
    bool has = cap != layout.capabilities.end() && cap->second;
    if (!has && !need.fallback)
      finding("capability",
              need.instance + " needs capability '" + need.capability +
                  "', which backend " + b +
                  " lacks, and names no fallback",
              need.source, "");
  }
  for (const auto &d : layout.derived) {
    if (!d.hasRecompute)
      finding("derived",
              "derived tensor '" + d.name +
                  "' has no rule for when to recompute it: it goes stale "
                  "after a weight update (say `recompute load, update`)",
              d.source, "");
    else if (!llvm::is_contained(d.recompute, "update"))
      finding("derived",
              "derived tensor '" + d.name +
                  "' is recomputed only on load: it goes stale after an "
                  "online weight update",
              d.source, "");
  }
  bool hasTp = llvm::is_contained(layout.mesh, MeshAxis::TP);
  if (!hasTp)
    for (const rt::Param &p : layout.params)
      for (const rt::Split &s : p.splits) {
        if (!s.padMultiple)
          continue;
        int64_t mult = s.padMultiple(ParallelConfig());
        int a = p.atomIndex(s.atoms.front());
        if (a >= 0 && mult > 1 && p.sizes[a] % mult != 0)
          finding("vocab-padding",
                  "backend " + b + " would pad " + s.atoms.front() + " of " +
                      p.path + " from " + std::to_string(p.sizes[a]) +
                      " to a multiple of " + std::to_string(mult) +
                      ": padding rows would reach a checkpoint without "
                      "tensor parallelism",
                  p.source, "");
      }

  // What makes even the unsharded layout invalid (a config's absurd sizes)
  // is an error of the model, whatever the grid.
  rt::PlanCache cache(layout);
  rt::Planner unsharded(layout, ParallelConfig());
  for (const std::string &why : unsharded.invalidReasons())
    finding("coverage", why, -1, "");

  // A member the pipeline places nowhere makes every configuration with
  // pp > 1 invalid: an error at the member, not fewer valid configurations.
  if (layout.hasPipeline && llvm::is_contained(layout.mesh, MeshAxis::PP)) {
    std::set<std::string> members;
    for (const rt::Param &p : layout.params) {
      if (p.placement.kind != rt::Placement::All || p.scaleOf >= 0 ||
          p.mxfp4Of >= 0)
        continue;
      std::string member = p.path.substr(0, p.path.find('.'));
      if (!members.insert(member).second)
        continue;
      Operation *decl = SymbolTable::lookupSymbolIn(model, member);
      emit({"unplaced",
            "member '" + member +
                "' is placed on no pipeline stage: no "
                "configuration with pp > 1 can hold it (list it under first, "
                "last or stages)",
            decl ? decl->getLoc() : model.getLoc(), modelName, b, configPath,
            "", 0},
           "");
    }
  }

  Summary sum;
  sum.model = modelName;
  sum.configFile = configPath;
  sum.backend = b;
  // The model's parameters: FP8 block scales, which a backend may or may
  // not keep, are not counted, nor MXFP4 blocks and scales (their weights
  // are).
  for (const rt::Param &p : layout.params)
    if (p.scaleOf < 0 && p.mxfp4Of < 0) {
      ++sum.params;
      sum.elements += p.numElements();
    }
  rt::CheckScope scope = rt::representativeLayers(layout);
  std::set<std::string> seen, namedPipelines;
  for (ParallelConfig point : unsharded.valid() ? points
                                                : std::vector<ParallelConfig>{}) {
    point = onMesh(point, layout.mesh);
    std::string cfg = point.str();
    if (!seen.insert(cfg).second)
      continue;
    ++sum.configs;
    rt::Planner planner(layout, point);
    if (!planner.valid()) {
      sum.invalid.push_back({cfg, planner.invalidReasons()});
      // A grid of one point asks for that configuration.
      if (points.size() == 1)
        for (const std::string &why : planner.invalidReasons())
          emit({"parallel", cfg + " is not a valid configuration: " + why,
                model.getLoc(), modelName, b, configPath, "", 0},
               cfg);
      continue;
    }
    ++sum.valid;
    if (!sum.tensors) {
      RankContext first;
      first.config = point;
      sum.tensors = planner.tensors(first, nullptr).size();
    }
    for (const rt::Problem &p : rt::checkLayout(planner, &scope))
      finding(p.check, p.message, p.source, cfg, p.related);
    if (namedPipelines.insert(pipelineKey(point)).second)
      for (const rt::Problem &p : rt::checkNames(planner))
        finding(p.check, p.message, p.source, cfg, p.related);
  }
  if (summarize)
    sums.push_back(std::move(sum));
  return bm;
}

void CheckSession::checkDeploy(
    ModuleDeclOp model, DeployOp deploy, SpecDecls &decls, rt::Model &inst,
    const std::map<std::string, std::string> &choices,
    const std::string &configPath,
    const std::map<std::string, rt::BoundLayout> &bound) {
  std::string b = deploy.getBackend().str();
  if (!opts.backends.empty() && !llvm::is_contained(opts.backends, b))
    return;
  const rt::BackendDecl *backend;
  {
    TagErrors tag(*model.getContext(), "bind");
    backend = decls.backend(b, deploy.getLoc());
  }
  if (!backend) {
    ok = false;
    return;
  }
  // The binding of the default choices, as checked (else bound here).
  std::optional<rt::BoundLayout> own;
  const rt::BoundLayout *bm = nullptr;
  if (auto it = bound.find(backend->name); it != bound.end()) {
    bm = &it->second;
  } else {
    own = bindChecked(model, inst, *backend,
                      choiceCombinations(inst, *backend, choices).front());
    if (!own)
      return;
    bm = &*own;
  }
  std::map<std::string, std::vector<int64_t>> grid;
  for (NamedAttribute a : deploy.getAxes()) {
    ArrayRef<int64_t> values = cast<DenseI64ArrayAttr>(a.getValue()).asArrayRef();
    grid[a.getName().str()].assign(values.begin(), values.end());
  }
  std::string modelName = model.getSymName().str();
  rt::PlanCache cache(bm->layout);
  for (const ParallelConfig &point : rt::expandGrid(grid)) {
    rt::Planner planner(bm->layout, point);
    for (const std::string &why : planner.invalidReasons())
      add({"deploy",
           point.str() + ", which deployments of " + modelName + " on " + b +
               " use, is not a valid configuration of the spec: " + why,
           deploy.getLoc(), modelName, b, configPath, "", 0},
          point.str());
  }
}

std::optional<rt::BoundLayout>
CheckSession::bindChecked(ModuleDeclOp model, rt::Model &inst,
                          const rt::BackendDecl &backend,
                          const std::map<std::string, std::string> &choices) {
  std::optional<rt::BoundLayout> bound;
  {
    TagErrors tag(*model.getContext(), "bind");
    bound = bindTo(inst, backend, choices, model.getLoc());
  }
  ok = ok && bound;
  return bound;
}

void CheckSession::checkCheckpoint(
    ModuleDeclOp model, rt::Model &inst, rt::Model *held,
    const rt::BackendDecl &backend, const std::string &configPath,
    const std::map<std::string, std::string> &choices,
    const std::string &detected) {
  std::optional<rt::BoundLayout> best =
      bindChecked(model, inst, backend, choices);
  if (!best)
    return;
  // The tensors of stack elements the overrides leave out are skipped.
  std::set<std::string> dropped;
  std::string ignored;
  if (held && held != &inst)
    if (std::optional<rt::BoundLayout> all =
            rt::bindModel(*held, backend, choices, ignored)) {
      dropped = tensorNames(*all);
      for (const std::string &name : tensorNames(*best))
        dropped.erase(name);
    }
  std::string modelName = model.getSymName().str();
  CheckpointComparison compared =
      compareCheckpoint(*best, *checkpoint, model, configPath, dropped);
  for (CheckpointFinding &f : compared.findings)
    add({std::move(f.check), std::move(f.message), f.at, modelName,
         opts.checkpointBackend, configPath, "", 0},
        "");

  Summary sum;
  sum.model = modelName;
  sum.configFile = configPath;
  std::tie(sum.params, sum.elements) = countParams(inst);
  sum.note = "checkpoint " + opts.checkpoint.path + ": " +
             std::to_string(checkpoint->size()) + " tensors, " +
             std::to_string(compared.present) + " of the " +
             std::to_string(compared.expected) + " " +
             opts.checkpointBackend + " expects";
  size_t skipped = 0;
  for (const std::string &name : dropped)
    skipped += checkpoint->count(name);
  if (skipped)
    sum.note += ", " + std::to_string(skipped) + " left out by the overrides";
  size_t buffers = 0;
  for (const std::string &name : best->layout.buffers)
    buffers += checkpoint->count(name);
  if (buffers)
    sum.note += ", " + std::to_string(buffers) + " buffer" +
                (buffers > 1 ? "s" : "");
  if (!detected.empty())
    sum.note += ", " + detected;
  sums.push_back(std::move(sum));
}

LogicalResult CheckSession::prepare(ModuleOp top) {
  if (prepared)
    return success(ok);
  prepared = true;
  std::map<std::string, std::vector<int64_t>> grid =
      opts.grid.empty() ? rt::defaultGrid() : opts.grid;
  // The models the named files declare; files that declare none (a
  // backend added to a library, say) stand for the models they import.
  auto inFiles = [&](ModuleDeclOp model) {
    auto loc = dyn_cast<FileLineColLoc>(model.getLoc());
    return loc && llvm::is_contained(opts.files, loc.getFilename().str());
  };
  bool anyDeclared = llvm::any_of(top.getOps<ModuleDeclOp>(), [&](auto m) {
    return m.getModel() && inFiles(m);
  });
  for (auto model : top.getOps<ModuleDeclOp>()) {
    if (!model.getModel())
      continue;
    if (!opts.files.empty() && anyDeclared && !inFiles(model))
      continue;
    std::vector<std::string> configPaths;
    if (!opts.hfConfig.empty())
      configPaths.push_back(opts.hfConfig);
    else
      configPaths = exampleConfigPaths(model);
    for (const std::string &path : configPaths)
      checkModel(model, path, grid);
    if (configPaths.empty()) {
      Summary sum;
      sum.model = model.getSymName().str();
      sums.push_back(sum);
    }
  }
  return success(ok);
}
