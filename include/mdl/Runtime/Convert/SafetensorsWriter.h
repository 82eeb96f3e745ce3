//===- SafetensorsWriter.h - Writing safetensors files ----------*- C++ -*-===//
//
// Plain C++17 (POSIX). The safetensors files a conversion writes, streamed
// by TensorFileWriter; Safetensors.h describes the format and reads it.
//
//===----------------------------------------------------------------------===//

#ifndef MDL_RUNTIME_CONVERT_SAFETENSORSWRITER_H
#define MDL_RUNTIME_CONVERT_SAFETENSORSWRITER_H

#include "mdl/Runtime/Convert/TensorFileWriter.h"

namespace mdl::rt {

/// Writes a safetensors file (see TensorFileWriter).
///
/// The header lists tensors sorted by name (deterministic whatever the order
/// of add()). The data section orders them by element size, largest first,
/// then by name, so that with the header padded with spaces to a multiple of
/// 8 bytes every tensor is aligned to its element size in the file, as in
/// files written by the reference implementation.
class SafetensorsWriter : public TensorFileWriter {
public:
  bool write(const std::string &path, std::string &error) const override;
};

} // namespace mdl::rt

#endif // MDL_RUNTIME_CONVERT_SAFETENSORSWRITER_H
