//===- Declarations.cpp - The runtime's declarations of a spec ------------===//
//
// Dimensions are resolved to their atoms here, once; what depends on the
// config stays in the expressions. Expressions are made in the order the
// ops declare them, so that a factory numbering them numbers them the same
// way every time.
//
//===----------------------------------------------------------------------===//

#include "mdl/Evaluate/Declarations.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/TypeSwitch.h"


using namespace mlir;
using namespace mdl;

ExprFactory::~ExprFactory() = default;

std::string mdl::whereOf(Operation *op, StringRef baseDir) {
  auto loc = dyn_cast<FileLineColLoc>(op->getLoc());
  if (!loc)
    return "";
  StringRef file = loc.getFilename().getValue();
  if (!baseDir.empty() && file.starts_with(baseDir) &&
      file.drop_front(baseDir.size()).starts_with("/"))
    file = file.drop_front(baseDir.size() + 1);
  return file.str() + ":" + std::to_string(loc.getLine()) + ":" +
         std::to_string(loc.getColumn());
}

std::string mdl::typeSpelling(Type type) {
  if (type.isInteger(64))
    return "int";
  if (type.isInteger(1))
    return "bool";
  if (isa<StringType>(type))
    return "string";
  if (isa<DTypeType>(type))
    return "dtype";
  return "list<" + typeSpelling(cast<ListType>(type).getElementType()) + ">";
}

ArrayRef<BackendSetting> mdl::backendSettings() {
  static const BackendSetting settings[] = {
      {"vocab_multiple", "vocabMultiple", &rt::BackendDecl::vocabMultiple},
      {"rank_dir", "rankDir", &rt::BackendDecl::rankDir},
      {"rank_file", "rankFile", &rt::BackendDecl::rankFile},
      {"tracker_file", "trackerFile", &rt::BackendDecl::trackerFile},
      {"rank_saved", "rankSaved", &rt::BackendDecl::rankSaved},
      {"adapter_backend", "adapterBackend", &rt::BackendDecl::adapterBackend},
      {"block_scale_suffix", "blockScaleSuffix",
       &rt::BackendDecl::blockScaleSuffix},
      {"mxfp4_blocks_suffix", "mxfp4BlocksSuffix",
       &rt::BackendDecl::mxfp4BlocksSuffix},
      {"mxfp4_scales_suffix", "mxfp4ScalesSuffix",
       &rt::BackendDecl::mxfp4ScalesSuffix},
      {"mxfp4_bytes_axis", "mxfp4BytesAxis", &rt::BackendDecl::mxfp4BytesAxis},
      {"stack_layers", "stackLayers", &rt::BackendDecl::stackLayers}};
  return settings;
}

SmallVector<ModuleDeclOp> mdl::reachableModules(ModuleDeclOp model) {
  ModuleOp top = getTopModule(model);
  llvm::SetVector<Operation *> found;
  found.insert(model);
  for (size_t i = 0; i < found.size(); ++i)
    found[i]->walk([&](CaseOp c) {
      if (Operation *m = SymbolTable::lookupSymbolIn(top, c.getModule()))
        found.insert(m);
    });
  SmallVector<ModuleDeclOp> out;
  for (Operation *op : found)
    out.push_back(cast<ModuleDeclOp>(op));
  return out;
}

namespace {

std::vector<std::string> strings(ArrayAttr a) {
  std::vector<std::string> out;
  if (a)
    for (Attribute x : a)
      out.push_back(cast<StringAttr>(x).str());
  return out;
}

std::vector<std::string> symbolNames(ArrayAttr a) {
  std::vector<std::string> out;
  for (Attribute x : a)
    out.push_back(cast<FlatSymbolRefAttr>(x).getValue().str());
  return out;
}

std::vector<std::string> atoms(ModuleDeclOp module, StringRef dim) {
  std::vector<std::string> out;
  for (StringRef a : getDimAtoms(module, dim))
    out.push_back(a.str());
  return out;
}

/// Axes of dimension symbols as atoms: [[G, P], [H]].
std::vector<std::vector<std::string>> axesOf(ModuleDeclOp module,
                                             ArrayRef<Attribute> axes) {
  std::vector<std::vector<std::string>> out;
  for (Attribute axis : axes) {
    std::vector<std::string> names;
    for (Attribute d : cast<ArrayAttr>(axis))
      for (std::string &a :
           atoms(module, cast<FlatSymbolRefAttr>(d).getValue()))
        names.push_back(std::move(a));
    out.push_back(std::move(names));
  }
  return out;
}

class DeclBuilder {
public:
  DeclBuilder(ExprFactory &exprs, const DeclarationOptions &options)
      : exprs(exprs), options(options) {}

