//===- MDLAttrs.td - Attributes of the mdl dialect ---------*- tablegen -*-===//

#ifndef MDL_DIALECT_MDL_MDLATTRS_TD
#define MDL_DIALECT_MDL_MDLATTRS_TD

include "mdl/Dialect/MDL/MDLDialect.td"
include "mlir/IR/AttrTypeBase.td"
include "mlir/IR/EnumAttr.td"

class MDL_Attr<string name, string attrMnemonic> : AttrDef<MDL_Dialect, name> {
  let mnemonic = attrMnemonic;
}

def MDL_ElementType : I32EnumAttr<"ElementType", "checkpoint element type", [
    I32EnumAttrCase<"bf16", 0>, I32EnumAttrCase<"f16", 1>,
    I32EnumAttrCase<"f32", 2>, I32EnumAttrCase<"f64", 3>,
    I32EnumAttrCase<"i64", 4>, I32EnumAttrCase<"i32", 5>,
    I32EnumAttrCase<"i16", 6>, I32EnumAttrCase<"i8", 7>,
    I32EnumAttrCase<"u8", 8>, I32EnumAttrCase<"boolean", 9, "bool">,
    I32EnumAttrCase<"f8e4m3", 10>, I32EnumAttrCase<"f8e5m2", 11>]> {
  let cppNamespace = "::mdl";
  let genSpecializedAttr = 0;
}
def MDL_ElementTypeAttr : EnumAttr<MDL_Dialect, MDL_ElementType, "dtype"> {
  let assemblyFormat = "`<` $value `>`";
}

// In the order of the runtime's mdl::MeshAxis.
def MDL_MeshAxisKind : I32EnumAttr<"MeshAxisKind", "mesh axis", [
    I32EnumAttrCase<"tp", 0>, I32EnumAttrCase<"pp", 1>,
    I32EnumAttrCase<"ep", 2>, I32EnumAttrCase<"etp", 3>,
    I32EnumAttrCase<"cp", 4>, I32EnumAttrCase<"dp", 5>]> {
  let cppNamespace = "::mdl";
  let genSpecializedAttr = 0;
}
def MDL_MeshAxisKindAttr : EnumAttr<MDL_Dialect, MDL_MeshAxisKind, "mesh_axis"> {
  let assemblyFormat = "`<` $value `>`";
}

def MDL_StageKind : I32EnumAttr<"StageKind", "pipeline stage", [
    I32EnumAttrCase<"first", 0>, I32EnumAttrCase<"last", 1>]> {
  let cppNamespace = "::mdl";
  let genSpecializedAttr = 0;
}
def MDL_StageKindAttr : EnumAttr<MDL_Dialect, MDL_StageKind, "stage"> {
  let assemblyFormat = "`<` $value `>`";
}

def MDL_StyleKind : I32EnumAttr<"StyleKind", "parallel style", [
    I32EnumAttrCase<"replicated", 0>, I32EnumAttrCase<"column", 1>,
    I32EnumAttrCase<"row", 2>, I32EnumAttrCase<"vocab", 3>,
    I32EnumAttrCase<"shard", 4>]> {
  let cppNamespace = "::mdl";
  let genSpecializedAttr = 0;
}
def MDL_StyleKindAttr : EnumAttr<MDL_Dialect, MDL_StyleKind, "style_kind">;

def MDL_ParallelStyleAttr : MDL_Attr<"ParallelStyle", "style"> {
  let summary = "how tensor parallelism splits a parameter";
  let description = [{
    `#mdl.style<column "G">` splits dimension G of a linear's output across
    the tp ranks; `#mdl.style<replicated>` keeps it whole on every rank.
  }];
  let parameters = (ins "::mdl::StyleKind":$kind,
                        OptionalParameter<"::mlir::StringAttr">:$dim);
  let assemblyFormat = "`<` $kind (`,` $dim^)? `>`";
  let genVerifyDecl = 1;
}

def MDL_TermKind : I32EnumAttr<"TermKind", "layout term kind", [
    I32EnumAttrCase<"dim", 0>, I32EnumAttrCase<"unit", 1>,
    I32EnumAttrCase<"product", 2>, I32EnumAttrCase<"parts", 3>,
    I32EnumAttrCase<"part", 4>]> {
  let cppNamespace = "::mdl";
  let genSpecializedAttr = 0;
}

