//===- Checkpoint.cpp - A checkpoint's tensors, across its files ----------===//

#include "mdl/Runtime/Checkpoint/Checkpoint.h"
#include "Checkpoint/TensorFileText.h"
#include "mdl/Runtime/Base/File.h"
#include "mdl/Runtime/Base/Json.h"
#include "mdl/Runtime/Checkpoint/DistCheckpoint.h"
#include "mdl/Runtime/Checkpoint/TorchCheckpoint.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <set>

#include <dirent.h>
#include <sys/stat.h>

using namespace mdl;
using namespace mdl::rt;
using namespace mdl::rt::detail;

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

const std::vector<Checkpoint::Chunk> *
Checkpoint::chunks(const TensorRef &t) const {
  if (!t.shard || !t.shard->dist)
    return nullptr;
  return &t.shard->chunks[size_t(t.info - t.shard->readHeader.tensors.data())];
}

bool Checkpoint::addDist(const std::string &dir, bool headersOnly,
                         std::string &error) {
  std::unique_ptr<DistCheckpoint> dist =
      DistCheckpoint::open(dir, error, headersOnly);
  if (!dist)
    return false;
  auto shard = std::make_unique<Shard>();
  shard->path = dir;
  for (size_t f = 0; f < dist->files().size(); ++f)
    shard->distFiles.push_back(dist->path(f));
  SafetensorsHeader &h = shard->readHeader;
  for (const auto &[key, e] : dist->entries()) {
    // Bytes items (Megatron's _extra_state, RNG and common state) and the
    // optimizer's state are no weights.
    if (e.bytes || key.rfind("optimizer.", 0) == 0)
      continue;
    TensorInfo info;
    info.name = key;
    info.dtype = e.dtype;
    info.shape = e.shape;
    std::optional<uint64_t> bytes = tensorBytes(e.shape, e.dtype);
    info.dataEnd = bytes ? *bytes : 0;
    h.tensors.push_back(std::move(info));
    std::vector<Chunk> chunks;
    for (const DistChunk &c : e.chunks) {
      Chunk out;
      out.offsets = c.offsets;
      out.sizes = c.sizes;
      out.data = headersOnly ? nullptr : dist->data(c);
      out.file = &shard->distFiles[c.file];
      out.fileOffset = c.dataOffset;
      out.bytes = c.dataBytes;
      chunks.push_back(std::move(out));
    }
    shard->chunks.push_back(std::move(chunks));
  }
  for (const TensorInfo &t : h.tensors) {
    if (!byName.emplace(t.name, TensorRef{shard.get(), &t}).second) {
      error = dir + ": tensor " + nameText(t.name) + " is in two files";
      return false;
    }
    h.indexByName[t.name] = size_t(&t - h.tensors.data());
  }
  shard->dist = std::move(dist);
  shardList.push_back(std::move(shard));
  return true;
}

const uint8_t *Checkpoint::data(const TensorRef &t) const {
  if (const std::vector<Chunk> *c = chunks(t))
    return c->size() == 1 ? c->front().data : nullptr;
  if (t.shard && !t.shard->memory.empty())
    return t.shard->memory[size_t(t.info - t.shard->readHeader.tensors.data())];
  if (t.shard && t.shard->zip)
    return t.shard->zip->bytes() + t.shard->readHeader.dataStart +
           t.info->dataBegin;
  return t.shard && t.shard->file ? t.shard->file->data(*t.info) : nullptr;
}

bool Checkpoint::addShard(const std::string &path, bool headersOnly,
                          std::string &error) {
  // A distributed checkpoint, by its metadata file.
  size_t slash = path.rfind('/');
  if (path.compare(slash == std::string::npos ? 0 : slash + 1,
                   std::string::npos, kDistMetadataFile) == 0)
    return addDist(slash == std::string::npos ? "."
                   : slash == 0               ? "/"
                                              : path.substr(0, slash),
                   headersOnly, error);
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

  // A distributed checkpoint, by its directory.
  if (S_ISDIR(st.st_mode) && isDistCheckpoint(path))
    return ckpt->addDist(path, headersOnly, error) ? std::move(ckpt) : nullptr;

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
Checkpoint::openFiles(const std::vector<std::string> &paths, std::string &error,
                      bool headersOnly) {
  std::unique_ptr<Checkpoint> ckpt(new Checkpoint());
  for (const std::string &p : paths)
    if (!ckpt->addShard(p, headersOnly, error))
      return nullptr;
  return ckpt;
}
