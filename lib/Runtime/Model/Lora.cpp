//===- Lora.cpp - LoRA injection tables -----------------------------------===//

#include "mdl/Runtime/Model/Lora.h"

#include <algorithm>
#include <map>
#include <set>

using namespace mdl;
using namespace mdl::rt;

namespace {

/// The module of a weight tensor: its name without the last component
/// (`.weight`, or `.weight3` for a per-expert tensor).
std::string moduleOf(const std::string &tensor) {
  size_t dot = tensor.rfind('.');
  return dot == std::string::npos ? tensor : tensor.substr(0, dot);
}

/// The last component of a name.
std::string lastComponent(const std::string &name) {
  size_t dot = name.rfind('.');
  return dot == std::string::npos ? name : name.substr(dot + 1);
}

/// Whether a tensor is a module's weight (`weight`, `weight<i>` of a
/// grouped linear, or a fused-experts module's `<part>_weight`) rather than
/// a bare parameter such as a gate vector.
bool isModuleWeight(const std::string &tensor, bool grouped) {
  std::string last = lastComponent(tensor);
  if (grouped && last.size() > 7 &&
      last.compare(last.size() - 7, 7, "_weight") == 0)
    return true;
  if (last.compare(0, 6, "weight") != 0)
    return false;
  return std::all_of(last.begin() + 6, last.end(),
                     [](char c) { return c >= '0' && c <= '9'; });
}

/// The backend's class for modules named `module` (`class "router"`), else
/// for `role`, else (for experts) its class for grouped modules.
const ModelLayout::ModuleClass *classFor(const ModelLayout &m,
                                         const std::string &module,
                                         ModuleRole role, bool grouped) {
  const ModelLayout::ModuleClass *byRole = nullptr, *anyGrouped = nullptr;
  for (const ModelLayout::ModuleClass &c : m.classes) {
    if (!c.role && c.module == module)
      return &c;
    if (c.role == role && !byRole)
      byRole = &c;
    if (c.role == ModuleRole::Grouped && !anyGrouped)
      anyGrouped = &c;
  }
  return byRole ? byRole : grouped ? anyGrouped : nullptr;
}

/// The role of a linear module from how tensor parallelism splits its
/// weight on the backend.
ModuleRole roleOf(TensorParallelStyle style, bool grouped, bool withNorm) {
  using Style = TensorParallelStyle;
  if (style == Style::Vocab)
    return ModuleRole::Embedding;
  if (grouped)
    return style == Style::Row ? ModuleRole::GroupedRow
                               : ModuleRole::GroupedColumn;
  if (style == Style::Column)
    return withNorm ? ModuleRole::ColumnNorm : ModuleRole::Column;
  return style == Style::Row ? ModuleRole::Row : ModuleRole::Replicated;
}

} // namespace

