//===- Safetensors.h - Reading and writing safetensors files ---*- C++ -*-===//
//
// Plain C++17 (POSIX), no LLVM. A safetensors file is a little-endian u64
// N, N bytes of JSON header and a data section. The header maps each tensor
// name to {"dtype", "shape", "data_offsets": [begin, end]} (offsets relative
// to the data section) and may hold "__metadata__", an object of strings.
//
// The readers validate the header fully and report the first problem as one
// message that starts with the file's path: known dtypes only, sizes that
// agree with shapes, and data ranges that tile the data section exactly (no
// overlap, no gap, nothing out of range), as the reference implementation
// requires. Keys other than those three in a tensor's entry are rejected
// too. No function throws or asserts on its input; failures come back
// as a null/empty result with `error` set.
//
//===----------------------------------------------------------------------===//

#ifndef MDL_RUNTIME_SAFETENSORS_H
#define MDL_RUNTIME_SAFETENSORS_H

#include "mdl/Runtime/DType.h"
#include "mdl/Runtime/Zip.h"

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace mdl::rt {

/// Headers larger than this are rejected before anything is read, as by the
/// reference implementation.
constexpr uint64_t kMaxSafetensorsHeaderSize = 100'000'000;

struct TensorInfo {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  /// Byte range of the tensor in the data section.
  uint64_t dataBegin = 0, dataEnd = 0;

  uint64_t numBytes() const { return dataEnd - dataBegin; }
  int64_t numElements() const;
};

/// A validated header.
struct SafetensorsHeader {
  /// In the order the header lists them.
  std::vector<TensorInfo> tensors;
  std::map<std::string, std::string> metadata;
  /// Where the data section starts in the file (8 + N).
  uint64_t dataStart = 0;
  /// Size of the data section.
  uint64_t dataSize = 0;
  /// Tensor name -> index in `tensors`.
  std::map<std::string, size_t, std::less<>> indexByName;

  const TensorInfo *find(std::string_view name) const;
};

/// Validates header JSON `text` for a data section of `dataSize` bytes.
/// `path` only prefixes error messages; `headerStart` is the file offset of
/// `text`, so that JSON errors give a byte offset in the file.
std::optional<SafetensorsHeader>
parseSafetensorsHeader(std::string_view path, std::string_view text,
                       uint64_t dataSize, std::string &error,
                       uint64_t headerStart = 8);

/// Reads and validates only the header of `path` (the first 8 + N bytes,
/// with pread); the data section is checked against the file's size. For
/// checkpoints where only names and shapes matter.
std::optional<SafetensorsHeader> readSafetensorsHeader(const std::string &path,
                                                       std::string &error);

/// A safetensors file mapped read-only (MAP_PRIVATE) into memory. Another
/// process must not truncate the file while it is mapped: reading a page past
/// the new end faults.
class SafetensorsFile {
public:
  static std::unique_ptr<SafetensorsFile> open(const std::string &path,
                                               std::string &error);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile &) = delete;
  SafetensorsFile &operator=(const SafetensorsFile &) = delete;

  const std::string &path() const { return filePath; }
  const SafetensorsHeader &header() const { return hdr; }
  /// In file order.
  const std::vector<TensorInfo> &tensors() const { return hdr.tensors; }
  const std::map<std::string, std::string> &metadata() const {
    return hdr.metadata;
  }
  const TensorInfo *find(std::string_view name) const { return hdr.find(name); }
  /// The tensor's bytes (numBytes() of them) in the mapping; `t` must be one
  /// of tensors(). Not aligned beyond what the file's layout gives.
  const uint8_t *data(const TensorInfo &t) const {
    return base + hdr.dataStart + t.dataBegin;
  }
  /// Drops the pages wholly inside [data, data + n), a range of a mapped
  /// file, from this process's memory: they stay in the page cache and are
  /// mapped again when read. Reading a large checkpoint once and releasing
  /// each tensor when done keeps the resident set bounded.
  static void release(const uint8_t *data, uint64_t n);

private:
  SafetensorsFile() = default;

  std::string filePath;
  SafetensorsHeader hdr;
  const uint8_t *base = nullptr;
  size_t mappedSize = 0;
};

/// Runs `work` on `n` threads (the caller's among them) and waits for all;
/// when no more threads can be started, those running do the work.
void runWorkers(size_t n, const std::function<void()> &work);

