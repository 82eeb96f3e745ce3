//===- mdlc.cpp - The MDL compiler driver ---------------------------------===//
//
//   mdlc check FILE...          parse, analyse, verify, instantiate examples
//   mdlc params FILE            the HF tensors of the instantiated model
//   mdlc plan FILE ...          what each rank of a backend holds
//   mdlc emit FILE -o DIR       C++ for the model and its backends
//   mdlc format [-i] FILE...    the canonical layout of specs
//   mdlc -emit=ast|mlir FILE    debugging output
//
// Exit codes: 0 clean, 1 errors in the input, 2 bad usage.
//
//===----------------------------------------------------------------------===//

#include "Commands.h"
#include "Diagnostics.h"

#include "mdl/AST/ASTDumper.h"
#include "mdl/Dialect/MDL/MDLOps.h"
#include "mdl/Driver/Frontend.h"

#include "mlir/IR/AsmState.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/raw_ostream.h"

using namespace mdl;

namespace {

/// Prints diagnostics as file:line:col with the source line and a caret,
/// keeping the output bounded however many errors the input causes: an
/// error whose message was already shown kMaxRepeats times is counted, not
/// shown; after kMaxShown errors the rest are counted; a source line longer
/// than kMaxLineLength is not shown. The counts are said at the end.
class BoundedDiagnosticHandler : public mlir::SourceMgrDiagnosticHandler {
public:
  static constexpr unsigned kMaxRepeats = 5, kMaxShown = 100;
  static constexpr size_t kMaxLineLength = 500;

  BoundedDiagnosticHandler(llvm::SourceMgr &sm, mlir::MLIRContext *ctx)
      : SourceMgrDiagnosticHandler(sm, ctx), sm(sm) {
    setHandler([this](mlir::Diagnostic &d) { return handle(d); });
  }
  ~BoundedDiagnosticHandler() {
    if (repeated || dropped)
      llvm::errs() << "mdlc: " << repeated + dropped
                   << " more errors not shown (" << repeated
                   << " repeating a message shown " << kMaxRepeats
                   << " times, " << dropped << " after the first "
                   << kMaxShown << ")\n";
  }

private:
  mlir::LogicalResult handle(mlir::Diagnostic &d) {
    if (d.getSeverity() == mlir::DiagnosticSeverity::Error) {
      if (++seen[d.str()] > kMaxRepeats) {
        ++repeated;
        return mlir::success();
      }
      if (++shown > kMaxShown) {
        ++dropped;
        return mlir::success();
      }
    }
    emitDiagnostic(d.getLocation(), d.str(), d.getSeverity(),
                   showLine(d.getLocation()));
    // A note shows its source line only where it points elsewhere, as
    // MLIR's handler does.
    mlir::Location last = d.getLocation();
    for (mlir::Diagnostic &note : d.getNotes()) {
      emitDiagnostic(note.getLocation(), note.str(), note.getSeverity(),
                     note.getLocation() != last &&
                         showLine(note.getLocation()));
      last = note.getLocation();
    }
    return mlir::success();
  }

  /// Whether the source line of `loc` is short enough to show.
  bool showLine(mlir::Location loc) {
    auto file = llvm::dyn_cast<mlir::FileLineColLoc>(loc);
    if (!file)
      return true;
    const llvm::MemoryBuffer *buffer = getBufferForFile(file.getFilename());
    if (!buffer || file.getLine() == 0)
      return true;
    unsigned id = 0;
    for (unsigned i = 1; i <= sm.getNumBuffers() && !id; ++i)
      if (sm.getMemoryBuffer(i) == buffer)
        id = i;
    llvm::SMLoc start = sm.FindLocForLineAndColumn(id, file.getLine(), 1);
    if (!id || !start.isValid())
      return true;
    llvm::StringRef rest(start.getPointer(),
                         buffer->getBufferEnd() - start.getPointer());
    return rest.find('\n') <= kMaxLineLength ||
           (rest.find('\n') == llvm::StringRef::npos &&
            rest.size() <= kMaxLineLength);
  }

  llvm::SourceMgr &sm;
  llvm::StringMap<unsigned> seen;
  unsigned shown = 0, repeated = 0, dropped = 0;
};

} // namespace

static const char *kUsage = R"(usage: mdlc <command> [options] FILE...

