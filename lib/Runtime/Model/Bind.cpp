//===- Bind.cpp - Binding instantiated models to backends -----------------===//
//
// The same semantics as the compiler's binding (lib/Evaluate), over the
// declarations generated code gives: tensors named from the mounts above
// them, parts resolved to parameters, splits from styles and shard entries.
//
//===----------------------------------------------------------------------===//

#include "mdl/Runtime/Model/Model.h"
#include "Model/Evaluation.h"

#include <algorithm>
#include <functional>
#include <map>
#include <set>

using namespace mdl;
using namespace mdl::rt;
using namespace mdl::rt::detail;

//===----------------------------------------------------------------------===//
// Binding
//===----------------------------------------------------------------------===//

namespace {

std::vector<NameSegment> join(const std::vector<NameSegment> &prefix,
                              const std::vector<NameSegment> &name) {
  std::vector<NameSegment> out = prefix;
  bool nameEmpty = name.empty() || (name.size() == 1 &&
                                    name[0].kind == NameSegment::Text &&
                                    name[0].text.empty());
  if (!prefix.empty() && !nameEmpty) {
    NameSegment dot;
    dot.text = ".";
    out.push_back(dot);
  }
  if (!nameEmpty)
    out.insert(out.end(), name.begin(), name.end());
  return out;
}

class Binder {
public:
  Binder(Model &model, const BackendDecl &backend,
         std::shared_ptr<std::map<std::string, std::string>> choices,
         bool derivedView, BoundLayout &out)
      : model(model), backend(backend), choices(std::move(choices)),
        derivedView(derivedView), out(out) {
    for (const LayoutDecl &l : backend.layouts)
      layouts[l.module] = &l;
  }

  void run() {
    const ModuleDecl &top = model.decl().modules.front();
    out.layout.model = model.decl().name;
    out.layout.backend = backend.name;
    out.layout.mesh = backend.mesh;
    out.layout.hasPipeline = !top.stages.empty() || !top.first.empty() ||
                             !top.last.empty();
    bindParams();
    bindBackend();
    bindNode(model.root(), {});
    for (auto &[name, value] : *choices)
      out.layout.choices[name] = value;
    out.layout.classes = backend.classes;
    bindBlockScales();
    bindMxfp4();
    if (backend.stackLayers) {
      RankContext one;
      Value names = evalOne(model.root(), backend.stackLayers,
                            Value::listOf({}), &one, choices.get());
      std::vector<std::string> mounts;
      for (const Value &v : names.list)
        mounts.push_back(v.s);
      if (!mounts.empty())
        stackLayers(mounts);
    }
  }

private:
  /// The source id of a declaration: one per place in the spec.
  int source(const std::string &where) {
    auto [it, fresh] = sourceIds.try_emplace(where, int(out.sources.size()));
    if (fresh)
      out.sources.push_back(where);
    return it->second;
  }
  const LayoutDecl *layoutFor(const Instance &node) const {
    auto it = layouts.find(node.module->name);
    return it == layouts.end() ? nullptr : it->second;
  }
  int findParam(Instance &node, const std::string &dotted) {
    std::string path = node.path.empty() ? dotted : node.path + "." + dotted;
    auto it = paramIndex.find(path);
    return it == paramIndex.end() ? -1 : it->second;
  }
  int unitOf(Instance *node) {
    while (node && node->stackIndex < 0)
      node = node->parent;
    if (!node)
      return -1;
    auto [it, inserted] = units.try_emplace(node, int(units.size()));
    if (inserted)
      out.layout.unitIndex.push_back(node->stackIndex);
    return it->second;
  }

