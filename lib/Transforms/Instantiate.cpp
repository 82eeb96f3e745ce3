//===- Instantiate.cpp - Evaluate a model against an HF config ------------===//

#include "mdl/Evaluate/Instance.h"
#include "mdl/Transforms/Passes.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/SmallString.h"
#include "llvm/Support/Path.h"

namespace mdl {
#define GEN_PASS_DEF_INSTANTIATE
#include "mdl/Transforms/Passes.h.inc"
} // namespace mdl

using namespace mlir;
using namespace mdl;

static Attribute toAttr(const EvalValue &v, Builder &b) {
  switch (v.kind) {
  case EvalValue::Int:
    return b.getI64IntegerAttr(v.i);
  case EvalValue::Bool:
    return b.getBoolAttr(v.i);
  case EvalValue::String:
    return b.getStringAttr(v.s);
  case EvalValue::DType:
    return ElementTypeAttr::get(b.getContext(), toElementType(v.dtype));
  case EvalValue::List: {
    SmallVector<Attribute> elems;
    for (const EvalValue &e : v.list)
      elems.push_back(toAttr(e, b));
    return b.getArrayAttr(elems);
  }
  case EvalValue::Missing:
    break;
  }
  return b.getUnitAttr();
}

namespace {

struct InstantiatePass : public mdl::impl::InstantiateBase<InstantiatePass> {
  using InstantiateBase::InstantiateBase;

  void runOnOperation() override {
    ModuleOp top = getOperation();
    SmallVector<ModuleDeclOp> models;
    for (auto m : top.getOps<ModuleDeclOp>())
      if (m.getModel() && (modelName.empty() || m.getSymName() == modelName))
        models.push_back(m);
    if (!modelName.empty() && models.empty()) {
      top.emitError() << "no model named '" << modelName << "'";
      return signalPassFailure();
    }
    OpBuilder builder(top.getBodyRegion());
    builder.setInsertionPointToEnd(top.getBody());
    for (ModuleDeclOp model : models) {
      std::string path = hfConfig;
      if (path.empty()) {
        std::vector<std::string> examples = exampleConfigPaths(model);
        if (examples.empty()) {
          model.emitError() << "model '" << model.getSymName()
                            << "' has no example config; pass hf-config";
          return signalPassFailure();
        }
        path = examples.front();
      }
      std::unique_ptr<HFConfig> config = HFConfig::load(path, getContext());
      if (!config)
        return signalPassFailure();
      for (const std::string &o : overrides) {
        size_t eq = o.find('=');
        if (eq == std::string::npos) {
          top.emitError() << "set takes KEY=VALUE, not '" << o << "'";
          return signalPassFailure();
        }
        config->addOverride(o.substr(0, eq), o.substr(eq + 1));
      }
      std::unique_ptr<Instantiation> inst =
          Instantiation::create(model, *config);
      if (!inst)
        return signalPassFailure();
      emit(builder, *inst, path);
    }
  }

  void emit(OpBuilder &builder, Instantiation &inst, StringRef source) {
    SmallVector<NamedAttribute> config;
    for (auto &[name, value] : inst.configValues())
      config.push_back(builder.getNamedAttr(name, toAttr(value, builder)));
    ModuleDeclOp model = inst.model;
    auto op = builder.create<InstanceOfOp>(
        model.getLoc(),
        (model.getSymName() + "_instance").str(), model.getSymName(),
        builder.getDictionaryAttr(config), source);
    OpBuilder::InsertionGuard guard(builder);
    builder.createBlock(&op.getBody());
    inst.walk([&](InstanceNode &node) {
      for (const ConcreteParam &p : node.params) {
        SmallVector<Attribute> axes;
        for (const auto &axis : p.axes) {
          SmallVector<StringRef> names(axis.begin(), axis.end());
          axes.push_back(builder.getStrArrayAttr(names));
        }
        StringRef name = cast<SymbolOpInterface>(p.decl).getName();
        builder.create<ConcreteParamOp>(
            p.decl->getLoc(), builder.getStringAttr(p.path),
            SymbolRefAttr::get(node.module.getSymNameAttr()),
            builder.getStringAttr(p.bias ? (name + ".bias").str()
                                         : name.str()),
            builder.getArrayAttr(axes), builder.getDenseI64ArrayAttr(p.sizes),
            ElementTypeAttr::get(builder.getContext(),
                                 toElementType(p.dtype)),
            p.style,
            p.expert.empty() ? StringAttr() : builder.getStringAttr(p.expert),
            builder.getStringAttr(p.stage));
      }
    });
  }
};

} // namespace
