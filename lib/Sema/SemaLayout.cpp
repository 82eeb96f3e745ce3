//===- SemaLayout.cpp - Checking layouts ----------------------------------===//
//
// Checks layouts: the tensors they name and the parameters those hold,
// mounts, shards, derived tensors and choice defaults.
//
//===----------------------------------------------------------------------===//

#include "SemaInternal.h"
#include "mdl/Runtime/Base/DType.h"
#include "mdl/Runtime/Base/Parallel.h"

#include "llvm/ADT/STLExtras.h"

using namespace mdl;
using namespace mdl::ast;
using namespace mdl::sema;
using llvm::cast;
using llvm::dyn_cast;

namespace {
constexpr const char *kRecomputeTriggers[] = {"load", "update"};
} // namespace

bool mdl::isRecomputeTrigger(llvm::StringRef name) {
  return llvm::is_contained(kRecomputeTriggers, name);
}

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

  const TensorOption *copy = nullptr, *zero = nullptr, *offset = nullptr,
                     *negExp = nullptr;
  // neg_exp is the tensor's one value transform, and a tensor of zeros has
  // none.
  auto transforms = [&](const TensorOption &o) {
    const TensorOption *other =
        o.kind == TensorOption::NegExp ? (offset ? offset : zero) : negExp;
    if (!other)
      return;
    auto word = [](const TensorOption *x) {
      return x->kind == TensorOption::Zero     ? "zero"
             : x->kind == TensorOption::Offset ? "offset"
                                               : "neg_exp";
    };
    auto diag = error(o.range.Start);
    diag << "a tensor stores one value transform: '" << word(&o) << "' and '"
         << word(other) << "' exclude each other";
    diag.attachNote(loc(other->range.Start)) << "'" << word(other) << "' is here";
  };
  for (const TensorOption &o : e.options) {
    switch (o.kind) {
    case TensorOption::Zero:
      if (copy)
        error(o.range.Start) << "a tensor of zeros is no copy: 'zero' and "
                                "'copy' exclude each other";
      transforms(o);
      zero = &o;
      break;
    case TensorOption::Copy:
      if (zero)
        error(o.range.Start) << "a tensor of zeros is no copy: 'zero' and "
                                "'copy' exclude each other";
      copy = &o;
      if (o.value)
        expect(o.value.get(), env, Type::get(Type::Bool), "a copy condition");
      break;
    case TensorOption::Offset:
      expect(o.value.get(), env, Type::get(Type::Int), "an offset");
      transforms(o);
      offset = &o;
      break;
    case TensorOption::NegExp:
      transforms(o);
      negExp = &o;
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

void Analyzer::checkRecompute(const std::vector<Ident> &triggers) {
  for (const Ident &r : triggers)
    if (!isRecomputeTrigger(r.name))
      error(r.loc()) << "unknown recompute trigger '" << r.name
                     << "' (known: load, update)";
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
      checkRecompute(t->recompute);
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
      if (s->when) {
        ExprEnv sizes;
        sizes.allowContext = true;
        sizes.sizesOnly = true;
        expect(s->when.get(), sizes, Type::get(Type::Bool),
               "a when condition");
      }
    } else if (auto *d = dyn_cast<DerivedEntry>(entry.get())) {
      for (const QualifiedName &q : d->sources) {
        std::string why;
        if (!resolveParamRef(program, scope, q, why))
          error(q.range.Start) << why;
      }
      checkRecompute(d->recompute);
      if (d->when)
        expect(d->when.get(), env, Type::get(Type::Bool), "a when condition");
    } else if (auto *b = dyn_cast<BufferEntry>(entry.get())) {
      // A buffer is named as written, under the module's mount.
      if (b->name.empty() || b->name.find_first_of("{}") != std::string::npos)
        error(b->nameRange.Start)
            << "a buffer's name is plain text, not empty and without "
               "placeholders";
      if (b->when)
        expect(b->when.get(), env, Type::get(Type::Bool), "a when condition");
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
