//===- Zip.cpp - Stored zip archives, as PyTorch writes them --------------===//

#include "mdl/Runtime/Checkpoint/Zip.h"

#include <cerrno>
#include <cstring>
#include <limits>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

using namespace mdl;
using namespace mdl::rt;

//===----------------------------------------------------------------------===//
// CRC-32
//===----------------------------------------------------------------------===//

namespace {

/// The reflected polynomial of CRC-32.
constexpr uint32_t kPoly = 0xedb88320u;

/// Tables for eight bytes at a time: table[k][b] is the CRC of byte b
/// followed by k zero bytes.
struct CrcTables {
  uint32_t t[8][256];
  CrcTables() {
    for (uint32_t b = 0; b < 256; ++b) {
      uint32_t c = b;
      for (int k = 0; k < 8; ++k)
        c = c & 1 ? (c >> 1) ^ kPoly : c >> 1;
      t[0][b] = c;
    }
    for (uint32_t b = 0; b < 256; ++b)
      for (int k = 1; k < 8; ++k)
        t[k][b] = (t[k - 1][b] >> 8) ^ t[0][t[k - 1][b] & 0xff];
  }
};
const CrcTables kCrc;

/// a(x) * b(x) modulo the polynomial, both reflected.
uint32_t multiplyModP(uint32_t a, uint32_t b) {
  uint32_t product = 0;
  for (uint32_t bit = 1u << 31; bit; bit >>= 1) {
    if (a & bit)
      product ^= b;
    b = b & 1 ? (b >> 1) ^ kPoly : b >> 1;
  }
  return product;
}

/// x^(8 n) modulo the polynomial: the operator that appends n zero bytes.
uint32_t zeroBytesOperator(uint64_t n) {
  // x^(2^k) for k = 3.. by squaring, multiplied in for each bit of n.
  uint32_t power = 1u << 31; // x^0
  uint32_t square = 1u << 23; // x^8
  for (; n; n >>= 1) {
    if (n & 1)
      power = multiplyModP(square, power);
    square = multiplyModP(square, square);
  }
  return power;
}

} // namespace

uint32_t mdl::rt::crc32(uint32_t crc, const uint8_t *p, size_t n) {
  crc = ~crc;
  for (; n >= 8; n -= 8, p += 8) {
    uint32_t lo, hi;
    std::memcpy(&lo, p, 4);
    std::memcpy(&hi, p + 4, 4);
    lo ^= crc; // little-endian hosts only, as the rest of the runtime
    crc = kCrc.t[7][lo & 0xff] ^ kCrc.t[6][(lo >> 8) & 0xff] ^
          kCrc.t[5][(lo >> 16) & 0xff] ^ kCrc.t[4][lo >> 24] ^
          kCrc.t[3][hi & 0xff] ^ kCrc.t[2][(hi >> 8) & 0xff] ^
          kCrc.t[1][(hi >> 16) & 0xff] ^ kCrc.t[0][hi >> 24];
  }
  for (; n; --n, ++p)
    crc = (crc >> 8) ^ kCrc.t[0][(crc ^ *p) & 0xff];
  return ~crc;
}

uint32_t mdl::rt::crc32Combine(uint32_t crcA, uint32_t crcB,
                               uint64_t lengthB) {
  return multiplyModP(zeroBytesOperator(lengthB), crcA) ^ crcB;
}

//===----------------------------------------------------------------------===//
// Writing
//===----------------------------------------------------------------------===//

namespace {

constexpr uint32_t kLocalSig = 0x04034b50, kCentralSig = 0x02014b50,
                   kEndSig = 0x06054b50, kEnd64Sig = 0x06064b50,
                   kLocator64Sig = 0x07064b50;
constexpr uint64_t kMax32 = 0xffffffffu;
constexpr uint16_t kZip64Tag = 0x0001, kPadTag = 0x4246; // "FB"

void put16(std::string &s, uint64_t v) {
  s += char(v & 0xff);
  s += char((v >> 8) & 0xff);
}
void put32(std::string &s, uint64_t v) {
  put16(s, v & 0xffff);
  put16(s, (v >> 16) & 0xffff);
}
void put64(std::string &s, uint64_t v) {
  put32(s, v & kMax32);
  put32(s, v >> 32);
}

/// The zip64 extra field of a local header (both sizes) when the entry
/// needs one.
std::string localZip64(uint64_t size) {
  std::string s;
  if (size < kMax32)
    return s;
  put16(s, kZip64Tag);
  put16(s, 16);
  put64(s, size);
  put64(s, size);
  return s;
}

} // namespace

size_t ZipLayout::add(std::string name, uint64_t size, uint64_t align) {
  Entry e;
  e.name = std::move(name);
  e.size = size;
  e.header = end;
  // The padding field's own 4 bytes come before its padding.
  uint64_t start = end + 30 + e.name.size() + localZip64(size).size() + 4;
  uint64_t pad = align > 1 ? (align - start % align) % align : 0;
  e.data = start + pad;
  end = e.data + size;
  entries.push_back(std::move(e));
  return entries.size() - 1;
}

