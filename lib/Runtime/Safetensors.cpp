//===- Safetensors.cpp - Reading and writing safetensors files ------------===//

#include "mdl/Runtime/DType.h"
#include "mdl/Runtime/Safetensors.h"
#include "mdl/Runtime/File.h"
#include "mdl/Runtime/Json.h"
#include "mdl/Runtime/TorchCheckpoint.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <limits>
#include <mutex>
#include <set>
#include <thread>

#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

using namespace mdl;
using namespace mdl::rt;

namespace {

std::string errnoText() { return std::strerror(errno); }

bool isValidUtf8(const std::string &s) {
  // The JSON reader validates UTF-8; a quoted string round-trips through it.
  json::ParseError ignored;
  return json::parse(json::quote(s), ignored).has_value();
}

/// A message made printable: it may quote bytes of a corrupt file, which
/// must not reach a terminal raw.
std::string printable(const std::string &message) {
  bool utf8 = isValidUtf8(message);
  std::string out;
  for (unsigned char c : message) {
    if (c < 0x20 || c == 0x7F || (c >= 0x80 && !utf8)) {
      const char *hex = "0123456789abcdef";
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 15];
    } else {
      out += char(c);
    }
  }
  return out;
}

/// A name for messages: 'name', with control characters (and the bytes of
/// invalid UTF-8) escaped so that a message stays one printable line.
std::string nameText(std::string_view name) {
  std::string q = json::quote(name);
  return "'" + printable(q.substr(1, q.size() - 2)) + "'";
}

std::string rangeText(uint64_t begin, uint64_t end) {
  return "[" + std::to_string(begin) + ", " + std::to_string(end) + "]";
}

/// The byte size of `shape` x `dtype`; nullopt when a dimension is negative
/// or the size does not fit in int64 (offsets in the header are int64).
std::optional<uint64_t> tensorBytes(const std::vector<int64_t> &shape,
                                    DType dtype) {
  constexpr uint64_t kMax = uint64_t(std::numeric_limits<int64_t>::max());
  uint64_t n = byteSize(dtype);
  for (int64_t d : shape) {
    if (d < 0)
      return std::nullopt;
    if (d != 0 && n > kMax / uint64_t(d))
      return std::nullopt;
    n *= uint64_t(d);
  }
  return n;
}

std::optional<DType> parseSafetensorsDType(std::string_view name) {
  // parseDType also takes spec and torch spellings; a header has only these.
  std::optional<DType> t = parseDType(name);
  if (t && safetensorsName(*t) == name)
    return t;
  return std::nullopt;
}

bool checkMinimumSize(const std::string &path, uint64_t fileSize,
                      std::string &error) {
  if (fileSize >= 8)
    return true;
  error = path + ": file is " + std::to_string(fileSize) +
          " bytes, too short for a safetensors file (the header length "
          "alone takes 8)";
  return false;
}

/// Decodes and checks the header length from the first 8 bytes of a file of
/// `fileSize` >= 8 bytes.
bool headerLength(const std::string &path, const uint8_t *first8,
                  uint64_t fileSize, uint64_t &length, std::string &error) {
  length = 0;
  for (int i = 7; i >= 0; --i)
    length = (length << 8) | first8[i];
  if (length > fileSize - 8) {
    error = path + ": header length " + std::to_string(length) +
            " runs past the end of the file (" + std::to_string(fileSize) +
            " bytes)";
    return false;
  }
  if (length > kMaxSafetensorsHeaderSize) {
    error = path + ": header length " + std::to_string(length) +
            " exceeds the limit of " +
            std::to_string(kMaxSafetensorsHeaderSize) + " bytes";
    return false;
  }
  return true;
}

} // namespace