/// What the writers of tensor files share: the tensors added, and the
/// streaming of their bytes into a file written atomically: everything goes
/// to `<path>.tmp.<pid>`, which is fsynced and renamed over `path`, so
/// readers see the old file or the complete new one; on failure the
/// temporary is removed. Tensor bytes are streamed in chunks of a few MB by
/// worker threads: memory use does not grow with the size of the file.
class TensorFileWriter {
public:
  /// Fills bytes [offset, offset + n) of the tensor into `dst`; returns
  /// false with `error` set to abort. With one thread (the default), called
  /// for consecutive chunks, in order; with more (setThreads()), called
  /// concurrently from the writing threads, chunks in any order, so it must
  /// be thread-safe. `offset` and `n` are multiples of the dtype's size.
  using FillFn = std::function<bool(uint64_t offset, uint8_t *dst, size_t n,
                                    std::string &error)>;
  /// Says where bytes [offset, offset + n) of the tensor already are in a
  /// file, so that write() copies them from there in the kernel
  /// (copy_file_range) rather than calling the fill: returns true with `fd`
  /// and `fileOffset` set and `n` lowered to the bytes that follow there,
  /// or false to have the fill produce them. Called like FillFn; the
  /// descriptor must stay open until write() returns.
  using SourceFn = std::function<bool(uint64_t offset, size_t &n, int &fd,
                                      uint64_t &fileOffset)>;

  virtual ~TensorFileWriter() = default;

  /// Adds a tensor whose bytes are at `data` (shape x dtype of them), which
  /// must stay valid until write(). Fails on a duplicate or reserved name,
  /// invalid UTF-8, a negative dimension or a size that overflows.
  bool add(std::string name, DType dtype, std::vector<int64_t> shape,
           const void *data, std::string &error);
  /// Adds a tensor whose bytes `fill` produces during write().
  bool add(std::string name, DType dtype, std::vector<int64_t> shape,
           FillFn fill, std::string &error);
  /// Adds a tensor whose bytes come from files where `source` says, and
  /// from `fill` elsewhere (or where the copy fails).
  bool add(std::string name, DType dtype, std::vector<int64_t> shape,
           FillFn fill, SourceFn source, std::string &error);

  /// The number of threads write() fills and writes chunks of tensor data
  /// on (1 by default); memory use grows by a few MB per thread.
  void setThreads(unsigned n);

  /// A string entry of the file's metadata (safetensors' __metadata__; a
  /// dict beside the state dicts of a torch checkpoint). Fails on invalid
  /// UTF-8.
  bool setMetadata(std::string key, std::string value, std::string &error);

  /// Writes the file; false with `error` set (naming the path) on failure.
  virtual bool write(const std::string &path, std::string &error) const = 0;

protected:
  std::map<std::string, std::string> meta;
  struct Entry {
    TensorInfo info; // dataEnd holds the size
    const void *data = nullptr;
    FillFn fill;
    SourceFn source;
  };
  /// Where a tensor's bytes go in the file, and whether their CRC-32 is
  /// needed (they are then never copied by the kernel, but filled).
  struct Region {
    const Entry *entry = nullptr;
    uint64_t fileOffset = 0;
    bool crc = false;
  };
  /// Byte strings written at file offsets once the regions are done, from
  /// the regions' CRC-32s (0 where not asked for).
  using HeaderFn = std::function<std::vector<std::pair<uint64_t, std::string>>(
      const std::vector<uint32_t> &crcs)>;
  /// Writes `path` atomically: the regions (in file order), then the
  /// headers.
  bool stream(const std::string &path, const std::vector<Region> &regions,
              const HeaderFn &headers, std::string &error) const;

  /// By name.
  std::map<std::string, Entry> entries;

private:
  bool addEntry(Entry e, std::string &error);
  unsigned numThreads = 1;
};

/// Writes a safetensors file (see TensorFileWriter).
///
/// The header lists tensors sorted by name (deterministic whatever the order
/// of add()). The data section orders them by element size, largest first,
/// then by name, so that with the header padded with spaces to a multiple of
/// 8 bytes every tensor is aligned to its element size in the file, as in
/// files written by the reference implementation.
class SafetensorsWriter : public TensorFileWriter {
public:
  bool write(const std::string &path, std::string &error) const override;
};

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

    /// Whether its bytes are a mapped file, whose pages may be dropped
    /// and read again (SafetensorsFile::release).
    bool mapped() const { return file || zip; }

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
  ///    dicts readTorchStateDict reads (headers-only or not, it is mapped).
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
  /// The tensor's bytes, or null when opened headers-only.
  const uint8_t *data(const TensorRef &t) const;

private:
  Checkpoint() = default;
  bool addShard(const std::string &path, bool headersOnly, std::string &error);
  bool openIndex(const std::string &indexPath, const std::string &dir,
                 bool headersOnly, std::string &error);

  std::vector<std::unique_ptr<Shard>> shardList;
  std::map<std::string, TensorRef, std::less<>> byName;
};

} // namespace mdl::rt

#endif // MDL_RUNTIME_SAFETENSORS_H