std::string ZipLayout::localHeader(size_t entry, uint32_t crc) const {
  const Entry &e = entries[entry];
  std::string zip64 = localZip64(e.size);
  uint64_t fixed = e.header + 30 + e.name.size() + zip64.size() + 4;
  std::string s;
  put32(s, kLocalSig);
  put16(s, zip64.empty() ? 20 : 45); // version needed
  put16(s, 0);                       // flags
  put16(s, 0);                       // stored
  put16(s, 0);                       // time
  put16(s, 0);                       // date
  put32(s, crc);
  put32(s, zip64.empty() ? e.size : kMax32);
  put32(s, zip64.empty() ? e.size : kMax32);
  put16(s, e.name.size());
  put16(s, zip64.size() + 4 + (e.data - fixed));
  s += e.name;
  s += zip64;
  put16(s, kPadTag);
  put16(s, e.data - fixed);
  s.append(size_t(e.data - fixed), 'Z');
  return s;
}

uint64_t ZipLayout::endOfData() const { return end; }

std::string ZipLayout::centralDirectory(
    const std::vector<uint32_t> &crcs) const {
  std::string s;
  for (size_t i = 0; i < entries.size(); ++i) {
    const Entry &e = entries[i];
    bool bigSize = e.size >= kMax32, bigOffset = e.header >= kMax32;
    std::string zip64;
    if (bigSize || bigOffset) {
      std::string fields;
      if (bigSize) {
        put64(fields, e.size);
        put64(fields, e.size);
      }
      if (bigOffset)
        put64(fields, e.header);
      put16(zip64, kZip64Tag);
      put16(zip64, fields.size());
      zip64 += fields;
    }
    put32(s, kCentralSig);
    put16(s, 45); // made by
    put16(s, zip64.empty() ? 20 : 45);
    put16(s, 0);
    put16(s, 0);
    put16(s, 0);
    put16(s, 0);
    put32(s, i < crcs.size() ? crcs[i] : 0);
    put32(s, bigSize ? kMax32 : e.size);
    put32(s, bigSize ? kMax32 : e.size);
    put16(s, e.name.size());
    put16(s, zip64.size());
    put16(s, 0); // comment
    put16(s, 0); // disk
    put16(s, 0); // internal attributes
    put32(s, 0); // external attributes
    put32(s, bigOffset ? kMax32 : e.header);
    s += e.name;
    s += zip64;
  }
  uint64_t cdSize = s.size(), cdOffset = end, count = entries.size();
  bool zip64 = count >= 0xffff || cdSize >= kMax32 || cdOffset >= kMax32;
  if (zip64) {
    uint64_t record = cdOffset + cdSize;
    put32(s, kEnd64Sig);
    put64(s, 44);
    put16(s, 45);
    put16(s, 45);
    put32(s, 0);
    put32(s, 0);
    put64(s, count);
    put64(s, count);
    put64(s, cdSize);
    put64(s, cdOffset);
    put32(s, kLocator64Sig);
    put32(s, 0);
    put64(s, record);
    put32(s, 1);
  }
  put32(s, kEndSig);
  put16(s, 0);
  put16(s, 0);
  put16(s, zip64 ? 0xffff : count);
  put16(s, zip64 ? 0xffff : count);
  put32(s, zip64 ? kMax32 : cdSize);
  put32(s, zip64 ? kMax32 : cdOffset);
  put16(s, 0);
  return s;
}

//===----------------------------------------------------------------------===//
// Reading
//===----------------------------------------------------------------------===//

namespace {

uint64_t get(const uint8_t *p, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i)
    v = (v << 8) | p[i];
  return v;
}

} // namespace

const ZipFile::Entry *ZipFile::find(std::string_view name) const {
  auto it = byName.find(name);
  return it == byName.end() ? nullptr : &it->second;
}

bool ZipFile::verify(const Entry &e, std::string &error) const {
  uint32_t crc = crc32(0, data(e), size_t(e.size));
  if (crc == e.crc)
    return true;
  error = filePath + ": entry '" + e.name + "' is corrupt (CRC-32 mismatch)";
  return false;
}

MappedFile::~MappedFile() {
  if (base)
    ::munmap(const_cast<uint8_t *>(base), size_t(length));
}

std::shared_ptr<MappedFile> MappedFile::open(const std::string &path,
                                             std::string &error) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    error = path + ": cannot open: " + std::strerror(errno);
    return nullptr;
  }
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    error = path + ": not a regular file";
    ::close(fd);
    return nullptr;
  }
  std::shared_ptr<MappedFile> f(new MappedFile());
  f->filePath = path;
  f->length = uint64_t(st.st_size);
  if (f->length > 0) {
    void *map =
        ::mmap(nullptr, size_t(f->length), PROT_READ, MAP_PRIVATE, fd, 0);
    if (map == MAP_FAILED) {
      error = path + ": cannot map into memory: " + std::strerror(errno);
      ::close(fd);
      return nullptr;
    }
    f->base = static_cast<const uint8_t *>(map);
  }
  ::close(fd);
  return f;
}

