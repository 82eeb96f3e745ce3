//===- Plan.cpp - What one rank holds, as strided views -------------------===//

#include "mdl/Runtime/Model/Plan.h"
#include "mdl/Runtime/Base/Value.h"
#include "mdl/Runtime/Model/PlanCache.h"

#include <algorithm>
#include <cassert>
#include <functional>
#include <set>
#include <unordered_map>

using namespace mdl;
using namespace mdl::rt;

//===----------------------------------------------------------------------===//
// Splitting dimensions
//===----------------------------------------------------------------------===//

namespace {

/// How one split divides its atoms for rank `r` of `n`.
struct SplitResult {
  bool ok = true;
  std::string why;
  std::vector<Extent> atoms; // per atom of the split
};

std::string sizesText(const std::vector<int64_t> &sizes) {
  std::string s;
  for (size_t i = 0; i < sizes.size(); ++i)
    s += (i ? "x" : "") + std::to_string(sizes[i]);
  return s;
}

/// Splits the row-major index space of atoms `sizes` into n even chunks and
/// returns chunk r as a box; a chunk that is not a box (it straddles an
/// outer index) cannot be held by one rank.
SplitResult splitAtoms(const std::vector<int64_t> &sizes, int64_t n, int64_t r,
                       bool replicate, int64_t padMultiple) {
  SplitResult out;
  for (int64_t s : sizes)
    out.atoms.push_back({0, s, s});
  int64_t total = 1;
  for (int64_t s : sizes)
    total *= s;
  int64_t padded = total;
  if (padMultiple > 1)
    padded = (total + padMultiple - 1) / padMultiple * padMultiple;
  if (n == 1 && padded == total)
    return out;
  if (padded % n != 0) {
    if (replicate && n % total == 0) {
      // Each entry is held by n / total ranks.
      int64_t e = r / (n / total);
      for (size_t j = sizes.size(); j-- > 0;) {
        out.atoms[j] = {e % sizes[j], 1, 1};
        e /= sizes[j];
      }
      return out;
    }
    out.ok = false;
    out.why = std::to_string(n) + " does not divide " + std::to_string(padded);
    return out;
  }
  int64_t chunk = padded / n, start = r * chunk;
  if (padMultiple > 1) {
    // One atom, padded: the rank holds what is left of its chunk.
    int64_t lo = std::min(start, total);
    out.atoms[0] = {lo, std::min(chunk, total - lo), chunk};
    return out;
  }
  // Walk the atoms outermost first; inner = entries per index of atom j.
  for (size_t j = 0; j < sizes.size(); ++j) {
    int64_t inner = 1;
    for (size_t k = j + 1; k < sizes.size(); ++k)
      inner *= sizes[k];
    if (chunk >= inner) {
      if (chunk % inner != 0 || start % inner != 0) {
        out.ok = false;
        out.why = "its chunks of " + std::to_string(chunk) +
                  " are not whole rows of " + sizesText(sizes);
        return out;
      }
      int64_t lo = (start / inner) % sizes[j], count = chunk / inner;
      if (lo + count > sizes[j]) {
        out.ok = false;
        out.why = "its chunks straddle the dimensions " + sizesText(sizes);
        return out;
      }
      out.atoms[j] = {lo, count, count};
      return out; // inner atoms are whole
    }
    if (inner % chunk != 0) {
      out.ok = false;
      out.why = "its chunks of " + std::to_string(chunk) +
                " do not divide rows of " + sizesText(sizes);
      return out;
    }
    out.atoms[j] = {(start / inner) % sizes[j], 1, 1};
    start %= inner;
  }
  return out;
}

std::vector<int64_t> splitSizes(const Param &p, const Split &s) {
  std::vector<int64_t> sizes;
  for (const std::string &a : s.atoms) {
    int i = p.atomIndex(a);
    sizes.push_back(i < 0 ? 1 : p.sizes[i]);
  }
  return sizes;
}

int64_t rankOn(const RankContext &ctx, MeshAxis axis) {
  switch (axis) {
  case MeshAxis::TP: return ctx.tpRank;
  case MeshAxis::PP: return ctx.ppRank;
  case MeshAxis::EP: return ctx.epRank;
  case MeshAxis::ETP: return ctx.etpRank;
  case MeshAxis::CP:
  case MeshAxis::DP:
    return 0;
  }
  return 0;
}

/// A path with its stack indices replaced by `*`, to name a whole family of
/// parameters in one message: layers.3.attn.k -> layers.*.attn.k.
std::string generalize(const std::string &path) {
  std::string out, part;
  auto flush = [&] {
    bool digits = !part.empty() &&
                  std::all_of(part.begin(), part.end(),
                              [](char c) { return c >= '0' && c <= '9'; });
    out += digits ? "*" : part;
    part.clear();
  };
  for (char c : path) {
    if (c == '.') {
      flush();
      out += '.';
    } else {
      part += c;
    }
  }
  flush();
  return out;
}

} // namespace