  /// The splits of a parameter over the mesh, and (`style`) how tensor
  /// parallelism splits it on this backend.
  std::vector<Split> splitsOf(const ParamInstance &p,
                              TensorParallelStyle &style) {
    using Style = TensorParallelStyle;
    style = Style::Replicated;
    std::vector<Split> splits;
    bool grouped = !p.expert.empty();
    if (grouped) {
      Split e;
      e.atoms = {p.expert};
      e.axis = MeshAxis::EP;
      e.why = "expert dimension " + p.expert + " of " + p.path;
      splits.push_back(e);
    }
    auto find = [&](const std::string &path) -> const ShardDecl * {
      auto it = overrides.find(path);
      return it == overrides.end() ? nullptr : it->second;
    };
    const ShardDecl *s = find(p.path);
    if (!s && p.bias)
      s = find(p.path.substr(0, p.path.size() - 5));
    auto has = [&](const std::string &atom) {
      for (const auto &axis : p.axes)
        if (std::find(axis.begin(), axis.end(), atom) != axis.end())
          return true;
      return false;
    };
    // Where a conditional shard does not hold, the module's style splits.
    Split otherwise;
    if (s && std::all_of(s->atoms.begin(), s->atoms.end(), has)) {
      Split t;
      t.atoms = s->atoms;
      t.axis = s->axis;
      t.replicateWhenFewer = s->replicate;
      t.why = "shard " + s->dim + " of " + p.path;
      if (s->when) {
        t.when = sizeCondition(s->when, /*holds=*/true);
        t.whenKey = s->where;
        otherwise.when = sizeCondition(s->when, /*holds=*/false);
        otherwise.whenKey = "!" + s->where;
      }
      splits.push_back(t);
      if (t.axis == MeshAxis::TP || t.axis == MeshAxis::ETP)
        style = shardStyle(p, t.atoms.front());
      if (!s->when)
        return splits;
    }
    if (p.style == Style::None || p.style == Style::Replicated)
      return splits;
    Split t = std::move(otherwise);
    t.atoms = p.styleAtoms;
    t.axis = grouped ? MeshAxis::ETP : MeshAxis::TP;
    t.why = std::string(tensorParallelStyleName(p.style)) + "(" + p.styleDim +
            ") of " + p.path;
    // A vocabulary split is vocab-parallel where the backend pads the
    // vocabulary; elsewhere it is a linear's plain output split.
    Style own = p.style;
    if (own == Style::Vocab && !backend.vocabMultiple)
      own = Style::Column;
    // A conditional shard's style describes the backend's modules.
    if (!t.when)
      style = own;
    if (own == Style::Vocab) {
      Instance *root = &model.root();
      Expr pad = backend.vocabMultiple;
      auto ch = choices;
      t.padMultiple = [root, pad, ch](const ParallelConfig &c) -> int64_t {
        RankContext ctx;
        ctx.config = c;
        try {
          int64_t v = evalOne(*root, pad, Value::integer(1), &ctx, ch.get()).i;
          return v > 0 ? v : 1;
        } catch (EvalError &) {
          return 1;
        }
      };
    }
    splits.push_back(t);
    return splits;
  }

  /// Whether a shard's condition, which reads the parallel sizes alone,
  /// `holds` in a configuration (an unevaluable one does not hold).
  std::function<bool(const ParallelConfig &)> sizeCondition(const Expr &cond,
                                                            bool holds) {
    Instance *root = &model.root();
    auto ch = choices;
    return [root, cond, ch, holds](const ParallelConfig &c) {
      RankContext ctx;
      ctx.config = c;
      bool v = false;
      try {
        v = evalOne(*root, cond, Value::boolean(false), &ctx, ch.get()).i;
      } catch (EvalError &) {
      }
      return v == holds;
    };
  }

  /// The style a layout's `shard ... by tp` of dimension atom `atom` gives:
  /// a linear split on an output dimension is column-parallel, on an input
  /// one row-parallel; another parameter is sharded.
  static TensorParallelStyle shardStyle(const ParamInstance &p,
                                        const std::string &atom) {
    if (!p.decl->linear)
      return TensorParallelStyle::Shard;
    size_t lead = p.expert.empty() ? 0 : 1;
    for (size_t a = lead; a < p.axes.size(); ++a)
      if (std::find(p.axes[a].begin(), p.axes[a].end(), atom) !=
          p.axes[a].end())
        return p.bias || a < lead + size_t(p.decl->outAxes)
                   ? TensorParallelStyle::Column
                   : TensorParallelStyle::Row;
    return TensorParallelStyle::Shard;
  }

  void bindParams() {
    model.walk([&](Instance &node) {
      if (const LayoutDecl *l = layoutFor(node))
        for (const ShardDecl &s : l->shards)
          for (const std::string &p : s.params)
            overrides[node.path.empty() ? p : node.path + "." + p] = &s;
    });
    model.walk([&](Instance &node) {
      for (const ParamInstance &p : node.params) {
        Param rp;
        rp.path = p.path;
        rp.dtype = p.dtype;
        for (const auto &axis : p.axes) {
          rp.axisAtoms.push_back(int(axis.size()));
          rp.atoms.insert(rp.atoms.end(), axis.begin(), axis.end());
        }
        rp.sizes = p.sizes;
        rp.placement = p.stage;
        if (p.decl->linear)
          rp.linearOutAxes = p.decl->outAxes;
        rp.bias = p.bias;
        rp.scaleBlock = p.scaleBlock;
        rp.mxfp4 = p.mxfp4;
        rp.expert = p.expert;
        rp.unit = unitOf(&node);
        rp.source = source(p.decl->where);
        rp.splits = splitsOf(p, rp.style);
        paramIndex[p.path] = int(out.layout.params.size());
        out.layout.params.push_back(std::move(rp));
        out.params.push_back(&p);
      }
    });
  }

