//===- Engine.cpp - The runtime's engine, driven by the compiler ----------===//

#include "mdl/Evaluate/Engine.h"
#include "mdl/Evaluate/Interpreter.h"
#include "mdl/Runtime/Cli.h"

#include "mlir/IR/Diagnostics.h"
#include "llvm/ADT/StringExtras.h"

using namespace mlir;
using namespace mdl;

std::unique_ptr<SpecDecls> SpecDecls::build(ModuleDeclOp model) {
  InterpretingExprs exprs;
  FailureOr<rt::ModelDecl> decl = buildModelDecl(model, exprs, {});
  if (failed(decl))
    return nullptr;
  auto out = std::unique_ptr<SpecDecls>(new SpecDecls());
  out->op = model;
  out->modelDecl = std::move(*decl);
  return out;
}

const rt::BackendDecl *SpecDecls::backend(StringRef spelled) {
  // Command lines say `mcore-te` or `MCORE_TE`; the specs, mcore_te.
  std::string name = cli::normalizeBackendName(spelled);
  if (auto it = backends.find(name); it != backends.end())
    return it->second.get();
  ModuleOp top = getTopModule(op);
  auto b = dyn_cast_or_null<BackendOp>(SymbolTable::lookupSymbolIn(top, name));
  if (!b) {
    std::vector<std::string> known;
    for (auto k : top.getOps<BackendOp>())
      known.push_back(k.getSymName().str());
    emitError(op.getLoc()) << "no backend named '" << spelled << "'"
                           << cli::didYouMean(spelled, known);
    return nullptr;
  }
  InterpretingExprs exprs;
  FailureOr<rt::BackendDecl> decl = buildBackendDecl(b, op, exprs, {});
  if (failed(decl))
    return nullptr;
  auto &slot = backends[name];
  slot = std::make_unique<rt::BackendDecl>(std::move(*decl));
  return slot.get();
}

std::optional<rt::HFConfig> mdl::loadEngineConfig(
    const std::string &path,
    const std::vector<std::pair<std::string, std::string>> &sets,
    MLIRContext &context) {
  std::string error;
  std::optional<rt::HFConfig> config = rt::HFConfig::load(path, error);
  if (!config) {
    emitEngineError(error, UnknownLoc::get(&context));
    return std::nullopt;
  }
  for (const auto &[key, value] : sets)
    config->addOverride(key, value);
  return config;
}

/// Splits "file:line:col: rest" at the location; false when `text` does
/// not start with one.
static bool splitLocation(StringRef text, StringRef &file, unsigned &line,
                          unsigned &col, StringRef &rest) {
  // The file may hold colons; the location ends at the first ":N:N".
  for (size_t i = text.find(':'); i != StringRef::npos;
       i = text.find(':', i + 1)) {
    StringRef after = text.drop_front(i + 1);
    StringRef l = after.take_while(llvm::isDigit);
    if (l.empty() || !after.drop_front(l.size()).starts_with(":"))
      continue;
    StringRef afterLine = after.drop_front(l.size() + 1);
    StringRef c = afterLine.take_while(llvm::isDigit);
    StringRef tail = afterLine.drop_front(c.size());
    if (c.empty() || !(tail.empty() || tail.starts_with(":")))
      continue;
    file = text.take_front(i);
    l.getAsInteger(10, line);
    c.getAsInteger(10, col);
    rest = tail.empty() ? tail : tail.drop_front(1).ltrim();
    return true;
  }
  return false;
}

Location mdl::locationOf(StringRef where, Location fallback) {
  StringRef file, rest;
  unsigned line, col;
  if (!splitLocation(where, file, line, col, rest))
    return fallback;
  return FileLineColLoc::get(fallback.getContext(), file, line, col);
}

void mdl::emitEngineError(StringRef error, Location fallback) {
  StringRef file, rest;
  unsigned line, col;
  if (!splitLocation(error, file, line, col, rest)) {
    emitError(fallback) << error;
    return;
  }
  emitError(FileLineColLoc::get(fallback.getContext(), file, line, col))
      << rest;
}
