//===- Passes.td - Passes of the mdl dialect ---------------*- tablegen -*-===//

#ifndef MDL_TRANSFORMS_PASSES_TD
#define MDL_TRANSFORMS_PASSES_TD

include "mlir/Pass/PassBase.td"

def PrepareEmit : Pass<"mdl-prepare-emit", "::mlir::ModuleOp"> {
  let summary = "Normalise the IR once: backends self-contained";
  let description = [{
    Runs right after MLIRGen (the front end runs it), so that everything
    after it, the declaration builder and the C++ emitter included, only
    reads the IR. Folds each backend's bases into it: the layouts
    it inherits become its own (cloned, for the modules it has none of),
    and the settings, classes, capabilities, choices and requirements of its
    bases are copied in unless it redefines them; `extends` is dropped.
    Marks each tensor whose `when` condition reads the parallel context with
    `reads_context`, so that the emitter knows which conditions to decide
    at bind time and which to keep for each rank. Lowers each tensor's
    `view` region (products of numbers and dimensions) to `view_axes`
    attributes, and reports a view size that is no such product.
  }];
  let dependentDialects = ["::mdl::MDLDialect"];
}

// The checks share their options: what to instantiate, which backends, and
// the grid of parallel configurations to plan. Each reports the findings of
// its own check IDs (docs/checks.md) as errors at the spec lines involved.
class CheckPass<string passName, string summaryText>
    : Pass<passName, "::mlir::ModuleOp"> {
  let summary = summaryText;
  let options = [
    Option<"hfConfig", "hf-config", "std::string", /*default=*/"",
           "The HF config.json (default: each model's example configs)">,
    ListOption<"overrides", "set", "std::string",
               "KEY=VALUE overrides of the HF config">,
    ListOption<"backendNames", "backend", "std::string",
               "Backends to check (default: every backend with layouts)">,
    Option<"grid", "grid", "std::string", /*default=*/"",
           "Parallel configurations, e.g. 'tp=1,2 pp=1,2' (default: "
           "tp=1,2,4,8 pp=1,2,4 ep=1,2,4,8 etp=1,2)">,
    ListOption<"choices", "choice", "std::string",
               "name=value storage variants of the backends">,
    Option<"hfDir", "hf-dir", "std::string", /*default=*/"",
           "A checkpoint directory to compare with (headers only)">,
    Option<"hfIndex", "hf-index", "std::string", /*default=*/"",
           "A model.safetensors.index.json to compare with (names only)">,
    Option<"hfInventory", "hf-inventory", "std::string", /*default=*/"",
           "A name<TAB>shape<TAB>dtype list to compare with">,
  ];
  let dependentDialects = ["::mdl::MDLDialect"];
}

def CheckCoverage : CheckPass<"mdl-check-coverage",
    "Every parameter held exactly once on each rank that should hold it"> {
  let description = [{
    Checks, for every backend and parallel configuration of the grid, that
    each parameter is held by the tensors of each rank that should hold it
    exactly once and whole (`coverage`), only on the pipeline stage that
    places it (`placement`), that no two tensors of a rank share a name
    (`duplicate-name`), and that every member of a model with a pipeline
    is placed on a stage (`unplaced`).
  }];
}

def CheckShapes : CheckPass<"mdl-check-shapes",
    "Tensor shapes agree with the parameters they hold"> {
  let description = [{
    Checks that views hold as many elements as their axes and that the
    parts of a fused tensor share a dtype (`shape`), and that they agree on
    their shared dimensions (`fused-parts`).
  }];
}

def CheckReinterpret : CheckPass<"mdl-check-reinterpret",
    "No view reorders named dimensions"> {
  let description = [{
    A view axis written as a dimension claims that the storage holds that
    dimension there; a claim the layout contradicts would scramble the
    tensor when read so (`reinterpret`).
  }];
}

def CheckFusedSplit : CheckPass<"mdl-check-fused-split",
    "Even splits do not cut across fused parts"> {
  let description = [{
    A tensor that says it is an even chunk of its gathered form along an
    axis (`split N by tp`) must be what splitting each part on its own gives
    (`fused-split`).
  }];
}

def CheckParallel : CheckPass<"mdl-check-parallel",
    "A requested parallel configuration is valid"> {
  let description = [{
    With a grid of one configuration, reports each reason it is invalid
    (`parallel`): a dimension a mesh axis cannot split, layers that do not
    fit the stages, a backend's own requirements. Every configuration a
    model's `deploy` statements name must be valid (`deploy`).
  }];
}

def CheckStackDepth : CheckPass<"mdl-check-stack-depth",
    "Overrides ask for no more layers than the checkpoint has"> {
  let description = [{
    An override (`set`) may lower the length of a stack, such as the MTP
    layers, but not raise it past what the checkpoint's config has
    (`stack-depth`).
  }];
}

def CheckTiedVocab : CheckPass<"mdl-check-tied-vocab",
    "Tied heads exist where needed; vocab padding stays out of HF"> {
  let description = [{
    With tied embeddings the last pipeline stage must still hold a copy of
    the embedding to compute logits (`tied-head`); a backend without tensor
    parallelism must not pad the vocabulary (`vocab-padding`).
  }];
}

def CheckCapabilities : CheckPass<"mdl-check-capabilities",
    "Modules needing a capability a backend lacks have a fallback"> {
  let description = [{
    Reports a module that needs a device capability its backend lacks and
    names no fallback (`capability`).
  }];
}

def CheckDerived : CheckPass<"mdl-check-derived",
    "Derived tensors say when they are recomputed"> {
  let description = [{
    Reports a derived tensor (a cache computed from weights) without a rule
    for recomputing it after a weight update (`derived`).
  }];
}

def CheckCheckpoint : CheckPass<"mdl-check-checkpoint",
    "A real checkpoint holds exactly the tensors the spec describes"> {
  let description = [{
    With a checkpoint (`hf-dir`, `hf-index` or `hf-inventory`), compares the
    tensors of the HF backend for the config with what it holds: tensors
    missing (`checkpoint-missing`, renamed ones included), unexpected
    (`checkpoint-unexpected`), of another shape (`checkpoint-shape`) or
    dtype (`checkpoint-dtype`), and parts of the model the config promises
    that the checkpoint lacks altogether (`checkpoint-config`). Storage
    variants left open are detected from the checkpoint.
  }];
}

#endif // MDL_TRANSFORMS_PASSES_TD
