//===- DistCheckpointWriter.cpp - PyTorch distributed checkpoints ---------===//

#include "mdl/Runtime/Convert/DistCheckpointWriter.h"
#include "Convert/PickleOut.h"
#include "mdl/Runtime/Base/File.h"
#include "mdl/Runtime/Checkpoint/DistCheckpoint.h"
#include "mdl/Runtime/Checkpoint/TorchCheckpoint.h"
#include "mdl/Runtime/Checkpoint/Zip.h"

#include <algorithm>

using namespace mdl;
using namespace mdl::rt;
using mdl::rt::detail::PickleOut;

namespace {

constexpr const char *kMetadataModule = "torch.distributed.checkpoint.metadata";
constexpr const char *kFilesystemModule =
    "torch.distributed.checkpoint.filesystem";
// The sharded tensor's TensorProperties, which every torch from 1.13 to
// 2.11 reads (torch.distributed.checkpoint's own is 2.3 and later only).
constexpr const char *kPropertiesModule =
    "torch.distributed._shard.sharded_tensor.metadata";

std::vector<int64_t> rowMajorStrides(const std::vector<int64_t> &shape) {
  std::vector<int64_t> strides(shape.size(), 1);
  for (size_t d = shape.size(); d-- > 1;)
    strides[d - 1] = strides[d] * shape[d];
  return strides;
}

/// torch.Size(v).
void size(PickleOut &p, const std::vector<int64_t> &v) {
  p.global("torch", "Size");
  p.tuple(v);
  p.op('\x85');
  p.op('R');
}

/// A torch.save archive's data.pkl of one contiguous tensor.
std::string tensorPickle(DType dtype, const std::vector<int64_t> &shape) {
  PickleOut p;
  p.global("torch._utils", "_rebuild_tensor_v2");
  p.op('(');
  p.op('(');
  p.string("storage");
  p.global("torch", torchStorageClass(dtype));
  p.string("0");
  p.string("cpu");
  p.integer(numElements(shape));
  p.op('t');
  p.op('Q'); // BINPERSID
  p.integer(0);
  p.tuple(shape);
  p.tuple(rowMajorStrides(shape));
  p.boolean(false); // requires_grad
  p.orderedDict();  // backward hooks
  p.op('t');
  p.op('R');
  p.op('.');
  return p.bytes;
}

/// A small torch.save archive of `pickle` and no storages, whole.
std::string smallArchive(const std::string &archive, const std::string &pickle) {
  const std::string byteorder = "little", version = "3\n";
  ZipLayout zip;
  zip.add(archive + "/data.pkl", pickle.size());
  zip.add(archive + "/byteorder", byteorder.size());
  zip.add(archive + "/version", version.size());
  std::vector<const std::string *> data = {&pickle, &byteorder, &version};
  std::vector<uint32_t> crcs;
  for (const std::string *d : data)
    crcs.push_back(
        crc32(0, reinterpret_cast<const uint8_t *>(d->data()), d->size()));
  std::string out(zip.endOfData(), '\0');
  for (size_t i = 0; i < data.size(); ++i) {
    std::string h = zip.localHeader(i, crcs[i]);
    out.replace(zip.headerOffset(i), h.size(), h);
    out.replace(zip.dataOffset(i), data[i]->size(), *data[i]);
  }
  return out + zip.centralDirectory(crcs);
}

} // namespace

void DistCheckpointWriter::setLeadingAxes(const std::string &name,
                                          size_t axes) {
  leading[name] = axes;
}

void DistCheckpointWriter::setArg(std::string key, int64_t value) {
  args.emplace_back(std::move(key), value);
}

