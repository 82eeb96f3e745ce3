//===- MDLOps.cpp - Operations of the mdl dialect -------------------------===//
//
// The verifiers here check what the IR itself must satisfy, whoever built
// it: symbols resolve, regions yield what their op expects, arguments fit
// the module they instantiate, layouts name parameters and dimensions of the
// module they describe.
//
//===----------------------------------------------------------------------===//

#include "mdl/Dialect/MDL/MDLOps.h"
#include "mdl/Runtime/Base/Parallel.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/SmallPtrSet.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace mdl;

#include "mdl/Dialect/MDL/MDLOpsDialect.cpp.inc"

void MDLDialect::initialize() {
  registerTypes();
  registerAttributes();
  addOperations<
#define GET_OP_LIST
#include "mdl/Dialect/MDL/MDLOps.cpp.inc"
      >();
}

//===----------------------------------------------------------------------===//
// Helpers
//===----------------------------------------------------------------------===//

ModuleOp mdl::getTopModule(Operation *op) {
  // Declarations sit directly in a builtin module; the nearest one holds
  // them (a parser may wrap it in another).
  for (Operation *p = op; p; p = p->getParentOp())
    if (auto m = dyn_cast<ModuleOp>(p))
      return m;
  return {};
}

template <typename OpT>
static OpT lookupTop(Operation *from, StringRef name) {
  ModuleOp top = getTopModule(from);
  if (!top)
    return {};
  return dyn_cast_or_null<OpT>(SymbolTable::lookupSymbolIn(top, name));
}

ModuleDeclOp mdl::getLayoutModule(LayoutOp layout) {
  return lookupTop<ModuleDeclOp>(layout, layout.getModule());
}

static bool isValueDecl(Operation *op) {
  return op && isa<InputOp, ConfigOp, LetOp, DimOp, ChoiceOp>(op);
}

/// The declaration of `name` in `backend` or its bases.
static Operation *lookupInBackend(BackendOp backend, StringRef name) {
  llvm::SmallPtrSet<Operation *, 4> seen;
  for (BackendOp b = backend; b && seen.insert(b).second;) {
    Operation *d = SymbolTable::lookupSymbolIn(b, name);
    if (isValueDecl(d))
      return d;
    if (!b.getBase())
      break;
    b = lookupTop<BackendOp>(b, *b.getBase());
  }
  return nullptr;
}

Operation *mdl::lookupValueDecl(Operation *from, StringRef name) {
  for (Operation *p = from; p; p = p->getParentOp()) {
    if (auto layout = dyn_cast<LayoutOp>(p)) {
      // The layout's lets, its module's names, then its backend's.
      Operation *d = SymbolTable::lookupSymbolIn(layout, name);
      if (isValueDecl(d))
        return d;
      if (ModuleDeclOp m = getLayoutModule(layout)) {
        d = SymbolTable::lookupSymbolIn(m, name);
        if (isValueDecl(d))
          return d;
      }
      if (auto b = lookupTop<BackendOp>(layout, layout.getBackend()))
        return lookupInBackend(b, name);
      return nullptr;
    }
    if (auto module = dyn_cast<ModuleDeclOp>(p)) {
      Operation *d = SymbolTable::lookupSymbolIn(module, name);
      return isValueDecl(d) ? d : nullptr;
    }
    if (auto backend = dyn_cast<BackendOp>(p))
      return lookupInBackend(backend, name);
  }
  return nullptr;
}

Type mdl::getDeclaredType(Operation *decl) {
  return TypeSwitch<Operation *, Type>(decl)
      .Case<InputOp>([](InputOp op) { return op.getType(); })
      .Case<ConfigOp>([](ConfigOp op) { return op.getType(); })
      .Case<LetOp>([](LetOp op) { return op.getType(); })
      .Case<DimOp>(
          [](DimOp op) { return IntegerType::get(op.getContext(), 64); })
      .Case<ChoiceOp>(
          [](ChoiceOp op) { return StringType::get(op.getContext()); })
      .Default([](Operation *) { return Type(); });
}

bool mdl::isDimDecl(Operation *decl) {
  if (auto in = dyn_cast_or_null<InputOp>(decl))
    return in.getDim();
  return isa_and_nonnull<DimOp>(decl);
}

SmallVector<StringRef> mdl::getDimAtoms(ModuleDeclOp module, StringRef name) {
  SmallVector<StringRef> atoms;
  SmallVector<std::pair<StringRef, unsigned>> work{{name, 0}};
  while (!work.empty()) {
    auto [dim, depth] = work.pop_back_val();
    auto d = dyn_cast_or_null<DimOp>(SymbolTable::lookupSymbolIn(module, dim));
    // Depth bounds a (verifier-rejected) cycle among factors.
    if (!d || !d.getFactors() || depth > 16) {
      atoms.push_back(dim);
      continue;
    }
    auto factors = d.getFactors()->getValue();
    for (auto it = factors.rbegin(); it != factors.rend(); ++it)
      work.push_back({cast<FlatSymbolRefAttr>(*it).getValue(), depth + 1});
  }
  return atoms;
}