int64_t TensorInfo::numElements() const {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

const TensorInfo *SafetensorsHeader::find(std::string_view name) const {
  auto it = indexByName.find(name);
  return it == indexByName.end() ? nullptr : &tensors[it->second];
}

//===----------------------------------------------------------------------===//
// Reading
//===----------------------------------------------------------------------===//

std::optional<SafetensorsHeader>
mdl::rt::parseSafetensorsHeader(std::string_view path, std::string_view text,
                                uint64_t dataSize, std::string &error,
                                uint64_t headerStart) {
  auto fail = [&](const std::string &message) {
    error = std::string(path) + ": " + message;
    return std::nullopt;
  };
  json::ParseError parseError;
  std::optional<json::Value> root = json::parse(text, parseError);
  if (!root)
    return fail("header is not valid JSON: " + printable(parseError.message) +
                " (at byte " + std::to_string(headerStart + parseError.offset) +
                ")");
  if (root->kind() != json::Value::Object)
    return fail(std::string("header is ") +
                json::Value::kindName(root->kind()) + ", not a JSON object");

  SafetensorsHeader h;
  h.dataStart = headerStart + text.size();
  h.dataSize = dataSize;
  for (const auto &[name, entry] : root->members()) {
    if (name == "__metadata__") {
      if (entry.kind() != json::Value::Object)
        return fail(std::string("__metadata__ is ") +
                    json::Value::kindName(entry.kind()) +
                    ", not an object of strings");
      for (const auto &[key, value] : entry.members()) {
        if (value.kind() != json::Value::String)
          return fail("__metadata__ value of " + nameText(key) + " is " +
                      json::Value::kindName(value.kind()) + ", not a string");
        h.metadata[key] = value.asString();
      }
      continue;
    }

    std::string what = "tensor " + nameText(name);
    if (entry.kind() != json::Value::Object)
      return fail(what + " is " + json::Value::kindName(entry.kind()) +
                  ", not an object");
    for (const auto &member : entry.members())
      if (member.first != "dtype" && member.first != "shape" &&
          member.first != "data_offsets")
        return fail(what + " has unknown key " + nameText(member.first));
    const json::Value *dtype = entry.get("dtype");
    const json::Value *shape = entry.get("shape");
    const json::Value *offsets = entry.get("data_offsets");
    if (!dtype || !shape || !offsets)
      return fail(what + " has no " +
                  (!dtype   ? "dtype"
                   : !shape ? "shape"
                            : "data_offsets"));

    TensorInfo t;
    t.name = name;
    if (dtype->kind() != json::Value::String)
      return fail(what + " dtype is " + json::Value::kindName(dtype->kind()) +
                  ", not a string");
    std::optional<DType> type = parseSafetensorsDType(dtype->asString());
    if (!type)
      return fail(what + " has unsupported dtype " +
                  nameText(dtype->asString()) +
                  " (expected BF16, F16, F32, F64, I64, I32, I16, I8, U8, "
                  "BOOL, F8_E4M3 or F8_E5M2)");
    t.dtype = *type;

    if (shape->kind() != json::Value::Array)
      return fail(what + " shape is " + json::Value::kindName(shape->kind()) +
                  ", not an array");
    for (const json::Value &d : shape->elements()) {
      if (d.kind() != json::Value::Int)
        return fail(what + " shape has " + json::Value::kindName(d.kind()) +
                    ", not an integer");
      if (d.asInt() < 0)
        return fail(what + " shape has negative dimension " +
                    std::to_string(d.asInt()));
      t.shape.push_back(d.asInt());
    }
    std::optional<uint64_t> bytes = tensorBytes(t.shape, t.dtype);
    if (!bytes)
      return fail(what + " shape " + shapeText(t.shape) + " of " +
                  std::string(safetensorsName(t.dtype)) +
                  " is too large: its size overflows 64 bits");

    if (offsets->kind() != json::Value::Array ||
        offsets->elements().size() != 2)
      return fail(what + " data_offsets must be an array [begin, end]");
    for (const json::Value &o : offsets->elements())
      if (o.kind() != json::Value::Int || o.asInt() < 0)
        return fail(what + " data_offsets must hold two non-negative integers");
    t.dataBegin = uint64_t(offsets->elements()[0].asInt());
    t.dataEnd = uint64_t(offsets->elements()[1].asInt());
    std::string range = rangeText(t.dataBegin, t.dataEnd);
    if (t.dataEnd < t.dataBegin)
      return fail(what + " data_offsets " + range + " end before they begin");
    if (t.dataEnd > dataSize)
      return fail(what + " data_offsets " + range +
                  " run past the end of the data section (" +
                  std::to_string(dataSize) + " bytes)");
    if (t.numBytes() != *bytes)
      return fail(what + " data_offsets " + range + " hold " +
                  std::to_string(t.numBytes()) + " bytes but shape " +
                  shapeText(t.shape) + " of " +
                  std::string(safetensorsName(t.dtype)) + " needs " +
                  std::to_string(*bytes));
    // The JSON reader rejects duplicate keys, so names are unique here.
    h.indexByName.emplace(t.name, h.tensors.size());
    h.tensors.push_back(std::move(t));
  }

  // The data ranges must tile the data section: no overlap, no gap.
  std::vector<const TensorInfo *> order;
  for (const TensorInfo &t : h.tensors)
    order.push_back(&t);
  std::stable_sort(order.begin(), order.end(),
                   [](const TensorInfo *a, const TensorInfo *b) {
                     return std::make_pair(a->dataBegin, a->dataEnd) <
                            std::make_pair(b->dataBegin, b->dataEnd);
                   });
  uint64_t pos = 0;
  const TensorInfo *prev = nullptr;
  for (const TensorInfo *t : order) {
    if (t->dataBegin < pos)
      return fail("tensor " + nameText(t->name) + " data_offsets " +
                  rangeText(t->dataBegin, t->dataEnd) + " overlap tensor " +
                  nameText(prev->name) + " data_offsets " +
                  rangeText(prev->dataBegin, prev->dataEnd));
    if (t->dataBegin > pos)
      return fail("gap of " + std::to_string(t->dataBegin - pos) +
                  " unused bytes in the data section " +
                  (prev ? "between tensor " + nameText(prev->name) +
                              " (ends at " + std::to_string(pos) + ") and "
                        : std::string("before ")) +
                  "tensor " + nameText(t->name) + " (begins at " +
                  std::to_string(t->dataBegin) + ")");
    pos = t->dataEnd;
    prev = t;
  }
  if (pos != dataSize)
    return fail(std::to_string(dataSize - pos) +
                " unused bytes at the end of the data section (" +
                std::to_string(dataSize) + " bytes), " +
                (prev ? "after tensor " + nameText(prev->name) + " (ends at " +
                            std::to_string(pos) + ")"
                      : std::string("which holds no tensors")));
  return h;
}

std::optional<SafetensorsHeader>
mdl::rt::readSafetensorsHeader(const std::string &path, std::string &error) {
  FdGuard guard;
  uint64_t fileSize = 0;
  if (!openRegular(path, guard, fileSize, error))
    return std::nullopt;
  if (!checkMinimumSize(path, fileSize, error))
    return std::nullopt;
  uint8_t first8[8];
  if (!preadAll(guard.fd, first8, 8, 0)) {
    error = path + ": cannot read: " + errnoText();
    return std::nullopt;
  }
  uint64_t length = 0;
  if (!headerLength(path, first8, fileSize, length, error))
    return std::nullopt;
  std::string text(size_t(length), '\0');
  if (!preadAll(guard.fd, reinterpret_cast<uint8_t *>(text.data()), text.size(),
                8)) {
    error = path + ": cannot read: " + errnoText();
    return std::nullopt;
  }
  return parseSafetensorsHeader(path, text, fileSize - 8 - length, error);
}

std::unique_ptr<SafetensorsFile> SafetensorsFile::open(const std::string &path,
                                                       std::string &error) {
  FdGuard guard;
  uint64_t fileSize = 0;
  if (!openRegular(path, guard, fileSize, error))
    return nullptr;
  if (!checkMinimumSize(path, fileSize, error))
    return nullptr;
  if (fileSize > std::numeric_limits<size_t>::max()) {
    error = path + ": file is too large to map";
    return nullptr;
  }
  void *map =
      ::mmap(nullptr, size_t(fileSize), PROT_READ, MAP_PRIVATE, guard.fd, 0);
  if (map == MAP_FAILED) {
    error = path + ": cannot map into memory: " + errnoText();
    return nullptr;
  }
  // The mapping outlives the descriptor; the guard closes it.
  std::unique_ptr<SafetensorsFile> file(new SafetensorsFile());
  file->filePath = path;
  file->base = static_cast<const uint8_t *>(map);
  file->mappedSize = size_t(fileSize);
  uint64_t length = 0;
  if (!headerLength(path, file->base, fileSize, length, error))
    return nullptr;
  std::string_view text(reinterpret_cast<const char *>(file->base) + 8,
                        size_t(length));
  std::optional<SafetensorsHeader> h =
      parseSafetensorsHeader(path, text, fileSize - 8 - length, error);
  if (!h)
    return nullptr;
  file->hdr = std::move(*h);
  return file;
}

void SafetensorsFile::release(const uint8_t *data, uint64_t n) {
  uint64_t page = uint64_t(::sysconf(_SC_PAGESIZE));
  uintptr_t begin = reinterpret_cast<uintptr_t>(data);
  uintptr_t first = (begin + page - 1) / page * page;
  uintptr_t last = (begin + n) / page * page;
  // The mapping is private and never written: dropped pages hold nothing
  // but the file's bytes, which a later read maps again.
  if (last > first)
    ::madvise(reinterpret_cast<void *>(first), last - first, MADV_DONTNEED);
}

SafetensorsFile::~SafetensorsFile() {
  if (base)
    ::munmap(const_cast<uint8_t *>(base), mappedSize);
}

//===----------------------------------------------------------------------===//
// Writing
//===----------------------------------------------------------------------===//

bool TensorFileWriter::addEntry(Entry e, std::string &error) {
  const std::string &name = e.info.name;
  std::string what = "tensor " + nameText(name);
  if (name == "__metadata__") {
    error = "'__metadata__' is reserved and cannot name a tensor";
    return false;
  }
  if (!isValidUtf8(name)) {
    error = what + ": name is not valid UTF-8";
    return false;
  }
  if (entries.count(name)) {
    error = what + " is added twice";
    return false;
  }
  for (int64_t d : e.info.shape)
    if (d < 0) {
      error = what + " shape " + shapeText(e.info.shape) +
              " has a negative dimension";
      return false;
    }
  std::optional<uint64_t> bytes = tensorBytes(e.info.shape, e.info.dtype);
  if (!bytes) {
    error = what + " shape " + shapeText(e.info.shape) +
            " is too large: its size overflows 64 bits";
    return false;
  }
  if (!e.fill && !e.data && *bytes != 0) {
    error = what + " has no data";
    return false;
  }
  e.info.dataEnd = *bytes; // the size, until write() lays the data out
  std::string key = name;
  entries.emplace(std::move(key), std::move(e));
  return true;
}

bool TensorFileWriter::add(std::string name, DType dtype,
                            std::vector<int64_t> shape, const void *data,
                            std::string &error) {
  Entry e;
  e.info.name = std::move(name);
  e.info.dtype = dtype;
  e.info.shape = std::move(shape);
  e.data = data;
  return addEntry(std::move(e), error);
}

bool TensorFileWriter::add(std::string name, DType dtype,
                            std::vector<int64_t> shape, FillFn fill,
                            std::string &error) {
  Entry e;
  e.info.name = std::move(name);
  e.info.dtype = dtype;
  e.info.shape = std::move(shape);
  e.fill = std::move(fill);
  return addEntry(std::move(e), error);
}

bool TensorFileWriter::add(std::string name, DType dtype,
                            std::vector<int64_t> shape, FillFn fill,
                            SourceFn source, std::string &error) {
  Entry e;
  e.info.name = std::move(name);
  e.info.dtype = dtype;
  e.info.shape = std::move(shape);
  e.fill = std::move(fill);
  e.source = std::move(source);
  return addEntry(std::move(e), error);
}

bool TensorFileWriter::setMetadata(std::string key, std::string value,
                                   std::string &error) {
  if (!isValidUtf8(key) || !isValidUtf8(value)) {
    error = "metadata " + nameText(key) + " is not valid UTF-8";
    return false;
  }
  meta[std::move(key)] = std::move(value);
  return true;
}

namespace {

/// The file being written: a temporary that is removed unless committed.
/// Writes are positional, so that threads can write disjoint ranges.
class TempFile {
public:
  explicit TempFile(std::string target)
      : target(std::move(target)),
        temp(this->target + ".tmp." + std::to_string(::getpid())) {}
  ~TempFile() {
    if (fd >= 0)
      ::close(fd);
    if (created && !committed)
      ::unlink(temp.c_str());
  }

  bool create(std::string &error) {
    fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    if (fd < 0)
      return fail("cannot create temporary file '" + temp + "'", error);
    created = true;
    return true;
  }

  /// Writes `n` bytes at file offset `offset`. Safe to call from several
  /// threads for disjoint ranges.
  bool writeAt(uint64_t offset, const uint8_t *src, size_t n,
               std::string &error) const {
    for (uint64_t at = offset, end = offset + n; at < end;) {
      ssize_t put = ::pwrite(fd, src, size_t(end - at), off_t(at));
      if (put < 0 && errno == EINTR)
        continue;
      if (put <= 0) {
        if (put == 0)
          errno = EIO;
        return fail("cannot write '" + temp + "'", error);
      }
      src += put;
      at += uint64_t(put);
    }
    startWriteback(offset, n);
    return true;
  }

  /// Copies up to `n` bytes at `from` in file `source` to file offset
  /// `offset` in the kernel; returns how many it copied, fewer when the
  /// kernel cannot (another file system, no support): the caller writes the
  /// rest. Safe to call from several threads for disjoint ranges.
  size_t copyAt(uint64_t offset, int source, uint64_t from, size_t n) const {
    size_t done = 0;
#ifdef __linux__
    while (done < n) {
      loff_t in = loff_t(from + done), at = loff_t(offset + done);
      ssize_t got = ::copy_file_range(source, &in, fd, &at, n - done, 0);
      if (got < 0 && errno == EINTR)
        continue;
      if (got <= 0)
        break;
      done += size_t(got);
    }
    startWriteback(offset, done);
#endif
    return done;
  }

  /// Syncs, closes and renames over the target.
  bool commit(std::string &error) {
    if (::fsync(fd) != 0)
      return fail("cannot sync '" + temp + "'", error);
    int closing = fd;
    fd = -1;
    if (::close(closing) != 0)
      return fail("cannot close '" + temp + "'", error);
    if (::rename(temp.c_str(), target.c_str()) != 0)
      return fail("cannot rename '" + temp + "' to it", error);
    committed = true;
    // Make the rename durable. Best effort: not every file system can sync
    // a directory, and the new file is complete either way.
    size_t slash = target.rfind('/');
    std::string dir = slash == std::string::npos ? "."
                      : slash == 0               ? "/"
                                                 : target.substr(0, slash);
    int dirFd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dirFd >= 0) {
      ::fsync(dirFd);
      ::close(dirFd);
    }
    return true;
  }

private:
  /// Starts writing back a range now rather than all at once in commit()'s
  /// fsync, so that the disk works while the next chunks are being built.
  void startWriteback(uint64_t offset, uint64_t n) const {
#ifdef __linux__
    if (n)
      ::sync_file_range(fd, off_t(offset), off_t(n), SYNC_FILE_RANGE_WRITE);
#endif
  }

  bool fail(const std::string &what, std::string &error) const {
    error = target + ": " + what + ": " + errnoText();
    return false;
  }

  std::string target, temp;
  int fd = -1;
  bool created = false, committed = false;
};

/// The data section is written in chunks of this many bytes (a multiple of
/// every element size), each filled in one buffer and written with one call.
constexpr uint64_t kChunkSize = uint64_t(4) << 20;

} // namespace