std::unique_ptr<ZipFile> ZipFile::open(const std::string &path,
                                       std::string &error) {
  std::shared_ptr<MappedFile> file = MappedFile::open(path, error);
  if (!file)
    return nullptr;
  uint64_t size = file->size();
  return openWindow(std::move(file), 0, size, path, error);
}

std::unique_ptr<ZipFile> ZipFile::openWindow(std::shared_ptr<MappedFile> file,
                                             uint64_t offset, uint64_t length,
                                             std::string what,
                                             std::string &error) {
  if (offset > file->size() || length > file->size() - offset) {
    error = what + ": runs past the end of " + file->path() + " (bytes " +
            std::to_string(offset) + " to " + std::to_string(offset + length) +
            " of " + std::to_string(file->size()) + ")";
    return nullptr;
  }
  std::unique_ptr<ZipFile> z(new ZipFile());
  z->filePath = std::move(what);
  z->size = length;
  z->window = offset;
  z->base = file->bytes() + offset;
  z->mapping = std::move(file);
  if (z->size < 22) {
    error = z->filePath + ": not a zip archive (" + std::to_string(z->size) +
            " bytes, no end of central directory record)";
    return nullptr;
  }
  if (!z->readDirectory(error))
    return nullptr;
  return z;
}

bool ZipFile::readDirectory(std::string &error) {
  auto fail = [&](const std::string &message) {
    error = filePath + ": " + message;
    return false;
  };
  // The end record: its signature within the last 64 KiB + 22 bytes.
  uint64_t eocd = kMax32 + uint64_t(1);
  for (uint64_t at = size - 22;; --at) {
    if (get(base + at, 4) == kEndSig && at + 22 + get(base + at + 20, 2) == size) {
      eocd = at;
      break;
    }
    if (at == 0 || size - at > 22 + 0xffff)
      break;
  }
  if (eocd > size)
    return fail("not a zip archive, or truncated (no end of central "
                "directory record)");
  uint64_t count = get(base + eocd + 10, 2), cdSize = get(base + eocd + 12, 4),
           cdOffset = get(base + eocd + 16, 4);
  if (eocd >= 20 && get(base + eocd - 20, 4) == kLocator64Sig) {
    uint64_t record = get(base + eocd - 12, 8);
    if (record > eocd - 20 || eocd - 20 - record < 56 ||
        get(base + record, 4) != kEnd64Sig)
      return fail("the zip64 end record is missing or corrupt");
    count = get(base + record + 32, 8);
    cdSize = get(base + record + 40, 8);
    cdOffset = get(base + record + 48, 8);
  }
  if (cdOffset > size || cdSize > size - cdOffset || cdOffset + cdSize > eocd)
    return fail("the central directory runs past the end of the file "
                "(truncated?)");
  if (count > cdSize / 46)
    return fail("the central directory cannot hold " + std::to_string(count) +
                " entries");
  uint64_t at = cdOffset, cdEnd = cdOffset + cdSize;
  for (uint64_t i = 0; i < count; ++i) {
    if (cdEnd - at < 46 || get(base + at, 4) != kCentralSig)
      return fail("central directory entry " + std::to_string(i) +
                  " is corrupt");
    const uint8_t *h = base + at;
    uint64_t method = get(h + 10, 2), nameLen = get(h + 28, 2),
             extraLen = get(h + 30, 2), commentLen = get(h + 32, 2);
    if (cdEnd - at - 46 < nameLen + extraLen + commentLen)
      return fail("central directory entry " + std::to_string(i) +
                  " is corrupt");
    Entry e;
    e.name.assign(reinterpret_cast<const char *>(h + 46), size_t(nameLen));
    e.crc = uint32_t(get(h + 16, 4));
    uint64_t compressed = get(h + 20, 4), plain = get(h + 24, 4),
             local = get(h + 42, 4);
    // The zip64 field holds, in order, those of the three that overflow.
    for (const uint8_t *x = h + 46 + nameLen, *xEnd = x + extraLen;
         xEnd - x >= 4;) {
      uint64_t tag = get(x, 2), len = get(x + 2, 2);
      if (uint64_t(xEnd - x - 4) < len)
        break;
      if (tag == kZip64Tag) {
        const uint8_t *f = x + 4, *fEnd = f + len;
        for (uint64_t *v : {&plain, &compressed, &local})
          if (*v == kMax32 && fEnd - f >= 8) {
            *v = get(f, 8);
            f += 8;
          }
      }
      x += 4 + len;
    }
    std::string what = "entry '" + e.name + "'";
    if (method != 0 || compressed != plain)
      return fail(what + " is compressed; only stored entries are read");
    if (local > size || size - local < 30 || get(base + local, 4) != kLocalSig)
      return fail(what + ": its local header is missing (truncated?)");
    e.data = local + 30 + get(base + local + 26, 2) + get(base + local + 28, 2);
    e.size = plain;
    if (e.data > size || e.size > size - e.data)
      return fail(what + " runs past the end of the file (truncated?)");
    std::string name = e.name;
    if (!byName.emplace(std::move(name), std::move(e)).second)
      return fail(what + " is in the archive twice");
    at += 46 + nameLen + extraLen + commentLen;
  }
  return true;
}
