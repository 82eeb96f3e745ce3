//===- ASTDumper.h - Print the MDL AST -------------------------*- C++ -*-===//

#ifndef MDL_AST_ASTDUMPER_H
#define MDL_AST_ASTDUMPER_H

#include "mdl/AST/AST.h"

namespace llvm {
class raw_ostream;
class SourceMgr;
} // namespace llvm

namespace mdl::ast {

/// Prints `file` as an indented tree, one node per line with its
/// line:col, for `mdlc -emit=ast`.
void dump(const File &file, llvm::SourceMgr &sourceMgr, llvm::raw_ostream &os);

} // namespace mdl::ast

#endif // MDL_AST_ASTDUMPER_H