void mdl::rt::runWorkers(size_t n, const std::function<void()> &work) {
  std::vector<std::thread> helpers;
  for (size_t t = 1; t < n; ++t) {
    try {
      helpers.emplace_back(work);
    } catch (...) {
      break; // no more threads: the others do the work
    }
  }
  work();
  for (std::thread &t : helpers)
    t.join();
}

void TensorFileWriter::setThreads(unsigned n) {
  numThreads = std::max(1u, std::min(n, 256u));
}

bool TensorFileWriter::stream(const std::string &path,
                              const std::vector<Region> &regions,
                              const HeaderFn &headers,
                              std::string &error) const {
  // The regions' bytes, one after the other, make a stream that is cut in
  // chunks; `starts` says where each region begins in it, and its size last.
  std::vector<uint64_t> starts;
  uint64_t total = 0;
  for (const Region &r : regions) {
    uint64_t size = r.entry->info.dataEnd;
    if (size > uint64_t(std::numeric_limits<int64_t>::max()) - total) {
      error = path + ": the tensors' total size overflows 64 bits";
      return false;
    }
    starts.push_back(total);
    total += size;
  }
  starts.push_back(total);

  TempFile out(path);
  if (!out.create(error))
    return false;
  // Chunks are taken in order by the workers; a chunk may hold the ends of
  // several tensors. One worker fills each tensor in order. The CRC-32 of
  // what each chunk holds of a region, to be combined in order.
  struct CrcPiece {
    size_t region;
    uint64_t length;
    uint32_t crc;
  };
  uint64_t numChunks = (total + kChunkSize - 1) / kChunkSize;
  std::vector<std::vector<CrcPiece>> crcPieces(static_cast<size_t>(numChunks));
  std::atomic<uint64_t> nextChunk{0};
  std::atomic<bool> failed{false};
  std::mutex errorMutex;
  std::string firstError;
  auto fail = [&](const std::string &message) {
    std::lock_guard<std::mutex> lock(errorMutex);
    if (!failed.exchange(true))
      firstError = message;
  };
  auto fileOffset = [&](size_t i, uint64_t at) {
    return regions[i].fileOffset + (at - starts[i]);
  };
  auto work = [&] {
    std::vector<uint8_t> buffer;
    std::string fillError, writeError;
    for (;;) {
      uint64_t c = nextChunk++;
      if (c >= numChunks || failed)
        return;
      uint64_t lo = c * kChunkSize, hi = std::min(total, lo + kChunkSize);
      // The first region that ends after `lo`.
      size_t i = size_t(std::upper_bound(starts.begin(), starts.end(), lo) -
                        starts.begin()) -
                 1;
      const Entry *e = regions[i].entry;
      // A chunk inside one tensor given as bytes goes out from there.
      if (!e->fill && !regions[i].crc && starts[i + 1] >= hi) {
        if (!out.writeAt(fileOffset(i, lo),
                         static_cast<const uint8_t *>(e->data) +
                             (lo - starts[i]),
                         size_t(hi - lo), writeError))
          return fail(writeError);
        continue;
      }
      // Bytes that are in a file already are copied from there; the others
      // are filled into the buffer, which goes out in one write per run
      // between copies and between regions apart in the file.
      buffer.resize(size_t(hi - lo));
      uint64_t unwritten = lo; // buffered bytes [unwritten, at) not written
      size_t unwrittenRegion = i;
      auto flush = [&](uint64_t at, size_t next) {
        bool ok = unwritten == at ||
                  out.writeAt(fileOffset(unwrittenRegion, unwritten),
                              buffer.data() + (unwritten - lo),
                              size_t(at - unwritten), writeError);
        unwritten = at;
        unwrittenRegion = next;
        return ok;
      };
      for (; i < regions.size() && starts[i] < hi; ++i) {
        const Region &r = regions[i];
        e = r.entry;
        if (i > unwrittenRegion &&
            r.fileOffset != fileOffset(i - 1, starts[i]) &&
            !flush(starts[i], i))
          return fail(writeError);
        uint64_t from = std::max(lo, starts[i]), to = std::min(hi, starts[i + 1]);
        for (uint64_t at = from; at < to;) {
          size_t n = size_t(to - at), element = byteSize(e->info.dtype);
          int fd = -1;
          uint64_t sourceOffset = 0;
          bool inFile = !r.crc && e->source &&
                        e->source(at - starts[i], n, fd, sourceOffset);
          if (n == 0 || n > to - at || n % element)
            n = size_t(to - at), inFile = false;
          if (inFile) {
            if (!flush(at, i))
              return fail(writeError);
            // What a short copy leaves, whole elements, is filled.
            size_t copied = out.copyAt(fileOffset(i, at), fd, sourceOffset, n);
            copied -= copied % element;
            at += copied;
            unwritten = at;
            n -= copied;
            if (n == 0)
              continue;
          }
          uint8_t *dst = buffer.data() + (at - lo);
          if (!e->fill)
            std::memcpy(dst,
                        static_cast<const uint8_t *>(e->data) +
                            (at - starts[i]),
                        n);
          else if (!e->fill(at - starts[i], dst, n, fillError))
            return fail(path + ": tensor " + nameText(e->info.name) + ": " +
                        fillError);
          at += n;
        }
        if (r.crc && to > from)
          crcPieces[size_t(c)].push_back(
              {i, to - from, crc32(0, buffer.data() + (from - lo), to - from)});
      }
      if (!flush(hi, i))
        return fail(writeError);
    }
  };
  runWorkers(std::min<uint64_t>(numThreads, std::max<uint64_t>(numChunks, 1)),
             work);
  if (failed) {
    error = firstError;
    return false;
  }
  std::vector<uint32_t> crcs(regions.size(), 0);
  for (const std::vector<CrcPiece> &pieces : crcPieces)
    for (const CrcPiece &p : pieces)
      crcs[p.region] = crc32Combine(crcs[p.region], p.crc, p.length);
  for (const auto &[offset, bytes] : headers(crcs))
    if (!out.writeAt(offset, reinterpret_cast<const uint8_t *>(bytes.data()),
                     bytes.size(), error))
      return false;
  return out.commit(error);
}