//===----------------------------------------------------------------------===//
// Facts of a layout
//===----------------------------------------------------------------------===//

/// Splits that divide alike in every configuration: the same axis, atom
/// sizes, replication, padding, condition (equal `whenKey`s, equal
/// conditions) and reason not to split, of parameters that are alike
/// folded scales or not and whose splits read alike in messages.
struct SplitClass {
  const Split *first = nullptr; // its condition and padding
  std::vector<int64_t> sizes;
  std::string generalWhy;
  bool folded = false;
  /// The members that are not folded scales (0 when folded).
  int members = 0;
};

namespace {

struct LayoutFacts {
  /// Why the model is refused whatever the configuration (a tensor that
  /// names too many tensors), or "".
  std::string familyReason;
  std::vector<SplitClass> splitClasses; // in order of their first member
  /// Per parameter, per split: its class.
  std::vector<std::vector<int>> classOf;
  /// The generalized paths of the parameters no stage holds, sorted.
  std::vector<std::string> unplaced;
  /// Per tensor: tensorParams().
  std::vector<std::vector<int>> params;
};

/// A configuration's view of the split classes, each computed when first
/// asked.
struct Memo {
  struct Class {
    bool known = false;
    bool holds = false;  // its condition holds
    bool active = false; // it splits in the configuration
    int64_t n = 1, pad = 0;
    /// The chunk of each rank of the axis, once computed.
    std::vector<std::unique_ptr<SplitResult>> chunks;
  };
  std::vector<Class> classes;
};

bool sameConfig(const ParallelConfig &a, const ParallelConfig &b) {
  return a.tp == b.tp && a.pp == b.pp && a.ep == b.ep && a.etp == b.etp &&
         a.cp == b.cp && a.dp == b.dp && a.vpp == b.vpp && a.sp == b.sp &&
         a.firstStageLayers == b.firstStageLayers &&
         a.lastStageLayers == b.lastStageLayers;
}

LayoutFacts layoutFacts(const ModelLayout &m);

} // namespace

struct mdl::rt::PlanCache::Impl {
  explicit Impl(const ModelLayout &m) : m(m), facts(layoutFacts(m)) {}

  /// What configuration `cfg` gives.
  Memo &memo(const ParallelConfig &cfg) {
    if (last && sameConfig(last->first, cfg))
      return last->second;
    for (auto &c : configs)
      if (sameConfig(c->first, cfg))
        return (last = c.get())->second;
    configs.push_back(std::make_unique<std::pair<ParallelConfig, Memo>>());
    last = configs.back().get();
    last->first = cfg;
    last->second.classes.resize(facts.splitClasses.size());
    return last->second;
  }

  /// Split class `c` in configuration `cfg`.
  const Memo::Class &cls(const ParallelConfig &cfg, size_t c) {
    Memo::Class &k = memo(cfg).classes[c];
    if (!k.known) {
      const Split &s = *facts.splitClasses[c].first;
      k.known = true;
      k.n = cfg.size(s.axis);
      k.pad = s.padMultiple ? s.padMultiple(cfg) : 0;
      k.holds = s.holdsIn(cfg);
      k.active = !(k.n == 1 && k.pad <= 1) && k.holds;
      k.chunks.resize(size_t(std::max<int64_t>(k.n, 1)));
    }
    return k;
  }

  /// The chunk rank `r` of split class `c`'s axis holds in `cfg`.
  const SplitResult &chunk(const ParallelConfig &cfg, size_t c, int64_t r) {
    const Memo::Class &k = cls(cfg, c);
    std::unique_ptr<SplitResult> &out = memo(cfg).classes[c].chunks[size_t(r)];
    if (!out) {
      const SplitClass &sc = facts.splitClasses[c];
      out = std::make_unique<SplitResult>(splitAtoms(
          sc.sizes, k.n, r, sc.first->replicateWhenFewer, k.pad));
    }
    return *out;
  }

  const ModelLayout &m;
  LayoutFacts facts;
  std::vector<std::unique_ptr<std::pair<ParallelConfig, Memo>>> configs;
  std::pair<ParallelConfig, Memo> *last = nullptr;
};

namespace {
thread_local PlanCache *innermostCache = nullptr;
} // namespace