def MDL_TermAttr : MDL_Attr<"Term", "term"> {
  let summary = "one term of a layout axis";
  let description = [{
    A tree: a named dimension (`G`), a unit axis (`1`), a product of terms
    (`(G, P, D)`), a part set (`{q: (P, D), k: D}`) whose elements are
    parts, each naming a parameter and the terms it adds. Printed in the
    syntax of `.mdl` layouts.
  }];
  let parameters = (ins "::mdl::TermKind":$kind, "::mlir::StringAttr":$name,
                        "::mlir::ArrayAttr":$children);
  let hasCustomAssemblyFormat = 1;
  let extraClassDeclaration = [{
    static TermAttr getDim(::mlir::MLIRContext *ctx, ::llvm::StringRef name);
    static TermAttr getUnit(::mlir::MLIRContext *ctx);
    static TermAttr getProduct(::mlir::MLIRContext *ctx,
                               ::llvm::ArrayRef<::mlir::Attribute> terms);
    static TermAttr getParts(::mlir::MLIRContext *ctx,
                             ::llvm::ArrayRef<::mlir::Attribute> parts);
    static TermAttr getPart(::mlir::MLIRContext *ctx, ::llvm::StringRef param,
                            ::llvm::ArrayRef<::mlir::Attribute> terms);
    /// The children as terms.
    ::llvm::SmallVector<TermAttr, 4> terms() const;
    void printBody(::mlir::AsmPrinter &printer) const;
    static TermAttr parseBody(::mlir::AsmParser &parser);
  }];
}

def MDL_LayoutAttr : MDL_Attr<"Layout", "layout"> {
  let summary = "the axes of a tensor in named dimensions";
  let description = [{
    `#mdl.layout<q[(G, D), H]>` or `#mdl.layout<[(G, {q, gate}, D), H]>`:
    each axis is a product term; the parameter comes either before the axes
    or from the one part set.
  }];
  let parameters = (ins OptionalParameter<"::mlir::StringAttr">:$param,
                        "::mlir::ArrayAttr":$axes);
  let hasCustomAssemblyFormat = 1;
  let extraClassDeclaration = [{
    ::llvm::SmallVector<TermAttr, 4> axisTerms() const;
  }];
}

def MDL_ViewAxisAttr : MDL_Attr<"ViewAxis", "view_axis"> {
  let summary = "one axis of a tensor's view: a number times dimensions";
  let description = [{
    `#mdl.view_axis<2, ["G", "D"], false, "G * D">`: the axis is 2 times the
    per-rank extents of atoms G and D; `claim` when it was written as a
    bare dimension (the axis is that dimension); the spelling as written,
    for messages. `mdl-prepare-emit` lowers a tensor's `view` region to
    these.
  }];
  let parameters = (ins "int64_t":$factor, "::mlir::ArrayAttr":$atoms,
                        "bool":$claim, "::mlir::StringAttr":$spelling);
  let assemblyFormat = "`<` $factor `,` $atoms `,` $claim `,` $spelling `>`";
}

def MDL_BinaryKind : I32EnumAttr<"BinaryKind", "binary operator", [
    I32EnumAttrCase<"add", 0>, I32EnumAttrCase<"sub", 1>,
    I32EnumAttrCase<"mul", 2>, I32EnumAttrCase<"div", 3>,
    I32EnumAttrCase<"mod", 4>, I32EnumAttrCase<"concat", 5>,
    I32EnumAttrCase<"lt", 6>, I32EnumAttrCase<"le", 7>,
    I32EnumAttrCase<"gt", 8>, I32EnumAttrCase<"ge", 9>,
    I32EnumAttrCase<"eq", 10>, I32EnumAttrCase<"ne", 11>,
    I32EnumAttrCase<"and_", 12, "and">, I32EnumAttrCase<"or_", 13, "or">]> {
  let cppNamespace = "::mdl";
}

#endif // MDL_DIALECT_MDL_MDLATTRS_TD
