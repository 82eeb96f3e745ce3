//===- Generated.cpp - What generated code offers its users ---------------===//

#include "mdl/Runtime/Generated.h"

#include <algorithm>
#include <set>

using namespace mdl;
using namespace mdl::rt;

TermDecl mdl::rt::atom(std::string name) {
  TermDecl t;
  t.atom = std::move(name);
  return t;
}

TermDecl mdl::rt::unit() {
  TermDecl t;
  t.kind = TermDecl::Unit;
  return t;
}

TermDecl mdl::rt::product(std::vector<TermDecl> children) {
  TermDecl t;
  t.kind = TermDecl::Product;
  t.children = std::move(children);
  return t;
}

TermDecl mdl::rt::parts(std::vector<TermDecl::Part> parts) {
  TermDecl t;
  t.kind = TermDecl::Parts;
  t.parts = std::move(parts);
  return t;
}

//===----------------------------------------------------------------------===//
// Registry
//===----------------------------------------------------------------------===//

static std::vector<const Generated *> &registryStorage() {
  static std::vector<const Generated *> units;
  return units;
}

Registration::Registration(const Generated &g) {
  registryStorage().push_back(&g);
}

const std::vector<const Generated *> &mdl::rt::registry() {
  return registryStorage();
}

const Generated *mdl::rt::findGenerated(const std::string &model,
                                        const std::string &backend) {
  auto norm = [](std::string s) {
    std::replace(s.begin(), s.end(), '-', '_');
    return s;
  };
  for (const Generated *g : registry())
    if (g->model.name == norm(model) && g->backend.name == norm(backend))
      return g;
  return nullptr;
}

//===----------------------------------------------------------------------===//
// Binding
//===----------------------------------------------------------------------===//

std::unique_ptr<Binding> Binding::load(const ModelDecl &model,
                                       const BackendDecl &backend,
                                       const std::string &configPath,
                                       const LoadOptions &options,
                                       std::string &error) {
  std::optional<HFConfig> config = HFConfig::load(configPath, error);
  if (!config)
    return nullptr;
  for (const auto &[key, value] : options.overrides)
    config->addOverride(key, value);
  std::shared_ptr<Model> instance = Model::create(model, *config, error);
  if (!instance)
    return nullptr;
  return bind(std::move(instance), backend, options.choices, error);
}

std::unique_ptr<Binding>
Binding::bind(std::shared_ptr<Model> model, const BackendDecl &backend,
              const std::map<std::string, std::string> &choices,
              std::string &error) {
  std::optional<BoundLayout> bound = bindModel(*model, backend, choices, error);
  if (!bound)
    return nullptr;
  auto b = std::unique_ptr<Binding>(new Binding());
  b->instance = std::move(model);
  b->backendDecl = &backend;
  b->bound = std::move(*bound);
  return b;
}

std::vector<std::string> Binding::validate(const ParallelConfig &config) const {
  return Planner(bound.layout, config).invalidReasons();
}

int64_t Binding::numRanks(const ParallelConfig &config) {
  return config.tp * config.pp * config.ep;
}

std::vector<RankContext> Binding::contexts(const ParallelConfig &config,
                                           int64_t rank) {
  std::vector<RankContext> out;
  int64_t tp = rank % config.tp, rest = rank / config.tp;
  int64_t ep = rest % config.ep, pp = rest / config.ep;
  for (int64_t c = 0; c < config.vpp; ++c) {
    RankContext ctx;
    ctx.config = config;
    ctx.tpRank = tp;
    ctx.epRank = ep;
    ctx.ppRank = pp;
    ctx.chunk = c;
    ctx.etpRank = config.etp > 1 ? tp % config.etp : 0;
    out.push_back(ctx);
  }
  return out;
}

std::vector<RankTensor> Binding::rankTensors(const ParallelConfig &config,
                                             int64_t rank) const {
  std::vector<RankTensor> out;
  const ModelLayout &m = bound.layout;
  Planner planner(m, config);
  for (const RankContext &ctx : contexts(config, rank)) {
    std::string prefix =
        config.vpp > 1 ? "model" + std::to_string(ctx.chunk) + "." : "";
    for (const LocalTensor &lt : planner.tensors(ctx, nullptr))
      for (int64_t i = 0; i < lt.familySize(); ++i) {
        RankTensor t;
        t.name = prefix + lt.name(m, i);
        t.shape = lt.shape;
        t.dtype = lt.dtype;
        t.copy = m.tensors[lt.spec].copy;
        t.offset = m.tensors[lt.spec].offset;
        t.pieces = lt.memberPieces(m, i);
        out.push_back(std::move(t));
      }
  }
  return out;
}

std::string Binding::rankDir(const ParallelConfig &config,
                             int64_t rank) const {
  RankContext ctx = contexts(config, rank).front();
  if (!backendDecl->rankDir) {
    std::string tp = std::to_string(ctx.tpRank);
    return "rank_" + std::string(tp.size() < 2 ? 2 - tp.size() : 0, '0') + tp;
  }
  Eval e(instance->root(), &ctx, &bound.layout.choices);
  try {
    return e.present(backendDecl->rankDir(e)).s;
  } catch (EvalError &) {
    return "rank_" + std::to_string(rank);
  }
}

