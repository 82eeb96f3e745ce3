//===- CheckpointFiles.h - The files of a checkpoint directory --*- C++ -*-===//
//
// Plain C++17. Where a conversion's tensors come from and go, and what
// travels with them.
//
// An HF checkpoint is written as save_pretrained writes it: one
// `model.safetensors`, or above a maximum size numbered shards with a
// `model.safetensors.index.json`. A backend checkpoint is one file per rank
// as the backend profile says (`rank_dir`, `rank_file`, `rank_saved`,
// `tracker_file`): in a directory per rank, or (without `rank_dir`) at the
// top, where `{part}` in the rank file numbers the parts of a rank split at
// the maximum size. With a tracker file (Megatron's
// latest_checkpointed_iteration.txt) the rank directories are in `release/`
// or `iter_NNNNNNN/` (seven digits) beside it, and the tracker holds
// `release` or the iteration. A rank file ending in `.pt` is a torch
// checkpoint (TorchCheckpoint.h), anything else safetensors.
//
// A checkpoint read back may come without a description of its parallel
// configuration (one a training run wrote): the configuration is then the
// one whose saved ranks' directories are exactly those found and whose
// tensors, in the first rank's file, are those the plan gives. The files of
// a directory that are not weights (tokenizer, generation config, chat
// templates, custom code) are carried to the output.
//
//===----------------------------------------------------------------------===//

#ifndef MDL_RUNTIME_CONVERT_CHECKPOINTFILES_H
#define MDL_RUNTIME_CONVERT_CHECKPOINTFILES_H

