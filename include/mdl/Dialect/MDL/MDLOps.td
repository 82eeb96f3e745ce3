//===- MDLOps.td - Operations of the mdl dialect -----------*- tablegen -*-===//

#ifndef MDL_DIALECT_MDL_MDLOPS_TD
#define MDL_DIALECT_MDL_MDLOPS_TD

include "mdl/Dialect/MDL/MDLDialect.td"
include "mdl/Dialect/MDL/MDLTypes.td"
include "mdl/Dialect/MDL/MDLAttrs.td"
include "mlir/IR/SymbolInterfaces.td"
include "mlir/IR/RegionKindInterface.td"
include "mlir/IR/OpAsmInterface.td"
include "mlir/Interfaces/SideEffectInterfaces.td"
include "mlir/IR/OpBase.td"
include "mlir/Interfaces/InferTypeOpInterface.td"

//===----------------------------------------------------------------------===//
// Declarations
//===----------------------------------------------------------------------===//

// A declaration that holds other declarations in one block.
class MDL_ContainerOp<string mnemonic, list<Trait> traits = []>
    : MDL_Op<mnemonic, traits # [NoTerminator, SingleBlock,
                                 NoRegionArguments]>;

def MDL_ModuleDeclOp : MDL_ContainerOp<"module", [Symbol, SymbolTable,
                                                  IsolatedFromAbove]> {
  let summary = "a module or a model";
  let description = [{
    A module declares inputs, dimensions, parameters, linears and instances
    of other modules. A model (`model` set) is a root module with a config;
    `examples` lists HF config files it is checked with; `architectures`
    and `model_types` the config.json values it serves.
  }];
  let arguments = (ins SymbolNameAttr:$sym_name, UnitAttr:$model,
                       OptionalAttr<StrArrayAttr>:$examples,
                       OptionalAttr<StrArrayAttr>:$architectures,
                       OptionalAttr<StrArrayAttr>:$model_types);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = "(`model` $model^)? $sym_name attr-dict-with-keyword $body";
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    ::mlir::Block &getBodyBlock() { return getBody().front(); }
  }];
}

// A named value of a module, model, layout or backend, computed by a region.
class MDL_ValueDeclOp<string mnemonic, list<Trait> traits = []>
    : MDL_Op<mnemonic, traits # [Symbol]> {
  let hasRegionVerifier = 1;
}

def MDL_InputOp : MDL_ValueDeclOp<"input"> {
  let summary = "a parameter of a module";
  let description = [{
    `mdl.input @H : i64 dim` is a module input that also names a
    dimension. The optional region computes a default.
  }];
  let arguments = (ins SymbolNameAttr:$sym_name, TypeAttr:$type,
                       UnitAttr:$dim);
  let regions = (region AnyRegion:$defaultValue);
  let assemblyFormat = [{
    $sym_name `:` $type (`dim` $dim^)? (`default` $defaultValue^)? attr-dict
  }];
}