bool DistCheckpointWriter::write(const std::string &path,
                                 std::string &error) const {
  size_t slash = path.rfind('/');
  std::string dir = slash == std::string::npos ? "." : path.substr(0, slash);

  // Each tensor's chunks: one per index of its leading axes, each a
  // contiguous run of its bytes.
  struct Chunk {
    const Entry *entry;
    std::vector<int64_t> offsets, sizes;
    uint64_t start = 0, bytes = 0;
  };
  std::vector<Chunk> chunks;
  for (const auto &[name, e] : entries) {
    auto it = leading.find(name);
    size_t lead = it == leading.end() ? 0 : std::min(it->second, e.shape.size());
    int64_t count = 1;
    for (size_t k = 0; k < lead; ++k)
      count *= e.shape[k];
    uint64_t inner = count ? e.size / uint64_t(count) : 0;
    for (int64_t i = 0; i < std::max<int64_t>(count, 1); ++i) {
      Chunk c{&e, std::vector<int64_t>(e.shape.size(), 0), e.shape,
              uint64_t(i) * inner, count ? inner : e.size};
      for (size_t k = lead, rest = size_t(i); k-- > 0;) {
        c.offsets[k] = int64_t(rest % size_t(e.shape[k]));
        c.sizes[k] = 1;
        rest /= size_t(e.shape[k]);
      }
      chunks.push_back(std::move(c));
    }
  }

  // The items, one after the other in the data file, each a torch.save
  // archive of its chunk whose tensor data is a region of the file.
  struct Item {
    ZipLayout zip;
    std::string pickle;
    size_t data = 0;
    uint64_t base = 0, length = 0;
  };
  const std::string byteorder = "little", version = "3\n";
  std::vector<Item> items(chunks.size());
  std::vector<Entry> pieces(chunks.size());
  std::vector<Region> regions;
  uint64_t at = 0;
  for (size_t i = 0; i < chunks.size(); ++i) {
    const Chunk &c = chunks[i];
    Item &it = items[i];
    it.pickle = tensorPickle(c.entry->dtype, c.sizes);
    it.zip.add("archive/data.pkl", it.pickle.size());
    it.zip.add("archive/byteorder", byteorder.size());
    it.data = it.zip.add("archive/data/0", c.bytes);
    it.zip.add("archive/version", version.size());
    it.base = at;
    it.length = it.zip.endOfData() +
                it.zip.centralDirectory(std::vector<uint32_t>(4, 0)).size();
    at = (at + it.length + 63) / 64 * 64;
    Entry &piece = pieces[i];
    piece.name = c.entry->name;
    piece.dtype = c.entry->dtype;
    piece.shape = c.sizes;
    piece.size = c.bytes;
    const Entry *e = c.entry;
    uint64_t start = c.start;
    if (e->data)
      piece.data = static_cast<const uint8_t *>(e->data) + start;
    if (e->fill)
      piece.fill = [e, start](uint64_t offset, uint8_t *dst, size_t n,
                              std::string &err) {
        return e->fill(start + offset, dst, n, err);
      };
    if (e->source)
      piece.source = [e, start](uint64_t offset, size_t &n, int &fd,
                                uint64_t &fileOffset) {
        return e->source(start + offset, n, fd, fileOffset);
      };
    regions.push_back({&piece, it.base + it.zip.dataOffset(it.data), true});
  }
  auto headers = [&](const std::vector<uint32_t> &regionCrcs) {
    std::vector<std::pair<uint64_t, std::string>> out;
    auto crcOf = [](const std::string &s) {
      return crc32(0, reinterpret_cast<const uint8_t *>(s.data()), s.size());
    };
    for (size_t i = 0; i < items.size(); ++i) {
      const Item &it = items[i];
      std::vector<uint32_t> crcs = {crcOf(it.pickle), crcOf(byteorder),
                                    regionCrcs[i], crcOf(version)};
      for (size_t j = 0; j < crcs.size(); ++j)
        out.emplace_back(it.base + it.zip.headerOffset(j),
                         it.zip.localHeader(j, crcs[j]));
      out.emplace_back(it.base + it.zip.dataOffset(0), it.pickle);
      out.emplace_back(it.base + it.zip.dataOffset(1), byteorder);
      out.emplace_back(it.base + it.zip.dataOffset(3), version);
      out.emplace_back(it.base + it.zip.endOfData(),
                       it.zip.centralDirectory(crcs));
    }
    return out;
  };
  if (!stream(dir + "/" + kDistDataFile, regions, headers, error))
    return false;

  // Megatron's marker of a distributed checkpoint: exactly the keys every
  // Megatron-Core version accepts.
  if (!writeFileAtomically(dir + "/metadata.json",
                           "{\"sharded_backend\": \"torch_dist\", "
                           "\"sharded_backend_version\": 1, "
                           "\"common_backend\": \"torch\", "
                           "\"common_backend_version\": 1}",
                           error))
    return false;

  // The common state: {checkpoint_version: 3, iteration, args, ...}, its
  // version an int as torch 1.13's weights-only unpickler reads it.
  {
    PickleOut p;
    p.op('}');
    p.op('(');
    p.string("checkpoint_version");
    p.integer(3);
    p.string("iteration");
    p.integer(iter);
    p.string("args");
    p.newObject("argparse", "Namespace");
    p.op('}');
    p.op('(');
    for (const auto &[key, value] : args) {
      p.string(key);
      p.integer(value);
    }
    p.op('u');
    p.build();
    p.string("num_floating_point_operations_so_far");
    p.integer(0);
    p.op('u');
    p.op('.');
    if (!writeFileAtomically(dir + "/common.pt", smallArchive("common", p.bytes),
                             error))
      return false;
  }

  // The global index: Metadata(state_dict_metadata, None, storage_data).
  PickleOut p;
  p.newObject(kMetadataModule, "Metadata");
  p.op('}');
  p.op('(');
  p.string("state_dict_metadata");
  p.op('}');
  p.op('(');
  size_t next = 0;
  for (const auto &[name, e] : entries) {
    p.string(name);
    p.newObject(kMetadataModule, "TensorStorageMetadata");
    p.op('}');
    p.op('(');
    p.string("properties");
    p.newObject(kPropertiesModule, "TensorProperties");
    p.op('(');
    p.global("torch", torchName(e.dtype));
    p.global("torch.serialization", "_get_layout");
    p.string("torch.strided");
    p.op('\x85');
    p.op('R');
    p.boolean(false); // requires_grad
    p.global(kPropertiesModule, "MEM_FORMAT_ENCODING");
    p.integer(0); // contiguous
    p.op('\x85');
    p.op('R');
    p.boolean(false); // pin_memory
    p.op('t');
    p.build();
    p.string("size");
    size(p, e.shape);
    p.string("chunks");
    p.op(']');
    p.op('(');
    for (; next < chunks.size() && chunks[next].entry == &e; ++next) {
      p.newObject(kMetadataModule, "ChunkStorageMetadata");
      p.op('}');
      p.op('(');
      p.string("offsets");
      size(p, chunks[next].offsets);
      p.string("sizes");
      size(p, chunks[next].sizes);
      p.op('u');
      p.build();
    }
    p.op('e');
    p.op('u');
    p.build();
  }
  p.op('u');
  p.string("planner_data");
  p.none();
  p.string("storage_data");
  p.op('}');
  p.op('(');
  for (size_t i = 0; i < chunks.size(); ++i) {
    p.newObject(kMetadataModule, "MetadataIndex");
    p.op('}');
    p.op('(');
    p.string("fqn");
    p.string(chunks[i].entry->name);
    p.string("offset");
    size(p, chunks[i].offsets);
    p.string("index");
    p.none();
    p.op('u');
    p.build();
    p.newObject(kFilesystemModule, "_StorageInfo");
    p.op('}');
    p.op('(');
    p.string("relative_path");
    p.string(kDistDataFile);
    p.string("offset");
    p.integer(int64_t(items[i].base));
    p.string("length");
    p.integer(int64_t(items[i].length));
    p.op('u');
    p.build();
  }
  p.op('u');
  p.op('u');
  p.build();
  p.op('.');
  return writeFileAtomically(path, p.bytes, error);
}
