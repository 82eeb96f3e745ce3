//===- DistCheckpoint.h - PyTorch distributed checkpoints, read -*- C++ -*-===//
//
// Plain C++17 (POSIX), no LLVM, no libtorch. A PyTorch Distributed
// Checkpoint (DCP) directory, as `torch.distributed.checkpoint.save` and
// Megatron-Core's `--ckpt-format torch_dist` write it:
//
//  - `.metadata`: a pickle of a `Metadata` object (torch >= 2.0:
//    `torch.distributed.checkpoint.metadata.Metadata`; torch 1.13:
//    `torch.distributed._shard.checkpoint.metadata.Metadata`; Megatron-Core
//    0.15 and later: its subclass `MCoreMetadata`). Its `state_dict_metadata`
//    gives each key's global shape and dtype and the chunks (boxes of the
//    global tensor) it is stored in, or says the key holds bytes; its
//    `storage_data` gives where each chunk is: a file of the directory and
//    a byte range in it. Other attributes (Megatron's `mcore_data` and save
//    plans, `storage_meta`, `version`) are ignored.
//  - `__<rank>_<n>.distcp` files: concatenated items, each a complete
//    torch.save archive of one chunk (a contiguous tensor of the chunk's
//    sizes) or of a bytes item.
//
// The pickle is read by the unpickler that reads torch.save archives: it
// builds inert values and runs nothing, and the classes of every torch
// version's paths are recognized (the dtypes, torch.Size, TensorProperties
// under `torch.distributed.checkpoint.metadata` or
// `torch.distributed._shard.sharded_tensor.metadata`, `_StorageInfo` under
// `...checkpoint.filesystem`). The metadata is checked whole before any data
// is used: chunks inside their tensor, tiling it exactly once, each with a
// byte range inside its file; every tensor item is then opened (its archive
// and pickle, not its data) and must hold a contiguous tensor of its chunk's
// shape and its key's dtype. Data is read by mapping the files: only the
// pages of the chunks used are read.
//
//===----------------------------------------------------------------------===//

#ifndef MDL_RUNTIME_CHECKPOINT_DISTCHECKPOINT_H
#define MDL_RUNTIME_CHECKPOINT_DISTCHECKPOINT_H

#include "mdl/Runtime/Base/DType.h"
#include "mdl/Runtime/Checkpoint/Zip.h"

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace mdl::rt {

/// The name of a distributed checkpoint's metadata file.
inline constexpr const char *kDistMetadataFile = ".metadata";

/// A box of a key's global tensor and where it is stored.
struct DistChunk {
  /// Global coordinates (empty for a bytes item).
  std::vector<int64_t> offsets, sizes;
  /// The file (an index into DistCheckpoint::files()) and the byte range of
  /// its item.
  size_t file = 0;
  uint64_t itemOffset = 0, itemLength = 0;
  /// Where the chunk's tensor bytes are in the file (a tensor item whose
  /// archive was opened), and how many.
  uint64_t dataOffset = 0, dataBytes = 0;
};

/// A key of the checkpoint: a tensor stored in chunks, or a bytes item.
struct DistEntry {
  std::string key;
  bool bytes = false;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  std::vector<DistChunk> chunks;

  int64_t numElements() const;
};

class DistCheckpoint {
public:
  /// Reads `dir`'s `.metadata` and checks it. Unless `metadataOnly`, the
  /// files it names are mapped and each tensor chunk's item is opened.
  static std::unique_ptr<DistCheckpoint>
  open(const std::string &dir, std::string &error, bool metadataOnly = false);

  const std::string &dir() const { return directory; }
  /// The keys, by name.
  const std::map<std::string, DistEntry> &entries() const { return byKey; }
  const DistEntry *find(const std::string &key) const;
  /// The files the chunks are in, relative to the directory.
  const std::vector<std::string> &files() const { return fileNames; }
  /// The path of file `file`.
  std::string path(size_t file) const;
  /// The mapped bytes of a tensor chunk (null when opened metadata-only).
  const uint8_t *data(const DistChunk &c) const;
  /// Copies tensor `e` whole, row-major, into `out` (numElements() times
  /// its dtype's size bytes), chunk by chunk; false when opened
  /// metadata-only or `e` holds bytes.
  bool read(const DistEntry &e, uint8_t *out) const;

private:
  DistCheckpoint() = default;
  bool openItems(std::string &error);

  std::string directory;
  std::map<std::string, DistEntry> byKey;
  std::vector<std::string> fileNames;
  std::vector<std::shared_ptr<MappedFile>> mapped;
};

/// Whether `dir` holds a distributed checkpoint's `.metadata`.
bool isDistCheckpoint(const std::string &dir);

/// The directory of the distributed checkpoint `path` names: `path` when
/// it holds `.metadata` or Megatron-Core's `metadata.json`, else the
/// iteration directory (`release/`, `iter_NNNNNNN/`) that Megatron's
/// tracker `latest_checkpointed_iteration.txt` in it names, when that one
/// does; "" otherwise.
std::string findDistCheckpoint(const std::string &path);

/// Limits of the reader: the size of `.metadata`, and of the pickle of one
/// item.
constexpr uint64_t kMaxDistMetadataSize = uint64_t(1) << 30;

} // namespace mdl::rt

#endif // MDL_RUNTIME_CHECKPOINT_DISTCHECKPOINT_H
