//===- DType.cpp - Element types of checkpoint tensors --------------------===//

#include "mdl/Runtime/Base/DType.h"

using namespace mdl;

namespace {
struct DTypeInfo {
  DType type;
  std::string_view safetensors;
  std::string_view spec;
  std::string_view torch;
  size_t size;
  bool isFloat;
};
constexpr DTypeInfo kTable[] = {
    {DType::BF16, "BF16", "bf16", "bfloat16", 2, true},
    {DType::F16, "F16", "f16", "float16", 2, true},
    {DType::F32, "F32", "f32", "float32", 4, true},
    {DType::F64, "F64", "f64", "float64", 8, true},
    {DType::I64, "I64", "i64", "int64", 8, false},
    {DType::I32, "I32", "i32", "int32", 4, false},
    {DType::I16, "I16", "i16", "int16", 2, false},
    {DType::I8, "I8", "i8", "int8", 1, false},
    {DType::U8, "U8", "u8", "uint8", 1, false},
    {DType::Bool, "BOOL", "bool", "bool", 1, false},
    {DType::F8E4M3, "F8_E4M3", "f8e4m3", "float8_e4m3fn", 1, true},
    {DType::F8E5M2, "F8_E5M2", "f8e5m2", "float8_e5m2", 1, true},
};

const DTypeInfo &info(DType t) {
  for (const DTypeInfo &i : kTable)
    if (i.type == t)
      return i;
  return kTable[0]; // unreachable: the table lists every DType
}
} // namespace

std::string_view mdl::safetensorsName(DType t) { return info(t).safetensors; }
std::string_view mdl::specName(DType t) { return info(t).spec; }
std::string_view mdl::torchName(DType t) { return info(t).torch; }
size_t mdl::byteSize(DType t) { return info(t).size; }
bool mdl::isFloat(DType t) { return info(t).isFloat; }

std::optional<DType> mdl::parseDType(std::string_view name) {
  if (name.substr(0, 6) == "torch.")
    name.remove_prefix(6);
  for (const DTypeInfo &i : kTable)
    if (name == i.safetensors || name == i.spec || name == i.torch)
      return i.type;
  if (name == "half")
    return DType::F16;
  if (name == "float" || name == "fp32")
    return DType::F32;
  if (name == "fp16")
    return DType::F16;
  if (name == "fp64" || name == "double")
    return DType::F64;
  return std::nullopt;
}

int64_t mdl::numElements(const std::vector<int64_t> &shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

uint64_t mdl::numBytes(const std::vector<int64_t> &shape, DType t) {
  return uint64_t(numElements(shape)) * byteSize(t);
}

std::string mdl::shapeText(const std::vector<int64_t> &shape,
                           std::string_view separator) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i)
      out += separator;
    out += std::to_string(shape[i]);
  }
  return out + "]";
}