  rt::ModuleDecl module(ModuleDeclOp m);
  LogicalResult layout(LayoutOp l, rt::LayoutDecl &out);
  rt::BackendDecl backend(BackendOp b);

private:
  std::string where(Operation *op) { return whereOf(op, options.baseDir); }
  rt::Expr fn(Region &region, unsigned result = 0) {
    return exprs.make(region, result);
  }
  rt::Expr fnOrNone(Region &region) { return exprs.makeOrNone(region); }
  void style(ModuleDeclOp m, ParallelStyleAttr s, rt::ParamDecl &p);
  rt::ChildDecl child(ModuleDeclOp m, Operation *op);
  rt::TermDecl term(TermAttr t, ModuleDeclOp scope, Operation *op);
  std::vector<rt::NamePiece> namePieces(Operation *op, ArrayAttr segments,
                                        Region &args, bool indexPiece);

  ExprFactory &exprs;
  const DeclarationOptions &options;
  /// Whether an error was reported (a layout that cannot be bound).
  bool failed = false;
};

void DeclBuilder::style(ModuleDeclOp m, ParallelStyleAttr s, rt::ParamDecl &p) {
  if (!s)
    return;
  // The dialect's style kinds are spelled as the runtime's styles are.
  p.style = enumOfName<TensorParallelStyle>(kTensorParallelStyleNames,
                                            stringifyStyleKind(s.getKind()))
                .value_or(TensorParallelStyle::None);
  if (s.getDim()) {
    p.styleDim = s.getDim().getValue().str();
    p.styleAtoms = atoms(m, s.getDim().getValue());
  }
}

rt::ChildDecl DeclBuilder::child(ModuleDeclOp m, Operation *op) {
  rt::ChildDecl c;
  auto inst = dyn_cast<InstanceOp>(op);
  Region &cases = inst ? inst.getCases() : cast<StackOp>(op).getCases();
  c.name = cast<SymbolOpInterface>(op).getName().str();
  if (inst) {
    c.cond = fnOrNone(inst.getCond());
  } else {
    c.stack = true;
    c.count = fn(cast<StackOp>(op).getCount());
  }
  for (auto k : cases.front().getOps<CaseOp>()) {
    rt::CaseDecl &d = c.cases.emplace_back();
    d.module = k.getModule().str();
    unsigned first = 0;
    if (k.getGuarded())
      d.guard = fn(k.getArgs(), first++);
    for (auto [i, name] : llvm::enumerate(k.getArgNames()))
      d.args.push_back(
          {cast<StringAttr>(name).str(), fn(k.getArgs(), first + unsigned(i))});
  }
  c.where = where(op);
  return c;
}

rt::ModuleDecl DeclBuilder::module(ModuleDeclOp m) {
  rt::ModuleDecl out;
  out.name = m.getSymName().str();
  out.where = where(m);
  for (Operation &op : m.getBodyBlock()) {
    auto value = [&](rt::ValueDecl::Kind kind, StringRef name, rt::Expr e,
                     std::vector<std::string> factors = {}) {
      out.values.push_back(
          {name.str(), kind, std::move(e), std::move(factors), where(&op)});
    };
    // What parameters and linears declare alike: the expert axis that
    // leads their axes, name, dtype and place. (Each case makes its
    // condition last: expressions are numbered in the order they are
    // made, and the generated code lists them so.)
    auto expertAxis = [&](auto decl) {
      SmallVector<Attribute> axes;
      if (auto e = decl.getExpertAttr())
        axes.push_back(ArrayAttr::get(m.getContext(), {e}));
      return axes;
    };
    auto declareParam = [&](auto decl) -> rt::ParamDecl & {
      rt::ParamDecl &d = out.params.emplace_back();
      d.name = decl.getSymName().str();
      if (auto e = decl.getExpert())
        d.expert = e->str();
      if (auto t = decl.getDtype())
        d.dtype = toDType(*t);
      d.where = where(decl);
      return d;
    };
    TypeSwitch<Operation *>(&op)
        .Case<InputOp>([&](InputOp in) {
          value(in.getDim() ? rt::ValueDecl::InputDim : rt::ValueDecl::Input,
                in.getSymName(), fnOrNone(in.getDefaultValue()));
        })
        .Case<ConfigOp>([&](ConfigOp c) {
          value(rt::ValueDecl::Config, c.getSymName(), fn(c.getValue()));
          if (c.getDetect().empty())
            return;
          std::vector<std::string> keys;
          c.getValue().walk([&](HfOp h) { keys.push_back(h.getPath().str()); });
          out.detectable.push_back(
              {c.getSymName().str(), fn(c.getDetect()), std::move(keys)});
        })
        .Case<LetOp>([&](LetOp l) {
          value(rt::ValueDecl::Let, l.getSymName(), fn(l.getValue()));
        })
        .Case<DimOp>([&](DimOp dim) {
          std::vector<std::string> factors;
          if (auto f = dim.getFactors())
            factors = symbolNames(*f);
          rt::Expr size = factors.empty() ? fn(dim.getSize()) : rt::Expr();
          value(rt::ValueDecl::Dim, dim.getSymName(), std::move(size),
                std::move(factors));
        })
        .Case<RequireOp>([&](RequireOp r) {
          out.requirements.push_back(
              {fn(r.getCond()), r.getMessage().str(), where(r)});
        })
        .Case<DefaultDTypeOp>(
            [&](DefaultDTypeOp d) { out.defaultDType = fn(d.getValue()); })
        .Case<ParamOp>([&](ParamOp p) {
          SmallVector<Attribute> axes = expertAxis(p);
          axes.append(p.getShape().begin(), p.getShape().end());
          rt::ParamDecl &d = declareParam(p);
          d.axes = axesOf(m, axes);
          style(m, p.getStyleAttr(), d);
          d.cond = fnOrNone(p.getCond());
        })
        .Case<LinearOp>([&](LinearOp l) {
          // The weight is [out..., in...], as torch stores it.
          SmallVector<Attribute> weight = expertAxis(l), bias = weight;
          weight.append(l.getOut().begin(), l.getOut().end());
          weight.append(l.getIn().begin(), l.getIn().end());
          bias.append(l.getOut().begin(), l.getOut().end());
          rt::ParamDecl &d = declareParam(l);
          d.linear = true;
          d.outAxes = int(l.getOut().size());
          d.axes = axesOf(m, weight);
          d.biasAxes = axesOf(m, bias);
          style(m, l.getStyle(), d);
          if (l.getBias()) {
            d.bias = true;
            d.biasCond = fnOrNone(l.getBiasCond());
          }
          d.scaleBlock = fnOrNone(l.getScaleBlock());
          if (l.getMxfp4()) {
            d.mxfp4 = true;
            d.mxfp4Cond = fnOrNone(l.getMxfp4Cond());
          }
          d.cond = fnOrNone(l.getCond());
        })
        .Case<InstanceOp, StackOp>(
            [&](Operation *c) { out.children.push_back(child(m, c)); })
        .Case<PipelineOp>([&](PipelineOp p) {
          out.first = symbolNames(p.getFirst());
          out.last = symbolNames(p.getLast());
          if (auto s = p.getStages())
            out.stages = s->str();
          if (auto f = p.getFallbacksAttr())
            for (NamedAttribute n : f)
              out.fallbacks.push_back(
                  {n.getName().str(),
                   cast<FlatSymbolRefAttr>(n.getValue()).getValue().str()});
        })
        .Case<NeedsOp>([&](NeedsOp n) {
          std::optional<std::string> fallback;
          if (auto f = n.getFallback())
            fallback = f->str();
          out.needs.push_back(
              {n.getCapability().str(), std::move(fallback), where(n)});
        });
  }
  return out;
}

rt::TermDecl DeclBuilder::term(TermAttr t, ModuleDeclOp scope, Operation *op) {
  switch (t.getKind()) {
  case TermKind::dim: {
    std::vector<std::string> names = atoms(scope, t.getName().getValue());
    if (names.size() == 1)
      return rt::atom(names.front());
    std::vector<rt::TermDecl> children;
    for (std::string &a : names)
      children.push_back(rt::atom(std::move(a)));
    return rt::product(std::move(children));
  }
  case TermKind::unit:
    return rt::unit();
  case TermKind::product: {
    std::vector<rt::TermDecl> children;
    for (TermAttr c : t.terms())
      children.push_back(term(c, scope, op));
    return rt::product(std::move(children));
  }
  case TermKind::parts: {
    std::vector<rt::TermDecl::Part> parts;
    for (TermAttr p : t.terms()) {
      StringRef param = p.getName().getValue();
      // A part's dimensions are those of the module owning its parameter.
      ModuleDeclOp owner = scope;
      if (!param.empty()) {
        std::string why;
        ResolvedParam r = resolveParam(scope, param, why);
        if (r.decl)
          owner = r.owner;
        else
          (void)(op->emitError() << why), failed = true;
      }
      rt::TermDecl::Part &part = parts.emplace_back();
      part.param = param.str();
      for (TermAttr c : p.terms())
        part.shape.push_back(term(c, owner, op));
    }
    return rt::parts(std::move(parts));
  }
  case TermKind::part:
    break;
  }
  return rt::unit();
}

std::vector<rt::NamePiece> DeclBuilder::namePieces(Operation *op,
                                                   ArrayAttr segments,
                                                   Region &args,
                                                   bool indexPiece) {
  std::vector<rt::NamePiece> out;
  for (Attribute s : segments) {
    rt::NamePiece &piece = out.emplace_back();
    if (auto text = dyn_cast<StringAttr>(s)) {
      piece.text = text.str();
    } else if (auto ref = dyn_cast<FlatSymbolRefAttr>(s)) {
      ModuleDeclOp module = getLayoutModule(op->getParentOfType<LayoutOp>());
      std::vector<std::string> names = atoms(module, ref.getValue());
      if (names.size() != 1) {
        op->emitError() << "a name is indexed by an atomic dimension; '"
                        << ref.getValue() << "' is factored";
        failed = true;
      }
      piece.kind = rt::NamePiece::Family;
      piece.text = names.front();
    } else {
      int64_t n = cast<IntegerAttr>(s).getInt();
      auto yield = cast<YieldOp>(args.front().back());
      bool isIndex = indexPiece && args.front().getNumArguments() > 0 &&
                     yield.getValues()[n] == args.front().getArgument(0);
      piece.kind = isIndex ? rt::NamePiece::Index : rt::NamePiece::Value;
      piece.value = fn(args, unsigned(n));
    }
  }
  return out;
}

LogicalResult DeclBuilder::layout(LayoutOp l, rt::LayoutDecl &out) {
  ModuleDeclOp module = getLayoutModule(l);
  out.module = l.getModule().str();
  if (auto mount = l.getMount())
    out.mount = mount->str();
  out.where = where(l);
  bool ok = true;
  for (Operation &op : l.getBodyBlock()) {
    if (auto t = dyn_cast<TensorOp>(op)) {
      rt::TensorDecl &d = out.tensors.emplace_back();
      d.name = namePieces(t, t.getName(), t.getNameArgs(), false);
      LayoutAttr layout = t.getLayout();
      ModuleDeclOp scope = module;
      if (layout.getParam()) {
        d.param = layout.getParam().getValue().str();
        std::string why;
        ResolvedParam r = resolveParam(module, layout.getParam(), why);
        if (r.decl)
          scope = r.owner;
      }
      for (TermAttr axis : layout.axisTerms()) {
        std::vector<rt::TermDecl> terms;
        for (TermAttr c : axis.terms())
          terms.push_back(term(c, scope, t));
        d.axes.push_back(std::move(terms));
      }
      if (auto s = t.getForStack())
        d.forStack = s->str();
      d.copy = t.getCopy();
      d.zero = t.getZero();
      d.copyIf = fnOrNone(t.getCopyIf());
      if (auto o = t.getOffset())
        d.offset = int64_t(*o);
      d.negExp = t.getNegExp();
      if (auto s = t.getStored())
        d.stored = toDType(*s);
      if (ArrayAttr view = t.getViewAxesAttr())
        for (auto a : view.getAsRange<ViewAxisAttr>())
          d.view.push_back({a.getFactor(), strings(a.getAtoms()), a.getClaim(),
                            a.getSpelling().str()});
      if (auto s = t.getSplit()) {
        d.split = int(*s);
        if (auto by = t.getSplitBy())
          d.splitBy = MeshAxis(*by);
      }
      if (auto on = t.getOn())
        d.on = *on == StageKind::first ? rt::Placement::First
                                       : rt::Placement::Last;
      if (!t.getWhen().empty()) {
        d.when = fn(t.getWhen());
        d.whenReadsContext = t.getReadsContext();
      }
      d.derived = t.getDerived();
      if (auto r = t.getRecompute()) {
        d.hasRecompute = true;
        d.recompute = strings(*r);
      }
      d.where = where(t);
    } else if (auto m = dyn_cast<MountOp>(op)) {
      rt::Expr when = fnOrNone(m.getWhen());
      out.mounts.push_back({m.getMember().str(), std::move(when),
                            namePieces(m, m.getPath(), m.getPathArgs(), true),
                            where(m)});
    } else if (auto s = dyn_cast<ShardOp>(op)) {
      out.shards.push_back({strings(s.getParams()), s.getDim().str(),
                            atoms(module, s.getDim()), MeshAxis(s.getAxis()),
                            s.getReplicate(), fnOrNone(s.getWhen()),
                            where(s)});
    } else if (auto d = dyn_cast<DerivedOp>(op)) {
      std::vector<std::string> recompute;
      if (auto r = d.getRecompute())
        recompute = strings(*r);
      out.derived.push_back({d.getDerivedName().str(), strings(d.getSources()),
                             d.getRecompute().has_value(), std::move(recompute),
                             fnOrNone(d.getWhen()), where(d)});
    } else if (auto b = dyn_cast<BufferOp>(op)) {
      out.buffers.push_back(
          {b.getBufferName().str(), fnOrNone(b.getWhen()), where(b)});
    } else if (auto c = dyn_cast<ChoiceDefaultOp>(op)) {
      out.choiceDefaults.push_back(
          {c.getChoice().str(), fn(c.getValue()), where(c)});
    }
  }
  return success(ok && !failed);
}

rt::BackendDecl DeclBuilder::backend(BackendOp b) {
  rt::BackendDecl out;
  out.name = b.getSymName().str();
  for (Attribute a : b.getMesh())
    out.mesh.push_back(*parseMeshAxis(cast<StringAttr>(a).getValue().str()));
  for (Operation &op : b.getBodyBlock()) {
    if (auto l = dyn_cast<LetOp>(op)) {
      for (const BackendSetting &s : backendSettings())
        if (l.getSymName() == s.let)
          out.*s.member = fn(l.getValue());
    } else if (auto r = dyn_cast<RequireOp>(op)) {
      out.requirements.push_back(
          {fn(r.getCond()), r.getMessage().str(), where(r)});
    } else if (auto c = dyn_cast<CapabilityOp>(op)) {
      out.capabilities.push_back({c.getCapability().str(), fn(c.getValue())});
    } else if (auto c = dyn_cast<ChoiceOp>(op)) {
      out.choices.push_back(
          {c.getSymName().str(), strings(c.getOptions()), where(c)});
    } else if (auto c = dyn_cast<ClassOp>(op)) {
      rt::ClassDecl &d = out.classes.emplace_back();
      // A class for the modules of one name is keyed "module:<name>".
      StringRef role = c.getRole();
      if (role.consume_front("module:"))
        d.module = role.str();
      else
        d.role = parseModuleRole(role);
      d.name = c.getClassName().str();
      for (NamedAttribute p : c.getProps()) {
        std::string value;
        if (auto s = dyn_cast<StringAttr>(p.getValue()))
          value = s.str();
        else if (auto bl = dyn_cast<BoolAttr>(p.getValue()))
          value = bl.getValue() ? "true" : "false";
        d.properties[p.getName().str()] = value;
      }
    }
  }
  return out;
}

} // namespace

