//===- CheckpointDir.h - The files of a checkpoint directory ---*- C++ -*-===//
//
// Where a conversion's tensors go and come from, and what travels with
// them. An HF target is written as save_pretrained writes it: one
// `model.safetensors`, or above a maximum size numbered shards with a
// `model.safetensors.index.json`. A backend's rank goes to its `rank_dir`
// under the name its `rank_file` gives (`{part}` in it numbers the parts of
// a rank split at the maximum size). The files of a directory that are not
// weights (tokenizer, generation config, chat templates, custom code) are
// carried to the output. Plain C++17.
//
//===----------------------------------------------------------------------===//

#ifndef MDL_RUNTIME_CHECKPOINTDIR_H
#define MDL_RUNTIME_CHECKPOINTDIR_H

#include "mdl/Runtime/Convert.h"
#include "mdl/Runtime/Json.h"

#include <cstdint>
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

/// The files a conversion writes for its target ranks.
struct OutputFiles {
  /// Directories to create, parents first.
  std::vector<std::string> dirs;
  std::vector<Converter::TargetFile> files;
  /// HF's model.safetensors.index.json when the checkpoint is sharded
  /// (empty path otherwise).
  std::string indexPath, indexText;
};

/// The files of target ranks `ranks` of `to` under `outDir`: an HF
/// checkpoint when `hfLayout` (one rank), else each rank's rank_dir and
/// rank_file parts (`rankFile` instead of the backend's when not empty);
/// parts and shards hold at most `maxBytes` (a larger tensor alone).
OutputFiles planOutputFiles(const Binding &to, const ParallelConfig &config,
                            const std::vector<int64_t> &ranks,
                            const std::string &outDir, bool hfLayout,
                            uint64_t maxBytes,
                            const std::string &rankFile = "");

/// The files of rank `rank` of `from` in `dir` (every part of its
/// rank_file, in part order); nothing, with `error` set, when there are
/// none.
std::optional<std::vector<std::string>>
rankFiles(const Binding &from, const ParallelConfig &config, int64_t rank,
          const std::string &dir, std::string &error);

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

#endif // MDL_RUNTIME_CHECKPOINTDIR_H
