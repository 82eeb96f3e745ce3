//===- Interpreter.cpp - Expressions that interpret the IR ----------------===//
//
// `and`, `or`, `?:` and `??` evaluate only what they need, as generated code
// does, so a guard such as `G != 0 && N / G > 1` never divides by zero.
// Errors are the runtime's EvalError (this file is built with exceptions,
// as the runtime is), located at the op that raised them.
//
//===----------------------------------------------------------------------===//

#include "mdl/Evaluate/Interpreter.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/Hashing.h"
#include "llvm/ADT/TypeSwitch.h"

#include <memory>
#include <unordered_map>

using namespace mlir;
using namespace mdl;

namespace {

rt::BinaryOp toBinaryOp(BinaryKind k) {
  switch (k) {
  case BinaryKind::add:
    return rt::BinaryOp::Add;
  case BinaryKind::sub:
    return rt::BinaryOp::Sub;
  case BinaryKind::mul:
    return rt::BinaryOp::Mul;
  case BinaryKind::div:
    return rt::BinaryOp::Div;
  case BinaryKind::mod:
    return rt::BinaryOp::Mod;
  case BinaryKind::concat:
    return rt::BinaryOp::Concat;
  case BinaryKind::lt:
    return rt::BinaryOp::Lt;
  case BinaryKind::le:
    return rt::BinaryOp::Le;
  case BinaryKind::gt:
    return rt::BinaryOp::Gt;
  case BinaryKind::ge:
    return rt::BinaryOp::Ge;
  case BinaryKind::eq:
    return rt::BinaryOp::Eq;
  case BinaryKind::ne:
    return rt::BinaryOp::Ne;
  case BinaryKind::and_:
    return rt::BinaryOp::And;
  case BinaryKind::or_:
    return rt::BinaryOp::Or;
  }
  return rt::BinaryOp::Add;
}

rt::Value constant(Attribute a) {
  if (auto b = dyn_cast<BoolAttr>(a))
    return rt::Value::boolean(b.getValue());
  if (auto i = dyn_cast<IntegerAttr>(a)) {
    if (i.getType().isInteger(1))
      return rt::Value::boolean(i.getValue().getBoolValue());
    return rt::Value::integer(i.getValue().getSExtValue());
  }
  if (auto s = dyn_cast<StringAttr>(a))
    return rt::Value::string(s.str());
  if (auto d = dyn_cast<ElementTypeAttr>(a))
    return rt::Value::dtypeOf(toDType(d.getValue()));
  std::vector<rt::Value> list;
  for (Attribute x : cast<ArrayAttr>(a))
    list.push_back(constant(x));
  return rt::Value::listOf(std::move(list));
}

/// The declaration each name of a region, and of the lets it reads,
/// resolves to: found once, when the expression is made.
using Decls = llvm::DenseMap<Operation *, Operation *>;

void resolveNames(Region &region, Decls &out) {
  region.walk([&](GetOp g) {
    if (out.count(g))
      return;
    Operation *decl = lookupValueDecl(g, g.getName());
    out[g] = decl;
    if (auto let = dyn_cast_or_null<LetOp>(decl);
        let && !isa<ModuleDeclOp>(let->getParentOp()))
      resolveNames(let.getValue(), out);
  });
}

/// Evaluates the values of one region (and, as a child, of a
/// comprehension's body) for one call of its expression.
class Interpreter {
public:
  Interpreter(rt::Eval &e, const Decls &decls, Interpreter *parent = nullptr,
              Region *scope = nullptr)
      : e(e), decls(decls), parent(parent), scope(scope) {}

  rt::Value run(Region &region, unsigned result) {
    auto yield = cast<YieldOp>(region.front().back());
    return eval(yield.getValues()[result]);
  }

private:
  /// The value of `v`, where it is kept: a name of the instance in the
  /// instance's cache (reading a long list of the config per layer copies
  /// nothing), anything else here, computed once.
  const rt::Value &eval(Value v);
  rt::Value evalOp(Operation *op);
  /// `v`, which must not be missing.
  const rt::Value &present(Value v);
  /// Runs `f`, putting `op`'s location on an error that has none yet.
  template <typename F> decltype(auto) at(Operation *op, F f) {
    try {
      return f();
    } catch (rt::EvalError &err) {
      if (err.where.empty())
        err.where = whereOf(op);
      throw;
    }
  }

  /// The declaration `g` reads.
  Operation *declOf(GetOp g) const {
    auto it = decls.find(g);
    return it != decls.end() ? it->second : lookupValueDecl(g, g.getName());
  }