PlanCache::PlanCache(const ModelLayout &m)
    : impl(std::make_unique<Impl>(m)), outer(innermostCache) {
  innermostCache = this;
}

PlanCache::~PlanCache() { innermostCache = outer; }

PlanCache::Impl *PlanCache::of(const ModelLayout &m) {
  for (PlanCache *c = innermostCache; c; c = c->outer)
    if (&c->impl->m == &m)
      return c->impl.get();
  return nullptr;
}

namespace {
/// Why the model is refused whatever the configuration: a config with
/// absurd sizes must not make one entry name millions of tensors (listing
/// them would exhaust memory before any check). "" when none does.
std::string familyBound(const ModelLayout &m) {
  for (const TensorSpec &t : m.tensors) {
    if (std::none_of(t.name.begin(), t.name.end(), [](const NameSegment &s) {
          return s.kind == NameSegment::Family;
        }))
      continue;
    std::vector<int> params = tensorParams(t);
    if (params.empty())
      continue;
    const Param &p = m.params[params.front()];
    int64_t members = 1, layer = 0;
    std::set<std::string> seen;
    for (const NameSegment &seg : t.name) {
      if (seg.kind == NameSegment::LayerIndex)
        layer = seg.layer;
      int a = seg.kind == NameSegment::Family ? p.atomIndex(seg.atom) : -1;
      if (a < 0 || !seen.insert(seg.atom).second)
        continue;
      if (__builtin_mul_overflow(members, p.sizes[a], &members) ||
          members > kMaxFamilySize)
        return "tensor '" + renderName(t, layer) + "' names more than " +
               std::to_string(kMaxFamilySize) +
               " tensors: the config's sizes are out of bounds";
    }
  }
  return "";
}

LayoutFacts layoutFacts(const ModelLayout &m) {
  LayoutFacts facts;
  LayoutFacts *f = &facts;
  for (const TensorSpec &t : m.tensors)
    f->params.push_back(tensorParams(t));
  f->familyReason = familyBound(m);
  // Classes by a key that spells every field, strings with their lengths.
  std::unordered_map<std::string, int> classes;
  std::string key;
  auto field = [&](const std::string &text) {
    key += std::to_string(text.size());
    key += ':';
    key += text;
  };
  std::set<std::string> unplaced;
  f->classOf.resize(m.params.size());
  for (size_t i = 0; i < m.params.size(); ++i) {
    const Param &p = m.params[i];
    bool folded = foldedScale(m, p) || foldedMxfp4(m, p);
    for (const Split &s : p.splits) {
      std::vector<int64_t> sizes = splitSizes(p, s);
      std::string why = generalize(s.why);
      key.clear();
      key += std::to_string(int(s.axis));
      key += s.replicateWhenFewer ? 'r' : '-';
      key += s.padMultiple ? 'p' : '-';
      key += folded ? 'f' : '-';
      key += std::to_string(s.indivisibleAbove);
      key += '(';
      for (int64_t n : sizes) {
        key += std::to_string(n);
        key += ',';
      }
      key += ')';
      field(s.indivisible);
      field(s.whenKey);
      field(why);
      auto [it, fresh] = classes.try_emplace(key, int(f->splitClasses.size()));
      if (fresh) {
        SplitClass c;
        c.first = &s;
        c.sizes = std::move(sizes);
        c.generalWhy = std::move(why);
        c.folded = folded;
        f->splitClasses.push_back(std::move(c));
      }
      if (!folded)
        ++f->splitClasses[size_t(it->second)].members;
      f->classOf[i].push_back(it->second);
    }
    if (p.placement.kind == Placement::All)
      unplaced.insert(generalize(p.path));
  }
  f->unplaced.assign(unplaced.begin(), unplaced.end());
  return facts;
}
} // namespace

//===----------------------------------------------------------------------===//
// Pieces and local tensors
//===----------------------------------------------------------------------===//

int64_t Piece::numElements() const { return mdl::numElements(count); }

int64_t LocalTensor::numElements() const {
  return mdl::numElements(axesShape);
}

int64_t LocalTensor::familySize() const {
  int64_t n = 1;
  for (const auto &f : families)
    n *= f.second.count;
  return n;
}

std::string LocalTensor::name(const ModelLayout &m, int64_t member) const {
  std::vector<std::pair<std::string, int64_t>> index;
  for (size_t i = families.size(); i-- > 0;) {
    index.insert(index.begin(),
                 {families[i].first, member % families[i].second.count});
    member /= families[i].second.count;
  }
  return renderName(m.tensors[spec], localLayer, index);
}

