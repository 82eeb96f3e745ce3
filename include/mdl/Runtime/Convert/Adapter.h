//===- Adapter.h - LoRA adapters, fused and separate ------------*- C++ -*-===//
//
// A LoRA adapter of a linear module is a pair (A [r, in], B [out, r]) with
// delta W = B A. HF-PEFT adapts HF's modules (q_proj, k_proj, v_proj); a
// backend fuses some of them (Megatron's linear_qkv holds q, gate, k and v
// per query group). Conversion keeps every delta W exact: a fused module
// gets the source modules' A stacked along the rank and a B with each
// source's rows where the fused weight holds them (zero elsewhere); the
// reverse gives each HF module the fused A and its own rows of B. Rows and
// columns are found from the plans of the two layouts, so gated query
// interleaves, per-rank [gate_r; up_r] and tensor-parallel splits of A or B
// follow from the specs. Plain C++17.
//
//===----------------------------------------------------------------------===//

#ifndef MDL_RUNTIME_CONVERT_ADAPTER_H
#define MDL_RUNTIME_CONVERT_ADAPTER_H

#include "mdl/Runtime/Model/Generated.h"
#include "mdl/Runtime/Checkpoint/Safetensors.h"

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace mdl::rt {

/// A 2-D factor of an adapter.
struct LoraFactor {
  DType dtype = DType::BF16;
  int64_t rows = 0, cols = 0;
  std::vector<uint8_t> data;
};

struct Adapter {
  LoraFactor a, b; // a: [r, in], b: [out, r]
  /// For an adapter built from several HF modules' (a fused module's): each
  /// one with its number of rank rows, in order. Going back, each HF module
  /// gets its own block; an adapter without blocks (trained on the fused
  /// module) gives every HF module all of lora_A. Stored in the file's
  /// metadata as "mdl.lora_blocks".
  std::vector<std::pair<std::string, int64_t>> blocks;
};

/// Adapters by module name (the weight tensor's name without `.weight`).
using Adapters = std::map<std::string, Adapter>;

/// The names of an adapter's two factors: PEFT's `lora_A` and `lora_B` by
/// default (Megatron-Bridge: `adapter.linear_in`, `adapter.linear_out`).
struct FactorNames {
  std::string a = "lora_A", b = "lora_B";
};

/// Whether `t` (a tensor of a rank of `m`) is a weight LoRA adapts: a 2-D
/// `<module>.weight` of dense linear weights (no bias, no experts) that is
/// not a copy.
bool isAdaptableWeight(const ModelLayout &m, const RankTensor &t);

/// Reads adapters from a safetensors file: `<module>.<a>.weight` and
/// `<module>.<b>.weight` for the factor names `names`, with any
/// `base_model.model.` prefix (HF-PEFT) removed.
std::optional<Adapters> readAdapters(const SafetensorsFile &file,
                                     std::string &error,
                                     const FactorNames &names = {});
/// Writes adapters, each name prefixed with `prefix` (`base_model.model.`
/// for HF-PEFT), their factors named `names`.
bool writeAdapters(const Adapters &adapters, const std::string &prefix,
                   const std::string &path, std::string &error,
                   const FactorNames &names = {});

/// PEFT's adapter_config.json for `adapters` (those of one rank), from the
/// source's `source`: the same settings, target_modules the last names of
/// the modules, and `r` and `lora_alpha` such that every module's scale
/// (lora_alpha / r, or / sqrt(r) with use_rslora) is the source's. A module
/// of another rank (a fused one stacks its sources' ranks) gets its rank
/// in rank_pattern and its alpha in alpha_pattern, keyed by its last name
/// when every module of that name has that rank, else by its full name.
/// Fails when the source's modules have different scales.
std::optional<json::Value> adapterConfig(const json::Value &source,
                                         const Adapters &adapters,
                                         std::string &error);

/// The adapters of rank `rank` of `backend` from adapters of `hf`'s
/// modules.
std::optional<Adapters> adaptersToBackend(const Binding &hf,
                                          const Binding &backend,
                                          const ParallelConfig &config,
                                          int64_t rank, const Adapters &peft,
                                          std::string &error);

/// Adapters of `hf`'s modules from those of every rank of `backend`.
std::optional<Adapters> adaptersToHf(const Binding &hf, const Binding &backend,
                                     const ParallelConfig &config,
                                     const std::vector<Adapters> &ranks,
                                     std::string &error);

} // namespace mdl::rt

#endif // MDL_RUNTIME_CONVERT_ADAPTER_H
