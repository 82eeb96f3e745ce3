//===- MDLTypes.td - Types of the mdl dialect --------------*- tablegen -*-===//

#ifndef MDL_DIALECT_MDL_MDLTYPES_TD
#define MDL_DIALECT_MDL_MDLTYPES_TD

include "mdl/Dialect/MDL/MDLDialect.td"
include "mlir/IR/AttrTypeBase.td"

class MDL_Type<string name, string typeMnemonic> : TypeDef<MDL_Dialect, name> {
  let mnemonic = typeMnemonic;
}

def MDL_StringType : MDL_Type<"String", "string"> {
  let summary = "a string value";
}

def MDL_DTypeType : MDL_Type<"DType", "dtype"> {
  let summary = "an element type (bf16, f32, ...)";
}

def MDL_ListType : MDL_Type<"List", "list"> {
  let summary = "a list of values of one type";
  let parameters = (ins "::mlir::Type":$elementType);
  let assemblyFormat = "`<` $elementType `>`";
}

// Integers are i64 and booleans i1.
def MDL_ValueType : AnyTypeOf<[I64, I1, MDL_StringType, MDL_DTypeType,
                               MDL_ListType]>;

#endif // MDL_DIALECT_MDL_MDLTYPES_TD
