//===- SemaModule.cpp - Checking modules and models -----------------------===//
//
// Checks the members of modules and models: shapes that name dimensions,
// instantiations against their callees, and cycles among definitions.
//
//===----------------------------------------------------------------------===//

#include "SemaInternal.h"
#include "mdl/Runtime/Base/DType.h"
#include "mdl/Runtime/Base/Parallel.h"
#include "mdl/Runtime/Base/Value.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/SourceMgr.h"

using namespace mdl;
using namespace mdl::ast;
using namespace mdl::sema;
using llvm::cast;
using llvm::dyn_cast;
using llvm::isa;
using llvm::dyn_cast_or_null;

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
    if (l->mxfp4Cond)
      expect(l->mxfp4Cond.get(), env, boolT, "an mxfp4 condition");
    if (l->mxfp4 && l->scaleBlock)
      error(l->mxfp4Range.Start)
          << "'" << l->name.name
          << "' cannot be both FP8 block-scaled (scale) and MXFP4";
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
