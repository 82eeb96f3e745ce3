//===- DistCheckpoint.cpp - PyTorch distributed checkpoints, read ---------===//

#include "mdl/Runtime/Checkpoint/DistCheckpoint.h"
#include "Checkpoint/Pickle.h"
#include "Checkpoint/TensorFileText.h"
#include "mdl/Runtime/Base/File.h"
#include "mdl/Runtime/Checkpoint/Safetensors.h"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <set>

#include <sys/stat.h>

using namespace mdl;
using namespace mdl::rt;
using namespace mdl::rt::detail;
using pickle::Value;

namespace {

/// The modules torch versions keep the metadata classes in (torch >= 2.0,
/// then torch 1.13's), and the classes of the root object.
constexpr std::string_view kMetadataModules[] = {
    "torch.distributed.checkpoint.metadata.",
    "torch.distributed._shard.checkpoint.metadata.",
};
constexpr std::string_view kRootClasses[] = {
    "torch.distributed.checkpoint.metadata.Metadata",
    "torch.distributed._shard.checkpoint.metadata.Metadata",
    // Megatron-Core 0.15 and later: a subclass with its own data.
    "megatron.core.dist_checkpointing.strategies.torch.MCoreMetadata",
};
/// TensorProperties: DCP's own since torch 2.3, and the sharded tensor's,
/// which torch 1.13 to 2.2 pickle and later versions still read.
constexpr std::string_view kPropertiesClasses[] = {
    "torch.distributed.checkpoint.metadata.TensorProperties",
    "torch.distributed._shard.sharded_tensor.metadata.TensorProperties",
};
constexpr std::string_view kStorageInfoClasses[] = {
    "torch.distributed.checkpoint.filesystem._StorageInfo",
    "torch.distributed._shard.checkpoint.filesystem._StorageInfo",
};

bool isMetadataClass(const Value *v, std::string_view name) {
  if (!v || v->kind != Value::Object)
    return false;
  std::string_view callee = v->callee();
  for (std::string_view module : kMetadataModules)
    if (callee.size() == module.size() + name.size() &&
        callee.compare(0, module.size(), module) == 0 &&
        callee.substr(module.size()) == name)
      return true;
  return false;
}

template <size_t N>
bool isOneOf(const Value *v, const std::string_view (&classes)[N]) {
  if (!v || v->kind != Value::Object)
    return false;
  return std::find(std::begin(classes), std::end(classes), v->callee()) !=
         std::end(classes);
}

/// What a value is, for messages: its kind, or its class.
std::string describe(const Value *v) {
  if (!v)
    return "nothing";
  if (v->kind == Value::Object && !v->callee().empty())
    return "an object of class " + std::string(v->callee());
  return pickle::kindName(v->kind);
}

/// A torch.Size (a call of torch.Size with a tuple of ints), or a plain
/// tuple of ints.
bool sizeOf(const Value *v, std::vector<int64_t> &out) {
  if (v && v->kind == Value::Object && v->callee() == "torch.Size" &&
      v->args().size() == 1)
    return pickle::intTuple(v->args()[0], out);
  return pickle::intTuple(v, out);
}

bool stringOf(const Value *v, std::string &out) {
  if (!v || v->kind != Value::Str)
    return false;
  out = v->s;
  return true;
}

bool intOf(const Value *v, int64_t &out) {
  if (!v || v->kind != Value::Int)
    return false;
  out = v->i;
  return true;
}

/// The dtype of a TensorProperties: its state is the tuple (dtype, layout,
/// requires_grad, memory format, pin_memory), or a dict with `dtype`.
const Value *dtypeOf(const Value *props) {
  const Value *st = props ? props->state() : nullptr;
  if (st && st->kind == Value::Tuple && !st->items.empty())
    return st->items[0];
  return st && st->kind == Value::Dict ? st->get("dtype") : nullptr;
}

/// Whether two boxes meet.
bool overlap(const DistChunk &a, const DistChunk &b) {
  for (size_t d = 0; d < a.offsets.size(); ++d)
    if (a.offsets[d] >= b.offsets[d] + b.sizes[d] ||
        b.offsets[d] >= a.offsets[d] + a.sizes[d])
      return false;
  return true;
}

std::string boxText(const DistChunk &c) {
  return pickle::listText(c.offsets) + "+" + pickle::listText(c.sizes);
}

/// Checks that `e`'s chunks lie inside it and tile it exactly once.
bool checkTiling(const DistEntry &e, std::string &why) {
  int64_t total = 1, covered = 0;
  for (int64_t s : e.shape) {
    if (s < 0 || (s > 0 && total > INT64_MAX / s)) {
      why = "has no size: " + pickle::listText(e.shape);
      return false;
    }
    total *= s;
  }
  for (const DistChunk &c : e.chunks) {
    if (c.offsets.size() != e.shape.size() ||
        c.sizes.size() != e.shape.size()) {
      why = "has a chunk " + boxText(c) + " of another rank than its shape " +
            pickle::listText(e.shape);
      return false;
    }
    int64_t n = 1;
    for (size_t d = 0; d < e.shape.size(); ++d) {
      if (c.offsets[d] < 0 || c.sizes[d] < 0 || c.offsets[d] > e.shape[d] ||
          c.sizes[d] > e.shape[d] - c.offsets[d]) {
        why = "has a chunk " + boxText(c) + " outside its shape " +
              pickle::listText(e.shape);
        return false;
      }
      n *= c.sizes[d];
    }
    covered += n;
    if (covered > total) {
      why = "has chunks that overlap (more elements than its shape " +
            pickle::listText(e.shape) + " holds)";
      return false;
    }
  }
  // No two chunks meet: sweep along the first axis (chunks usually lie in
  // a grid, so few are open at once).
  if (e.shape.empty()) {
    if (e.chunks.size() > 1) {
      why = "has more than one chunk of a scalar";
      return false;
    }
  } else {
    std::vector<const DistChunk *> order;
    for (const DistChunk &c : e.chunks)
      if (std::all_of(c.sizes.begin(), c.sizes.end(),
                      [](int64_t s) { return s > 0; }))
        order.push_back(&c);
    std::sort(order.begin(), order.end(), [](const auto *a, const auto *b) {
      return a->offsets < b->offsets;
    });
    std::vector<const DistChunk *> open;
    for (const DistChunk *c : order) {
      open.erase(std::remove_if(open.begin(), open.end(),
                                [&](const DistChunk *o) {
                                  return o->offsets[0] + o->sizes[0] <=
                                         c->offsets[0];
                                }),
                 open.end());
      for (const DistChunk *o : open)
        if (overlap(*o, *c)) {
          why = "has chunks " + boxText(*o) + " and " + boxText(*c) +
                " that overlap";
          return false;
        }
      open.push_back(c);
    }
  }
  if (covered < total) {
    why = "has chunks that cover " + std::to_string(covered) + " of its " +
          std::to_string(total) + " elements";
    return false;
  }
  return true;
}

} // namespace