bool SafetensorsWriter::write(const std::string &path,
                              std::string &error) const {
  // Data order: larger elements first, so that each tensor is aligned.
  std::vector<const Entry *> order;
  for (const auto &entry : entries)
    order.push_back(&entry.second);
  std::stable_sort(order.begin(), order.end(),
                   [](const Entry *a, const Entry *b) {
                     return byteSize(a->info.dtype) > byteSize(b->info.dtype);
                   });
  std::map<std::string_view, uint64_t> begins;
  uint64_t offset = 0;
  for (const Entry *e : order) {
    uint64_t size = e->info.dataEnd;
    if (size > uint64_t(std::numeric_limits<int64_t>::max()) - offset) {
      error = path + ": the tensors' total size overflows 64 bits";
      return false;
    }
    begins[e->info.name] = offset;
    offset += size;
  }

  // The header, tensors sorted by name (the order of `entries`).
  std::string header = "{";
  if (!meta.empty()) {
    header += "\"__metadata__\":{";
    bool first = true;
    for (const auto &[key, value] : meta) {
      header +=
          (first ? "" : ",") + json::quote(key) + ":" + json::quote(value);
      first = false;
    }
    header += "}";
  }
  for (const auto &[name, e] : entries) {
    uint64_t begin = begins[name];
    if (header.size() > 1)
      header += ",";
    header += json::quote(name) + ":{\"dtype\":\"" +
              std::string(safetensorsName(e.info.dtype)) +
              "\",\"shape\":" + shapeText(e.info.shape) +
              ",\"data_offsets\":[" + std::to_string(begin) + "," +
              std::to_string(begin + e.info.dataEnd) + "]}";
  }
  header += "}";
  // Pad with spaces so that the data section starts 8-byte aligned.
  header.append((8 - header.size() % 8) % 8, ' ');
  std::string prefix(8, '\0');
  for (int i = 0; i < 8; ++i)
    prefix[size_t(i)] = char(uint8_t(uint64_t(header.size()) >> (8 * i)));
  prefix += header;

  std::vector<Region> regions;
  for (const Entry *e : order)
    regions.push_back({e, prefix.size() + begins[e->info.name], false});
  return stream(path, regions,
                [&](const std::vector<uint32_t> &) {
                  return std::vector<std::pair<uint64_t, std::string>>{
                      {0, prefix}};
                },
                error);
}

