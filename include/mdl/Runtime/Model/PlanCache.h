//===- PlanCache.h - Planning one layout at many configurations -*- C++ -*-===//
//
// Checking a layout plans it at every point of a grid. What planning needs
// whatever the configuration (which tensors name families and whether one
// names too many, each parameter's splits grouped into classes of identical
// splits, the parameters no pipeline stage holds, each tensor's parameters)
// is computed once, and what a configuration gives (split conditions,
// padding, each split's chunk for a rank) once per configuration.
//
//===----------------------------------------------------------------------===//

#ifndef MDL_RUNTIME_MODEL_PLANCACHE_H
#define MDL_RUNTIME_MODEL_PLANCACHE_H

#include "mdl/Runtime/Model/Layout.h"

#include <memory>

namespace mdl::rt {

/// While one lives, the planners of its layout on this thread take what
/// they compute from it and keep it there: they plan as they would without
/// it, only faster. The layout must outlive it and not change meanwhile.
class PlanCache {
public:
  explicit PlanCache(const ModelLayout &m);
  ~PlanCache();
  PlanCache(const PlanCache &) = delete;
  PlanCache &operator=(const PlanCache &) = delete;

  struct Impl;
  /// The live cache of `m` on this thread, if any.
  static Impl *of(const ModelLayout &m);

private:
  std::unique_ptr<Impl> impl;
  PlanCache *outer;
};

} // namespace mdl::rt

#endif // MDL_RUNTIME_MODEL_PLANCACHE_H
