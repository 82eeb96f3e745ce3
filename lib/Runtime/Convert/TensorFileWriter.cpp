//===- TensorFileWriter.cpp - Writing tensor files, streamed --------------===//

#include "mdl/Runtime/Convert/TensorFileWriter.h"
#include "Checkpoint/TensorFileText.h"
#include "mdl/Runtime/Base/File.h"
#include "mdl/Runtime/Convert/WorkerPool.h"
#include "mdl/Runtime/Checkpoint/Zip.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <mutex>

#include <fcntl.h>
#include <sys/mman.h>
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

/// What direct I/O asks of file offsets, lengths and memory: a page, which
/// covers the logical block size of common disks, and keeps a page of the
/// page cache from being written both ways.
constexpr uint64_t kDirectAlign = 4096;

/// The file being written: a temporary that is removed unless committed.
/// Writes are positional, so that threads can write disjoint ranges.
class TempFile {
public:
  explicit TempFile(std::string target)
      : target(std::move(target)),
        temp(this->target + ".tmp." + std::to_string(::getpid())) {}
  ~TempFile() {
    if (directFd >= 0)
      ::close(directFd);
    if (fd >= 0)
      ::close(fd);
    if (created && !committed)
      ::unlink(temp.c_str());
  }

  /// Creates the temporary; with `direct`, also opens it for direct I/O
  /// where the file system allows.
  bool create(bool direct, std::string &error) {
    fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    if (fd < 0)
      return fail("cannot create temporary file '" + temp + "'", error);
    created = true;
#ifdef O_DIRECT
    if (direct)
      directFd = ::open(temp.c_str(), O_WRONLY | O_DIRECT | O_CLOEXEC);
#endif
    useDirect = directFd >= 0;
    return true;
  }

  /// Allocates the file's blocks up to `size` (best effort: not every file
  /// system can): direct writes into allocated blocks do not extend the
  /// file, and run side by side.
  void reserve(uint64_t size) const {
#ifdef __linux__
    if (size)
      ::fallocate(fd, 0, 0, off_t(size));
#endif
  }

  /// Whether writes go to the disk directly (see writeAt()).
  bool direct() const { return useDirect; }

  /// Writes `n` bytes at file offset `offset`. Safe to call from several
  /// threads for disjoint ranges. With direct I/O, the whole pages of the
  /// range go from `src` to the disk, bypassing the page cache, when `src`
  /// is aligned like the file offset; the partial pages at either end (and
  /// unaligned ranges) go through the page cache. A page is thus written
  /// one way only: whole pages lie in one range, ranges are disjoint.
  bool writeAt(uint64_t offset, const uint8_t *src, size_t n,
               std::string &error) const {
    uint64_t head = std::min<uint64_t>(n, -offset % kDirectAlign);
    uint64_t middle = (n - head) / kDirectAlign * kDirectAlign;
    if (useDirect && middle &&
        (reinterpret_cast<uintptr_t>(src) + head) % kDirectAlign == 0) {
      size_t done = writeDirect(offset + head, src + head, size_t(middle));
      if (done == middle)
        return writeCached(offset, src, size_t(head), error) &&
               writeCached(offset + head + middle, src + head + middle,
                           size_t(n - head - middle), error);
      // The file system refused: the rest goes through the page cache.
      return writeCached(offset, src, size_t(head), error) &&
             writeCached(offset + head + done, src + head + done,
                         size_t(n - head - done), error);
    }
    return writeCached(offset, src, n, error);
  }

  /// Writes through the page cache, which the kernel writes back.
  bool writeCached(uint64_t offset, const uint8_t *src, size_t n,
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
#endif
    return done;
  }

