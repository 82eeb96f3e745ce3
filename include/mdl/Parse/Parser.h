//===- Parser.h - Parse MDL source into the AST ----------------*- C++ -*-===//
//
// The only interface to the ANTLR-generated parser. Nothing of ANTLR leaks
// through it: syntax errors are reported as located MLIR diagnostics.
//
//===----------------------------------------------------------------------===//

#ifndef MDL_PARSE_PARSER_H
#define MDL_PARSE_PARSER_H

#include "mdl/AST/AST.h"

#include <memory>

namespace llvm {
class SourceMgr;
} // namespace llvm

namespace mlir {
class MLIRContext;
class Location;
} // namespace mlir

namespace mdl {

/// Limits that keep hostile input from exhausting the stack.
constexpr unsigned kMaxNestingDepth = 200;

/// Parses buffer `bufferId` of `sourceMgr`. Reports every syntax error it can
/// find (the parser recovers) and returns null if there was any.
std::unique_ptr<ast::File> parseFile(llvm::SourceMgr &sourceMgr,
                                     unsigned bufferId,
                                     mlir::MLIRContext &context);

/// Converts a position in a buffer of `sourceMgr` to an MLIR location.
mlir::Location toLocation(llvm::SourceMgr &sourceMgr,
                          mlir::MLIRContext &context, llvm::SMLoc loc);

} // namespace mdl

#endif // MDL_PARSE_PARSER_H
