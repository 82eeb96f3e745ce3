//===- Instance.cpp - Evaluating a model for a concrete config ------------===//
//
// An interpreter for the expression regions of the mdl dialect, and the
// construction of the instance tree. Values are computed on demand and
// memoized per instance; `and`, `or`, `?:` and `??` evaluate only what
// they need, so a guard such as `G != 0 && N / G > 1` never divides by
// zero. Every error is reported at the op that raised it.
//
//===----------------------------------------------------------------------===//

#include "mdl/Evaluate/Instance.h"
#include "mdl/Runtime/File.h"

#include "mlir/IR/Diagnostics.h"
#include "llvm/ADT/ScopeExit.h"
#include "llvm/ADT/TypeSwitch.h"
#include "llvm/ADT/SmallString.h"
#include "llvm/Support/Path.h"

#include <limits>

using namespace mlir;
using namespace mdl;

namespace {
/// Bounds that keep hostile configs from exhausting memory or time.
using rt::kMaxStackLength;
constexpr size_t kMaxParams = size_t(1) << 24;
} // namespace

//===----------------------------------------------------------------------===//
// HFConfig
//===----------------------------------------------------------------------===//

std::unique_ptr<HFConfig> HFConfig::load(const std::string &path,
                                         MLIRContext &context) {
  auto config = std::unique_ptr<HFConfig>(new HFConfig());
  std::string error;
  if (!rt::readFile(path, config->text, error)) {
    emitError(UnknownLoc::get(&context)) << "cannot read HF config " << error;
    return nullptr;
  }
  config->filePath = path;
  json::ParseError err;
  std::optional<json::Value> root = json::parse(config->text, err);
  if (!root) {
    emitError(FileLineColLoc::get(&context, path, err.line, err.column))
        << "invalid JSON: " << err.message;
    return nullptr;
  }
  if (root->kind() != json::Value::Object) {
    emitError(FileLineColLoc::get(&context, path, 1, 1))
        << "an HF config holds a JSON object, not "
        << json::Value::kindName(root->kind());
    return nullptr;
  }
  config->root = std::move(*root);
  return config;
}

void HFConfig::addOverride(const std::string &key, const std::string &value) {
  json::ParseError err;
  std::optional<json::Value> v = json::parse(value, err);
  overrides.push_back({key, v ? *v : json::Value::string(value)});
}

const json::Value *HFConfig::lookup(StringRef path) const {
  for (auto it = overrides.rbegin(); it != overrides.rend(); ++it)
    if (path == it->first || path.ends_with("." + it->first))
      return &it->second;
  const json::Value *v = &root;
  SmallVector<StringRef> parts;
  path.split(parts, '.');
  for (StringRef p : parts) {
    v = v->get(std::string_view(p.data(), p.size()));
    if (!v)
      return nullptr;
  }
  return v;
}

std::optional<Location> HFConfig::locate(const json::Value &v,
                                         MLIRContext &ctx) const {
  // Overridden values live on the command line, not in the file.
  for (const auto &o : overrides)
    if (isWithin(o.second, v))
      return std::nullopt;
  auto [line, col] = json::lineColumn(text, v.offset);
  return FileLineColLoc::get(&ctx, filePath, line, col);
}

bool HFConfig::isWithin(const json::Value &root, const json::Value &v) {
  if (&root == &v)
    return true;
  for (const json::Value &e : root.elements())
    if (isWithin(e, v))
      return true;
  for (const auto &m : root.members())
    if (isWithin(m.second, v))
      return true;
  return false;
}

//===----------------------------------------------------------------------===//
// ConcreteParam
//===----------------------------------------------------------------------===//

int64_t ConcreteParam::numElements() const {
  int64_t n = 1;
  for (int64_t s : sizes)
    n *= s; // sizes were checked not to overflow when built
  return n;
}

std::vector<int64_t> ConcreteParam::shape() const {
  std::vector<int64_t> out;
  size_t k = 0;
  for (const auto &axis : axes) {
    int64_t n = 1;
    for (size_t j = 0; j < axis.size(); ++j)
      n *= sizes[k++];
    out.push_back(n);
  }
  return out;
}

int ConcreteParam::atomIndex(StringRef name) const {
  int k = 0;
  for (const auto &axis : axes)
    for (const std::string &a : axis) {
      if (a == name)
        return k;
      ++k;
    }
  return -1;
}

//===----------------------------------------------------------------------===//
// The interpreter
//===----------------------------------------------------------------------===//

namespace {

class Interpreter {
public:
  Interpreter(InstanceNode &node, const HFConfig &config, const EvalEnv &env)
      : node(node), config(config), env(env), ctx(env.rank) {}

