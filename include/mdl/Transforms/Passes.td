//===- Passes.td - Passes of the mdl dialect ---------------*- tablegen -*-===//

#ifndef MDL_TRANSFORMS_PASSES_TD
#define MDL_TRANSFORMS_PASSES_TD

include "mlir/Pass/PassBase.td"

def Instantiate : Pass<"mdl-instantiate", "::mlir::ModuleOp"> {
  let summary = "Evaluate a model against a concrete HF config";
  let description = [{
    Evaluates each model (or the one named by `model`) against an HF
    config.json: config entries, derived values, requires, stack lengths,
    index-dependent choices and conditions. Appends an `mdl.instance_of` op
    holding one `mdl.concrete_param` per parameter of every instance, with
    concrete sizes. Without `hf-config`, each model's first example config
    is used.
  }];
  let options = [
    Option<"hfConfig", "hf-config", "std::string", /*default=*/"",
           "The HF config.json to evaluate against">,
    ListOption<"overrides", "set", "std::string",
               "KEY=VALUE overrides of the HF config">,
    Option<"modelName", "model", "std::string", /*default=*/"",
           "Only this model">,
  ];
  let dependentDialects = ["::mdl::MDLDialect"];
}

#endif // MDL_TRANSFORMS_PASSES_TD