  /// Syncs, closes and renames over the target.
  bool commit(std::string &error) {
    if (directFd >= 0)
      ::close(std::exchange(directFd, -1));
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
  /// Writes whole pages with direct I/O; returns how many bytes it wrote:
  /// fewer, and direct I/O is off for the file, when the file system
  /// refuses (an alignment it does not accept) or fails (the caller then
  /// writes the rest through the page cache, which reports the error).
  size_t writeDirect(uint64_t offset, const uint8_t *src, size_t n) const {
    size_t done = 0;
    while (done < n && useDirect) {
      ssize_t put =
          ::pwrite(directFd, src + done, n - done, off_t(offset + done));
      if (put < 0 && errno == EINTR)
        continue;
      if (put <= 0 || put % kDirectAlign) {
        useDirect = false;
        done += put > 0 ? size_t(put) : 0;
        break;
      }
      done += size_t(put);
    }
    return done;
  }

  bool fail(const std::string &what, std::string &error) const {
    error = target + ": " + what + ": " + errnoText();
    return false;
  }

  std::string target, temp;
  int fd = -1, directFd = -1;
  mutable std::atomic<bool> useDirect{false};
  bool created = false, committed = false;
};

/// Lets at most `n` threads fill chunks at once (C++17 has no counting
/// semaphore).
class FillSlots {
public:
  explicit FillSlots(unsigned n) : available(n) {}

  /// A slot held while it lives, or until release().
  class Held {
  public:
    explicit Held(FillSlots &slots) : slots(&slots) {
      std::unique_lock<std::mutex> lock(slots.mutex);
      slots.freed.wait(lock, [&] { return slots.available > 0; });
      --slots.available;
    }
    Held(const Held &) = delete;
    Held &operator=(const Held &) = delete;
    ~Held() { release(); }
    void release() {
      if (!slots)
        return;
      {
        std::lock_guard<std::mutex> lock(slots->mutex);
        ++slots->available;
      }
      slots->freed.notify_one();
      slots = nullptr;
    }

  private:
    FillSlots *slots;
  };

private:
  std::mutex mutex;
  std::condition_variable freed;
  unsigned available;
};

/// The data section is written in chunks of this many bytes (a multiple of
/// every element size), each filled in one buffer and written with one call.
constexpr uint64_t kChunkSize = uint64_t(4) << 20;

/// Allocates a chunk buffer of `size` bytes, for direct I/O made of huge
/// pages where the system gives them (transparent huge pages on request):
/// the disk then gets a few large segments per write instead of one per
/// page, which saves requests and their interrupts (in bench/convert, a
/// third of the wall time and of the CPU). Freed with std::free.
uint8_t *allocateChunkBuffer(size_t size, bool direct) {
  constexpr size_t kHugePage = size_t(2) << 20;
  if (!direct)
    return static_cast<uint8_t *>(std::malloc(size));
  size = (size + kHugePage - 1) / kHugePage * kHugePage;
  auto *buffer = static_cast<uint8_t *>(std::aligned_alloc(kHugePage, size));
#ifdef MADV_HUGEPAGE
  if (buffer)
    ::madvise(buffer, size, MADV_HUGEPAGE); // a hint: may be refused
#endif
  return buffer;
}

} // namespace

void TensorFileWriter::setDirectIO(bool on) { directIO = on; }

void TensorFileWriter::setThreads(unsigned n) {
  numThreads = std::max(1u, std::min(n, 256u));
}