  rt::Eval &e;
  const Decls &decls;
  struct Hash {
    size_t operator()(Value v) const { return hash_value(v); }
  };
  /// Node-based, so that references to values stay valid.
  std::unordered_map<Value, rt::Value, Hash> values;
  /// For a comprehension's body: the interpreter of the enclosing region,
  /// which evaluates (once) every value defined outside `scope`.
  Interpreter *parent;
  Region *scope;
};

const rt::Value &Interpreter::eval(Value v) {
  if (auto it = values.find(v); it != values.end())
    return it->second;
  if (parent && !scope->isAncestor(v.getParentRegion()))
    return parent->eval(v);
  if (auto g = v.getDefiningOp<GetOp>()) {
    Operation *decl = declOf(g);
    if (decl && isa<ModuleDeclOp>(decl->getParentOp()))
      return at(g, [&]() -> const rt::Value & {
        return e.get(g.getName().str().c_str());
      });
  }
  rt::Value r;
  if (auto arg = dyn_cast<BlockArgument>(v))
    // Comprehension variables are bound before their body runs; what is
    // left are the arguments the engine passes (a stack index).
    r = e.arg(arg.getArgNumber());
  else
    r = at(v.getDefiningOp(), [&] { return evalOp(v.getDefiningOp()); });
  return values[v] = std::move(r);
}

const rt::Value &Interpreter::present(Value v) {
  const rt::Value &r = eval(v);
  Operation *op = v.getDefiningOp() ? v.getDefiningOp()
                                    : v.getParentRegion()->getParentOp();
  return at(op, [&]() -> const rt::Value & { return e.present(r); });
}

rt::Value Interpreter::evalOp(Operation *op) {
  return TypeSwitch<Operation *, rt::Value>(op)
      .Case<ConstantOp>([&](ConstantOp c) { return constant(c.getValue()); })
      .Case<GetOp>([&](GetOp g) -> rt::Value {
        Operation *decl = declOf(g);
        if (auto choice = dyn_cast_or_null<ChoiceOp>(decl))
          return e.choice(
              choice.getSymName().str().c_str(),
              cast<StringAttr>(choice.getOptions()[0]).str().c_str());
        // A let of a layout or a backend is evaluated here, in this scope.
        if (auto let = dyn_cast_or_null<LetOp>(decl);
            let && !isa<ModuleDeclOp>(let->getParentOp()))
          return Interpreter(e, decls).run(let.getValue(), 0);
        return e.get(g.getName().str().c_str());
      })
      .Case<ContextOp>(
          [&](ContextOp c) { return e.context(c.getVar().str().c_str()); })
      .Case<HfOp>([&](HfOp h) {
        return e.hf(h.getPath().str().c_str(),
                    typeSpelling(h.getType()).c_str());
      })
      .Case<CoalesceOp>([&](CoalesceOp c) {
        return rt::coalesce(eval(c.getValue()),
                            [&] { return eval(c.getFallback()); });
      })
      .Case<mdl::BinaryOp>([&](mdl::BinaryOp b) -> rt::Value {
        BinaryKind k = b.getKind();
        if (k == BinaryKind::and_)
          return rt::Value::boolean(rt::truthy(e, present(b.getLhs())) &&
                                    rt::truthy(e, present(b.getRhs())));
        if (k == BinaryKind::or_)
          return rt::Value::boolean(rt::truthy(e, present(b.getLhs())) ||
                                    rt::truthy(e, present(b.getRhs())));
        const rt::Value &l = present(b.getLhs());
        return rt::bin(e, toBinaryOp(k), l, present(b.getRhs()));
      })
      .Case<NotOp>([&](NotOp n) {
        return rt::Value::boolean(!rt::truthy(e, present(n.getOperand())));
      })
      .Case<NegOp>([&](NegOp n) { return rt::neg(e, present(n.getOperand())); })
      .Case<SelectOp>([&](SelectOp s) {
        return eval(rt::truthy(e, present(s.getCond())) ? s.getTrueValue()
                                                        : s.getFalseValue());
      })
      .Case<IndexOp>([&](IndexOp x) {
        const rt::Value &list = present(x.getList());
        return rt::index(e, list, present(x.getIndex()));
      })
      .Case<ContainsOp>([&](ContainsOp c) {
        const rt::Value &list = present(c.getList());
        return rt::contains(e, list, present(c.getValue()));
      })
      .Case<ListOp>([&](ListOp l) {
        std::vector<rt::Value> list;
        for (Value x : l.getElements())
          list.push_back(present(x));
        return rt::Value::listOf(std::move(list));
      })
      .Case<BuiltinOp>([&](BuiltinOp b) {
        std::vector<rt::Value> args;
        for (Value x : b.getArgs())
          args.push_back(present(x));
        return rt::builtin(e, b.getCallee().str().c_str(), std::move(args));
      })
      .Case<ComprehensionOp>([&](ComprehensionOp c) {
        Region &body = c.getBody();
        return rt::comprehend(e, present(c.getSource()),
                              [&](const rt::Value &x) {
                                // The body sees the enclosing variables.
                                Interpreter inner(e, decls, this, &body);
                                inner.values[body.front().getArgument(0)] = x;
                                return inner.run(body, 0);
                              });
      })
      .Case<IsOp>([&](IsOp is) {
        return rt::Value::boolean(
            e.is(is.getInstance().str().c_str(), is.getModule().str().c_str()));
      })
      .Default([&](Operation *o) -> rt::Value {
        throw rt::EvalError{"cannot be evaluated", whereOf(o)};
      });
}

} // namespace

rt::Expr InterpretingExprs::make(Region &region, unsigned result) {
  Region *r = &region;
  auto decls = std::make_shared<Decls>();
  resolveNames(region, *decls);
  return rt::Expr(
      [r, result, decls](rt::Eval &e) {
        return Interpreter(e, *decls).run(*r, result);
      },
      -1);
}
