//===- Sema.cpp - Name resolution and type checking -----------------------===//
//
// Checks what can be checked without a config: names, types, arities,
// shapes that name dimensions, layouts that name parameters, and cycles
// among definitions. What depends on a config (values, divisibility,
// coverage) is checked later on the IR.
//
//===----------------------------------------------------------------------===//

#include "mdl/Parse/Parser.h"
#include "mdl/Runtime/DType.h"
#include "mdl/Runtime/Parallel.h"
#include "mdl/Runtime/Value.h"
#include "mdl/Sema/Sema.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallPtrSet.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/SourceMgr.h"

using namespace mdl;
using namespace mdl::ast;
using llvm::cast;
using llvm::dyn_cast;
using llvm::isa;
using llvm::dyn_cast_or_null;

//===----------------------------------------------------------------------===//
// Builtins and fixed vocabularies
//===----------------------------------------------------------------------===//

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
    {Builtin::EndsWith, "ends_with"},
};
constexpr const char *kClassRoles[] = {
    "column", "column_norm", "row", "replicated", "grouped_column",
    "grouped_row", "grouped", "embedding"};
constexpr const char *kRecomputeTriggers[] = {"load", "update"};
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

bool mdl::isClassRole(llvm::StringRef role) {
  return llvm::is_contained(kClassRoles, role);
}

std::optional<Type::Kind> mdl::classPropertyType(llvm::StringRef property) {
  if (property == "sizes" || property == "returns")
    return Type::String;
  if (property == "lora" || property == "input_is_parallel")
    return Type::Bool;
  return std::nullopt;
}

bool mdl::isRecomputeTrigger(llvm::StringRef name) {
  return llvm::is_contained(kRecomputeTriggers, name);
}

std::vector<std::string> mdl::dimAtoms(const ModuleScope &scope,
                                       llvm::StringRef dim) {
  std::vector<std::string> atoms;
  const ModuleSymbol *sym = scope.lookup(dim);
  auto *d = sym && sym->member ? dyn_cast<DimMember>(sym->member) : nullptr;
  if (!d || d->factors.empty()) {
    atoms.push_back(dim.str());
    return atoms;
  }
  for (const Ident &f : d->factors) {
    if (f.name == dim) // a cycle; Sema reports it
      continue;
    for (std::string &a : dimAtoms(scope, f.name))
      atoms.push_back(std::move(a));
  }
  return atoms;
}

std::optional<ParamRef> mdl::resolveParamRef(const Program &program,
                                             const ModuleScope &scope,
                                             const QualifiedName &name,
                                             std::string &why) {
  ParamRef ref;
  const ModuleScope *current = &scope;
  for (size_t i = 0; i < name.parts.size(); ++i) {
    llvm::StringRef part = name.parts[i].name;
    // `.bias` after a linear selects its bias.
    if (ref.symbol) {
      auto *lin = dyn_cast<LinearMember>(ref.symbol->member);
      if (lin && part == "bias" && i + 1 == name.parts.size()) {
        if (!lin->hasBias) {
          why = "linear '" + lin->name.name + "' has no bias";
          return std::nullopt;
        }
        ref.bias = true;
        return ref;
      }
      why = "'" + name.parts[i - 1].name + "' is a parameter, not an instance";
      return std::nullopt;
    }
    const ModuleSymbol *sym = current->lookup(part);
    if (!sym) {
      why = "'" + current->decl->name.name + "' has no member '" + part.str() +
            "'";
      return std::nullopt;
    }
    if (sym->isParamLike()) {
      ref.owner = current;
      ref.symbol = sym;
      continue;
    }
    if (sym->kind != ModuleSymbol::Instance || i + 1 == name.parts.size()) {
      why = "'" + part.str() + "' is not a parameter";
      return std::nullopt;
    }
    // Walk into the instance: all its arms must agree on the module.
    auto *inst = cast<InstanceMember>(sym->member);
    llvm::StringRef callee = inst->expr.arms.front().call.callee.name;
    for (const InstanceExpr::Arm &arm : inst->expr.arms)
      if (arm.call.callee.name != callee) {
        why = "'" + part.str() +
              "' may be one of several modules; name its parameters in a "
              "layout of each module instead";
        return std::nullopt;
      }
    auto it = program.modules.find(callee);
    if (it == program.modules.end()) {
      why = "unknown module '" + callee.str() + "'";
      return std::nullopt;
    }
    auto scopeIt = program.scopes.find(it->second);
    if (scopeIt == program.scopes.end()) {
      why = "unknown module '" + callee.str() + "'";
      return std::nullopt;
    }
    ref.instancePath.push_back(part.str());
    current = &scopeIt->second;
  }
  if (!ref.symbol) {
    why = "'" + name.str() + "' is not a parameter";
    return std::nullopt;
  }
  return ref;
}

//===----------------------------------------------------------------------===//
// The analyzer
//===----------------------------------------------------------------------===//

namespace {

/// What an expression may refer to where it appears.
struct ExprEnv {
  const ModuleScope *scope = nullptr;
  /// Names of a backend (its lets and those of its bases).
  const llvm::StringMap<Type> *backendNames = nullptr;
  bool allowHf = false;
  bool allowContext = false;
  bool allowIs = false;
  /// How many hf() reads the checked expressions hold.
  int hfReads = 0;
  /// In a choice default, computed before any parallel configuration.
  bool choiceDefault = false;
  /// Local variables, innermost last.
  std::vector<std::pair<std::string, Type>> locals;
};

class Analyzer {
public:
  Analyzer(Program &program, llvm::SourceMgr &sm, mlir::MLIRContext &ctx)
      : program(program), sm(sm), ctx(ctx) {}

  mlir::LogicalResult run();

private:
  mlir::Location loc(llvm::SMLoc l) { return toLocation(sm, ctx, l); }
  mlir::InFlightDiagnostic error(llvm::SMLoc l) {
    failed = true;
    return mlir::emitError(loc(l));
  }

  // Declarations -----------------------------------------------------------
  void collectDecls();
  void buildScope(const ModuleDecl *m);
  void checkModule(const ModuleDecl *m);
  void checkExtends(const ModuleDecl *m);
  void checkMember(const ModuleDecl *m, const Member *mem);
  void checkShape(const ModuleScope &scope, const Shape &shape);
  /// A dimension (or a factor of one) appearing twice in a weight would
  /// make its axes ambiguous to every layout.
  void checkDistinctDims(const ModuleScope &scope, const Ident &name,
                         std::initializer_list<const Shape *> shapes,
                         const std::optional<Ident> &expertDim);
  void checkDimName(const ModuleScope &scope, const Ident &dim);
  void checkInstance(const ModuleScope &scope, const InstanceExpr &ie,
                     ExprEnv &env);
  void checkCall(const ModuleCall &call, ExprEnv &env);
  void checkValueCycles(const ModuleScope &scope);
  void checkLayout(const LayoutDecl *l);
  void checkChoiceDefault(const LayoutDecl &l, const ModuleDecl &m,
                          const ModuleScope &scope,
                          const ChoiceDefaultEntry &ch,
                          llvm::StringSet<> &seen);
  void checkTensorEntry(const ModuleScope &scope, const TensorEntry &e,
                        ExprEnv &env);
  void checkTensorEntryBody(const ModuleScope &scope, const TensorEntry &e,
                            ExprEnv &env);
  void checkTemplate(const NameTemplate &t, ExprEnv &env, bool allowFamily);
  void checkBackend(const BackendDecl *b);

