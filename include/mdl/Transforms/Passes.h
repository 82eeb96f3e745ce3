//===- Passes.h - Passes of the mdl dialect --------------------*- C++ -*-===//

#ifndef MDL_TRANSFORMS_PASSES_H
#define MDL_TRANSFORMS_PASSES_H

#include "mdl/Dialect/MDL/MDLOps.h"

#include "mlir/Pass/Pass.h"
#include "mlir/Pass/PassManager.h"

#include <memory>

namespace mdl {

#define GEN_PASS_DECL
#include "mdl/Transforms/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "mdl/Transforms/Passes.h.inc"

class CheckSession;

/// Adds every check pass to `pm`, sharing one session so that each model is
/// instantiated, bound and planned once. Every check reports; findings do
/// not fail the pipeline, so the caller reads them from the session.
void addCheckPasses(mlir::OpPassManager &pm,
                    std::shared_ptr<CheckSession> session);


} // namespace mdl

#endif // MDL_TRANSFORMS_PASSES_H
