//===- DType.h - Element types and shapes of tensors ------------*- C++ -*-===//
//
// Shared by the compiler and the runtime (plain C++17, no LLVM): the dtypes
// a spec may name and their safetensors spellings and sizes, and the text
// of a shape.
//
//===----------------------------------------------------------------------===//

#ifndef MDL_RUNTIME_BASE_DTYPE_H
#define MDL_RUNTIME_BASE_DTYPE_H

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace mdl {

enum class DType {
  BF16,
  F16,
  F32,
  F64,
  I64,
  I32,
  I16,
  I8,
  U8,
  Bool,
  F8E4M3,
  F8E5M2,
};

/// The safetensors spelling: "BF16", "F32", "F8_E4M3", ...
std::string_view safetensorsName(DType t);
/// The short spelling used in specs: "bf16", "f32", "f8e4m3", ...
std::string_view specName(DType t);
/// The torch spelling, as config.json's torch_dtype: "bfloat16", ...
std::string_view torchName(DType t);
size_t byteSize(DType t);
/// The number of elements of a tensor of `shape` (1 for a scalar).
int64_t numElements(const std::vector<int64_t> &shape);
/// The bytes of a tensor of `shape` and dtype `t`.
uint64_t numBytes(const std::vector<int64_t> &shape, DType t);
/// A shape as messages and JSON write it, `[d0,d1]`; with `separator`
/// ", " as listings show it, `[d0, d1]`.
std::string shapeText(const std::vector<int64_t> &shape,
                      std::string_view separator = ",");
bool isFloat(DType t);

/// Accepts the spec spelling ("bf16"), the safetensors one ("BF16") and
/// the torch/HF one ("bfloat16", "float32", "torch.float16").
std::optional<DType> parseDType(std::string_view name);

} // namespace mdl

#endif // MDL_RUNTIME_BASE_DTYPE_H
