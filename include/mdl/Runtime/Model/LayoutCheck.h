//===- LayoutCheck.h - Whether a layout holds each parameter ----*- C++ -*-===//
//
// The validity checks of a layout for a parallel configuration, on top of
// the planner: every parameter held exactly once where it should be, views
// and splits that agree with the storage, one name per tensor of a rank.
// What they find are Problems (Plan.h), for `mdlc check` to report.
//
//===----------------------------------------------------------------------===//

#ifndef MDL_RUNTIME_MODEL_LAYOUTCHECK_H
#define MDL_RUNTIME_MODEL_LAYOUTCHECK_H

#include "mdl/Runtime/Model/Plan.h"

#include <vector>

namespace mdl::rt {

/// What a check may leave out: the tensors and parameters of a layer that
/// repeats an earlier one apart from its index (same parameters, shapes,
/// splits and tensors, none shared with other layers). Planning does not
/// depend on a layer's stage beyond its name, so one layer of each class
/// stands for all. Computed once per ModelLayout; independent of the
/// parallel configuration.
struct CheckScope {
  std::vector<bool> skipTensor, skipParam;
};
CheckScope representativeLayers(const ModelLayout &m);

/// The checks of a layout for one parallel configuration: that every
/// parameter is held exactly once on each rank that should hold it, that
/// tensors are made of whole, consistent pieces, that views do not reorder
/// named dimensions and that even splits do not cut across fused parts.
/// Runs on representative ranks (the first and last of each mesh axis, and
/// every pipeline stage), which suffices because splits are even chunkings.
std::vector<Problem> checkLayout(const Planner &planner,
                                 const CheckScope *scope = nullptr);

/// That no two tensors of a rank share a name (one would overwrite the
/// other: MTP layers all mapped to layer 0). Every layer is named, whether
/// it represents others or not. Names depend on the pipeline layout only
/// (stages, local layer numbers), so one configuration per pipeline layout
/// suffices, on the first tensor and expert rank.
std::vector<Problem> checkNames(const Planner &planner);

} // namespace mdl::rt

#endif // MDL_RUNTIME_MODEL_LAYOUTCHECK_H