void TensorFileWriter::setWaitingWrites(unsigned n) {
  waitingWrites = std::min(n, 1024u);
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
  if (!out.create(directIO, error))
    return false;
  if (out.direct() && !regions.empty())
    out.reserve(regions.back().fileOffset + regions.back().entry->size);
  // Chunks are taken in order by the workers; a chunk may hold the ends of
  // several tensors. One worker fills each tensor in order. The CRC-32 of
  // what each chunk holds of a region, to be combined in order.
  struct CrcPiece {
    size_t region;
    uint64_t length;
    uint32_t crc;
  };
  // Chunk boundaries fall on page boundaries of the file where the data is
  // contiguous there (always in safetensors), so that no page is split
  // between two chunks' writes: the first chunk is shorter by `skew`.
  uint64_t skew = regions.empty() ? 0 : regions[0].fileOffset % kDirectAlign;
  uint64_t numChunks = total ? (skew + total + kChunkSize - 1) / kChunkSize : 0;
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
  // With direct I/O, each run of bytes that goes out in one write sits in
  // the buffer at an address aligned like its file offset (modulo
  // kDirectAlign): runs after a gap in the file are moved up by less than
  // kDirectAlign, while the buffer has room.
  constexpr size_t kRealignRoom = 64 * kDirectAlign;
  FillSlots fillSlots(numThreads);
  auto work = [&] {
    std::unique_ptr<uint8_t, void (*)(void *)> buffer(
        allocateChunkBuffer(kChunkSize + kRealignRoom + kDirectAlign,
                            out.direct()),
        std::free);
    if (!buffer)
      return fail(path + ": out of memory");
    std::string fillError, writeError;
    for (;;) {
      // Chunks are taken in a slot, so that with one thread they are filled
      // in order.
      FillSlots::Held filling(fillSlots);
      uint64_t c = nextChunk++;
      if (c >= numChunks || failed)
        return;
      uint64_t lo = c ? c * kChunkSize - skew : 0,
               hi = std::min(total, (c + 1) * kChunkSize - skew);
      // The first region that ends after `lo`.
      size_t i = size_t(std::upper_bound(starts.begin(), starts.end(), lo) -
                        starts.begin()) -
                 1;
      const Entry *e = regions[i].entry;
      // A chunk inside one tensor given as bytes goes out from there.
      if (!e->fill && !regions[i].crc && starts[i + 1] >= hi) {
        filling.release();
        if (!out.writeAt(fileOffset(i, lo),
                         static_cast<const uint8_t *>(e->data) +
                             (lo - starts[i]),
                         size_t(hi - lo), writeError))
          return fail(writeError);
        continue;
      }
      // Bytes that are in a file already are read (or, without direct I/O,
      // copied in the kernel) from there; the others are filled into the
      // buffer, which goes out in one write per run between copies and
      // between regions apart in the file. Stream byte `at` is at
      // bufferAt(at).
      size_t shift = 0;
      auto bufferAt = [&](uint64_t at) {
        return buffer.get() + (at - lo) + shift;
      };
      auto alignRun = [&](uint64_t at, uint64_t offset) {
        size_t by = size_t((offset - (at - lo + shift)) % kDirectAlign);
        if (out.direct() && shift + by <= kRealignRoom)
          shift += by;
      };
      alignRun(lo, fileOffset(i, lo));
      uint64_t unwritten = lo; // buffered bytes [unwritten, at) not written
      size_t unwrittenRegion = i;
      auto flush = [&](uint64_t at, size_t next) {
        bool ok = unwritten == at ||
                  out.writeAt(fileOffset(unwrittenRegion, unwritten),
                              bufferAt(unwritten), size_t(at - unwritten),
                              writeError);
        unwritten = at;
        unwrittenRegion = next;
        return ok;
      };
      for (; i < regions.size() && starts[i] < hi; ++i) {
        const Region &r = regions[i];
        e = r.entry;
        if (i > unwrittenRegion &&
            r.fileOffset != fileOffset(i - 1, starts[i])) {
          if (!flush(starts[i], i))
            return fail(writeError);
          alignRun(starts[i], r.fileOffset);
        }
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
          if (inFile && out.direct() &&
              preadAll(fd, bufferAt(at), n, sourceOffset)) {
            at += n;
            continue;
          }
          if (inFile && !out.direct()) {
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
          uint8_t *dst = bufferAt(at);
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
              {i, to - from, crc32(0, bufferAt(from), to - from)});
      }
      filling.release();
      if (!flush(hi, i))
        return fail(writeError);
    }
  };
  // With direct I/O a worker waits for the disk at each write: more
  // workers keep writes in flight while at most numThreads fill.
  unsigned workers = numThreads + (out.direct() ? waitingWrites : 0);
  runWorkers(std::min<uint64_t>(workers, std::max<uint64_t>(numChunks, 1)),
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