ResolvedParam mdl::resolveParam(ModuleDeclOp module, StringRef dotted,
                                std::string &why) {
  ResolvedParam result;
  SmallVector<StringRef> parts;
  dotted.split(parts, '.');
  ModuleDeclOp current = module;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (result.decl) {
      if (parts[i] == "bias" && i + 1 == parts.size() &&
          isa<LinearOp>(result.decl)) {
        if (!cast<LinearOp>(result.decl).getBias()) {
          why = "linear '" + parts[i - 1].str() + "' has no bias";
          return {};
        }
        result.bias = true;
        return result;
      }
      why = "'" + parts[i - 1].str() + "' is a parameter, not an instance";
      return {};
    }
    Operation *d = SymbolTable::lookupSymbolIn(current, parts[i]);
    if (isa_and_nonnull<ParamOp, LinearOp>(d)) {
      result.decl = d;
      result.owner = current;
      continue;
    }
    auto inst = dyn_cast_or_null<InstanceOp>(d);
    if (!inst || i + 1 == parts.size()) {
      why = "'" + current.getSymName().str() + "' has no parameter '" +
            parts[i].str() + "'";
      return {};
    }
    StringRef callee;
    for (auto c : inst.getCases().front().getOps<CaseOp>()) {
      if (!callee.empty() && callee != c.getModule()) {
        why = "'" + parts[i].str() + "' may be one of several modules";
        return {};
      }
      callee = c.getModule();
    }
    current = lookupTop<ModuleDeclOp>(module, callee);
    if (!current) {
      why = "unknown module '" + callee.str() + "'";
      return {};
    }
  }
  if (!result.decl)
    why = "'" + dotted.str() + "' is not a parameter";
  return result;
}

/// The values yielded by a single-block region, or null if it does not end
/// in `mdl.yield`.
static YieldOp getYield(Region &region) {
  if (region.empty() || region.front().empty())
    return {};
  return dyn_cast<YieldOp>(region.front().back());
}

/// Checks that `region` yields values of exactly `types`.
static LogicalResult verifyYields(Operation *op, Region &region,
                                  TypeRange types, StringRef what) {
  if (region.empty())
    return success();
  if (!region.hasOneBlock())
    return op->emitOpError() << what << " region must have one block";
  YieldOp yield = getYield(region);
  if (!yield)
    return op->emitOpError() << what << " region must end in mdl.yield";
  if (yield.getValues().getTypes() != types) {
    auto diag = op->emitOpError()
                << what << " region must yield " << types.size()
                << " value(s) of type(s) (";
    llvm::interleaveComma(types, diag);
    diag << ") but yields (";
    llvm::interleaveComma(yield.getValues().getTypes(), diag);
    return diag << ")";
  }
  return success();
}

static Type i64(MLIRContext *ctx) { return IntegerType::get(ctx, 64); }
static Type i1(MLIRContext *ctx) { return IntegerType::get(ctx, 1); }

//===----------------------------------------------------------------------===//
// Declarations
//===----------------------------------------------------------------------===//

LogicalResult ModuleDeclOp::verify() {
  bool model = getModel();
  for (Operation &op : getBodyBlock()) {
    if (isa<InputOp>(op) && model)
      return op.emitOpError("a model takes no inputs");
    if (isa<ConfigOp, PipelineOp, DefaultDTypeOp, DeployOp>(op) && !model)
      return op.emitOpError() << "belongs in a model, and '" << getSymName()
                              << "' is a module";
    if (!isa<InputOp, ConfigOp, LetOp, DimOp, RequireOp, DefaultDTypeOp,
             ParamOp, LinearOp, InstanceOp, StackOp, PipelineOp, NeedsOp,
             DeployOp>(op))
      return op.emitOpError("cannot appear in a module");
  }
  if (getExamples() && !model)
    return emitOpError("only a model has examples");
  if ((getArchitectures() || getModelTypes()) && !model)
    return emitOpError("only a model serves architectures or model types");
  return success();
}

LogicalResult InputOp::verifyRegions() {
  if (getDim() && getType() != i64(getContext()))
    return emitOpError("a dimension input must be an i64");
  return verifyYields(*this, getDefaultValue(), getType(), "default");
}

