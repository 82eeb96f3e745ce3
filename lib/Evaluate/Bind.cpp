//===- Bind.cpp - Bind an instantiated model to a backend -----------------===//

#include "mdl/Evaluate/Bind.h"
#include "mdl/Runtime/Cli.h"

#include <map>

#include "mlir/IR/Diagnostics.h"
#include "llvm/ADT/StringExtras.h"
#include <algorithm>
#include "llvm/ADT/SmallPtrSet.h"
#include "llvm/ADT/StringSet.h"

using namespace mlir;
using namespace mdl;

//===----------------------------------------------------------------------===//
// Backend
//===----------------------------------------------------------------------===//

std::unique_ptr<Backend> Backend::lookup(Operation *anchor,
                                         StringRef spelled) {
  ModuleOp top = getTopModule(anchor);
  // Command lines say `mcore-te` or `MCORE_TE`; the specs, mcore_te.
  std::string name = cli::normalizeBackendName(spelled);
  auto b = dyn_cast_or_null<BackendOp>(SymbolTable::lookupSymbolIn(top, name));
  if (!b) {
    std::vector<std::string> known;
    for (auto k : top.getOps<BackendOp>())
      known.push_back(k.getSymName().str());
    emitError(anchor->getLoc()) << "no backend named '" << spelled << "'"
                                << cli::didYouMean(spelled, known);
    return nullptr;
  }
  auto backend = std::make_unique<Backend>();
  llvm::SmallPtrSet<Operation *, 4> seen;
  for (BackendOp cur = b; cur && seen.insert(cur).second;) {
    backend->chain.push_back(cur);
    if (!cur.getBase())
      break;
    cur = dyn_cast_or_null<BackendOp>(
        SymbolTable::lookupSymbolIn(top, *cur.getBase()));
  }
  // The nearest layout of each module along the chain.
  for (BackendOp bk : llvm::reverse(backend->chain))
    for (auto l : top.getOps<LayoutOp>())
      if (l.getBackend() == bk.getSymName())
        if (auto m = getLayoutModule(l))
          backend->layouts[m] = l;
  return backend;
}

LayoutOp Backend::layoutFor(ModuleDeclOp module) const {
  return layouts.lookup(module);
}

LetOp Backend::setting(StringRef name) const {
  for (BackendOp b : chain)
    if (auto l = dyn_cast_or_null<LetOp>(SymbolTable::lookupSymbolIn(b, name)))
      return l;
  return {};
}

std::vector<MeshAxis> Backend::mesh() const {
  std::vector<MeshAxis> out;
  for (BackendOp b : chain) {
    if (b.getMesh().empty())
      continue;
    for (Attribute a : b.getMesh())
      out.push_back(*parseMeshAxis(cast<StringAttr>(a).getValue().str()));
    break;
  }
  return out;
}

std::vector<std::pair<std::string, std::vector<std::string>>>
Backend::choices() const {
  std::vector<std::pair<std::string, std::vector<std::string>>> out;
  for (BackendOp b : llvm::reverse(chain))
    for (auto c : b.getBodyBlock().getOps<ChoiceOp>()) {
      std::vector<std::string> options;
      for (Attribute a : c.getOptions())
        options.push_back(cast<StringAttr>(a).str());
      out.push_back({c.getSymName().str(), options});
    }
  return out;
}

//===----------------------------------------------------------------------===//
// Binding
//===----------------------------------------------------------------------===//

bool mdl::readsContext(Region &region) {
  bool found = false;
  region.walk([&](Operation *op) {
    if (isa<ContextOp>(op))
      found = true;
    else if (auto g = dyn_cast<GetOp>(op)) {
      // A layout's or a backend's let may read the context; choices are
      // bound before any rank exists. Sema has ruled out value cycles.
      Operation *decl = lookupValueDecl(g, g.getName());
      if (!decl || isa<ModuleDeclOp>(decl->getParentOp()) ||
          isa<ChoiceOp>(decl))
        return;
      if (auto let = dyn_cast<LetOp>(decl))
        found |= readsContext(let.getValue());
      else
        found = true;
    }
  });
  return found;
}

namespace {

class Binder {
public:
  Binder(Instantiation &inst, const Backend &backend, BoundModel &out)
      : inst(inst), backend(backend), out(out) {
    env.choices = out.choices.get();
  }

