//===- Options.h - mdl-convert's command line -------------------*- C++ -*-===//
//
// The options of one conversion, declared once as a table (Options.cpp)
// from which parsing and the "did you mean" answer for an unknown option
// come; the parallel configuration's options are the runtime's, shared
// with mdlc.
//
//===----------------------------------------------------------------------===//

#ifndef MDL_CONVERT_OPTIONS_H
#define MDL_CONVERT_OPTIONS_H

#include "mdl/Runtime/Convert/Adapter.h"
#include "mdl/Runtime/Base/Cli.h"
#include "mdl/Runtime/Base/DType.h"
#include "mdl/Runtime/Model/Generated.h"

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace mdl::convert {

struct Options {
  /// --model, --from, --to as the specs spell them; model is "" until
  /// found from the config.
  std::string model, fromName, toName;
  /// IN_DIR and OUT_DIR.
  std::vector<std::string> positional;
  /// The target's parallel configuration and the options that set it.
  ParallelConfig target;
  std::set<std::string> parallelGiven;
  /// --rank (-1: every rank) and --threads (0: the default).
  int64_t onlyRank = -1, threads = 0;
  std::string progressName = "auto";
  double progressInterval = 5;
  bool quiet = false, list = false, dryRun = false, adapters = false;
  /// --io: direct (the default) or buffered.
  bool directIO = true;
  /// --format safetensors.
  bool safetensorsOut = false;
  /// --format torch_dist: Megatron's distributed checkpoint.
  bool distOut = false;
  /// --overwrite: OUT_DIR may hold files already.
  bool overwrite = false;
  /// --replace-copies: a source's copy tensor that differs from what it
  /// copies is replaced by it, not refused.
  bool replaceCopies = false;
  int64_t iteration = -1;
  /// --config, "" for IN_DIR/config.json.
  std::string configGiven;
  uint64_t maxShard = 5'000'000'000;
  std::optional<DType> castTo;
  std::optional<rt::FactorNames> namesGiven;
  /// The config's overrides (--set, then a backend source's).
  rt::LoadOptions load;
  /// --choice.
  std::map<std::string, std::string> choicesGiven;
};

/// Parses mdl-convert's command line into `options`; prints the usage or
/// the version when asked.
cli::Parsed parseCommandLine(int argc, char **argv, Options &options);

} // namespace mdl::convert

#endif // MDL_CONVERT_OPTIONS_H