LogicalResult ConfigOp::verifyRegions() {
  if (failed(verifyYields(*this, getValue(), getType(), "value")))
    return failure();
  if (!getDetect().empty() && !getDetect().hasOneBlock())
    return emitOpError("detect region must have one block");
  return verifyYields(*this, getDetect(),
                      ListType::get(getContext(), getType()), "detect");
}

LogicalResult LetOp::verifyRegions() {
  return verifyYields(*this, getValue(), getType(), "value");
}

LogicalResult DimOp::verifyRegions() {
  bool factored = getFactors().has_value();
  if (factored == !getSize().empty())
    return emitOpError("a dimension has either a size or factors");
  if (!factored)
    return verifyYields(*this, getSize(), i64(getContext()), "size");
  auto module = (*this)->getParentOfType<ModuleDeclOp>();
  ArrayAttr factors = *getFactors();
  for (Attribute f : factors) {
    StringRef name = cast<FlatSymbolRefAttr>(f).getValue();
    if (name == getSymName())
      return emitOpError("a dimension cannot be its own factor");
    if (!module || !isDimDecl(SymbolTable::lookupSymbolIn(module, name)))
      return emitOpError() << "factor '" << name << "' is not a dimension";
  }
  return success();
}

LogicalResult RequireOp::verifyRegions() {
  return verifyYields(*this, getCond(), i1(getContext()), "condition");
}

LogicalResult DefaultDTypeOp::verifyRegions() {
  return verifyYields(*this, getValue(), DTypeType::get(getContext()),
                      "value");
}

/// Checks a shape attribute: an array of axes, each an array of dimension
/// symbols of `module`. Collects the atomic dimensions into `atoms`.
static LogicalResult verifyShape(Operation *op, ModuleDeclOp module,
                                 ArrayAttr shape, StringRef what,
                                 llvm::StringSet<> &atoms) {
  for (Attribute axis : shape) {
    auto dims = dyn_cast<ArrayAttr>(axis);
    if (!dims || dims.empty())
      return op->emitOpError() << what
                               << " axes must be non-empty lists of dimensions";
    for (Attribute d : dims) {
      auto ref = dyn_cast<FlatSymbolRefAttr>(d);
      if (!ref)
        return op->emitOpError() << what << " names dimensions by symbol";
      if (!module ||
          !isDimDecl(SymbolTable::lookupSymbolIn(module, ref.getValue())))
        return op->emitOpError()
               << what << " names '" << ref.getValue()
               << "', which is not a dimension of the module";
      atoms.insert(ref.getValue());
      for (StringRef a : getDimAtoms(module, ref.getValue()))
        atoms.insert(a);
    }
  }
  return success();
}

static LogicalResult verifyExpert(Operation *op, ModuleDeclOp module,
                                  std::optional<StringRef> expert) {
  if (expert && !isDimDecl(SymbolTable::lookupSymbolIn(module, *expert)))
    return op->emitOpError() << "expert dimension '" << *expert
                             << "' is not a dimension of the module";
  return success();
}

LogicalResult ParamOp::verify() {
  auto module = (*this)->getParentOfType<ModuleDeclOp>();
  llvm::StringSet<> atoms;
  if (failed(verifyShape(*this, module, getShape(), "shape", atoms)) ||
      failed(verifyExpert(*this, module, getExpert())))
    return failure();
  if (auto style = getStyleAttr()) {
    if (style.getKind() == StyleKind::column ||
        style.getKind() == StyleKind::row)
      return emitOpError("column and row styles are for linears");
    if (style.getDim() && !atoms.contains(style.getDim().getValue()))
      return emitOpError() << "style splits '" << style.getDim().getValue()
                           << "', which is not a dimension of the shape";
  }
  return success();
}

LogicalResult ParamOp::verifyRegions() {
  return verifyYields(*this, getCond(), i1(getContext()), "condition");
}

LogicalResult LinearOp::verify() {
  auto module = (*this)->getParentOfType<ModuleDeclOp>();
  llvm::StringSet<> inAtoms, outAtoms;
  if (failed(verifyShape(*this, module, getIn(), "input", inAtoms)) ||
      failed(verifyShape(*this, module, getOut(), "output", outAtoms)) ||
      failed(verifyExpert(*this, module, getExpert())))
    return failure();
  ParallelStyleAttr style = getStyle();
  if (!style.getDim())
    return success();
  StringRef dim = style.getDim().getValue();
  switch (style.getKind()) {
  case StyleKind::column:
  case StyleKind::vocab:
    if (!outAtoms.contains(dim))
      return emitOpError() << "splits output dimension '" << dim
                           << "', which the output does not have";
    break;
  case StyleKind::row:
    if (!inAtoms.contains(dim))
      return emitOpError() << "splits input dimension '" << dim
                           << "', which the input does not have";
    break;
  default:
    return emitOpError("a linear is split by column, row or vocab");
  }
  if (!getBias() && !getBiasCond().empty())
    return emitOpError("has a bias condition but no bias");
  if (!getMxfp4() && !getMxfp4Cond().empty())
    return emitOpError("has an mxfp4 condition but is not mxfp4");
  if (getMxfp4() && !getScaleBlock().empty())
    return emitOpError("is both FP8 block-scaled and MXFP4");
  return success();
}

