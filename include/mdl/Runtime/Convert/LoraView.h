//===- LoraView.h - LoRA factors as tensors of a layout ---------*- C++ -*-===//
//
// A transfer plan moves boxes of parameters between tensors. To move LoRA
// adapters only, the factors become parameters of their own: for each
// module HF-PEFT adapts (an HF linear weight tensor), one A [r, in]; for
// each weight parameter p in it, one B [out of p, r]. A rank's adapter of
// a linear weight tensor T [rows, cols] (the per-rank convention of
// Adapter.h: a column-parallel module splits B, a row-parallel one A) is
// then two tensors laid out from T's own pieces: A_T [r, cols] holds the A
// of every module T draws from at the same elements (an adapter trained on
// a fused module shares its A: each HF module's A is the fused one), and
// B_T [rows, r] holds each parameter's B where T holds its rows. A fused
// module is thus a source for separate modules (its A fans out), never a
// destination of them (the elements would be written several times, which
// the plan refuses). Plain C++17.
//
//===----------------------------------------------------------------------===//

#ifndef MDL_RUNTIME_CONVERT_LORAVIEW_H
#define MDL_RUNTIME_CONVERT_LORAVIEW_H

#include "mdl/Runtime/Convert/Adapter.h"
#include "mdl/Runtime/Model/Generated.h"

#include <memory>
#include <string>
#include <vector>

namespace mdl::rt {

/// How a side of a LoRA sync names and stores its factors.
struct LoraNaming {
  FactorNames names;
  /// Put before every tensor name (HF-PEFT's `base_model.model.`).
  std::string prefix;
  DType dtype = DType::BF16;
};

class LoraView {
public:
  /// The factors of rank `rank` adapters of the modules `hf` adapts, as
  /// parameters of `layout` (a layout of the same model instance).
  static std::unique_ptr<LoraView> build(const Binding &hf,
                                         const ModelLayout &layout,
                                         int64_t rank, std::string &error);

  /// The factors as a layout: its parameters are `<p>.lora_A` (one per
  /// adapted module, after its first weight parameter p) and `<p>.lora_B`.
  const ModelLayout &layout() const { return factors; }
  /// Which factors belong to the selected weight parameters of the base
  /// layout (an A when any parameter of its module is selected).
  std::vector<bool> select(const std::vector<bool> &base) const;
  /// Whether base parameter `param` has factors.
  bool adapted(int param) const;
  /// Appends to `out` the factor tensors of a rank whose base tensors are
  /// `weights`: for each adapted weight `<module>.weight`, A then B, named
  /// `<prefix><module>.<A or B name>.weight`.
  bool tensors(const std::vector<RankTensor> &weights,
               const LoraNaming &naming, std::vector<RankTensor> &out,
               std::string &error) const;

private:
  LoraView() = default;

  const ModelLayout *base = nullptr;
  ModelLayout factors;
  int64_t rank = 0;
  /// By base parameter: its module's A and its own B in `factors`, or -1.
  std::vector<int> aOf, bOf;
};

} // namespace mdl::rt

#endif // MDL_RUNTIME_CONVERT_LORAVIEW_H
