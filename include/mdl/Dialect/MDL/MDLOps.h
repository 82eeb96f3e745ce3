//===- MDLOps.h - Operations, types and attributes of mdl ------*- C++ -*-===//

#ifndef MDL_DIALECT_MDL_MDLOPS_H
#define MDL_DIALECT_MDL_MDLOPS_H

#include "mdl/Dialect/MDL/MDLDialect.h"

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/IR/RegionKindInterface.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"

#include "mdl/Dialect/MDL/MDLEnums.h.inc"

#define GET_TYPEDEF_CLASSES
#include "mdl/Dialect/MDL/MDLOpsTypes.h.inc"

#define GET_ATTRDEF_CLASSES
#include "mdl/Dialect/MDL/MDLAttrs.h.inc"

namespace mdl {
class ModuleDeclOp;
class BackendOp;
class LayoutOp;
} // namespace mdl

#define GET_OP_CLASSES
#include "mdl/Dialect/MDL/MDLOps.h.inc"

namespace mdl {

/// The builtin module op holding the declarations around `op`.
mlir::ModuleOp getTopModule(mlir::Operation *op);

/// Finds the declaration of a named value (`mdl.input`, `mdl.config`,
/// `mdl.let`, `mdl.dim`) visible from `from`: the lets of an enclosing
/// layout, then its module; the enclosing module; or the enclosing backend
/// and its bases.
mlir::Operation *lookupValueDecl(mlir::Operation *from, llvm::StringRef name);

/// The module a layout, or an op inside one, describes.
ModuleDeclOp getLayoutModule(LayoutOp layout);

/// The declared type of a value declaration.
mlir::Type getDeclaredType(mlir::Operation *decl);

/// Whether `decl` may name a dimension (a `mdl.dim`, or an input marked dim).
bool isDimDecl(mlir::Operation *decl);

/// The atomic dimensions of dimension `name` in `module`.
llvm::SmallVector<llvm::StringRef> getDimAtoms(ModuleDeclOp module,
                                               llvm::StringRef name);

/// Resolves a dotted parameter reference (`q`, `experts.gate`, `o.bias`)
/// from `module`. Returns the declaring op (`mdl.param` or `mdl.linear`) and
/// its module, or a null op with `why` set.
struct ResolvedParam {
  mlir::Operation *decl = nullptr;
  ModuleDeclOp owner;
  bool bias = false;
};
ResolvedParam resolveParam(ModuleDeclOp module, llvm::StringRef dotted,
                           std::string &why);

/// Converts between the dialect's element types and the runtime's.
enum class DType;
DType toDType(ElementType t);
ElementType toElementType(DType t);

} // namespace mdl

#endif // MDL_DIALECT_MDL_MDLOPS_H