  LogicalResult run();

private:
  int source(Operation *op) {
    auto [it, fresh] = sourceIndex.try_emplace(op, int(out.sources.size()));
    if (fresh)
      out.sources.push_back(op);
    return it->second;
  }
  LogicalResult bindParams();
  LogicalResult bindBackend();
  LogicalResult bindBlockScales();
  FailureOr<std::vector<rt::TensorSpec::ViewAxis>>
  bindView(InstanceNode &node, TensorOp op);
  LogicalResult bindNode(InstanceNode &node,
                         const std::vector<rt::NameSegment> &prefix);
  /// Binds one tensor entry; `element` is the stack element it is
  /// repeated for, if any.
  LogicalResult bindTensor(InstanceNode &node, TensorOp op,
                           const std::vector<rt::NameSegment> &prefix,
                           InstanceNode *element);
  FailureOr<std::vector<rt::NameSegment>>
  renderTemplate(InstanceNode &node, Operation *op, ArrayAttr segments,
                 Region &args, const EvalValue *index, bool layerIndex);
  /// The parameter `dotted` of `node`, or -1 when it does not exist in
  /// this instance (a condition left it out).
  int findParam(InstanceNode &node, StringRef dotted);
  /// The innermost stack element holding `node` (itself included), as a
  /// unit of the layout; -1 outside stacks.
  int unitOf(InstanceNode *node);
  FailureOr<rt::Term> term(TermAttr t, ModuleDeclOp scope, InstanceNode &node,
                           Operation *op, bool &dropped);
  std::vector<rt::Split> splitsOf(const ConcreteParam &p, InstanceNode &node,
                                  int index);

