//===- Diagnostics.cpp - mdlc's diagnostics for machines ------------------===//

#include "Diagnostics.h"

#include "mdl/Runtime/Base/Cli.h"
#include "mdl/Runtime/Base/Json.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Location.h"
#include "mlir/IR/MLIRContext.h"
#include "llvm/ADT/StringExtras.h"

#include <map>

using namespace mdl;
using llvm::StringRef;

namespace {

const char *severityName(mlir::DiagnosticSeverity s) {
  switch (s) {
  case mlir::DiagnosticSeverity::Error:
    return "error";
  case mlir::DiagnosticSeverity::Warning:
    return "warning";
  case mlir::DiagnosticSeverity::Note:
    return "note";
  case mlir::DiagnosticSeverity::Remark:
    return "remark";
  }
  return "error";
}

/// The first file position a location holds.
SourcePlace placeOf(mlir::Location loc) {
  SourcePlace place;
  loc->walk([&](mlir::Location l) {
    if (auto flc = llvm::dyn_cast<mlir::FileLineColLoc>(l)) {
      place = {flc.getFilename().str(), flc.getLine(), flc.getColumn()};
      return mlir::WalkResult::interrupt();
    }
    return mlir::WalkResult::advance();
  });
  return place;
}

/// Splits `message [check-id]` or `message [check-id] (and N more like
/// it)`, as the checks print their findings, into the message and the ID.
std::pair<std::string, std::string> splitCheckId(StringRef text) {
  size_t open = text.rfind(" [");
  if (open == StringRef::npos)
    return {text.str(), ""};
  size_t close = text.find(']', open);
  StringRef id = text.slice(open + 2, close);
  StringRef rest = close == StringRef::npos ? "" : text.substr(close + 1);
  bool isId = !id.empty() && llvm::all_of(id, [](char c) {
    return llvm::isLower(c) || llvm::isDigit(c) || c == '-';
  });
  if (!isId || close == StringRef::npos ||
      !(rest.empty() || rest.starts_with(" (and ")))
    return {text.str(), ""};
  return {(text.take_front(open) + rest).str(), id.str()};
}

json::Value placeJson(const SourcePlace &p) {
  json::Value v = json::Value::object();
  v.set("file", json::Value::string(p.file));
  v.set("line", json::Value::integer(p.line));
  v.set("column", json::Value::integer(p.column));
  return v;
}

json::Value sarifLocation(const SourcePlace &p) {
  json::Value artifact = json::Value::object();
  artifact.set("uri", json::Value::string(cli::uriOfPath(p.file)));
  json::Value region = json::Value::object();
  region.set("startLine", json::Value::integer(p.line));
  region.set("startColumn", json::Value::integer(p.column));
  json::Value physical = json::Value::object();
  physical.set("artifactLocation", std::move(artifact));
  physical.set("region", std::move(region));
  json::Value loc = json::Value::object();
  loc.set("physicalLocation", std::move(physical));
  return loc;
}

json::Value message(const std::string &text) {
  json::Value m = json::Value::object();
  m.set("text", json::Value::string(text));
  return m;
}

} // namespace

DiagnosticCollector::DiagnosticCollector(mlir::MLIRContext &context)
    : context(context) {
  id = context.getDiagEngine().registerHandler([this](mlir::Diagnostic &d) {
    Finding f;
    f.severity = severityName(d.getSeverity());
    std::tie(f.message, f.check) = splitCheckId(d.str());
    if (f.check.empty())
      f.check = f.severity;
    f.place = placeOf(d.getLocation());
    for (mlir::Diagnostic &note : d.getNotes())
      f.notes.push_back({placeOf(note.getLocation()), note.str()});
    found.push_back(std::move(f));
    return mlir::success();
  });
}

DiagnosticCollector::~DiagnosticCollector() {
  context.getDiagEngine().eraseHandler(id);
}

void DiagnosticCollector::write(StringRef format, llvm::raw_ostream &os) const {
  if (format == "json") {
    json::Value list = json::Value::array();
    for (const Finding &f : found) {
      json::Value v = json::Value::object();
      v.set("check", json::Value::string(f.check));
      v.set("severity", json::Value::string(f.severity));
      json::Value place = placeJson(f.place);
      for (const auto &[key, value] : place.members())
        v.set(key, value);
      v.set("message", json::Value::string(f.message));
      json::Value notes = json::Value::array();
      for (const Finding::Note &n : f.notes) {
        json::Value jn = placeJson(n.place);
        jn.set("message", json::Value::string(n.message));
        notes.push(std::move(jn));
      }
      v.set("notes", std::move(notes));
      list.push(std::move(v));
    }
    os << json::write(list, 2) << "\n";
    return;
  }

  // SARIF 2.1.0: one run of mdlc; a rule per check ID seen, pointing at
  // its section of docs/checks.md; notes with a place are related
  // locations, those without one follow the message.
  std::map<std::string, size_t> ruleIndex;
  json::Value rules = json::Value::array();
  json::Value results = json::Value::array();
  for (const Finding &f : found) {
    auto [it, added] = ruleIndex.try_emplace(f.check, ruleIndex.size());
    if (added) {
      json::Value rule = json::Value::object();
      rule.set("id", json::Value::string(f.check));
      json::Value help = json::Value::object();
      help.set("text",
               json::Value::string("docs/checks.md, section `" + f.check + "`"));
      rule.set("help", std::move(help));
      rules.push(std::move(rule));
    }
    json::Value r = json::Value::object();
    r.set("ruleId", json::Value::string(f.check));
    r.set("ruleIndex", json::Value::integer(it->second));
    // SARIF's levels: error, warning, note (remarks are notes).
    r.set("level", json::Value::string(f.severity == "remark" ? "note"
                                                              : f.severity));
    std::string text = f.message;
    json::Value related = json::Value::array();
    for (const Finding::Note &n : f.notes) {
      if (n.place.line == 0) {
        text += "\nnote: " + n.message;
        continue;
      }
      json::Value loc = sarifLocation(n.place);
      loc.set("id", json::Value::integer(related.elements().size()));
      loc.set("message", message(n.message));
      related.push(std::move(loc));
    }
    r.set("message", message(text));
    json::Value locations = json::Value::array();
    if (f.place.line)
      locations.push(sarifLocation(f.place));
    r.set("locations", std::move(locations));
    if (!related.elements().empty())
      r.set("relatedLocations", std::move(related));
    results.push(std::move(r));
  }
  json::Value driver = json::Value::object();
  driver.set("name", json::Value::string("mdlc"));
  driver.set("version", json::Value::string(cli::kVersion));
  driver.set("rules", std::move(rules));
  json::Value tool = json::Value::object();
  tool.set("driver", std::move(driver));
  json::Value run = json::Value::object();
  run.set("tool", std::move(tool));
  run.set("results", std::move(results));
  json::Value log = json::Value::object();
  log.set("$schema",
          json::Value::string("https://json.schemastore.org/sarif-2.1.0.json"));
  log.set("version", json::Value::string("2.1.0"));
  log.set("runs", json::Value::array({std::move(run)}));
  os << json::write(log, 2) << "\n";
}