LogicalResult LinearOp::verifyRegions() {
  if (failed(verifyYields(*this, getBiasCond(), i1(getContext()),
                          "bias condition")) ||
      failed(verifyYields(*this, getScaleBlock(), i64(getContext()),
                          "scale block size")) ||
      failed(verifyYields(*this, getMxfp4Cond(), i1(getContext()),
                          "mxfp4 condition")))
    return failure();
  return verifyYields(*this, getCond(), i1(getContext()), "condition");
}

static LogicalResult verifyCases(Operation *op, Region &cases) {
  if (cases.front().empty())
    return op->emitOpError("needs at least one mdl.case");
  for (Operation &c : cases.front())
    if (!isa<CaseOp>(c))
      return op->emitOpError("may only hold mdl.case ops");
  return success();
}

LogicalResult InstanceOp::verifyRegions() {
  if (failed(verifyCases(*this, getCases())))
    return failure();
  return verifyYields(*this, getCond(), i1(getContext()), "condition");
}

LogicalResult StackOp::verifyRegions() {
  if (failed(verifyCases(*this, getCases())))
    return failure();
  return verifyYields(*this, getCount(), i64(getContext()), "count");
}

LogicalResult CaseOp::verifyRegions() {
  auto callee = lookupTop<ModuleDeclOp>(*this, getModule());
  if (!callee)
    return emitOpError() << "instantiates unknown module '" << getModule()
                         << "'";
  if (callee.getModel())
    return emitOpError() << "'" << getModule()
                         << "' is a model and cannot be instantiated";
  bool inStack = isa<StackOp>((*this)->getParentOp());
  Block &block = getArgs().front();
  if (block.getNumArguments() != (inStack ? 1u : 0u) ||
      (inStack && block.getArgument(0).getType() != i64(getContext())))
    return emitOpError() << (inStack ? "inside a stack, a case takes the "
                                       "index as one i64 argument"
                                     : "outside a stack, a case takes no "
                                       "arguments");
  SmallVector<Type> expected;
  if (getGuarded())
    expected.push_back(i1(getContext()));
  llvm::StringSet<> given;
  for (Attribute a : getArgNames()) {
    StringRef name = cast<StringAttr>(a).getValue();
    auto input = dyn_cast_or_null<InputOp>(
        SymbolTable::lookupSymbolIn(callee, name));
    if (!input)
      return emitOpError() << "'" << getModule() << "' has no input '" << name
                           << "'";
    if (!given.insert(name).second)
      return emitOpError() << "input '" << name << "' is given twice";
    expected.push_back(input.getType());
  }
  for (auto input : callee.getBodyBlock().getOps<InputOp>())
    if (!given.contains(input.getSymName()) && input.getDefaultValue().empty())
      return emitOpError() << "input '" << input.getSymName()
                           << "' of '" << getModule()
                           << "' has no default and is not given";
  return verifyYields(*this, getArgs(), expected, "arguments");
}

LogicalResult PipelineOp::verify() {
  auto model = (*this)->getParentOfType<ModuleDeclOp>();
  auto check = [&](Attribute a) -> LogicalResult {
    StringRef name = cast<FlatSymbolRefAttr>(a).getValue();
    Operation *d = SymbolTable::lookupSymbolIn(model, name);
    if (!isa_and_nonnull<ParamOp, LinearOp, InstanceOp, StackOp>(d))
      return emitOpError() << "places '" << name
                           << "', which is not a member of the model";
    return success();
  };
  for (Attribute a : getFirst())
    if (failed(check(a)))
      return failure();
  for (Attribute a : getLast())
    if (failed(check(a)))
      return failure();
  if (auto stages = getStagesAttr()) {
    if (failed(check(stages)))
      return failure();
    if (!isa<StackOp>(SymbolTable::lookupSymbolIn(model, stages.getValue())))
      return emitOpError("only a stack can be spread over stages");
  }
  if (auto fallbacks = getFallbacksAttr())
    for (NamedAttribute f : fallbacks) {
      auto ref = dyn_cast<FlatSymbolRefAttr>(f.getValue());
      if (!ref || !isa_and_nonnull<ParamOp, LinearOp>(
                      SymbolTable::lookupSymbolIn(model, ref.getValue())))
        return emitOpError() << "the fallback of '" << f.getName().getValue()
                             << "' must name a parameter of the model";
    }
  return success();
}

