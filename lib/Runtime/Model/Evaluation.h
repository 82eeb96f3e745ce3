//===- Evaluation.h - What instantiating and binding share ------*- C++ -*-===//
//
// Private to lib/Runtime/Model: how Model.cpp (instantiation) and Bind.cpp
// (binding) evaluate spec expressions and report their errors.
//
//===----------------------------------------------------------------------===//

#ifndef MDL_LIB_RUNTIME_MODEL_EVALUATION_H
#define MDL_LIB_RUNTIME_MODEL_EVALUATION_H

#include "mdl/Runtime/Model/Model.h"

#include <map>
#include <string>
#include <vector>

namespace mdl::rt::detail {
/// The most parameters a model may have: 2^18, a hundred times a real
/// model's (DeepSeek-V3 has 1046), and what a few thousand layers have.
inline constexpr size_t kMaxParams = size_t(1) << 18;

[[noreturn]] inline void fail(const std::string &where, const std::string &message) {
  throw EvalError{message, where};
}

/// Rethrows an error of evaluating something declared at `where` with that
/// location, unless it has one already.
template <typename F> auto at(const std::string &where, F f) -> decltype(f()) {
  try {
    return f();
  } catch (EvalError &e) {
    if (e.where.empty())
      e.where = where;
    throw;
  }
}

/// Evaluates `expr` in `scope`; `dflt` when there is none. A missing value
/// is an error here.
inline Value
evalOne(Instance &scope, const Expr &expr, const Value &dflt,
        const RankContext *ctx = nullptr,
        const std::map<std::string, std::string> *choices = nullptr,
        std::vector<Value> args = {}) {
  if (!expr)
    return dflt;
  Eval e(scope, ctx, choices, std::move(args));
  return e.present(expr(e));
}

} // namespace mdl::rt::detail

#endif // MDL_LIB_RUNTIME_MODEL_EVALUATION_H