def MDL_ConfigOp : MDL_ValueDeclOp<"config"> {
  let summary = "a config entry of a model";
  let description = [{
    The optional `detect` region yields the candidates a checkpoint chooses
    among when the config holds none of the keys `value` reads (a list of
    the entry's type).
  }];
  let arguments = (ins SymbolNameAttr:$sym_name, TypeAttr:$type);
  let regions = (region SizedRegion<1>:$value, AnyRegion:$detect);
  let assemblyFormat = [{
    $sym_name `:` $type $value (`detect` $detect^)? attr-dict
  }];
}

def MDL_LetOp : MDL_ValueDeclOp<"let"> {
  let summary = "a named value derived from others";
  let arguments = (ins SymbolNameAttr:$sym_name, TypeAttr:$type);
  let regions = (region SizedRegion<1>:$value);
  let assemblyFormat = "$sym_name `:` $type $value attr-dict";
}

def MDL_DimOp : MDL_ValueDeclOp<"dim"> {
  let summary = "a named dimension";
  let description = [{
    `mdl.dim @P { ... }` has a size computed by its region;
    `mdl.dim @Hv factors [@Hk, @R]` is factored: an index of Hv is a tuple
    of indices of Hk and R, row-major.
  }];
  let arguments = (ins SymbolNameAttr:$sym_name,
                       OptionalAttr<FlatSymbolRefArrayAttr>:$factors);
  let regions = (region AnyRegion:$size);
  let assemblyFormat = [{
    $sym_name (`factors` $factors^)? ($size^)? attr-dict
  }];
}

def MDL_RequireOp : MDL_Op<"require"> {
  let summary = "a constraint with the message shown when it fails";
  let arguments = (ins StrAttr:$message);
  let regions = (region SizedRegion<1>:$cond);
  let assemblyFormat = "$message $cond attr-dict";
  let hasRegionVerifier = 1;
}

def MDL_DefaultDTypeOp : MDL_Op<"default_dtype"> {
  let summary = "the dtype of parameters that name none";
  let regions = (region SizedRegion<1>:$value);
  let assemblyFormat = "$value attr-dict";
  let hasRegionVerifier = 1;
}

def MDL_ParamOp : MDL_Op<"param", [Symbol]> {
  let summary = "a parameter tensor in named dimensions";
  let description = [{
    `shape` lists the axes, each a product of dimension symbols. `expert`
    names the expert dimension of a grouped parameter; it is the outermost
    axis. The optional region is the condition under which it exists.
  }];
  let arguments = (ins SymbolNameAttr:$sym_name, ArrayAttr:$shape,
                       OptionalAttr<FlatSymbolRefAttr>:$expert,
                       OptionalAttr<MDL_ElementTypeAttr>:$dtype,
                       OptionalAttr<MDL_ParallelStyleAttr>:$style);
  let regions = (region AnyRegion:$cond);
  let assemblyFormat = [{
    $sym_name (`[` $expert^ `]`)? `:` $shape (`dtype` $dtype^)? (`style` $style^)?
    (`if` $cond^)? attr-dict
  }];
  let hasVerifier = 1;
  let hasRegionVerifier = 1;
}

def MDL_LinearOp : MDL_Op<"linear", [Symbol]> {
  let summary = "a linear layer: a weight [out..., in...] and maybe a bias";
  let description = [{
    `scale_block` yields the block size of the weight's FP8 block scales
    (0: none); the weight then has a companion scale parameter of one F32
    value per block.
  }];
  let arguments = (ins SymbolNameAttr:$sym_name, ArrayAttr:$in, ArrayAttr:$out,
                       MDL_ParallelStyleAttr:$style,
                       OptionalAttr<FlatSymbolRefAttr>:$expert,
                       OptionalAttr<MDL_ElementTypeAttr>:$dtype,
                       UnitAttr:$bias, UnitAttr:$mxfp4);
  let regions = (region AnyRegion:$biasCond, AnyRegion:$scaleBlock,
                        AnyRegion:$mxfp4Cond, AnyRegion:$cond);
  let assemblyFormat = [{
    $sym_name (`[` $expert^ `]`)? `:` $in `->` $out (`dtype` $dtype^)? $style
    (`bias` $bias^)? (`bias_if` $biasCond^)? (`scale` $scaleBlock^)?
    (`mxfp4` $mxfp4^)? (`mxfp4_if` $mxfp4Cond^)? (`if` $cond^)? attr-dict
  }];
  let hasVerifier = 1;
  let hasRegionVerifier = 1;
}

def MDL_InstanceOp : MDL_Op<"instance", [Symbol, NoTerminator]> {
  let summary = "an instance of another module";
  let description = [{
    The `cases` region holds `mdl.case` ops; the first whose guard holds is
    instantiated. The optional `cond` region says whether the instance
    exists at all.
  }];
  let arguments = (ins SymbolNameAttr:$sym_name);
  let regions = (region SizedRegion<1>:$cases, AnyRegion:$cond);
  let assemblyFormat = "$sym_name $cases (`if` $cond^)? attr-dict";
  let hasRegionVerifier = 1;
}

def MDL_StackOp : MDL_Op<"stack", [Symbol, NoTerminator]> {
  let summary = "a stack of instances indexed 0 .. count-1";
  let description = [{
    Each `mdl.case` in `cases` takes the index as its block argument and
    may choose a module by it (`layer_types[i]`).
  }];
  let arguments = (ins SymbolNameAttr:$sym_name);
  let regions = (region SizedRegion<1>:$count, SizedRegion<1>:$cases);
  let assemblyFormat = "$sym_name `count` $count $cases attr-dict";
  let hasRegionVerifier = 1;
}

def MDL_CaseOp : MDL_Op<"case", [HasParent<"InstanceOp, StackOp">]> {
  let summary = "one module an instance may be";
  let description = [{
    The region yields an i1 guard when `guarded` is set, then the values of
    the inputs named in `argNames`; inputs not named take their defaults.
    Inside a stack, the region takes the index.
  }];
  let arguments = (ins FlatSymbolRefAttr:$module, StrArrayAttr:$argNames,
                       UnitAttr:$guarded);
  let regions = (region SizedRegion<1>:$args);
  let assemblyFormat = [{
    $module $argNames (`guarded` $guarded^)? $args attr-dict
  }];
  let hasRegionVerifier = 1;
}

def MDL_PipelineOp : MDL_Op<"pipeline"> {
  let summary = "where a model's members go over pipeline stages";
  let description = [{
    `fallbacks` maps a member of `last` to the parameter the last stage
    holds a copy of when that member does not exist (`last head ?? embed`:
    a tied head).
  }];
  let arguments = (ins FlatSymbolRefArrayAttr:$first,
                       FlatSymbolRefArrayAttr:$last,
                       OptionalAttr<FlatSymbolRefAttr>:$stages,
                       OptionalAttr<DictionaryAttr>:$fallbacks);
  let assemblyFormat = [{
    `first` $first (`stages` $stages^)? `last` $last
    (`fallbacks` $fallbacks^)? attr-dict
  }];
  let hasVerifier = 1;
}

def MDL_DeployOp : MDL_Op<"deploy", [HasParent<"ModuleDeclOp">]> {
  let summary = "parallel configurations real deployments of a model use";
  let description = [{
    `deploy vllm tp=1,2,4,8;`: the grid of parallel configurations (each
    axis with its values) that real deployments of the model use on
    `backend`. `mdlc check` reports every one of them the spec makes
    invalid, with the reason.
  }];
  let arguments = (ins StrAttr:$backend, DictionaryAttr:$axes);
  let assemblyFormat = "$backend $axes attr-dict";
  let hasVerifier = 1;
}

def MDL_NeedsOp : MDL_Op<"needs"> {
  let summary = "a device capability a module needs";
  let arguments = (ins StrAttr:$capability, OptionalAttr<StrAttr>:$fallback);
  let assemblyFormat = "$capability (`fallback` $fallback^)? attr-dict";
}

//===----------------------------------------------------------------------===//
// Layouts
//===----------------------------------------------------------------------===//

def MDL_LayoutOp : MDL_ContainerOp<"layout", [SymbolTable]> {
  let summary = "what one rank of a backend holds for a module";
  let description = [{
    Tensors are named relative to where the module is mounted; `mount` is
    the default mount, which the parent's layout may override.
  }];
  let arguments = (ins FlatSymbolRefAttr:$backend, FlatSymbolRefAttr:$module,
                       OptionalAttr<StrAttr>:$mount);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = [{
    $backend `of` $module (`at` $mount^)? attr-dict-with-keyword $body
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    ::mlir::Block &getBodyBlock() { return getBody().front(); }
  }];
}

def MDL_TensorOp : MDL_Op<"tensor", [HasParent<"LayoutOp">]> {
  let summary = "a backend tensor and the parameter slices it holds";
  let description = [{
    `name` is a template: strings, family dimensions (`@E`: one tensor per
    index) and integers (the n-th value yielded by `nameArgs`). The options
    are those of the `.mdl` entry: `copy`, `zero` (zeros on the ranks
    that hold it: written, never read), `offset`, `neg_exp` (stored =
    -exp(logical)), `stored` (dtype),
    `view` (sizes yielded by `view`), `split` (an axis split evenly by
    `split_by`), `on` (first or last stage); `copyIf` makes the tensor a
    copy only where it holds. With `for_stack`, there is one tensor per
    element of that stack of the module, and the `nameArgs`, `copyIf` and
    `when` regions take the element's index. `reads_context` (set by
    `mdl-prepare-emit`) says that `when` reads the parallel context, so it
    is decided per rank rather than once per binding; that pass also lowers
    the `view` region to `view_axes`. A `derived` tensor is a cache the
    backend computes from the slices it holds (no checkpoint holds it),
    rebuilt after the `recompute` events.
  }];
  let arguments = (ins ArrayAttr:$name, MDL_LayoutAttr:$layout,
                       OptionalAttr<FlatSymbolRefAttr>:$for_stack,
                       UnitAttr:$copy, UnitAttr:$zero,
                       OptionalAttr<I64Attr>:$offset,
                       UnitAttr:$neg_exp,
                       OptionalAttr<MDL_ElementTypeAttr>:$stored,
                       OptionalAttr<I64Attr>:$split,
                       OptionalAttr<MDL_MeshAxisKindAttr>:$split_by,
                       OptionalAttr<MDL_StageKindAttr>:$on,
                       UnitAttr:$reads_context,
                       OptionalAttr<TypedArrayAttrBase<MDL_ViewAxisAttr,
                                    "view axes">>:$view_axes,
                       UnitAttr:$derived,
                       OptionalAttr<StrArrayAttr>:$recompute);
  let regions = (region AnyRegion:$nameArgs, AnyRegion:$view,
                        AnyRegion:$copyIf, AnyRegion:$when);
  let assemblyFormat = [{
    $name (`for` $for_stack^)? `=` $layout (`copy` $copy^)? (`zero` $zero^)? (`offset` $offset^)?
    (`neg_exp` $neg_exp^)? (`stored` $stored^)? (`split` $split^)? (`by` $split_by^)? (`on` $on^)?
    (`args` $nameArgs^)? (`view` $view^)? (`view_axes` $view_axes^)?
    (`copy_if` $copyIf^)? (`derived` $derived^)? (`recompute` $recompute^)?
    (`when` $when^)? attr-dict
  }];
  let hasVerifier = 1;
  let hasRegionVerifier = 1;
}

