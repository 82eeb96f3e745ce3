//===- AST.cpp - Helpers of the MDL AST ----------------------------------===//

#include "mdl/AST/AST.h"

#include "llvm/ADT/StringExtras.h"

using namespace mdl::ast;

bool Type::compatible(const Type &other) const {
  if (kind == Any || other.kind == Any)
    return true;
  if (isInt() && other.isInt())
    return true;
  if (kind != other.kind)
    return false;
  if (kind == List)
    return element->compatible(*other.element);
  return true;
}

std::string Type::str() const {
  switch (kind) {
  case Invalid:
    return "<invalid>";
  case Int:
    return "int";
  case Bool:
    return "bool";
  case String:
    return "string";
  case Dim:
    return "dim";
  case DType:
    return "dtype";
  case Any:
    return "any";
  case List:
    return "list<" + element->str() + ">";
  }
  llvm_unreachable("unknown type kind");
}

llvm::StringRef mdl::ast::spelling(BinaryOp op) {
  switch (op) {
  case BinaryOp::Add: return "+";
  case BinaryOp::Sub: return "-";
  case BinaryOp::Mul: return "*";
  case BinaryOp::Div: return "/";
  case BinaryOp::Mod: return "%";
  case BinaryOp::Lt: return "<";
  case BinaryOp::Le: return "<=";
  case BinaryOp::Gt: return ">";
  case BinaryOp::Ge: return ">=";
  case BinaryOp::Eq: return "==";
  case BinaryOp::Ne: return "!=";
  case BinaryOp::And: return "&&";
  case BinaryOp::Or: return "||";
  case BinaryOp::In: return "in";
  case BinaryOp::Coalesce: return "??";
  }
  llvm_unreachable("unknown binary operator");
}

llvm::StringRef mdl::ast::spelling(ParallelStyle::Kind kind) {
  switch (kind) {
  case ParallelStyle::Replicated: return "replicated";
  case ParallelStyle::Column: return "column";
  case ParallelStyle::Row: return "row";
  case ParallelStyle::Vocab: return "vocab";
  case ParallelStyle::Shard: return "shard";
  }
  llvm_unreachable("unknown parallel style");
}

std::string QualifiedName::str() const {
  std::string out;
  for (const Ident &p : parts) {
    if (!out.empty())
      out += '.';
    out += p.name;
  }
  return out;
}
