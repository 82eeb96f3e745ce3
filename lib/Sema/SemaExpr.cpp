//===- SemaExpr.cpp - Checking expressions --------------------------------===//
//
// Types the expressions of the language: names, builtin calls, operators,
// lists and comprehensions.
//
//===----------------------------------------------------------------------===//

#include "SemaInternal.h"
#include "mdl/Runtime/Base/DType.h"
#include "mdl/Runtime/Base/Parallel.h"
#include "mdl/Runtime/Base/Value.h"

#include "llvm/ADT/STLExtras.h"

using namespace mdl;
using namespace mdl::ast;
using namespace mdl::sema;
using llvm::cast;
using llvm::dyn_cast;
using llvm::dyn_cast_or_null;

namespace {
struct BuiltinInfo {
  Builtin builtin;
  const char *name;
};
constexpr BuiltinInfo kBuiltins[] = {
    {Builtin::Hf, "hf"},       {Builtin::Len, "len"},
    {Builtin::Range, "range"}, {Builtin::Min, "min"},
    {Builtin::Max, "max"},     {Builtin::CeilDiv, "ceildiv"},
    {Builtin::Gcd, "gcd"},
    {Builtin::Str, "str"},     {Builtin::Pad, "pad"},
    {Builtin::DType, "dtype"}, {Builtin::Size, "size"},
    {Builtin::Sum, "sum"},     {Builtin::Primes, "primes"},
    {Builtin::EndsWith, "ends_with"}, {Builtin::Chars, "chars"},
};
} // namespace

std::optional<Builtin> mdl::lookupBuiltin(llvm::StringRef name) {
  for (const BuiltinInfo &b : kBuiltins)
    if (name == b.name)
      return b.builtin;
  return std::nullopt;
}

llvm::StringRef mdl::spelling(Builtin b) {
  for (const BuiltinInfo &i : kBuiltins)
    if (i.builtin == b)
      return i.name;
  llvm_unreachable("unknown builtin");
}

Type Analyzer::typeOfSymbol(const ModuleScope &scope, const ModuleSymbol &sym,
                            llvm::SMLoc useLoc) {
  if (sym.type.isValid())
    return sym.type;
  // A let without a declared type: infer it from its definition.
  auto *let = dyn_cast_or_null<LetMember>(sym.member);
  if (!let)
    return Type();
  if (auto it = inferred.find(let); it != inferred.end())
    return it->second;
  // A let whose type depends on itself is a circular definition, which
  // checkValueCycles reports.
  if (!inferring.insert(let).second)
    return Type();
  // Inference follows the chain of lets recursively: bound its length.
  if (inferring.size() > size_t(rt::kMaxEvalDepth)) {
    error(useLoc) << "definitions chained more than " << rt::kMaxEvalDepth
                  << " deep";
    inferring.erase(let);
    inferred[let] = Type();
    return Type();
  }
  ExprEnv env;
  env.scope = &scope;
  Type t = check(let->value.get(), env);
  inferring.erase(let);
  inferred[let] = t;
  return t;
}

/// The values of the parallel context that are sizes of the configuration,
/// the same on every rank.
static bool isSizeContextVar(ContextVar var) {
  switch (var) {
  case ContextVar::TP:
  case ContextVar::PP:
  case ContextVar::EP:
  case ContextVar::ETP:
  case ContextVar::CP:
  case ContextVar::DP:
  case ContextVar::VPP:
  case ContextVar::SP:
    return true;
  default:
    return false;
  }
}

Type Analyzer::checkName(NameRefExpr *e, ExprEnv &env) {
  if (env.sizesOnly) {
    auto var = parseContextVar(e->name);
    if (!var || !isSizeContextVar(*var)) {
      error(e->getLoc()) << "a shard's condition reads only the parallel "
                            "sizes (tp, pp, ep, etp, cp, dp, vpp, sp), not '"
                         << e->name << "'";
      return Type();
    }
    e->refKind = NameRefExpr::Context;
    return Type::get(isBoolContextVar(*var) ? Type::Bool : Type::Int);
  }
  for (auto it = env.locals.rbegin(); it != env.locals.rend(); ++it)
    if (it->first == e->name) {
      e->refKind = NameRefExpr::Local;
      return it->second;
    }
  if (env.scope)
    if (const ModuleSymbol *sym = env.scope->lookup(e->name)) {
      if (!sym->isValue()) {
        error(e->getLoc()) << "'" << e->name
                           << "' is not a value; only inputs, config entries, "
                              "lets and dims can be used in expressions";
        return Type();
      }
      e->refKind = NameRefExpr::Member;
      return typeOfSymbol(*env.scope, *sym, e->getLoc());
    }
  if (env.backendNames)
    if (auto it = env.backendNames->find(e->name);
        it != env.backendNames->end()) {
      e->refKind = NameRefExpr::Member;
      return it->second;
    }
  if (auto var = parseContextVar(e->name)) {
    if (!env.allowContext) {
      if (env.choiceDefault)
        error(e->getLoc()) << "a choice default is computed from the config "
                              "alone, before any parallel configuration, "
                              "and cannot read '"
                           << e->name << "'";
      else
        error(e->getLoc()) << "'" << e->name
                           << "' is part of the parallel context; only "
                              "layouts and backends may read it";
      return Type();
    }
    e->refKind = NameRefExpr::Context;
    return Type::get(isBoolContextVar(*var) ? Type::Bool : Type::Int);
  }
  if (parseDType(e->name)) {
    e->refKind = NameRefExpr::DTypeConst;
    return Type::get(Type::DType);
  }
  error(e->getLoc()) << "unknown name '" << e->name << "'";
  return Type();
}

