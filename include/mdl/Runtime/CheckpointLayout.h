//===- CheckpointLayout.h - Where a backend's rank files are ---*- C++ -*-===//
//
// Plain C++17. A backend checkpoint is one file per rank, in a directory per
// rank, as the backend profile says (`rank_dir`, `rank_file`, `rank_saved`,
// `tracker_file`). With a tracker file (Megatron's
// latest_checkpointed_iteration.txt) the rank directories are in
// `release/` or `iter_NNNNNNN/` (seven digits) beside it, and the tracker
// holds `release` or the iteration. A rank file ending in `.pt` is a torch
// checkpoint (TorchCheckpoint.h), anything else safetensors.
//
// A checkpoint read back may come without a description of its parallel
// configuration (one a training run wrote): the configuration is then the
// one whose saved ranks' directories are exactly those found and whose
// tensors, in the first rank's file, are those the plan gives.
//
//===----------------------------------------------------------------------===//

#ifndef MDL_RUNTIME_CHECKPOINTLAYOUT_H
#define MDL_RUNTIME_CHECKPOINTLAYOUT_H

#include "mdl/Runtime/Checkpoint.h"
#include "mdl/Runtime/Generated.h"
#include "mdl/Runtime/TensorFileWriter.h"

#include <map>
#include <memory>
#include <optional>
#include <functional>
#include <string>

namespace mdl::rt {

/// Where a backend checkpoint written to `out` puts its rank directories
/// and files.
struct OutputLayout {
  /// The directory holding the rank directories (`out`, or
  /// `out/release`, `out/iter_0000100`).
  std::string rankRoot;
  /// The file in each rank directory when it is not the backend's
  /// (`model.safetensors` for `--format safetensors`), or "".
  std::string rankFile;
  /// The tracker file to write (its path), or "", and what it holds.
  std::string tracker, trackerText;
  /// The iteration the rank files record (0 for a release).
  int64_t iteration = 0;
};
/// With `safetensors`, rank files are model.safetensors at the top of
/// `out`, with no tracker; otherwise as the backend profile says.
/// `iteration` < 0 asks for a release.
OutputLayout outputLayout(const Binding &to, const std::string &out,
                          bool safetensors, int64_t iteration);

/// The writer of the rank file `path` of `layout` for `config`: a
/// TorchCheckpointWriter for `.pt` files (state dict `model`, or `model0`,
/// `model1`, ... with vpp > 1, `checkpoint_version` and `iteration`, as
/// Megatron saves them), else a SafetensorsWriter.
std::unique_ptr<TensorFileWriter> makeRankWriter(const std::string &path,
                                                 const OutputLayout &layout,
                                                 const ParallelConfig &config);

/// The rank files of a backend checkpoint.
struct SourceLayout {
  std::string rankRoot;
  /// Rank directory name -> the path of its rank file.
  std::map<std::string, std::string> rankFiles;
};
/// Finds the rank files under `path`: the top of a checkpoint (with its
/// tracker file, or with the rank directories in it), an iteration
/// directory (`release/`, `iter_*`), or one rank's directory (then only
/// that rank's). A rank file is the profile's `rank_file` or
/// `model.safetensors`.
std::optional<SourceLayout> findRankFiles(const Binding &from,
                                          const std::string &path,
                                          std::string &error);

/// The rank directories of `config`'s saved ranks, by rank.
std::map<int64_t, std::string> savedRankDirs(const Binding &b,
                                             const ParallelConfig &config);

/// The parallel configuration of a checkpoint found without one: see the
/// file comment. `open` gives a rank file's tensors (cached by the caller).
std::optional<ParallelConfig> inferConfig(
    const Binding &from, const SourceLayout &source,
    const std::function<std::shared_ptr<Checkpoint>(const std::string &,
                                                    std::string &)> &open,
    std::string &error);

} // namespace mdl::rt

#endif // MDL_RUNTIME_CHECKPOINTLAYOUT_H