//===----------------------------------------------------------------------===//
// Checkpoints
//===----------------------------------------------------------------------===//

std::optional<CheckpointIndex>
mdl::rt::readCheckpointIndex(const std::string &path, std::string &error) {
  std::string text;
  if (!readFile(path, text, error, kMaxSafetensorsHeaderSize))
    return std::nullopt;
  auto fail = [&](const std::string &message) {
    error = path + ": " + message;
    return std::nullopt;
  };
  json::ParseError parseError;
  std::optional<json::Value> root = json::parse(text, parseError);
  if (!root)
    return fail("not valid JSON: " + printable(parseError.message) +
                " (at line " + std::to_string(parseError.line) + ", column " +
                std::to_string(parseError.column) + ")");
  if (root->kind() != json::Value::Object)
    return fail(std::string("index is ") + json::Value::kindName(root->kind()) +
                ", not a JSON object");
  const json::Value *map = root->get("weight_map");
  if (!map)
    return fail("index has no weight_map");
  if (map->kind() != json::Value::Object)
    return fail(std::string("weight_map is ") +
                json::Value::kindName(map->kind()) + ", not an object");
  CheckpointIndex index;
  for (const auto &[name, file] : map->members()) {
    if (file.kind() != json::Value::String)
      return fail("weight_map entry " + nameText(name) + " is " +
                  json::Value::kindName(file.kind()) + ", not a file name");
    const std::string &f = file.asString();
    // Shards live next to the index; a path could reach anywhere.
    if (f.empty() || f == "." || f == ".." || f.find('/') != std::string::npos)
      return fail("weight_map entry " + nameText(name) + " names " +
                  nameText(f) + ", not a file in the index's directory");
    index.weightMap[name] = f;
  }
  if (const json::Value *meta = root->get("metadata"))
    index.metadataJson = json::write(*meta);
  return index;
}