bool Analyzer::isConstant(const Expr *e) {
  switch (e->getKind()) {
  case Expr::IntLit:
  case Expr::StringLit:
  case Expr::BoolLit:
    return true;
  case Expr::Unary:
    return isConstant(cast<UnaryExpr>(e)->operand.get());
  case Expr::NameRef:
    return cast<NameRefExpr>(e)->refKind == NameRefExpr::DTypeConst;
  default:
    return false;
  }
}

Type Analyzer::expect(Expr *e, ExprEnv &env, const Type &want,
                      llvm::StringRef what) {
  Type t = check(e, env, &want);
  if (t.isValid() && !t.compatible(want)) {
    error(e->getLoc()) << what << " must be " << want.str() << ", not "
                       << t.str();
    return Type();
  }
  return t;
}

Type Analyzer::checkCallExpr(CallExpr *e, ExprEnv &env, const Type *expected) {
  std::optional<Builtin> b = lookupBuiltin(e->callee.name);
  if (!b) {
    error(e->callee.loc()) << "unknown function '" << e->callee.name << "'";
    for (auto &a : e->args)
      check(a.get(), env);
    return Type();
  }
  auto arity = [&](size_t lo, size_t hi) {
    if (e->args.size() >= lo && e->args.size() <= hi)
      return true;
    error(e->getLoc()) << spelling(*b) << "() takes "
                       << (lo == hi ? std::to_string(lo)
                                    : std::to_string(lo) + " to " +
                                          std::to_string(hi))
                       << " argument" << (hi == 1 ? "" : "s") << ", not "
                       << e->args.size();
    return false;
  };
  Type intT = Type::get(Type::Int), strT = Type::get(Type::String);
  switch (*b) {
  case Builtin::Hf: {
    if (!env.allowHf) {
      error(e->getLoc()) << "hf() reads the HF config and may only appear in "
                            "a model's config block";
      return Type();
    }
    if (!arity(1, 1))
      return Type();
    auto *path = dyn_cast<StringLitExpr>(e->args[0].get());
    if (!path || path->value.empty()) {
      error(e->args[0]->getLoc())
          << "hf() takes a key path as a non-empty string literal, e.g. "
             "hf(\"text_config.hidden_size\")";
      return Type();
    }
    if (llvm::StringRef(path->value).starts_with(".") ||
        llvm::StringRef(path->value).ends_with(".") ||
        llvm::StringRef(path->value).contains("..")) {
      error(path->getLoc()) << "malformed key path '" << path->value << "'";
      return Type();
    }
    path->type = strT;
    ++env.hfReads;
    if (!expected || !expected->isValid() || expected->kind == Type::Any) {
      error(e->getLoc()) << "cannot tell the type of hf(\"" << path->value
                         << "\") here; use it where a type is declared";
      return Type();
    }
    return *expected;
  }
  case Builtin::Len: {
    if (!arity(1, 1))
      return Type();
    Type t = check(e->args[0].get(), env);
    if (t.isValid() && t.kind != Type::List && t.kind != Type::String)
      error(e->args[0]->getLoc()) << "len() needs a list or a string, not "
                                  << t.str();
    return intT;
  }
  case Builtin::Range:
    if (arity(1, 1))
      expect(e->args[0].get(), env, intT, "the argument of range()");
    return Type::listOf(intT);
  case Builtin::Min:
  case Builtin::Max:
  case Builtin::Gcd:
  case Builtin::CeilDiv:
    if (arity(2, 2))
      for (auto &a : e->args)
        expect(a.get(), env, intT, "an argument of " + spelling(*b).str() + "()");
    return intT;
  case Builtin::Str:
    if (arity(1, 1))
      expect(e->args[0].get(), env, intT, "the argument of str()");
    return strT;
  case Builtin::Pad:
    if (arity(2, 2))
      for (auto &a : e->args)
        expect(a.get(), env, intT, "an argument of pad()");
    return strT;
  case Builtin::DType:
    if (arity(1, 1))
      expect(e->args[0].get(), env, strT, "the argument of dtype()");
    return Type::get(Type::DType);
  case Builtin::Sum:
    if (arity(1, 1))
      expect(e->args[0].get(), env, Type::listOf(intT), "the argument of sum()");
    return intT;
  case Builtin::Primes:
    if (arity(2, 2))
      for (auto &a : e->args)
        expect(a.get(), env, intT, "an argument of primes()");
    return Type::listOf(intT);
  case Builtin::Chars:
    if (arity(1, 1))
      expect(e->args[0].get(), env, strT, "the argument of chars()");
    return Type::listOf(strT);
  case Builtin::EndsWith:
    if (arity(2, 2))
      for (auto &a : e->args)
        expect(a.get(), env, strT, "an argument of ends_with()");
    return Type::get(Type::Bool);
  case Builtin::Size: {
    if (!arity(1, 1))
      return intT;
    auto *n = dyn_cast<NameRefExpr>(e->args[0].get());
    const ModuleSymbol *sym = n && env.scope ? env.scope->lookup(n->name) : nullptr;
    if (!sym || !sym->isDim()) {
      error(e->args[0]->getLoc()) << "size() takes the name of a dimension";
      return intT;
    }
    check(n, env);
    return intT;
  }
  }
  return Type();
}