Commands:
  check FILE...       parse, analyse and verify specs; instantiate each model
                      with its example configs (or --hf-config), bind it to
                      each backend and check it over a grid of parallel
                      configurations
  params FILE         list every HF tensor of the instantiated model:
                      name<TAB>[d0,d1,...]<TAB>dtype, sorted by name
  plan FILE --backend B --tp N --pp N --ep N --etp N [--vpp N] [--rank R]
                      every local tensor of each rank (or rank R) with its
                      shape, dtype and the slices of parameters it holds
  lora FILE --backend B --tp N ... [--sp] [--rank R] [--lora-rank N]
                      the LoRA injection table of rank R: per linear module,
                      the class, constructor sizes, lora_A and lora_B local
                      shapes, the sharded factor, the forward contract and
                      the factors needing a TP gradient all-reduce
  emit FILE [--backend B]... -o DIR
                      write C++ for the model and each backend (default:
                      every backend with layouts for it): <spec>_<backend>.h
                      and .cpp (<spec>: the file name without .mdl), in
                      namespace mdl::gen::<model>::<backend>
  format [-i] FILE... print each spec in the canonical layout (-i: rewrite
                      the files instead)
  -emit=ast FILE      print the syntax tree
  -emit=mlir FILE     print the mdl dialect IR

Options:
  --hf-config FILE    instantiate with this HF config.json (a directory:
                      its config.json; check --hf-dir DIR without
                      --hf-config reads DIR/config.json when there is one)
  --set KEY=VALUE     override a key of the HF config (e.g.
                      --set mtp_num_hidden_layers=0); VALUE is JSON or text
  --backend B         check (repeatable) or plan this backend; mcore-te,
                      mcore_te and MCORE_TE are the same
  --grid AXIS=N,N...  check these configurations, e.g. --grid tp=1,2 pp=1,2
                      (default: tp=1,2,4,8 pp=1,2,4 ep=1,2,4,8 etp=1,2)
  --choice NAME=VALUE a backend's storage variant (e.g. expert_storage=packed)
  --tp, --pp, --ep, --etp, --cp, --dp, --vpp N; --sp
  --first-stage-layers N, --last-stage-layers N
                      the parallel configuration of plan
  --hf-index FILE, --hf-dir DIR, --hf-inventory FILE
                      check against a checkpoint's index, safetensors
                      headers, or a tensor inventory (name, shape, dtype)
  --mcore-dir DIR     check against a Megatron-Core distributed checkpoint
                      (torch_dist: its .metadata's keys and global shapes;
                      DIR is it, or the top of a checkpoint whose tracker
                      names it) with the mcore_te_dist profile's layout
  --format=text|json  output format of params and plan
  --format=svg|diagram --tensor REGEX
                      plan: draw, for each tensor whose name matches, the
                      rows each rank holds, coloured by part (SVG, or a
                      text diagram)
  --verbose, -v       check: name every invalid configuration and why
  -I DIR              search DIR for imports
  --diagnostics-format=text|json|sarif
                      print diagnostics as text (file:line:col: error: ...
                      [check-id]), or collect them and write them at the end
                      as a JSON list or a SARIF 2.1.0 log
  --diagnostics-file FILE
                      write json or sarif diagnostics to FILE, not stderr
  --verify-diagnostics
                      check the diagnostics against expected-* comments
  --list-checks       the check IDs: id, the pass reporting it, what it
                      guards
  --version, --help
)";

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  std::vector<std::string> args(argv + 1, argv + argc);
  Options options;
  if (std::optional<int> code = parseOptions(args, options, kUsage))
    return *code;

  mlir::MLIRContext context;
  context.getOrLoadDialect<MDLDialect>();
  // Users see their spec's lines, never the IR behind them.
  context.printOpOnDiagnostic(false);
  // Errors print as file:line:col with the source line and a caret.
  llvm::SourceMgr sourceMgr;
  std::unique_ptr<BoundedDiagnosticHandler> handler;
  std::unique_ptr<mlir::SourceMgrDiagnosticVerifierHandler> verifier;
  std::unique_ptr<DiagnosticCollector> collector;
  if (options.diagnosticsFormat != "text")
    collector = std::make_unique<DiagnosticCollector>(context);
  else if (options.verifyDiagnostics)
    verifier = std::make_unique<mlir::SourceMgrDiagnosticVerifierHandler>(
        sourceMgr, &context);
  else
    handler = std::make_unique<BoundedDiagnosticHandler>(sourceMgr, &context);
  int code = runCommand(options, sourceMgr, context);
  if (collector) {
    if (options.diagnosticsFile.empty()) {
      collector->write(options.diagnosticsFormat, llvm::errs());
    } else {
      std::error_code ec;
      llvm::raw_fd_ostream os(options.diagnosticsFile, ec);
      if (ec) {
        llvm::errs() << "mdlc: error: cannot write '" << options.diagnosticsFile
                     << "': " << ec.message() << "\n";
        return 1;
      }
      collector->write(options.diagnosticsFormat, os);
    }
  }
  if (verifier) {
    // The verifier owns the verdict: expected diagnostics were seen, and
    // no others.
    return mlir::failed(verifier->verify()) ? 1 : 0;
  }
  return code;
}