std::vector<Piece> LocalTensor::memberPieces(const ModelLayout &m,
                                             int64_t member) const {
  if (families.empty())
    return pieces;
  std::vector<int64_t> index(families.size());
  for (size_t i = families.size(); i-- > 0;) {
    index[i] = member % families[i].second.count;
    member /= families[i].second.count;
  }
  std::vector<Piece> out = pieces;
  for (Piece &p : out) {
    const Param &param = m.params[p.param];
    for (size_t i = 0; i < families.size(); ++i) {
      int a = param.atomIndex(families[i].first);
      if (a < 0)
        continue;
      p.lo[a] = families[i].second.lo + index[i];
      p.count[a] = 1;
    }
  }
  return out;
}

//===----------------------------------------------------------------------===//
// Planner
//===----------------------------------------------------------------------===//

Planner::Planner(const ModelLayout &model, const ParallelConfig &config)
    : m(model), cfg(config) {
  validate();
}

void Planner::validate() {
  PlanCache::Impl *cache = PlanCache::of(m);
  const LayoutFacts *facts = cache ? &cache->facts : nullptr;
  auto add = [&](std::string r) {
    if (std::find(reasons.begin(), reasons.end(), r) == reasons.end())
      reasons.push_back(std::move(r));
  };
  for (size_t i = 0; i < kMeshAxisNames.size(); ++i) {
    auto axis = static_cast<MeshAxis>(i);
    int64_t n = cfg.size(axis);
    if (n < 1) {
      add(std::string(meshAxisName(axis)) + " must be at least 1");
      return;
    }
    if (n > 1 && std::find(m.mesh.begin(), m.mesh.end(), axis) == m.mesh.end())
      add("backend " + m.backend + " has no " +
          std::string(meshAxisName(axis)) + " axis");
  }
  if (cfg.vpp < 1) {
    add("vpp must be at least 1");
    return;
  }
  if (cfg.vpp > 1 && cfg.pp == 1)
    add("virtual pipeline stages need pp > 1");
  if (cfg.etp > 1 && cfg.tp % cfg.etp != 0)
    add("etp=" + std::to_string(cfg.etp) + " does not divide tp=" +
        std::to_string(cfg.tp) + ": expert-tensor ranks are laid on tensor "
        "ranks");

  // A config with absurd sizes must not make one entry name millions of
  // tensors (listing them would exhaust memory before any check): the
  // whole model is refused, never the entry skipped.
  std::string bound = facts ? facts->familyReason : familyBound(m);
  if (!bound.empty()) {
    add(bound);
    return;
  }

  // Splits: one reason per kind of parameter, with how many it affects.
  std::map<std::string, int> splitReasons;
  std::vector<std::string> order;
  for (size_t c = 0; facts && c < facts->splitClasses.size(); ++c) {
    const SplitClass &k = facts->splitClasses[c];
    const Split &s = *k.first;
    if (k.folded || cfg.size(s.axis) == 1)
      continue;
    const Memo::Class &v = cache->cls(cfg, c);
    if (!v.holds)
      continue;
    SplitResult r = cache->chunk(cfg, c, 0);
    if (!s.indivisible.empty() &&
        (s.indivisibleAbove <= 0 || v.n > s.indivisibleAbove))
      r.ok = false, r.why = s.indivisible;
    if (r.ok)
      continue;
    std::string key = std::string(meshAxisName(s.axis)) + "=" +
                      std::to_string(v.n) + " cannot split " + k.generalWhy +
                      ": " + r.why;
    if (!splitReasons.count(key))
      order.push_back(key);
    splitReasons[key] += k.members;
  }
  for (const Param &p : m.params) {
    if (facts)
      break;
    for (const Split &s : p.splits) {
      int64_t n = cfg.size(s.axis);
      if (n == 1 || foldedScale(m, p) || foldedMxfp4(m, p) || !s.holdsIn(cfg))
        continue;
      int64_t pad = s.padMultiple ? s.padMultiple(cfg) : 0;
      SplitResult r = splitAtoms(splitSizes(p, s), n, 0, s.replicateWhenFewer,
                                 pad);
      if (!s.indivisible.empty() &&
          (s.indivisibleAbove <= 0 || n > s.indivisibleAbove))
        r.ok = false, r.why = s.indivisible;
      if (r.ok)
        continue;
      std::string key = std::string(meshAxisName(s.axis)) + "=" +
                        std::to_string(n) + " cannot split " +
                        generalize(s.why) + ": " + r.why;
      if (!splitReasons.count(key))
        order.push_back(key);
      ++splitReasons[key];
    }
  }
  for (const std::string &k : order)
    add(k + (splitReasons[k] > 1
                 ? " (" + std::to_string(splitReasons[k]) + " parameters)"
                 : ""));

  // Pipeline placement.
  int64_t stages = cfg.pp * cfg.vpp;
  stageLayers.assign(size_t(std::max<int64_t>(stages, 1)), 0);
  if (stages == 1) {
    stageLayers[0] = m.stagedLayers;
  } else {
    if (!m.hasPipeline)
      add("model " + m.model + " declares no pipeline placement");
    std::set<std::string> unplaced;
    if (!facts)
      for (const Param &p : m.params)
        if (p.placement.kind == Placement::All)
          unplaced.insert(generalize(p.path));
    for (const std::string &u :
         facts ? facts->unplaced
               : std::vector<std::string>(unplaced.begin(), unplaced.end()))
      add("parameter " + u + " is not placed on a pipeline stage");
    int64_t layers = m.stagedLayers;
    bool uneven = cfg.firstStageLayers || cfg.lastStageLayers;
    if (uneven && cfg.vpp > 1) {
      add("uneven first or last stages cannot be combined with virtual "
          "stages");
    } else if (uneven) {
      int64_t first = cfg.firstStageLayers.value_or(-1);
      int64_t last = cfg.lastStageLayers.value_or(-1);
      int64_t fixed = (first >= 0 ? first : 0) + (last >= 0 ? last : 0);
      int64_t middle = stages - (first >= 0) - (last >= 0);
      int64_t rest = layers - fixed;
      if (first < -1 || last < -1 || rest < 0 ||
          (middle == 0 ? rest != 0 : rest % middle != 0)) {
        add("the " + std::to_string(layers) +
            " layers of the staged stack do not fit stages of " +
            (first >= 0 ? std::to_string(first) : "an even share") +
            " first and " + (last >= 0 ? std::to_string(last) : "an even share") +
            " last layers");
      } else {
        for (int64_t v = 0; v < stages; ++v)
          stageLayers[v] = middle ? rest / middle : 0;
        if (first >= 0)
          stageLayers[0] = first;
        if (last >= 0)
          stageLayers[stages - 1] = last;
      }
    } else if (layers % stages != 0) {
      add("pp*vpp=" + std::to_string(stages) + " does not divide the " +
          std::to_string(layers) + " layers of the staged stack");
    } else if (layers < stages) {
      add(std::to_string(stages) + " pipeline stages for " +
          std::to_string(layers) + " layers");
    } else {
      for (int64_t v = 0; v < stages; ++v)
        stageLayers[v] = layers / stages;
    }
  }
  for (const auto &req : m.requirements)
    if (std::optional<std::string> why = req(cfg))
      add(*why);
}