Type Analyzer::check(Expr *e, ExprEnv &env, const Type *expected) {
  Type result;
  Type intT = Type::get(Type::Int), boolT = Type::get(Type::Bool);
  switch (e->getKind()) {
  case Expr::IntLit:
    result = intT;
    break;
  case Expr::StringLit:
    result = Type::get(Type::String);
    break;
  case Expr::BoolLit:
    result = boolT;
    break;
  case Expr::NameRef:
    result = checkName(cast<NameRefExpr>(e), env);
    break;
  case Expr::Call:
    result = checkCallExpr(cast<CallExpr>(e), env, expected);
    break;
  case Expr::Index: {
    auto *x = cast<IndexExpr>(e);
    Type base = check(x->base.get(), env);
    expect(x->index.get(), env, intT, "an index");
    if (base.isValid() && base.kind != Type::List)
      error(x->base->getLoc()) << "only lists can be indexed, not "
                               << base.str();
    else if (base.isValid())
      result = *base.element;
    break;
  }
  case Expr::Unary: {
    auto *x = cast<UnaryExpr>(e);
    bool neg = x->op == UnaryOp::Neg;
    result = neg ? intT : boolT;
    expect(x->operand.get(), env, result,
           neg ? "the operand of '-'" : "the operand of '!'");
    break;
  }
  case Expr::Binary: {
    auto *x = cast<BinaryExpr>(e);
    switch (x->op) {
    case BinaryOp::Add: {
      Type l = check(x->lhs.get(), env, expected);
      Type r = check(x->rhs.get(), env, l.isValid() ? &l : expected);
      if (!l.isValid() || !r.isValid())
        break;
      if (l.isInt() && r.isInt())
        result = intT;
      else if (l.kind == Type::String && r.kind == Type::String)
        result = l;
      else if (l.kind == Type::List && l.compatible(r))
        result = l;
      else
        error(x->getLoc()) << "cannot add " << l.str() << " and " << r.str();
      break;
    }
    case BinaryOp::Sub:
    case BinaryOp::Mul:
    case BinaryOp::Div:
    case BinaryOp::Mod:
      expect(x->lhs.get(), env, intT,
             "an operand of '" + spelling(x->op).str() + "'");
      expect(x->rhs.get(), env, intT,
             "an operand of '" + spelling(x->op).str() + "'");
      result = intT;
      break;
    case BinaryOp::Lt:
    case BinaryOp::Le:
    case BinaryOp::Gt:
    case BinaryOp::Ge:
      expect(x->lhs.get(), env, intT, "a compared value");
      expect(x->rhs.get(), env, intT, "a compared value");
      result = boolT;
      break;
    case BinaryOp::Eq:
    case BinaryOp::Ne: {
      Type l = check(x->lhs.get(), env);
      Type r = check(x->rhs.get(), env, l.isValid() ? &l : nullptr);
      if (l.isValid() && r.isValid() && !l.compatible(r))
        error(x->getLoc()) << "cannot compare " << l.str() << " with "
                           << r.str();
      result = boolT;
      break;
    }
    case BinaryOp::And:
    case BinaryOp::Or:
      expect(x->lhs.get(), env, boolT, "an operand of '" + spelling(x->op).str() + "'");
      expect(x->rhs.get(), env, boolT, "an operand of '" + spelling(x->op).str() + "'");
      result = boolT;
      break;
    case BinaryOp::In: {
      Type r = check(x->rhs.get(), env);
      if (r.isValid() && r.kind != Type::List) {
        error(x->rhs->getLoc()) << "'in' needs a list on its right, not "
                                << r.str();
        check(x->lhs.get(), env);
      } else if (r.isValid()) {
        expect(x->lhs.get(), env, *r.element, "the value looked for");
      } else {
        check(x->lhs.get(), env);
      }
      result = boolT;
      break;
    }
    case BinaryOp::Coalesce: {
      Type l = check(x->lhs.get(), env, expected);
      Type r = check(x->rhs.get(), env, l.isValid() ? &l : expected);
      if (l.isValid() && r.isValid() && !l.compatible(r))
        error(x->getLoc()) << "both sides of a coalesce (a ?" "? b) must have one type, not "
                           << l.str() << " and " << r.str();
      result = l.isValid() ? l : r;
      break;
    }
    }
    break;
  }
  case Expr::Is: {
    auto *x = cast<IsExpr>(e);
    result = boolT;
    if (!env.allowIs) {
      error(x->getLoc()) << "'is' asks which module an instance is and may "
                            "only appear in layouts";
      break;
    }
    auto *n = dyn_cast<NameRefExpr>(x->operand.get());
    const ModuleSymbol *sym =
        n && env.scope ? env.scope->lookup(n->name) : nullptr;
    if (!sym || sym->kind != ModuleSymbol::Instance) {
      error(x->operand->getLoc()) << "the left side of 'is' must name an "
                                     "instance of this module";
      break;
    }
    n->refKind = NameRefExpr::Member;
    auto *inst = cast<InstanceMember>(sym->member);
    bool possible = llvm::any_of(inst->expr.arms, [&](const auto &arm) {
      return arm.call.callee.name == x->module.name;
    });
    if (!possible) {
      auto diag = error(x->module.loc())
                  << "'" << n->name << "' is never a '" << x->module.name
                  << "'";
      diag.attachNote(loc(inst->getLoc())) << "'" << n->name
                                            << "' is defined here";
    }
    break;
  }
  case Expr::Cond: {
    auto *x = cast<CondExpr>(e);
    expect(x->cond.get(), env, boolT, "a condition");
    Type t = check(x->thenExpr.get(), env, expected);
    Type f = check(x->elseExpr.get(), env, t.isValid() ? &t : expected);
    if (t.isValid() && f.isValid() && !t.compatible(f))
      error(x->getLoc()) << "the branches of '?:' must have one type, not "
                         << t.str() << " and " << f.str();
    result = t.isValid() ? t : f;
    break;
  }
  case Expr::ListLit: {
    auto *x = cast<ListLitExpr>(e);
    const Type *elemExpected =
        expected && expected->kind == Type::List ? expected->element.get()
                                                 : nullptr;
    Type elem = elemExpected ? *elemExpected : Type();
    for (auto &el : x->elements) {
      Type t = check(el.get(), env, elem.isValid() ? &elem : nullptr);
      if (!t.isValid())
        continue;
      if (!elem.isValid())
        elem = t;
      else if (!elem.compatible(t))
        error(el->getLoc()) << "list elements must have one type: "
                            << elem.str() << " and " << t.str();
    }
    if (!elem.isValid()) {
      if (x->elements.empty())
        error(x->getLoc()) << "cannot tell the type of an empty list here";
      break;
    }
    result = Type::listOf(elem);
    break;
  }
  case Expr::Comprehension: {
    auto *x = cast<ComprehensionExpr>(e);
    Type src = check(x->source.get(), env);
    if (src.isValid() && src.kind != Type::List) {
      error(x->source->getLoc()) << "a comprehension iterates over a list, "
                                    "not "
                                 << src.str();
      break;
    }
    env.locals.push_back(
        {x->var.name, src.isValid() ? *src.element : Type::get(Type::Any)});
    const Type *elemExpected =
        expected && expected->kind == Type::List ? expected->element.get()
                                                 : nullptr;
    Type elem = check(x->element.get(), env, elemExpected);
    env.locals.pop_back();
    if (elem.isValid())
      result = Type::listOf(elem);
    break;
  }
  }
  e->type = result;
  return result;
}
