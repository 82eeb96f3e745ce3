//===- Checkpoint.h - A checkpoint's tensors, across its files --*- C++ -*-===//
//
// Plain C++17 (POSIX), no LLVM. A checkpoint as HF stores it (one
// safetensors file, or shards and model.safetensors.index.json), any
// directory or list of safetensors files, a torch checkpoint, or tensors in
// a process's memory: one table of tensors, each found in its file. Reading
// validates as the formats' readers do (Safetensors.h, TorchCheckpoint.h);
// no function throws or asserts on its input.
//
//===----------------------------------------------------------------------===//

#ifndef MDL_RUNTIME_CHECKPOINT_CHECKPOINT_H
#define MDL_RUNTIME_CHECKPOINT_CHECKPOINT_H

#include "mdl/Runtime/Base/DType.h"
#include "mdl/Runtime/Checkpoint/Safetensors.h"
#include "mdl/Runtime/Checkpoint/Zip.h"

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace mdl::rt {

class DistCheckpoint;

/// A HuggingFace checkpoint's model.safetensors.index.json: which shard
/// holds each tensor. Names only; shapes live in the shards.
struct CheckpointIndex {
  /// Tensor name -> shard file name (relative to the index's directory).
  std::map<std::string, std::string> weightMap;
  /// The index's "metadata" object as JSON text, e.g. {"total_size": 123}.
  std::string metadataJson;
};
std::optional<CheckpointIndex> readCheckpointIndex(const std::string &path,
                                                   std::string &error);

/// The tensors of a checkpoint that may span several safetensors files.
class Checkpoint {
public:
  /// A box of a tensor stored on its own (a chunk of a distributed
  /// checkpoint): its place in the tensor, its bytes (row-major in the box)
  /// and where they are in their file.
  struct Chunk {
    std::vector<int64_t> offsets, sizes;
    const uint8_t *data = nullptr; // null when opened headers-only
    const std::string *file = nullptr;
    uint64_t fileOffset = 0, bytes = 0;
  };
  struct Shard {
    std::string path;
    /// The mapped file; null when opened headers-only.
    std::unique_ptr<SafetensorsFile> file;
    /// A torch checkpoint's archive, mapped (see TorchCheckpoint.h).
    std::unique_ptr<ZipFile> zip;
    /// The header, when opened headers-only or from a torch checkpoint
    /// (whose tensors' offsets are in the archive, with dataStart 0).
    SafetensorsHeader readHeader;
    /// Tensors in memory (a process's own, see inMemory()): the address of
    /// each tensor of readHeader, in its order.
    std::vector<const uint8_t *> memory;
    /// A distributed checkpoint (DistCheckpoint.h, Megatron's torch_dist):
    /// the chunks of each tensor of readHeader, in its order, and the paths
    /// of its files.
    std::shared_ptr<const DistCheckpoint> dist;
    std::vector<std::vector<Chunk>> chunks;
    std::vector<std::string> distFiles;

    /// Whether its bytes are a mapped file, whose pages may be dropped
    /// and read again (SafetensorsFile::release).
    bool mapped() const { return file || zip || dist; }

    const SafetensorsHeader &header() const {
      return file ? file->header() : readHeader;
    }
  };
  struct TensorRef {
    const Shard *shard = nullptr;
    const TensorInfo *info = nullptr;
  };

  /// Opens `path`, which is one of
  ///  - a directory with model.safetensors.index.json: the shards its
  ///    weight_map names, which must hold exactly the tensors it maps to them;
  ///  - a directory with model.safetensors: that file;
  ///  - another directory: every *.safetensors in it, names unique across
  ///    them;
  ///  - an index .json file, or a single .safetensors file;
  ///  - a torch checkpoint (a zip file, as torch.save writes): the state
  ///    dicts readTorchStateDict reads (headers-only or not, it is mapped);
  ///  - a distributed checkpoint (a directory with `.metadata`, or that
  ///    file): its tensors, each in its chunks (see chunks()); its bytes
  ///    items and Megatron's optimizer state (keys `optimizer.*`) are left
  ///    out.
  /// With `headersOnly`, shards are read with readSafetensorsHeader and no
  /// data is mapped (data() returns null).
  static std::unique_ptr<Checkpoint>
  open(const std::string &path, std::string &error, bool headersOnly = false);
  /// Opens the safetensors files `paths` as one checkpoint (names unique
  /// across them).
  static std::unique_ptr<Checkpoint>
  openFiles(const std::vector<std::string> &paths, std::string &error,
            bool headersOnly = false);

  /// A tensor in a process's memory (a framework's state dict): shape x
  /// dtype bytes at `data`, which must stay valid while the checkpoint is
  /// read; null for a description without data.
  struct MemoryTensor {
    std::string name;
    DType dtype = DType::BF16;
    std::vector<int64_t> shape;
    const void *data = nullptr;
  };
  /// The tensors `tensors` as one checkpoint named `what` (in messages).
  /// Fails on a duplicate name or a size that overflows.
  static std::unique_ptr<Checkpoint>
  inMemory(std::string what, const std::vector<MemoryTensor> &tensors,
           std::string &error);

  const std::vector<std::unique_ptr<Shard>> &shards() const {
    return shardList;
  }
  /// Every tensor, sorted by name.
  const std::map<std::string, TensorRef, std::less<>> &tensors() const {
    return byName;
  }
  const TensorRef *find(std::string_view name) const;
  /// The tensor's bytes, or null when opened headers-only or when the
  /// tensor is stored in several chunks.
  const uint8_t *data(const TensorRef &t) const;
  /// The chunks a distributed checkpoint's tensor is stored in (tiling it),
  /// or null for a tensor of another format (whose bytes are one run).
  const std::vector<Chunk> *chunks(const TensorRef &t) const;

private:
  Checkpoint() = default;
  bool addShard(const std::string &path, bool headersOnly, std::string &error);
  bool addDist(const std::string &dir, bool headersOnly, std::string &error);
  bool openIndex(const std::string &indexPath, const std::string &dir,
                 bool headersOnly, std::string &error);

  std::vector<std::unique_ptr<Shard>> shardList;
  std::map<std::string, TensorRef, std::less<>> byName;
};

} // namespace mdl::rt

#endif // MDL_RUNTIME_CHECKPOINT_CHECKPOINT_H