  void bindBlockScales() {
    if (backend.blockScaleSuffix) {
      RankContext one;
      out.layout.blockScaleSuffix =
          evalOne(model.root(), backend.blockScaleSuffix, Value::string(""),
                  &one, choices.get())
              .s;
    }
    size_t numParams = out.layout.params.size();
    BlockScaleResult r = addBlockScales(
        out.layout, model.dtype().value_or(DType::BF16));
    bindAdded(r, numParams, "block-scale",
              [](const Param &p) { return p.scaleOf; });
  }

  void bindMxfp4() {
    RankContext one;
    auto setting = [&](Expr e, Value fallback) {
      return e ? evalOne(model.root(), e, fallback, &one, choices.get())
               : fallback;
    };
    out.layout.mxfp4BlocksSuffix =
        setting(backend.mxfp4BlocksSuffix, Value::string("")).s;
    out.layout.mxfp4ScalesSuffix =
        setting(backend.mxfp4ScalesSuffix, Value::string("")).s;
    out.layout.mxfp4BytesAxis =
        setting(backend.mxfp4BytesAxis, Value::boolean(false)).i;
    size_t numParams = out.layout.params.size();
    BlockScaleResult r = addMxfp4(out.layout);
    bindAdded(r, numParams, "mxfp4",
              [](const Param &p) { return p.mxfp4Of; });
  }

  /// Reports the errors of adding the parameters and tensors of quantized
  /// storage (`id` names the check), and binds what was added from
  /// parameter `numParams` on: each parameter to the instance of the
  /// weight `weightOf` gives, each companion tensor to its tensor's node.
  void bindAdded(const BlockScaleResult &r, size_t numParams,
                 const std::string &id,
                 const std::function<int(const Param &)> &weightOf) {
    // One error per layout entry, with its first tensor and how many more:
    // a transposed entry of a layer would otherwise be reported once per
    // layer.
    std::map<std::string, std::pair<size_t, int>> grouped; // first, more
    std::vector<std::string> order;
    for (size_t e = 0; e < r.errors.size(); ++e) {
      const std::string &entry = out.sources[size_t(
          out.layout.tensors[size_t(r.errors[e].first)].source)];
      auto [it, fresh] = grouped.try_emplace(entry, e, 0);
      if (fresh)
        order.push_back(entry);
      else
        ++it->second.second;
    }
    for (const std::string &entry : order) {
      auto [first, more] = grouped[entry];
      const TensorSpec &t = out.layout.tensors[size_t(r.errors[first].first)];
      std::string message =
          "tensor '" + renderName(t, 0) + "' " + r.errors[first].second;
      if (more)
        message += " (and " + std::to_string(more) + " more tensor" +
                   (more > 1 ? "s" : "") + " of this entry)";
      errors.push_back({message + " [" + id + "]", entry});
    }
    if (!errors.empty())
      throw EvalError{"", "", {}, /*reported=*/true};
    for (size_t i = numParams; i < out.layout.params.size(); ++i)
      out.params.push_back(
          out.params[size_t(weightOf(out.layout.params[i]))]);
    for (int c : r.companionOf) {
      out.tensorNodes.push_back(out.tensorNodes[size_t(c)]);
      tensorStacks.push_back(tensorStacks[size_t(c)]);
    }
  }

  void bindBackend() {
    Instance *root = &model.root();
    auto ch = choices;
    for (const RequireDecl &r : backend.requirements) {
      Expr cond = r.cond;
      std::string message = r.message;
      out.layout.requirements.push_back(
          [root, cond, message, ch](
              const ParallelConfig &c) -> std::optional<std::string> {
            RankContext ctx;
            ctx.config = c;
            try {
              if (evalOne(*root, cond, Value::boolean(true), &ctx, ch.get()).i)
                return std::nullopt;
            } catch (EvalError &) {
            }
            return message;
          });
    }
    RankContext one;
    for (const auto &[cap, expr] : backend.capabilities)
      out.layout.capabilities[cap] =
          evalOne(*root, expr, Value::boolean(false), &one, ch.get()).i;
    model.walk([&](Instance &node) {
      for (const NeedDecl &n : node.module->needs) {
        ModelLayout::CapabilityNeed need;
        need.instance = node.describe();
        need.capability = n.capability;
        need.fallback = n.fallback;
        need.source = source(n.where);
        out.layout.needs.push_back(need);
      }
    });
    const ModuleDecl &top = model.decl().modules.front();
    for (const auto &[wanted, fallback] : top.fallbacks) {
      out.layout.lastStageNeeds.push_back(
          {findParam(*root, wanted), findParam(*root, fallback)});
      out.layout.lastStageNeedsWhy = wanted + " to compute logits, or a copy of " +
                                     fallback + " when there is no " + wanted;
    }
  }

