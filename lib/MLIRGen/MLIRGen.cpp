//===- MLIRGen.cpp - Lower the MDL AST to the mdl dialect -----------------===//
//
// A straight walk over the analysed AST. Names are already resolved (Sema
// annotated every NameRefExpr), so each expression maps to ops directly:
// members become `mdl.get`, locals are block arguments, context values
// `mdl.context`.
//
//===----------------------------------------------------------------------===//

#include "mdl/MLIRGen/MLIRGen.h"

#include "mdl/Dialect/MDL/MDLOps.h"
#include "mdl/Parse/Parser.h"
#include "mdl/Runtime/Base/DType.h"
#include "mdl/Sema/Sema.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/Verifier.h"
#include "llvm/ADT/ScopedHashTable.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/SourceMgr.h"

using namespace mdl;
using namespace mdl::ast;
using llvm::cast;
using llvm::dyn_cast;

namespace {

class Generator {
public:
  Generator(const Program &program, llvm::SourceMgr &sm,
            mlir::MLIRContext &ctx)
      : program(program), sm(sm), ctx(ctx), builder(&ctx) {}

  mlir::OwningOpRef<mlir::ModuleOp> run();

private:
  mlir::Location loc(SMLoc l) { return toLocation(sm, ctx, l); }
  mlir::Type type(const Type &t);
  mlir::Type i64() { return builder.getI64Type(); }
  mlir::Type i1() { return builder.getI1Type(); }

  // Expressions -----------------------------------------------------------
  mlir::Value expr(const Expr *e);
  mlir::Value constant(mlir::Attribute value, mlir::Type t, SMLoc l) {
    return builder.create<ConstantOp>(loc(l), t, value);
  }
  /// Fills `region` with one block computing `exprs` and yielding them.
  void yieldRegion(mlir::Region &region, llvm::ArrayRef<const Expr *> exprs,
                   llvm::ArrayRef<std::pair<std::string, mlir::Type>> args = {});
  /// yieldRegion of `e` alone where there is an `e`; an optional region
  /// stays empty without one.
  void
  yieldOptional(mlir::Region &region, const Expr *e,
                llvm::ArrayRef<std::pair<std::string, mlir::Type>> args = {}) {
    if (e)
      yieldRegion(region, {e}, args);
  }
  void yieldValues(mlir::Region &region, SMLoc l,
                   llvm::function_ref<llvm::SmallVector<mlir::Value>()> body,
                   llvm::ArrayRef<std::pair<std::string, mlir::Type>> args = {});

  // Declarations ----------------------------------------------------------
  void module(const ModuleDecl *m);
  void extendModels(mlir::ModuleOp top);
  mlir::ArrayAttr examplesOf(const ModuleDecl *m);
  void deploy(const DeployMember *d);
  mlir::ArrayAttr servedBy(const ModuleDecl *m, llvm::StringRef key);
  void member(const ModuleDecl *m, const Member *mem);
  mlir::ArrayAttr shape(const Shape &s);
  ParallelStyleAttr style(const ParallelStyle &s);
  /// The element type a dtype name (checked by Sema) stands for.
  ElementTypeAttr dtype(llvm::StringRef name) {
    return ElementTypeAttr::get(&ctx, toElementType(*parseDType(name)));
  }
  /// The attributes of a param's or linear's optional `[E]` and dtype: null
  /// where the spec gives none.
  mlir::FlatSymbolRefAttr expertAttr(const std::optional<Ident> &dim) {
    return dim ? mlir::FlatSymbolRefAttr::get(&ctx, dim->name) : nullptr;
  }
  ElementTypeAttr dtypeAttr(const std::optional<Ident> &name) {
    return name ? dtype(name->name) : ElementTypeAttr();
  }
  void cases(mlir::Region &region, const InstanceExpr &ie, bool inStack,
             const std::string &indexVar);
  void layout(const LayoutDecl *l);
  mlir::ArrayAttr nameTemplate(const NameTemplate &t,
                               llvm::SmallVectorImpl<const Expr *> &args);
  TermAttr term(const AxisTerm &t);
  mlir::ArrayAttr termList(const AxisProduct &p);
  /// The events after which a derived tensor is rebuilt, or null.
  mlir::ArrayAttr recomputeAttr(bool has, const std::vector<Ident> &events);
  void backend(const BackendDecl *b);

