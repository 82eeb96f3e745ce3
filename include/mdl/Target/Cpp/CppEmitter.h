//===- CppEmitter.h - C++ for a model and a backend ------------*- C++ -*-===//
//
// Emits, for one model and one backend, a header and a source in namespace
// `mdl::gen::<model>::<backend>`: the model's modules and the backend's
// layouts as runtime declarations (see mdl/Runtime/Model/Model.h), with every
// expression compiled to a C++ function. The code describes the model for
// any config, so it does not grow with the number of layers or experts.
// The emitter only reads the IR, which the front end normalises right after
// MLIRGen (`mdl-prepare-emit`).
//
//===----------------------------------------------------------------------===//

#ifndef MDL_TARGET_CPP_CPPEMITTER_H
#define MDL_TARGET_CPP_CPPEMITTER_H

#include "mdl/Dialect/MDL/MDLOps.h"

#include "mlir/IR/BuiltinOps.h"
#include "llvm/Support/raw_ostream.h"

#include <string>

namespace mdl {

struct CppEmitOptions {
  /// The spec as named in the banner.
  std::string specName;
  /// Source locations are given relative to this directory.
  std::string baseDir;
  /// The header's name, as the source includes it.
  std::string headerName;
};

mlir::LogicalResult emitCpp(ModuleDeclOp model, BackendOp backend,
                            const CppEmitOptions &options,
                            llvm::raw_ostream &header,
                            llvm::raw_ostream &source);

} // namespace mdl

#endif // MDL_TARGET_CPP_CPPEMITTER_H
