//===- TorchCheckpoint.cpp - PyTorch zip checkpoints, read without torch --===//

#include "mdl/Runtime/Checkpoint/TorchCheckpoint.h"
#include "Checkpoint/Pickle.h"

#include <cerrno>
#include <cstring>
#include <limits>
#include <map>

using namespace mdl;
using namespace mdl::rt;
using pickle::kindName;
using pickle::Value;

std::string_view mdl::rt::torchStorageClass(DType t) {
  return pickle::storageClassOf(t);
}

//===----------------------------------------------------------------------===//
// Reader
//===----------------------------------------------------------------------===//

std::optional<TorchStateDict>
mdl::rt::readTorchStateDict(const std::string &path, std::string &error) {
  TorchStateDict out;
  out.zip = ZipFile::open(path, error);
  if (!out.zip)
    return std::nullopt;
  auto fail = [&](const std::string &message) {
    error = path + ": " + message;
    return std::nullopt;
  };
  // <archive>/data.pkl, and the storages beside it.
  const ZipFile::Entry *pkl = nullptr;
  for (const auto &[name, e] : out.zip->entries()) {
    size_t slash = name.find('/');
    if (slash != std::string::npos && name.substr(slash) == "/data.pkl")
      pkl = &e;
  }
  if (!pkl)
    return fail("not a torch checkpoint (no <archive>/data.pkl)");
  if (pkl->size > kMaxPickleSize)
    return fail("data.pkl is " + std::to_string(pkl->size) +
                " bytes, more than the limit of " +
                std::to_string(kMaxPickleSize));
  if (!out.zip->verify(*pkl, error))
    return std::nullopt;
  std::string prefix = pkl->name.substr(0, pkl->name.size() - 8);
  pickle::Unpickler u(out.zip->data(*pkl), size_t(pkl->size), out.zip.get(),
                     prefix);
  std::string why;
  const Value *root = u.load(why);
  if (!root)
    return fail("data.pkl: " + why);
  if (root->kind != Value::Dict)
    return fail("the checkpoint is " + std::string(kindName(root->kind)) +
                ", not a dict holding a 'model' state dict");

  out.header.dataStart = 0;
  out.header.dataSize = out.zip->fileSize();
  bool found = false;
  for (size_t k = 0; k + 1 < root->items.size(); k += 2) {
    const Value *key = root->items[k], *dict = root->items[k + 1];
    if (key && key->kind == Value::Str && key->s == kTorchMetadataKey && dict &&
        dict->kind == Value::Dict) {
      for (size_t j = 0; j + 1 < dict->items.size(); j += 2) {
        const Value *mk = dict->items[j], *mv = dict->items[j + 1];
        if (mk && mv && mk->kind == Value::Str && mv->kind == Value::Str)
          out.header.metadata[mk->s] = mv->s;
      }
      continue;
    }
    if (!key || key->kind != Value::Str || key->s.compare(0, 5, "model") != 0)
      continue;
    std::string chunk = key->s.substr(5);
    if (!chunk.empty() &&
        chunk.find_first_not_of("0123456789") != std::string::npos)
      continue;
    found = true;
    std::string namePrefix = chunk.empty() ? "" : key->s + ".";
    if (!dict || dict->kind != Value::Dict)
      return fail("'" + key->s + "' is " +
                  kindName(dict ? dict->kind : Value::None) +
                  ", not a state dict of tensors");
    for (size_t j = 0; j + 1 < dict->items.size(); j += 2) {
      const Value *name = dict->items[j], *t = dict->items[j + 1];
      if (!name || name->kind != Value::Str)
        return fail("'" + key->s + "' has a key that is not a string");
      const std::string &n = name->s;
      // A module's extra state (TE's FP8 metadata), whatever it holds.
      const std::string extra = "_extra_state";
      if (n.size() >= extra.size() &&
          n.compare(n.size() - extra.size(), extra.size(), extra) == 0)
        continue;
      if (!t || t->kind != Value::Tensor)
        return fail("'" + key->s + "' entry '" + n + "' is " +
                    kindName(t ? t->kind : Value::None) + ", not a tensor");
      // Contiguous, row-major (dimensions of size 1 have any stride).
      int64_t expect = 1;
      for (size_t d = t->sizes.size(); d-- > 0;) {
        if (t->sizes[d] != 1 && t->strides[d] != expect)
          return fail("'" + key->s + "' tensor '" + n +
                      "' is not contiguous in its storage; only contiguous "
                      "tensors are read");
        expect *= t->sizes[d];
      }
      TensorInfo info;
      info.name = namePrefix + n;
      info.dtype = t->dtype;
      info.shape = t->sizes;
      info.dataBegin = t->storage->data + uint64_t(t->offset) * byteSize(t->dtype);
      info.dataEnd = info.dataBegin + uint64_t(expect) * byteSize(t->dtype);
      if (out.header.indexByName.count(info.name))
        return fail("tensor '" + info.name + "' is in the checkpoint twice");
      out.header.indexByName.emplace(info.name, out.header.tensors.size());
      out.header.tensors.push_back(std::move(info));
    }
  }
  if (!found)
    return fail("the checkpoint holds no 'model' (or 'model0', ...) state "
                "dict");
  return out;
}