const Checkpoint::TensorRef *Checkpoint::find(std::string_view name) const {
  auto it = byName.find(name);
  return it == byName.end() ? nullptr : &it->second;
}

const uint8_t *Checkpoint::data(const TensorRef &t) const {
  if (t.shard && !t.shard->memory.empty())
    return t.shard->memory[size_t(t.info - t.shard->readHeader.tensors.data())];
  if (t.shard && t.shard->zip)
    return t.shard->zip->bytes() + t.shard->readHeader.dataStart +
           t.info->dataBegin;
  return t.shard && t.shard->file ? t.shard->file->data(*t.info) : nullptr;
}

bool Checkpoint::addShard(const std::string &path, bool headersOnly,
                          std::string &error) {
  auto shard = std::make_unique<Shard>();
  shard->path = path;
  uint8_t magic[4] = {0, 0, 0, 0};
  {
    FdGuard guard;
    uint64_t size = 0;
    if (!openRegular(path, guard, size, error))
      return false;
    if (size >= 4 && !preadAll(guard.fd, magic, 4, 0)) {
      error = path + ": cannot read: " + errnoText();
      return false;
    }
  }
  bool isTorch =
      path.size() >= 3 && path.compare(path.size() - 3, 3, ".pt") == 0;
  if (isTorch || std::memcmp(magic, "PK\x03\x04", 4) == 0) {
    std::optional<TorchStateDict> torch = readTorchStateDict(path, error);
    if (!torch)
      return false;
    shard->zip = std::move(torch->zip);
    shard->readHeader = std::move(torch->header);
  } else if (headersOnly) {
    std::optional<SafetensorsHeader> h = readSafetensorsHeader(path, error);
    if (!h)
      return false;
    shard->readHeader = std::move(*h);
  } else {
    shard->file = SafetensorsFile::open(path, error);
    if (!shard->file)
      return false;
  }
  for (const TensorInfo &t : shard->header().tensors) {
    auto [it, inserted] = byName.emplace(t.name, TensorRef{shard.get(), &t});
    if (!inserted) {
      error = path + ": tensor " + nameText(t.name) + " is also in " +
              it->second.shard->path;
      return false;
    }
  }
  shardList.push_back(std::move(shard));
  return true;
}

