//===- LayoutCheck.cpp - Whether a layout holds every parameter once ------===//

#include "mdl/Runtime/Model/LayoutCheck.h"

#include <algorithm>
#include <climits>
#include <map>
#include <set>
#include <string_view>
#include <unordered_map>
#include <type_traits>

using namespace mdl;
using namespace mdl::rt;

namespace {

/// Whether two boxes of one parameter intersect.
bool overlaps(const Piece &a, const Piece &b) {
  for (size_t i = 0; i < a.lo.size(); ++i)
    if (a.lo[i] + a.count[i] <= b.lo[i] || b.lo[i] + b.count[i] <= a.lo[i])
      return false;
  return true;
}

/// For each of `boxes`, the first box before it that it overlaps; -1 when
/// none does. Near-linear: equal boxes (a layout entry written many times)
/// are grouped, and the distinct ones are swept along their first axis.
std::vector<int> firstOverlaps(const std::vector<const Piece *> &boxes) {
  std::vector<int> out(boxes.size(), -1);
  // Distinct boxes, each with the boxes equal to it in order.
  std::map<std::pair<std::vector<int64_t>, std::vector<int64_t>>,
           std::vector<int>>
      groups;
  for (size_t i = 0; i < boxes.size(); ++i)
    groups[{boxes[i]->lo, boxes[i]->count}].push_back(int(i));
  std::vector<const std::vector<int> *> distinct;
  for (const auto &[box, members] : groups)
    distinct.push_back(&members);
  // Of each distinct box, the first box of another group it overlaps.
  std::vector<int> other(distinct.size(), INT_MAX);
  auto lo0 = [&](size_t g) {
    const Piece &p = *boxes[size_t(distinct[g]->front())];
    return p.lo.empty() ? int64_t(0) : p.lo[0];
  };
  auto hi0 = [&](size_t g) {
    const Piece &p = *boxes[size_t(distinct[g]->front())];
    return p.lo.empty() ? int64_t(1) : p.lo[0] + p.count[0];
  };
  std::vector<size_t> order(distinct.size());
  for (size_t g = 0; g < order.size(); ++g)
    order[g] = g;
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return lo0(a) < lo0(b); });
  for (size_t x = 0; x < order.size(); ++x)
    for (size_t y = x + 1; y < order.size() && lo0(order[y]) < hi0(order[x]);
         ++y) {
      size_t a = order[x], b = order[y];
      if (!overlaps(*boxes[size_t(distinct[a]->front())],
                    *boxes[size_t(distinct[b]->front())]))
        continue;
      other[a] = std::min(other[a], distinct[b]->front());
      other[b] = std::min(other[b], distinct[a]->front());
    }
  for (size_t g = 0; g < distinct.size(); ++g) {
    const std::vector<int> &members = *distinct[g];
    for (int y : members) {
      int x = members.front() < y ? members.front() : INT_MAX;
      if (other[g] < y)
        x = std::min(x, other[g]);
      if (x != INT_MAX)
        out[size_t(y)] = x;
    }
  }
  return out;
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
  std::sort(order.begin(), order.end(),
            [&](int x, int y) { return piece.stride[x] > piece.stride[y]; });
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
           "view axis " + std::to_string(k) + " of tensor '" + lt.name(m) +
               "' claims dimension " + v.spelling + ", but the tensor stores " +
               stored +
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
    const ParallelConfig &cfg = planner.config();
    for (const Split &s : p.splits)
      if (s.axis == t.splitBy && s.holdsIn(cfg) && lead &&
          lead->kind == Term::Atom &&
          !s.atoms.empty() && s.atoms.front() == lead->atom)
        splitsLead = true;
    bool anySplit =
        std::any_of(p.splits.begin(), p.splits.end(),
                    [&](const Split &s) {
                      return s.axis == t.splitBy && s.holdsIn(cfg);
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

/// A string written to as a stream is, without the stream's cost.
class Text {
public:
  Text &operator<<(char c) {
    s += c;
    return *this;
  }
  Text &operator<<(const char *c) {
    s += c;
    return *this;
  }
  Text &operator<<(std::string_view c) {
    s.append(c.data(), c.size());
    return *this;
  }
  Text &operator<<(const std::string &c) {
    s += c;
    return *this;
  }
  template <typename T,
            std::enable_if_t<std::is_integral_v<T>, int> = 0>
  Text &operator<<(T v) {
    s += std::to_string(v);
    return *this;
  }
  const std::string &str() const { return s; }

private:
  std::string s;
};

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
    out << 'b' << p.scaleBlock << (p.mxfp4 ? "x" : "");
    for (const Split &s : p.splits) {
      if (s.padMultiple)
        return false;
      out << '/' << int(s.axis) << (s.replicateWhenFewer ? "r" : "")
          << s.indivisible << '>' << s.indivisibleAbove << '?' << s.whenKey
          << '?';
      for (const std::string &a : s.atoms)
        out << a << ',';
    }
    out << ')';
    return true;
  }

  void addTensor(const TensorSpec &t) {
    out << 'T' << (t.copy ? "c" : "") << (t.zero ? "z" : "")
        << (t.dequantized ? "q" : "") << (t.negExp ? "n" : "") << t.offset
        << ':' << (t.stored ? specName(*t.stored) : "") << ':' << param(t.param)
        << '[';
    // The element's own index, staged or spelled out, is left out.
    for (const NameSegment &s : t.name) {
      bool own =
          s.kind == NameSegment::LayerIndex
              ? s.layer == index
              : s.kind == NameSegment::Text && s.text == std::to_string(index);
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

  const std::string &str() const { return out.str(); }

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
  Text out;
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
    bool own =
        t.unit >= 0 && reached.size() == 1 && *reached.begin() == t.unit &&
        !t.when &&
        (!t.on ||
         samePlacement(*t.on, m.params[unitParams[t.unit].front()].placement));
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
    std::unordered_map<std::string, int> names;
    names.reserve(m.tensors.size());
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
  // The boxes each parameter's tensors hold on a rank, and the parameters
  // that have some.
  std::vector<std::vector<std::pair<const Piece *, int>>> held(
      m.params.size());
  std::vector<int> holding;
  for (const RankContext &ctx : ranks) {
    std::vector<LocalTensor> tensors =
        planner.tensors(ctx, &problems, scope ? &scope->skipTensor : nullptr);
    for (int i : holding)
      held[size_t(i)].clear();
    holding.clear();
    std::vector<bool> anyCopy(m.params.size(), false);
    for (const LocalTensor &lt : tensors) {
      const TensorSpec &t = m.tensors[lt.spec];
      if (!seenSpec[lt.spec]) {
        seenSpec[lt.spec] = true;
        checkView(m, lt, problems);
        checkSplit(planner, lt, problems);
      }
      for (const Piece &pc : lt.pieces) {
        // A zero tensor stands in for its slices on this rank (the
        // framework adds them once, from another rank): it covers them
        // here, though nothing is read from it.
        if (t.copy && !t.zero) {
          anyCopy[pc.param] = true;
          continue;
        }
        if (held[size_t(pc.param)].empty())
          holding.push_back(pc.param);
        held[size_t(pc.param)].push_back({&pc, lt.spec});
      }
    }
    for (size_t i = 0; i < m.params.size(); ++i) {
      if (scope && scope->skipParam[i])
        continue;
      const Param &p = m.params[i];
      if (foldedScale(m, p) || foldedMxfp4(m, p))
        continue;
      bool placed = planner.placedOn(p.placement, ctx);
      auto &boxes = held[i];
      if (!placed) {
        for (auto &[pc, spec] : boxes)
          problems.push_back({"placement",
                              "tensor '" + renderName(m.tensors[spec], 0) +
                                  "' holds " + p.path +
                                  " on a pipeline stage that does not hold it",
                              m.tensors[spec].source});
        continue;
      }
      int64_t expect = 1;
      for (const std::string &a : p.atoms)
        expect *= planner.extent(int(i), a, ctx).count;
      int64_t got = 0;
      for (auto &[pc, spec] : boxes)
        got += pc->numElements();
      // A box held twice is reported once, with the first box it overlaps.
      std::vector<const Piece *> pieces;
      for (auto &[pc, spec] : boxes)
        pieces.push_back(pc);
      // One box overlaps no other.
      std::vector<int> before = boxes.size() > 1
                                    ? firstOverlaps(pieces)
                                    : std::vector<int>(boxes.size(), -1);
      for (size_t y = 0; y < boxes.size(); ++y)
        if (before[y] >= 0)
          problems.push_back(
              {"coverage",
               "parameter " + p.path + " is held twice: by tensor '" +
                   renderName(m.tensors[boxes[size_t(before[y])].second], 0) +
                   "' and by tensor '" +
                   renderName(m.tensors[boxes[y].second], 0) + "'",
               m.tensors[boxes[y].second].source});
      if (boxes.empty())
        problems.push_back({"coverage",
                            "parameter " + p.path +
                                " is held by no tensor of backend " + m.backend,
                            p.source});
      else if (got < expect)
        problems.push_back({"coverage",
                            "parameter " + p.path +
                                " is only partly held: " + std::to_string(got) +
                                " of the " + std::to_string(expect) +
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
              return std::any_of(
                  lt.pieces.begin(), lt.pieces.end(),
                  [&](const Piece &pc) { return pc.param == fallback; });
            });
        if (!holds)
          problems.push_back(
              {"tied-head",
               "the last pipeline stage needs " + m.lastStageNeedsWhy +
                   ", and holds no copy of " + m.params[fallback].path,
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
