//===- Zip.h - Stored zip archives, as PyTorch writes them ------*- C++ -*-===//
//
// Plain C++17 (POSIX), no LLVM. PyTorch's checkpoints (torch.save since
// 1.6) are zip archives whose entries are stored, not compressed. This is
// what MDL needs of the format: the CRC-32 of entries (computed in pieces
// and combined, so that threads can each take a chunk), the layout of an
// archive being written (its local headers, each entry's data aligned, the
// central directory, zip64 records when sizes or offsets need them), and
// a reader that maps an archive and finds its stored entries through the
// central directory. Nothing throws; failures are messages that start with
// the file's path.
//
//===----------------------------------------------------------------------===//

#ifndef MDL_RUNTIME_CHECKPOINT_ZIP_H
#define MDL_RUNTIME_CHECKPOINT_ZIP_H

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace mdl::rt {

/// The CRC-32 of zip (and zlib), continued from `crc` (0 to start).
uint32_t crc32(uint32_t crc, const uint8_t *data, size_t n);
/// The CRC-32 of A followed by B, from those of A and of B (`lengthB`
/// bytes).
uint32_t crc32Combine(uint32_t crcA, uint32_t crcB, uint64_t lengthB);

/// An archive being laid out: entries are added in file order, each with
/// its size; their data offsets are known at once, so that the data can be
/// written first and the headers, which hold the CRCs, last.
class ZipLayout {
public:
  /// Adds entry `name` of `size` bytes whose data starts at a multiple of
  /// `align` in the file (padded as PyTorch does, with an extra field in
  /// the local header); returns its index.
  size_t add(std::string name, uint64_t size, uint64_t align = 64);
  uint64_t dataOffset(size_t entry) const { return entries[entry].data; }
  /// Where the local header of `entry` starts, and its bytes, which say
  /// the entry's CRC.
  uint64_t headerOffset(size_t entry) const { return entries[entry].header; }
  std::string localHeader(size_t entry, uint32_t crc) const;
  /// The central directory and the end records, which go at endOfData().
  uint64_t endOfData() const;
  std::string centralDirectory(const std::vector<uint32_t> &crcs) const;

private:
  struct Entry {
    std::string name;
    uint64_t size = 0, header = 0, data = 0;
  };
  std::vector<Entry> entries;
  uint64_t end = 0;
};

/// A regular file mapped read-only (MAP_PRIVATE), shared by what is read
/// from it. Mapping reads nothing: pages are read when touched.
class MappedFile {
public:
  static std::shared_ptr<MappedFile> open(const std::string &path,
                                          std::string &error);
  ~MappedFile();
  MappedFile(const MappedFile &) = delete;
  MappedFile &operator=(const MappedFile &) = delete;

  const std::string &path() const { return filePath; }
  const uint8_t *bytes() const { return base; }
  uint64_t size() const { return length; }

private:
  MappedFile() = default;
  std::string filePath;
  const uint8_t *base = nullptr;
  uint64_t length = 0;
};

/// A zip archive in a file mapped read-only: the whole file, or a window of
/// it (a torch.save item inside a distributed checkpoint's `.distcp` file,
/// whose offsets are relative to the item's start). Its central directory
/// is read and checked on open; entries' data are read only when used.
/// Only stored (uncompressed) entries can be read.
class ZipFile {
public:
  struct Entry {
    std::string name;
    uint64_t data = 0; // offset of its data in the archive
    uint64_t size = 0;
    uint32_t crc = 0;
  };
  static std::unique_ptr<ZipFile> open(const std::string &path,
                                       std::string &error);
  /// The archive that is bytes [offset, offset + length) of `file`;
  /// messages name it `what`.
  static std::unique_ptr<ZipFile> openWindow(std::shared_ptr<MappedFile> file,
                                             uint64_t offset, uint64_t length,
                                             std::string what,
                                             std::string &error);
  ZipFile(const ZipFile &) = delete;
  ZipFile &operator=(const ZipFile &) = delete;

  /// The name messages give the archive (its file's path, for a whole file).
  const std::string &path() const { return filePath; }
  const std::map<std::string, Entry, std::less<>> &entries() const {
    return byName;
  }
  const Entry *find(std::string_view name) const;
  const uint8_t *data(const Entry &e) const { return base + e.data; }
  /// The archive's first byte, mapped.
  const uint8_t *bytes() const { return base; }
  /// The archive's size.
  uint64_t fileSize() const { return size; }
  /// The mapped file, and where the archive starts in it.
  const MappedFile &file() const { return *mapping; }
  uint64_t windowOffset() const { return window; }
  /// Checks the entry's bytes against its CRC.
  bool verify(const Entry &e, std::string &error) const;

private:
  ZipFile() = default;
  bool readDirectory(std::string &error);

  std::shared_ptr<MappedFile> mapping;
  std::string filePath;
  const uint8_t *base = nullptr;
  uint64_t size = 0, window = 0;
  std::map<std::string, Entry, std::less<>> byName;
};

} // namespace mdl::rt

#endif // MDL_RUNTIME_CHECKPOINT_ZIP_H