bool Checkpoint::openIndex(const std::string &indexPath, const std::string &dir,
                           bool headersOnly, std::string &error) {
  std::optional<CheckpointIndex> index = readCheckpointIndex(indexPath, error);
  if (!index)
    return false;
  std::set<std::string> files;
  for (const auto &entry : index->weightMap)
    files.insert(entry.second);
  for (const std::string &f : files)
    if (!addShard(dir + "/" + f, headersOnly, error))
      return false;
  auto fail = [&](const std::string &message) {
    error = indexPath + ": " + message;
    return false;
  };
  for (const auto &[name, ref] : byName) {
    auto it = index->weightMap.find(name);
    std::string file = ref.shard->path.substr(dir.size() + 1);
    if (it == index->weightMap.end())
      return fail("shard " + nameText(file) + " holds tensor " +
                  nameText(name) + ", which the weight_map does not list");
    if (it->second != file)
      return fail("weight_map places tensor " + nameText(name) + " in " +
                  nameText(it->second) + " but it is in " + nameText(file));
  }
  for (const auto &[name, file] : index->weightMap)
    if (!byName.count(name))
      return fail("weight_map places tensor " + nameText(name) + " in " +
                  nameText(file) + ", which does not hold it");
  return true;
}

std::unique_ptr<Checkpoint> Checkpoint::open(const std::string &path,
                                             std::string &error,
                                             bool headersOnly) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    error = path + ": cannot open: " + errnoText();
    return nullptr;
  }
  std::unique_ptr<Checkpoint> ckpt(new Checkpoint());
  auto exists = [](const std::string &p) {
    struct stat s;
    return ::stat(p.c_str(), &s) == 0 && S_ISREG(s.st_mode);
  };
  auto endsWith = [](const std::string &s, std::string_view suffix) {
    return s.size() >= suffix.size() &&
           s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
  };

  if (!S_ISDIR(st.st_mode)) {
    bool ok;
    if (endsWith(path, ".json")) {
      size_t slash = path.rfind('/');
      std::string dir =
          slash == std::string::npos ? "." : path.substr(0, slash);
      ok = ckpt->openIndex(path, dir, headersOnly, error);
    } else {
      ok = ckpt->addShard(path, headersOnly, error);
    }
    return ok ? std::move(ckpt) : nullptr;
  }

  std::string dir = path;
  while (dir.size() > 1 && dir.back() == '/')
    dir.pop_back();
  std::string index = dir + "/model.safetensors.index.json";
  if (exists(index))
    return ckpt->openIndex(index, dir, headersOnly, error) ? std::move(ckpt)
                                                           : nullptr;
  std::string single = dir + "/model.safetensors";
  if (exists(single))
    return ckpt->addShard(single, headersOnly, error) ? std::move(ckpt)
                                                      : nullptr;

  std::vector<std::string> files;
  DIR *d = ::opendir(dir.c_str());
  if (!d) {
    error = path + ": cannot read the directory: " + errnoText();
    return nullptr;
  }
  while (const dirent *entry = ::readdir(d)) {
    std::string name = entry->d_name;
    if (endsWith(name, ".safetensors") && exists(dir + "/" + name))
      files.push_back(name);
  }
  ::closedir(d);
  if (files.empty()) {
    error = path + ": no model.safetensors.index.json, model.safetensors or "
                   "*.safetensors file in the directory";
    return nullptr;
  }
  std::sort(files.begin(), files.end());
  for (std::string &f : files)
    f = dir + "/" + f;
  return openFiles(files, error, headersOnly);
}

