//===- PrepareEmit.cpp - Make backends self-contained for emission --------===//

#include "mdl/Dialect/MDL/MDLOps.h"
#include "mdl/Transforms/Passes.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/SymbolTable.h"

#include <functional>
#include <set>

namespace mdl {
#define GEN_PASS_DEF_PREPAREEMIT
#include "mdl/Transforms/Passes.h.inc"
} // namespace mdl

using namespace mlir;
using namespace mdl;

namespace {

/// Whether evaluating `region` may read the parallel context (directly, or
/// through lets of layouts and backends); choices do not count, as they
/// are bound before any rank exists.
bool readsContext(Region &region) {
  bool found = false;
  region.walk([&](Operation *op) {
    if (isa<ContextOp>(op))
      found = true;
    else if (auto g = dyn_cast<GetOp>(op)) {
      // A layout's or a backend's let may read the context; choices are
      // bound before any rank exists. Sema has ruled out value cycles.
      Operation *decl = lookupValueDecl(g, g.getName());
      if (!decl || isa<ModuleDeclOp>(decl->getParentOp()) ||
          isa<ChoiceOp>(decl))
        return;
      if (auto let = dyn_cast<LetOp>(decl))
        found |= readsContext(let.getValue());
      else
        found = true;
    }
  });
  return found;
}

/// Lowers a tensor's `view` region, whose sizes are products of numbers and
/// dimensions (their per-rank extents), to `view_axes`; the region goes.
LogicalResult lowerView(TensorOp t) {
  ModuleDeclOp module = getLayoutModule(t->getParentOfType<LayoutOp>());
  MLIRContext *ctx = t.getContext();
  SmallVector<Attribute> axes;
  for (Value v : cast<YieldOp>(t.getView().front().back()).getValues()) {
    int64_t factor = 1;
    SmallVector<Attribute> atoms;
    std::string spelling;
    bool ok = true;
    std::function<void(Value)> collect = [&](Value x) {
      Operation *def = x.getDefiningOp();
      if (auto c = dyn_cast_or_null<ConstantOp>(def)) {
        factor *= cast<IntegerAttr>(c.getValue()).getInt();
      } else if (auto g = dyn_cast_or_null<GetOp>(def)) {
        if (!isDimDecl(lookupValueDecl(g, g.getName()))) {
          ok = false;
          return;
        }
        for (StringRef a : getDimAtoms(module, g.getName()))
          atoms.push_back(StringAttr::get(ctx, a));
        spelling += (spelling.empty() ? "" : " * ") + g.getName().str();
      } else if (auto b = dyn_cast_or_null<BuiltinOp>(def);
                 b && b.getCallee() == "size") {
        collect(b.getArgs()[0]);
      } else if (auto m = dyn_cast_or_null<mdl::BinaryOp>(def);
                 m && m.getKind() == BinaryKind::mul) {
        collect(m.getLhs());
        collect(m.getRhs());
      } else {
        ok = false;
      }
    };
    collect(v);
    if (!ok || factor <= 0)
      return t.emitError("a view size is a product of positive numbers and "
                         "dimensions, which stand for their per-rank sizes");
    axes.push_back(ViewAxisAttr::get(ctx, factor, ArrayAttr::get(ctx, atoms),
                                     isa_and_nonnull<GetOp>(v.getDefiningOp()),
                                     StringAttr::get(ctx, spelling)));
  }
  t.setViewAxesAttr(ArrayAttr::get(ctx, axes));
  t.getView().getBlocks().clear();
  return success();
}

/// What a backend op declares under a name or role, so that a base's
/// declaration is copied only where the backend has none.
std::string declKey(Operation &op) {
  if (auto s = dyn_cast<SymbolOpInterface>(op))
    return "symbol:" + s.getName().str();
  if (auto c = dyn_cast<ClassOp>(op))
    return "class:" + c.getRole().str();
  if (auto c = dyn_cast<CapabilityOp>(op))
    return "capability:" + c.getCapability().str();
  return ""; // requirements: all of them apply
}

struct PrepareEmitPass
    : public mdl::impl::PrepareEmitBase<PrepareEmitPass> {
  void runOnOperation() override {
    ModuleOp top = getOperation();
    OpBuilder builder(top.getContext());
    bool ok = true;
    top.walk([&](TensorOp t) {
      if (!t.getView().empty())
        ok &= succeeded(lowerView(t));
    });
    if (!ok)
      return signalPassFailure();
    for (auto backend : top.getOps<BackendOp>())
      flatten(top, backend, builder);
    top.walk([](TensorOp t) {
      if (!t.getWhen().empty() && readsContext(t.getWhen()))
        t.setReadsContext(true);
    });
  }

  void flatten(ModuleOp top, BackendOp backend, OpBuilder &builder) {
    std::set<std::string> declared;
    for (Operation &op : backend.getBodyBlock())
      declared.insert(declKey(op));
    std::set<std::string> described;
    for (auto l : top.getOps<LayoutOp>())
      if (l.getBackend() == backend.getSymName())
        described.insert(l.getModule().str());
    std::set<Operation *> seen = {backend};
    for (auto base = backend.getBase(); base;) {
      auto b = dyn_cast_or_null<BackendOp>(
          SymbolTable::lookupSymbolIn(top, *base));
      if (!b || !seen.insert(b).second)
        break;
      if (backend.getMesh().empty())
        backend.setMeshAttr(b.getMeshAttr());
      builder.setInsertionPointToEnd(&backend.getBodyBlock());
      for (Operation &op : b.getBodyBlock()) {
        std::string key = declKey(op);
        if (key.empty() || declared.insert(key).second)
          builder.clone(op);
      }
      for (auto l : llvm::to_vector(top.getOps<LayoutOp>()))
        if (l.getBackend() == b.getSymName() &&
            described.insert(l.getModule().str()).second) {
          builder.setInsertionPointAfter(l);
          cast<LayoutOp>(builder.clone(*l)).setBackend(backend.getSymName());
        }
      base = b.getBase();
    }
    backend.removeBaseAttr();
  }
};

} // namespace