#include "mdl/Runtime/Base/Json.h"
#include "mdl/Runtime/Checkpoint/Checkpoint.h"
#include "mdl/Runtime/Convert/Convert.h"
#include "mdl/Runtime/Convert/TensorFileWriter.h"

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace mdl::rt {

/// Bytes of a size written as HF's save_pretrained reads `max_shard_size`:
/// a number of bytes, or one followed by KB, MB or GB (powers of 1000),
/// KiB, MiB or GiB (powers of 1024), any case; a lower-case final `b`
/// after K, M or G counts bits (`5Gb` is 625000000). Nothing when malformed.
std::optional<uint64_t> parseByteSize(std::string_view text);

/// Groups consecutive items of `sizes` bytes into parts of at most `max`
/// bytes, in order, as huggingface_hub splits a state dict: an item larger
/// than `max` gets a part of its own, the others fill the current part
/// until the next would overflow it. Each part lists item indices.
std::vector<std::vector<size_t>> splitBySize(const std::vector<uint64_t> &sizes,
                                             uint64_t max);

/// How a conversion's target is stored.
struct OutputFormat {
  enum Kind {
    /// An HF checkpoint (one rank): model.safetensors, or shards and their
    /// index.
    HF,
    /// The backend's own format: its rank directories and rank files, under
    /// its tracker when it has one.
    Backend,
    /// A `model.safetensors` in each rank's directory, no tracker.
    RankSafetensors,
  };
  Kind kind = Backend;
  /// Parts and shards hold at most this many bytes (a larger tensor alone).
  uint64_t maxBytes = UINT64_MAX;
  /// The iteration a tracked checkpoint is saved as; < 0 for a release.
  int64_t iteration = -1;
};

/// The files a conversion writes for its target ranks.
struct OutputFiles {
  /// Directories to create, parents first.
  std::vector<std::string> dirs;
  std::vector<Converter::TargetFile> files;
  /// HF's model.safetensors.index.json when the checkpoint is sharded
  /// (empty path otherwise).
  std::string indexPath, indexText;
  /// The directory holding the rank directories (the output, or
  /// `out/release`, `out/iter_0000100`).
  std::string rankRoot;
  /// The tracker file to write (its path), or "", and what it holds.
  std::string tracker, trackerText;
  /// The iteration the rank files record (0 for a release).
  int64_t iteration = 0;
  /// Entries of a distributed checkpoint's common.pt args (Megatron's
  /// num_layers, hidden_size, num_attention_heads).
  std::vector<std::pair<std::string, int64_t>> commonArgs;
};

/// The files of target ranks `ranks` of `to` at `config` under `outDir`,
/// stored as `format` says.
OutputFiles planOutputFiles(const Binding &to, const ParallelConfig &config,
                            const std::vector<int64_t> &ranks,
                            const std::string &outDir,
                            const OutputFormat &format);

/// The writer of rank file `path` of `files` for `config`: a
/// DistCheckpointWriter for a distributed checkpoint's `.metadata` (each
/// tensor of rank `rank` of `to` cut into a chunk per index of its leading
/// layer and expert axes: leadingAxes()), a TorchCheckpointWriter for `.pt`
/// files (state dict `model`, or `model0`,
/// `model1`, ... with vpp > 1, `checkpoint_version` and `iteration`, as
/// Megatron saves them), else a SafetensorsWriter.
std::unique_ptr<TensorFileWriter>
makeRankWriter(const std::string &path, const OutputFiles &files,
               const ParallelConfig &config, const Binding *to = nullptr,
               int64_t rank = 0);

/// How many leading axes of tensor `t` index layers or experts: axes no
/// box of the tensor runs along, or only an expert dimension runs along
/// (never the last axis). A distributed checkpoint stores a chunk per index
/// of them.
size_t leadingAxes(const ModelLayout &m, const RankTensor &t);

/// The rank files of a backend checkpoint.
struct SourceFiles {
  /// The directory holding the rank directories, or the rank files of a
  /// backend whose ranks are files at the top.
  std::string rankRoot;
  /// Rank directory name -> the path of its rank file (empty for ranks at
  /// the top).
  std::map<std::string, std::string> rankFiles;

  /// The files of rank `rank` of `config`: its directory's rank file, or
  /// every part of its rank file at the top, in part order; nothing, with
  /// `error` set, when there are none.
  std::optional<std::vector<std::string>>
  filesOf(const Binding &from, const ParallelConfig &config, int64_t rank,
          std::string &error) const;
};
/// Finds the rank files under `path`: the top of a checkpoint (with its
/// tracker file, or with the rank directories in it), an iteration
/// directory (`release/`, `iter_*`), or one rank's directory (then only
/// that rank's). A rank file is the profile's `rank_file` or
/// `model.safetensors`. For a backend without rank directories, `path`
/// itself holds the ranks' files.
std::optional<SourceFiles> findRankFiles(const Binding &from,
                                         const std::string &path,
                                         std::string &error);

/// The rank directories of `config`'s saved ranks, by rank.
std::map<int64_t, std::string> savedRankDirs(const Binding &b,
                                             const ParallelConfig &config);

/// The parallel configuration of a checkpoint found without one: see the
/// file comment. `open` gives a rank file's tensors (cached by the caller).
std::optional<ParallelConfig> inferConfig(
    const Binding &from, const SourceFiles &source,
    const std::function<std::shared_ptr<Checkpoint>(const std::string &,
                                                    std::string &)> &open,
    std::string &error);

/// Copies each regular file at the top of `inDir` that is not a weight
/// file, an index of weights, a training checkpoint's tracker, or one of
/// `written` (the names the conversion writes itself) into `outDir`,
/// atomically. The paths it creates are appended to `created`.
bool carryFiles(const std::string &inDir, const std::string &outDir,
                const std::vector<std::string> &written,
                std::vector<std::string> &created, std::string &error);

/// Sets `key` to `value` in a config.json: every member named `key` (at
/// any depth) or at the dotted path `key`, as HFConfig's overrides read
/// them; when there is none and `create` is set, `key` at the top level.
/// `value` is JSON, or else a string.
void setConfigKey(json::Value &config, const std::string &key,
                  const std::string &value, bool create = true);

/// The config.json of a conversion's output from the source's `text`: the
/// overrides and the dtype it was cast to (`torch_dtype`, and `dtype` where
/// present) hold in it, and a target that holds FP8 weights dequantized
/// (`target`) describes no quantization. `text` unchanged when nothing
/// changes or it is not JSON.
std::string outputConfigText(
    const std::string &text,
    const std::vector<std::pair<std::string, std::string>> &overrides,
    std::optional<DType> castTo, const ModelLayout &target);

} // namespace mdl::rt

#endif // MDL_RUNTIME_CONVERT_CHECKPOINTFILES_H
