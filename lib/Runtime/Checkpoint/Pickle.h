//===- Pickle.h - Python pickles, read without running them -----*- C++ -*-===//
//
// Private to the runtime's readers of PyTorch files: torch.save archives
// (TorchCheckpoint.cpp) and distributed checkpoints' `.metadata`
// (DistCheckpoint.cpp). The unpickler reads protocols 0 to 5 and builds inert
// values: nothing is imported or called. A call (REDUCE, NEWOBJ, NEWOBJ_EX)
// is an Object that records the global called, its arguments and the state
// BUILD gives it; a few calls torch.save writes are recognized instead:
// tensors from `_rebuild_tensor_v2` (and parameters), and empty ordered
// dicts from `collections.OrderedDict`.
//
//===----------------------------------------------------------------------===//

#ifndef MDL_LIB_RUNTIME_CHECKPOINT_PICKLE_H
#define MDL_LIB_RUNTIME_CHECKPOINT_PICKLE_H

#include "mdl/Runtime/Base/DType.h"
#include "mdl/Runtime/Checkpoint/Zip.h"

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace mdl::rt::pickle {

/// A value the unpickler builds. Values are owned by the unpickler's arena
/// and point to each other raw, so that no structure of the input (depth,
/// cycles through the memo) makes destroying them recurse.
struct Value {
  enum Kind {
    None, Bool, Int, Float, Str, Bytes, Tuple, List, Dict, Global, Object,
    Storage, Tensor, Mark,
  } kind = None;
  int64_t i = 0;
  double f = 0;
  /// Str, Bytes; Global "module.name"; Storage: its key.
  std::string s;
  /// Tuple, List; Dict: keys and values alternating; Object: the global
  /// called (or null), its arguments (or null) and the state BUILD set (or
  /// null).
  std::vector<Value *> items;
  // Storage and Tensor:
  DType dtype = DType::U8;
  int64_t numel = 0, offset = 0;
  std::vector<int64_t> sizes, strides;
  const ZipFile::Entry *storage = nullptr;

  /// An Object's class or function ("module.name"), or "".
  std::string_view callee() const;
  /// An Object's arguments (a tuple's items), or nothing.
  const std::vector<Value *> &args() const;
  /// An Object's state, or null.
  const Value *state() const;
  /// The value of string key `key` of a Dict, or null.
  const Value *get(std::string_view key) const;
  /// The value of attribute `name` of an Object whose state is a dict.
  const Value *attr(std::string_view name) const;
};

/// "a dict", "an object (...)": what a value is, for messages.
const char *kindName(Value::Kind k);
/// The integers of a tuple or list of ints.
bool intTuple(const Value *v, std::vector<int64_t> &out);
/// "[1,2,3]".
std::string listText(const std::vector<int64_t> &v);

/// The storage class torch.save names for dtype `t` in a persistent id
/// (`BFloat16Storage`, ...; `ByteStorage` for a dtype torch 1.13 lacks),
/// and the dtype a storage class or a `torch.<dtype>` global names.
std::string_view storageClassOf(DType t);
bool dtypeOfStorageClass(std::string_view cls, DType &out);
bool dtypeOfTorchGlobal(std::string_view global, DType &out);
/// The `torch.<dtype>` global of a dtype ("torch.bfloat16").
std::string torchDTypeName(DType t);

/// Reads one pickle. With `zip`, persistent ids are torch.save's storage
/// references into `<prefix>data/<key>` of the archive; without it, a
/// persistent id is an error.
class Unpickler {
public:
  Unpickler(const uint8_t *data, size_t size, const ZipFile *zip = nullptr,
            std::string prefix = "");
  ~Unpickler();

  /// The unpickled object, or null with `error` set (the reason and the
  /// byte it was found at).
  Value *load(std::string &error);

private:
  struct State;
  std::unique_ptr<State> s;
};

} // namespace mdl::rt::pickle

#endif // MDL_LIB_RUNTIME_CHECKPOINT_PICKLE_H
