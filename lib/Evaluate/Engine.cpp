//===- Engine.cpp - The runtime's engine, driven by the compiler ----------===//

#include "mdl/Evaluate/Engine.h"
#include "mdl/Evaluate/Interpreter.h"
#include "mdl/Runtime/Base/Cli.h"

#include "mlir/IR/Diagnostics.h"
#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/Path.h"

using namespace mlir;
using namespace mdl;

std::vector<std::string> mdl::exampleConfigPaths(ModuleDeclOp model) {
  std::vector<std::string> out;
  auto examples = model.getExamples();
  if (!examples)
    return out;
  StringRef dir;
  if (auto loc = dyn_cast<FileLineColLoc>(model.getLoc()))
    dir = llvm::sys::path::parent_path(loc.getFilename().getValue());
  for (Attribute a : *examples) {
    SmallString<256> path(dir);
    llvm::sys::path::append(path, cast<StringAttr>(a).getValue());
    out.push_back(std::string(path));
  }
  return out;
}

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
  return backend(spelled, op.getLoc());
}

const rt::BackendDecl *SpecDecls::backend(StringRef spelled, Location loc) {
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
    emitError(loc) << "no backend named '" << spelled << "'"
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

void mdl::emitEngineError(const rt::EvalError &error, Location fallback) {
  InFlightDiagnostic diag = emitError(locationOf(error.where, fallback))
                            << error.message;
  for (const rt::EvalError::Note &n : error.notes)
    diag.attachNote(locationOf(n.where, fallback)) << n.message;
}

void mdl::emitEngineError(StringRef error, Location fallback) {
  // The first line is the error, with its location; the others its notes.
  auto [first, more] = error.split('\n');
  rt::EvalError e;
  StringRef file, rest;
  unsigned line, col;
  e.message = first.str();
  if (splitLocation(first, file, line, col, rest)) {
    e.where = first.take_front(first.size() - rest.size()).rtrim(" :").str();
    e.message = rest.str();
  }
  while (!more.empty()) {
    StringRef note;
    std::tie(note, more) = more.split('\n');
    size_t at = note.find("note: ");
    if (at == StringRef::npos)
      continue;
    e.notes.push_back(
        {note.take_front(at).rtrim(" :").str(), note.drop_front(at + 6).str()});
  }
  emitEngineError(e, fallback);
}

std::unique_ptr<rt::Model> mdl::instantiate(const SpecDecls &decls,
                                            rt::HFConfig config,
                                            bool raiseSingleStacks) {
  std::vector<rt::EvalError> errors;
  std::unique_ptr<rt::Model> model = rt::Model::create(
      decls.model(), std::move(config), errors, raiseSingleStacks);
  for (const rt::EvalError &e : errors)
    emitEngineError(e, decls.modelOp().getLoc());
  return model;
}
