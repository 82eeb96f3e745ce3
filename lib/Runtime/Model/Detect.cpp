//===- Detect.cpp - What a checkpoint settles that the config does not ----===//

#include "mdl/Runtime/Model/Detect.h"

#include <algorithm>

using namespace mdl;
using namespace mdl::rt;

std::optional<Settlement> mdl::rt::settle(
    const std::vector<Unknown> &unknowns,
    const std::function<std::optional<Match>(const std::vector<size_t> &)>
        &match) {
  struct Tried {
    std::vector<size_t> pick;
    std::optional<Match> m;
    size_t defaults = 0;
  };
  // Every combination, the first unknown varying slowest.
  std::vector<Tried> tried(1);
  for (const Unknown &u : unknowns) {
    std::vector<Tried> next;
    for (const Tried &t : tried)
      for (size_t o = 0; o < u.options.size(); ++o) {
        next.push_back(t);
        next.back().pick.push_back(o);
        next.back().defaults += o == u.dflt;
      }
    tried = std::move(next);
  }
  const Tried *best = nullptr;
  auto better = [](const Tried &a, const Tried &b) {
    if (a.m->present != b.m->present)
      return a.m->present > b.m->present;
    if (a.m->params != b.m->params)
      return a.m->params < b.m->params;
    return a.defaults > b.defaults;
  };
  for (Tried &t : tried) {
    t.m = match(t.pick);
    if (t.m && (!best || better(t, *best)))
      best = &t;
  }
  if (!best)
    return std::nullopt;
  Settlement s;
  s.pick = best->pick;
  s.decisive.assign(unknowns.size(), false);
  for (const Tried &t : tried) {
    if (!t.m)
      continue;
    size_t differs = 0, at = 0;
    for (size_t i = 0; i < t.pick.size(); ++i)
      if (t.pick[i] != best->pick[i])
        ++differs, at = i;
    if (differs == 1 && (t.m->present != best->m->present ||
                         t.m->params != best->m->params))
      s.decisive[at] = true;
  }
  return s;
}

std::vector<size_t> mdl::rt::pickedEntries(const std::vector<Unknown> &unknowns,
                                           const std::vector<size_t> &pick) {
  std::vector<size_t> key;
  for (size_t i = 0; i < unknowns.size(); ++i)
    if (unknowns[i].entry)
      key.push_back(pick[i]);
  return key;
}

bool mdl::rt::entriesAtDefaults(const std::vector<Unknown> &unknowns,
                                const std::vector<size_t> &pick) {
  for (size_t i = 0; i < unknowns.size(); ++i)
    if (unknowns[i].entry && pick[i] != unknowns[i].dflt)
      return false;
  return true;
}

std::map<std::string, std::string>
mdl::rt::pickedChoices(const std::vector<Unknown> &unknowns,
                       const std::vector<size_t> &pick,
                       const std::map<std::string, std::string> &fixed) {
  std::map<std::string, std::string> out = fixed;
  for (size_t i = 0; i < unknowns.size(); ++i)
    if (!unknowns[i].entry)
      out[unknowns[i].name] = unknowns[i].options[pick[i]];
  return out;
}

std::string mdl::rt::detectedNote(const std::vector<Unknown> &unknowns,
                                  const Settlement &s) {
  std::string note;
  for (size_t i = 0; i < unknowns.size(); ++i)
    if (s.decisive[i])
      note += (note.empty() ? "" : ", ") + unknowns[i].name + "=" +
              unknowns[i].options[s.pick[i]] + " (detected)";
  return note;
}