def MDL_MountOp : MDL_Op<"mount", [HasParent<"LayoutOp">]> {
  let summary = "where an instance or a stack of the module is named";
  let description = [{
    The `path` template is as in `mdl.tensor`; for a stack, `pathArgs` takes
    the index as its block argument.
  }];
  let arguments = (ins FlatSymbolRefAttr:$member, ArrayAttr:$path);
  let regions = (region AnyRegion:$pathArgs, AnyRegion:$when);
  let assemblyFormat = [{
    $member `at` $path (`args` $pathArgs^)? (`when` $when^)? attr-dict
  }];
  let hasRegionVerifier = 1;
}

def MDL_ShardOp : MDL_Op<"shard", [HasParent<"LayoutOp">]> {
  let summary = "a backend's own split of parameters";
  let description = [{
    With a `when` region, the split holds only in the parallel
    configurations where it yields true; it reads the parallel sizes alone
    (`mdl.context` of tp, ep, ...), so it is decided once per configuration.
  }];
  let arguments = (ins StrArrayAttr:$params, StrAttr:$dim,
                       MDL_MeshAxisKindAttr:$axis,
                       UnitAttr:$replicate);
  let regions = (region AnyRegion:$when);
  let assemblyFormat = [{
    $params `on` $dim `by` $axis (`replicate` $replicate^)? (`when` $when^)?
    attr-dict
  }];
  let hasRegionVerifier = 1;
}