std::vector<RankContext> Planner::ranks() const {
  // Ranks are numbered tp fastest, then ep, then pp.
  std::vector<RankContext> out;
  for (int64_t r = 0, n = numRanks(cfg); r < n; ++r)
    for (RankContext &ctx : rankContexts(cfg, r))
      out.push_back(std::move(ctx));
  return out;
}

Extent Planner::extent(int param, const std::string &atom,
                       const RankContext &ctx) const {
  const Param &p = m.params[param];
  int a = p.atomIndex(atom);
  if (a < 0)
    return {};
  Extent e{0, p.sizes[a], p.sizes[a]};
  if (PlanCache::Impl *cache = PlanCache::of(m)) {
    const LayoutFacts *facts = &cache->facts;
    for (size_t j = 0; j < p.splits.size(); ++j) {
      const Split &s = p.splits[j];
      auto it = std::find(s.atoms.begin(), s.atoms.end(), atom);
      if (it == s.atoms.end())
        continue;
      size_t c = size_t(facts->classOf[size_t(param)][j]);
      if (!cache->cls(cfg, c).active)
        continue;
      const SplitResult &r = cache->chunk(cfg, c, rankOn(ctx, s.axis));
      if (r.ok)
        e = r.atoms[size_t(it - s.atoms.begin())];
    }
    return e;
  }
  for (const Split &s : p.splits) {
    auto it = std::find(s.atoms.begin(), s.atoms.end(), atom);
    if (it == s.atoms.end())
      continue;
    int64_t n = cfg.size(s.axis);
    int64_t pad = s.padMultiple ? s.padMultiple(cfg) : 0;
    if ((n == 1 && pad <= 1) || !s.holdsIn(cfg))
      continue;
    SplitResult r = splitAtoms(splitSizes(p, s), n, rankOn(ctx, s.axis),
                               s.replicateWhenFewer, pad);
    if (r.ok)
      e = r.atoms[size_t(it - s.atoms.begin())];
  }
  return e;
}