  Instantiation &inst;
  const Backend &backend;
  BoundModel &out;
  /// Evaluation at bind time: no parallel context, the bound choices.
  EvalEnv env;
  llvm::StringMap<int> paramIndex;
  /// Shard overrides by parameter path.
  llvm::StringMap<ShardOp> overrides;
  llvm::DenseSet<Operation *> reportedNoLayout;
  llvm::DenseMap<InstanceNode *, int> units;
  /// The mounts that place the node being bound, outermost first, and a
  /// number for each node they place.
  std::vector<std::pair<int, int>> mountChain;
  int mountedNodes = 0;
  llvm::DenseMap<Operation *, int> sourceIndex;
};

rt::Placement placementOf(StringRef stage) {
  rt::Placement p;
  if (stage == "first")
    p.kind = rt::Placement::First;
  else if (stage == "last")
    p.kind = rt::Placement::Last;
  else if (stage == "all")
    p.kind = rt::Placement::All;
  else {
    p.kind = rt::Placement::Layer;
    stage.getAsInteger(10, p.layer);
  }
  return p;
}

std::vector<rt::Split> Binder::splitsOf(const ConcreteParam &p,
                                        InstanceNode &node, int index) {
  std::vector<rt::Split> splits;
  bool grouped = !p.expert.empty();
  if (grouped) {
    rt::Split e;
    e.atoms = {p.expert};
    e.axis = MeshAxis::EP;
    e.why = "expert dimension " + p.expert + " of " + p.path;
    splits.push_back(e);
  }
  // The tensor-parallel split: a layout's shard entry, else the style.
  MeshAxis tpAxis = grouped ? MeshAxis::ETP : MeshAxis::TP;
  // A bias follows its linear's shard entry.
  ShardOp s = overrides.lookup(p.path);
  if (!s && p.bias)
    s = overrides.lookup(StringRef(p.path).drop_back(strlen(".bias")));
  // An entry splitting a dimension the parameter lacks (a row-parallel
  // linear's bias) leaves it as its style says.
  if (s && llvm::all_of(getDimAtoms(node.module, s.getDim()),
                        [&](StringRef a) { return p.atomIndex(a) >= 0; })) {
    rt::Split t;
    for (StringRef a : getDimAtoms(node.module, s.getDim()))
      t.atoms.push_back(a.str());
    t.axis = *parseMeshAxis(s.getAxis().str());
    t.replicateWhenFewer = s.getReplicate();
    t.why = "shard " + s.getDim().str() + " of " + p.path;
    splits.push_back(t);
    return splits;
  }
  if (!p.style || p.style.getKind() == StyleKind::replicated)
    return splits;
  rt::Split t;
  StringRef dim = p.style.getDim().getValue();
  for (StringRef a : getDimAtoms(node.module, dim))
    t.atoms.push_back(a.str());
  t.axis = tpAxis;
  t.why = stringifyStyleKind(p.style.getKind()).str() + "(" + dim.str() +
          ") of " + p.path;
  if (p.style.getKind() == StyleKind::vocab) {
    if (LetOp pad = backend.setting("vocab_multiple")) {
      InstanceNode *root = inst.root.get();
      auto choices = out.choices;
      t.padMultiple = [root, pad, choices](const ParallelConfig &c) mutable
          -> int64_t {
        RankContext ctx;
        ctx.config = c;
        FailureOr<EvalValue> v = root->evalOne(
            pad.getValue(), EvalValue::integer(1), {&ctx, choices.get()});
        return succeeded(v) && v->i > 0 ? v->i : 1;
      };
    }
  }
  (void)index;
  splits.push_back(t);
  return splits;
}

LogicalResult Binder::bindParams() {
  // Shard entries of every layout in use apply to the parameters of the
  // instances that layout describes.
  inst.walk([&](InstanceNode &node) {
    if (LayoutOp l = backend.layoutFor(node.module))
      for (auto s : l.getBodyBlock().getOps<ShardOp>())
        for (Attribute a : s.getParams()) {
          std::string path = node.path.empty()
                                 ? cast<StringAttr>(a).str()
                                 : node.path + "." + cast<StringAttr>(a).str();
          overrides[path] = s;
        }
  });
  inst.walk([&](InstanceNode &node) {
    for (const ConcreteParam &p : node.params) {
      rt::Param rp;
      rp.path = p.path;
      rp.dtype = p.dtype;
      for (const auto &axis : p.axes) {
        rp.axisAtoms.push_back(int(axis.size()));
        for (const std::string &a : axis)
          rp.atoms.push_back(a);
      }
      rp.sizes = p.sizes;
      rp.placement = placementOf(p.stage);
      if (auto lin = dyn_cast<LinearOp>(p.decl))
        rp.linearOutAxes = int(lin.getOut().size());
      rp.bias = p.bias;
      rp.scaleBlock = p.scaleBlock;
      rp.expert = p.expert;
      rp.unit = unitOf(&node);
      rp.source = source(p.decl);
      int index = int(out.layout.params.size());
      rp.splits = splitsOf(p, node, index);
      paramIndex[p.path] = index;
      out.layout.params.push_back(std::move(rp));
      out.params.push_back(&p);
    }
  });
  return success();
}

int Binder::unitOf(InstanceNode *node) {
  while (node && node->stackIndex < 0)
    node = node->parent;
  if (!node)
    return -1;
  auto [it, inserted] = units.try_emplace(node, int(units.size()));
  if (inserted)
    out.layout.unitIndex.push_back(node->stackIndex);
  return it->second;
}

int Binder::findParam(InstanceNode &node, StringRef dotted) {
  std::string path =
      node.path.empty() ? dotted.str() : node.path + "." + dotted.str();
  auto it = paramIndex.find(path);
  return it == paramIndex.end() ? -1 : it->second;
}

FailureOr<std::vector<rt::NameSegment>>
Binder::renderTemplate(InstanceNode &node, Operation *op, ArrayAttr segments,
                       Region &args, const EvalValue *index, bool layerIndex) {
  std::vector<EvalValue> values;
  if (!args.empty()) {
    SmallVector<EvalValue, 1> blockArgs;
    if (index)
      blockArgs.push_back(*index);
    FailureOr<std::vector<EvalValue>> v = node.evalRegion(args, blockArgs, env);
    if (failed(v))
      return failure();
    values = std::move(*v);
  }
  auto yield = args.empty() ? YieldOp() : dyn_cast<YieldOp>(args.front().back());
  std::vector<rt::NameSegment> out;
  for (Attribute s : segments) {
    rt::NameSegment seg;
    if (auto text = dyn_cast<StringAttr>(s)) {
      seg.text = text.str();
    } else if (auto ref = dyn_cast<FlatSymbolRefAttr>(s)) {
      SmallVector<StringRef> atoms = getDimAtoms(node.module, ref.getValue());
      if (atoms.size() != 1) {
        op->emitError() << "a name is indexed by an atomic dimension; '"
                        << ref.getValue() << "' is factored";
        return failure();
      }
      seg.kind = rt::NameSegment::Family;
      seg.atom = atoms.front().str();
    } else {
      int64_t i = cast<IntegerAttr>(s).getInt();
      const EvalValue &v = values[i];
      // The index of a pipelined stack is renumbered per stage, so it must
      // appear as itself.
      if (layerIndex && index &&
          yield.getValues()[i] == args.front().getArgument(0)) {
        seg.kind = rt::NameSegment::LayerIndex;
        seg.layer = index->i;
      } else {
        seg.text = v.kind == EvalValue::String ? v.s : std::to_string(v.i);
      }
    }
    out.push_back(std::move(seg));
  }
  if (layerIndex && index &&
      llvm::none_of(out, [](const rt::NameSegment &s) {
        return s.kind == rt::NameSegment::LayerIndex;
      })) {
    op->emitError() << "the mount of a pipelined stack must name its index "
                       "as a plain placeholder, as in \"layers.{i}\", so that "
                       "each stage can renumber it";
    return failure();
  }
  return out;
}

/// Appends `name` to `prefix`, with a dot unless either is empty.
std::vector<rt::NameSegment> join(const std::vector<rt::NameSegment> &prefix,
                                  const std::vector<rt::NameSegment> &name) {
  std::vector<rt::NameSegment> out = prefix;
  bool nameEmpty = name.empty() ||
                   (name.size() == 1 && name[0].kind == rt::NameSegment::Text &&
                    name[0].text.empty());
  if (!prefix.empty() && !nameEmpty) {
    rt::NameSegment dot;
    dot.text = ".";
    out.push_back(dot);
  }
  if (!nameEmpty)
    out.insert(out.end(), name.begin(), name.end());
  return out;
}

FailureOr<rt::Term> Binder::term(TermAttr t, ModuleDeclOp scope,
                                 InstanceNode &node, Operation *op,
                                 bool &dropped) {
  rt::Term out;
  switch (t.getKind()) {
  case TermKind::dim: {
    SmallVector<StringRef> atoms = getDimAtoms(scope, t.getName().getValue());
    if (atoms.size() == 1)
      return rt::Term::makeAtom(atoms.front().str());
    out.kind = rt::Term::Product;
    for (StringRef a : atoms)
      out.children.push_back(rt::Term::makeAtom(a.str()));
    return out;
  }
  case TermKind::unit:
    out.kind = rt::Term::Unit;
    return out;
  case TermKind::product:
    out.kind = rt::Term::Product;
    for (TermAttr c : t.terms()) {
      FailureOr<rt::Term> ct = term(c, scope, node, op, dropped);
      if (failed(ct))
        return failure();
      out.children.push_back(std::move(*ct));
    }
    return out;
  case TermKind::parts:
    out.kind = rt::Term::Parts;
    for (TermAttr p : t.terms()) {
      if (p.getName().getValue().empty()) {
        // A group: its terms, with their own part set, in the layout's
        // scope.
        rt::Term::Part group;
        bool groupDropped = false;
        for (TermAttr c : p.terms()) {
          FailureOr<rt::Term> ct = term(c, scope, node, op, groupDropped);
          if (failed(ct))
            return failure();
          group.shape.push_back(std::move(*ct));
        }
        if (!groupDropped)
          out.parts.push_back(std::move(group));
        continue;
      }
      std::string why;
      ResolvedParam r = resolveParam(node.module, p.getName().getValue(), why);
      if (!r.decl) {
        op->emitError() << why;
        return failure();
      }
      int index = findParam(node, p.getName().getValue());
      if (index < 0)
        continue; // a part left out by a condition drops out of the set
      rt::Term::Part part;
      part.param = index;
      for (TermAttr c : p.terms()) {
        FailureOr<rt::Term> ct = term(c, r.owner, node, op, dropped);
        if (failed(ct))
          return failure();
        part.shape.push_back(std::move(*ct));
      }
      out.parts.push_back(std::move(part));
    }
    if (out.parts.empty())
      dropped = true;
    return out;
  case TermKind::part:
    break;
  }
  op->emitError("malformed layout term");
  return failure();
}

/// A view size is a product of numbers and dimensions; a dimension there
/// stands for its per-rank extent. One written bare claims its axis.
FailureOr<std::vector<rt::TensorSpec::ViewAxis>>
Binder::bindView(InstanceNode &node, TensorOp op) {
  std::vector<rt::TensorSpec::ViewAxis> axes;
  auto yield = cast<YieldOp>(op.getView().front().back());
  for (Value v : yield.getValues()) {
    rt::TensorSpec::ViewAxis axis;
    bool ok = true;
    std::function<void(Value)> collect = [&](Value x) {
      Operation *def = x.getDefiningOp();
      if (auto c = dyn_cast_or_null<ConstantOp>(def)) {
        axis.factor *= cast<IntegerAttr>(c.getValue()).getInt();
      } else if (auto g = dyn_cast_or_null<GetOp>(def)) {
        Operation *decl = lookupValueDecl(g, g.getName());
        if (!isDimDecl(decl)) {
          ok = false;
          return;
        }
        for (StringRef a : getDimAtoms(node.module, g.getName()))
          axis.atoms.push_back(a.str());
        if (!axis.spelling.empty())
          axis.spelling += " * ";
        axis.spelling += g.getName().str();
      } else if (auto b = dyn_cast_or_null<BuiltinOp>(def);
                 b && b.getCallee() == "size") {
        collect(b.getArgs()[0]);
      } else if (auto m = dyn_cast_or_null<mdl::BinaryOp>(def);
                 m && m.getKind() == BinaryKind::mul) {
        collect(m.getLhs());
        collect(m.getRhs());
      } else {
        ok = false;
      }
    };
    collect(v);
    if (!ok || axis.factor <= 0)
      return op.emitError()
             << "a view size is a product of positive numbers and "
                "dimensions, which stand for their per-rank sizes";
    // A bare dimension, not wrapped in size(), claims the axis.
    axis.claim = isa_and_nonnull<GetOp>(v.getDefiningOp());
    axes.push_back(std::move(axis));
  }
  return axes;
}

LogicalResult Binder::bindTensor(InstanceNode &node, TensorOp op,
                                 const std::vector<rt::NameSegment> &prefix,
                                 InstanceNode *element) {
  rt::TensorSpec t;
  t.source = source(op);
  t.mounts = mountChain;
  t.unit = unitOf(element ? element : &node);
  std::vector<EvalValue> args;
  if (element)
    args.push_back(EvalValue::integer(element->stackIndex));
  // Conditions that do not read the parallel context are decided now.
  if (!op.getWhen().empty()) {
    if (readsContext(op.getWhen())) {
      InstanceNode *n = &node;
      Region *when = &op.getWhen();
      auto choices = out.choices;
      t.when = [n, when, args, choices](const RankContext &ctx) {
        FailureOr<std::vector<EvalValue>> v =
            n->evalRegion(*when, args, {&ctx, choices.get()});
        return succeeded(v) && v->front().i;
      };
    } else {
      FailureOr<std::vector<EvalValue>> v =
          node.evalRegion(op.getWhen(), args, env);
      if (failed(v))
        return failure();
      if (!v->front().i)
        return success();
    }
  }
  FailureOr<std::vector<rt::NameSegment>> name =
      renderTemplate(node, op, op.getName(), op.getNameArgs(),
                     element ? &args.front() : nullptr, false);
  if (failed(name))
    return failure();
  t.name = join(prefix, *name);

  LayoutAttr layout = op.getLayout();
  if (layout.getParam()) {
    std::string why;
    ResolvedParam r = resolveParam(node.module, layout.getParam(), why);
    if (!r.decl)
      return op.emitError() << why;
    t.param = findParam(node, layout.getParam());
    if (t.param < 0)
      return success(); // the parameter does not exist here
  }
  bool dropped = false;
  for (TermAttr axis : layout.axisTerms()) {
    std::vector<rt::Term> terms;
    for (TermAttr c : axis.terms()) {
      FailureOr<rt::Term> ct = term(c, node.module, node, op, dropped);
      if (failed(ct))
        return failure();
      terms.push_back(std::move(*ct));
    }
    t.axes.push_back(std::move(terms));
  }
  if (dropped)
    return success();
  t.copy = op.getCopy();
  if (!op.getCopyIf().empty()) {
    FailureOr<std::vector<EvalValue>> c =
        node.evalRegion(op.getCopyIf(), args, env);
    if (failed(c))
      return failure();
    t.copy = c->front().i;
  }
  if (auto o = op.getOffset())
    t.offset = int64_t(*o);
  if (auto s = op.getStored())
    t.stored = toDType(*s);
  if (!op.getView().empty()) {
    FailureOr<std::vector<rt::TensorSpec::ViewAxis>> view = bindView(node, op);
    if (failed(view))
      return failure();
    t.view = std::move(*view);
  }
  if (auto s = op.getSplit()) {
    t.splitAxis = int(*s);
    if (auto by = op.getSplitBy())
      t.splitBy = *parseMeshAxis(by->str());
  }
  if (auto on = op.getOn())
    t.on = placementOf(*on);
  else if (element)
    t.on = placementOf(element->stage);
  out.layout.tensors.push_back(std::move(t));
  out.tensorNodes.push_back(element ? element : &node);
  return success();
}

LogicalResult Binder::bindNode(InstanceNode &node,
                               const std::vector<rt::NameSegment> &prefix) {
  const std::vector<rt::NameSegment> &prefix_ = prefix;
  LayoutOp layout = backend.layoutFor(node.module);
  if (!layout && !node.params.empty() &&
      reportedNoLayout.insert(node.module).second) {
    auto diag = node.module.emitError()
                << "module '" << node.module.getSymName()
                << "' has parameters but no layout for backend '"
                << backend.name() << "'";
    diag.attachNote(node.module.getLoc()) << "first used by " << node.describe();
    return failure();
  }
  bool ok = true;
  if (layout)
    for (auto d : layout.getBodyBlock().getOps<DerivedOp>()) {
      FailureOr<EvalValue> w =
          node.evalOne(d.getWhen(), EvalValue::boolean(true), env);
      if (failed(w))
        return failure();
      if (!w->i)
        continue;
      rt::ModelLayout::DerivedTensor dt;
      std::string prefix;
      for (const rt::NameSegment &seg : prefix_)
        prefix += seg.kind == rt::NameSegment::Text ? seg.text
                                                    : std::to_string(seg.layer);
      dt.name = prefix.empty() ? d.getDerivedName().str()
                               : prefix + "." + d.getDerivedName().str();
      for (Attribute a : d.getSources()) {
        int index = findParam(node, cast<StringAttr>(a).getValue());
        if (index >= 0)
          dt.params.push_back(index);
      }
      if (auto r = d.getRecompute()) {
        dt.hasRecompute = true;
        for (Attribute a : *r)
          dt.recompute.push_back(cast<StringAttr>(a).str());
      }
      dt.source = source(d);
      out.layout.derived.push_back(std::move(dt));
    }
  if (layout)
    for (auto t : layout.getBodyBlock().getOps<TensorOp>()) {
      if (auto stack = t.getForStack()) {
        auto it = node.stacks.find(stack->str());
        if (it != node.stacks.end())
          for (auto &element : it->second)
            ok &= succeeded(bindTensor(node, t, prefix, element.get()));
        continue;
      }
      ok &= succeeded(bindTensor(node, t, prefix, nullptr));
    }

  // Where each child is named: the first mount entry whose condition holds,
  // else the child's own layout's mount, else the member's name.
  // `mount` is set to the entry that decides: the mount entry, the child's
  // layout, or the member.
  auto mountOf = [&](Operation *memberOp, StringRef member, InstanceNode &child,
                     const EvalValue *index, bool staged,
                     Operation *&mount) -> FailureOr<std::vector<rt::NameSegment>> {
    mount = memberOp;
    if (layout)
      for (auto m : layout.getBodyBlock().getOps<MountOp>()) {
        if (m.getMember() != member)
          continue;
        FailureOr<EvalValue> w =
            node.evalOne(m.getWhen(), EvalValue::boolean(true), env);
        if (failed(w))
          return failure();
        if (!w->i)
          continue;
        mount = m;
        return renderTemplate(node, m, m.getPath(), m.getPathArgs(), index,
                              staged);
      }
    std::vector<rt::NameSegment> name;
    rt::NameSegment seg;
    if (index) {
      seg.text = member.str() + ".";
      name.push_back(seg);
      rt::NameSegment idx;
      if (staged) {
        idx.kind = rt::NameSegment::LayerIndex;
        idx.layer = index->i;
      } else {
        idx.text = std::to_string(index->i);
      }
      name.push_back(idx);
      return name;
    }
    LayoutOp childLayout = backend.layoutFor(child.module);
    if (childLayout && childLayout.getMount())
      mount = childLayout;
    seg.text = childLayout && childLayout.getMount()
                   ? childLayout.getMount()->str()
                   : member.str();
    name.push_back(seg);
    return name;
  };

  for (Operation &op : node.module.getBodyBlock()) {
    if (auto in = dyn_cast<InstanceOp>(op)) {
      auto it = node.instances.find(in.getSymName().str());
      if (it == node.instances.end())
        continue;
      Operation *mount = nullptr;
      FailureOr<std::vector<rt::NameSegment>> m =
          mountOf(in, in.getSymName(), *it->second, nullptr, false, mount);
      if (failed(m))
        ok = false;
      mountChain.push_back({source(mount), mountedNodes++});
      if (succeeded(m) && failed(bindNode(*it->second, join(prefix, *m))))
        ok = false;
      mountChain.pop_back();
    } else if (auto st = dyn_cast<StackOp>(op)) {
      auto it = node.stacks.find(st.getSymName().str());
      if (it == node.stacks.end())
        continue;
      bool staged = !node.parent && it->second.size() &&
                    it->second.front()->stage != node.stage &&
                    placementOf(it->second.front()->stage).kind ==
                        rt::Placement::Layer;
      for (auto &child : it->second) {
        EvalValue index = EvalValue::integer(child->stackIndex);
        Operation *mount = nullptr;
        FailureOr<std::vector<rt::NameSegment>> m =
            mountOf(st, st.getSymName(), *child, &index, staged, mount);
        if (failed(m)) {
          ok = false;
          break;
        }
        mountChain.push_back({source(mount), mountedNodes++});
        bool bound = succeeded(bindNode(*child, join(prefix, *m)));
        mountChain.pop_back();
        if (!bound) {
          ok = false;
          break;
        }
      }
      if (staged)
        out.layout.stagedLayers = int64_t(it->second.size());
    }
  }
  return success(ok);
}

LogicalResult Binder::bindBackend() {
  InstanceNode *root = inst.root.get();
  auto choices = out.choices;
  for (BackendOp b : backend.chain)
    for (auto req : b.getBodyBlock().getOps<RequireOp>())
      out.layout.requirements.push_back(
          [root, req, choices](
              const ParallelConfig &c) mutable -> std::optional<std::string> {
            RankContext ctx;
            ctx.config = c;
            FailureOr<EvalValue> v = root->evalOne(
                req.getCond(), EvalValue::boolean(true), {&ctx, choices.get()});
            if (succeeded(v) && v->i)
              return std::nullopt;
            return req.getMessage().str();
          });
  // Capabilities: the nearest backend that declares one decides.
  RankContext one;
  for (BackendOp b : llvm::reverse(backend.chain))
    for (auto cap : b.getBodyBlock().getOps<CapabilityOp>()) {
      FailureOr<EvalValue> v = root->evalOne(
          cap.getValue(), EvalValue::boolean(false), {&one, choices.get()});
      if (failed(v))
        return failure();
      out.layout.capabilities[cap.getCapability().str()] = v->i;
    }
  inst.walk([&](InstanceNode &node) {
    for (auto need : node.module.getBodyBlock().getOps<NeedsOp>()) {
      rt::ModelLayout::CapabilityNeed n;
      n.instance = node.describe();
      n.capability = need.getCapability().str();
      if (auto f = need.getFallback())
        n.fallback = f->str();
      n.source = source(need);
      out.layout.needs.push_back(n);
    }
  });
  // The last stage's needs: `last head ?? embed`.
  for (auto p : inst.model.getBodyBlock().getOps<PipelineOp>())
    if (auto fallbacks = p.getFallbacksAttr())
      for (NamedAttribute f : fallbacks) {
        int wanted = findParam(*root, f.getName().getValue());
        int fallback =
            findParam(*root, cast<FlatSymbolRefAttr>(f.getValue()).getValue());
        out.layout.lastStageNeeds.push_back({wanted, fallback});
        out.layout.lastStageNeedsWhy =
            f.getName().str() + " to compute logits, or a copy of " +
            cast<FlatSymbolRefAttr>(f.getValue()).getValue().str() +
            " when there is no " + f.getName().str();
      }
  for (auto &[name, value] : *out.choices)
    out.layout.choices[name.str()] = value;
  // The classes: the nearest backend that declares a role decides.
  llvm::StringSet<> roles;
  for (BackendOp b : backend.chain)
    for (auto c : b.getBodyBlock().getOps<ClassOp>()) {
      if (!roles.insert(c.getRole()).second)
        continue;
      rt::ModelLayout::ModuleClass mc;
      mc.role = c.getRole().str();
      mc.name = c.getClassName().str();
      for (NamedAttribute p : c.getProps()) {
        if (auto s = dyn_cast<StringAttr>(p.getValue()))
          mc.properties[p.getName().str()] = s.str();
        else if (auto b = dyn_cast<BoolAttr>(p.getValue()))
          mc.properties[p.getName().str()] = b.getValue() ? "true" : "false";
      }
      out.layout.classes.push_back(std::move(mc));
    }
  return success();
}

LogicalResult Binder::run() {
  out.layout.model = inst.model.getSymName().str();
  out.layout.backend = backend.name().str();
  out.layout.mesh = backend.mesh();
  out.layout.hasPipeline =
      !inst.model.getBodyBlock().getOps<PipelineOp>().empty();
  if (failed(bindParams()) || failed(bindBackend()) ||
      failed(bindNode(*inst.root, {})))
    return failure();
  return bindBlockScales();
}

LogicalResult Binder::bindBlockScales() {
  if (LetOp suffix = backend.setting("block_scale_suffix")) {
    RankContext one;
    FailureOr<EvalValue> v = inst.root->evalOne(
        suffix.getValue(), EvalValue::string(""), {&one, out.choices.get()});
    if (failed(v))
      return failure();
    out.layout.blockScaleSuffix = v->s;
  }
  size_t numParams = out.layout.params.size();
  rt::BlockScaleResult r = rt::addBlockScales(
      out.layout, inst.dtype().value_or(mdl::DType::BF16));
  // One error per layout entry, with its first tensor and how many more:
  // a transposed entry of a layer would otherwise be reported once per
  // layer.
  std::map<int, std::pair<size_t, int>> grouped; // first error, more
  std::vector<int> order;
  for (size_t e = 0; e < r.errors.size(); ++e) {
    int source = out.layout.tensors[size_t(r.errors[e].first)].source;
    auto [it, fresh] = grouped.try_emplace(source, e, 0);
    if (fresh)
      order.push_back(source);
    else
      ++it->second.second;
  }
  for (int source : order) {
    auto [first, more] = grouped[source];
    const rt::TensorSpec &t = out.layout.tensors[size_t(r.errors[first].first)];
    auto diag = out.sources[size_t(source)]->emitError()
                << "tensor '" << rt::renderName(t, 0) << "' "
                << r.errors[first].second;
    if (more)
      diag << " (and " << more << " more tensor" << (more > 1 ? "s" : "")
           << " of this entry)";
    diag << " [block-scale]";
  }
  if (!r.errors.empty())
    return failure();
  for (size_t i = numParams; i < out.layout.params.size(); ++i)
    out.params.push_back(out.params[size_t(out.layout.params[i].scaleOf)]);
  for (int c : r.companionOf)
    out.tensorNodes.push_back(out.tensorNodes[size_t(c)]);
  return success();
}

} // namespace