def MDL_ChoiceDefaultOp : MDL_Op<"choice_default", [HasParent<"LayoutOp">]> {
  let summary = "the default of a backend's choice for a model";
  let description = [{
    In a layout of a model: the option of the backend's choice `choice`
    taken when neither the command line nor a checkpoint settles it,
    computed from the model's config (e.g. the storage the official
    release uses).
  }];
  let arguments = (ins FlatSymbolRefAttr:$choice);
  let regions = (region SizedRegion<1>:$value);
  let assemblyFormat = "$choice $value attr-dict";
  let hasRegionVerifier = 1;
}

def MDL_DerivedOp : MDL_Op<"derived", [HasParent<"LayoutOp">]> {
  let summary = "a tensor a backend computes from parameters";
  let description = [{
    A cache such as a transposed copy of a weight. `recompute` lists the
    events after which it must be rebuilt; a derived tensor without them
    goes stale.
  }];
  let arguments = (ins StrAttr:$derivedName, StrArrayAttr:$sources,
                       OptionalAttr<StrArrayAttr>:$recompute);
  let regions = (region AnyRegion:$when);
  let assemblyFormat = [{
    $derivedName `from` $sources (`recompute` $recompute^)? (`when` $when^)?
    attr-dict
  }];
}

def MDL_BufferOp : MDL_Op<"buffer", [HasParent<"LayoutOp">]> {
  let summary = "a tensor checkpoints may hold that is no parameter";
  let description = [{
    A persistent buffer a framework recomputes when it loads (the rotary
    `inv_freq` some releases ship): a checkpoint of the backend may hold it,
    with any shape and dtype; tools read past it and never write it.
  }];
  let arguments = (ins StrAttr:$bufferName);
  let regions = (region AnyRegion:$when);
  let assemblyFormat = "$bufferName (`when` $when^)? attr-dict";
}

