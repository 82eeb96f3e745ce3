//===- TorchCheckpointWriter.cpp - PyTorch zip checkpoints, written -------===//

#include "mdl/Runtime/Convert/TorchCheckpointWriter.h"
#include "Convert/PickleOut.h"
#include "mdl/Runtime/Checkpoint/TorchCheckpoint.h"
#include "mdl/Runtime/Checkpoint/Zip.h"

#include <cerrno>
#include <cstring>
#include <limits>
#include <map>

using namespace mdl;
using namespace mdl::rt;
using mdl::rt::detail::PickleOut;

namespace {

/// The archive name torch uses: the file's name without directory and
/// extension.
std::string archiveName(const std::string &path) {
  size_t slash = path.rfind('/');
  std::string base = slash == std::string::npos ? path : path.substr(slash + 1);
  size_t dot = base.find('.');
  base = base.substr(0, dot);
  return base.empty() ? "archive" : base;
}

} // namespace

//===----------------------------------------------------------------------===//
// Writer
//===----------------------------------------------------------------------===//

void TorchCheckpointWriter::setStateDicts(std::vector<std::string> keys,
                                          bool prefixed) {
  dictKeys = std::move(keys);
  dictPrefixed = prefixed;
}

void TorchCheckpointWriter::setInt(std::string key, int64_t value) {
  ints.emplace_back(std::move(key), value);
}

bool TorchCheckpointWriter::write(const std::string &path,
                                  std::string &error) const {
  // Each tensor's state dict, in the order of the keys.
  std::vector<std::vector<std::pair<std::string, const Entry *>>> dicts(
      dictKeys.size());
  for (const auto &[name, e] : entries) {
    size_t k = 0;
    std::string inDict = name;
    if (dictPrefixed) {
      while (k < dictKeys.size() &&
             name.compare(0, dictKeys[k].size() + 1, dictKeys[k] + ".") != 0)
        ++k;
      if (k == dictKeys.size()) {
        error = path + ": tensor '" + name + "' belongs to no state dict";
        return false;
      }
      inDict = name.substr(dictKeys[k].size() + 1);
    }
    if (dicts.empty()) {
      error = path + ": no state dict to hold tensor '" + name + "'";
      return false;
    }
    dicts[k].emplace_back(std::move(inDict), &e);
  }

  // The pickle: {key: OrderedDict(name: tensor, ...), ..., key: int, ...},
  // tensors keyed by their storage's number in file order.
  PickleOut p;
  std::vector<const Entry *> order;
  p.op('}');
  p.op('(');
  for (size_t k = 0; k < dictKeys.size(); ++k) {
    p.string(dictKeys[k]);
    p.orderedDict();
    p.op('(');
    for (const auto &[name, e] : dicts[k]) {
      std::vector<int64_t> strides(e->shape.size(), 1);
      int64_t numel = 1;
      for (size_t d = e->shape.size(); d-- > 0;) {
        strides[d] = numel;
        numel *= e->shape[d];
      }
      p.string(name);
      p.global("torch._utils", "_rebuild_tensor_v2");
      p.op('(');
      p.op('(');
      p.string("storage");
      p.global("torch", torchStorageClass(e->dtype));
      p.string(std::to_string(order.size()));
      p.string("cpu");
      p.integer(numel);
      p.op('t');
      p.op('Q'); // BINPERSID
      p.integer(0);
      p.tuple(e->shape);
      p.tuple(strides);
      p.op('\x89'); // requires_grad False
      p.orderedDict(); // backward hooks
      p.op('t');
      p.op('R');
      order.push_back(e);
    }
    p.op('u');
  }
  for (const auto &[key, value] : ints) {
    p.string(key);
    p.integer(value);
  }
  // The metadata (the rank record) as a dict of strings under kTorchMetadataKey,
  // which Megatron's loader ignores.
  if (!meta.empty()) {
    p.string(kTorchMetadataKey);
    p.op('}');
    p.op('(');
    for (const auto &[key, value] : meta) {
      p.string(key);
      p.string(value);
    }
    p.op('u');
  }
  p.op('u');
  p.op('.');

  // The archive: data.pkl, byteorder, the storages, version.
  std::string archive = archiveName(path) + "/";
  const std::string byteorder = "little", version = "3\n";
  ZipLayout zip;
  zip.add(archive + "data.pkl", p.bytes.size());
  zip.add(archive + "byteorder", byteorder.size());
  std::vector<Region> regions;
  for (size_t i = 0; i < order.size(); ++i) {
    size_t entry =
        zip.add(archive + "data/" + std::to_string(i), order[i]->size);
    regions.push_back({order[i], zip.dataOffset(entry), true});
  }
  size_t versionEntry = zip.add(archive + "version", version.size());
  auto headers = [&](const std::vector<uint32_t> &regionCrcs) {
    std::vector<uint32_t> crcs;
    crcs.push_back(crc32(0, reinterpret_cast<const uint8_t *>(p.bytes.data()),
                         p.bytes.size()));
    crcs.push_back(crc32(0, reinterpret_cast<const uint8_t *>(byteorder.data()),
                         byteorder.size()));
    crcs.insert(crcs.end(), regionCrcs.begin(), regionCrcs.end());
    crcs.push_back(crc32(0, reinterpret_cast<const uint8_t *>(version.data()),
                         version.size()));
    std::vector<std::pair<uint64_t, std::string>> out;
    for (size_t i = 0; i < crcs.size(); ++i)
      out.emplace_back(zip.headerOffset(i), zip.localHeader(i, crcs[i]));
    out.emplace_back(zip.dataOffset(0), p.bytes);
    out.emplace_back(zip.dataOffset(1), byteorder);
    out.emplace_back(zip.dataOffset(versionEntry), version);
    out.emplace_back(zip.endOfData(), zip.centralDirectory(crcs));
    return out;
  };
  return stream(path, regions, headers, error);
}