  /// `name` without its segment `segment` (a stack element's index), the
  /// dots around it collapsed into one, none left at an end:
  /// "decoder.layers.{i}.mlp.w" -> "decoder.layers.mlp.w".
  static std::vector<NameSegment>
  withoutSegment(const std::vector<NameSegment> &name, size_t segment) {
    std::vector<NameSegment> out;
    for (size_t i = 0; i < name.size(); ++i) {
      const NameSegment &seg = name[i];
      if (i == segment)
        continue;
      if (seg.kind == NameSegment::Text && !out.empty() &&
          out.back().kind == NameSegment::Text) {
        out.back().text += seg.text;
        continue;
      }
      out.push_back(seg);
    }
    for (size_t i = 0; i < out.size(); ++i) {
      NameSegment &seg = out[i];
      if (seg.kind != NameSegment::Text)
        continue;
      std::string t;
      for (char c : seg.text)
        if (!(c == '.' && !t.empty() && t.back() == '.'))
          t += c;
      if (i == 0 && !t.empty() && t.front() == '.')
        t.erase(0, 1);
      if (i + 1 == out.size() && !t.empty() && t.back() == '.')
        t.pop_back();
      seg.text = t;
    }
    return out;
  }

  static std::string nameText(const std::vector<NameSegment> &name) {
    TensorSpec t;
    t.name = name;
    return renderName(t, 0);
  }

  /// A tensor's whole shape (every atom at its full size), as the stacking
  /// of layers compares them.
  std::vector<int64_t> wholeShape(const TensorSpec &t) const {
    const std::vector<Param> &params = out.layout.params;
    auto full = [&](int param, const std::string &atom) -> int64_t {
      const Param &p = params[size_t(param)];
      int a = p.atomIndex(atom);
      return a < 0 ? 1 : p.sizes[size_t(a)];
    };
    std::vector<int> ps = tensorParams(t);
    std::vector<int64_t> shape;
    if (ps.empty())
      return shape;
    if (!t.view.empty()) {
      for (const TensorSpec::ViewAxis &v : t.view)
        shape.push_back(viewAxisSize(
            v, [&](const std::string &a) { return full(ps.front(), a); }));
      return shape;
    }
    for (const auto &axis : t.axes) {
      int64_t n = 1;
      for (const Term &term : axis)
        n *= termSize(term, ps.front(), full);
      shape.push_back(n);
    }
    return shape;
  }

