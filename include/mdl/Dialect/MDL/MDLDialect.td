//===- MDLDialect.td - The mdl dialect ---------------------*- tablegen -*-===//

#ifndef MDL_DIALECT_MDL_MDLDIALECT_TD
#define MDL_DIALECT_MDL_MDLDIALECT_TD

include "mlir/IR/OpBase.td"

def MDL_Dialect : Dialect {
  let name = "mdl";
  let cppNamespace = "::mdl";
  let summary = "Model descriptions: configs, named dimensions, parameters, "
                "modules, stacks, per-backend layouts and backend profiles";
  let description = [{
    The `mdl` dialect holds a model description as written in `.mdl` files.
    Declarations (`mdl.module`, `mdl.layout`, `mdl.backend`) sit at the top
    level; the values they compute (sizes, conditions, config entries) are
    small expression regions that end in `mdl.yield`. Names inside a module
    are symbols of that module. The `mdl-instantiate` pass evaluates a model
    against a concrete HF config and produces `mdl.instance_of`, the flat
    list of its parameters with concrete shapes.
  }];
  let useDefaultTypePrinterParser = 1;
  let useDefaultAttributePrinterParser = 1;
  let extraClassDeclaration = [{
    void registerTypes();
    void registerAttributes();
  }];
}

class MDL_Op<string mnemonic, list<Trait> traits = []>
    : Op<MDL_Dialect, mnemonic, traits>;

#endif // MDL_DIALECT_MDL_MDLDIALECT_TD