int64_t DistEntry::numElements() const {
  int64_t n = 1;
  for (int64_t s : shape)
    n *= s;
  return n;
}

bool mdl::rt::isDistCheckpoint(const std::string &dir) {
  struct stat st;
  return ::stat((dir + "/" + kDistMetadataFile).c_str(), &st) == 0 &&
         S_ISREG(st.st_mode);
}

std::string mdl::rt::findDistCheckpoint(const std::string &path) {
  auto holds = [](const std::string &d) {
    struct stat st;
    for (const std::string f : {kDistMetadataFile, "metadata.json"})
      if (::stat((d + "/" + f).c_str(), &st) == 0 && S_ISREG(st.st_mode))
        return true;
    return false;
  };
  std::string dir = path;
  while (dir.size() > 1 && dir.back() == '/')
    dir.pop_back();
  if (holds(dir))
    return dir;
  std::string text, error;
  if (!readFile(dir + "/latest_checkpointed_iteration.txt", text, error))
    return "";
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back())))
    text.pop_back();
  std::string iteration;
  if (text == "release") {
    iteration = "release";
  } else {
    if (text.empty() || text.size() > 12 ||
        text.find_first_not_of("0123456789") != std::string::npos)
      return "";
    iteration = std::to_string(std::stoll(text));
    iteration = "iter_" + std::string(iteration.size() < 7 ? 7 - iteration.size() : 0, '0') + iteration;
  }
  return holds(dir + "/" + iteration) ? dir + "/" + iteration : "";
}