  /// `stack_layers`: the tensors of the elements of a stack mounted under
  /// one of `mounts` ("decoder.layers") become one tensor each, with the
  /// element as a leading axis, when every element holds the same tensors
  /// with the same shapes and dtypes (Megatron's homogeneous blocks);
  /// otherwise every element keeps its own tensors, under its index
  /// (Megatron's non-homogeneous blocks: dense and MoE layers, linear and
  /// full attention). A stacked tensor is a part set over the elements,
  /// each part an element's tensor flattened, under a view of [n, ...].
  void stackLayers(const std::vector<std::string> &mounts) {
    ModelLayout &m = out.layout;
    auto stacked = [&](const std::string &path) {
      for (const std::string &n : mounts)
        if (path == n || (path.size() > n.size() &&
                          path.compare(path.size() - n.size(), n.size(), n) ==
                              0 &&
                          path[path.size() - n.size() - 1] == '.'))
          return true;
      return false;
    };
    struct Group {
      std::vector<NameSegment> name;
      std::vector<int> members; // by element, -1 where none
      bool ok = true;
      std::pair<const Instance *, std::string> stack;
    };
    std::vector<Group> groups;
    std::map<std::pair<std::pair<const Instance *, std::string>, std::string>,
             size_t>
        byKey;
    std::vector<int> groupOf(m.tensors.size(), -1);
    for (size_t i = 0; i < m.tensors.size(); ++i) {
      // The innermost stack mounted so.
      const StackMount *sm = nullptr;
      for (const StackMount &s : tensorStacks[i])
        if (stacked(s.path))
          sm = &s;
      if (!sm)
        continue;
      std::vector<NameSegment> name = withoutSegment(m.tensors[i].name,
                                                     sm->segment);
      std::pair<const Instance *, std::string> stack{sm->parent, sm->member};
      auto [it, fresh] =
          byKey.try_emplace({stack, nameText(name)}, groups.size());
      if (fresh)
        groups.push_back(
            {name, std::vector<int>(size_t(sm->size), -1), true, stack});
      Group &g = groups[it->second];
      if (sm->index < 0 || sm->index >= sm->size ||
          g.members[size_t(sm->index)] >= 0)
        g.ok = false;
      else
        g.members[size_t(sm->index)] = int(i);
      groupOf[i] = int(it->second);
    }
    if (groups.empty())
      return;
    // Homogeneous: every element has every tensor, alike.
    auto dtypeOf = [&](const TensorSpec &t) {
      return t.stored ? *t.stored
                      : m.params[size_t(tensorParams(t).front())].dtype;
    };
    std::set<std::pair<const Instance *, std::string>> mixed;
    for (const Group &g : groups) {
      auto alike = [&] {
        if (!g.ok || std::find(g.members.begin(), g.members.end(), -1) !=
                         g.members.end())
          return false;
        const TensorSpec &first = m.tensors[size_t(g.members.front())];
        if (tensorParams(first).empty())
          return false;
        std::vector<int64_t> shape = wholeShape(first);
        for (int i : g.members) {
          const TensorSpec &t = m.tensors[size_t(i)];
          if (tensorParams(t).empty() || wholeShape(t) != shape ||
              dtypeOf(t) != dtypeOf(first) || t.copy != first.copy ||
              t.zero != first.zero ||
              t.offset != first.offset || t.negExp != first.negExp ||
              t.dequantized != first.dequantized ||
              bool(t.when) != bool(first.when) ||
              t.splitAxis != first.splitAxis)
            return false;
        }
        return true;
      };
      if (!alike())
        mixed.insert(g.stack);
    }
    for (size_t i = 0; i < m.tensors.size(); ++i)
      if (groupOf[i] >= 0 && mixed.count(groups[size_t(groupOf[i])].stack))
        groupOf[i] = -1;
    for (const Group &g : groups)
      for (const NameSegment &seg : g.name)
        if (!mixed.count(g.stack))
        if (seg.kind == NameSegment::Family)
          fail(out.sources[size_t(m.tensors[size_t(g.members.front())]
                                      .source)],
               "tensor '" + nameText(g.name) +
                   "' is one tensor per index of " + seg.atom +
                   ", which backend " + backend.name +
                   " cannot stack over the layers (stack_layers): give it "
                   "that dimension as an axis");
    std::vector<TensorSpec> tensors;
    std::vector<Instance *> nodes;
    std::vector<bool> emitted(groups.size(), false);
    for (size_t i = 0; i < m.tensors.size(); ++i) {
      if (groupOf[i] < 0) {
        tensors.push_back(std::move(m.tensors[i]));
        nodes.push_back(out.tensorNodes[i]);
        continue;
      }
      // A group goes where its first tensor was.
      if (emitted[size_t(groupOf[i])])
        continue;
      emitted[size_t(groupOf[i])] = true;
      const Group &g = groups[size_t(groupOf[i])];
      const TensorSpec &first = m.tensors[size_t(g.members.front())];
      TensorSpec t;
      t.name = g.name;
      t.copy = first.copy;
      t.zero = first.zero;
      t.offset = first.offset;
      t.negExp = first.negExp;
      t.dequantized = first.dequantized;
      t.stored = first.stored;
      t.when = first.when;
      t.source = first.source;
      t.mounts = first.mounts;
      t.on = Placement();
      Term parts;
      parts.kind = Term::Parts;
      for (int member : g.members) {
        const TensorSpec &layer = m.tensors[size_t(member)];
        Term::Part part;
        part.param = layer.param;
        for (const auto &axis : layer.axes)
          part.shape.insert(part.shape.end(), axis.begin(), axis.end());
        parts.parts.push_back(std::move(part));
      }
      t.axes.push_back({std::move(parts)});
      TensorSpec::ViewAxis lead;
      lead.factor = int64_t(g.members.size());
      lead.spelling = std::to_string(lead.factor);
      t.view.push_back(lead);
      if (!first.view.empty()) {
        t.view.insert(t.view.end(), first.view.begin(), first.view.end());
      } else {
        for (int64_t n : wholeShape(first)) {
          TensorSpec::ViewAxis v;
          v.factor = n;
          v.spelling = std::to_string(n);
          t.view.push_back(v);
        }
      }
      tensors.push_back(std::move(t));
      nodes.push_back(out.tensorNodes[size_t(g.members.front())]);
    }
    m.tensors = std::move(tensors);
    out.tensorNodes = std::move(nodes);
  }

  std::vector<NameSegment> render(Instance &node,
                                  const std::vector<NamePiece> &pieces,
                                  const Value *index, bool staged,
                                  const std::string &where,
                                  int *indexPos = nullptr) {
    std::vector<NameSegment> out;
    std::vector<Value> args;
    if (index)
      args.push_back(*index);
    for (const NamePiece &p : pieces) {
      NameSegment seg;
      switch (p.kind) {
      case NamePiece::Text:
        seg.text = p.text;
        break;
      case NamePiece::Family:
        seg.kind = NameSegment::Family;
        seg.atom = p.text;
        break;
      case NamePiece::Index:
        if (index && indexPos)
          *indexPos = int(out.size());
        if (staged && index) {
          seg.kind = NameSegment::LayerIndex;
          seg.layer = index->i;
          break;
        }
        [[fallthrough]];
      case NamePiece::Value: {
        Value v = at(where, [&] {
          return evalOne(node, p.value, {}, nullptr, choices.get(), args);
        });
        seg.text = v.kind == Value::String ? v.s : std::to_string(v.i);
        break;
      }
      }
      out.push_back(std::move(seg));
    }
    if (staged && index &&
        std::none_of(out.begin(), out.end(), [](const NameSegment &s) {
          return s.kind == NameSegment::LayerIndex;
        }))
      fail(where, "the mount of a pipelined stack must name its index as a "
                  "plain placeholder, as in \"layers.{i}\", so that each "
                  "stage can renumber it");
    return out;
  }

