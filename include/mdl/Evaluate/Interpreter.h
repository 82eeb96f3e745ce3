//===- Interpreter.h - Expressions that interpret the IR --------*- C++ -*-===//
//
// The compiler's expressions for the runtime's engine: each reads the
// region it stands for, op by op, through the same rt::Eval that generated
// functions use, so the engine cannot tell the two apart. An error carries
// the location of the op that raised it.
//
//===----------------------------------------------------------------------===//

#ifndef MDL_EVALUATE_INTERPRETER_H
#define MDL_EVALUATE_INTERPRETER_H

#include "mdl/Evaluate/Declarations.h"

namespace mdl {

/// Makes expressions that interpret their region when called.
class InterpretingExprs : public ExprFactory {
public:
  rt::Expr make(mlir::Region &region, unsigned result) override;
};

} // namespace mdl

#endif // MDL_EVALUATE_INTERPRETER_H
