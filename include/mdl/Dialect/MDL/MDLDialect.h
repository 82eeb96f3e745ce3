//===- MDLDialect.h - The mdl dialect --------------------------*- C++ -*-===//

#ifndef MDL_DIALECT_MDL_MDLDIALECT_H
#define MDL_DIALECT_MDL_MDLDIALECT_H

#include "mlir/IR/Dialect.h"

#include "mdl/Dialect/MDL/MDLOpsDialect.h.inc"

#endif // MDL_DIALECT_MDL_MDLDIALECT_H