int64_t Planner::firstLayerOf(int64_t stage) const {
  int64_t first = 0;
  for (int64_t v = 0; v < stage && v < int64_t(stageLayers.size()); ++v)
    first += stageLayers[v];
  return first;
}

int64_t Planner::stageOfLayer(int64_t layer) const {
  int64_t start = 0;
  for (size_t v = 0; v < stageLayers.size(); ++v) {
    if (layer < start + stageLayers[v])
      return int64_t(v);
    start += stageLayers[v];
  }
  return int64_t(stageLayers.size()) - 1;
}

bool Planner::placedOn(const Placement &p, const RankContext &ctx) const {
  int64_t stages = cfg.pp * cfg.vpp;
  int64_t stage = ctx.chunk * cfg.pp + ctx.ppRank;
  switch (p.kind) {
  case Placement::All:
    return true;
  case Placement::First:
    return stage == 0;
  case Placement::Last:
    return stage == stages - 1;
  case Placement::Layer:
    return stageOfLayer(p.layer) == stage;
  }
  return true;
}

Placement Planner::placementOf(const TensorSpec &t) const {
  if (t.on)
    return *t.on;
  if (PlanCache::Impl *cache = PlanCache::of(m)) {
    const LayoutFacts *facts = &cache->facts;
    const std::vector<int> &params = facts->params[size_t(&t - m.tensors.data())];
    return params.empty() ? Placement() : m.params[params.front()].placement;
  }
  std::vector<int> params = tensorParams(t);
  return params.empty() ? Placement() : m.params[params.front()].placement;
}

int64_t Planner::localLayerOf(const TensorSpec &t) const {
  for (const NameSegment &s : t.name)
    if (s.kind == NameSegment::LayerIndex)
      return cfg.pp * cfg.vpp > 1 ? s.layer - firstLayerOf(stageOfLayer(s.layer))
                                  : s.layer;
  return 0;
}

std::optional<std::string> Planner::tensorName(int spec,
                                               const RankContext &ctx) const {
  const TensorSpec &t = m.tensors[spec];
  PlanCache::Impl *cache = PlanCache::of(m);
  const LayoutFacts *facts = cache ? &cache->facts : nullptr;
  if (!placedOn(placementOf(t), ctx) || (t.when && !t.when(ctx)) ||
      (facts ? facts->params[size_t(spec)].empty() : tensorParams(t).empty()))
    return std::nullopt;
  return renderName(t, localLayerOf(t));
}