//===----------------------------------------------------------------------===//
// Backend profiles
//===----------------------------------------------------------------------===//

def MDL_BackendOp : MDL_ContainerOp<"backend", [Symbol, SymbolTable,
                                                IsolatedFromAbove]> {
  let summary = "a backend profile";
  let arguments = (ins SymbolNameAttr:$sym_name,
                       OptionalAttr<FlatSymbolRefAttr>:$base,
                       StrArrayAttr:$mesh);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = [{
    $sym_name (`extends` $base^)? `mesh` $mesh attr-dict-with-keyword $body
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    ::mlir::Block &getBodyBlock() { return getBody().front(); }
  }];
}

def MDL_ClassOp : MDL_Op<"class", [HasParent<"BackendOp">]> {
  let summary = "the module class a backend uses for one parallel role";
  let arguments = (ins StrAttr:$role, StrAttr:$className,
                       DictionaryAttr:$props);
  let assemblyFormat = "$role `=` $className $props attr-dict";
}

def MDL_ChoiceOp : MDL_Op<"choice", [Symbol, HasParent<"BackendOp">]> {
  let summary = "a storage variant of a backend, with its options";
  let description = [{
    A string value a backend's layouts may branch on (`when expert_storage
    == "packed"`). Tools detect it from a checkpoint or take it from the
    command line; the first option is the default.
  }];
  let arguments = (ins SymbolNameAttr:$sym_name, StrArrayAttr:$options);
  let assemblyFormat = "$sym_name $options attr-dict";
  let hasVerifier = 1;
}

def MDL_CapabilityOp : MDL_Op<"capability", [HasParent<"BackendOp">]> {
  let summary = "whether the backend's device has a capability";
  let arguments = (ins StrAttr:$capability);
  let regions = (region SizedRegion<1>:$value);
  let assemblyFormat = "$capability $value attr-dict";
  let hasRegionVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Expressions
//===----------------------------------------------------------------------===//

class MDL_ExprOp<string mnemonic, list<Trait> traits = []>
    : MDL_Op<mnemonic, traits # [Pure]>;

def MDL_YieldOp : MDL_Op<"yield", [Pure, Terminator]> {
  let summary = "the values an expression region computes";
  let arguments = (ins Variadic<MDL_ValueType>:$values);
  let assemblyFormat = "($values^ `:` type($values))? attr-dict";
}

def MDL_ConstantOp : MDL_ExprOp<"constant", [ConstantLike]> {
  let summary = "a literal";
  let arguments = (ins AnyAttr:$value);
  let results = (outs MDL_ValueType:$result);
  let hasCustomAssemblyFormat = 1;
  let hasVerifier = 1;
  let hasFolder = 1;
}

def MDL_GetOp : MDL_ExprOp<"get"> {
  let summary = "the value of a named input, config entry, let or dim";
  let arguments = (ins FlatSymbolRefAttr:$name);
  let results = (outs MDL_ValueType:$result);
  let assemblyFormat = "$name attr-dict `:` type($result)";
  let hasVerifier = 1;
}

def MDL_ContextOp : MDL_ExprOp<"context"> {
  let summary = "a value of the parallel context (tp, first_stage, ...)";
  let arguments = (ins StrAttr:$var);
  let results = (outs AnyTypeOf<[I64, I1]>:$result);
  let assemblyFormat = "$var attr-dict `:` type($result)";
  let hasVerifier = 1;
}

def MDL_HfOp : MDL_ExprOp<"hf"> {
  let summary = "a value read from the HF config.json, possibly missing";
  let arguments = (ins StrAttr:$path);
  let results = (outs MDL_ValueType:$result);
  let assemblyFormat = "$path attr-dict `:` type($result)";
}

def MDL_CoalesceOp : MDL_ExprOp<"coalesce", [SameOperandsAndResultType]> {
  let summary = "the first operand unless it is missing, else the second";
  let arguments = (ins MDL_ValueType:$value, MDL_ValueType:$fallback);
  let results = (outs MDL_ValueType:$result);
  let assemblyFormat = "$value `,` $fallback attr-dict `:` type($result)";
}

def MDL_BinaryOp : MDL_ExprOp<"binary"> {
  let summary = "arithmetic, comparison, logic or concatenation";
  let description = [{
    Integer arithmetic is on i64: overflow and division by zero are errors,
    `/` and `%` round toward negative infinity. `and` and `or` evaluate
    their right operand only when needed.
  }];
  let arguments = (ins MDL_BinaryKind:$kind, MDL_ValueType:$lhs,
                       MDL_ValueType:$rhs);
  let results = (outs MDL_ValueType:$result);
  let assemblyFormat = [{
    $kind $lhs `,` $rhs attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def MDL_NotOp : MDL_ExprOp<"not"> {
  let arguments = (ins I1:$operand);
  let results = (outs I1:$result);
  let assemblyFormat = "$operand attr-dict";
}

def MDL_NegOp : MDL_ExprOp<"neg"> {
  let arguments = (ins I64:$operand);
  let results = (outs I64:$result);
  let assemblyFormat = "$operand attr-dict";
}

def MDL_SelectOp : MDL_ExprOp<"select",
    [AllTypesMatch<["trueValue", "falseValue", "result"]>]> {
  let summary = "a conditional; only the chosen operand is evaluated";
  let arguments = (ins I1:$cond, MDL_ValueType:$trueValue,
                       MDL_ValueType:$falseValue);
  let results = (outs MDL_ValueType:$result);
  let assemblyFormat = [{
    $cond `,` $trueValue `,` $falseValue attr-dict `:` type($result)
  }];
  let hasVerifier = 1;
}

def MDL_IndexOp : MDL_ExprOp<"index"> {
  let summary = "an element of a list; out of range is an error";
  let arguments = (ins MDL_ListType:$list, I64:$index);
  let results = (outs MDL_ValueType:$result);
  let assemblyFormat = "$list `[` $index `]` attr-dict `:` type($list) `->` type($result)";
  let hasVerifier = 1;
}

def MDL_ContainsOp : MDL_ExprOp<"contains"> {
  let summary = "whether a list holds a value (`x in list`)";
  let arguments = (ins MDL_ListType:$list, MDL_ValueType:$value);
  let results = (outs I1:$result);
  let assemblyFormat = "$list `,` $value attr-dict `:` type($list) `,` type($value)";
}

def MDL_ListOp : MDL_ExprOp<"list"> {
  let summary = "a list literal";
  let arguments = (ins Variadic<MDL_ValueType>:$elements);
  let results = (outs MDL_ListType:$result);
  let assemblyFormat = "($elements^ `:` type($elements))? attr-dict `->` type($result)";
}

def MDL_BuiltinOp : MDL_ExprOp<"builtin"> {
  let summary = "a builtin function: len, range, min, max, gcd, ceildiv, str, pad, dtype, size";
  let arguments = (ins StrAttr:$callee, Variadic<MDL_ValueType>:$args);
  let results = (outs MDL_ValueType:$result);
  let assemblyFormat = [{
    $callee `(` $args `)` attr-dict `:` functional-type($args, $result)
  }];
  let hasVerifier = 1;
}

def MDL_ComprehensionOp : MDL_ExprOp<"comprehension"> {
  let summary = "[element for x in source]";
  let arguments = (ins MDL_ListType:$source);
  let results = (outs MDL_ListType:$result);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = "$source $body attr-dict `:` type($source) `->` type($result)";
  let hasRegionVerifier = 1;
}

def MDL_IsOp : MDL_ExprOp<"is"> {
  let summary = "whether an instance of the module is a given module";
  let arguments = (ins FlatSymbolRefAttr:$instance, FlatSymbolRefAttr:$module);
  let results = (outs I1:$result);
  let assemblyFormat = "$instance $module attr-dict";
}

#endif // MDL_DIALECT_MDL_MDLOPS_TD
