//===- Parallel.cpp - Parallel configurations and rank context ------------===//

#include "mdl/Runtime/Base/Parallel.h"

using namespace mdl;

std::optional<MeshAxis> mdl::parseMeshAxis(std::string_view name) {
  return enumOfName<MeshAxis>(kMeshAxisNames, name);
}

std::optional<ModuleRole> mdl::parseModuleRole(std::string_view name) {
  return enumOfName<ModuleRole>(kModuleRoleNames, name);
}

int64_t ParallelConfig::size(MeshAxis axis) const {
  switch (axis) {
  case MeshAxis::TP: return tp;
  case MeshAxis::PP: return pp;
  case MeshAxis::EP: return ep;
  case MeshAxis::ETP: return etp;
  case MeshAxis::CP: return cp;
  case MeshAxis::DP: return dp;
  }
  return 1;
}

std::optional<int64_t> mdl::parseBoundedInt(std::string_view text,
                                            int64_t min, int64_t max) {
  if (text.empty() || text.size() > 19)
    return std::nullopt;
  int64_t v = 0;
  for (char c : text) {
    if (c < '0' || c > '9')
      return std::nullopt;
    v = v * 10 + (c - '0'); // 19 digits cannot overflow
  }
  if (v < min || v > max)
    return std::nullopt;
  return v;
}

std::optional<std::string> ParallelConfig::checkBounds() const {
  for (auto [name, size] : kParallelSizes)
    if (int64_t v = this->*size; v < 1 || v > kMaxAxisSize)
      return std::string(name) + "=" + std::to_string(v) +
             " is out of bounds (1 to " + std::to_string(kMaxAxisSize) + ")";
  // Each factor is at most 2^16: the product of three fits.
  if (tp * pp * ep > kMaxRanks)
    return "tp*pp*ep = " + std::to_string(tp * pp * ep) +
           " ranks is more than the limit of " + std::to_string(kMaxRanks);
  for (auto [name, v] : {std::pair{"first stage layers", firstStageLayers},
                         std::pair{"last stage layers", lastStageLayers}})
    if (v && (*v < 0 || *v > kMaxCount))
      return std::string(name) + " " + std::to_string(*v) +
             " is out of bounds (0 to " + std::to_string(kMaxCount) + ")";
  return std::nullopt;
}

std::string ParallelConfig::str() const {
  std::string s = "tp=" + std::to_string(tp) + " pp=" + std::to_string(pp) +
                  " ep=" + std::to_string(ep) + " etp=" + std::to_string(etp);
  if (cp != 1)
    s += " cp=" + std::to_string(cp);
  if (dp != 1)
    s += " dp=" + std::to_string(dp);
  if (vpp != 1)
    s += " vpp=" + std::to_string(vpp);
  if (sp)
    s += " sp";
  if (firstStageLayers)
    s += " first=" + std::to_string(*firstStageLayers);
  if (lastStageLayers)
    s += " last=" + std::to_string(*lastStageLayers);
  return s;
}

namespace {
struct ContextVarName {
  ContextVar var;
  std::string_view name;
  bool isBool;
};
constexpr ContextVarName kContextVarNames[] = {
    {ContextVar::TP, "tp", false},
    {ContextVar::PP, "pp", false},
    {ContextVar::EP, "ep", false},
    {ContextVar::ETP, "etp", false},
    {ContextVar::CP, "cp", false},
    {ContextVar::DP, "dp", false},
    {ContextVar::VPP, "vpp", false},
    {ContextVar::SP, "sp", true},
    {ContextVar::TPRank, "tp_rank", false},
    {ContextVar::PPRank, "pp_rank", false},
    {ContextVar::EPRank, "ep_rank", false},
    {ContextVar::ETPRank, "etp_rank", false},
    {ContextVar::FirstStage, "first_stage", true},
    {ContextVar::LastStage, "last_stage", true},
};
} // namespace

std::optional<ContextVar> mdl::parseContextVar(std::string_view name) {
  for (const ContextVarName &c : kContextVarNames)
    if (c.name == name)
      return c.var;
  return std::nullopt;
}

bool mdl::isBoolContextVar(ContextVar var) {
  for (const ContextVarName &c : kContextVarNames)
    if (c.var == var)
      return c.isBool;
  return false;
}

int64_t mdl::contextValue(const RankContext &ctx, ContextVar var) {
  const ParallelConfig &c = ctx.config;
  switch (var) {
  case ContextVar::TP: return c.tp;
  case ContextVar::PP: return c.pp;
  case ContextVar::EP: return c.ep;
  case ContextVar::ETP: return c.etp;
  case ContextVar::CP: return c.cp;
  case ContextVar::DP: return c.dp;
  case ContextVar::VPP: return c.vpp;
  case ContextVar::SP: return c.sp;
  case ContextVar::TPRank: return ctx.tpRank;
  case ContextVar::PPRank: return ctx.ppRank;
  case ContextVar::EPRank: return ctx.epRank;
  case ContextVar::ETPRank: return ctx.etpRank;
  case ContextVar::FirstStage: return ctx.firstStage();
  case ContextVar::LastStage: return ctx.lastStage();
  }
  return 0;
}