std::optional<std::map<std::string, std::string>>
mdl::defaultChoices(Instantiation &inst, const Backend &backend) {
  std::map<std::string, std::string> out;
  std::vector<std::pair<std::string, std::vector<std::string>>> all =
      backend.choices();
  for (const auto &[name, options] : all)
    out[name] = options.front();
  LayoutOp layout = backend.layoutFor(inst.model);
  if (!layout)
    return out;
  for (auto d : layout.getBodyBlock().getOps<ChoiceDefaultOp>()) {
    auto it = llvm::find_if(
        all, [&](const auto &c) { return c.first == d.getChoice(); });
    if (it == all.end())
      continue;
    FailureOr<EvalValue> v =
        inst.root->evalOne(d.getValue(), EvalValue::string(""));
    if (failed(v))
      return std::nullopt;
    if (!llvm::is_contained(it->second, v->s)) {
      d.emitError() << "the default of choice '" << d.getChoice() << "' is '"
                    << v->s << "', which is not one of its options ("
                    << llvm::join(it->second, ", ") << ")";
      return std::nullopt;
    }
    out[it->first] = v->s;
  }
  return out;
}

std::unique_ptr<BoundModel>
mdl::bindModel(Instantiation &inst, const Backend &backend,
               const std::map<std::string, std::string> &choices) {
  auto out = std::make_unique<BoundModel>();
  out->choices = std::make_shared<llvm::StringMap<std::string>>();
  std::optional<std::map<std::string, std::string>> defaults =
      defaultChoices(inst, backend);
  if (!defaults)
    return nullptr;
  std::map<std::string, std::vector<std::string>> options;
  for (auto &[name, values] : backend.choices())
    options[name] = values;
  for (auto &[name, value] : *defaults) {
    auto it = choices.find(name);
    if (it != choices.end() && !llvm::is_contained(options[name], it->second)) {
      auto diag = emitError(const_cast<BackendOp &>(backend.chain.front()).getLoc())
                  << "backend " << backend.name() << " has no option '"
                  << it->second << "' for choice '" << name << "' (options:";
      for (const std::string &o : options[name])
        diag << " " << o;
      diag << ")";
      return nullptr;
    }
    (*out->choices)[name] = it != choices.end() ? it->second : value;
  }
  if (failed(Binder(inst, backend, *out).run()))
    return nullptr;
  return out;
}