FailureOr<rt::ModelDecl>
mdl::buildModelDecl(ModuleDeclOp model, ExprFactory &exprs,
                    const DeclarationOptions &options) {
  DeclBuilder builder(exprs, options);
  rt::ModelDecl out;
  out.name = model.getSymName().str();
  out.spec = options.specName;
  out.architectures = strings(model.getArchitecturesAttr());
  out.modelTypes = strings(model.getModelTypesAttr());
  for (ModuleDeclOp m : reachableModules(model))
    out.modules.push_back(builder.module(m));
  return out;
}

FailureOr<rt::BackendDecl>
mdl::buildBackendDecl(BackendOp backend, ModuleDeclOp model, ExprFactory &exprs,
                      const DeclarationOptions &options) {
  DeclBuilder builder(exprs, options);
  rt::BackendDecl out = builder.backend(backend);
  llvm::DenseSet<Operation *> modules;
  for (ModuleDeclOp m : reachableModules(model))
    modules.insert(m);
  bool ok = true;
  for (auto l : getTopModule(backend).getOps<LayoutOp>())
    if (l.getBackend() == backend.getSymName() &&
        modules.count(getLayoutModule(l)))
      ok &= succeeded(builder.layout(l, out.layouts.emplace_back()));
  if (!ok)
    return failure();
  return out;
}