const DistEntry *DistCheckpoint::find(const std::string &key) const {
  auto it = byKey.find(key);
  return it == byKey.end() ? nullptr : &it->second;
}

std::string DistCheckpoint::path(size_t file) const {
  return directory + "/" + fileNames[file];
}

const uint8_t *DistCheckpoint::data(const DistChunk &c) const {
  if (c.file >= mapped.size() || !mapped[c.file])
    return nullptr;
  return mapped[c.file]->bytes() + c.dataOffset;
}

bool DistCheckpoint::read(const DistEntry &e, uint8_t *out) const {
  if (e.bytes)
    return false;
  size_t esize = byteSize(e.dtype), rank = e.shape.size();
  for (const DistChunk &c : e.chunks) {
    const uint8_t *src = data(c);
    if (!src)
      return false;
    if (c.dataBytes == 0)
      continue;
    // Runs along the last axis, row by row of the chunk.
    int64_t run = rank ? c.sizes[rank - 1] : 1;
    int64_t rows = rank ? int64_t(c.dataBytes / esize) / run : 1;
    std::vector<int64_t> index(rank, 0);
    for (int64_t r = 0; r < rows; ++r) {
      int64_t at = 0;
      for (size_t d = 0; d < rank; ++d)
        at = at * e.shape[d] + c.offsets[d] + index[d];
      std::memcpy(out + size_t(at) * esize, src + size_t(r * run) * esize,
                  size_t(run) * esize);
      for (size_t d = rank ? rank - 1 : 0; d-- > 0;) { // the next row
        if (++index[d] < c.sizes[d])
          break;
        index[d] = 0;
      }
    }
  }
  return true;
}

