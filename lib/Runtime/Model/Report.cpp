//===- Report.cpp - Plans and LoRA tables as JSON -------------------------===//

#include "mdl/Runtime/Model/Report.h"
#include "mdl/Runtime/Base/DType.h"
#include "mdl/Runtime/Model/Lora.h"

using namespace mdl;
using namespace mdl::rt;

int64_t mdl::rt::rankNumber(const RankContext &ctx,
                            const ParallelConfig &config) {
  return (ctx.ppRank * config.ep + ctx.epRank) * config.tp + ctx.tpRank;
}

std::string mdl::rt::planName(const ModelLayout &m, const LocalTensor &t) {
  std::string name;
  for (const NameSegment &s : m.tensors[size_t(t.spec)].name) {
    if (s.kind == NameSegment::Text)
      name += s.text;
    else if (s.kind == NameSegment::LayerIndex)
      name += std::to_string(t.localLayer);
    else
      for (const auto &[atom, extent] : t.families)
        if (atom == s.atom)
          name += "{" + atom + " 0.." + std::to_string(extent.count - 1) + "}";
  }
  return name;
}

static json::Value integers(const std::vector<int64_t> &v) {
  json::Value a = json::Value::array();
  for (int64_t x : v)
    a.push(json::Value::integer(x));
  return a;
}

/// A tensor of a rank's plan, with the boxes it holds ([begin, end) per
/// atom, as the text form's `lo:hi`).
static json::Value tensorJson(const ModelLayout &m, const LocalTensor &t,
                              const RankContext &ctx) {
  const TensorSpec &spec = m.tensors[size_t(t.spec)];
  json::Value jt = json::Value::object();
  jt.set("name", json::Value::string(planName(m, t)));
  jt.set("shape", integers(t.shape));
  jt.set("dtype", json::Value::string(std::string(safetensorsName(t.dtype))));
  if (ctx.config.vpp > 1)
    jt.set("chunk", json::Value::integer(ctx.chunk));
  if (spec.copy)
    jt.set("copy", json::Value::boolean(true));
  if (spec.zero)
    jt.set("zero", json::Value::boolean(true));
  if (!t.families.empty()) {
    json::Value families = json::Value::object();
    for (const auto &[atom, extent] : t.families)
      families.set(atom, integers({extent.lo, extent.lo + extent.count}));
    jt.set("families", std::move(families));
  }
  json::Value slices = json::Value::array();
  for (const Piece &p : t.pieces) {
    const Param &param = m.params[size_t(p.param)];
    json::Value box = json::Value::object(), strides = json::Value::object();
    for (size_t a = 0; a < param.atoms.size(); ++a) {
      box.set(param.atoms[a], integers({p.lo[a], p.lo[a] + p.count[a]}));
      strides.set(param.atoms[a], json::Value::integer(p.stride[a]));
    }
    json::Value js = json::Value::object();
    js.set("param", json::Value::string(param.path));
    js.set("box", std::move(box));
    js.set("offset", json::Value::integer(p.base));
    js.set("strides", std::move(strides));
    slices.push(std::move(js));
  }
  jt.set("slices", std::move(slices));
  return jt;
}

json::Value mdl::rt::planJson(const ModelLayout &m,
                              const ParallelConfig &config, int64_t rank,
                              const std::string &source) {
  Planner planner(m, config);
  json::Value ranks = json::Value::array();
  int64_t last = -1;
  json::Value *tensors = nullptr;
  for (const RankContext &ctx : planner.ranks()) {
    int64_t r = rankNumber(ctx, config);
    if (rank >= 0 && r != rank)
      continue;
    if (r != last) {
      last = r;
      json::Value jr = json::Value::object();
      jr.set("rank", json::Value::integer(r));
      jr.set("tp", json::Value::integer(ctx.tpRank));
      jr.set("pp", json::Value::integer(ctx.ppRank));
      jr.set("ep", json::Value::integer(ctx.epRank));
      jr.set("etp", json::Value::integer(ctx.etpRank));
      jr.set("tensors", json::Value::array());
      ranks.push(std::move(jr));
      tensors = ranks.elements().back().get("tensors");
    }
    for (const LocalTensor &t : planner.tensors(ctx, nullptr))
      tensors->push(tensorJson(m, t, ctx));
  }
  json::Value out = json::Value::object();
  out.set("model", json::Value::string(m.model));
  out.set("backend", json::Value::string(m.backend));
  out.set("config", json::Value::string(config.str()));
  out.set("source", json::Value::string(source));
  json::Value caps = json::Value::object();
  for (const auto &[name, has] : m.capabilities)
    caps.set(name, json::Value::boolean(has));
  out.set("capabilities", std::move(caps));
  json::Value paths = json::Value::array();
  for (const KernelPath &k : kernelPaths(m)) {
    json::Value p = json::Value::object();
    p.set("instance", json::Value::string(k.instance));
    p.set("capability", json::Value::string(k.capability));
    p.set("path", json::Value::string(k.fast       ? "fast"
                                      : k.fallback ? "fallback"
                                                   : "none"));
    if (k.fallback)
      p.set("fallback", json::Value::string(*k.fallback));
    paths.push(std::move(p));
  }
  out.set("paths", std::move(paths));
  out.set("ranks", std::move(ranks));
  return out;
}

json::Value mdl::rt::loraJson(const ModelLayout &m,
                              const ParallelConfig &config, int64_t rank,
                              int64_t r) {
  json::Value out = json::Value::object();
  out.set("model", json::Value::string(m.model));
  out.set("backend", json::Value::string(m.backend));
  out.set("config", json::Value::string(config.str()));
  out.set("rank", json::Value::integer(rank));
  out.set("r", json::Value::integer(r));
  json::Value targets = json::Value::array();
  for (const LoraTarget &t : loraTable(m, config, rank, r)) {
    json::Value j = json::Value::object();
    j.set("module", json::Value::string(t.module));
    j.set("role", json::Value::string(std::string(moduleRoleName(t.role))));
    j.set("class", json::Value::string(t.baseClass));
    j.set("sizes", json::Value::string(t.sizes));
    j.set("in_features", json::Value::integer(t.inFeatures));
    j.set("out_features", json::Value::integer(t.outFeatures));
    j.set("lora_A", integers(t.loraA));
    j.set("lora_B", integers(t.loraB));
    j.set("delta", integers(t.delta));
    j.set("sharded", json::Value::string(t.sharded));
    j.set("returns", json::Value::string(t.returns));
    j.set("input_is_parallel", json::Value::boolean(t.inputIsParallel));
    if (t.localExperts)
      j.set("local_experts", json::Value::integer(t.localExperts));
    j.set("grad_all_reduce", json::Value::strings(t.allReduceGrads));
    targets.push(std::move(j));
  }
  out.set("targets", std::move(targets));
  out.set("all_linear", json::Value::strings(allLinearTargets(m)));
  return out;
}
