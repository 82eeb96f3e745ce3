//===- DistCheckpointWriter.h - PyTorch distributed checkpoints -*- C++ -*-===//
//
// Plain C++17. Writes a PyTorch Distributed Checkpoint as Megatron-Core's
// `--ckpt-format torch_dist` saves a model, from one process: the tensors'
// chunks as torch.save archives concatenated in `__0_0.distcp`, the global
// index in `.metadata` (a pickle of torch.distributed.checkpoint's
// Metadata), Megatron's `metadata.json` and `common.pt`. Each tensor is cut
// into one chunk per index of its leading stacked axes (a layer, an expert:
// setLeadingAxes), so that a loader at any parallel size reads only the
// chunks it needs. The tracker file is the conversion's (CheckpointFiles).
//
// The choices, and the versions they are read by (docs/codegen.md):
//  - `.metadata`: pickle protocol 2 of Metadata(state_dict_metadata,
//    planner_data=None, storage_data) with the classes at
//    torch.distributed.checkpoint.metadata / .filesystem (torch >= 2.0) and
//    TensorProperties at torch.distributed._shard.sharded_tensor.metadata,
//    which every torch from 1.13 to 2.11 reads; no storage_meta or version
//    (torch >= 2.4 defaults them).
//  - items: torch.save archives (data.pkl, byteorder, data/0, version) that
//    torch 1.13 and later load.
//  - `metadata.json`: exactly sharded_backend torch_dist, version 1,
//    common_backend torch, version 1 (Megatron-Core up to 0.18 refuses
//    other keys; 0.19 ignores the common ones).
//  - `common.pt`: {checkpoint_version: 3, iteration, args: Namespace(...)}
//    (read by every Megatron-Core, which checks num_layers, hidden_size and
//    num_attention_heads of args).
//
//===----------------------------------------------------------------------===//

#ifndef MDL_RUNTIME_CONVERT_DISTCHECKPOINTWRITER_H
#define MDL_RUNTIME_CONVERT_DISTCHECKPOINTWRITER_H

#include "mdl/Runtime/Convert/TensorFileWriter.h"

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace mdl::rt {

/// The name of the file of a distributed checkpoint's items this writer
/// writes.
inline constexpr const char *kDistDataFile = "__0_0.distcp";

class DistCheckpointWriter : public TensorFileWriter {
public:
  /// Tensor `name` is cut into one chunk per index of its first `axes`
  /// axes (0, the default: one chunk).
  void setLeadingAxes(const std::string &name, size_t axes);
  /// The iteration common.pt records.
  void setIteration(int64_t iteration) { iter = iteration; }
  /// An int entry of common.pt's args (Megatron's argparse.Namespace).
  void setArg(std::string key, int64_t value);

  /// Writes the checkpoint into the directory of `path`, which is its
  /// `.metadata` (written last).
  bool write(const std::string &path, std::string &error) const override;

private:
  std::map<std::string, size_t> leading;
  int64_t iter = 0;
  std::vector<std::pair<std::string, int64_t>> args;
};

} // namespace mdl::rt

#endif // MDL_RUNTIME_CONVERT_DISTCHECKPOINTWRITER_H