//===----------------------------------------------------------------------===//
// Layouts
//===----------------------------------------------------------------------===//

LogicalResult LayoutOp::verify() {
  if (!lookupTop<BackendOp>(*this, getBackend()))
    return emitOpError() << "describes unknown backend '" << getBackend()
                         << "'";
  if (!getLayoutModule(*this))
    return emitOpError() << "describes unknown module '" << getModule()
                         << "'";
  for (Operation &op : getBodyBlock())
    if (!isa<TensorOp, MountOp, ShardOp, DerivedOp, BufferOp, LetOp,
             ChoiceDefaultOp>(op))
      return op.emitOpError("cannot appear in a layout");
  return success();
}

LogicalResult ChoiceDefaultOp::verifyRegions() {
  auto layout = (*this)->getParentOfType<LayoutOp>();
  ModuleDeclOp module = getLayoutModule(layout);
  if (module && !module.getModel())
    return emitOpError() << "sets a choice default in a layout of module '"
                         << module.getSymName() << "', not of a model";
  auto backend = lookupTop<BackendOp>(layout, layout.getBackend());
  bool found =
      backend && isa_and_nonnull<ChoiceOp>(lookupInBackend(backend, getChoice()));
  if (!found)
    return emitOpError() << "names no choice of backend '"
                         << layout.getBackend() << "'";
  return verifyYields(*this, getValue(), StringType::get(getContext()),
                      "value");
}

/// Checks a name template against the values its args region yields.
static LogicalResult verifyTemplate(Operation *op, ArrayAttr segments,
                                    Region &args, ModuleDeclOp module,
                                    bool allowFamily) {
  size_t numArgs = 0;
  if (YieldOp y = getYield(args))
    numArgs = y.getValues().size();
  for (Attribute s : segments) {
    if (isa<StringAttr>(s))
      continue;
    if (auto ref = dyn_cast<FlatSymbolRefAttr>(s)) {
      if (!allowFamily)
        return op->emitOpError("a mount path has no family dimensions");
      if (!isDimDecl(SymbolTable::lookupSymbolIn(module, ref.getValue())))
        return op->emitOpError() << "name is indexed by '" << ref.getValue()
                                 << "', which is not a dimension";
      continue;
    }
    auto idx = dyn_cast<IntegerAttr>(s);
    if (!idx)
      return op->emitOpError("name segments are strings, dimension symbols "
                             "or argument numbers");
    if (idx.getInt() < 0 || static_cast<size_t>(idx.getInt()) >= numArgs)
      return op->emitOpError() << "name uses argument " << idx.getInt()
                               << " but its args region yields " << numArgs;
  }
  if (YieldOp y = getYield(args))
    for (Type t : y.getValues().getTypes())
      if (t != i64(op->getContext()) && !isa<StringType>(t))
        return op->emitOpError("name arguments are i64 or !mdl.string");
  return success();
}

/// Collects the dimensions and part sets of one level of a layout: through
/// products, not into parts.
static void collectLevel(TermAttr t, SmallVectorImpl<StringRef> &dims,
                         SmallVectorImpl<TermAttr> &sets) {
  if (t.getKind() == TermKind::dim)
    dims.push_back(t.getName().getValue());
  if (t.getKind() == TermKind::parts) {
    sets.push_back(t);
    return;
  }
  for (TermAttr c : t.terms())
    collectLevel(c, dims, sets);
}