std::unique_ptr<Checkpoint>
Checkpoint::inMemory(std::string what, const std::vector<MemoryTensor> &tensors,
                     std::string &error) {
  std::unique_ptr<Checkpoint> ckpt(new Checkpoint());
  auto shard = std::make_unique<Shard>();
  shard->path = std::move(what);
  SafetensorsHeader &h = shard->readHeader;
  for (const MemoryTensor &t : tensors) {
    TensorInfo info;
    info.name = t.name;
    info.dtype = t.dtype;
    info.shape = t.shape;
    std::optional<uint64_t> bytes = tensorBytes(t.shape, t.dtype);
    if (!bytes || std::any_of(t.shape.begin(), t.shape.end(),
                              [](int64_t d) { return d < 0; })) {
      error = shard->path + ": tensor " + nameText(t.name) + " of shape " +
              shapeText(t.shape) + " has no size";
      return nullptr;
    }
    info.dataEnd = *bytes;
    h.tensors.push_back(std::move(info));
    shard->memory.push_back(static_cast<const uint8_t *>(t.data));
  }
  for (const TensorInfo &t : h.tensors) {
    if (!ckpt->byName.emplace(t.name, TensorRef{shard.get(), &t}).second) {
      error = shard->path + ": tensor " + nameText(t.name) + " is given twice";
      return nullptr;
    }
    h.indexByName[t.name] = size_t(&t - h.tensors.data());
  }
  // A shard of no tensors reads as one without memory: nothing to address.
  ckpt->shardList.push_back(std::move(shard));
  return ckpt;
}

std::unique_ptr<Checkpoint>
Checkpoint::openFiles(const std::vector<std::string> &paths,
                      std::string &error, bool headersOnly) {
  std::unique_ptr<Checkpoint> ckpt(new Checkpoint());
  for (const std::string &p : paths)
    if (!ckpt->addShard(p, headersOnly, error))
      return nullptr;
  return ckpt;
}
