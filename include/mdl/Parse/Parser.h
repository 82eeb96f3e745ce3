//===- Parser.h - Parsing and formatting MDL source ------------*- C++ -*-===//
//
// The only interface to the ANTLR-generated parser. Nothing of ANTLR leaks
// through it: syntax errors are reported as located MLIR diagnostics.
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

#ifndef MDL_PARSE_PARSER_H
#define MDL_PARSE_PARSER_H

#include "mdl/AST/AST.h"

#include "mlir/IR/Location.h"
#include "mlir/IR/MLIRContext.h"
#include "llvm/Support/SourceMgr.h"

#include <memory>
#include <optional>
#include <string>

namespace mdl {

/// Limits that keep hostile input from exhausting the stack.
constexpr unsigned kMaxNestingDepth = 200;

/// Parses buffer `bufferId` of `sourceMgr`. Reports every syntax error it can
/// find (the parser recovers) and returns null if there was any.
std::unique_ptr<ast::File> parseFile(llvm::SourceMgr &sourceMgr,
                                     unsigned bufferId,
                                     mlir::MLIRContext &context);

/// The column formatted lines stay within where they can.
constexpr unsigned kFormatColumns = 80;

/// Formats buffer `bufferId` of `sourceMgr`. A file with syntax errors is
/// not formatted: the errors are reported and nullopt returned.
std::optional<std::string> formatFile(llvm::SourceMgr &sourceMgr,
                                      unsigned bufferId,
                                      mlir::MLIRContext &context);

/// Converts a position in a buffer of `sourceMgr` to an MLIR location.
mlir::Location toLocation(llvm::SourceMgr &sourceMgr,
                          mlir::MLIRContext &context, llvm::SMLoc loc);

} // namespace mdl

#endif // MDL_PARSE_PARSER_H
