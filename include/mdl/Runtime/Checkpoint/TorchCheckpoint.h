//===- TorchCheckpoint.h - PyTorch zip checkpoints, read --------*- C++ -*-===//
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
// The reader runs no code: its unpickler builds inert values, tensors from
// `_rebuild_tensor_v2` (and `_rebuild_parameter`, torch.nn.Parameter),
// ordered dicts from `collections.OrderedDict`, and a placeholder for any
// other call or object (argparse.Namespace, numpy arrays, io.BytesIO,
// os.system alike): nothing is imported or called.
//
//===----------------------------------------------------------------------===//

#ifndef MDL_RUNTIME_CHECKPOINT_TORCHCHECKPOINT_H
#define MDL_RUNTIME_CHECKPOINT_TORCHCHECKPOINT_H

#include "mdl/Runtime/Checkpoint/Safetensors.h"
#include "mdl/Runtime/Checkpoint/Zip.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace mdl::rt {

/// The storage class torch.save names for dtype `t` in a persistent id
/// (`BFloat16Storage`, ...; `ByteStorage` for a dtype torch 1.13 lacks).
std::string_view torchStorageClass(DType t);

/// The top-level entry of a rank file that holds MDL's metadata (a dict of
/// strings: the rank record) beside the state dicts.
inline constexpr const char *kTorchMetadataKey = "mdl_metadata";

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

#endif // MDL_RUNTIME_CHECKPOINT_TORCHCHECKPOINT_H