bool Planner::tensor(int spec, const RankContext &ctx, LocalTensor &out,
                     std::vector<Problem> *problems) const {
  const TensorSpec &t = m.tensors[spec];
  auto problem = [&](const char *check, std::string message) {
    if (problems)
      problems->push_back({check, std::move(message), t.source});
  };
  if (!placedOn(placementOf(t), ctx))
    return false;
  if (t.when && !t.when(ctx))
    return false;

  out = LocalTensor();
  out.spec = spec;
  PlanCache::Impl *cache = PlanCache::of(m);
  const LayoutFacts *facts = cache ? &cache->facts : nullptr;
  std::vector<int> own;
  if (!facts)
    own = tensorParams(t);
  const std::vector<int> &params = facts ? facts->params[size_t(spec)] : own;
  if (params.empty())
    return false;

  out.localLayer = localLayerOf(t);
  // The family atoms and the rank's range of each.
  for (const NameSegment &s : t.name) {
    if (s.kind == NameSegment::Family &&
        std::none_of(out.families.begin(), out.families.end(),
                     [&](const auto &f) { return f.first == s.atom; }))
      out.families.push_back({s.atom, extent(params.front(), s.atom, ctx)});
  }
  // One piece per part: lay out the axes with that part's parameter.
  // The name, for messages alone.
  std::string rendered;
  auto name = [&]() -> const std::string & {
    if (rendered.empty())
      rendered = renderName(t, out.localLayer);
    return rendered;
  };
  // A config with absurd sizes must not make one entry name millions of
  // tensors (listing them would exhaust memory before any check).
  int64_t members = 1;
  for (const auto &f : out.families)
    if (__builtin_mul_overflow(members, f.second.count, &members) ||
        members > kMaxFamilySize) {
      problem("coverage", "tensor '" + name() + "' names more than " +
                              std::to_string(kMaxFamilySize) +
                              " tensors: the config's sizes are out of bounds");
      return false;
    }

  std::vector<std::vector<int64_t>> shapes;
  for (int param : params) {
    const Param &p = m.params[param];
    auto size = [&](const std::string &atom) {
      return extent(param, atom, ctx).padded;
    };
    // Sizes use the part's own parameter for its own shape, and the
    // part being laid out for shared terms.
    std::function<int64_t(const Term &, int)> termSz;
    // A part's size, with its own parameter (a group: its first one) for
    // the dimensions it shares.
    auto partSz = [&](const Term::Part &pt) {
      int owner = pt.isGroup() ? partParams(pt).front() : pt.param;
      int64_t k = 1;
      for (const Term &c : pt.shape)
        k *= termSz(c, owner);
      return k;
    };
    termSz = [&](const Term &term, int owner) -> int64_t {
      switch (term.kind) {
      case Term::Atom:
        return extent(owner, term.atom, ctx).padded;
      case Term::Unit:
        return 1;
      case Term::Product: {
        int64_t n = 1;
        for (const Term &c : term.children)
          n *= termSz(c, owner);
        return n;
      }
      case Term::Parts: {
        int64_t n = 0;
        for (const Term::Part &pt : term.parts)
          n += partSz(pt);
        return n;
      }
      }
      return 0;
    };
    std::vector<int64_t> axisSizes;
    for (const auto &axis : t.axes) {
      int64_t n = 1;
      for (const Term &term : axis)
        n *= termSz(term, param);
      axisSizes.push_back(n);
    }
    shapes.push_back(axisSizes);

    Piece piece;
    piece.param = param;
    piece.stride.assign(p.atoms.size(), -1);
    // Places the terms of a row-major product whose last element has
    // stride `stride`.
    std::function<void(const std::vector<Term> &, int64_t)> place =
        [&](const std::vector<Term> &terms, int64_t stride) {
          for (size_t j = terms.size(); j-- > 0;) {
            const Term &term = terms[j];
            switch (term.kind) {
            case Term::Atom: {
              int a = p.atomIndex(term.atom);
              if (a < 0)
                break; // reported below as a missing dimension
              if (piece.stride[a] != -1)
                problem("coverage", "dimension " + term.atom + " of " +
                                        p.path + " appears twice in tensor '" +
                                        name() + "'");
              piece.stride[a] = stride;
              break;
            }
            case Term::Unit:
              break;
            case Term::Product:
              place(term.children, stride);
              break;
            case Term::Parts: {
              // Find the part holding this parameter (itself, or a group
              // around it); the parts before it come first.
              int64_t offset = 0;
              for (const Term::Part &pt : term.parts) {
                std::vector<int> inside = partParams(pt);
                if (std::find(inside.begin(), inside.end(), param) !=
                    inside.end()) {
                  piece.base += offset * stride;
                  place(pt.shape, stride);
                  break;
                }
                offset += partSz(pt);
              }
              break;
            }
            }
            stride *= termSz(term, param);
          }
        };
    int64_t axisStride = 1;
    for (size_t a = t.axes.size(); a-- > 0;) {
      place(t.axes[a], axisStride);
      axisStride *= axisSizes[a];
    }
    for (const auto &f : out.families) {
      int a = p.atomIndex(f.first);
      if (a < 0) {
        problem("coverage", "tensor '" + name() + "' is indexed by " + f.first +
                                ", which " + p.path + " does not have");
        continue;
      }
      if (piece.stride[a] != -1)
        problem("coverage", "dimension " + f.first + " of " + p.path +
                                " indexes tensor '" + name() +
                                "' and is one of its axes too");
      piece.stride[a] = 0;
    }
    for (size_t a = 0; a < p.atoms.size(); ++a) {
      Extent e = extent(param, p.atoms[a], ctx);
      if (piece.stride[a] == -1) {
        problem("coverage", "dimension " + p.atoms[a] + " of " + p.path +
                                " is missing from tensor '" + name() +
                                "': the tensor holds only part of it");
        piece.stride[a] = 0;
        e = {0, 1, 1};
      }
      piece.lo.push_back(e.lo);
      piece.count.push_back(e.count);
    }
    (void)size;
    out.pieces.push_back(std::move(piece));
  }
  for (size_t i = 1; i < shapes.size(); ++i)
    if (shapes[i] != shapes[0])
      problem("fused-parts",
              "the parts of tensor '" + name() + "' disagree on its shape: " +
                  sizesText(shapes[0]) + " with " +
                  m.params[params[0]].path + " but " + sizesText(shapes[i]) +
                  " with " + m.params[params[i]].path);
  out.axesShape = shapes.front();

  // The stored shape, and what a view claims about it.
  out.shape = out.axesShape;
  if (!t.view.empty()) {
    out.shape.clear();
    int64_t product = 1;
    for (const TensorSpec::ViewAxis &v : t.view) {
      int64_t n = viewAxisSize(v, [&](const std::string &atom) {
        return extent(params.front(), atom, ctx).padded;
      });
      out.shape.push_back(n);
      product *= n;
    }
    if (product != out.numElements())
      problem("shape", "the view of tensor '" + name() + "' has " +
                           std::to_string(product) + " elements (" +
                           sizesText(out.shape) + ") but its axes hold " +
                           std::to_string(out.numElements()) + " (" +
                           sizesText(out.axesShape) + ")");
  }

  // Parts of one tensor share a dtype unless the tensor names its own.
  out.dtype = t.stored ? *t.stored : m.params[params.front()].dtype;
  if (!t.stored)
    for (int param : params)
      if (m.params[param].dtype != out.dtype)
        problem("shape", "tensor '" + name() + "' holds parameters of dtypes " +
                             std::string(specName(out.dtype)) + " and " +
                             std::string(specName(m.params[param].dtype)) +
                             "; say which it stores with `as`");
  return true;
}