  /// A term with its part set resolved to parameter indices; `dropped`
  /// when every part of a set is absent.
  Term term(const TermDecl &t, Instance &node, bool &dropped) {
    Term out;
    switch (t.kind) {
    case TermDecl::Atom:
      return Term::makeAtom(t.atom);
    case TermDecl::Unit:
      out.kind = Term::Unit;
      return out;
    case TermDecl::Product:
      out.kind = Term::Product;
      for (const TermDecl &c : t.children)
        out.children.push_back(term(c, node, dropped));
      return out;
    case TermDecl::Parts:
      out.kind = Term::Parts;
      for (const TermDecl::Part &p : t.parts) {
        Term::Part part;
        if (p.param.empty()) {
          bool groupDropped = false;
          for (const TermDecl &c : p.shape)
            part.shape.push_back(term(c, node, groupDropped));
          if (!groupDropped)
            out.parts.push_back(std::move(part));
          continue;
        }
        part.param = findParam(node, p.param);
        if (part.param < 0)
          continue; // a part left out by a condition drops out of the set
        for (const TermDecl &c : p.shape)
          part.shape.push_back(term(c, node, dropped));
        out.parts.push_back(std::move(part));
      }
      if (out.parts.empty())
        dropped = true;
      return out;
    }
    return out;
  }

  void bindTensor(Instance &node, const TensorDecl &d,
                  const std::vector<NameSegment> &prefix, Instance *element) {
    if (derivedView && !d.derived)
      return;
    TensorSpec t;
    t.source = source(d.where);
    t.mounts = mountChain;
    t.unit = unitOf(element ? element : &node);
    std::vector<Value> args;
    if (element)
      args.push_back(Value::integer(element->stackIndex));
    if (d.when) {
      if (d.whenReadsContext) {
        Instance *n = &node;
        Expr when = d.when;
        auto ch = choices;
        t.when = [n, when, args, ch](const RankContext &ctx) {
          try {
            return evalOne(*n, when, {}, &ctx, ch.get(), args).i != 0;
          } catch (EvalError &) {
            return false;
          }
        };
      } else if (!at(d.where, [&] {
                   return evalOne(node, d.when, {}, nullptr, choices.get(),
                                  args);
                 }).i) {
        return;
      }
    }
    t.name = join(prefix, render(node, d.name, element ? &args.front() : nullptr,
                                 false, d.where));
    if (!d.param.empty()) {
      t.param = findParam(node, d.param);
      if (t.param < 0)
        return; // the parameter does not exist here
    }
    bool dropped = false;
    for (const auto &axis : d.axes) {
      std::vector<Term> terms;
      for (const TermDecl &c : axis)
        terms.push_back(term(c, node, dropped));
      t.axes.push_back(std::move(terms));
    }
    if (dropped)
      return;
    t.copy = d.copy || d.zero;
    t.zero = d.zero;
    if (d.copyIf)
      t.copy = at(d.where, [&] {
                 return evalOne(node, d.copyIf, {}, nullptr, choices.get(),
                                args);
               }).i != 0;
    t.offset = d.offset;
    t.negExp = d.negExp;
    t.stored = d.stored;
    t.view = d.view;
    if (d.split) {
      t.splitAxis = *d.split;
      t.splitBy = d.splitBy;
    }
    if (d.on)
      t.on = Placement{*d.on};
    else if (element)
      t.on = element->stage;
    if (d.derived && !derivedView) {
      // Not a tensor of the layout: a cache computed from its slices.
      ModelLayout::DerivedTensor dt;
      dt.name = text(t.name);
      dt.params = tensorParams(t);
      dt.hasRecompute = d.hasRecompute;
      dt.recompute = d.recompute;
      dt.computed = true;
      dt.source = t.source;
      out.layout.derived.push_back(std::move(dt));
      return;
    }
    out.layout.tensors.push_back(std::move(t));
    out.tensorNodes.push_back(element ? element : &node);
    tensorStacks.push_back(stackChain);
  }

  /// A name with the layer numbers of the layout.
  static std::string text(const std::vector<NameSegment> &name) {
    std::string p;
    for (const NameSegment &seg : name)
      p += seg.kind == NameSegment::Text     ? seg.text
           : seg.kind == NameSegment::Family ? "{" + seg.atom + "}"
                                             : std::to_string(seg.layer);
    return p;
  }
  /// `name` under the mount `prefix`.
  static std::string prefixed(const std::vector<NameSegment> &prefix,
                              const std::string &name) {
    std::string p = text(prefix);
    return p.empty() ? name : p + "." + name;
  }

