//===- Generated.cpp - What generated code offers its users ---------------===//

#include "mdl/Runtime/Model/Generated.h"

#include <algorithm>
#include <set>

using namespace mdl;
using namespace mdl::rt;

//===----------------------------------------------------------------------===//
// Registry
//===----------------------------------------------------------------------===//

static std::vector<const Generated *> &registryStorage() {
  static std::vector<const Generated *> units;
  return units;
}

Registration::Registration(const Generated &g) {
  registryStorage().push_back(&g);
}

const std::vector<const Generated *> &mdl::rt::registry() {
  return registryStorage();
}

const Generated *mdl::rt::findGenerated(const std::string &model,
                                        const std::string &backend) {
  auto norm = [](std::string s) {
    std::replace(s.begin(), s.end(), '-', '_');
    return s;
  };
  for (const Generated *g : registry())
    if (g->model.name == norm(model) && g->backend.name == norm(backend))
      return g;
  return nullptr;
}

const ModelDecl *mdl::rt::servingModel(const HFConfig &config,
                                       std::string &error) {
  std::string modelType;
  std::vector<std::string> architectures;
  if (const json::Value *t = config.lookup("model_type");
      t && t->kind() == json::Value::String)
    modelType = t->asString();
  if (const json::Value *a = config.lookup("architectures");
      a && a->kind() == json::Value::Array)
    for (const json::Value &e : a->elements())
      if (e.kind() == json::Value::String)
        architectures.push_back(e.asString());
  auto has = [](const std::vector<std::string> &list, const std::string &s) {
    return std::find(list.begin(), list.end(), s) != list.end();
  };
  std::vector<const ModelDecl *> byType, byArch, both;
  std::set<std::string> seen;
  std::string supported;
  for (const Generated *g : registry()) {
    const ModelDecl &m = g->model;
    if (!seen.insert(m.name).second)
      continue;
    bool type = !modelType.empty() && has(m.modelTypes, modelType);
    bool arch = std::any_of(architectures.begin(), architectures.end(),
                            [&](const std::string &a) {
                              return has(m.architectures, a);
                            });
    if (type)
      byType.push_back(&m);
    if (arch)
      byArch.push_back(&m);
    if (type && arch)
      both.push_back(&m);
    std::string serves;
    for (const std::string &s : m.modelTypes)
      serves += (serves.empty() ? "" : ", ") + s;
    for (const std::string &s : m.architectures)
      serves += (serves.empty() ? "" : ", ") + s;
    supported += "\n  " + m.name + ": " + (serves.empty() ? "-" : serves);
  }
  for (const std::vector<const ModelDecl *> *c : {&both, &byType, &byArch})
    if (c->size() == 1)
      return c->front();
  std::string found = "model_type " +
                      (modelType.empty() ? "(none)" : "'" + modelType + "'") +
                      ", architectures";
  if (architectures.empty())
    found += " (none)";
  for (const std::string &a : architectures)
    found += " '" + a + "'";
  std::string candidates;
  for (const ModelDecl *m : both.empty() ? byType.size() > 1 ? byType : byArch
                                         : both)
    candidates += (candidates.empty() ? "" : ", ") + m->name;
  error = config.path() + " (" + found + ") " +
          (candidates.empty() ? "is served by no compiled-in spec"
                              : "is served by several specs: " + candidates) +
          "; give --model. The specs serve:" + supported;
  return nullptr;
}

//===----------------------------------------------------------------------===//
// Binding
//===----------------------------------------------------------------------===//

std::unique_ptr<Binding> Binding::load(const ModelDecl &model,
                                       const BackendDecl &backend,
                                       const std::string &configPath,
                                       const LoadOptions &options,
                                       std::string &error) {
  std::optional<HFConfig> config = HFConfig::load(configPath, error);
  if (!config)
    return nullptr;
  for (const auto &[key, value] : options.overrides)
    config->addOverride(key, value);
  std::shared_ptr<Model> instance = Model::create(model, *config, error);
  if (!instance)
    return nullptr;
  return bind(std::move(instance), backend, options.choices, error);
}

std::unique_ptr<Binding>
Binding::bind(std::shared_ptr<Model> model, const BackendDecl &backend,
              const std::map<std::string, std::string> &choices,
              std::string &error) {
  std::optional<BoundLayout> bound = bindModel(*model, backend, choices, error);
  if (!bound)
    return nullptr;
  auto b = std::unique_ptr<Binding>(new Binding());
  b->instance = std::move(model);
  b->backendDecl = &backend;
  b->bound = std::move(*bound);
  return b;
}

std::unique_ptr<Binding> Binding::derivedView(std::string &error) const {
  std::optional<BoundLayout> view =
      bindModel(*instance, *backendDecl, bound.layout.choices, error,
                /*derivedView=*/true);
  if (!view)
    return nullptr;
  auto b = std::unique_ptr<Binding>(new Binding());
  b->instance = instance;
  b->backendDecl = backendDecl;
  b->bound = std::move(*view);
  return b;
}

std::vector<std::string> Binding::validate(const ParallelConfig &config) const {
  return Planner(bound.layout, config).invalidReasons();
}

/// A backend setting for a rank, or nothing when it fails to evaluate.
static std::optional<Value> setting(const Binding &b, const Expr &fn,
                                    const ParallelConfig &config,
                                    int64_t rank) {
  RankContext ctx = rankContexts(config, rank).front();
  Eval e(b.model()->root(), &ctx, &b.layout().choices);
  try {
    return e.present(fn(e));
  } catch (EvalError &) {
    return std::nullopt;
  }
}

std::string Binding::rankDir(const ParallelConfig &config,
                             int64_t rank) const {
  std::optional<Value> v;
  if (backendDecl->rankDir)
    v = setting(*this, backendDecl->rankDir, config, rank);
  else {
    RankContext ctx = rankContexts(config, rank).front();
    std::string tp = std::to_string(ctx.tpRank);
    return "rank_" + std::string(tp.size() < 2 ? 2 - tp.size() : 0, '0') + tp;
  }
  return v ? v->s : "rank_" + std::to_string(rank);
}

std::string Binding::rankFile(const ParallelConfig &config,
                              int64_t rank) const {
  std::optional<Value> v;
  if (backendDecl->rankFile)
    v = setting(*this, backendDecl->rankFile, config, rank);
  return v ? v->s : "model.safetensors";
}

std::string Binding::trackerFile() const {
  std::optional<Value> v;
  if (backendDecl->trackerFile)
    v = setting(*this, backendDecl->trackerFile, ParallelConfig(), 0);
  return v ? v->s : "";
}

bool Binding::rankSaved(const ParallelConfig &config, int64_t rank) const {
  std::optional<Value> v;
  if (backendDecl->rankSaved)
    v = setting(*this, backendDecl->rankSaved, config, rank);
  return !v || v->i != 0;
}

std::string Binding::adapterBackend() const {
  std::optional<Value> v;
  if (backendDecl->adapterBackend)
    v = setting(*this, backendDecl->adapterBackend, ParallelConfig(), 0);
  return v ? v->s : backendDecl->name;
}

void mdl::rt::selectLoraModules(const std::vector<ChoiceDecl> &backendChoices,
                                std::map<std::string, std::string> &choices) {
  for (const ChoiceDecl &c : backendChoices)
    if (c.name == "lora" &&
        std::find(c.options.begin(), c.options.end(), "on") != c.options.end())
      choices.try_emplace(c.name, "on");
}