std::optional<Detection>
mdl::rt::detectCheckpoint(const ModelDecl &model, const BackendDecl &backend,
                          const HFConfig &config,
                          const std::vector<std::pair<std::string, std::string>>
                              &overrides,
                          const std::map<std::string, std::string> &fixed,
                          const std::function<bool(const std::string &)> &holds,
                          std::string &error) {
  std::shared_ptr<Model> plain = Model::create(model, config, error);
  if (!plain)
    return std::nullopt;
  std::vector<Unknown> unknowns;
  try {
    std::map<std::string, std::string> defaults =
        defaultChoices(*plain, backend);
    for (const auto &[name, options, where] : backend.choices)
      if (!fixed.count(name))
        unknowns.push_back(
            {name, options,
             size_t(std::find(options.begin(), options.end(), defaults[name]) -
                    options.begin()),
             false});
    // The model's config entries marked `detect` that the config and the
    // overrides leave open: none of the keys they read is there.
    HFConfig asked = config;
    for (const auto &[k, v] : overrides)
      asked.addOverride(k, v);
    for (const ModuleDecl::Detectable &v : model.modules.front().detectable) {
      if (v.keys.empty() ||
          std::any_of(v.keys.begin(), v.keys.end(),
                      [&](const std::string &k) {
                        const json::Value *j = asked.lookup(k);
                        return j && j->kind() != json::Value::Null;
                      }))
        continue;
      Unknown u;
      u.entry = true;
      // Overridden through its shortest key, which every root's ends in.
      u.name = *std::min_element(
          v.keys.begin(), v.keys.end(),
          [](const std::string &a, const std::string &b) {
            return a.size() < b.size();
          });
      Value dflt = plain->root().get(v.name);
      Eval e(plain->root());
      std::vector<Value> candidates = e.present(v.candidates(e)).list;
      if (std::find(candidates.begin(), candidates.end(), dflt) ==
          candidates.end())
        candidates.insert(candidates.begin(), dflt);
      for (const Value &c : candidates) {
        if (c == dflt)
          u.dflt = u.options.size();
        u.options.push_back(json::write(toJson(c)));
      }
      unknowns.push_back(std::move(u));
    }
  } catch (EvalError &e) {
    error = e.text();
    return std::nullopt;
  }

  // One instance per combination of entry values.
  std::map<std::vector<size_t>, std::shared_ptr<Model>> models;
  auto instanceFor = [&](const std::vector<size_t> &pick) {
    if (entriesAtDefaults(unknowns, pick))
      return plain;
    auto [it, fresh] = models.try_emplace(pickedEntries(unknowns, pick));
    if (fresh) {
      HFConfig c = config;
      for (size_t i = 0; i < unknowns.size(); ++i)
        if (unknowns[i].entry && pick[i] != unknowns[i].dflt)
          c.addOverride(unknowns[i].name, unknowns[i].options[pick[i]]);
      std::string ignored;
      it->second = Model::create(model, c, ignored);
    }
    return it->second;
  };
  std::optional<Settlement> s =
      settle(unknowns, [&](const std::vector<size_t> &pick)
                           -> std::optional<Match> {
        std::shared_ptr<Model> m = instanceFor(pick);
        std::string ignored;
        std::unique_ptr<Binding> b =
            m ? Binding::bind(m, backend, pickedChoices(unknowns, pick, fixed),
                              ignored)
              : nullptr;
        if (!b)
          return std::nullopt;
        Match out;
        out.params = b->layout().params.size();
        for (const TensorListing &t : listTensors(b->layout(), {}))
          out.present += holds(t.name);
        return out;
      });
  if (!s) {
    // Not even the defaults bind: say why.
    std::vector<size_t> defaults;
    for (const Unknown &u : unknowns)
      defaults.push_back(u.dflt);
    if (Binding::bind(plain, backend, pickedChoices(unknowns, defaults, fixed),
                      error))
      error = model.name + " does not bind to " + backend.name;
    return std::nullopt;
  }
  Detection d;
  d.model = instanceFor(s->pick);
  d.choices = pickedChoices(unknowns, s->pick, fixed);
  for (size_t i = 0; i < unknowns.size(); ++i)
    if (unknowns[i].entry)
      d.values.push_back({unknowns[i].name, unknowns[i].options[s->pick[i]]});
  d.note = detectedNote(unknowns, *s);
  return d;
}

std::set<std::string> mdl::rt::droppedTensors(const Binding &holds,
                                              const Binding &asked,
                                              const ParallelConfig &config,
                                              int64_t rank) {
  std::set<std::string> out;
  for (const RankTensor &t : holds.rankTensors(config, rank))
    out.insert(t.name);
  for (const RankTensor &t : asked.rankTensors(config, rank))
    out.erase(t.name);
  return out;
}

std::optional<OpenedModel> mdl::rt::openModel(
    const ModelDecl &model, const BackendDecl &backend, const HFConfig &config,
    const std::vector<std::pair<std::string, std::string>> &settled,
    const std::vector<std::pair<std::string, std::string>> &overrides,
    const std::map<std::string, std::string> &choices,
    const std::function<bool(const std::string &)> &holds,
    const std::string &configPath, std::string &error) {
  HFConfig plain = config;
  for (const auto &[k, v] : settled)
    plain.addOverride(k, v);
  OpenedModel out{{Model::create(model, plain, error), choices, settled, ""},
                  nullptr, plain};
  Detection &held = out.held;
  if (!held.model)
    return std::nullopt;
  {
    // Sizes that make the layout unlistable (tensor families too large);
    // binding errors are reported later, with the choices.
    std::string ignored;
    if (std::unique_ptr<Binding> unsharded =
            Binding::bind(held.model, backend, choices, ignored))
      for (const std::string &why : unsharded->validate(ParallelConfig())) {
        error = why;
        return std::nullopt;
      }
  }
  if (holds) {
    std::optional<Detection> d = detectCheckpoint(model, backend, plain,
                                                  overrides, choices, holds,
                                                  error);
    if (!d)
      return std::nullopt;
    held = std::move(*d);
  }
  for (const auto &[k, v] : held.values)
    out.config.addOverride(k, v);
  for (const auto &[k, v] : overrides)
    out.config.addOverride(k, v);
  out.instance = held.model;
  if (overrides.empty())
    return out;
  out.instance = Model::create(model, out.config, error);
  if (!out.instance)
    return std::nullopt;
  if (std::optional<std::string> deeper =
          deeperThan(out.instance->root(), held.model->root(), configPath)) {
    error = *deeper;
    return std::nullopt;
  }
  return out;
}