  FailureOr<std::vector<EvalValue>> run(Region &region,
                                        ArrayRef<EvalValue> args);

private:
  FailureOr<EvalValue> eval(Value v);
  FailureOr<EvalValue> evalOp(Operation *op);
  FailureOr<EvalValue> present(Value v);
  /// Like present(), without copying: a reference to the value where it is
  /// kept, valid until the next value is evaluated.
  FailureOr<const EvalValue *> presentRef(Value v);
  FailureOr<EvalValue> fromJson(HfOp op, const json::Value &j, Type type,
                                StringRef path);

  InstanceNode &node;
  const HFConfig &config;
  EvalEnv env;
  const RankContext *ctx;
  llvm::DenseMap<Value, EvalValue> values;
  /// For a comprehension's body: the interpreter of the enclosing region,
  /// which evaluates (once) every value defined outside `scope`.
  Interpreter *parent = nullptr;
  Region *scope = nullptr;
};

/// Reports a missing config value where it was needed.
LogicalResult reportMissing(Operation *op, const EvalValue &v,
                            const HFConfig &config) {
  op->emitError() << rt::missingMessage(config.path(), v);
  return failure();
}

FailureOr<EvalValue> Interpreter::present(Value v) {
  FailureOr<EvalValue> r = eval(v);
  if (succeeded(r) && r->kind == EvalValue::Missing) {
    (void)reportMissing(v.getDefiningOp() ? v.getDefiningOp()
                                          : v.getParentRegion()->getParentOp(),
                        *r, config);
    return failure();
  }
  return r;
}

FailureOr<const EvalValue *> Interpreter::presentRef(Value v) {
  const EvalValue *r = nullptr;
  if (auto it = values.find(v); it != values.end()) {
    r = &it->second;
  } else if (parent && !scope->isAncestor(v.getParentRegion())) {
    return parent->presentRef(v);
  } else if (auto g = v.getDefiningOp<GetOp>();
             g && lookupValueDecl(g, g.getName()) &&
             lookupValueDecl(g, g.getName())->getParentOp() ==
                 node.module.getOperation()) {
    FailureOr<const EvalValue *> got = node.getRef(g.getName(), g.getLoc());
    if (failed(got))
      return failure();
    r = *got;
  } else {
    if (failed(eval(v)))
      return failure();
    r = &values.find(v)->second;
  }
  if (r->kind == EvalValue::Missing) {
    (void)reportMissing(v.getDefiningOp() ? v.getDefiningOp()
                                          : v.getParentRegion()->getParentOp(),
                        *r, config);
    return failure();
  }
  return r;
}

FailureOr<EvalValue> Interpreter::eval(Value v) {
  if (auto it = values.find(v); it != values.end())
    return it->second;
  // A value from outside a comprehension's body is its parent's, computed
  // once for all elements (copying the parent's values per element made a
  // comprehension quadratic).
  if (parent && !scope->isAncestor(v.getParentRegion()))
    return parent->eval(v);
  if (isa<BlockArgument>(v)) {
    // Block arguments are bound by run() before evaluation starts.
    v.getParentRegion()->getParentOp()->emitError(
        "internal error: unbound block argument");
    return failure();
  }
  FailureOr<EvalValue> r = evalOp(v.getDefiningOp());
  if (succeeded(r))
    values[v] = *r;
  return r;
}

/// The runtime's spelling of a value type: "int", "list<string>", ...
std::string typeSpelling(Type type) {
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

FailureOr<EvalValue> Interpreter::fromJson(HfOp op, const json::Value &j,
                                           Type type, StringRef path) {
  EvalValue out;
  std::string error;
  if (rt::valueFromJson(j, typeSpelling(type), out, error))
    return out;
  // A list element's error starts with its index path: "[1][0] is ...";
  // the note points at that element.
  std::string where_ = path.str();
  const json::Value *bad = &j;
  while (!error.empty() && error[0] == '[') {
    size_t close = error.find(']');
    size_t index = std::stoul(error.substr(1, close - 1));
    where_ += error.substr(0, close + 1);
    bad = &bad->elements()[index];
    error = error.substr(close + 1);
  }
  error = StringRef(error).ltrim().str();
  std::optional<Location> where = config.locate(*bad, *op->getContext());
  auto diag = op.emitError() << "'" << where_ << "' "
                             << (where ? "in '" + config.path() + "'"
                                       : std::string("(from --set)"))
                             << " " << error;
  if (where)
    diag.attachNote(*where) << "the value is here";
  return failure();
}

rt::BinaryOp toBinaryOp(BinaryKind k) {
  switch (k) {
  case BinaryKind::add: return rt::BinaryOp::Add;
  case BinaryKind::sub: return rt::BinaryOp::Sub;
  case BinaryKind::mul: return rt::BinaryOp::Mul;
  case BinaryKind::div: return rt::BinaryOp::Div;
  case BinaryKind::mod: return rt::BinaryOp::Mod;
  case BinaryKind::concat: return rt::BinaryOp::Concat;
  case BinaryKind::lt: return rt::BinaryOp::Lt;
  case BinaryKind::le: return rt::BinaryOp::Le;
  case BinaryKind::gt: return rt::BinaryOp::Gt;
  case BinaryKind::ge: return rt::BinaryOp::Ge;
  case BinaryKind::eq: return rt::BinaryOp::Eq;
  case BinaryKind::ne: return rt::BinaryOp::Ne;
  case BinaryKind::and_: return rt::BinaryOp::And;
  case BinaryKind::or_: return rt::BinaryOp::Or;
  }
  return rt::BinaryOp::Add;
}

FailureOr<EvalValue> Interpreter::evalOp(Operation *op) {
  return TypeSwitch<Operation *, FailureOr<EvalValue>>(op)
      .Case<ConstantOp>([&](ConstantOp c) -> FailureOr<EvalValue> {
        std::function<EvalValue(Attribute)> conv = [&](Attribute a) {
          if (auto b = dyn_cast<BoolAttr>(a))
            return EvalValue::boolean(b.getValue());
          if (auto i = dyn_cast<IntegerAttr>(a)) {
            if (i.getType().isInteger(1))
              return EvalValue::boolean(i.getValue().getBoolValue());
            return EvalValue::integer(i.getValue().getSExtValue());
          }
          if (auto s = dyn_cast<StringAttr>(a))
            return EvalValue::string(s.str());
          if (auto d = dyn_cast<ElementTypeAttr>(a)) {
            EvalValue e;
            e.kind = EvalValue::DType;
            e.dtype = toDType(d.getValue());
            return e;
          }
          EvalValue e;
          e.kind = EvalValue::List;
          for (Attribute x : cast<ArrayAttr>(a))
            e.list.push_back(conv(x));
          return e;
        };
        return conv(c.getValue());
      })
      .Case<GetOp>([&](GetOp g) -> FailureOr<EvalValue> {
        Operation *decl = lookupValueDecl(g, g.getName());
        if (!decl)
          return failure();
        // Names of this instance's module come from the instance; lets of a
        // layout or a backend are evaluated here, in this context.
        if (decl->getParentOp() == node.module.getOperation())
          return node.get(g.getName(), g.getLoc());
        if (auto choice = dyn_cast<ChoiceOp>(decl)) {
          // The chosen variant, else the first option.
          if (env.choices)
            if (auto it = env.choices->find(choice.getSymName());
                it != env.choices->end())
              return EvalValue::string(it->second);
          return EvalValue::string(
              cast<StringAttr>(choice.getOptions()[0]).str());
        }
        Region &r = cast<LetOp>(decl).getValue();
        FailureOr<std::vector<EvalValue>> v = Interpreter(node, config, env)
                                                  .run(r, {});
        if (failed(v))
          return failure();
        return v->front();
      })
      .Case<ContextOp>([&](ContextOp c) -> FailureOr<EvalValue> {
        if (!ctx) {
          c.emitError() << "'" << c.getVar()
                        << "' depends on the parallel configuration, which is "
                           "not known here";
          return failure();
        }
        ContextVar var = *parseContextVar(c.getVar().str());
        int64_t v = contextValue(*ctx, var);
        return isBoolContextVar(var) ? EvalValue::boolean(v)
                                     : EvalValue::integer(v);
      })
      .Case<HfOp>([&](HfOp h) -> FailureOr<EvalValue> {
        const json::Value *j = config.lookup(h.getPath());
        if (!j || j->isNull()) {
          EvalValue m;
          m.triedKeys.push_back(h.getPath().str());
          return m;
        }
        return fromJson(h, *j, h.getType(), h.getPath());
      })
      .Case<CoalesceOp>([&](CoalesceOp c) -> FailureOr<EvalValue> {
        FailureOr<EvalValue> a = eval(c.getValue());
        if (failed(a) || a->kind != EvalValue::Missing)
          return a;
        FailureOr<EvalValue> b = eval(c.getFallback());
        if (failed(b) || b->kind != EvalValue::Missing)
          return b;
        EvalValue m;
        m.triedKeys = a->triedKeys;
        m.triedKeys.insert(m.triedKeys.end(), b->triedKeys.begin(),
                           b->triedKeys.end());
        return m;
      })
      .Case<mdl::BinaryOp>([&](mdl::BinaryOp b) -> FailureOr<EvalValue> {
        BinaryKind k = b.getKind();
        FailureOr<EvalValue> l = present(b.getLhs());
        if (failed(l))
          return failure();
        if (k == BinaryKind::and_ && !l->i)
          return EvalValue::boolean(false);
        if (k == BinaryKind::or_ && l->i)
          return EvalValue::boolean(true);
        FailureOr<EvalValue> r = present(b.getRhs());
        if (failed(r))
          return failure();
        EvalValue out;
        std::string error;
        if (!rt::applyBinary(toBinaryOp(k), *l, *r, out, error)) {
          b.emitError() << error;
          return failure();
        }
        return out;
      })
      .Case<NotOp>([&](NotOp n) -> FailureOr<EvalValue> {
        FailureOr<EvalValue> v = present(n.getOperand());
        if (failed(v))
          return failure();
        return EvalValue::boolean(!v->i);
      })
      .Case<NegOp>([&](NegOp n) -> FailureOr<EvalValue> {
        FailureOr<EvalValue> v = present(n.getOperand());
        if (failed(v))
          return failure();
        EvalValue out;
        std::string error;
        if (!rt::applyNeg(*v, out, error)) {
          n.emitError() << error;
          return failure();
        }
        return out;
      })
      .Case<SelectOp>([&](SelectOp s) -> FailureOr<EvalValue> {
        FailureOr<EvalValue> c = present(s.getCond());
        if (failed(c))
          return failure();
        return eval(c->i ? s.getTrueValue() : s.getFalseValue());
      })
      .Case<IndexOp>([&](IndexOp x) -> FailureOr<EvalValue> {
        FailureOr<const EvalValue *> l = presentRef(x.getList());
        FailureOr<EvalValue> i =
            failed(l) ? FailureOr<EvalValue>(failure()) : present(x.getIndex());
        // Evaluating the index may have moved the list: look it up again.
        if (failed(i) || failed(l = presentRef(x.getList())))
          return failure();
        EvalValue out;
        std::string error;
        if (!rt::applyIndex(**l, *i, out, error)) {
          x.emitError() << error;
          return failure();
        }
        return out;
      })
      .Case<ContainsOp>([&](ContainsOp c) -> FailureOr<EvalValue> {
        FailureOr<const EvalValue *> l = presentRef(c.getList());
        FailureOr<EvalValue> v =
            failed(l) ? FailureOr<EvalValue>(failure()) : present(c.getValue());
        if (failed(v) || failed(l = presentRef(c.getList())))
          return failure();
        return EvalValue::boolean(rt::applyContains(**l, *v));
      })
      .Case<ListOp>([&](ListOp lo) -> FailureOr<EvalValue> {
        EvalValue out;
        out.kind = EvalValue::List;
        for (Value e : lo.getElements()) {
          FailureOr<EvalValue> v = present(e);
          if (failed(v))
            return failure();
          out.list.push_back(std::move(*v));
        }
        return out;
      })
      .Case<BuiltinOp>([&](BuiltinOp bi) -> FailureOr<EvalValue> {
        std::vector<EvalValue> args;
        for (Value a : bi.getArgs()) {
          FailureOr<EvalValue> v = present(a);
          if (failed(v))
            return failure();
          args.push_back(std::move(*v));
        }
        EvalValue out;
        std::string error;
        if (!rt::applyBuiltin(bi.getCallee(), args, out, error)) {
          bi.emitError() << error;
          return failure();
        }
        return out;
      })
      .Case<ComprehensionOp>([&](ComprehensionOp co) -> FailureOr<EvalValue> {
        FailureOr<EvalValue> src = present(co.getSource());
        if (failed(src))
          return failure();
        EvalValue out;
        out.kind = EvalValue::List;
        for (const EvalValue &x : src->list) {
          // The body sees the variables of enclosing comprehensions.
          Interpreter body(node, config, env);
          body.parent = this;
          body.scope = &co.getBody();
          FailureOr<std::vector<EvalValue>> v = body.run(co.getBody(), {x});
          if (failed(v))
            return failure();
          if (v->front().kind == EvalValue::Missing) {
            (void)reportMissing(co, v->front(), config);
            return failure();
          }
          out.list.push_back(std::move(v->front()));
        }
        return out;
      })
      .Case<IsOp>([&](IsOp is) -> FailureOr<EvalValue> {
        auto it = node.instances.find(is.getInstance().str());
        bool yes = it != node.instances.end() &&
                   it->second->module.getSymName() == is.getModule();
        return EvalValue::boolean(yes);
      })
      .Default([&](Operation *o) -> FailureOr<EvalValue> {
        o->emitError("cannot be evaluated");
        return failure();
      });
}

FailureOr<std::vector<EvalValue>> Interpreter::run(Region &region,
                                                   ArrayRef<EvalValue> args) {
  Block &block = region.front();
  for (auto [arg, v] : llvm::zip(block.getArguments(), args))
    values[arg] = v;
  auto yield = dyn_cast<YieldOp>(block.back());
  if (!yield) {
    region.getParentOp()->emitError("internal error: region without yield");
    return failure();
  }
  std::vector<EvalValue> out;
  for (Value v : yield.getValues()) {
    FailureOr<EvalValue> r = eval(v);
    if (failed(r))
      return failure();
    out.push_back(std::move(*r));
  }
  return out;
}

} // namespace

//===----------------------------------------------------------------------===//
// InstanceNode
//===----------------------------------------------------------------------===//

std::string InstanceNode::describe() const {
  std::string p = path.empty() ? "the model" : path;
  ModuleDeclOp m = module;
  return p + " (" + m.getSymName().str() + ")";
}

FailureOr<std::vector<EvalValue>>
InstanceNode::evalRegion(Region &region, ArrayRef<EvalValue> args,
                         const EvalEnv &env) {
  return Interpreter(*this, inst->config, env).run(region, args);
}

FailureOr<EvalValue> InstanceNode::evalOne(Region &region,
                                           const EvalValue &dflt,
                                           const EvalEnv &env) {
  if (region.empty())
    return dflt;
  FailureOr<std::vector<EvalValue>> v = evalRegion(region, {}, env);
  if (failed(v))
    return failure();
  if (v->front().kind == EvalValue::Missing) {
    (void)reportMissing(region.getParentOp(), v->front(), inst->config);
    return failure();
  }
  return v->front();
}

FailureOr<const EvalValue *> InstanceNode::getRef(StringRef name,
                                                  Location useLoc) {
  if (auto it = cache.find(name); it != cache.end())
    return &it->second;
  if (failed(get(name, useLoc)))
    return failure();
  return &cache.find(name)->second;
}

FailureOr<EvalValue> InstanceNode::get(StringRef name, Location useLoc) {
  if (auto it = cache.find(name); it != cache.end())
    return it->second;
  // A value that failed was reported once; its users fail quietly.
  if (failedNames.contains(name))
    return failure();
  Operation *decl = SymbolTable::lookupSymbolIn(module, name);
  if (!decl) {
    emitError(useLoc) << "'" << name << "' is not defined in '"
                      << module.getSymName() << "'";
    return failure();
  }
  if (inProgress.lookup(name)) {
    emitError(useLoc) << "'" << name << "' depends on itself";
    return failure();
  }
  if (inst->evalDepth >= rt::kMaxEvalDepth) {
    emitError(useLoc) << "'" << name << "' needs names (or instances) nested "
                      << "more than " << rt::kMaxEvalDepth << " deep";
    return failure();
  }
  inProgress[name] = true;
  ++inst->evalDepth;
  auto done = llvm::make_scope_exit([&] {
    inProgress[name] = false;
    --inst->evalDepth;
  });

  FailureOr<EvalValue> result = failure();
  if (auto in = dyn_cast<InputOp>(decl)) {
    if (auto it = inputs.find(name); it != inputs.end())
      result = it->second;
    else
      result = evalOne(in.getDefaultValue(), EvalValue());
  } else if (auto c = dyn_cast<ConfigOp>(decl)) {
    result = evalOne(c.getValue(), EvalValue());
  } else if (auto l = dyn_cast<LetOp>(decl)) {
    result = evalOne(l.getValue(), EvalValue());
  } else if (auto d = dyn_cast<DimOp>(decl)) {
    if (auto factors = d.getFactors()) {
      int64_t size = 1;
      for (Attribute f : *factors) {
        FailureOr<EvalValue> v =
            get(cast<FlatSymbolRefAttr>(f).getValue(), d.getLoc());
        if (failed(v))
          return failure();
        if (__builtin_mul_overflow(size, v->i, &size)) {
          d.emitError() << "the size of dimension '" << name
                        << "' does not fit in 64 bits";
          return failure();
        }
      }
      result = EvalValue::integer(size);
    } else {
      result = evalOne(d.getSize(), EvalValue());
    }
  } else {
    emitError(useLoc) << "'" << name << "' is not a value";
    return failure();
  }
  if (succeeded(result) && isDimDecl(decl) && result->i <= 0) {
    emitError(decl->getLoc()) << "dimension '" << name << "' of " << describe()
                              << " has size " << result->i
                              << "; sizes must be positive";
    result = failure();
  }
  if (failed(result)) {
    failedNames.insert(name);
    return failure();
  }
  cache[name] = *result;
  return *result;
}

FailureOr<int64_t> InstanceNode::dimSize(StringRef name, Location loc) {
  FailureOr<EvalValue> v = get(name, loc);
  if (failed(v))
    return failure();
  return v->i;
}

//===----------------------------------------------------------------------===//
// Instantiation
//===----------------------------------------------------------------------===//

std::unique_ptr<Instantiation> Instantiation::create(ModuleDeclOp model,
                                                     const HFConfig &config,
                                                     bool raiseSingleStacks) {
  auto inst = std::unique_ptr<Instantiation>(new Instantiation(model, config));
  inst->raiseSingles = raiseSingleStacks;
  inst->root = std::make_unique<InstanceNode>();
  inst->root->module = model;
  inst->root->inst = inst.get();
  inst->root->stage = "all";
  for (auto p : model.getBodyBlock().getOps<PipelineOp>()) {
    for (Attribute a : p.getFirst())
      inst->placement[cast<FlatSymbolRefAttr>(a).getValue()] = "first";
    for (Attribute a : p.getLast())
      inst->placement[cast<FlatSymbolRefAttr>(a).getValue()] = "last";
    if (auto s = p.getStages())
      inst->stagedStack = s->str();
  }
  for (auto d : model.getBodyBlock().getOps<DefaultDTypeOp>()) {
    FailureOr<EvalValue> v = inst->root->evalOne(d.getValue(), EvalValue());
    if (failed(v))
      inst->hadError = true;
    else
      inst->defaultDType = v->dtype;
  }
  if (failed(inst->build(*inst->root)) || inst->hadError)
    return nullptr;
  return inst;
}

LogicalResult Instantiation::build(InstanceNode &node) {
  if (evalDepth >= rt::kMaxEvalDepth) {
    emitError(node.module.getLoc())
        << "module '" << node.module.getSymName()
        << "' is instantiated more than " << rt::kMaxEvalDepth
        << " deep in names and instances";
    return failure();
  }
  ++evalDepth;
  auto leave = llvm::make_scope_exit([&] { --evalDepth; });
  bool ok = true;
  auto note = [&](InFlightDiagnostic &diag) {
    if (node.parent)
      diag.attachNote(node.module.getLoc()) << "in " << node.describe();
  };
  // Values first, so that each bad one is reported once, where declared.
  for (Operation &op : node.module.getBodyBlock()) {
    if (auto s = dyn_cast<SymbolOpInterface>(op))
      if (isa<ConfigOp, LetOp, DimOp, InputOp>(op))
        ok &= succeeded(node.get(s.getName(), op.getLoc()));
  }
  if (!ok)
    return failure();
  for (auto req : node.module.getBodyBlock().getOps<RequireOp>()) {
    FailureOr<EvalValue> c = node.evalOne(req.getCond(), EvalValue());
    if (failed(c)) {
      ok = false;
      continue;
    }
    if (!c->i) {
      auto diag = req.emitError() << "requirement failed: " << req.getMessage();
      note(diag);
      ok = false;
    }
  }
  if (!ok)
    return failure();
  if (failed(buildParams(node)))
    return failure();
  return buildChildren(node);
}

LogicalResult Instantiation::buildParams(InstanceNode &node) {
  auto prefix = [&](StringRef name) {
    return node.path.empty() ? name.str() : node.path + "." + name.str();
  };
  auto stageOf = [&](StringRef member) {
    if (node.parent)
      return node.stage;
    auto it = placement.find(member);
    return it == placement.end() ? std::string("all") : it->second;
  };
  // Resolves the axes of a shape into atoms and sizes.
  auto addAxes = [&](ConcreteParam &p, ArrayAttr shape,
                     Location loc) -> LogicalResult {
    for (Attribute axis : shape) {
      std::vector<std::string> atoms;
      for (Attribute d : cast<ArrayAttr>(axis))
        for (StringRef a :
             getDimAtoms(node.module, cast<FlatSymbolRefAttr>(d).getValue())) {
          FailureOr<int64_t> size = node.dimSize(a, loc);
          if (failed(size))
            return failure();
          atoms.push_back(a.str());
          p.sizes.push_back(*size);
        }
      p.axes.push_back(std::move(atoms));
    }
    return success();
  };
  auto finish = [&](ConcreteParam &p, Operation *op,
                    std::optional<ElementType> dtype) -> LogicalResult {
    int64_t n = 1;
    for (int64_t s : p.sizes)
      if (__builtin_mul_overflow(n, s, &n)) {
        op->emitError() << "parameter '" << p.path
                        << "' has more elements than fit in 64 bits";
        return failure();
      }
    if (dtype)
      p.dtype = toDType(*dtype);
    else if (defaultDType)
      p.dtype = *defaultDType;
    else {
      op->emitError() << "parameter '" << p.path
                      << "' has no dtype: give it one, or give the model a "
                         "default with `dtype = bf16;`";
      return failure();
    }
    if (__builtin_add_overflow(elementCount, n, &elementCount) ||
        elementCount > rt::kMaxModelElements) {
      op->emitError() << "the model has more than " << rt::kMaxModelElements
                      << " elements (at parameter '" << p.path
                      << "'): the config's sizes are out of bounds";
      return failure();
    }
    if (++paramCount > kMaxParams) {
      op->emitError() << "the model has more than " << kMaxParams
                      << " parameters";
      return failure();
    }
    node.params.push_back(std::move(p));
    return success();
  };

  for (Operation &op : node.module.getBodyBlock()) {
    if (auto param = dyn_cast<ParamOp>(op)) {
      FailureOr<EvalValue> cond =
          node.evalOne(param.getCond(), EvalValue::boolean(true));
      if (failed(cond))
        return failure();
      if (!cond->i)
        continue;
      ConcreteParam p;
      p.path = prefix(param.getSymName());
      p.decl = param;
      p.style = param.getStyleAttr();
      p.stage = stageOf(param.getSymName());
      ArrayAttr shape = param.getShape();
      if (auto e = param.getExpert()) {
        p.expert = e->str();
        SmallVector<Attribute> withExpert{
            ArrayAttr::get(op.getContext(), {param.getExpertAttr()})};
        withExpert.append(shape.begin(), shape.end());
        shape = ArrayAttr::get(op.getContext(), withExpert);
      }
      if (failed(addAxes(p, shape, param.getLoc())) ||
          failed(finish(p, param, param.getDtype())))
        return failure();
      continue;
    }
    auto lin = dyn_cast<LinearOp>(op);
    if (!lin)
      continue;
    FailureOr<EvalValue> cond =
        node.evalOne(lin.getCond(), EvalValue::boolean(true));
    if (failed(cond))
      return failure();
    if (!cond->i)
      continue;
    SmallVector<Attribute> lead;
    if (auto e = lin.getExpert())
      lead.push_back(ArrayAttr::get(op.getContext(), {lin.getExpertAttr()}));
    // The weight is [out..., in...], as torch stores it.
    SmallVector<Attribute> weightAxes(lead);
    weightAxes.append(lin.getOut().begin(), lin.getOut().end());
    weightAxes.append(lin.getIn().begin(), lin.getIn().end());
    ConcreteParam w;
    w.path = prefix(lin.getSymName());
    w.decl = lin;
    w.style = lin.getStyle();
    w.expert = lin.getExpert() ? lin.getExpert()->str() : "";
    w.stage = stageOf(lin.getSymName());
    ConcreteParam b = w;
    FailureOr<EvalValue> block =
        node.evalOne(lin.getScaleBlock(), EvalValue::integer(0));
    if (failed(block))
      return failure();
    if (block->i < 0) {
      lin.emitError() << "the scale block size of '" << w.path
                      << "' is negative (" << block->i << ")";
      return failure();
    }
    w.scaleBlock = block->i;
    if (failed(addAxes(w, ArrayAttr::get(op.getContext(), weightAxes),
                       lin.getLoc())) ||
        failed(finish(w, lin, lin.getDtype())))
      return failure();
    // An FP8 block-scaled weight is stored in E4M3 unless declared otherwise.
    if (w.scaleBlock > 0 && !lin.getDtype())
      node.params.back().dtype = mdl::DType::F8E4M3;
    if (!lin.getBias())
      continue;
    FailureOr<EvalValue> hasBias =
        node.evalOne(lin.getBiasCond(), EvalValue::boolean(true));
    if (failed(hasBias))
      return failure();
    if (!hasBias->i)
      continue;
    SmallVector<Attribute> biasAxes(lead);
    biasAxes.append(lin.getOut().begin(), lin.getOut().end());
    b.path += ".bias";
    b.bias = true;
    // A row-parallel bias is added after the reduction: it is not split.
    if (b.style && b.style.getKind() == StyleKind::row)
      b.style = ParallelStyleAttr::get(op.getContext(), StyleKind::replicated,
                                       {});
    if (failed(addAxes(b, ArrayAttr::get(op.getContext(), biasAxes),
                       lin.getLoc())) ||
        failed(finish(b, lin, lin.getDtype())))
      return failure();
  }
  return success();
}

std::unique_ptr<InstanceNode>
Instantiation::makeChild(InstanceNode &parent, Operation *member,
                         Region &cases, const std::string &path,
                         const EvalValue *index) {
  SmallVector<EvalValue, 1> args;
  if (index)
    args.push_back(*index);
  for (auto c : cases.front().getOps<CaseOp>()) {
    FailureOr<std::vector<EvalValue>> values =
        parent.evalRegion(c.getArgs(), args);
    if (failed(values))
      return nullptr;
    size_t first = 0;
    if (c.getGuarded()) {
      if ((*values)[0].kind == EvalValue::Missing) {
        (void)reportMissing(c, (*values)[0], config);
        return nullptr;
      }
      if (!(*values)[0].i)
        continue;
      first = 1;
    }
    auto callee = dyn_cast_or_null<ModuleDeclOp>(SymbolTable::lookupSymbolIn(
        getTopModule(c), c.getModule()));
    auto child = std::make_unique<InstanceNode>();
    child->module = callee;
    child->parent = &parent;
    child->inst = this;
    child->path = path;
    for (auto [i, name] : llvm::enumerate(c.getArgNames())) {
      EvalValue &v = (*values)[first + i];
      if (v.kind == EvalValue::Missing) {
        (void)reportMissing(c, v, config);
        return nullptr;
      }
      child->inputs[cast<StringAttr>(name).getValue()] = v;
    }
    return child;
  }
  auto diag = member->emitError()
              << "no case of '"
              << cast<SymbolOpInterface>(member).getName() << "' applies";
  if (index)
    diag << " at index " << index->i;
  if (parent.parent)
    diag.attachNote(parent.module.getLoc()) << "in " << parent.describe();
  return nullptr;
}

LogicalResult Instantiation::buildChildren(InstanceNode &node) {
  auto childPath = [&](StringRef name) {
    return node.path.empty() ? name.str() : node.path + "." + name.str();
  };
  for (Operation &op : node.module.getBodyBlock()) {
    if (auto in = dyn_cast<InstanceOp>(op)) {
      FailureOr<EvalValue> cond =
          node.evalOne(in.getCond(), EvalValue::boolean(true));
      if (failed(cond))
        return failure();
      if (!cond->i)
        continue;
      std::unique_ptr<InstanceNode> child = makeChild(
          node, in, in.getCases(), childPath(in.getSymName()), nullptr);
      if (!child)
        return failure();
      auto it = placement.find(in.getSymName());
      child->stage = node.parent || it == placement.end()
                         ? node.stage
                         : it->second;
      if (failed(build(*child)))
        return failure();
      node.instances[in.getSymName().str()] = std::move(child);
      continue;
    }
    auto stack = dyn_cast<StackOp>(op);
    if (!stack)
      continue;
    FailureOr<EvalValue> count = node.evalOne(stack.getCount(), EvalValue());
    if (failed(count))
      return failure();
    if (count->i < 0 || count->i > kMaxStackLength) {
      stack.emitError() << "stack '" << stack.getSymName() << "' has length "
                        << count->i << "; it must be between 0 and "
                        << kMaxStackLength;
      return failure();
    }
    auto &elements = node.stacks[stack.getSymName().str()];
    bool staged = !node.parent && stack.getSymName() == stagedStack;
    auto it = placement.find(stack.getSymName());
    int64_t length = count->i;
    if (raiseSingles && length == 1 && !staged) {
      length = 2;
      raised.push_back(childPath(stack.getSymName()));
    }
    for (int64_t i = 0; i < length; ++i) {
      EvalValue index = EvalValue::integer(i);
      std::unique_ptr<InstanceNode> child =
          makeChild(node, stack, stack.getCases(),
                    childPath(stack.getSymName()) + "." + std::to_string(i),
                    &index);
      if (!child)
        return failure();
      child->stackName = stack.getSymName().str();
      child->stackIndex = i;
      child->stage = staged ? std::to_string(i)
                     : !node.parent && it != placement.end() ? it->second
                                                             : node.stage;
      if (failed(build(*child)))
        return failure();
      elements.push_back(std::move(child));
    }
  }
  return success();
}

void Instantiation::walk(function_ref<void(InstanceNode &)> fn) {
  std::function<void(InstanceNode &)> visit = [&](InstanceNode &n) {
    fn(n);
    // Children in declaration order: interleave instances and stacks as the
    // module declares them.
    for (Operation &op : n.module.getBodyBlock()) {
      if (auto in = dyn_cast<InstanceOp>(op)) {
        auto it = n.instances.find(in.getSymName().str());
        if (it != n.instances.end())
          visit(*it->second);
      } else if (auto st = dyn_cast<StackOp>(op)) {
        auto it = n.stacks.find(st.getSymName().str());
        if (it != n.stacks.end())
          for (auto &c : it->second)
            visit(*c);
      }
    }
  };
  visit(*root);
}

std::vector<const ConcreteParam *> Instantiation::allParams() const {
  std::vector<const ConcreteParam *> out;
  const_cast<Instantiation *>(this)->walk([&](InstanceNode &n) {
    for (const ConcreteParam &p : n.params)
      out.push_back(&p);
  });
  return out;
}

std::vector<std::pair<std::string, EvalValue>>
Instantiation::configValues() {
  std::vector<std::pair<std::string, EvalValue>> out;
  for (auto c : model.getBodyBlock().getOps<ConfigOp>()) {
    FailureOr<EvalValue> v = root->get(c.getSymName(), c.getLoc());
    if (succeeded(v))
      out.push_back({c.getSymName().str(), *v});
  }
  return out;
}