std::unique_ptr<DistCheckpoint>
DistCheckpoint::open(const std::string &dirPath, std::string &error,
                     bool metadataOnly) {
  std::unique_ptr<DistCheckpoint> ckpt(new DistCheckpoint());
  std::string dir = dirPath;
  while (dir.size() > 1 && dir.back() == '/')
    dir.pop_back();
  ckpt->directory = dir;
  std::string metaPath = dir + "/" + kDistMetadataFile;
  std::string text;
  if (!readFile(metaPath, text, error, kMaxDistMetadataSize))
    return nullptr;
  auto fail = [&](const std::string &message) {
    error = metaPath + ": " + message;
    return nullptr;
  };

  pickle::Unpickler u(reinterpret_cast<const uint8_t *>(text.data()),
                      text.size());
  std::string why;
  const Value *root = u.load(why);
  if (!root)
    return fail(why);
  if (!isOneOf(root, kRootClasses))
    return fail("not a distributed checkpoint's metadata: the pickle holds " +
                describe(root) + ", not a torch.distributed.checkpoint "
                                 "Metadata");
  const Value *sdm = root->attr("state_dict_metadata");
  const Value *storage = root->attr("storage_data");
  if (!sdm || sdm->kind != Value::Dict)
    return fail("state_dict_metadata is " + describe(sdm) + ", not a dict");
  if (!storage || storage->kind != Value::Dict)
    return fail("storage_data is " + describe(storage) + ", not a dict");

  // Where each item is: (key, chunk offsets) -> file, offset, length.
  struct Where {
    std::string file;
    int64_t offset = 0, length = 0;
  };
  std::map<std::pair<std::string, std::vector<int64_t>>, Where> where;
  for (size_t k = 0; k + 1 < storage->items.size(); k += 2) {
    const Value *index = storage->items[k], *info = storage->items[k + 1];
    std::string fqn;
    if (!isMetadataClass(index, "MetadataIndex") ||
        !stringOf(index->attr("fqn"), fqn))
      return fail("storage_data has a key that is " + describe(index) +
                  ", not a MetadataIndex with a name");
    std::vector<int64_t> offsets;
    const Value *off = index->attr("offset");
    if (off && off->kind != Value::None && !sizeOf(off, offsets))
      return fail("storage_data entry of '" + fqn + "' has an offset that is " +
                  describe(off) + ", not a torch.Size");
    Where w;
    if (!isOneOf(info, kStorageInfoClasses) ||
        !stringOf(info->attr("relative_path"), w.file) ||
        !intOf(info->attr("offset"), w.offset) ||
        !intOf(info->attr("length"), w.length))
      return fail("storage_data entry of '" + fqn + "' is " + describe(info) +
                  ", not a _StorageInfo with a file, an offset and a length");
    if (const Value *t = info->attr("transform_descriptors"))
      if (t->kind != Value::None && !t->items.empty())
        return fail("the item of '" + fqn +
                    "' is stored through transforms (compressed, or by a "
                    "storage extension), which the reader does not undo");
    if (w.file.empty() || w.file == "." || w.file == ".." ||
        w.file.find('/') != std::string::npos)
      return fail("storage_data places '" + fqn + "' in " + nameText(w.file) +
                  ", not a file in the checkpoint's directory");
    if (w.offset < 0 || w.length < 0)
      return fail("storage_data gives '" + fqn +
                  "' a negative offset or length");
    where[{fqn, offsets}] = w;
  }

  std::map<std::string, size_t> fileIndex;
  std::vector<uint64_t> fileSizes;
  for (size_t k = 0; k + 1 < sdm->items.size(); k += 2) {
    const Value *keyValue = sdm->items[k], *md = sdm->items[k + 1];
    DistEntry e;
    if (!stringOf(keyValue, e.key))
      return fail("state_dict_metadata has a key that is " +
                  describe(keyValue) + ", not a string");
    std::string what = "key '" + e.key + "'";
    if (isMetadataClass(md, "BytesStorageMetadata")) {
      e.bytes = true;
      e.chunks.emplace_back();
    } else if (isMetadataClass(md, "TensorStorageMetadata")) {
      const Value *props = md->attr("properties");
      const Value *dtype = dtypeOf(props);
      if (!isOneOf(props, kPropertiesClasses) || !dtype ||
          dtype->kind != Value::Global)
        return fail(what + " has properties that are " + describe(props) +
                    ", not TensorProperties with a dtype");
      if (!pickle::dtypeOfTorchGlobal(dtype->s, e.dtype))
        return fail(what + " has dtype " + dtype->s +
                    ", which the reader does not know");
      if (!sizeOf(md->attr("size"), e.shape))
        return fail(what + " has a size that is " +
                    describe(md->attr("size")) + ", not a torch.Size");
      const Value *chunks = md->attr("chunks");
      if (!chunks || chunks->kind != Value::List)
        return fail(what + " has chunks that are " + describe(chunks) +
                    ", not a list");
      for (const Value *c : chunks->items) {
        DistChunk chunk;
        if (!isMetadataClass(c, "ChunkStorageMetadata") ||
            !sizeOf(c->attr("offsets"), chunk.offsets) ||
            !sizeOf(c->attr("sizes"), chunk.sizes))
          return fail(what + " has a chunk that is " + describe(c) +
                      ", not a ChunkStorageMetadata with offsets and sizes");
        e.chunks.push_back(std::move(chunk));
      }
      if (!checkTiling(e, why))
        return fail(what + " " + why);
    } else {
      return fail(what + " is described by " + describe(md) +
                  ", not TensorStorageMetadata or BytesStorageMetadata");
    }
    for (DistChunk &c : e.chunks) {
      auto it = where.find({e.key, c.offsets});
      if (it == where.end())
        return fail(what + (e.bytes ? "" : " chunk " + boxText(c)) +
                    " has no entry in storage_data: where it is stored is "
                    "not said");
      const Where &w = it->second;
      auto [f, fresh] = fileIndex.try_emplace(w.file, fileIndex.size());
      if (fresh) {
        std::string path = dir + "/" + w.file;
        struct stat st;
        if (::stat(path.c_str(), &st) != 0) {
          error = path + ": cannot open (it holds " + what +
                  "): " + errnoText();
          return nullptr;
        }
        if (!S_ISREG(st.st_mode)) {
          error = path + ": not a regular file (it holds " + what + ")";
          return nullptr;
        }
        ckpt->fileNames.push_back(w.file);
        fileSizes.push_back(uint64_t(st.st_size));
      }
      c.file = f->second;
      c.itemOffset = uint64_t(w.offset);
      c.itemLength = uint64_t(w.length);
      if (c.itemOffset > fileSizes[c.file] ||
          c.itemLength > fileSizes[c.file] - c.itemOffset)
        return fail(what + (e.bytes ? "" : " chunk " + boxText(c)) +
                    " is stored at bytes " + std::to_string(c.itemOffset) +
                    " to " + std::to_string(c.itemOffset + c.itemLength) +
                    " of " + w.file + ", which has " +
                    std::to_string(fileSizes[c.file]) + " (truncated?)");
    }
    std::string key = e.key;
    ckpt->byKey.emplace(std::move(key), std::move(e));
  }
  if (!metadataOnly && !ckpt->openItems(error))
    return nullptr;
  return ckpt;
}

