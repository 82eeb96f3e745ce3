//===- Sema.cpp - Name resolution and type checking -----------------------===//
//
// Checks what can be checked without a config: names, types, arities,
// shapes that name dimensions, layouts that name parameters, and cycles
// among definitions. What depends on a config (values, divisibility,
// coverage) is checked later on the IR.
//
//===----------------------------------------------------------------------===//

#include "SemaInternal.h"

#include "mlir/IR/MLIRContext.h"
#include "llvm/ADT/STLExtras.h"

using namespace mdl;
using namespace mdl::ast;
using namespace mdl::sema;
using llvm::cast;
using llvm::dyn_cast;

//===----------------------------------------------------------------------===//
// Queries on an analyzed program
//===----------------------------------------------------------------------===//

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
// Declarations and the driver
//===----------------------------------------------------------------------===//

namespace {

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

} // namespace

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
    auto declare = [&](ModuleSymbol::Kind kind, const Ident &name,
                       Type type = Type()) {
      add(name, {kind, x, nullptr, std::move(type), x->getRange()});
    };
    if (auto *c = dyn_cast<ConfigMember>(x))
      declare(ModuleSymbol::Config, c->name, c->type);
    else if (auto *l = dyn_cast<LetMember>(x))
      declare(ModuleSymbol::Let, l->name,
              l->declaredType ? *l->declaredType : Type());
    else if (auto *d = dyn_cast<DimMember>(x))
      declare(ModuleSymbol::Dim, d->name, Type::get(Type::Dim));
    else if (auto *p = dyn_cast<ParamMember>(x))
      declare(ModuleSymbol::Param, p->name);
    else if (auto *l = dyn_cast<LinearMember>(x))
      declare(ModuleSymbol::Linear, l->name);
    else if (auto *i = dyn_cast<InstanceMember>(x))
      declare(ModuleSymbol::Instance, i->name);
    else if (auto *s = dyn_cast<StackMember>(x))
      declare(ModuleSymbol::Stack, s->name);
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

mlir::LogicalResult mdl::analyze(Program &program, llvm::SourceMgr &sourceMgr,
                                 mlir::MLIRContext &context) {
  return Analyzer(program, sourceMgr, context).run();
}
