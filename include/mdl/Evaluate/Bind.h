//===- Bind.h - Bind an instantiated model to a backend --------*- C++ -*-===//
//
// Walks the instance tree with the backend's layouts (inherited from its
// bases module by module), naming every tensor from the mounts above it,
// and produces the runtime's ModelLayout. Errors are reported at the layout
// entries that cause them.
//
//===----------------------------------------------------------------------===//

#ifndef MDL_EVALUATE_BIND_H
#define MDL_EVALUATE_BIND_H

#include "mdl/Evaluate/Instance.h"
#include "mdl/Runtime/Layout.h"

#include <memory>

namespace mdl {

/// A backend profile evaluated for use: its chain of bases, settings and
/// classes.
class Backend {
public:
  /// Finds backend `name` in the module holding `anchor`; null (after an
  /// error) if there is none.
  static std::unique_ptr<Backend> lookup(mlir::Operation *anchor,
                                         llvm::StringRef name);

  llvm::StringRef name() const {
    return const_cast<BackendOp &>(chain.front()).getSymName();
  }
  /// The backend first, then its bases.
  llvm::SmallVector<BackendOp> chain;

  /// The layout of `module` for this backend (or the nearest base).
  LayoutOp layoutFor(ModuleDeclOp module) const;
  /// A `let` of the backend or its bases, or null.
  LetOp setting(llvm::StringRef name) const;
  /// The mesh axes: the backend's own, or its nearest base's.
  std::vector<MeshAxis> mesh() const;
  /// The storage variants (`choice`) of the backend and its bases, with
  /// their options, in declaration order.
  std::vector<std::pair<std::string, std::vector<std::string>>> choices() const;

private:
  llvm::DenseMap<mlir::Operation *, LayoutOp> layouts;
};

/// An instantiated model bound to a backend.
struct BoundModel {
  rt::ModelLayout layout;
  /// Source ids of params and tensors index this: the op to report at.
  std::vector<mlir::Operation *> sources;
  /// Parallel to layout.params.
  std::vector<const ConcreteParam *> params;
  /// Parallel to layout.tensors: the instance whose layout declares each
  /// (the stack element, for an entry repeated over a stack).
  std::vector<InstanceNode *> tensorNodes;
  /// The storage variants bound, read by the conditions evaluated later.
  std::shared_ptr<llvm::StringMap<std::string>> choices;
};

/// Whether evaluating `region` may read the parallel context (directly, or
/// through lets of layouts and backends); choices do not count, as they
/// are bound before any rank exists.
bool readsContext(mlir::Region &region);

/// The option each choice of `backend` takes for `inst` when nothing
/// settles it: the model layout's default (`choice x = expr;`), else the
/// first option. Nothing after reporting an error.
std::optional<std::map<std::string, std::string>>
defaultChoices(Instantiation &inst, const Backend &backend);

/// Binds `inst` to `backend` with the given storage variants (choices not
/// given take their defaults). Returns null after reporting errors.
std::unique_ptr<BoundModel>
bindModel(Instantiation &inst, const Backend &backend,
          const std::map<std::string, std::string> &choices = {});

} // namespace mdl

#endif // MDL_EVALUATE_BIND_H
