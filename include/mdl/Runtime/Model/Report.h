//===- Report.h - Plans and LoRA tables as JSON -----------------*- C++ -*-===//
//
// The machine-readable answers about a bound layout, in one place so that
// `mdlc plan --format=json`, `mdlc lora --format=json` and the Python
// package give the same documents. Plain C++17.
//
//===----------------------------------------------------------------------===//

#ifndef MDL_RUNTIME_MODEL_REPORT_H
#define MDL_RUNTIME_MODEL_REPORT_H

#include "mdl/Runtime/Base/Json.h"
#include "mdl/Runtime/Model/Plan.h"

#include <string>

namespace mdl::rt {

/// The rank number of a context: tp fastest, then ep, then pp.
int64_t rankNumber(const RankContext &ctx, const ParallelConfig &config);

/// A local tensor's name as plans show it: layer numbers local to the
/// stage, a family once with the range of its index (`experts.{E 0..3}.w`).
std::string planName(const ModelLayout &m, const LocalTensor &t);

/// The plan of a valid configuration: capabilities, kernel paths and, for
/// every rank (or only `rank` when it is not negative), each tensor with
/// its shape, dtype and the boxes of parameters it holds. `source` names
/// the config the layout was bound for.
json::Value planJson(const ModelLayout &m, const ParallelConfig &config,
                     int64_t rank, const std::string &source);

/// The LoRA injection table of rank `rank` for adapters of rank `r`.
json::Value loraJson(const ModelLayout &m, const ParallelConfig &config,
                     int64_t rank, int64_t r);

} // namespace mdl::rt

#endif // MDL_RUNTIME_MODEL_REPORT_H
