//===- Check.cpp - Checking models over grids of configurations -----------===//

#include "mdl/Evaluate/Check.h"


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
       "MTP layers mapped only for layer 0"},
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
  };
  return checks;
}

std::string CheckOptions::key() const {
  std::string k = hfConfig + "|" + grid + "|" + checkpoint.path + "|" +
                  checkpointBackend;
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
  auto key = std::make_tuple(f.check, generalizeIndices(f.message), f.at);
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
void compareDepths(InstanceNode &over, InstanceNode &orig,
                   const std::string &configFile,
                   llvm::function_ref<void(Operation *, std::string)> report) {
  for (Operation &op : over.module.getBodyBlock()) {
    if (auto st = dyn_cast<StackOp>(op)) {
      auto o = over.stacks.find(st.getSymName().str());
      auto g = orig.stacks.find(st.getSymName().str());
      size_t asked = o == over.stacks.end() ? 0 : o->second.size();
      size_t has = g == orig.stacks.end() ? 0 : g->second.size();
      std::string where = (over.path.empty() ? "" : over.path + ".") +
                          st.getSymName().str();
      if (asked > has)
        report(st, "the overrides ask for " + std::to_string(asked) +
                       " elements of stack '" + where +
                       "', but the checkpoint's config (" + configFile +
                       ") has " + std::to_string(has));
      for (size_t i = 0; i < std::min(asked, has); ++i)
        compareDepths(*o->second[i], *g->second[i], configFile, report);
    } else if (auto in = dyn_cast<InstanceOp>(op)) {
      auto o = over.instances.find(in.getSymName().str());
      auto g = orig.instances.find(in.getSymName().str());
      if (o == over.instances.end())
        continue;
      if (g == orig.instances.end()) {
        report(in, "the overrides ask for '" + o->second->describe() +
                       "', which the checkpoint's config (" + configFile +
                       ") does not have");
        continue;
      }
      if (o->second->module == g->second->module)
        compareDepths(*o->second, *g->second, configFile, report);
    }
  }
}

} // namespace