LogicalResult TensorOp::verify() {
  ModuleDeclOp module = getLayoutModule((*this)->getParentOfType<LayoutOp>());
  if (!module)
    return success(); // the layout reports it
  LayoutAttr layout = getLayout();
  struct Use {
    std::string param;
    SmallVector<StringRef> dims;
  };
  SmallVector<Use> uses;
  // Walks one level (the tensor, or a group): its dims are shared by the
  // parameters of its part set.
  std::function<LogicalResult(ArrayRef<TermAttr>, SmallVector<StringRef>,
                              bool)>
      level = [&](ArrayRef<TermAttr> terms, SmallVector<StringRef> shared,
                  bool top) -> LogicalResult {
    SmallVector<TermAttr> sets;
    for (TermAttr t : terms)
      collectLevel(t, shared, sets);
    if (sets.size() > 1)
      return emitOpError("selects its parameter through more than one part "
                         "set");
    if (!top && sets.size() != 1)
      return emitOpError("has a group without a part set");
    if (sets.empty())
      return success();
    for (TermAttr p : sets.front().terms()) {
      if (p.getName().getValue().empty()) {
        if (failed(level(p.terms(), shared, false)))
          return failure();
        continue;
      }
      Use u{p.getName().str(), shared};
      SmallVector<TermAttr> nested;
      for (TermAttr c : p.terms())
        collectLevel(c, u.dims, nested);
      if (!nested.empty())
        return emitOpError("part sets cannot nest");
      uses.push_back(u);
    }
    return success();
  };
  SmallVector<TermAttr> axes = layout.axisTerms();
  if (layout.getParam()) {
    SmallVector<StringRef> dims;
    SmallVector<TermAttr> sets;
    for (TermAttr t : axes)
      collectLevel(t, dims, sets);
    if (!sets.empty())
      return emitOpError("names its parameter both before the axes and in "
                         "a part set");
    uses.push_back({layout.getParam().str(), dims});
  } else {
    if (failed(level(axes, {}, true)))
      return failure();
    if (uses.empty())
      return emitOpError("holds no parameter");
  }
  for (Use &u : uses) {
    std::string why;
    ResolvedParam r = resolveParam(module, u.param, why);
    if (!r.decl)
      return emitOpError() << "names parameter '" << u.param << "': " << why;
    for (StringRef d : u.dims)
      if (!isDimDecl(SymbolTable::lookupSymbolIn(r.owner, d)))
        return emitOpError() << "uses '" << d << "', which is not a dimension "
                             << "of '" << r.owner.getSymName()
                             << "' (for parameter '" << u.param << "')";
  }
  if (auto split = getSplit())
    if (*split >= layout.getAxes().size())
      return emitOpError() << "splits axis " << *split << " of a tensor with "
                           << layout.getAxes().size() << " axes";
  unsigned wantArgs = 0;
  if (auto stack = getForStack()) {
    if (!isa_and_nonnull<StackOp>(SymbolTable::lookupSymbolIn(module, *stack)))
      return emitOpError() << "is repeated for '" << *stack
                           << "', which is not a stack of the module";
    wantArgs = 1;
  }
  for (Region *r : {&getNameArgs(), &getCopyIf(), &getWhen()})
    if (!r->empty() && r->front().getNumArguments() != wantArgs)
      return emitOpError() << "regions take " << wantArgs
                           << " block argument(s)";
  return verifyTemplate(*this, getName(), getNameArgs(), module,
                        /*allowFamily=*/true);
}

LogicalResult TensorOp::verifyRegions() {
  if (failed(verifyYields(*this, getWhen(), i1(getContext()), "when")) ||
      failed(verifyYields(*this, getCopyIf(), i1(getContext()), "copy")))
    return failure();
  if (!getCopyIf().empty() && getCopy())
    return emitOpError("is a copy always, or under a condition, not both");
  if (YieldOp y = getYield(getView()))
    for (Type t : y.getValues().getTypes())
      if (t != i64(getContext()))
        return emitOpError("view sizes are i64");
  return success();
}

LogicalResult MountOp::verifyRegions() {
  auto layout = (*this)->getParentOfType<LayoutOp>();
  ModuleDeclOp module = getLayoutModule(layout);
  if (!module)
    return success();
  Operation *member = SymbolTable::lookupSymbolIn(module, getMember());
  if (!isa_and_nonnull<InstanceOp, StackOp>(member))
    return emitOpError() << "mounts '" << getMember()
                         << "', which is not an instance or stack";
  unsigned wantArgs = isa<StackOp>(member) ? 1 : 0;
  if (!getPathArgs().empty() &&
      getPathArgs().front().getNumArguments() != wantArgs)
    return emitOpError() << "path arguments take " << wantArgs
                         << " block argument(s)";
  if (failed(verifyTemplate(*this, getPath(), getPathArgs(), module,
                            /*allowFamily=*/false)))
    return failure();
  return verifyYields(*this, getWhen(), i1(getContext()), "when");
}

LogicalResult ShardOp::verifyRegions() {
  return verifyYields(*this, getWhen(), i1(getContext()), "when");
}

//===----------------------------------------------------------------------===//
// Backends
//===----------------------------------------------------------------------===//

LogicalResult BackendOp::verify() {
  for (Attribute a : getMesh())
    if (!parseMeshAxis(cast<StringAttr>(a).getValue().str()))
      return emitOpError() << "unknown mesh axis " << a;
  llvm::SmallPtrSet<Operation *, 4> seen{getOperation()};
  for (BackendOp b = *this; b.getBase();) {
    b = lookupTop<BackendOp>(*this, *b.getBase());
    if (!b)
      return emitOpError("extends an unknown backend");
    if (!seen.insert(b).second)
      return emitOpError("extends itself");
  }
  for (Operation &op : getBodyBlock())
    if (!isa<ClassOp, CapabilityOp, ChoiceOp, LetOp, RequireOp>(op))
      return op.emitOpError("cannot appear in a backend");
  return success();
}

