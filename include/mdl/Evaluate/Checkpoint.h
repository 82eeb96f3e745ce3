//===- Checkpoint.h - Comparing a spec with a real checkpoint --*- C++ -*-===//
//
// What a checkpoint holds (from its safetensors headers, its index, or an
// inventory list) and how it differs from the tensors a spec expects for
// the same config: missing, unexpected, mis-shaped and mis-typed tensors,
// and parts of the model the config promises that the checkpoint lacks
// altogether (an MTP block, stack elements).
//
//===----------------------------------------------------------------------===//

#ifndef MDL_EVALUATE_CHECKPOINT_H
#define MDL_EVALUATE_CHECKPOINT_H

#include "mdl/Dialect/MDL/MDLOps.h"
#include "mdl/Runtime/Model/Model.h"

#include "llvm/Support/Error.h"

#include <map>
#include <unordered_map>
#include <set>
#include <optional>
#include <string>
#include <vector>

namespace mdl {

struct CheckpointSource {
  enum Kind {
    None,
    Dir,       // a directory of safetensors files: headers only
    Index,     // model.safetensors.index.json: names only
    Inventory, // name<TAB>[d0,d1]<TAB>DTYPE lines, as `mdlc params` prints
  };
  Kind kind = None;
  std::string path;
};

/// A tensor of a checkpoint: its shape and dtype where the source has them.
struct CheckpointEntry {
  std::optional<std::vector<int64_t>> shape;
  std::optional<DType> dtype;
};
/// By name; looked up once per tensor of every layout tried.
using CheckpointContents = std::unordered_map<std::string, CheckpointEntry>;

llvm::Expected<CheckpointContents>
readCheckpointContents(const CheckpointSource &source);

struct CheckpointFinding {
  std::string check; // checkpoint-missing, -unexpected, -shape, -dtype, -config
  std::string message;
  mlir::LocationAttr at;
};

/// The differences between the tensors `bound` expects and `ckpt`. A tensor
/// missing under a name while the checkpoint holds an unexpected one of the
/// same shape and dtype under a similar name is reported once, as renamed.
/// Instances (and trailing stack elements) of which the checkpoint holds no
/// tensor at all are reported once each, at their declaration, as
/// disagreements between config and checkpoint. Unexpected tensors are
/// reported at `model`, but for those in `dropped` (of stack elements an
/// override leaves out), which are skipped. Also counts the tensors `bound`
/// expects (at one rank, without parallelism) and those the checkpoint
/// holds by name.
struct CheckpointComparison {
  std::vector<CheckpointFinding> findings;
  size_t expected = 0, present = 0;
};
CheckpointComparison
compareCheckpoint(const rt::BoundLayout &bound, const CheckpointContents &ckpt,
                  ModuleDeclOp model, llvm::StringRef configPath,
                  const std::set<std::string> &dropped = {});

} // namespace mdl

#endif // MDL_EVALUATE_CHECKPOINT_H