  // Expressions --------------------------------------------------------------
  Type check(Expr *e, ExprEnv &env, const Type *expected = nullptr);
  Type expect(Expr *e, ExprEnv &env, const Type &want, llvm::StringRef what);
  Type checkName(NameRefExpr *e, ExprEnv &env);
  Type checkCallExpr(CallExpr *e, ExprEnv &env, const Type *expected);
  Type typeOfSymbol(const ModuleScope &scope, const ModuleSymbol &sym,
                    llvm::SMLoc useLoc);
  bool isConstant(const Expr *e);

  Program &program;
  llvm::SourceMgr &sm;
  mlir::MLIRContext &ctx;
  bool failed = false;
  /// Lets whose type is being inferred, to catch cyclic definitions.
  llvm::SmallPtrSet<const Member *, 8> inferring;
  llvm::DenseMap<const Member *, Type> inferred;
  /// Backend names, per backend, including inherited lets.
  llvm::DenseMap<const BackendDecl *, llvm::StringMap<Type>> backendNames;
};

bool isModelOnly(Member::Kind k) {
  return k == Member::Config || k == Member::Example || k == Member::Serves ||
         k == Member::Pipeline || k == Member::DTypeDefault ||
         k == Member::Deploy;
}

const char *memberKindName(Member::Kind k) {
  switch (k) {
  case Member::Config: return "config entry";
  case Member::Example: return "example";
  case Member::Serves: return "serves declaration";
  case Member::Let: return "let";
  case Member::Require: return "require";
  case Member::DTypeDefault: return "dtype";
  case Member::Dim: return "dim";
  case Member::Param: return "param";
  case Member::Linear: return "linear";
  case Member::Instance: return "instance";
  case Member::Stack: return "stack";
  case Member::Pipeline: return "pipeline";
  case Member::Needs: return "needs";
  case Member::Deploy: return "deploy";
  }
  return "member";
}

void Analyzer::collectDecls() {
  llvm::StringMap<const Decl *> layoutKeys;
  for (const auto &file : program.files) {
    for (const DeclPtr &d : file->decls) {
      auto duplicate = [&](const Decl *previous) {
        auto diag = error(d->name.loc())
                    << "redefinition of '" << d->name.name << "'";
        diag.attachNote(loc(previous->name.loc())) << "first defined here";
      };
      if (auto *m = dyn_cast<ModuleDecl>(d.get())) {
        auto [it, inserted] = program.modules.try_emplace(m->name.name, m);
        if (!inserted)
          duplicate(it->second);
        continue;
      }
      if (auto *b = dyn_cast<BackendDecl>(d.get())) {
        auto [it, inserted] = program.backends.try_emplace(b->name.name, b);
        if (!inserted)
          duplicate(it->second);
        continue;
      }
      auto *l = cast<LayoutDecl>(d.get());
      std::string key = l->backend.name + " of " + l->module.name;
      auto [it, inserted] = layoutKeys.try_emplace(key, l);
      if (!inserted) {
        auto diag = error(l->getLoc()) << "a second layout of '"
                                       << l->module.name << "' for backend '"
                                       << l->backend.name << "'";
        diag.attachNote(loc(it->second->getLoc())) << "the first is here";
        continue;
      }
      program.layouts.push_back(l);
    }
  }
}

void Analyzer::buildScope(const ModuleDecl *m) {
  ModuleScope &scope = program.scopes[m];
  scope.decl = m;
  auto add = [&](const Ident &name, ModuleSymbol sym) {
    auto [it, inserted] = scope.symbols.insert({name.name, sym});
    if (!inserted) {
      auto diag = error(name.loc()) << "'" << name.name
                                    << "' is already defined in '"
                                    << m->name.name << "'";
      diag.attachNote(loc(it->second.range.Start)) << "first defined here";
    }
  };
  for (const ModuleParam &p : m->params) {
    ModuleSymbol sym{ModuleSymbol::Input, nullptr, &p, p.type, p.range};
    add(p.name, sym);
  }
  for (const MemberPtr &mem : m->members) {
    const Member *x = mem.get();
    if (!m->isModel && isModelOnly(x->getKind())) {
      error(x->getLoc()) << "a " << memberKindName(x->getKind())
                         << " belongs in a model, not in module '"
                         << m->name.name << "'";
      continue;
    }
    ModuleSymbol sym{ModuleSymbol::Let, x, nullptr, Type(), x->getRange()};
    if (auto *c = dyn_cast<ConfigMember>(x)) {
      sym.kind = ModuleSymbol::Config;
      sym.type = c->type;
      add(c->name, sym);
    } else if (auto *l = dyn_cast<LetMember>(x)) {
      sym.kind = ModuleSymbol::Let;
      if (l->declaredType)
        sym.type = *l->declaredType;
      add(l->name, sym);
    } else if (auto *d = dyn_cast<DimMember>(x)) {
      sym.kind = ModuleSymbol::Dim;
      sym.type = Type::get(Type::Dim);
      add(d->name, sym);
    } else if (auto *p = dyn_cast<ParamMember>(x)) {
      sym.kind = ModuleSymbol::Param;
      add(p->name, sym);
    } else if (auto *l = dyn_cast<LinearMember>(x)) {
      sym.kind = ModuleSymbol::Linear;
      add(l->name, sym);
    } else if (auto *i = dyn_cast<InstanceMember>(x)) {
      sym.kind = ModuleSymbol::Instance;
      add(i->name, sym);
    } else if (auto *s = dyn_cast<StackMember>(x)) {
      sym.kind = ModuleSymbol::Stack;
      add(s->name, sym);
    }
  }
}

//===----------------------------------------------------------------------===//
// Expressions
//===----------------------------------------------------------------------===//

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

Type Analyzer::checkName(NameRefExpr *e, ExprEnv &env) {
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

//===----------------------------------------------------------------------===//
// Modules
//===----------------------------------------------------------------------===//

void Analyzer::checkDimName(const ModuleScope &scope, const Ident &dim) {
  const ModuleSymbol *sym = scope.lookup(dim.name);
  if (!sym) {
    error(dim.loc()) << "unknown dimension '" << dim.name << "'";
    return;
  }
  if (!sym->isDim()) {
    auto diag = error(dim.loc()) << "'" << dim.name << "' is not a dimension";
    diag.attachNote(loc(sym->range.Start)) << "'" << dim.name
                                           << "' is defined here";
  }
}

void Analyzer::checkShape(const ModuleScope &scope, const Shape &shape) {
  for (const ShapeAxis &axis : shape)
    for (const Ident &d : axis)
      checkDimName(scope, d);
}

void Analyzer::checkDistinctDims(const ModuleScope &scope, const Ident &name,
                                 std::initializer_list<const Shape *> shapes,
                                 const std::optional<Ident> &expertDim) {
  llvm::StringMap<const Ident *> seen;
  auto add = [&](const Ident &d) {
    for (const std::string &atom : dimAtoms(scope, d.name)) {
      auto [it, fresh] = seen.try_emplace(atom, &d);
      if (!fresh) {
        error(d.loc()) << "dimension '" << atom << "' appears twice in '"
                       << name.name << "'; declare a second one, as in `dim "
                       << atom << "o = " << atom << ";`";
        return;
      }
    }
  };
  if (expertDim)
    add(*expertDim);
  for (const Shape *shape : shapes)
    for (const ShapeAxis &axis : *shape)
      for (const Ident &d : axis)
        add(d);
}

void Analyzer::checkCall(const ModuleCall &call, ExprEnv &env) {
  auto it = program.modules.find(call.callee.name);
  if (it == program.modules.end()) {
    error(call.callee.loc()) << "unknown module '" << call.callee.name << "'";
    for (const Argument &a : call.args)
      check(a.value.get(), env);
    return;
  }
  const ModuleDecl *callee = it->second;
  if (callee->isModel) {
    error(call.callee.loc()) << "'" << call.callee.name
                             << "' is a model and cannot be instantiated";
    return;
  }
  std::vector<const Argument *> bound(callee->params.size(), nullptr);
  size_t positional = 0;
  bool sawNamed = false;
  for (const Argument &a : call.args) {
    size_t index;
    if (a.name) {
      sawNamed = true;
      auto pit = llvm::find_if(callee->params, [&](const ModuleParam &p) {
        return p.name.name == a.name->name;
      });
      if (pit == callee->params.end()) {
        auto diag = error(a.name->loc()) << "'" << call.callee.name
                                         << "' has no parameter '"
                                         << a.name->name << "'";
        diag.attachNote(loc(callee->getLoc())) << "'" << call.callee.name
                                               << "' is defined here";
        check(a.value.get(), env);
        continue;
      }
      index = pit - callee->params.begin();
    } else {
      if (sawNamed) {
        error(a.value->getLoc())
            << "positional arguments must come before named ones";
        check(a.value.get(), env);
        continue;
      }
      index = positional++;
      if (index >= callee->params.size()) {
        auto diag = error(a.value->getLoc())
                    << "too many arguments for '" << call.callee.name
                    << "', which takes " << callee->params.size();
        diag.attachNote(loc(callee->getLoc())) << "'" << call.callee.name
                                               << "' is defined here";
        check(a.value.get(), env);
        continue;
      }
    }
    if (bound[index]) {
      error(a.value->getLoc()) << "parameter '"
                               << callee->params[index].name.name
                               << "' is given twice";
      continue;
    }
    bound[index] = &a;
    const ModuleParam &p = callee->params[index];
    expect(a.value.get(), env, p.type,
           "argument '" + p.name.name + "' of '" + call.callee.name + "'");
  }
  for (size_t i = 0; i < bound.size(); ++i)
    if (!bound[i] && !callee->params[i].defaultValue) {
      auto diag = error(call.range.Start)
                  << "missing argument '" << callee->params[i].name.name
                  << "' for '" << call.callee.name << "'";
      diag.attachNote(loc(callee->params[i].range.Start))
          << "parameter '" << callee->params[i].name.name
          << "' is declared here";
    }
}

void Analyzer::checkInstance(const ModuleScope &scope, const InstanceExpr &ie,
                             ExprEnv &env) {
  (void)scope;
  Type scrutinee;
  if (ie.scrutinee)
    scrutinee = check(ie.scrutinee.get(), env);
  bool sawWildcard = false;
  std::vector<std::pair<std::string, SMRange>> seen;
  for (const InstanceExpr::Arm &arm : ie.arms) {
    if (ie.scrutinee) {
      if (sawWildcard)
        error(arm.patternRange.Start) << "this arm can never match: an "
                                         "earlier '_' matches everything";
      if (!arm.pattern) {
        sawWildcard = true;
      } else {
        check(arm.pattern.get(), env, scrutinee.isValid() ? &scrutinee : nullptr);
        if (!isConstant(arm.pattern.get()))
          error(arm.pattern->getLoc()) << "a match pattern must be a literal";
        else if (scrutinee.isValid() && arm.pattern->type.isValid() &&
                 !scrutinee.compatible(arm.pattern->type))
          error(arm.pattern->getLoc())
              << "pattern of type " << arm.pattern->type.str()
              << " cannot match a " << scrutinee.str();
        std::string text(arm.patternRange.Start.getPointer(),
                         arm.patternRange.End.getPointer());
        for (auto &[prev, range] : seen)
          if (prev == text) {
            auto diag = error(arm.patternRange.Start)
                        << "duplicate pattern " << text;
            diag.attachNote(loc(range.Start)) << "first used here";
          }
        seen.push_back({text, arm.patternRange});
      }
    }
    checkCall(arm.call, env);
  }
}

void Analyzer::checkMember(const ModuleDecl *m, const Member *mem) {
  const ModuleScope &scope = program.scope(m);
  ExprEnv env;
  env.scope = &scope;
  Type boolT = Type::get(Type::Bool), intT = Type::get(Type::Int);
  switch (mem->getKind()) {
  case Member::Config: {
    auto *c = cast<ConfigMember>(mem);
    env.allowHf = true;
    expect(c->value.get(), env, c->type,
           "config entry '" + c->name.name + "'");
    if (c->detect) {
      // A checkpoint settles the entry only where the config is silent.
      if (env.hfReads == 0)
        error(c->detect->getLoc())
            << "config entry '" << c->name.name
            << "' reads no hf() key, so no config leaves it open to detect";
      env.allowHf = false;
      expect(c->detect.get(), env, Type::listOf(c->type),
             "the detect candidates of '" + c->name.name + "'");
    }
    return;
  }
  case Member::Example: {
    auto *x = cast<ExampleMember>(mem);
    llvm::StringRef dir = llvm::sys::path::parent_path(
        sm.getMemoryBuffer(sm.FindBufferContainingLoc(x->getLoc()))
            ->getBufferIdentifier());
    for (auto &[path, range] : x->paths) {
      llvm::SmallString<256> full(dir);
      llvm::sys::path::append(full, path);
      if (!llvm::sys::fs::exists(full))
        error(range.Start) << "example config '" << path
                           << "' does not exist (looked for '" << full << "')";
    }
    return;
  }
  case Member::Serves: {
    auto *x = cast<ServesMember>(mem);
    if (x->key.name != "architectures" && x->key.name != "model_type") {
      error(x->key.loc()) << "a model serves 'architectures' or 'model_type', "
                             "not '"
                          << x->key.name << "'";
      return;
    }
    // Each value once per key, over all of the model's serves.
    llvm::StringMap<SMRange> seen;
    for (const MemberPtr &other : m->members)
      if (auto *s = dyn_cast<ServesMember>(other.get());
          s && s->key.name == x->key.name)
        for (auto &[value, range] : s->values) {
          auto [it, added] = seen.try_emplace(value, range);
          if (!added && s == x) {
            auto diag = error(range.Start);
            diag << "model '" << m->name.name << "' already serves "
                 << x->key.name << " '" << value << "'";
            diag.attachNote(loc(it->second.Start)) << "first named here";
          }
        }
    return;
  }
  case Member::Let: {
    auto *l = cast<LetMember>(mem);
    if (l->declaredType)
      expect(l->value.get(), env, *l->declaredType, "'" + l->name.name + "'");
    else
      typeOfSymbol(scope, *scope.lookup(l->name.name), l->getLoc());
    return;
  }
  case Member::Require:
    expect(cast<RequireMember>(mem)->cond.get(), env, boolT,
           "a require condition");
    return;
  case Member::DTypeDefault:
    expect(cast<DTypeDefaultMember>(mem)->value.get(), env,
           Type::get(Type::DType), "the default dtype");
    return;
  case Member::Dim: {
    auto *d = cast<DimMember>(mem);
    if (d->size) {
      expect(d->size.get(), env, intT, "the size of dim '" + d->name.name + "'");
      return;
    }
    for (const Ident &f : d->factors) {
      if (f.name == d->name.name)
        error(f.loc()) << "dim '" << d->name.name << "' cannot be its own factor";
      else
        checkDimName(scope, f);
    }
    return;
  }
  case Member::Param: {
    auto *p = cast<ParamMember>(mem);
    checkShape(scope, p->shape);
    checkDistinctDims(scope, p->name, {&p->shape}, p->expertDim);
    if (p->expertDim)
      checkDimName(scope, *p->expertDim);
    if (p->dtype && !parseDType(p->dtype->name))
      error(p->dtype->loc()) << "unknown dtype '" << p->dtype->name << "'";
    if (p->style && p->style->kind != ParallelStyle::Replicated) {
      if (p->style->kind == ParallelStyle::Column ||
          p->style->kind == ParallelStyle::Row)
        error(p->style->range.Start)
            << spelling(p->style->kind)
            << "() describes a linear; a param is split with shard() or "
               "vocab()";
      // The split dimension must be one of the shape's, or a factor of one.
      bool found = false;
      for (const ShapeAxis &axis : p->shape)
        for (const Ident &d : axis)
          for (const std::string &atom : dimAtoms(scope, d.name))
            found |= atom == p->style->dim.name || d.name == p->style->dim.name;
      if (!found)
        error(p->style->dim.loc())
            << "'" << p->style->dim.name << "' is not a dimension of '"
            << p->name.name << "'";
    }
    if (p->cond)
      expect(p->cond.get(), env, boolT, "a condition");
    return;
  }
  case Member::Linear: {
    auto *l = cast<LinearMember>(mem);
    checkShape(scope, l->in);
    checkShape(scope, l->out);
    checkDistinctDims(scope, l->name, {&l->out, &l->in}, l->expertDim);
    if (l->expertDim)
      checkDimName(scope, *l->expertDim);
    if (l->dtype && !parseDType(l->dtype->name))
      error(l->dtype->loc()) << "unknown dtype '" << l->dtype->name << "'";
    if (l->style.kind != ParallelStyle::Replicated) {
      const Shape *where = nullptr;
      const char *side = "";
      switch (l->style.kind) {
      case ParallelStyle::Column:
      case ParallelStyle::Vocab:
        where = &l->out;
        side = "output";
        break;
      case ParallelStyle::Row:
        where = &l->in;
        side = "input";
        break;
      default:
        break;
      }
      if (l->style.kind == ParallelStyle::Shard)
        error(l->style.range.Start)
            << "a linear is split with column(), row() or vocab(), not "
               "shard()";
      else {
        bool found = false;
        for (const ShapeAxis &axis : *where)
          for (const Ident &d : axis)
            for (const std::string &atom : dimAtoms(scope, d.name))
              found |= atom == l->style.dim.name || d.name == l->style.dim.name;
        if (!found)
          error(l->style.dim.loc())
              << spelling(l->style.kind) << "(" << l->style.dim.name
              << ") splits the " << side << " of '" << l->name.name
              << "', which has no dimension '" << l->style.dim.name << "'";
      }
    }
    if (l->biasCond)
      expect(l->biasCond.get(), env, boolT, "a bias condition");
    if (l->scaleBlock)
      expect(l->scaleBlock.get(), env, Type::get(Type::Int),
             "a scale block size");
    if (l->cond)
      expect(l->cond.get(), env, boolT, "a condition");
    return;
  }
  case Member::Instance: {
    auto *i = cast<InstanceMember>(mem);
    checkInstance(scope, i->expr, env);
    if (i->cond)
      expect(i->cond.get(), env, boolT, "a condition");
    return;
  }
  case Member::Stack: {
    auto *s = cast<StackMember>(mem);
    expect(s->count.get(), env, intT, "the length of a stack");
    env.locals.push_back({s->indexVar.name, intT});
    checkInstance(scope, s->expr, env);
    env.locals.pop_back();
    return;
  }
  case Member::Pipeline: {
    auto *p = cast<PipelineMember>(mem);
    llvm::StringSet<> placed;
    auto place = [&](const Ident &n) {
      const ModuleSymbol *sym = scope.lookup(n.name);
      if (!sym || !(sym->isParamLike() || sym->kind == ModuleSymbol::Instance ||
                    sym->kind == ModuleSymbol::Stack)) {
        error(n.loc()) << "'" << n.name
                       << "' is not a parameter, instance or stack of '"
                       << m->name.name << "'";
        return;
      }
      if (!placed.insert(n.name).second)
        error(n.loc()) << "'" << n.name << "' is placed twice";
    };
    for (const Ident &n : p->first)
      place(n);
    for (const Ident &n : p->last)
      place(n);
    for (const auto &[wanted, fallback] : p->lastFallbacks) {
      const ModuleSymbol *sym = scope.lookup(fallback.name);
      if (!sym || !sym->isParamLike())
        error(fallback.loc()) << "'" << fallback.name
                              << "' is not a parameter of '" << m->name.name
                              << "'; after ?" "? comes the parameter the "
                                 "last stage holds a copy of when '"
                              << wanted.name << "' is absent";
    }
    if (p->staged) {
      const ModuleSymbol *sym = scope.lookup(p->staged->name);
      if (!sym || sym->kind != ModuleSymbol::Stack)
        error(p->staged->loc()) << "'" << p->staged->name
                                << "' is not a stack; only a stack can be "
                                   "spread over pipeline stages";
      else
        place(*p->staged);
    }
    return;
  }
  case Member::Needs:
    return;
  case Member::Deploy: {
    auto *x = cast<DeployMember>(mem);
    if (!program.backends.count(x->backend.name))
      error(x->backend.loc()) << "unknown backend '" << x->backend.name << "'";
    llvm::StringSet<> seen;
    for (const DeployMember::Axis &a : x->axes) {
      if (!parseMeshAxis(a.name.name) && a.name.name != "vpp")
        error(a.name.loc()) << "unknown parallel axis '" << a.name.name
                            << "' (known: tp, pp, ep, etp, cp, dp, vpp)";
      else if (!seen.insert(a.name.name).second)
        error(a.name.loc()) << "axis '" << a.name.name << "' is given twice";
      for (int64_t v : a.values)
        if (v < 1 || v > 65536)
          error(a.name.loc()) << "axis '" << a.name.name
                              << "' takes values from 1 to 65536, not " << v;
    }
    return;
  }
  }
}

void Analyzer::checkValueCycles(const ModuleScope &scope) {
  // Edges from each value to the values its definition reads.
  llvm::DenseMap<const void *, std::vector<std::pair<const void *, SMLoc>>>
      edges;
  std::function<void(const Expr *, std::vector<std::pair<const void *, SMLoc>> &)>
      collect = [&](const Expr *e, auto &out) {
        if (!e)
          return;
        switch (e->getKind()) {
        case Expr::NameRef: {
          auto *n = cast<NameRefExpr>(e);
          if (n->refKind == NameRefExpr::Member)
            if (const ModuleSymbol *s = scope.lookup(n->name))
              out.push_back({s, n->getLoc()});
          return;
        }
        case Expr::Call:
          for (auto &a : cast<CallExpr>(e)->args)
            collect(a.get(), out);
          return;
        case Expr::Index:
          collect(cast<IndexExpr>(e)->base.get(), out);
          collect(cast<IndexExpr>(e)->index.get(), out);
          return;
        case Expr::Unary:
          collect(cast<UnaryExpr>(e)->operand.get(), out);
          return;
        case Expr::Binary:
          collect(cast<BinaryExpr>(e)->lhs.get(), out);
          collect(cast<BinaryExpr>(e)->rhs.get(), out);
          return;
        case Expr::Cond:
          collect(cast<CondExpr>(e)->cond.get(), out);
          collect(cast<CondExpr>(e)->thenExpr.get(), out);
          collect(cast<CondExpr>(e)->elseExpr.get(), out);
          return;
        case Expr::ListLit:
          for (auto &el : cast<ListLitExpr>(e)->elements)
            collect(el.get(), out);
          return;
        case Expr::Comprehension:
          collect(cast<ComprehensionExpr>(e)->element.get(), out);
          collect(cast<ComprehensionExpr>(e)->source.get(), out);
          return;
        default:
          return;
        }
      };
  for (auto &[name, sym] : scope.symbols) {
    auto &out = edges[&sym];
    if (sym.kind == ModuleSymbol::Input && sym.input)
      collect(sym.input->defaultValue.get(), out);
    else if (auto *c = dyn_cast_or_null<ConfigMember>(sym.member))
      collect(c->value.get(), out);
    else if (auto *l = dyn_cast_or_null<LetMember>(sym.member))
      collect(l->value.get(), out);
    else if (auto *d = dyn_cast_or_null<DimMember>(sym.member)) {
      collect(d->size.get(), out);
      for (const Ident &f : d->factors)
        if (f.name != d->name.name) // reported on its own
          if (const ModuleSymbol *s = scope.lookup(f.name))
            out.push_back({s, f.loc()});
    }
  }
  // Depth-first search; report each cycle once, where it closes.
  llvm::DenseMap<const void *, int> state; // 1 = on stack, 2 = done
  std::vector<const ModuleSymbol *> stack;
  auto nameOf = [&](const ModuleSymbol *x) -> std::string {
    for (auto &[n, sym] : scope.symbols)
      if (&sym == x)
        return n.str();
    return "?";
  };
  std::function<void(const ModuleSymbol *)> visit =
      [&](const ModuleSymbol *s) {
        // A chain of definitions that long is refused where it gets too
        // deep to follow (recursively) any further.
        if (stack.size() >= size_t(rt::kMaxEvalDepth)) {
          if (!edges[s].empty())
            error(edges[s].front().second)
                << "definitions chained more than " << rt::kMaxEvalDepth
                << " deep";
          state[s] = 2;
          return;
        }
        state[s] = 1;
        stack.push_back(s);
        for (auto &[target, useLoc] : edges[s]) {
          auto *t = static_cast<const ModuleSymbol *>(target);
          if (state[t] == 1) {
            std::string chain;
            bool on = false;
            for (const ModuleSymbol *x : stack) {
              on |= x == t;
              if (on)
                chain += nameOf(x) + " -> ";
            }
            error(useLoc) << "circular definition: " << chain << nameOf(t);
          } else if (state[t] == 0) {
            visit(t);
          }
        }
        stack.pop_back();
        state[s] = 2;
      };
  for (auto &[name, sym] : scope.symbols)
    if (state[&sym] == 0)
      visit(&sym);
}

void Analyzer::checkExtends(const ModuleDecl *m) {
  for (const MemberPtr &mem : m->members)
    if (!isa<ExampleMember, DeployMember, ServesMember>(mem.get()))
      error(mem->getLoc()) << "a model that extends another only adds example "
                              "configs, deployments and what it serves; its "
                              "members are "
                              "those of '"
                           << m->base->name << "'";
  llvm::SmallPtrSet<const ModuleDecl *, 4> seen = {m};
  for (const ModuleDecl *cur = m; cur->base;) {
    auto it = program.modules.find(cur->base->name);
    if (it == program.modules.end() || !it->second->isModel) {
      error(cur->base->loc())
          << (it == program.modules.end() ? "unknown model '"
                                          : "only a model can be extended; '")
          << cur->base->name
          << (it == program.modules.end() ? "'" : "' is a module");
      return;
    }
    cur = it->second;
    if (!seen.insert(cur).second) {
      error(m->base->loc()) << "model '" << m->name.name
                            << "' extends itself through '"
                            << m->base->name << "'";
      return;
    }
  }
}

void Analyzer::checkModule(const ModuleDecl *m) {
  const ModuleScope &scope = program.scope(m);
  ExprEnv env;
  env.scope = &scope;
  for (const ModuleParam &p : m->params)
    if (p.defaultValue)
      expect(p.defaultValue.get(), env, p.type,
             "the default of '" + p.name.name + "'");
  for (const MemberPtr &mem : m->members)
    checkMember(m, mem.get());
  checkValueCycles(scope);
}

//===----------------------------------------------------------------------===//
// Layouts
//===----------------------------------------------------------------------===//

void Analyzer::checkTemplate(const NameTemplate &t, ExprEnv &env,
                             bool allowFamily) {
  for (auto &seg : const_cast<NameTemplate &>(t).segments) {
    if (!seg.expr)
      continue;
    if (auto *n = dyn_cast<NameRefExpr>(seg.expr.get()))
      if (const ModuleSymbol *sym = env.scope->lookup(n->name))
        if (sym->isDim() && allowFamily) {
          seg.family = true;
          n->refKind = NameRefExpr::Member;
          n->type = Type::get(Type::Dim);
          continue;
        }
    Type ty = check(seg.expr.get(), env);
    if (ty.isValid() && !ty.isInt() && ty.kind != Type::String)
      error(seg.expr->getLoc()) << "a name placeholder must be an int or a "
                                   "string, not "
                                << ty.str();
  }
}

void Analyzer::checkTensorEntry(const ModuleScope &scope, const TensorEntry &e,
                                 ExprEnv &env) {
  size_t depth = env.locals.size();
  if (e.forStack) {
    const ModuleSymbol *sym = scope.lookup(e.forStack->name);
    if (!sym || sym->kind != ModuleSymbol::Stack)
      error(e.forStack->loc()) << "'" << e.forStack->name
                               << "' is not a stack of '"
                               << scope.decl->name.name << "'";
    env.locals.push_back({e.forVar->name, Type::get(Type::Int)});
  }
  checkTensorEntryBody(scope, e, env);
  env.locals.resize(depth);
}

void Analyzer::checkTensorEntryBody(const ModuleScope &scope,
                                    const TensorEntry &e, ExprEnv &env) {
  checkTemplate(e.name, env, /*allowFamily=*/true);

  // The parameters the tensor holds, each with every dimension it must
  // have: those of the levels around its part, and its own.
  struct PartUse {
    ParamRef ref;
    std::vector<const Ident *> dims;
    SMLoc loc;
  };
  std::vector<PartUse> parts;
  bool bad = false;
  // Dims and part sets of one level: through products, not into parts.
  std::function<void(const AxisTerm &, std::vector<const Ident *> &,
                     std::vector<const AxisTerm *> &)>
      collect = [&](const AxisTerm &t, std::vector<const Ident *> &dims,
                    std::vector<const AxisTerm *> &sets) {
        if (t.kind == AxisTerm::Dim)
          dims.push_back(&t.dim);
        else if (t.kind == AxisTerm::Parts)
          sets.push_back(&t);
        for (const AxisTerm &c : t.product)
          collect(c, dims, sets);
      };
  std::function<void(const std::vector<const AxisTerm *> &,
                     std::vector<const Ident *>, bool, SMLoc)>
      level = [&](const std::vector<const AxisTerm *> &terms,
                  std::vector<const Ident *> shared, bool top, SMLoc where) {
        std::vector<const AxisTerm *> sets;
        for (const AxisTerm *t : terms)
          collect(*t, shared, sets);
        if (sets.size() > 1) {
          error(sets[1]->range.Start)
              << "a tensor selects its parameter through one part set";
          bad = true;
          return;
        }
        if (!top && sets.size() != 1) {
          error(where) << "a group holds one part set; without one, name "
                          "the parameter: {q: (P, D), ...}";
          bad = true;
          return;
        }
        if (sets.empty())
          return;
        for (const LayoutPart &p : sets.front()->parts) {
          if (p.isGroup()) {
            std::vector<const AxisTerm *> inner;
            for (const AxisTerm &t : p.shape)
              inner.push_back(&t);
            level(inner, shared, false, p.range.Start);
            continue;
          }
          std::string why;
          auto ref = resolveParamRef(program, scope, p.param, why);
          if (!ref) {
            error(p.param.range.Start) << why;
            bad = true;
            continue;
          }
          PartUse use{*ref, shared, p.param.range.Start};
          std::vector<const AxisTerm *> own;
          for (const AxisTerm &t : p.shape)
            collect(t, use.dims, own);
          if (!own.empty()) {
            error(own.front()->range.Start)
                << "a part set inside a named part; write a group instead, "
                   "as in {(G, {q, gate}), k: (G, D)}";
            bad = true;
          }
          parts.push_back(std::move(use));
        }
      };
  std::vector<const AxisTerm *> top;
  for (const AxisProduct &axis : e.tensor.axes)
    for (const AxisTerm &t : axis)
      top.push_back(&t);
  std::vector<const Ident *> topDims;
  std::vector<const AxisTerm *> topSets;
  for (const AxisTerm *t : top)
    collect(*t, topDims, topSets);

  if (e.tensor.param) {
    if (!topSets.empty()) {
      error(e.tensor.range.Start)
          << "a tensor names its parameter either before its axes or in a "
             "part set, not both";
      return;
    }
    std::string why;
    auto ref = resolveParamRef(program, scope, *e.tensor.param, why);
    if (!ref) {
      error(e.tensor.param->range.Start) << why;
      return;
    }
    parts.push_back({*ref, topDims, e.tensor.param->range.Start});
  } else if (topSets.empty()) {
    error(e.tensor.range.Start)
        << "this tensor holds no parameter: name one before its axes, as in "
           "q[(G, D), H], or select parts with {q, k}";
    return;
  } else {
    level(top, {}, true, e.tensor.range.Start);
    if (bad)
      return;
  }

  // Every dimension named must be a dimension of the parameter it covers.
  for (const PartUse &p : parts)
    for (const Ident *d : p.dims) {
      const ModuleSymbol *sym = p.ref.owner->lookup(d->name);
      if (sym && sym->isDim())
        continue;
      auto diag = error(d->loc())
                  << "'" << d->name << "' is not a dimension of '"
                  << p.ref.owner->decl->name.name << "', which declares '"
                  << (p.ref.symbol->kind == ModuleSymbol::Linear
                          ? cast<LinearMember>(p.ref.symbol->member)->name.name
                          : cast<ParamMember>(p.ref.symbol->member)->name.name)
                  << "'";
      diag.attachNote(loc(p.loc)) << "for this parameter";
    }

  for (const TensorOption &o : e.options) {
    switch (o.kind) {
    case TensorOption::Copy:
      if (o.value)
        expect(o.value.get(), env, Type::get(Type::Bool), "a copy condition");
      break;
    case TensorOption::Offset:
      expect(o.value.get(), env, Type::get(Type::Int), "an offset");
      break;
    case TensorOption::DType:
      if (!parseDType(o.name.name))
        error(o.name.loc()) << "unknown dtype '" << o.name.name << "'";
      break;
    case TensorOption::View:
      for (auto &d : o.shape)
        expect(d.get(), env, Type::get(Type::Int), "a view size");
      break;
    case TensorOption::Split:
      if (o.axis < 0 || o.axis >= static_cast<int64_t>(e.tensor.axes.size()))
        error(o.range.Start) << "split names axis " << o.axis
                             << " of a tensor with " << e.tensor.axes.size()
                             << " axes";
      if (!o.name.name.empty() && !parseMeshAxis(o.name.name))
        error(o.name.loc()) << "unknown mesh axis '" << o.name.name << "'";
      break;
    case TensorOption::On:
      if (o.name.name != "first" && o.name.name != "last")
        error(o.name.loc()) << "a tensor is placed 'on first' or 'on last', "
                               "not on '"
                            << o.name.name << "'";
      break;
    }
  }
  if (e.when)
    expect(e.when.get(), env, Type::get(Type::Bool), "a when condition");
}

void Analyzer::checkChoiceDefault(const LayoutDecl &l, const ModuleDecl &m,
                                  const ModuleScope &scope,
                                  const ChoiceDefaultEntry &ch,
                                  llvm::StringSet<> &seen) {
  if (!m.isModel) {
    error(ch.getLoc()) << "a choice default belongs in a layout of a model, "
                          "not of module '"
                       << m.name.name << "'";
    return;
  }
  // The choice, declared by the backend or one of its bases.
  const BackendEntry *decl = nullptr;
  llvm::SmallPtrSet<const BackendDecl *, 4> visited;
  for (auto it = program.backends.find(l.backend.name);
       !decl && it != program.backends.end() && visited.insert(it->second).second;
       it = it->second->base ? program.backends.find(it->second->base->name)
                             : program.backends.end())
    for (const BackendEntry &e : it->second->entries)
      if (e.kind == BackendEntry::Choice && e.name.name == ch.name.name)
        decl = &e;
  if (!decl) {
    error(ch.name.loc()) << "backend '" << l.backend.name
                         << "' has no choice '" << ch.name.name << "'";
    return;
  }
  if (!seen.insert(ch.name.name).second)
    error(ch.name.loc()) << "choice '" << ch.name.name
                         << "' has a default in this layout already";
  // Evaluated against the model's config alone, before any choice is made
  // and without a parallel configuration.
  ExprEnv env;
  env.scope = &scope;
  env.choiceDefault = true;
  expect(ch.value.get(), env, Type::get(Type::String),
         "the default of choice '" + ch.name.name + "'");
  if (auto *lit = dyn_cast<StringLitExpr>(ch.value.get());
      lit && llvm::none_of(decl->options, [&](const auto &o) {
        return o.first == lit->value;
      })) {
    std::string options;
    for (const auto &o : decl->options)
      options += (options.empty() ? "" : ", ") + o.first;
    error(lit->getLoc()) << "\"" << lit->value << "\" is not an option of choice '"
                         << ch.name.name << "' (" << options << ")";
  }
}

void Analyzer::checkLayout(const LayoutDecl *l) {
  if (!program.backends.count(l->backend.name))
    error(l->backend.loc()) << "unknown backend '" << l->backend.name << "'";
  auto mit = program.modules.find(l->module.name);
  if (mit == program.modules.end()) {
    error(l->module.loc()) << "unknown module '" << l->module.name << "'";
    return;
  }
  if (mit->second->base) {
    error(l->module.loc()) << "'" << l->module.name << "' extends '"
                           << mit->second->base->name
                           << "' and has its layouts";
    return;
  }
  const ModuleScope &scope = program.scope(mit->second);
  ExprEnv env;
  env.scope = &scope;
  env.allowContext = true;
  env.allowIs = true;
  // A layout may read its backend's settings and choices.
  if (auto bit = program.backends.find(l->backend.name);
      bit != program.backends.end())
    env.backendNames = &backendNames[bit->second];
  if (l->mount)
    for (const auto &seg : l->mount->segments)
      if (seg.expr)
        error(seg.expr->getLoc())
            << "a layout's default mount is a plain name; mount with an "
               "index in the parent's layout instead";
  llvm::StringSet<> mounted, choiceDefaults;
  for (const LayoutEntryPtr &entry : l->entries) {
    if (auto *t = dyn_cast<TensorEntry>(entry.get())) {
      checkTensorEntry(scope, *t, env);
    } else if (auto *m = dyn_cast<MountEntry>(entry.get())) {
      const ModuleSymbol *sym = scope.lookup(m->member.name);
      if (!sym || (sym->kind != ModuleSymbol::Instance &&
                   sym->kind != ModuleSymbol::Stack)) {
        error(m->member.loc()) << "'" << m->member.name
                               << "' is not an instance or stack of '"
                               << l->module.name << "'";
        continue;
      }
      bool isStack = sym->kind == ModuleSymbol::Stack;
      bool valid = true;
      if (isStack && !m->indexVar) {
        error(m->member.loc()) << "stack '" << m->member.name
                               << "' is mounted with an index: "
                               << m->member.name << "[i] at \"...{i}\"";
        valid = false;
      }
      if (!isStack && m->indexVar) {
        error(m->indexVar->loc()) << "'" << m->member.name
                                  << "' is not a stack and takes no index";
        valid = false;
      }
      if (m->when && isStack)
        error(m->when->getLoc()) << "a stack is mounted unconditionally";
      if (valid && !m->when && !mounted.insert(m->member.name).second)
        error(m->member.loc()) << "'" << m->member.name
                               << "' is mounted twice";
      if (m->indexVar)
        env.locals.push_back({m->indexVar->name, Type::get(Type::Int)});
      checkTemplate(m->path, env, /*allowFamily=*/false);
      if (m->when)
        expect(m->when.get(), env, Type::get(Type::Bool), "a when condition");
      if (m->indexVar)
        env.locals.pop_back();
    } else if (auto *s = dyn_cast<ShardEntry>(entry.get())) {
      if (s->axis && !parseMeshAxis(s->axis->name))
        error(s->axis->loc()) << "unknown mesh axis '" << s->axis->name << "'";
      for (const QualifiedName &q : s->params) {
        std::string why;
        auto ref = resolveParamRef(program, scope, q, why);
        if (!ref) {
          error(q.range.Start) << why;
          continue;
        }
        const ModuleSymbol *d = ref->owner->lookup(s->dim.name);
        if (!d || !d->isDim())
          error(s->dim.loc()) << "'" << s->dim.name
                              << "' is not a dimension of '"
                              << ref->owner->decl->name.name << "'";
      }
    } else if (auto *d = dyn_cast<DerivedEntry>(entry.get())) {
      for (const QualifiedName &q : d->sources) {
        std::string why;
        if (!resolveParamRef(program, scope, q, why))
          error(q.range.Start) << why;
      }
      for (const Ident &r : d->recompute)
        if (!isRecomputeTrigger(r.name))
          error(r.loc()) << "unknown recompute trigger '" << r.name
                         << "' (known: load, update)";
      if (d->when)
        expect(d->when.get(), env, Type::get(Type::Bool), "a when condition");
    } else if (auto *ch = dyn_cast<ChoiceDefaultEntry>(entry.get())) {
      checkChoiceDefault(*l, *mit->second, scope, *ch, choiceDefaults);
    } else {
      auto *let = cast<LayoutLetEntry>(entry.get());
      Type t = let->let->declaredType
                   ? expect(let->let->value.get(), env,
                            *let->let->declaredType, "'" + let->let->name.name + "'")
                   : check(let->let->value.get(), env);
      env.locals.push_back({let->let->name.name, t});
    }
  }
}

//===----------------------------------------------------------------------===//
// Backends
//===----------------------------------------------------------------------===//

void Analyzer::checkBackend(const BackendDecl *b) {
  // The chain of bases must end.
  llvm::SmallPtrSet<const BackendDecl *, 4> seen{b};
  const BackendDecl *cur = b;
  std::vector<const BackendDecl *> chain;
  while (cur->base) {
    auto it = program.backends.find(cur->base->name);
    if (it == program.backends.end()) {
      error(cur->base->loc()) << "unknown backend '" << cur->base->name << "'";
      return;
    }
    if (!seen.insert(it->second).second) {
      error(b->name.loc()) << "backend '" << b->name.name
                           << "' extends itself through '" << cur->name.name
                           << "'";
      return;
    }
    cur = it->second;
    chain.push_back(cur);
  }
  // Inherited lets are visible; the base's are checked with the base.
  llvm::StringMap<Type> &names = backendNames[b];
  for (auto it = chain.rbegin(); it != chain.rend(); ++it)
    for (const BackendEntry &e : (*it)->entries)
      if (e.kind == BackendEntry::Let && e.let->value->type.isValid())
        names[e.let->name.name] = e.let->value->type;

  ExprEnv env;
  env.backendNames = &names;
  env.allowContext = true;
  llvm::StringSet<> axes, roles, caps, choices;
  for (const BackendEntry &e : b->entries) {
    switch (e.kind) {
    case BackendEntry::Mesh:
      for (const Ident &n : e.names) {
        if (!parseMeshAxis(n.name))
          error(n.loc()) << "unknown mesh axis '" << n.name
                         << "' (known: tp, pp, ep, etp, cp, dp)";
        else if (!axes.insert(n.name).second)
          error(n.loc()) << "mesh axis '" << n.name << "' is listed twice";
      }
      break;
    case BackendEntry::Class:
      if (!isClassRole(e.name.name) &&
          !llvm::StringRef(e.name.name).starts_with("module:"))
        error(e.name.loc()) << "unknown class role '" << e.name.name
                            << "' (known: column, column_norm, row, "
                               "replicated, grouped_column, grouped_row, "
                               "grouped, embedding)";
      else if (!roles.insert(e.name.name).second)
        error(e.name.loc()) << "class role '" << e.name.name
                            << "' is defined twice";
      for (const auto &[key, value] : e.properties) {
        std::optional<Type::Kind> kind = classPropertyType(key.name);
        if (!kind) {
          error(key.loc()) << "unknown class property '" << key.name
                           << "' (known: sizes, returns, lora, "
                              "input_is_parallel)";
          continue;
        }
        expect(value.get(), env, Type::get(*kind),
               "class property '" + key.name + "'");
        if (!isConstant(value.get()))
          error(value->getLoc()) << "a class property must be a literal";
        if (key.name == "sizes")
          if (auto *s = dyn_cast<StringLitExpr>(value.get()))
            if (s->value != "global" && s->value != "local")
              error(s->getLoc()) << "sizes is \"global\" or \"local\"";
      }
      break;
    case BackendEntry::Choice: {
      if (!choices.insert(e.name.name).second || names.count(e.name.name))
        error(e.name.loc()) << "'" << e.name.name
                            << "' is already defined in backend '"
                            << b->name.name << "'";
      llvm::StringSet<> seen;
      for (const auto &[option, range] : e.options)
        if (!seen.insert(option).second)
          error(range.Start) << "option \"" << option
                             << "\" is listed twice";
      names[e.name.name] = Type::get(Type::String);
      break;
    }
    case BackendEntry::Capability:
      if (!caps.insert(e.name.name).second)
        error(e.name.loc()) << "capability '" << e.name.name
                            << "' is defined twice";
      expect(e.value.get(), env, Type::get(Type::Bool), "a capability");
      break;
    case BackendEntry::Let: {
      Type t = e.let->declaredType
                   ? expect(e.let->value.get(), env, *e.let->declaredType,
                            "'" + e.let->name.name + "'")
                   : check(e.let->value.get(), env);
      names[e.let->name.name] = t;
      break;
    }
    case BackendEntry::Require:
      expect(e.require->cond.get(), env, Type::get(Type::Bool),
             "a require condition");
      break;
    }
  }
}

mlir::LogicalResult Analyzer::run() {
  collectDecls();
  // Walk declarations in source order, so diagnostics come out in it too.
  std::vector<const ModuleDecl *> modules;
  std::vector<const BackendDecl *> backends;
  for (const auto &file : program.files)
    for (const DeclPtr &d : file->decls) {
      if (auto *m = dyn_cast<ModuleDecl>(d.get()))
        if (program.modules.lookup(m->name.name) == m)
          modules.push_back(m);
      if (auto *b = dyn_cast<BackendDecl>(d.get()))
        if (program.backends.lookup(b->name.name) == b)
          backends.push_back(b);
    }
  for (const ModuleDecl *m : modules)
    buildScope(m);
  for (const ModuleDecl *m : modules)
    if (m->base)
      checkExtends(m);
  for (const ModuleDecl *m : modules)
    checkModule(m);
  // Bases first, so that derived backends see their types.
  std::vector<const BackendDecl *> order;
  llvm::SmallPtrSet<const BackendDecl *, 8> done;
  std::function<void(const BackendDecl *, unsigned)> visit =
      [&](const BackendDecl *b, unsigned depth) {
        if (done.count(b) || depth > program.backends.size())
          return;
        if (b->base)
          if (auto it = program.backends.find(b->base->name);
              it != program.backends.end())
            visit(it->second, depth + 1);
        if (done.insert(b).second)
          order.push_back(b);
      };
  for (const BackendDecl *b : backends)
    visit(b, 0);
  for (const BackendDecl *b : order)
    checkBackend(b);
  for (const LayoutDecl *l : program.layouts)
    checkLayout(l);
  return mlir::failure(failed);
}

} // namespace

mlir::LogicalResult mdl::analyze(Program &program, llvm::SourceMgr &sourceMgr,
                                 mlir::MLIRContext &context) {
  return Analyzer(program, sourceMgr, context).run();
}