LogicalResult DeployOp::verify() {
  for (NamedAttribute a : getAxes()) {
    StringRef axis = a.getName().getValue();
    if (!parseMeshAxis(axis.str()) && axis != "vpp")
      return emitOpError() << "names unknown parallel axis '" << axis << "'";
    auto values = dyn_cast<DenseI64ArrayAttr>(a.getValue());
    if (!values || values.empty())
      return emitOpError() << "axis '" << axis
                           << "' needs a non-empty array<i64> of values";
    for (int64_t v : values.asArrayRef())
      if (v < 1)
        return emitOpError() << "axis '" << axis << "' has value " << v
                             << "; values are positive";
  }
  return success();
}

LogicalResult ChoiceOp::verify() {
  if (getOptions().empty())
    return emitOpError("needs at least one option");
  llvm::StringSet<> seen;
  for (Attribute a : getOptions())
    if (!seen.insert(cast<StringAttr>(a).getValue()).second)
      return emitOpError() << "lists option " << a << " twice";
  return success();
}

LogicalResult CapabilityOp::verifyRegions() {
  return verifyYields(*this, getValue(), i1(getContext()), "value");
}

//===----------------------------------------------------------------------===//
// Expressions
//===----------------------------------------------------------------------===//

ParseResult ConstantOp::parse(OpAsmParser &parser, OperationState &result) {
  // Integers and booleans are written bare: `mdl.constant 5 : i64`.
  Attribute value;
  Type type;
  int64_t integer = 0;
  bool isInteger = false;
  StringRef word;
  if (succeeded(parser.parseOptionalKeyword(&word))) {
    // true, false, or a dtype: `mdl.constant bf16 : !mdl.dtype`.
    if (word == "true" || word == "false")
      value = parser.getBuilder().getBoolAttr(word == "true");
    else if (std::optional<ElementType> t = symbolizeElementType(word))
      value = ElementTypeAttr::get(parser.getContext(), *t);
    else
      return parser.emitError(parser.getNameLoc(), "unknown constant '")
             << word << "'";
  } else if (OptionalParseResult r = parser.parseOptionalInteger(integer);
           r.has_value()) {
    if (failed(*r))
      return failure();
    isInteger = true;
  } else if (parser.parseAttribute(value, parser.getBuilder().getNoneType())) {
    return failure();
  }
  if (parser.parseColonType(type))
    return failure();
  if (isInteger) {
    if (!type.isInteger(64))
      return parser.emitError(parser.getNameLoc(),
                              "an integer constant has type i64");
    value = IntegerAttr::get(type, integer);
  }
  result.addAttribute("value", value);
  result.addTypes(type);
  return parser.parseOptionalAttrDict(result.attributes);
}

void ConstantOp::print(OpAsmPrinter &p) {
  p << " ";
  if (auto b = dyn_cast<BoolAttr>(getValue()))
    p << (b.getValue() ? "true" : "false");
  else if (auto d = dyn_cast<ElementTypeAttr>(getValue()))
    p << stringifyElementType(d.getValue());
  else if (auto i = dyn_cast<IntegerAttr>(getValue()))
    p << i.getValue().getSExtValue();
  else
    p.printAttribute(getValue());
  p << " : " << getType();
  p.printOptionalAttrDict((*this)->getAttrs(), {"value"});
}

/// Whether `value` is a literal of `type`.
static bool isLiteralOf(Attribute value, Type type) {
  if (type.isInteger(1))
    return isa<BoolAttr>(value) ||
           (isa<IntegerAttr>(value) &&
            cast<IntegerAttr>(value).getType().isInteger(1));
  if (type.isInteger(64))
    return isa<IntegerAttr>(value) &&
           cast<IntegerAttr>(value).getType().isInteger(64);
  if (isa<StringType>(type))
    return isa<StringAttr>(value);
  if (isa<DTypeType>(type))
    return isa<ElementTypeAttr>(value);
  if (auto list = dyn_cast<ListType>(type)) {
    auto array = dyn_cast<ArrayAttr>(value);
    return array && llvm::all_of(array, [&](Attribute a) {
             return isLiteralOf(a, list.getElementType());
           });
  }
  return false;
}

LogicalResult ConstantOp::verify() {
  if (!isLiteralOf(getValue(), getType()))
    return emitOpError() << "value " << getValue() << " is not a literal of "
                         << getType();
  return success();
}

OpFoldResult ConstantOp::fold(FoldAdaptor) { return getValue(); }

