//===- RankRecord.cpp - What a rank file says it holds --------------------===//

#include "mdl/Runtime/Convert/RankRecord.h"

using namespace mdl::rt;

namespace {
constexpr const char *kModel = "mdl.model";
constexpr const char *kBackend = "mdl.backend";
constexpr const char *kConfiguration = "mdl.configuration";
constexpr const char *kRank = "mdl.rank";
} // namespace

std::string RankIdentity::str() const {
  return "rank " + std::to_string(rank) + " of " + model + " on " + backend +
         ", " + config.str();
}

std::map<std::string, std::string> mdl::rt::rankRecord(const RankIdentity &id) {
  return {{kModel, id.model},
          {kBackend, id.backend},
          {kConfiguration, id.config.str()},
          {kRank, std::to_string(id.rank)}};
}

std::optional<std::string>
mdl::rt::checkRankRecord(const std::map<std::string, std::string> &found,
                         const RankIdentity &expected,
                         const std::string &path) {
  std::map<std::string, std::string> want = rankRecord(expected);
  bool any = false, same = true;
  for (const auto &[key, value] : want) {
    auto it = found.find(key);
    any |= it != found.end();
    same &= it != found.end() && it->second == value;
  }
  if (!any || same)
    return std::nullopt;
  auto get = [&](const char *key) {
    auto it = found.find(key);
    return it == found.end() ? std::string("?") : it->second;
  };
  return path + " holds rank " + get(kRank) + " of " + get(kModel) + " on " +
         get(kBackend) + ", " + get(kConfiguration) + ", but is read as " +
         expected.str() + " (rank directories swapped or mixed up?)";
}
