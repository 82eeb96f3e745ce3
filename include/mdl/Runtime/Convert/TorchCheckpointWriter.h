//===- TorchCheckpointWriter.h - torch.save files written -------*- C++ -*-===//
//
// Plain C++17 (POSIX), no libtorch. The torch.save archives a conversion
// writes (TorchCheckpoint.h describes the format and reads it).
//
// The writer streams tensors into the archive like SafetensorsWriter (the
// same worker threads and fills), computing each storage's CRC-32 as it
// goes, and writes a pickle that `torch.load(path, weights_only=True)`
// accepts: only collections.OrderedDict, torch._utils._rebuild_tensor_v2
// and torch.*Storage globals, and no float (torch 1.13's weights-only
// unpickler has no BINFLOAT).
//
//===----------------------------------------------------------------------===//

#ifndef MDL_RUNTIME_CONVERT_TORCHCHECKPOINTWRITER_H
#define MDL_RUNTIME_CONVERT_TORCHCHECKPOINTWRITER_H

#include "mdl/Runtime/Convert/TensorFileWriter.h"

#include <cstdint>
#include <string>
#include <utility>
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

} // namespace mdl::rt

#endif // MDL_RUNTIME_CONVERT_TORCHCHECKPOINTWRITER_H
