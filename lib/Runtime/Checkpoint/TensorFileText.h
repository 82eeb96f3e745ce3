//===- TensorFileText.h - What tensor file code shares ----------*- C++ -*-===//
//
// Private to the runtime's readers and writers of tensor files (safetensors,
// checkpoints, the streamed writer): how their messages quote what they read,
// and the byte size of a tensor.
//
//===----------------------------------------------------------------------===//

#ifndef MDL_LIB_RUNTIME_TENSORFILETEXT_H
#define MDL_LIB_RUNTIME_TENSORFILETEXT_H

#include "mdl/Runtime/Base/DType.h"
#include "mdl/Runtime/Base/Json.h"

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace mdl::rt::detail {

inline std::string errnoText() { return std::strerror(errno); }

inline bool isValidUtf8(const std::string &s) {
  // The JSON reader validates UTF-8; a quoted string round-trips through it.
  json::ParseError ignored;
  return json::parse(json::quote(s), ignored).has_value();
}

/// A message made printable: it may quote bytes of a corrupt file, which
/// must not reach a terminal raw.
inline std::string printable(const std::string &message) {
  bool utf8 = isValidUtf8(message);
  std::string out;
  for (unsigned char c : message) {
    if (c < 0x20 || c == 0x7F || (c >= 0x80 && !utf8)) {
      const char *hex = "0123456789abcdef";
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 15];
    } else {
      out += char(c);
    }
  }
  return out;
}

/// A name for messages: 'name', with control characters (and the bytes of
/// invalid UTF-8) escaped so that a message stays one printable line.
inline std::string nameText(std::string_view name) {
  std::string q = json::quote(name);
  return "'" + printable(q.substr(1, q.size() - 2)) + "'";
}

/// The byte size of `shape` x `dtype`; nullopt when a dimension is negative
/// or the size does not fit in int64 (offsets in the header are int64).
inline std::optional<uint64_t> tensorBytes(const std::vector<int64_t> &shape,
                                           DType dtype) {
  constexpr uint64_t kMax = uint64_t(std::numeric_limits<int64_t>::max());
  uint64_t n = byteSize(dtype);
  for (int64_t d : shape) {
    if (d < 0)
      return std::nullopt;
    if (d != 0 && n > kMax / uint64_t(d))
      return std::nullopt;
    n *= uint64_t(d);
  }
  return n;
}

} // namespace mdl::rt::detail

#endif // MDL_LIB_RUNTIME_TENSORFILETEXT_H