  void bindNode(Instance &node, const std::vector<NameSegment> &prefix) {
    const LayoutDecl *layout = layoutFor(node);
    if (!layout && !node.params.empty())
      throw EvalError{
          "module '" + node.module->name +
              "' has parameters but no layout for backend '" + backend.name +
              "'",
          node.module->where,
          {{node.module->where, "first used by " + node.describe()}}};
    if (layout) {
      for (const BufferDecl &b : layout->buffers)
        if (at(b.where, [&] {
              return evalOne(node, b.when, Value::boolean(true), nullptr,
                             choices.get());
            }).i)
          out.layout.buffers.insert(prefixed(prefix, b.name));
      for (const DerivedDecl &d : layout->derived) {
        if (derivedView || !at(d.where, [&] {
              return evalOne(node, d.when, Value::boolean(true), nullptr,
                             choices.get());
            }).i)
          continue;
        ModelLayout::DerivedTensor dt;
        dt.name = prefixed(prefix, d.name);
        for (const std::string &s : d.sources) {
          int index = findParam(node, s);
          if (index >= 0)
            dt.params.push_back(index);
        }
        dt.hasRecompute = d.hasRecompute;
        dt.recompute = d.recompute;
        dt.source = source(d.where);
        out.layout.derived.push_back(std::move(dt));
      }
      for (const TensorDecl &t : layout->tensors) {
        if (!t.forStack.empty()) {
          auto it = node.stacks.find(t.forStack);
          if (it != node.stacks.end())
            for (auto &element : it->second)
              bindTensor(node, t, prefix, element.get());
          continue;
        }
        bindTensor(node, t, prefix, nullptr);
      }
    }
    // A child's name, and in `from` the entry that decides it: a mount of
    // this layout, the child layout's own mount, else the member.
    auto mountOf = [&](const ChildDecl &c, Instance &child, const Value *index,
                       bool staged, std::string &from,
                       int &indexPos) -> std::vector<NameSegment> {
      const std::string &member = c.name;
      from = c.where;
      indexPos = -1;
      if (layout)
        for (const MountDecl &m : layout->mounts) {
          if (m.member != member)
            continue;
          std::vector<Value> args;
          if (index)
            args.push_back(*index);
          if (!at(m.where, [&] {
                return evalOne(node, m.when, Value::boolean(true), nullptr,
                               choices.get(), args);
              }).i)
            continue;
          from = m.where;
          return render(node, m.path, index, staged, m.where, &indexPos);
        }
      std::vector<NameSegment> name;
      NameSegment seg;
      if (index) {
        seg.text = member + ".";
        name.push_back(seg);
        indexPos = int(name.size());
        NameSegment idx;
        if (staged) {
          idx.kind = NameSegment::LayerIndex;
          idx.layer = index->i;
        } else {
          idx.text = std::to_string(index->i);
        }
        name.push_back(idx);
        return name;
      }
      const LayoutDecl *childLayout = layoutFor(child);
      if (childLayout && childLayout->mount)
        from = childLayout->where;
      seg.text = childLayout && childLayout->mount ? *childLayout->mount
                                                   : member;
      name.push_back(seg);
      return name;
    };
    // Each child under the mounts that place it, so that a name two of
    // them share can be blamed on the mount.
    auto bindChild = [&](Instance &child, std::vector<NameSegment> name,
                         const std::string &from) {
      mountChain.push_back({source(from), mountedNodes++});
      bindNode(child, join(prefix, name));
      mountChain.pop_back();
    };
    for (const ChildDecl &c : node.module->children) {
      std::string from;
      int indexPos = -1;
      if (auto it = node.instances.find(c.name); it != node.instances.end()) {
        std::vector<NameSegment> name =
            mountOf(c, *it->second, nullptr, false, from, indexPos);
        bindChild(*it->second, std::move(name), from);
        continue;
      }
      auto it = node.stacks.find(c.name);
      if (it == node.stacks.end())
        continue;
      bool staged = !node.parent && !it->second.empty() &&
                    it->second.front()->stage.kind == Placement::Layer;
      for (auto &child : it->second) {
        Value index = Value::integer(child->stackIndex);
        std::vector<NameSegment> name =
            mountOf(c, *child, &index, staged, from, indexPos);
        // Where the element's index is in the names under it, for
        // stack_layers.
        if (indexPos >= 0) {
          std::vector<NameSegment> joined = join(prefix, name);
          size_t at = joined.size() - name.size() + size_t(indexPos);
          joined.resize(at);
          std::string path = nameText(joined);
          while (!path.empty() && path.back() == '.')
            path.pop_back();
          stackChain.push_back({&node, c.name, child->stackIndex,
                                int64_t(it->second.size()), at, path});
        }
        bindChild(*child, std::move(name), from);
        if (indexPos >= 0)
          stackChain.pop_back();
      }
      if (staged)
        out.layout.stagedLayers = int64_t(it->second.size());
    }
  }

public:
  /// Errors reported together (the block scales of several entries).
  std::vector<EvalError> errors;

private:
  /// The mounts that place the node being bound, outermost first, and a
  /// number for each node they place.
  std::vector<std::pair<int, int>> mountChain;
  int mountedNodes = 0;
  /// The stack elements whose mounts place the node being bound, outermost
  /// first: the stack (its module instance and member), the element's
  /// index and the stack's size, where the index is in the names under it,
  /// and the name before the index. Per tensor, those that placed it.
  struct StackMount {
    const Instance *parent;
    std::string member;
    int64_t index, size;
    size_t segment;
    std::string path;
  };
  std::vector<StackMount> stackChain;
  std::vector<std::vector<StackMount>> tensorStacks;
  std::map<std::string, int> sourceIds;

private:
  Model &model;
  const BackendDecl &backend;
  std::shared_ptr<std::map<std::string, std::string>> choices;
  /// Bind the derived tensors the spec computes as the layout's tensors,
  /// and nothing else.
  bool derivedView;
  BoundLayout &out;
  std::map<std::string, const LayoutDecl *> layouts;
  std::map<std::string, int> paramIndex;
  std::map<std::string, const ShardDecl *> overrides;
  std::map<Instance *, int> units;
};

} // namespace

