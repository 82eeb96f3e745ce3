//===- Diagnostics.h - mdlc's diagnostics for machines ---------*- C++ -*-===//
//
// With --diagnostics-format=json or sarif, mdlc collects every diagnostic
// (severity, check ID, file, line, column, message, notes with their
// locations) instead of printing it, and writes them all at the end: JSON
// as a list of findings, SARIF 2.1.0 as one run of the tool.
//
//===----------------------------------------------------------------------===//

#ifndef MDLC_DIAGNOSTICS_H
#define MDLC_DIAGNOSTICS_H

#include "mlir/IR/Diagnostics.h"
#include "llvm/Support/raw_ostream.h"

#include <string>
#include <vector>

namespace mdl {

/// A place in a source file; line 0 when the diagnostic has none.
struct SourcePlace {
  std::string file;
  unsigned line = 0, column = 0;
};

struct Finding {
  /// The check ID printed in brackets after the message, or "error",
  /// "warning" for diagnostics no check reports.
  std::string check;
  std::string severity; // error, warning, note, remark
  SourcePlace place;
  std::string message;
  struct Note {
    SourcePlace place;
    std::string message;
  };
  std::vector<Note> notes;
};

/// Collects the diagnostics of a context while it lives.
class DiagnosticCollector {
public:
  explicit DiagnosticCollector(mlir::MLIRContext &context);
  ~DiagnosticCollector();
  const std::vector<Finding> &findings() const { return found; }
  /// Writes the findings as `format` (json or sarif).
  void write(llvm::StringRef format, llvm::raw_ostream &os) const;

private:
  mlir::MLIRContext &context;
  mlir::DiagnosticEngine::HandlerID id;
  std::vector<Finding> found;
};

} // namespace mdl

#endif // MDLC_DIAGNOSTICS_H
