//===- Plan.cpp - What one rank holds, as strided views -------------------===//

#include "mdl/Runtime/Plan.h"
#include "mdl/Runtime/Value.h"

#include <algorithm>
#include <cassert>
#include <functional>
#include <set>
#include <sstream>

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
// Pieces and local tensors
//===----------------------------------------------------------------------===//

int64_t Piece::numElements() const {
  int64_t n = 1;
  for (int64_t c : count)
    n *= c;
  return n;
}

int64_t LocalTensor::numElements() const {
  int64_t n = 1;
  for (int64_t s : axesShape)
    n *= s;
  return n;
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
  for (const TensorSpec &t : m.tensors) {
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
          members > kMaxFamilySize) {
        add("tensor '" + renderName(t, layer) + "' names more than " +
            std::to_string(kMaxFamilySize) +
            " tensors: the config's sizes are out of bounds");
        return;
      }
    }
  }

  // Splits: one reason per kind of parameter, with how many it affects.
  std::map<std::string, int> splitReasons;
  std::vector<std::string> order;
  for (const Param &p : m.params)
    for (const Split &s : p.splits) {
      int64_t n = cfg.size(s.axis);
      if (n == 1 || foldedScale(m, p))
        continue;
      int64_t pad = s.padMultiple ? s.padMultiple(cfg) : 0;
      SplitResult r = splitAtoms(splitSizes(p, s), n, 0, s.replicateWhenFewer,
                                 pad);
      if (!s.indivisible.empty())
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
    for (const Param &p : m.params)
      if (p.placement.kind == Placement::All)
        unplaced.insert(generalize(p.path));
    for (const std::string &u : unplaced)
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
  for (const Split &s : p.splits) {
    auto it = std::find(s.atoms.begin(), s.atoms.end(), atom);
    if (it == s.atoms.end())
      continue;
    int64_t n = cfg.size(s.axis);
    int64_t pad = s.padMultiple ? s.padMultiple(cfg) : 0;
    if (n == 1 && pad <= 1)
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
  if (!placedOn(placementOf(t), ctx) || (t.when && !t.when(ctx)) ||
      tensorParams(t).empty())
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
  std::vector<int> params = tensorParams(t);
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
  std::string name = renderName(t, out.localLayer);
  // A config with absurd sizes must not make one entry name millions of
  // tensors (listing them would exhaust memory before any check).
  int64_t members = 1;
  for (const auto &f : out.families)
    if (__builtin_mul_overflow(members, f.second.count, &members) ||
        members > kMaxFamilySize) {
      problem("coverage", "tensor '" + name + "' names more than " +
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
                                        name + "'");
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
        problem("coverage", "tensor '" + name + "' is indexed by " + f.first +
                                ", which " + p.path + " does not have");
        continue;
      }
      if (piece.stride[a] != -1)
        problem("coverage", "dimension " + f.first + " of " + p.path +
                                " indexes tensor '" + name +
                                "' and is one of its axes too");
      piece.stride[a] = 0;
    }
    for (size_t a = 0; a < p.atoms.size(); ++a) {
      Extent e = extent(param, p.atoms[a], ctx);
      if (piece.stride[a] == -1) {
        problem("coverage", "dimension " + p.atoms[a] + " of " + p.path +
                                " is missing from tensor '" + name +
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
              "the parts of tensor '" + name + "' disagree on its shape: " +
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
      problem("shape", "the view of tensor '" + name + "' has " +
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
        problem("shape", "tensor '" + name + "' holds parameters of dtypes " +
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
  std::vector<RankTensor> out;
  Planner planner(m, config);
  for (const RankContext &ctx : rankContexts(config, rank)) {
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
        t.dequantized = m.tensors[lt.spec].dequantized;
        t.pieces = lt.memberPieces(m, i);
        out.push_back(std::move(t));
      }
  }
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
// Checks
//===----------------------------------------------------------------------===//

namespace {

/// Whether two boxes of one parameter intersect.
bool overlaps(const Piece &a, const Piece &b) {
  for (size_t i = 0; i < a.lo.size(); ++i)
    if (a.lo[i] + a.count[i] <= b.lo[i] || b.lo[i] + b.count[i] <= a.lo[i])
      return false;
  return true;
}

/// Checks a view's claims: a view axis written as a dimension must be that
/// dimension in the storage, or reading it so reorders named dimensions.
void checkView(const ModelLayout &m, const LocalTensor &lt,
               std::vector<Problem> &problems) {
  const TensorSpec &t = m.tensors[lt.spec];
  if (t.view.empty() || lt.pieces.empty())
    return;
  const Piece &piece = lt.pieces.front();
  const Param &p = m.params[piece.param];
  int64_t stride = 1;
  std::vector<int64_t> viewStride(lt.shape.size());
  for (size_t k = lt.shape.size(); k-- > 0;) {
    viewStride[k] = stride;
    stride *= lt.shape[k];
  }
  // The storage's atoms from outermost to innermost.
  std::vector<int> order;
  for (size_t a = 0; a < p.atoms.size(); ++a)
    if (piece.stride[a] > 0)
      order.push_back(int(a));
  std::sort(order.begin(), order.end(), [&](int x, int y) {
    return piece.stride[x] > piece.stride[y];
  });
  std::string stored = "(";
  for (size_t i = 0; i < order.size(); ++i)
    stored += (i ? ", " : "") + p.atoms[order[i]];
  stored += ")";
  for (size_t k = 0; k < t.view.size(); ++k) {
    const TensorSpec::ViewAxis &v = t.view[k];
    if (!v.claim)
      continue;
    // The claimed atoms, innermost first, must have exactly the strides of
    // a row-major block starting at the view axis's stride.
    int64_t expect = viewStride[k];
    bool ok = true;
    for (size_t i = v.atoms.size(); i-- > 0;) {
      int a = p.atomIndex(v.atoms[i]);
      // A single entry sits anywhere: its stride says nothing.
      if (a < 0 || (piece.stride[a] != expect && piece.count[a] != 1)) {
        ok = false;
        break;
      }
      expect *= piece.count[a];
    }
    // The first contradicted claim is the one to fix.
    if (!ok) {
      problems.push_back(
          {"reinterpret",
           "view axis " + std::to_string(k) + " of tensor '" +
               lt.name(m) + "' claims dimension " + v.spelling +
               ", but the tensor stores " + stored +
               ": reading it as a view with that axis would reorder named "
               "dimensions; write the storage order in the axes, and sizes "
               "that claim nothing with size()",
           t.source});
      return;
    }
  }
}

/// Checks `split N by axis`: an even chunk of axis N must be what splitting
/// each part on its own gives.
void checkSplit(const Planner &planner, const LocalTensor &lt,
                std::vector<Problem> &problems) {
  const ModelLayout &m = planner.model();
  const TensorSpec &t = m.tensors[lt.spec];
  if (!t.splitAxis)
    return;
  const std::vector<Term> &axis = t.axes[size_t(*t.splitAxis)];
  const Term *lead = axis.empty() ? nullptr : &axis.front();
  while (lead && lead->kind == Term::Product && !lead->children.empty())
    lead = &lead->children.front();
  std::string name = lt.name(m);
  if (lead && lead->kind == Term::Parts) {
    std::string parts;
    for (const Piece &pc : lt.pieces)
      parts += (parts.empty() ? "" : ", ") + m.params[pc.param].path;
    problems.push_back(
        {"fused-split",
         "an even split of axis " + std::to_string(*t.splitAxis) +
             " of tensor '" + name + "' by " + meshAxisName(t.splitBy).data() +
             " cuts across its parts (" + parts +
             "); split each part on its own, as the rank's view does",
         t.source});
    return;
  }
  for (int param : tensorParams(t)) {
    const Param &p = m.params[param];
    bool splitsLead = false;
    for (const Split &s : p.splits)
      if (s.axis == t.splitBy && lead && lead->kind == Term::Atom &&
          !s.atoms.empty() && s.atoms.front() == lead->atom)
        splitsLead = true;
    bool anySplit = std::any_of(p.splits.begin(), p.splits.end(),
                                [&](const Split &s) {
                                  return s.axis == t.splitBy;
                                });
    if (anySplit && !splitsLead)
      problems.push_back(
          {"fused-split",
           "an even split of axis " + std::to_string(*t.splitAxis) +
               " of tensor '" + name + "' is not how " +
               meshAxisName(t.splitBy).data() + " splits " + p.path,
           t.source});
  }
}

} // namespace

namespace {

/// Serializes what planning a layer depends on, with parameters numbered
/// within the layer, so that equal strings mean equal plans. Source ids are
/// left out: they differ per layer, and a finding of the representative
/// points at the same declarations.
class LayerSignature {
public:
  LayerSignature(const ModelLayout &m, const std::vector<int> &params,
                 int64_t unitIndex)
      : m(m), index(unitIndex) {
    for (int p : params)
      ordinal[p] = ordinal.size();
  }

  /// False when the parameter cannot be compared (vocabulary padding).
  bool addParam(int param) {
    const Param &p = m.params[param];
    out << "P" << specName(p.dtype) << int(p.placement.kind)
        << (p.placement.kind == Placement::Layer ? p.placement.layer - index
                                                 : 0)
        << '(';
    for (size_t i = 0; i < p.atoms.size(); ++i)
      out << p.atoms[i] << '=' << p.sizes[i] << ',';
    for (int a : p.axisAtoms)
      out << a << ';';
    out << 'b' << p.scaleBlock;
    for (const Split &s : p.splits) {
      if (s.padMultiple)
        return false;
      out << '/' << int(s.axis) << (s.replicateWhenFewer ? "r" : "")
          << s.indivisible;
      for (const std::string &a : s.atoms)
        out << a << ',';
    }
    out << ')';
    return true;
  }

  void addTensor(const TensorSpec &t) {
    out << 'T' << (t.copy ? "c" : "") << (t.dequantized ? "q" : "")
        << t.offset << ':'
        << (t.stored ? specName(*t.stored) : "") << ':' << param(t.param)
        << '[';
    // The element's own index, staged or spelled out, is left out.
    for (const NameSegment &s : t.name) {
      bool own = s.kind == NameSegment::LayerIndex
                     ? s.layer == index
                     : s.kind == NameSegment::Text &&
                           s.text == std::to_string(index);
      out << int(s.kind) << (own ? "#" : s.text + s.atom) << '|';
    }
    out << ']';
    for (const auto &axis : t.axes) {
      out << '(';
      for (const Term &term : axis)
        addTerm(term);
      out << ')';
    }
    for (const TensorSpec::ViewAxis &v : t.view) {
      out << 'v' << v.factor << (v.claim ? "c" : "");
      for (const std::string &a : v.atoms)
        out << a << ',';
    }
    if (t.splitAxis)
      out << 's' << *t.splitAxis << int(t.splitBy);
  }

  std::string str() const { return out.str(); }

private:
  int64_t param(int p) const {
    auto it = ordinal.find(p);
    return it == ordinal.end() ? -1 : int64_t(it->second);
  }

  void addTerm(const Term &t) {
    out << '<' << int(t.kind) << t.atom;
    for (const Term &c : t.children)
      addTerm(c);
    for (const Term::Part &p : t.parts) {
      out << '{' << param(p.param);
      for (const Term &c : p.shape)
        addTerm(c);
      out << '}';
    }
    out << '>';
  }

  const ModelLayout &m;
  int64_t index;
  std::map<int, size_t> ordinal;
  std::ostringstream out;
};

} // namespace

CheckScope mdl::rt::representativeLayers(const ModelLayout &m) {
  CheckScope scope;
  scope.skipTensor.assign(m.tensors.size(), false);
  scope.skipParam.assign(m.params.size(), false);
  size_t numUnits = m.unitIndex.size();
  std::vector<std::vector<int>> unitParams(numUnits), unitTensors(numUnits);
  // A unit is compared only when all it holds is placed alike and no
  // tensor reaches across it.
  std::vector<bool> comparable(numUnits, true);
  auto samePlacement = [](const Placement &a, const Placement &b) {
    return a.kind == b.kind && a.layer == b.layer;
  };
  for (size_t i = 0; i < m.params.size(); ++i) {
    int u = m.params[i].unit;
    if (u < 0)
      continue;
    if (!unitParams[u].empty() &&
        !samePlacement(m.params[unitParams[u].front()].placement,
                       m.params[i].placement))
      comparable[u] = false;
    unitParams[u].push_back(int(i));
  }
  for (size_t i = 0; i < m.tensors.size(); ++i) {
    const TensorSpec &t = m.tensors[i];
    std::set<int> reached;
    for (int p : tensorParams(t))
      reached.insert(m.params[p].unit);
    bool own = t.unit >= 0 && reached.size() == 1 &&
               *reached.begin() == t.unit && !t.when &&
               (!t.on || samePlacement(*t.on, m.params[unitParams[t.unit]
                                                           .front()]
                                                  .placement));
    if (own) {
      unitTensors[t.unit].push_back(int(i));
      continue;
    }
    for (int u : reached)
      if (u >= 0)
        comparable[u] = false;
    if (t.unit >= 0)
      comparable[t.unit] = false;
  }
  std::map<std::string, int> classes;
  for (size_t u = 0; u < numUnits; ++u) {
    if (!comparable[u] || unitParams[u].empty())
      continue;
    int64_t index = m.unitIndex[u];
    LayerSignature sig(m, unitParams[u], index);
    bool ok = true;
    for (int p : unitParams[u])
      ok = ok && sig.addParam(p);
    if (!ok)
      continue;
    for (int t : unitTensors[u])
      sig.addTensor(m.tensors[t]);
    if (classes.emplace(sig.str(), int(u)).second)
      continue;
    for (int p : unitParams[u])
      scope.skipParam[p] = true;
    for (int t : unitTensors[u])
      scope.skipTensor[t] = true;
  }
  return scope;
}

std::vector<Problem> mdl::rt::checkNames(const Planner &planner) {
  std::vector<Problem> problems;
  if (!planner.valid())
    return problems;
  const ModelLayout &m = planner.model();
  std::set<std::pair<int, int>> mountPairs;
  for (const RankContext &ctx : planner.ranks()) {
    if (ctx.tpRank != 0 || ctx.epRank != 0)
      continue;
    std::map<std::string, int> names;
    for (size_t i = 0; i < m.tensors.size(); ++i) {
      std::optional<std::string> name = planner.tensorName(int(i), ctx);
      if (!name)
        continue;
      auto [it, fresh] = names.emplace(*name, int(i));
      if (fresh)
        continue;
      // Tensors of different instances collide because of where they are
      // mounted (an MTP layer mounted where a decoder layer is, a mount
      // that ignores its stack's index): report it at the mount.
      const auto &a = m.tensors[i].mounts, &b = m.tensors[it->second].mounts;
      size_t d = 0;
      while (d < a.size() && d < b.size() && a[d] == b[d])
        ++d;
      if (d < a.size() && d < b.size()) {
        // One finding per pair of mounts, with its first collision.
        bool same = a[d].first == b[d].first;
        if (mountPairs.insert({a[d].first, b[d].first}).second)
          problems.push_back(
              {"duplicate-name",
               (same ? std::string("this mount gives two of the instances "
                                   "it places the same names (does its "
                                   "name use the stack's index?)")
                     : std::string("the tensors this mount places take the "
                                   "names of tensors another mount places")) +
                   ": two tensors of one rank are named '" + *name + "'",
               a[d].first, same ? -1 : b[d].first});
      } else
        problems.push_back({"duplicate-name",
                            "two tensors of one rank are named '" + *name + "'",
                            m.tensors[i].source, m.tensors[it->second].source});
    }
  }
  std::sort(problems.begin(), problems.end());
  problems.erase(std::unique(problems.begin(), problems.end(),
                             [](const Problem &a, const Problem &b) {
                               return a.source == b.source &&
                                      a.message == b.message;
                             }),
                 problems.end());
  return problems;
}

std::vector<Problem> mdl::rt::checkLayout(const Planner &planner,
                                          const CheckScope *scope) {
  std::vector<Problem> problems;
  if (!planner.valid())
    return problems;
  const ModelLayout &m = planner.model();
  const ParallelConfig &cfg = planner.config();
  // Representative ranks: every stage, the first and last of tp and ep.
  std::vector<RankContext> ranks;
  for (const RankContext &ctx : planner.ranks()) {
    bool edgeTp = ctx.tpRank == 0 || ctx.tpRank == cfg.tp - 1;
    bool edgeEp = ctx.epRank == 0 || ctx.epRank == cfg.ep - 1;
    if (edgeTp && edgeEp)
      ranks.push_back(ctx);
  }
  std::vector<bool> seenSpec(m.tensors.size(), false);
  for (const RankContext &ctx : ranks) {
    std::vector<LocalTensor> tensors =
        planner.tensors(ctx, &problems, scope ? &scope->skipTensor : nullptr);
    // The boxes each parameter's tensors hold on this rank.
    std::map<int, std::vector<std::pair<const Piece *, int>>> held;
    std::vector<bool> anyCopy(m.params.size(), false);
    for (const LocalTensor &lt : tensors) {
      const TensorSpec &t = m.tensors[lt.spec];
      if (!seenSpec[lt.spec]) {
        seenSpec[lt.spec] = true;
        checkView(m, lt, problems);
        checkSplit(planner, lt, problems);
      }
      for (const Piece &pc : lt.pieces) {
        if (t.copy) {
          anyCopy[pc.param] = true;
          continue;
        }
        held[pc.param].push_back({&pc, lt.spec});
      }
    }
    for (size_t i = 0; i < m.params.size(); ++i) {
      if (scope && scope->skipParam[i])
        continue;
      const Param &p = m.params[i];
      if (foldedScale(m, p))
        continue;
      bool placed = planner.placedOn(p.placement, ctx);
      auto &boxes = held[int(i)];
      if (!placed) {
        for (auto &[pc, spec] : boxes)
          problems.push_back(
              {"placement",
               "tensor '" + renderName(m.tensors[spec], 0) + "' holds " +
                   p.path + " on a pipeline stage that does not hold it",
               m.tensors[spec].source});
        continue;
      }
      int64_t expect = 1;
      for (const std::string &a : p.atoms)
        expect *= planner.extent(int(i), a, ctx).count;
      int64_t got = 0;
      for (auto &[pc, spec] : boxes)
        got += pc->numElements();
      for (size_t x = 0; x < boxes.size(); ++x)
        for (size_t y = x + 1; y < boxes.size(); ++y)
          if (overlaps(*boxes[x].first, *boxes[y].first))
            problems.push_back(
                {"coverage",
                 "parameter " + p.path + " is held twice: by tensor '" +
                     renderName(m.tensors[boxes[x].second], 0) +
                     "' and by tensor '" +
                     renderName(m.tensors[boxes[y].second], 0) + "'",
                 m.tensors[boxes[y].second].source});
      if (boxes.empty())
        problems.push_back({"coverage",
                            "parameter " + p.path +
                                " is held by no tensor of backend " +
                                m.backend,
                            p.source});
      else if (got < expect)
        problems.push_back(
            {"coverage",
             "parameter " + p.path + " is only partly held: " +
                 std::to_string(got) + " of the " + std::to_string(expect) +
                 " elements a rank must hold",
             p.source});
    }
    // With tied embeddings the last stage still needs a head: the
    // embedding, or a copy of it that serves as one. A copy that belongs
    // to a stack element (an MTP block's embedding) or that is named as the
    // embedding itself (the MTP blocks' shared embedding) is no head.
    if (ctx.lastStage())
      for (auto [wanted, fallback] : m.lastStageNeeds) {
        if (wanted >= 0 || fallback < 0)
          continue;
        std::set<std::string> ownNames;
        for (const TensorSpec &t : m.tensors)
          if (!t.copy && tensorParams(t) == std::vector<int>{fallback})
            ownNames.insert(renderName(t, 0));
        bool holds = std::any_of(
            tensors.begin(), tensors.end(), [&](const LocalTensor &lt) {
              const TensorSpec &t = m.tensors[lt.spec];
              if (t.copy && (t.unit >= 0 || ownNames.count(renderName(t, 0))))
                return false;
              return std::any_of(lt.pieces.begin(), lt.pieces.end(),
                                 [&](const Piece &pc) {
                                   return pc.param == fallback;
                                 });
            });
        if (!holds)
          problems.push_back(
              {"tied-head",
               "the last pipeline stage needs " + m.lastStageNeedsWhy +
                   ", and holds no copy of " +
                   m.params[fallback].path,
               m.params[fallback].source});
      }
  }
  std::sort(problems.begin(), problems.end());
  problems.erase(std::unique(problems.begin(), problems.end(),
                             [](const Problem &a, const Problem &b) {
                               return a.source == b.source &&
                                      a.check == b.check &&
                                      a.message == b.message;
                             }),
                 problems.end());
  return problems;
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
        if (name == "tp") d.tp = v;
        else if (name == "pp") d.pp = v;
        else if (name == "ep") d.ep = v;
        else if (name == "etp") d.etp = v;
        else if (name == "cp") d.cp = v;
        else if (name == "dp") d.dp = v;
        else if (name == "vpp") d.vpp = v;
        next.push_back(d);
      }
    out = std::move(next);
  }
  return out;
}