std::map<std::string, std::string>
mdl::rt::defaultChoices(Model &model, const BackendDecl &backend) {
  std::map<std::string, std::string> out;
  for (const ChoiceDecl &c : backend.choices)
    out[c.name] = c.options.front();
  for (const LayoutDecl &l : backend.layouts) {
    if (l.module != model.root().module->name)
      continue;
    for (const LayoutDecl::ChoiceDefault &d : l.choiceDefaults) {
      auto it = std::find_if(backend.choices.begin(), backend.choices.end(),
                             [&](const auto &c) { return c.name == d.choice; });
      if (it == backend.choices.end())
        continue;
      std::string value =
          at(d.where, [&] { return evalOne(model.root(), d.value, {}).s; });
      if (std::find(it->options.begin(), it->options.end(), value) ==
          it->options.end()) {
        std::string options;
        for (const std::string &o : it->options)
          options += (options.empty() ? "" : ", ") + o;
        fail(d.where, "the default of choice '" + d.choice + "' is '" + value +
                          "', which is not one of its options (" + options +
                          ")");
      }
      out[d.choice] = value;
    }
  }
  return out;
}

std::optional<std::map<std::string, std::string>>
mdl::rt::defaultChoices(Model &model, const BackendDecl &backend,
                        std::string &error) {
  try {
    return defaultChoices(model, backend);
  } catch (EvalError &e) {
    error = e.text();
    return std::nullopt;
  }
}

std::optional<BoundLayout>
mdl::rt::bindModel(Model &model, const BackendDecl &backend,
                   const std::map<std::string, std::string> &choices,
                   std::string &error, bool derivedView) {
  std::vector<EvalError> errors;
  std::optional<BoundLayout> out =
      bindModel(model, backend, choices, errors, derivedView);
  if (!out)
    error = errors.front().text();
  return out;
}

std::optional<BoundLayout>
mdl::rt::bindModel(Model &model, const BackendDecl &backend,
                   const std::map<std::string, std::string> &choices,
                   std::vector<EvalError> &errors, bool derivedView) {
  auto bound = std::make_shared<std::map<std::string, std::string>>();
  for (const auto &[name, value] : choices) {
    auto it = std::find_if(backend.choices.begin(), backend.choices.end(),
                           [&](const auto &c) { return c.name == name; });
    if (it == backend.choices.end() ||
        std::find(it->options.begin(), it->options.end(), value) !=
            it->options.end())
      continue;
    std::string options;
    for (const std::string &o : it->options)
      options += " " + o;
    errors.push_back({"backend " + backend.name + " has no option '" + value +
                          "' for choice '" + name + "' (options:" + options +
                          ")",
                      it->where});
    return std::nullopt;
  }
  BoundLayout out;
  Binder binder(model, backend, bound, derivedView, out);
  try {
    *bound = defaultChoices(model, backend);
    for (const auto &[name, value] : choices)
      if (bound->count(name))
        (*bound)[name] = value;
    binder.run();
  } catch (EvalError &e) {
    errors = e.reported ? std::move(binder.errors)
                        : std::vector<EvalError>{std::move(e)};
    if (errors.empty()) // a bug: a failure counted but never said
      errors.push_back({"internal error: binding failed without a message"});
    return std::nullopt;
  }
  return out;
}
