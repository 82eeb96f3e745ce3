//===- Lora.h - LoRA injection tables ---------------------------*- C++ -*-===//
//
// For each linear module a backend has on a rank: the class LoRA wraps,
// its constructor sizes in that class's own semantics, the local shapes of
// lora_A and lora_B, which factor tensor parallelism splits, the forward
// contract, and which factors need a TP all-reduce of their gradients.
// Plain C++17, from a bound layout alone, so that the compiler (`mdlc
// lora`) and generated code give the same table.
//
//===----------------------------------------------------------------------===//

#ifndef MDL_RUNTIME_MODEL_LORA_H
#define MDL_RUNTIME_MODEL_LORA_H

#include "mdl/Runtime/Model/Plan.h"

#include <string>
#include <vector>

namespace mdl::rt {

/// A LoRA target: one linear module of the backend on one rank.
struct LoraTarget {
  std::string module;    // the backend module (the weight's name sans .weight)
  ModuleRole role = ModuleRole::Replicated;
  std::string baseClass; // e.g. TELayerNormColumnParallelLinear
  std::string sizes;     // "global" or "local": constructor semantics
  int64_t inFeatures = 0, outFeatures = 0; // in that semantics
  std::vector<int64_t> loraA, loraB;       // local shapes [r, in], [out, r]
  std::vector<int64_t> delta; // B x A merged into the local weight [out, in]
  std::string sharded;   // "A", "B" or "none"
  std::string returns;   // the forward contract
  bool inputIsParallel = false;
  /// For a grouped (expert) module: how many experts the rank holds, each
  /// a GEMM with these sizes and factors.
  int64_t localExperts = 0;
  /// Factors replicated over tensor ranks whose gradients need a TP
  /// all-reduce under sequence parallelism.
  std::vector<std::string> allReduceGrads;
  /// The parameters (linears) the module holds, e.g. q, gate, k, v.
  std::vector<std::string> params;
};

/// The LoRA injection table of rank `rank` for adapters of rank `r`: every
/// linear module the backend lets LoRA target.
std::vector<LoraTarget> loraTable(const ModelLayout &m,
                                  const ParallelConfig &config, int64_t rank,
                                  int64_t r = 16);

/// The "all-linear" target set: the module names (the last component, as
/// linear_qkv) of every LoRA target but the output head.
std::vector<std::string> allLinearTargets(const ModelLayout &m);

} // namespace mdl::rt

#endif // MDL_RUNTIME_MODEL_LORA_H