void CheckSession::checkModel(
    ModuleDeclOp model, const std::string &configPath,
    const std::map<std::string, std::vector<int64_t>> &grid) {
  MLIRContext &ctx = *model.getContext();
  std::unique_ptr<HFConfig> config = HFConfig::load(configPath, ctx);
  if (!config) {
    ok = false;
    return;
  }
  for (const std::string &s : opts.sets) {
    size_t eq = s.find('=');
    config->addOverride(s.substr(0, eq), s.substr(eq + 1));
  }
  std::unique_ptr<Instantiation> inst = Instantiation::create(model, *config);
  if (!inst) {
    ok = false;
    return;
  }
  std::string modelName = model.getSymName().str();

  // Overrides may lower a depth, never raise it past the checkpoint's.
  if (!opts.sets.empty()) {
    std::unique_ptr<HFConfig> plain = HFConfig::load(configPath, ctx);
    ScopedDiagnosticHandler quiet(&ctx, [](Diagnostic &) { return success(); });
    std::unique_ptr<Instantiation> orig =
        plain ? Instantiation::create(model, *plain) : nullptr;
    if (orig)
      compareDepths(*inst->root, *orig->root, configPath,
                    [&](Operation *at, std::string message) {
                      add({"stack-depth", message, at, modelName, "",
                           configPath, "", 0},
                          "");
                    });
    configs.push_back(std::move(plain));
    insts.push_back(std::move(orig));
  }

  if (opts.checkpoint.kind != CheckpointSource::None)
    checkCheckpoint(model, *inst, configPath);

  std::vector<std::string> backends = opts.backends;
  if (backends.empty()) {
    ModuleOp top = getTopModule(model);
    for (auto b : top.getOps<BackendOp>())
      if (llvm::any_of(top.getOps<LayoutOp>(), [&](LayoutOp l) {
            return l.getBackend() == b.getSymName();
          }))
        backends.push_back(b.getSymName().str());
  }
  std::map<std::string, std::string> choices;
  for (const std::string &c : opts.choices) {
    size_t eq = c.find('=');
    choices[c.substr(0, eq)] = c.substr(eq + 1);
  }

  std::vector<ParallelConfig> points = rt::expandGrid(grid);
  if (backends.empty()) {
    Summary sum;
    sum.model = modelName;
    sum.configFile = configPath;
    for (const ConcreteParam *p : inst->allParams()) {
      ++sum.params;
      sum.elements += p->numElements();
    }
    sums.push_back(sum);
  }
  for (const std::string &b : backends) {
    std::unique_ptr<Backend> backend = Backend::lookup(model, b);
    if (!backend) {
      ok = false;
      continue;
    }
    std::unique_ptr<BoundModel> bm = bindModel(*inst, *backend, choices);
    if (!bm) {
      ok = false;
      continue;
    }
    const rt::ModelLayout &layout = bm->layout;
    auto at = [&](int source) -> Operation * {
      return source >= 0 ? bm->sources[size_t(source)] : model.getOperation();
    };
    auto finding = [&](std::string check, std::string message, int source,
                       const std::string &cfg, int related = -1) {
      Finding f{std::move(check), std::move(message), at(source), modelName,
                b, configPath, "", 0};
      if (related >= 0)
        f.related = at(related);
      add(std::move(f), cfg);
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

    Summary sum;
    sum.model = modelName;
    sum.configFile = configPath;
    sum.backend = b;
    // The model's parameters: FP8 block scales, which a backend may or may
    // not keep, are not counted.
    for (const rt::Param &p : layout.params)
      if (p.scaleOf < 0) {
        ++sum.params;
        sum.elements += p.numElements();
      }
    rt::CheckScope scope = rt::representativeLayers(layout);
    std::set<std::string> seen, namedPipelines;
    for (ParallelConfig point : points) {
      // Axes the backend lacks stay at 1.
      for (size_t i = 0; i < kMeshAxisNames.size(); ++i) {
        auto axis = static_cast<MeshAxis>(i);
        if (!llvm::is_contained(layout.mesh, axis)) {
          if (axis == MeshAxis::TP) point.tp = 1;
          if (axis == MeshAxis::PP) point.pp = 1, point.vpp = 1;
          if (axis == MeshAxis::EP) point.ep = 1;
          if (axis == MeshAxis::ETP) point.etp = 1;
          if (axis == MeshAxis::CP) point.cp = 1;
          if (axis == MeshAxis::DP) point.dp = 1;
        }
      }
      std::string cfg = point.str();
      if (!seen.insert(cfg).second)
        continue;
      ++sum.configs;
      ++checkedTriples;
      rt::Planner planner(layout, point);
      if (!planner.valid()) {
        if (sum.invalid.size() < 3)
          sum.invalid.push_back({cfg, planner.invalidReasons()});
        // A grid of one point asks for that configuration.
        if (points.size() == 1)
          for (const std::string &why : planner.invalidReasons())
            add({"parallel", cfg + " is not a valid configuration: " + why,
                 model, modelName, b, configPath, "", 0},
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
      std::string pipeline = std::to_string(point.pp) + "/" +
                             std::to_string(point.vpp) + "/" +
                             std::to_string(point.firstStageLayers.value_or(-1)) + "/" +
                             std::to_string(point.lastStageLayers.value_or(-1));
      if (namedPipelines.insert(pipeline).second)
        for (const rt::Problem &p : rt::checkNames(planner))
          finding(p.check, p.message, p.source, cfg, p.related);
    }
    sums.push_back(std::move(sum));
    bound.push_back(std::move(bm));
  }
  configs.push_back(std::move(config));
  insts.push_back(std::move(inst));
}

void CheckSession::checkCheckpoint(ModuleDeclOp model, Instantiation &inst,
                                   const std::string &configPath) {
  if (!checkpoint) {
    llvm::Expected<CheckpointContents> read =
        readCheckpointContents(opts.checkpoint);
    if (!read) {
      model.emitError() << llvm::toString(read.takeError());
      ok = false;
      return;
    }
    checkpoint = std::move(*read);
  }
  std::unique_ptr<Backend> backend =
      Backend::lookup(model, opts.checkpointBackend);
  if (!backend) {
    ok = false;
    return;
  }
  // Storage variants the options leave open are read from the checkpoint:
  // the combination under which it holds the most expected tensors.
  std::map<std::string, std::string> fixed;
  for (const std::string &c : opts.choices)
    fixed[c.substr(0, c.find('='))] = c.substr(c.find('=') + 1);
  std::vector<std::map<std::string, std::string>> combos = {{}};
  std::vector<std::string> detected;
  for (const auto &[name, options] : backend->choices()) {
    std::vector<std::map<std::string, std::string>> next;
    for (const auto &combo : combos)
      for (const std::string &o : options) {
        if (fixed.count(name) && fixed[name] != o)
          continue;
        next.push_back(combo);
        next.back()[name] = o;
      }
    combos = std::move(next);
    if (!fixed.count(name))
      detected.push_back(name);
  }
  std::unique_ptr<BoundModel> best;
  size_t bestPresent = 0;
  std::vector<size_t> present;
  for (const auto &combo : combos) {
    std::unique_ptr<BoundModel> bm = bindModel(inst, *backend, combo);
    if (!bm) {
      ok = false;
      return;
    }
    present.push_back(countPresent(*bm, *checkpoint));
    if (!best || present.back() > bestPresent)
      best = std::move(bm), bestPresent = present.back();
  }
  // A choice is detected when changing it alone changes what matches.
  auto decisive = [&](const std::string &name) {
    for (size_t a = 0; a < combos.size(); ++a)
      for (size_t b = 0; b < combos.size(); ++b) {
        bool onlyIt = true;
        for (const auto &[k, v] : combos[a])
          onlyIt &= (k == name) != (combos[b].at(k) == v);
        if (onlyIt && present[a] != present[b])
          return true;
      }
    return false;
  };
  std::string modelName = model.getSymName().str();
  for (CheckpointFinding &f :
       compareCheckpoint(*best, *checkpoint, model, configPath))
    add({std::move(f.check), std::move(f.message), f.at, modelName,
         opts.checkpointBackend, configPath, "", 0},
        "");

  Summary sum;
  sum.model = modelName;
  sum.configFile = configPath;
  for (const ConcreteParam *p : inst.allParams()) {
    ++sum.params;
    sum.elements += p->numElements();
  }
  size_t expected = rt::listTensors(best->layout, {}).size();
  sum.note = "checkpoint " + opts.checkpoint.path + ": " +
             std::to_string(checkpoint->size()) + " tensors, " +
             std::to_string(bestPresent) + " of the " +
             std::to_string(expected) + " " + opts.checkpointBackend +
             " expects";
  for (const std::string &name : detected)
    if (decisive(name))
      sum.note += ", " + name + "=" + best->layout.choices[name] + " (detected)";
  sums.push_back(std::move(sum));
  bound.push_back(std::move(best));
}

LogicalResult CheckSession::prepare(ModuleOp top) {
  if (prepared)
    return success(ok);
  prepared = true;
  std::map<std::string, std::vector<int64_t>> grid;
  if (opts.grid.empty())
    grid = rt::defaultGrid();
  else if (std::optional<std::string> err = parseGrid(opts.grid, grid)) {
    top.emitError() << *err;
    ok = false;
    return failure();
  }
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
