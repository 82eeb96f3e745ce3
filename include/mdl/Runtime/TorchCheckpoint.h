//===- TorchCheckpoint.h - PyTorch zip checkpoints, without torch -*- C++ -*-===//
//
// Plain C++17 (POSIX), no LLVM, no libtorch. The checkpoints torch.save
// writes (since PyTorch 1.6): a stored zip archive `<archive>/data.pkl`
// (a pickle of the saved object; tensors in it refer to storages by
// persistent ids), `<archive>/data/<key>` (each storage's bytes) and
// `<archive>/version`. A Megatron rank file (`model_optim_rng.pt`) holds
// a dict whose `model` entry is the rank's state dict (`model0`,
// `model1`, ... with virtual pipeline stages), besides `args`, optimizer
// and RNG states and more.
//
// The writer streams tensors into the archive like SafetensorsWriter (the
// same worker threads and fills), computing each storage's CRC-32 as it
// goes, and writes a pickle that `torch.load(path, weights_only=True)`
// accepts: only collections.OrderedDict, torch._utils._rebuild_tensor_v2
// and torch.*Storage globals, and no float (torch 1.13's weights-only
// unpickler has no BINFLOAT).
//
// The reader runs no code: its unpickler builds inert values, tensors from
// `_rebuild_tensor_v2` (and `_rebuild_parameter`, torch.nn.Parameter),
// ordered dicts from `collections.OrderedDict`, and a placeholder for any
// other call or object (argparse.Namespace, numpy arrays, io.BytesIO,
// os.system alike): nothing is imported or called.
//
//===----------------------------------------------------------------------===//

#ifndef MDL_RUNTIME_TORCHCHECKPOINT_H
#define MDL_RUNTIME_TORCHCHECKPOINT_H

#include "mdl/Runtime/Safetensors.h"
#include "mdl/Runtime/TensorFileWriter.h"
#include "mdl/Runtime/Zip.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace mdl::rt {

/// Writes a torch checkpoint: a dict of the state dicts (OrderedDicts of
/// tensors) and of integers, atomically, tensors streamed.
class TorchCheckpointWriter : public TensorFileWriter {
public:
  /// The top-level keys of the state dicts: a tensor named `<key>.<rest>`
  /// for one of them goes to that dict as `<rest>`; with one key and
  /// `prefixed` false, every tensor goes to it under its own name.
  void setStateDicts(std::vector<std::string> keys, bool prefixed);
  /// An integer entry of the top-level dict (after the state dicts).
  void setInt(std::string key, int64_t value);

  bool write(const std::string &path, std::string &error) const override;

private:
  std::vector<std::string> dictKeys{"model"};
  bool dictPrefixed = false;
  std::vector<std::pair<std::string, int64_t>> ints;
};

/// The state dicts of a torch checkpoint, read without running anything:
/// the tensors of the top-level `model` entry, and those of `model<c>`
/// named `model<c>.<name>` (as rankTensors names virtual stages). Entries
/// that are a module's extra state (`..._extra_state`, whatever they hold)
/// are skipped; any other entry that is not a tensor is an error, as is a
/// file without `model` or `model0`. Tensors must be laid out contiguously
/// in their storages (at any offset; storages may be shared). Every
/// `TensorInfo` gives its bytes as an offset in the archive file
/// (`dataBegin`, with `dataStart` 0 in the header).
struct TorchStateDict {
  std::unique_ptr<ZipFile> zip;
  SafetensorsHeader header;
};
std::optional<TorchStateDict> readTorchStateDict(const std::string &path,
                                                 std::string &error);

/// Limits of the reader: the pickle's size and the values its unpickler
/// may build.
constexpr uint64_t kMaxPickleSize = uint64_t(1) << 31;
constexpr uint64_t kMaxPickleValues = uint64_t(1) << 24;

} // namespace mdl::rt

#endif // MDL_RUNTIME_TORCHCHECKPOINT_H