  const Program &program;
  llvm::SourceMgr &sm;
  mlir::MLIRContext &ctx;
  mlir::OpBuilder builder;
  /// SSA values of local variables in scope, innermost last.
  std::vector<std::pair<std::string, mlir::Value>> locals;
  /// Names of the lets of the layout being generated: read with mdl.get.
  llvm::StringSet<> layoutLets;
  /// The roots of the config entry being generated.
  std::vector<std::string> configRoots;
};

mlir::Type Generator::type(const Type &t) {
  switch (t.kind) {
  case Type::Int:
  case Type::Dim:
    return i64();
  case Type::Bool:
    return i1();
  case Type::String:
    return StringType::get(&ctx);
  case Type::DType:
    return DTypeType::get(&ctx);
  case Type::List:
    return ListType::get(&ctx, type(*t.element));
  case Type::Invalid:
  case Type::Any:
    break;
  }
  llvm_unreachable("Sema leaves no untyped expression");
}

static BinaryKind binaryKind(ast::BinaryOp op, bool concat) {
  using ast::BinaryOp;
  switch (op) {
  case BinaryOp::Add: return concat ? BinaryKind::concat : BinaryKind::add;
  case BinaryOp::Sub: return BinaryKind::sub;
  case BinaryOp::Mul: return BinaryKind::mul;
  case BinaryOp::Div: return BinaryKind::div;
  case BinaryOp::Mod: return BinaryKind::mod;
  case BinaryOp::Lt: return BinaryKind::lt;
  case BinaryOp::Le: return BinaryKind::le;
  case BinaryOp::Gt: return BinaryKind::gt;
  case BinaryOp::Ge: return BinaryKind::ge;
  case BinaryOp::Eq: return BinaryKind::eq;
  case BinaryOp::Ne: return BinaryKind::ne;
  case BinaryOp::And: return BinaryKind::and_;
  case BinaryOp::Or: return BinaryKind::or_;
  case BinaryOp::In:
  case BinaryOp::Coalesce:
    break;
  }
  llvm_unreachable("not a plain binary operator");
}

mlir::Value Generator::expr(const Expr *e) {
  mlir::Location l = loc(e->getLoc());
  switch (e->getKind()) {
  case Expr::IntLit:
    return constant(builder.getI64IntegerAttr(cast<IntLitExpr>(e)->value),
                    i64(), e->getLoc());
  case Expr::StringLit:
    return constant(builder.getStringAttr(cast<StringLitExpr>(e)->value),
                    StringType::get(&ctx), e->getLoc());
  case Expr::BoolLit:
    return constant(builder.getBoolAttr(cast<BoolLitExpr>(e)->value), i1(),
                    e->getLoc());
  case Expr::NameRef: {
    auto *n = cast<NameRefExpr>(e);
    switch (n->refKind) {
    case NameRefExpr::Local:
      for (auto it = locals.rbegin(); it != locals.rend(); ++it)
        if (it->first == n->name)
          return it->second;
      assert(layoutLets.contains(n->name) && "Sema resolved an unknown local");
      [[fallthrough]];
    case NameRefExpr::Member:
      return builder.create<GetOp>(l, type(e->type), n->name);
    case NameRefExpr::DTypeConst:
      return constant(dtype(n->name), DTypeType::get(&ctx), e->getLoc());
    case NameRefExpr::Context:
      return builder.create<ContextOp>(l, type(e->type), n->name);
    case NameRefExpr::Unresolved:
      break;
    }
    llvm_unreachable("Sema resolves every name");
  }
  case Expr::Call: {
    auto *c = cast<CallExpr>(e);
    Builtin b = *lookupBuiltin(c->callee.name);
    if (b == Builtin::Hf) {
      // Under `config from "a", "b"`, hf("k") tries a.k, then b.k.
      const std::string &key = cast<StringLitExpr>(c->args[0].get())->value;
      if (configRoots.empty())
        return builder.create<HfOp>(l, type(e->type), key);
      mlir::Value result;
      for (auto it = configRoots.rbegin(); it != configRoots.rend(); ++it) {
        std::string path = it->empty() ? key : *it + "." + key;
        mlir::Value v = builder.create<HfOp>(l, type(e->type), path);
        result = result ? builder.create<CoalesceOp>(l, v, result) : v;
      }
      return result;
    }
    llvm::SmallVector<mlir::Value> args;
    for (const ExprPtr &a : c->args)
      args.push_back(expr(a.get()));
    return builder.create<BuiltinOp>(l, type(e->type), spelling(b), args);
  }
  case Expr::Index: {
    auto *x = cast<IndexExpr>(e);
    mlir::Value base = expr(x->base.get());
    mlir::Value index = expr(x->index.get());
    return builder.create<IndexOp>(l, type(e->type), base, index);
  }
  case Expr::Unary: {
    auto *x = cast<UnaryExpr>(e);
    mlir::Value v = expr(x->operand.get());
    if (x->op == UnaryOp::Neg)
      return builder.create<NegOp>(l, v);
    return builder.create<NotOp>(l, v);
  }
  case Expr::Binary: {
    auto *x = cast<BinaryExpr>(e);
    mlir::Value lhs = expr(x->lhs.get());
    mlir::Value rhs = expr(x->rhs.get());
    if (x->op == ast::BinaryOp::In)
      return builder.create<ContainsOp>(l, rhs, lhs);
    if (x->op == ast::BinaryOp::Coalesce)
      return builder.create<CoalesceOp>(l, lhs, rhs);
    bool concat = x->op == ast::BinaryOp::Add && !x->lhs->type.isInt();
    return builder.create<mdl::BinaryOp>(l, type(e->type),
                                         binaryKind(x->op, concat), lhs, rhs);
  }
  case Expr::Is: {
    auto *x = cast<IsExpr>(e);
    return builder.create<IsOp>(l, cast<NameRefExpr>(x->operand.get())->name,
                                x->module.name);
  }
  case Expr::Cond: {
    auto *x = cast<CondExpr>(e);
    mlir::Value c = expr(x->cond.get());
    mlir::Value t = expr(x->thenExpr.get());
    mlir::Value f = expr(x->elseExpr.get());
    return builder.create<SelectOp>(l, c, t, f);
  }
  case Expr::ListLit: {
    auto *x = cast<ListLitExpr>(e);
    llvm::SmallVector<mlir::Value> elements;
    for (const ExprPtr &el : x->elements)
      elements.push_back(expr(el.get()));
    return builder.create<ListOp>(l, type(e->type), elements);
  }
  case Expr::Comprehension: {
    auto *x = cast<ComprehensionExpr>(e);
    mlir::Value source = expr(x->source.get());
    auto op = builder.create<ComprehensionOp>(l, type(e->type), source);
    mlir::Type elem = cast<ListType>(source.getType()).getElementType();
    mlir::Block *block = builder.createBlock(&op.getBody(), {}, {elem}, {l});
    locals.push_back({x->var.name, block->getArgument(0)});
    mlir::Value v = expr(x->element.get());
    builder.create<YieldOp>(l, v);
    locals.pop_back();
    builder.setInsertionPointAfter(op);
    return op;
  }
  }
  llvm_unreachable("unknown expression kind");
}

void Generator::yieldValues(
    mlir::Region &region, SMLoc l,
    llvm::function_ref<llvm::SmallVector<mlir::Value>()> body,
    llvm::ArrayRef<std::pair<std::string, mlir::Type>> args) {
  mlir::OpBuilder::InsertionGuard guard(builder);
  llvm::SmallVector<mlir::Type> types;
  llvm::SmallVector<mlir::Location> locs;
  for (auto &a : args) {
    types.push_back(a.second);
    locs.push_back(loc(l));
  }
  mlir::Block *block = builder.createBlock(&region, {}, types, locs);
  size_t depth = locals.size();
  for (size_t i = 0; i < args.size(); ++i)
    locals.push_back({args[i].first, block->getArgument(i)});
  llvm::SmallVector<mlir::Value> values = body();
  builder.create<YieldOp>(loc(l), values);
  locals.resize(depth);
}

void Generator::yieldRegion(
    mlir::Region &region, llvm::ArrayRef<const Expr *> exprs,
    llvm::ArrayRef<std::pair<std::string, mlir::Type>> args) {
  SMLoc l = exprs.empty() ? SMLoc() : exprs.front()->getLoc();
  yieldValues(
      region, l,
      [&] {
        llvm::SmallVector<mlir::Value> values;
        for (const Expr *e : exprs)
          values.push_back(expr(e));
        return values;
      },
      args);
}

//===----------------------------------------------------------------------===//
// Modules
//===----------------------------------------------------------------------===//

mlir::ArrayAttr Generator::shape(const Shape &s) {
  llvm::SmallVector<mlir::Attribute> axes;
  for (const ShapeAxis &axis : s) {
    llvm::SmallVector<mlir::Attribute> dims;
    for (const Ident &d : axis)
      dims.push_back(mlir::FlatSymbolRefAttr::get(&ctx, d.name));
    axes.push_back(builder.getArrayAttr(dims));
  }
  return builder.getArrayAttr(axes);
}

ParallelStyleAttr Generator::style(const ParallelStyle &s) {
  StyleKind kind = StyleKind::replicated;
  switch (s.kind) {
  case ParallelStyle::Replicated: kind = StyleKind::replicated; break;
  case ParallelStyle::Column: kind = StyleKind::column; break;
  case ParallelStyle::Row: kind = StyleKind::row; break;
  case ParallelStyle::Vocab: kind = StyleKind::vocab; break;
  case ParallelStyle::Shard: kind = StyleKind::shard; break;
  }
  mlir::StringAttr dim;
  if (s.kind != ParallelStyle::Replicated)
    dim = builder.getStringAttr(s.dim.name);
  return ParallelStyleAttr::get(&ctx, kind, dim);
}

void Generator::cases(mlir::Region &region, const InstanceExpr &ie,
                      bool inStack, const std::string &indexVar) {
  mlir::OpBuilder::InsertionGuard guard(builder);
  builder.createBlock(&region);
  for (const InstanceExpr::Arm &arm : ie.arms) {
    const ModuleDecl *callee = program.modules.lookup(arm.call.callee.name);
    // Bind arguments to inputs by position or name.
    llvm::SmallVector<std::pair<std::string, const Expr *>> bound;
    size_t position = 0;
    for (const Argument &a : arm.call.args) {
      std::string name = a.name ? a.name->name
                                : callee->params[position++].name.name;
      bound.push_back({name, a.value.get()});
    }
    llvm::SmallVector<mlir::Attribute> names;
    for (auto &b : bound)
      names.push_back(builder.getStringAttr(b.first));
    bool guarded = ie.scrutinee && arm.pattern;
    auto c = builder.create<CaseOp>(loc(arm.call.range.Start),
                                    arm.call.callee.name,
                                    builder.getArrayAttr(names), guarded);
    llvm::SmallVector<std::pair<std::string, mlir::Type>> args;
    if (inStack)
      args.push_back({indexVar, i64()});
    yieldValues(
        c.getArgs(), arm.call.range.Start,
        [&] {
          llvm::SmallVector<mlir::Value> values;
          if (guarded) {
            // The guard compares the scrutinee with this arm's pattern.
            mlir::Value s = expr(ie.scrutinee.get());
            mlir::Value p = expr(arm.pattern.get());
            values.push_back(builder.create<mdl::BinaryOp>(
                loc(arm.patternRange.Start), i1(), BinaryKind::eq, s, p));
          }
          for (auto &b : bound)
            values.push_back(expr(b.second));
          return values;
        },
        args);
  }
}

void Generator::member(const ModuleDecl *m, const Member *mem) {
  mlir::Location l = loc(mem->getLoc());
  switch (mem->getKind()) {
  case Member::Config: {
    auto *c = cast<ConfigMember>(mem);
    auto op = builder.create<ConfigOp>(l, c->name.name, type(c->type));
    configRoots = c->roots;
    yieldRegion(op.getValue(), {c->value.get()});
    configRoots.clear();
    yieldOptional(op.getDetect(), c->detect.get());
    return;
  }
  case Member::Example:
  case Member::Serves:
    return; // collected on the module op
  case Member::Let: {
    auto *x = cast<LetMember>(mem);
    auto op = builder.create<LetOp>(l, x->name.name, type(x->value->type));
    yieldRegion(op.getValue(), {x->value.get()});
    return;
  }
  case Member::Require: {
    auto *x = cast<RequireMember>(mem);
    auto op = builder.create<RequireOp>(l, x->message);
    yieldRegion(op.getCond(), {x->cond.get()});
    return;
  }
  case Member::DTypeDefault: {
    auto op = builder.create<DefaultDTypeOp>(l);
    yieldRegion(op.getValue(), {cast<DTypeDefaultMember>(mem)->value.get()});
    return;
  }
  case Member::Dim: {
    auto *d = cast<DimMember>(mem);
    mlir::ArrayAttr factors;
    if (!d->factors.empty()) {
      llvm::SmallVector<mlir::Attribute> refs;
      for (const Ident &f : d->factors)
        refs.push_back(mlir::FlatSymbolRefAttr::get(&ctx, f.name));
      factors = builder.getArrayAttr(refs);
    }
    auto op = builder.create<DimOp>(l, d->name.name, factors);
    yieldOptional(op.getSize(), d->size.get());
    return;
  }
  case Member::Param: {
    auto *p = cast<ParamMember>(mem);
    ParallelStyleAttr st;
    if (p->style)
      st = style(*p->style);
    auto op = builder.create<ParamOp>(l, p->name.name, shape(p->shape),
                                      expertAttr(p->expertDim),
                                      dtypeAttr(p->dtype), st);
    yieldOptional(op.getCond(), p->cond.get());
    return;
  }
  case Member::Linear: {
    auto *x = cast<LinearMember>(mem);
    auto op = builder.create<LinearOp>(
        l, x->name.name, shape(x->in), shape(x->out), style(x->style),
        expertAttr(x->expertDim), dtypeAttr(x->dtype), x->hasBias, x->mxfp4);
    yieldOptional(op.getBiasCond(), x->biasCond.get());
    yieldOptional(op.getScaleBlock(), x->scaleBlock.get());
    yieldOptional(op.getMxfp4Cond(), x->mxfp4Cond.get());
    yieldOptional(op.getCond(), x->cond.get());
    return;
  }
  case Member::Instance: {
    auto *x = cast<InstanceMember>(mem);
    auto op = builder.create<InstanceOp>(l, x->name.name);
    cases(op.getCases(), x->expr, /*inStack=*/false, "");
    yieldOptional(op.getCond(), x->cond.get());
    return;
  }
  case Member::Stack: {
    auto *x = cast<StackMember>(mem);
    auto op = builder.create<StackOp>(l, x->name.name);
    yieldRegion(op.getCount(), {x->count.get()});
    cases(op.getCases(), x->expr, /*inStack=*/true, x->indexVar.name);
    return;
  }
  case Member::Pipeline: {
    auto *x = cast<PipelineMember>(mem);
    auto refs = [&](const std::vector<Ident> &names) {
      llvm::SmallVector<mlir::Attribute> out;
      for (const Ident &n : names)
        out.push_back(mlir::FlatSymbolRefAttr::get(&ctx, n.name));
      return builder.getArrayAttr(out);
    };
    mlir::FlatSymbolRefAttr stages;
    if (x->staged)
      stages = mlir::FlatSymbolRefAttr::get(&ctx, x->staged->name);
    mlir::DictionaryAttr fallbacks;
    if (!x->lastFallbacks.empty()) {
      llvm::SmallVector<mlir::NamedAttribute> entries;
      for (auto &[wanted, fallback] : x->lastFallbacks)
        entries.push_back(builder.getNamedAttr(
            wanted.name, mlir::FlatSymbolRefAttr::get(&ctx, fallback.name)));
      fallbacks = builder.getDictionaryAttr(entries);
    }
    builder.create<PipelineOp>(l, refs(x->first), refs(x->last), stages,
                               fallbacks);
    return;
  }
  case Member::Deploy:
    deploy(cast<DeployMember>(mem));
    return;
  case Member::Needs: {
    auto *x = cast<NeedsMember>(mem);
    mlir::StringAttr fallback;
    if (x->fallback)
      fallback = builder.getStringAttr(*x->fallback);
    builder.create<NeedsOp>(l, x->capability.name, fallback);
    return;
  }
  }
  (void)m;
}

/// A model that extends another is a copy of it, and of its layouts, under
/// its own name and with its own examples. Bases come first (Sema has ruled
/// out cycles and unknown bases).
void Generator::extendModels(mlir::ModuleOp top) {
  std::vector<const ModuleDecl *> pending;
  for (const auto &file : program.files)
    for (const DeclPtr &d : file->decls)
      if (auto *m = dyn_cast<ModuleDecl>(d.get()); m && m->base)
        pending.push_back(m);
  while (!pending.empty()) {
    size_t before = pending.size();
    llvm::erase_if(pending, [&](const ModuleDecl *m) {
      auto base = mlir::SymbolTable::lookupNearestSymbolFrom<ModuleDeclOp>(
          top, builder.getStringAttr(m->base->name));
      if (!base || llvm::any_of(pending, [&](const ModuleDecl *p) {
            return p != m && p->name.name == m->base->name;
          }))
        return false;
      builder.setInsertionPointAfter(base);
      auto copy = cast<ModuleDeclOp>(builder.clone(*base));
      copy.setSymName(m->name.name);
      copy->setLoc(loc(m->name.loc()));
      copy.setExamplesAttr(examplesOf(m));
      // Its own deployments replace the base's.
      if (llvm::any_of(m->members, [](const MemberPtr &mem) {
            return llvm::isa<DeployMember>(mem.get());
          })) {
        for (auto d : llvm::make_early_inc_range(
                 copy.getBodyBlock().getOps<DeployOp>()))
          d.erase();
        mlir::OpBuilder::InsertionGuard guard(builder);
        builder.setInsertionPointToEnd(&copy.getBodyBlock());
        for (const MemberPtr &mem : m->members)
          if (auto *d = llvm::dyn_cast<DeployMember>(mem.get()))
            deploy(d);
      }
      // What a model serves is its own: a derived model serves other
      // configs than its base.
      copy.setArchitecturesAttr(servedBy(m, "architectures"));
      copy.setModelTypesAttr(servedBy(m, "model_type"));
      for (auto l : llvm::make_early_inc_range(top.getOps<LayoutOp>()))
        if (l.getModule() == m->base->name) {
          builder.setInsertionPointAfter(l);
          cast<LayoutOp>(builder.clone(*l)).setModule(m->name.name);
        }
      return true;
    });
    if (pending.size() == before)
      break;
  }
}

void Generator::deploy(const DeployMember *d) {
  llvm::SmallVector<mlir::NamedAttribute> axes;
  for (const DeployMember::Axis &a : d->axes)
    axes.push_back(builder.getNamedAttr(
        a.name.name, builder.getDenseI64ArrayAttr(a.values)));
  builder.create<DeployOp>(loc(d->getLoc()), d->backend.name,
                           builder.getDictionaryAttr(axes));
}

mlir::ArrayAttr Generator::examplesOf(const ModuleDecl *m) {
  llvm::SmallVector<mlir::Attribute> examples;
  for (const MemberPtr &mem : m->members)
    if (auto *ex = dyn_cast<ExampleMember>(mem.get()))
      for (auto &p : ex->paths)
        examples.push_back(builder.getStringAttr(p.first));
  return examples.empty() ? mlir::ArrayAttr() : builder.getArrayAttr(examples);
}

mlir::ArrayAttr Generator::servedBy(const ModuleDecl *m, llvm::StringRef key) {
  llvm::SmallVector<mlir::Attribute> values;
  for (const MemberPtr &mem : m->members)
    if (auto *s = dyn_cast<ServesMember>(mem.get()); s && s->key.name == key)
      for (auto &v : s->values)
        values.push_back(builder.getStringAttr(v.first));
  return values.empty() ? mlir::ArrayAttr() : builder.getArrayAttr(values);
}

void Generator::module(const ModuleDecl *m) {
  if (m->base)
    return; // made by extendModels
  auto op = builder.create<ModuleDeclOp>(loc(m->name.loc()), m->name.name,
                                         m->isModel, examplesOf(m),
                                         servedBy(m, "architectures"),
                                         servedBy(m, "model_type"));
  mlir::OpBuilder::InsertionGuard guard(builder);
  builder.createBlock(&op.getBody());
  for (const ModuleParam &p : m->params) {
    auto in = builder.create<InputOp>(loc(p.range.Start), p.name.name,
                                      type(p.type), p.type.kind == Type::Dim);
    yieldOptional(in.getDefaultValue(), p.defaultValue.get());
  }
  for (const MemberPtr &mem : m->members)
    member(m, mem.get());
}

//===----------------------------------------------------------------------===//
// Layouts and backends
//===----------------------------------------------------------------------===//

mlir::ArrayAttr
Generator::nameTemplate(const NameTemplate &t,
                        llvm::SmallVectorImpl<const Expr *> &args) {
  llvm::SmallVector<mlir::Attribute> segments;
  for (const auto &seg : t.segments) {
    if (!seg.expr)
      segments.push_back(builder.getStringAttr(seg.text));
    else if (seg.family)
      segments.push_back(mlir::FlatSymbolRefAttr::get(
          &ctx, cast<NameRefExpr>(seg.expr.get())->name));
    else {
      segments.push_back(builder.getI64IntegerAttr(args.size()));
      args.push_back(seg.expr.get());
    }
  }
  return builder.getArrayAttr(segments);
}

mlir::ArrayAttr Generator::recomputeAttr(bool has,
                                         const std::vector<Ident> &events) {
  if (!has)
    return {};
  llvm::SmallVector<llvm::StringRef> names;
  for (const Ident &i : events)
    names.push_back(i.name);
  return builder.getStrArrayAttr(names);
}

mlir::ArrayAttr Generator::termList(const AxisProduct &p) {
  llvm::SmallVector<mlir::Attribute> terms;
  for (const AxisTerm &t : p)
    terms.push_back(term(t));
  return builder.getArrayAttr(terms);
}

TermAttr Generator::term(const AxisTerm &t) {
  switch (t.kind) {
  case AxisTerm::Dim:
    return TermAttr::getDim(&ctx, t.dim.name);
  case AxisTerm::Unit:
    return TermAttr::getUnit(&ctx);
  case AxisTerm::Product:
    return TermAttr::getProduct(&ctx, termList(t.product).getValue());
  case AxisTerm::Parts: {
    llvm::SmallVector<mlir::Attribute> parts;
    for (const LayoutPart &p : t.parts)
      parts.push_back(
          TermAttr::getPart(&ctx, p.param.str(), termList(p.shape).getValue()));
    return TermAttr::getParts(&ctx, parts);
  }
  }
  llvm_unreachable("unknown term kind");
}

void Generator::layout(const LayoutDecl *d) {
  mlir::StringAttr mount;
  if (d->mount)
    mount = builder.getStringAttr(d->mount->spelling);
  auto op = builder.create<LayoutOp>(loc(d->getLoc()), d->backend.name,
                                     d->module.name, mount);
  mlir::OpBuilder::InsertionGuard guard(builder);
  builder.createBlock(&op.getBody());
  layoutLets.clear();
  for (const LayoutEntryPtr &entry : d->entries) {
    mlir::Location l = loc(entry->getLoc());
    if (auto *t = dyn_cast<TensorEntry>(entry.get())) {
      llvm::SmallVector<const Expr *> args;
      mlir::ArrayAttr name = nameTemplate(t->name, args);
      llvm::SmallVector<mlir::Attribute> axes;
      for (const AxisProduct &axis : t->tensor.axes)
        axes.push_back(TermAttr::getProduct(&ctx, termList(axis).getValue()));
      mlir::StringAttr param;
      if (t->tensor.param)
        param = builder.getStringAttr(t->tensor.param->str());
      auto layoutAttr = LayoutAttr::get(&ctx, param, builder.getArrayAttr(axes));
      bool copy = false, zero = false, negExp = false;
      const Expr *copyIf = nullptr;
      mlir::IntegerAttr offset, split;
      ElementTypeAttr stored;
      MeshAxisKindAttr splitBy;
      StageKindAttr on;
      const TensorOption *view = nullptr;
      for (const TensorOption &o : t->options) {
        switch (o.kind) {
        case TensorOption::Copy:
          if (o.value)
            copyIf = o.value.get();
          else
            copy = true;
          break;
        case TensorOption::Zero:
          zero = true;
          break;
        case TensorOption::Offset: {
          // Sema made offsets integer expressions; they must be literals.
          int64_t v = 0;
          const Expr *e = o.value.get();
          bool neg = false;
          if (auto *u = dyn_cast<UnaryExpr>(e)) {
            neg = u->op == UnaryOp::Neg;
            e = u->operand.get();
          }
          if (auto *i = dyn_cast<IntLitExpr>(e))
            v = neg ? -i->value : i->value;
          offset = builder.getI64IntegerAttr(v);
          break;
        }
        case TensorOption::NegExp:
          negExp = true;
          break;
        case TensorOption::DType:
          stored = dtype(o.name.name);
          break;
        case TensorOption::View:
          view = &o;
          break;
        case TensorOption::Split:
          split = builder.getI64IntegerAttr(o.axis);
          if (!o.name.name.empty())
            splitBy = MeshAxisKindAttr::get(
                &ctx, *symbolizeMeshAxisKind(o.name.name));
          break;
        case TensorOption::On:
          on = StageKindAttr::get(&ctx, *symbolizeStageKind(o.name.name));
          break;
        }
      }
      mlir::FlatSymbolRefAttr forStack;
      llvm::SmallVector<std::pair<std::string, mlir::Type>> blockArgs;
      if (t->forStack) {
        forStack = mlir::FlatSymbolRefAttr::get(&ctx, t->forStack->name);
        blockArgs.push_back({t->forVar->name, i64()});
      }
      auto op = builder.create<TensorOp>(
          l, name, layoutAttr, forStack, copy, zero, offset, negExp, stored,
          split, splitBy, on, /*reads_context=*/false,
          /*view_axes=*/mlir::ArrayAttr(), t->derived,
          recomputeAttr(t->hasRecompute, t->recompute));
      if (!args.empty())
        yieldRegion(op.getNameArgs(), args, blockArgs);
      if (view) {
        llvm::SmallVector<const Expr *> sizes;
        for (const ExprPtr &s : view->shape)
          sizes.push_back(s.get());
        yieldRegion(op.getView(), sizes);
      }
      yieldOptional(op.getCopyIf(), copyIf, blockArgs);
      yieldOptional(op.getWhen(), t->when.get(), blockArgs);
    } else if (auto *m = dyn_cast<MountEntry>(entry.get())) {
      llvm::SmallVector<const Expr *> args;
      mlir::ArrayAttr path = nameTemplate(m->path, args);
      auto op = builder.create<MountOp>(l, m->member.name, path);
      llvm::SmallVector<std::pair<std::string, mlir::Type>> blockArgs;
      if (m->indexVar)
        blockArgs.push_back({m->indexVar->name, i64()});
      if (!args.empty() || m->indexVar)
        yieldRegion(op.getPathArgs(), args, blockArgs);
      yieldOptional(op.getWhen(), m->when.get());
    } else if (auto *s = dyn_cast<ShardEntry>(entry.get())) {
      llvm::SmallVector<llvm::StringRef> params;
      std::vector<std::string> storage;
      for (const QualifiedName &q : s->params)
        storage.push_back(q.str());
      for (const std::string &p : storage)
        params.push_back(p);
      auto op = builder.create<ShardOp>(
          l, builder.getStrArrayAttr(params), s->dim.name,
          *symbolizeMeshAxisKind(s->axis ? s->axis->name : "tp"), s->replicate);
      yieldOptional(op.getWhen(), s->when.get());
    } else if (auto *dv = dyn_cast<DerivedEntry>(entry.get())) {
      std::vector<std::string> sources;
      for (const QualifiedName &q : dv->sources)
        sources.push_back(q.str());
      llvm::SmallVector<llvm::StringRef> srcRefs(sources.begin(), sources.end());
      auto op = builder.create<DerivedOp>(
          l, dv->name, builder.getStrArrayAttr(srcRefs),
          recomputeAttr(dv->hasRecompute, dv->recompute));
      yieldOptional(op.getWhen(), dv->when.get());
    } else if (auto *bf = dyn_cast<BufferEntry>(entry.get())) {
      auto op = builder.create<BufferOp>(l, bf->name);
      yieldOptional(op.getWhen(), bf->when.get());
    } else if (auto *ch = dyn_cast<ChoiceDefaultEntry>(entry.get())) {
      auto op = builder.create<ChoiceDefaultOp>(l, ch->name.name);
      yieldRegion(op.getValue(), {ch->value.get()});
    } else {
      auto *let = cast<LayoutLetEntry>(entry.get());
      auto op = builder.create<LetOp>(l, let->let->name.name,
                                      type(let->let->value->type));
      yieldRegion(op.getValue(), {let->let->value.get()});
      layoutLets.insert(let->let->name.name);
    }
  }
}

void Generator::backend(const BackendDecl *b) {
  llvm::SmallVector<llvm::StringRef> mesh;
  for (const BackendEntry &e : b->entries)
    if (e.kind == BackendEntry::Mesh)
      for (const Ident &n : e.names)
        mesh.push_back(n.name);
  mlir::FlatSymbolRefAttr base;
  if (b->base)
    base = mlir::FlatSymbolRefAttr::get(&ctx, b->base->name);
  auto op = builder.create<BackendOp>(loc(b->name.loc()), b->name.name, base,
                                      builder.getStrArrayAttr(mesh));
  mlir::OpBuilder::InsertionGuard guard(builder);
  builder.createBlock(&op.getBody());
  for (const BackendEntry &e : b->entries) {
    mlir::Location l = loc(e.range.Start);
    switch (e.kind) {
    case BackendEntry::Mesh:
      break;
    case BackendEntry::Class: {
      llvm::SmallVector<mlir::NamedAttribute> props;
      for (const auto &[key, value] : e.properties) {
        mlir::Attribute v;
        if (auto *s = dyn_cast<StringLitExpr>(value.get()))
          v = builder.getStringAttr(s->value);
        else if (auto *bl = dyn_cast<BoolLitExpr>(value.get()))
          v = builder.getBoolAttr(bl->value);
        else
          continue;
        props.push_back(builder.getNamedAttr(key.name, v));
      }
      builder.create<ClassOp>(l, e.name.name, e.className,
                              builder.getDictionaryAttr(props));
      break;
    }
    case BackendEntry::Choice: {
      llvm::SmallVector<llvm::StringRef> options;
      for (auto &o : e.options)
        options.push_back(o.first);
      builder.create<ChoiceOp>(l, e.name.name, builder.getStrArrayAttr(options));
      break;
    }
    case BackendEntry::Capability: {
      auto op = builder.create<CapabilityOp>(l, e.name.name);
      yieldRegion(op.getValue(), {e.value.get()});
      break;
    }
    case BackendEntry::Let: {
      auto op = builder.create<LetOp>(l, e.let->name.name,
                                      type(e.let->value->type));
      yieldRegion(op.getValue(), {e.let->value.get()});
      break;
    }
    case BackendEntry::Require: {
      auto op = builder.create<RequireOp>(l, e.require->message);
      yieldRegion(op.getCond(), {e.require->cond.get()});
      break;
    }
    }
  }
}

mlir::OwningOpRef<mlir::ModuleOp> Generator::run() {
  mlir::OwningOpRef<mlir::ModuleOp> top =
      mlir::ModuleOp::create(builder.getUnknownLoc());
  builder.setInsertionPointToEnd(top->getBody());
  for (const auto &file : program.files)
    for (const DeclPtr &d : file->decls) {
      if (auto *m = dyn_cast<ModuleDecl>(d.get()))
        module(m);
      else if (auto *b = dyn_cast<BackendDecl>(d.get()))
        backend(b);
    }
  for (const auto &file : program.files)
    for (const DeclPtr &d : file->decls)
      if (auto *l = dyn_cast<LayoutDecl>(d.get()))
        layout(l);
  extendModels(*top);
  if (mlir::failed(mlir::verify(*top)))
    return nullptr;
  return top;
}

} // namespace

mlir::OwningOpRef<mlir::ModuleOp> mdl::mlirGen(const Program &program,
                                               llvm::SourceMgr &sourceMgr,
                                               mlir::MLIRContext &context) {
  context.getOrLoadDialect<MDLDialect>();
  return Generator(program, sourceMgr, context).run();
}
