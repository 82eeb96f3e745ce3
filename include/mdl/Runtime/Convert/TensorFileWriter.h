//===- TensorFileWriter.h - Writing tensor files, streamed ------*- C++ -*-===//
//
// Plain C++17 (POSIX), no LLVM. What the writers of tensor files
// (SafetensorsWriter, TorchCheckpointWriter) share.
//
//===----------------------------------------------------------------------===//

#ifndef MDL_RUNTIME_CONVERT_TENSORFILEWRITER_H
#define MDL_RUNTIME_CONVERT_TENSORFILEWRITER_H

#include "mdl/Runtime/Base/DType.h"

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace mdl::rt {

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
  /// With direct I/O, how many more chunks may wait on the disk while the
  /// threads fill others (3 by default); each holds a buffer of 6 MB.
  void setWaitingWrites(unsigned n);

  /// Whether write() sends tensor data to the disk with direct I/O where
  /// the file system allows it, bypassing the page cache: the bytes are
  /// copied once, into the writer's buffer, and the disk reads them from
  /// there (huge pages where the system gives them); several writes per
  /// thread are kept in flight. Off (the default), data goes through the
  /// page cache, and bytes already in a file are copied in the kernel
  /// (copy_file_range, which shares blocks on file systems that can).
  /// Direct I/O takes far less CPU per byte, and on the disks measured
  /// (bench/convert) less time; mdl-convert uses it unless told otherwise.
  void setDirectIO(bool on);

  /// A string entry of the file's metadata (safetensors' __metadata__; a
  /// dict beside the state dicts of a torch checkpoint). Fails on invalid
  /// UTF-8.
  bool setMetadata(std::string key, std::string value, std::string &error);

  /// Writes the file; false with `error` set (naming the path) on failure.
  virtual bool write(const std::string &path, std::string &error) const = 0;

protected:
  std::map<std::string, std::string> meta;
  struct Entry {
    std::string name;
    DType dtype = DType::F32;
    std::vector<int64_t> shape;
    /// Bytes: shape x dtype.
    uint64_t size = 0;
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
  unsigned numThreads = 1, waitingWrites = 3;
  bool directIO = false;
};

} // namespace mdl::rt

#endif // MDL_RUNTIME_CONVERT_TENSORFILEWRITER_H
