//===- Parallel.h - Parallel configurations and rank context ----*- C++ -*-===//
//
// Shared by the compiler and the runtime. A parallel configuration gives the
// size of each mesh axis; a rank context adds the coordinates of one rank and
// is what layout conditions (`when !first_stage`) and backend settings
// (`let vocab_multiple = 128 * tp;`) read.
//
//===----------------------------------------------------------------------===//

#ifndef MDL_RUNTIME_BASE_PARALLEL_H
#define MDL_RUNTIME_BASE_PARALLEL_H

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace mdl {

/// The enumerator of E spelled `name` in `names` (indexed by enumerator).
template <typename E, size_t N>
std::optional<E> enumOfName(const std::array<std::string_view, N> &names,
                            std::string_view name) {
  for (size_t i = 0; i < N; ++i)
    if (names[i] == name)
      return static_cast<E>(i);
  return std::nullopt;
}

/// The mesh axes a backend profile may declare.
enum class MeshAxis { TP, PP, EP, ETP, CP, DP };
constexpr std::array<std::string_view, 6> kMeshAxisNames = {
    "tp", "pp", "ep", "etp", "cp", "dp"};
std::optional<MeshAxis> parseMeshAxis(std::string_view name);
inline std::string_view meshAxisName(MeshAxis a) {
  return kMeshAxisNames[static_cast<size_t>(a)];
}

/// How tensor parallelism splits a parameter: a spec's `column(d)`,
/// `row(d)`, `vocab(d)`, `shard(d)` or `replicated`; None when it says
/// nothing. A layout that shards a linear's dimension by tp makes it
/// column- or row-parallel (by whether the dimension is an output or an
/// input one).
enum class TensorParallelStyle { None, Replicated, Column, Row, Vocab, Shard };
constexpr std::array<std::string_view, 6> kTensorParallelStyleNames = {
    "", "replicated", "column", "row", "vocab", "shard"};
inline std::string_view tensorParallelStyleName(TensorParallelStyle s) {
  return kTensorParallelStyleNames[static_cast<size_t>(s)];
}

/// The part a linear module plays under tensor parallelism, which picks the
/// backend's module class for it (`class column = "...";`).
enum class ModuleRole {
  Column,
  ColumnNorm,
  Row,
  Replicated,
  GroupedColumn,
  GroupedRow,
  Grouped,
  Embedding
};
constexpr std::array<std::string_view, 8> kModuleRoleNames = {
    "column",         "column_norm", "row",     "replicated",
    "grouped_column", "grouped_row", "grouped", "embedding"};
std::optional<ModuleRole> parseModuleRole(std::string_view name);
inline std::string_view moduleRoleName(ModuleRole r) {
  return kModuleRoleNames[static_cast<size_t>(r)];
}

/// Bounds on what a command line, a grid or a plan.json may ask for, so that
/// no configuration overflows, exhausts memory or runs for ever: the size
/// of one axis (and --vpp), the number of ranks of a configuration, and a
/// count of layers or a rank.
constexpr int64_t kMaxAxisSize = 65536;
constexpr int64_t kMaxRanks = int64_t(1) << 20;
constexpr int64_t kMaxCount = int64_t(1) << 20;

/// Parses a decimal integer in [min, max] (the whole of `text`).
std::optional<int64_t> parseBoundedInt(std::string_view text, int64_t min,
                                       int64_t max);

struct ParallelConfig {
  int64_t tp = 1, pp = 1, ep = 1, etp = 1, cp = 1, dp = 1;
  /// Virtual pipeline stages (model chunks) per pipeline rank.
  int64_t vpp = 1;
  /// Sequence parallelism (only meaningful with tp > 1).
  bool sp = false;
  /// Layers on the first and last pipeline stages when they differ from an
  /// even split (Megatron's --decoder-{first,last}-pipeline-num-layers).
  std::optional<int64_t> firstStageLayers, lastStageLayers;

  int64_t size(MeshAxis axis) const;
  std::string str() const;
  /// Why this configuration is out of bounds (an axis outside
  /// [1, kMaxAxisSize], more than kMaxRanks ranks, a stage of more than
  /// kMaxCount layers); nullopt when it is within them.
  std::optional<std::string> checkBounds() const;
};

/// A configuration's sizes by the names command lines, grids and plan.json
/// give them.
inline constexpr std::pair<std::string_view, int64_t ParallelConfig::*>
    kParallelSizes[] = {
        {"tp", &ParallelConfig::tp},  {"pp", &ParallelConfig::pp},
        {"ep", &ParallelConfig::ep},  {"etp", &ParallelConfig::etp},
        {"cp", &ParallelConfig::cp},  {"dp", &ParallelConfig::dp},
        {"vpp", &ParallelConfig::vpp}};

/// One rank's coordinates in a parallel configuration.
struct RankContext {
  ParallelConfig config;
  int64_t tpRank = 0, ppRank = 0, epRank = 0, etpRank = 0;
  /// The model chunk (virtual stage) being described, 0 <= chunk < vpp.
  int64_t chunk = 0;

  bool firstStage() const { return ppRank == 0 && chunk == 0; }
  bool lastStage() const {
    return ppRank == config.pp - 1 && chunk == config.vpp - 1;
  }
};

/// The names a layout or backend expression may read from a rank context.
enum class ContextVar {
  TP, PP, EP, ETP, CP, DP, VPP, SP,
  TPRank, PPRank, EPRank, ETPRank,
  FirstStage, LastStage,
};
std::optional<ContextVar> parseContextVar(std::string_view name);
bool isBoolContextVar(ContextVar var);
/// The value of `var` in `ctx`; booleans are 0 or 1.
int64_t contextValue(const RankContext &ctx, ContextVar var);

} // namespace mdl

#endif // MDL_RUNTIME_BASE_PARALLEL_H
