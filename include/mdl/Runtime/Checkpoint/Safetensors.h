//===- Safetensors.h - Reading safetensors files ----------------*- C++ -*-===//
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

#ifndef MDL_RUNTIME_CHECKPOINT_SAFETENSORS_H
#define MDL_RUNTIME_CHECKPOINT_SAFETENSORS_H

#include "mdl/Runtime/Base/DType.h"

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

} // namespace mdl::rt

#endif // MDL_RUNTIME_CHECKPOINT_SAFETENSORS_H
