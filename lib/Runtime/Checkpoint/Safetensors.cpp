//===- Safetensors.cpp - Reading safetensors files ------------------------===//

#include "mdl/Runtime/Checkpoint/Safetensors.h"
#include "Checkpoint/TensorFileText.h"
#include "mdl/Runtime/Base/DType.h"
#include "mdl/Runtime/Base/File.h"
#include "mdl/Runtime/Base/Json.h"

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <limits>

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

using namespace mdl;
using namespace mdl::rt;
using namespace mdl::rt::detail;

namespace {

std::string rangeText(uint64_t begin, uint64_t end) {
  return "[" + std::to_string(begin) + ", " + std::to_string(end) + "]";
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

int64_t TensorInfo::numElements() const { return mdl::numElements(shape); }

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