//===----------------------------------------------------------------------===//
// LoRA
//===----------------------------------------------------------------------===//

namespace {

/// The module of a weight tensor: its name without the last component
/// (`.weight`, or `.weight3` for a per-expert tensor).
std::string moduleOf(const std::string &tensor) {
  size_t dot = tensor.rfind('.');
  return dot == std::string::npos ? tensor : tensor.substr(0, dot);
}

const ClassDecl *classFor(const BackendDecl &b, const std::string &role) {
  for (const ClassDecl &c : b.classes)
    if (c.role == role)
      return &c;
  return nullptr;
}

} // namespace

std::vector<LoraTarget> mdl::rt::loraTable(const Binding &binding,
                                           const ParallelConfig &config,
                                           int64_t rank, int64_t r) {
  const ModelLayout &m = binding.layout();
  const BoundLayout &bound = binding.boundLayout();
  std::vector<RankTensor> tensors = binding.rankTensors(config, rank);
  // Modules that also hold a parameter that is no linear's: a fused norm.
  std::set<std::string> withNorm;
  for (const RankTensor &t : tensors)
    for (const Piece &pc : t.pieces)
      if (!bound.params[size_t(pc.param)]->decl->linear)
        withNorm.insert(moduleOf(t.name));
  std::vector<LoraTarget> out;
  for (const RankTensor &t : tensors) {
    if (t.copy || t.pieces.empty())
      continue;
    bool linear = std::all_of(t.pieces.begin(), t.pieces.end(),
                              [&](const Piece &pc) {
                                const ParamInstance *p =
                                    bound.params[size_t(pc.param)];
                                return p->decl->linear && !p->bias;
                              });
    if (!linear)
      continue;
    const ParamInstance &first = *bound.params[size_t(t.pieces[0].param)];
    LoraTarget target;
    target.module = moduleOf(t.name);
    bool grouped = !first.expert.empty();
    std::string style = first.style.empty() ? "replicated" : first.style;
    if (style == "vocab")
      target.role = "embedding";
    else if (grouped)
      target.role = style == "row" ? "grouped_row" : "grouped_column";
    else if (style == "column" && withNorm.count(target.module))
      target.role = "column_norm";
    else
      target.role = style;
    const ClassDecl *cls = classFor(binding.backend(), target.role);
    if (!cls && grouped)
      cls = classFor(binding.backend(), "grouped");
    if (cls) {
      auto prop = [&](const char *k, const char *dflt) {
        auto it = cls->properties.find(k);
        return it == cls->properties.end() ? std::string(dflt) : it->second;
      };
      if (prop("lora", "true") == "false")
        continue;
      target.baseClass = cls->name;
      target.sizes = prop("sizes", "global");
      target.returns = prop("returns", "out");
      target.inputIsParallel = prop("input_is_parallel", "false") == "true";
    } else {
      target.sizes = "global";
    }
    // Sizes: the sum of the parts' outputs, the shared input.
    int64_t outGlobal = 0, outLocal = 0, inGlobal = 1, inLocal = 1;
    for (size_t k = 0; k < t.pieces.size(); ++k) {
      const Piece &pc = t.pieces[k];
      const ParamInstance &p = *bound.params[size_t(pc.param)];
      target.params.push_back(p.path);
      size_t lead = p.expert.empty() ? 0 : 1;
      int outAxes = p.decl->outAxes;
      int64_t og = 1, ol = 1, ig = 1, il = 1;
      size_t atom = 0;
      for (size_t a = 0; a < p.axes.size(); ++a)
        for (size_t j = 0; j < p.axes[a].size(); ++j, ++atom) {
          if (a < lead)
            continue;
          bool isOut = a < lead + size_t(outAxes);
          (isOut ? og : ig) *= p.sizes[atom];
          (isOut ? ol : il) *= pc.count[atom];
        }
      outGlobal += og;
      outLocal += ol;
      if (k == 0)
        inGlobal = ig, inLocal = il;
    }
    bool global = target.sizes != "local";
    target.inFeatures = global ? inGlobal : inLocal;
    target.outFeatures = global ? outGlobal : outLocal;
    target.loraA = {r, inLocal};
    target.loraB = {outLocal, r};
    target.sharded = outLocal < outGlobal  ? "B"
                     : inLocal < inGlobal ? "A"
                                          : "none";
    if (config.sp && config.tp > 1) {
      if (target.sharded != "A")
        target.allReduceGrads.push_back("A");
      if (target.sharded != "B")
        target.allReduceGrads.push_back("B");
    }
    out.push_back(std::move(target));
  }
  (void)m;
  return out;
}

std::vector<std::string> mdl::rt::allLinearTargets(const Binding &binding) {
  ParallelConfig one;
  std::set<std::string> names;
  for (const LoraTarget &t : loraTable(binding, one, 0))
    if (t.role != "embedding") {
      size_t dot = t.module.rfind('.');
      names.insert(dot == std::string::npos ? t.module
                                            : t.module.substr(dot + 1));
    }
  return {names.begin(), names.end()};
}