std::vector<LoraTarget> mdl::rt::loraTable(const ModelLayout &m,
                                           const ParallelConfig &config,
                                           int64_t rank, int64_t r) {
  std::vector<RankTensor> tensors = rankTensors(m, config, rank);
  auto isWeight = [&](const Piece &pc) {
    const Param &p = m.params[size_t(pc.param)];
    return p.linearOutAxes >= 0 && !p.bias;
  };
  // Modules that also hold a parameter that is no linear's: a fused norm
  // (an FP8 weight's block scales, an MXFP4 weight's blocks and scales are
  // the linear's own).
  std::set<std::string> withNorm;
  for (const RankTensor &t : tensors)
    for (const Piece &pc : t.pieces)
      if (m.params[size_t(pc.param)].linearOutAxes < 0 &&
          m.params[size_t(pc.param)].scaleOf < 0 &&
          m.params[size_t(pc.param)].mxfp4Of < 0)
        withNorm.insert(moduleOf(t.name));
  std::vector<LoraTarget> out;
  std::map<std::string, size_t> groupedTargets;
  for (const RankTensor &t : tensors) {
    if (t.copy || t.pieces.empty() ||
        !std::all_of(t.pieces.begin(), t.pieces.end(), isWeight))
      continue;
    const Param &first = m.params[size_t(t.pieces[0].param)];
    if (!isModuleWeight(t.name, !first.expert.empty()))
      continue;
    LoraTarget target;
    target.module = moduleOf(t.name);
    bool grouped = !first.expert.empty();
    // Expert parameters have the expert atom first.
    int64_t experts = grouped ? t.pieces[0].count[0] : 0;
    // Transformer Engine's grouped linears hold one tensor per expert
    // (`weight0`, `weight1`, ...): one module. The grouped modules of one
    // name (vLLM's experts) differ by their style.
    std::string groupKey = target.module + "/" + first.path;
    if (grouped) {
      auto it = groupedTargets.find(groupKey);
      if (it != groupedTargets.end()) {
        out[it->second].localExperts += experts;
        continue;
      }
    }
    target.role = roleOf(first.style, grouped, withNorm.count(target.module));
    if (const ModelLayout::ModuleClass *cls =
            classFor(m, lastComponent(target.module), target.role, grouped)) {
      auto prop = [&](const char *k, const char *dflt) {
        auto it = cls->properties.find(k);
        return it == cls->properties.end() ? std::string(dflt) : it->second;
      };
      if (prop("lora", "true") == "false")
        continue;
      target.baseClass = cls->name;
      target.sizes = prop("sizes", "global");
      target.returns = prop("returns", "out");
      target.inputIsParallel = prop("input_is_parallel", "false") == "true";
    } else {
      target.sizes = "global";
    }
    // Sizes: the sum of the parts' outputs, the shared input.
    int64_t outGlobal = 0, outLocal = 0, inGlobal = 1, inLocal = 1;
    for (size_t k = 0; k < t.pieces.size(); ++k) {
      const Piece &pc = t.pieces[k];
      const Param &p = m.params[size_t(pc.param)];
      target.params.push_back(p.path);
      size_t lead = p.expert.empty() ? 0 : 1;
      int64_t og = 1, ol = 1, ig = 1, il = 1;
      size_t atom = 0;
      for (size_t a = 0; a < p.axisAtoms.size(); ++a)
        for (int j = 0; j < p.axisAtoms[a]; ++j, ++atom) {
          if (a < lead)
            continue;
          bool isOut = a < lead + size_t(p.linearOutAxes);
          (isOut ? og : ig) *= p.sizes[atom];
          (isOut ? ol : il) *= pc.count[atom];
        }
      outGlobal += og;
      outLocal += ol;
      if (k == 0)
        inGlobal = ig, inLocal = il;
    }
    bool global = target.sizes != "local";
    target.inFeatures = global ? inGlobal : inLocal;
    target.outFeatures = global ? outGlobal : outLocal;
    target.loraA = {r, inLocal};
    target.loraB = {outLocal, r};
    target.delta = {outLocal, inLocal};
    target.sharded = outLocal < outGlobal  ? "B"
                     : inLocal < inGlobal ? "A"
                                          : "none";
    // Under sequence parallelism each rank sees part of the sequence, so a
    // factor every tensor rank holds whole needs its gradients summed.
    if (config.sp && config.tp > 1) {
      if (target.sharded != "A")
        target.allReduceGrads.push_back("A");
      if (target.sharded != "B")
        target.allReduceGrads.push_back("B");
    }
    target.localExperts = experts;
    if (grouped)
      groupedTargets[groupKey] = out.size();
    out.push_back(std::move(target));
  }
  return out;
}

std::vector<std::string> mdl::rt::allLinearTargets(const ModelLayout &m) {
  std::set<std::string> names;
  for (const LoraTarget &t : loraTable(m, ParallelConfig(), 0))
    if (t.role != ModuleRole::Embedding)
      names.insert(lastComponent(t.module));
  return {names.begin(), names.end()};
}
