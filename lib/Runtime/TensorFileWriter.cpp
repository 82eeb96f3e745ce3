//===- TensorFileWriter.cpp - Writing tensor files, streamed --------------===//

#include "mdl/Runtime/TensorFileWriter.h"
#include "TensorFileText.h"
#include "mdl/Runtime/WorkerPool.h"
#include "mdl/Runtime/Zip.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <limits>
#include <mutex>

#include <fcntl.h>
#include <unistd.h>

using namespace mdl;
using namespace mdl::rt;
using namespace mdl::rt::detail;

bool TensorFileWriter::addEntry(Entry e, std::string &error) {
  const std::string &name = e.name;
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
  for (int64_t d : e.shape)
    if (d < 0) {
      error =
          what + " shape " + shapeText(e.shape) + " has a negative dimension";
      return false;
    }
  std::optional<uint64_t> bytes = tensorBytes(e.shape, e.dtype);
  if (!bytes) {
    error = what + " shape " + shapeText(e.shape) +
            " is too large: its size overflows 64 bits";
    return false;
  }
  if (!e.fill && !e.data && *bytes != 0) {
    error = what + " has no data";
    return false;
  }
  e.size = *bytes;
  std::string key = name;
  entries.emplace(std::move(key), std::move(e));
  return true;
}

bool TensorFileWriter::add(std::string name, DType dtype,
                           std::vector<int64_t> shape, const void *data,
                           std::string &error) {
  Entry e;
  e.name = std::move(name);
  e.dtype = dtype;
  e.shape = std::move(shape);
  e.data = data;
  return addEntry(std::move(e), error);
}

bool TensorFileWriter::add(std::string name, DType dtype,
                           std::vector<int64_t> shape, FillFn fill,
                           std::string &error) {
  Entry e;
  e.name = std::move(name);
  e.dtype = dtype;
  e.shape = std::move(shape);
  e.fill = std::move(fill);
  return addEntry(std::move(e), error);
}

bool TensorFileWriter::add(std::string name, DType dtype,
                           std::vector<int64_t> shape, FillFn fill,
                           SourceFn source, std::string &error) {
  Entry e;
  e.name = std::move(name);
  e.dtype = dtype;
  e.shape = std::move(shape);
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
    uint64_t size = r.entry->size;
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
        uint64_t from = std::max(lo, starts[i]),
                 to = std::min(hi, starts[i + 1]);
        for (uint64_t at = from; at < to;) {
          size_t n = size_t(to - at), element = byteSize(e->dtype);
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
            std::memcpy(
                dst, static_cast<const uint8_t *>(e->data) + (at - starts[i]),
                n);
          else if (!e->fill(at - starts[i], dst, n, fillError))
            return fail(path + ": tensor " + nameText(e->name) + ": " +
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
