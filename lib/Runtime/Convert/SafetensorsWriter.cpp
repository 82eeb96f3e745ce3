//===- SafetensorsWriter.cpp - Writing safetensors files ------------------===//

#include "mdl/Runtime/Convert/SafetensorsWriter.h"
#include "mdl/Runtime/Base/Json.h"

#include <algorithm>
#include <limits>
#include <map>

using namespace mdl;
using namespace mdl::rt;

bool SafetensorsWriter::write(const std::string &path,
                              std::string &error) const {
  // Data order: larger elements first, so that each tensor is aligned.
  std::vector<const Entry *> order;
  for (const auto &entry : entries)
    order.push_back(&entry.second);
  std::stable_sort(order.begin(), order.end(),
                   [](const Entry *a, const Entry *b) {
                     return byteSize(a->dtype) > byteSize(b->dtype);
                   });
  std::map<std::string_view, uint64_t> begins;
  uint64_t offset = 0;
  for (const Entry *e : order) {
    uint64_t size = e->size;
    if (size > uint64_t(std::numeric_limits<int64_t>::max()) - offset) {
      error = path + ": the tensors' total size overflows 64 bits";
      return false;
    }
    begins[e->name] = offset;
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
              std::string(safetensorsName(e.dtype)) +
              "\",\"shape\":" + shapeText(e.shape) + ",\"data_offsets\":[" +
              std::to_string(begin) + "," + std::to_string(begin + e.size) +
              "]}";
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
    regions.push_back({e, prefix.size() + begins[e->name], false});
  return stream(path, regions,
                [&](const std::vector<uint32_t> &) {
                  return std::vector<std::pair<uint64_t, std::string>>{
                      {0, prefix}};
                },
                error);
}