bool DistCheckpoint::openItems(std::string &error) {
  for (const std::string &f : fileNames) {
    std::shared_ptr<MappedFile> m = MappedFile::open(directory + "/" + f, error);
    if (!m)
      return false;
    mapped.push_back(std::move(m));
  }
  for (auto &[key, e] : byKey) {
    if (e.bytes)
      continue;
    for (DistChunk &c : e.chunks) {
      std::string what = path(c.file) + " (the item of '" + key + "' chunk " +
                         boxText(c) + " at byte " +
                         std::to_string(c.itemOffset) + ")";
      std::unique_ptr<ZipFile> zip = ZipFile::openWindow(
          mapped[c.file], c.itemOffset, c.itemLength, what, error);
      if (!zip)
        return false;
      auto fail = [&](const std::string &message) {
        error = what + ": " + message;
        return false;
      };
      const ZipFile::Entry *pkl = nullptr;
      for (const auto &[name, entry] : zip->entries()) {
        size_t slash = name.find('/');
        if (slash != std::string::npos && name.substr(slash) == "/data.pkl")
          pkl = &entry;
      }
      if (!pkl)
        return fail("not a torch.save archive (no <archive>/data.pkl)");
      if (!zip->verify(*pkl, error))
        return false;
      pickle::Unpickler u(zip->data(*pkl), size_t(pkl->size), zip.get(),
                          pkl->name.substr(0, pkl->name.size() - 8));
      std::string why;
      const Value *t = u.load(why);
      if (!t)
        return fail("data.pkl: " + why);
      if (t->kind != Value::Tensor)
        return fail("holds " + describe(t) + ", not a tensor");
      if (t->dtype != e.dtype || t->sizes != c.sizes)
        return fail("holds a tensor of shape " + pickle::listText(t->sizes) +
                    " " + std::string(safetensorsName(t->dtype)) +
                    ", but the metadata says " + pickle::listText(c.sizes) +
                    " " + std::string(safetensorsName(e.dtype)));
      int64_t expect = 1;
      for (size_t d = t->sizes.size(); d-- > 0;) {
        if (t->sizes[d] != 1 && t->strides[d] != expect)
          return fail("holds a tensor that is not contiguous in its storage; "
                      "only contiguous tensors are read");
        expect *= t->sizes[d];
      }
      c.dataOffset = zip->windowOffset() + t->storage->data +
                     uint64_t(t->offset) * byteSize(t->dtype);
      c.dataBytes = uint64_t(expect) * byteSize(t->dtype);
      // Only the item's archive was read: its pages go back.
      SafetensorsFile::release(zip->bytes(), c.itemLength);
    }
  }
  return true;
}
