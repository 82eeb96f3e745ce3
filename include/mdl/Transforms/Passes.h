//===- Passes.h - Passes of the mdl dialect --------------------*- C++ -*-===//

#ifndef MDL_TRANSFORMS_PASSES_H
#define MDL_TRANSFORMS_PASSES_H

#include "mdl/Dialect/MDL/MDLOps.h"

#include "mlir/Pass/Pass.h"

namespace mdl {

#define GEN_PASS_DECL
#include "mdl/Transforms/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "mdl/Transforms/Passes.h.inc"

/// The example configs of a model, resolved against the directory of the
/// file that declares it.
std::vector<std::string> exampleConfigPaths(ModuleDeclOp model);

} // namespace mdl

#endif // MDL_TRANSFORMS_PASSES_H
