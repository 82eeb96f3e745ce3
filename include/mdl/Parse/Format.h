//===- Format.h - The canonical layout of MDL source -----------*- C++ -*-===//
//
// `mdlc format` lays a spec out one way: two spaces per block, one
// statement per line, spaces around binary operators and after commas,
// lines broken at 80 columns (continuations indented four more), comments
// kept where they are (trailing ones on their line, others on lines of
// their own), at most one blank line where the source had some. The tokens
// are the source's, so the formatted spec means the same; formatting twice
// changes nothing.
//
//===----------------------------------------------------------------------===//

#ifndef MDL_PARSE_FORMAT_H
#define MDL_PARSE_FORMAT_H

#include <optional>
#include <string>

namespace llvm {
class SourceMgr;
} // namespace llvm

namespace mlir {
class MLIRContext;
} // namespace mlir

namespace mdl {

/// The column formatted lines stay within where they can.
constexpr unsigned kFormatColumns = 80;

/// Formats buffer `bufferId` of `sourceMgr`. A file with syntax errors is
/// not formatted: the errors are reported and nullopt returned.
std::optional<std::string> formatFile(llvm::SourceMgr &sourceMgr,
                                      unsigned bufferId,
                                      mlir::MLIRContext &context);

} // namespace mdl

#endif // MDL_PARSE_FORMAT_H