LogicalResult GetOp::verify() {
  Operation *decl = lookupValueDecl(*this, getName());
  if (!decl)
    return emitOpError() << "'" << getName()
                         << "' is not an input, config entry, let or dim in "
                            "scope";
  if (getDeclaredType(decl) != getType())
    return emitOpError() << "'" << getName() << "' has type "
                         << getDeclaredType(decl) << ", not " << getType();
  return success();
}

LogicalResult ContextOp::verify() {
  std::optional<ContextVar> var = parseContextVar(getVar().str());
  if (!var)
    return emitOpError() << "unknown context value '" << getVar() << "'";
  Type want = isBoolContextVar(*var) ? i1(getContext()) : i64(getContext());
  if (getType() != want)
    return emitOpError() << "'" << getVar() << "' has type " << want;
  if (!(*this)->getParentOfType<LayoutOp>() &&
      !(*this)->getParentOfType<BackendOp>())
    return emitOpError("the parallel context is read only in layouts and "
                       "backends");
  return success();
}

LogicalResult BinaryOp::verify() {
  Type l = getLhs().getType(), r = getRhs().getType(), t = getType();
  MLIRContext *ctx = getContext();
  switch (getKind()) {
  case BinaryKind::add:
  case BinaryKind::sub:
  case BinaryKind::mul:
  case BinaryKind::div:
  case BinaryKind::mod:
    if (l != i64(ctx) || r != i64(ctx) || t != i64(ctx))
      return emitOpError("arithmetic is on i64");
    return success();
  case BinaryKind::concat:
    if (l != r || l != t || !(isa<StringType>(l) || isa<ListType>(l)))
      return emitOpError("concatenates two strings or two lists of one type");
    return success();
  case BinaryKind::lt:
  case BinaryKind::le:
  case BinaryKind::gt:
  case BinaryKind::ge:
    if (l != i64(ctx) || r != i64(ctx) || t != i1(ctx))
      return emitOpError("compares two i64 into an i1");
    return success();
  case BinaryKind::eq:
  case BinaryKind::ne:
    if (l != r || t != i1(ctx))
      return emitOpError("compares two values of one type into an i1");
    return success();
  case BinaryKind::and_:
  case BinaryKind::or_:
    if (l != i1(ctx) || r != i1(ctx) || t != i1(ctx))
      return emitOpError("combines two i1");
    return success();
  }
  return success();
}

LogicalResult SelectOp::verify() {
  if (getTrueValue().getType() != getType() ||
      getFalseValue().getType() != getType())
    return emitOpError("both choices must have the result type");
  return success();
}

LogicalResult IndexOp::verify() {
  if (getList().getType().getElementType() != getType())
    return emitOpError("the result has the list's element type");
  return success();
}

LogicalResult BuiltinOp::verify() {
  MLIRContext *ctx = getContext();
  Type intT = i64(ctx), strT = StringType::get(ctx);
  StringRef c = getCallee();
  auto args = getArgs().getTypes();
  auto want = [&](ArrayRef<Type> in, Type out) -> LogicalResult {
    if (llvm::to_vector(args) != llvm::to_vector(in) || getType() != out)
      return emitOpError() << c << "() has the wrong signature";
    return success();
  };
  if (c == "len") {
    if (args.size() != 1 ||
        !(isa<ListType>(args[0]) || isa<StringType>(args[0])) ||
        getType() != intT)
      return emitOpError("len() takes a list or string and gives an i64");
    return success();
  }
  if (c == "range")
    return want({intT}, ListType::get(ctx, intT));
  if (c == "min" || c == "max" || c == "gcd" || c == "ceildiv")
    return want({intT, intT}, intT);
  if (c == "str" || c == "size")
    return c == "str" ? want({intT}, strT) : want({intT}, intT);
  if (c == "pad")
    return want({intT, intT}, strT);
  if (c == "dtype")
    return want({strT}, DTypeType::get(ctx));
  if (c == "sum")
    return want({ListType::get(ctx, intT)}, intT);
  if (c == "primes")
    return want({intT, intT}, ListType::get(ctx, intT));
  if (c == "ends_with")
    return want({strT, strT}, i1(ctx));
  if (c == "chars")
    return want({strT}, ListType::get(ctx, strT));
  return emitOpError() << "unknown builtin '" << c << "'";
}

LogicalResult ComprehensionOp::verifyRegions() {
  Block &body = getBody().front();
  Type elem = getSource().getType().getElementType();
  if (body.getNumArguments() != 1 || body.getArgument(0).getType() != elem)
    return emitOpError() << "the body takes one " << elem;
  return verifyYields(*this, getBody(), getType().getElementType(), "body");
}

#define GET_OP_CLASSES
#include "mdl/Dialect/MDL/MDLOps.cpp.inc"