int64_t mdl::rt::numRanks(const ParallelConfig &config) {
  return config.tp * config.pp * config.ep;
}

std::vector<RankContext> mdl::rt::rankContexts(const ParallelConfig &config,
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

std::vector<RankTensor> mdl::rt::rankTensors(const ModelLayout &m,
                                             const ParallelConfig &config,
                                             int64_t rank) {
  return rankTensors(Planner(m, config), rank);
}

std::vector<RankTensor> mdl::rt::rankTensors(const Planner &planner,
                                             int64_t rank,
                                             const std::vector<bool> *skip) {
  std::vector<RankTensor> out;
  const ModelLayout &m = planner.model();
  const ParallelConfig &config = planner.config();
  for (const RankContext &ctx : rankContexts(config, rank)) {
    std::string prefix =
        config.vpp > 1 ? "model" + std::to_string(ctx.chunk) + "." : "";
    for (const LocalTensor &lt : planner.tensors(ctx, nullptr, skip))
      for (int64_t i = 0; i < lt.familySize(); ++i) {
        RankTensor t;
        t.name = prefix + lt.name(m, i);
        t.shape = lt.shape;
        t.dtype = lt.dtype;
        t.copy = m.tensors[lt.spec].copy;
        t.offset = m.tensors[lt.spec].offset;
        t.negExp = m.tensors[lt.spec].negExp;
        t.dequantized = m.tensors[lt.spec].dequantized;
        // A zero tensor holds no slice: it is written as zeros.
        if (!m.tensors[lt.spec].zero)
          t.pieces = lt.memberPieces(m, i);
        out.push_back(std::move(t));
      }
  }
  return out;
}

std::vector<TensorListing> mdl::rt::listTensors(const ModelLayout &m,
                                                const RankContext &ctx) {
  Planner planner(m, ctx.config);
  std::vector<TensorListing> out;
  for (const LocalTensor &lt : planner.tensors(ctx, nullptr))
    for (int64_t i = 0; i < lt.familySize(); ++i)
      out.push_back({lt.name(m, i), lt.shape, lt.dtype, &m.tensors[lt.spec]});
  return out;
}

std::vector<LocalTensor> Planner::tensors(const RankContext &ctx,
                                          std::vector<Problem> *problems,
                                          const std::vector<bool> *skip) const {
  std::vector<LocalTensor> out;
  for (size_t i = 0; i < m.tensors.size(); ++i) {
    if (skip && (*skip)[i])
      continue;
    LocalTensor t;
    if (tensor(int(i), ctx, t, problems))
      out.push_back(std::move(t));
  }
  return out;
}

//===----------------------------------------------------------------------===//
// Grids
//===----------------------------------------------------------------------===//

std::map<std::string, std::vector<int64_t>> mdl::rt::defaultGrid() {
  return {{"tp", {1, 2, 4, 8}},
          {"pp", {1, 2, 4}},
          {"ep", {1, 2, 4, 8}},
          {"etp", {1, 2}}};
}

std::vector<ParallelConfig>
mdl::rt::expandGrid(const std::map<std::string, std::vector<int64_t>> &axes) {
  std::vector<ParallelConfig> out{ParallelConfig()};
  for (const auto &[name, values] : axes) {
    std::vector<ParallelConfig> next;
    for (const ParallelConfig &c : out)
      for (int64_t v : values) {
        ParallelConfig d = c;
        for (auto [axis, size] : kParallelSizes)
          if (name == axis)
            d.*size = v;
        next.push_back(d);
      }
    out = std::move(next);
  }
  return out;
}
