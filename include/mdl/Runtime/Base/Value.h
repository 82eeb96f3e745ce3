//===- Value.h - Values of the MDL expression language ----------*- C++ -*-===//
//
// Shared by the compiler's interpreter and generated code: the values a
// config entry, let or condition may take, and the operators on them with
// their checks (overflow, division by zero, ranges). Plain C++17.
//
//===----------------------------------------------------------------------===//

#ifndef MDL_RUNTIME_BASE_VALUE_H
#define MDL_RUNTIME_BASE_VALUE_H

#include "mdl/Runtime/Base/DType.h"
#include "mdl/Runtime/Base/Json.h"

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace mdl::rt {

/// A value, or "missing" (an hf() key that is absent or null), which only
/// `??` may consume.
struct Value {
  enum Kind { Missing, Int, Bool, String, DType, List };
  Kind kind = Missing;
  int64_t i = 0; // Int, Bool (0/1)
  std::string s; // String
  mdl::DType dtype = mdl::DType::BF16;
  std::vector<Value> list;
  /// For Missing: the keys that were looked for.
  std::vector<std::string> triedKeys;

  static Value integer(int64_t v);
  static Value boolean(bool v);
  static Value string(std::string v);
  static Value dtypeOf(mdl::DType d);
  static Value listOf(std::vector<Value> elements);
  static Value missing(std::vector<std::string> keys);

  bool operator==(const Value &o) const;
  bool operator!=(const Value &o) const { return !(*this == o); }
  /// `4`, `true`, `"x"`, `[1, 2]`, `bf16`, `<missing>`.
  std::string str() const;
};

json::Value toJson(const Value &v);

/// The binary operators, by their spelling in the IR.
enum class BinaryOp { Add, Sub, Mul, Div, Mod, Concat, Lt, Le, Gt, Ge, Eq, Ne,
                      And, Or };
std::string_view binaryOpSpelling(BinaryOp op); // "+", "-", ...

/// Applies `op` to present operands (And and Or too, without short
/// circuit). Integer division and modulo floor, as in Python. False, with
/// `error` set, on overflow or division by zero.
bool applyBinary(BinaryOp op, const Value &l, const Value &r, Value &out,
                 std::string &error);
bool applyNeg(const Value &v, Value &out, std::string &error);
bool applyIndex(const Value &list, const Value &index, Value &out,
                std::string &error);
bool applyContains(const Value &list, const Value &v);
/// len, range, min, max, gcd, ceildiv, str, pad, dtype, size.
bool applyBuiltin(std::string_view name, const std::vector<Value> &args,
                  Value &out, std::string &error);

/// Converts a config value to the type spelled `type` ("int", "bool",
/// "string", "dtype", "list<...>"). False, with `error` saying what the
/// spec expected, when it has another type.
bool valueFromJson(const json::Value &j, std::string_view type, Value &out,
                   std::string &error);

/// "'config.json' has no key 'x'" or "... none of the keys 'x', 'y'".
std::string missingMessage(std::string_view configPath, const Value &missing);

/// Bounds that keep hostile configs from exhausting memory or time.
constexpr int64_t kMaxListLength = 1 << 22;
constexpr int64_t kMaxStackLength = 1 << 20;
/// The most tensors one layout entry may name (a family over layers and
/// experts: 100 layers of 512 experts are 51200), and the most elements a
/// model may have (2^46, 70 trillion).
constexpr int64_t kMaxFamilySize = 1 << 18;
constexpr int64_t kMaxModelElements = int64_t(1) << 46;
/// The longest chain of names whose values need each other (`let b = a;
/// let c = b; ...`), and the deepest nesting of module instances: both are
/// evaluated recursively.
constexpr int kMaxEvalDepth = 1000;

} // namespace mdl::rt

#endif // MDL_RUNTIME_BASE_VALUE_H
