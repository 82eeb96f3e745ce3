//===- SemaBackend.cpp - Checking backends --------------------------------===//
//
// Checks backend profiles: their bases, mesh axes, class roles and their
// properties, choices, capabilities and lets.
//
//===----------------------------------------------------------------------===//

#include "SemaInternal.h"
#include "mdl/Runtime/Base/Parallel.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"

using namespace mdl;
using namespace mdl::ast;
using namespace mdl::sema;
using llvm::dyn_cast;

std::optional<Type::Kind> mdl::classPropertyType(llvm::StringRef property) {
  if (property == "sizes" || property == "returns")
    return Type::String;
  if (property == "lora" || property == "input_is_parallel")
    return Type::Bool;
  return std::nullopt;
}

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
      if (!parseModuleRole(e.name.name) &&
          !llvm::StringRef(e.name.name).starts_with("module:"))
        error(e.name.loc())
            << "unknown class role '" << e.name.name
            << "' (known: " << llvm::join(kModuleRoleNames, ", ") << ")";
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
      // The mounts of the stacks whose elements are stacked on an axis.
      if (e.let->name.name == "stack_layers" && t.isValid() &&
          !t.compatible(Type::listOf(Type::get(Type::String))))
        error(e.let->value->getLoc())
            << "'stack_layers' must be a list<string> (the mounts of the "
               "stacks to stack), not "
            << t.str();
      // The settings of the MXFP4 storage (section 11).
      static const std::pair<const char *, Type::Kind> mxfp4Settings[] = {
          {"mxfp4_blocks_suffix", Type::String},
          {"mxfp4_scales_suffix", Type::String},
          {"mxfp4_bytes_axis", Type::Bool}};
      for (auto [name, kind] : mxfp4Settings)
        if (e.let->name.name == name && t.isValid() &&
            !t.compatible(Type::get(kind)))
          error(e.let->value->getLoc())
              << "'" << name << "' must be a " << Type::get(kind).str()
              << ", not " << t.str();
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
