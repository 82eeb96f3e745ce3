//===- Check.cpp - mdlc check: specs over grids of configurations ---------===//

#include "Commands.h"

#include "mdl/Evaluate/Check.h"
#include "mdl/Runtime/Checkpoint/DistCheckpoint.h"
#include "mdl/Transforms/Passes.h"

#include "mlir/Pass/PassManager.h"
#include "llvm/Support/raw_ostream.h"

#include <chrono>
#include <set>

using namespace mdl;

static std::string humanCount(int64_t n) {
  char buf[32];
  if (n >= 1000000000)
    std::snprintf(buf, sizeof buf, "%.2fB", n / 1e9);
  else if (n >= 1000000)
    std::snprintf(buf, sizeof buf, "%.2fM", n / 1e6);
  else
    std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(n));
  return buf;
}

int mdl::runCheck(const Options &options, mlir::ModuleOp top,
                  mlir::MLIRContext &context) {
  auto start = std::chrono::steady_clock::now();
  CheckOptions co;
  co.hfConfig = options.hfConfig;
  for (const auto &[k, v] : options.sets)
    co.sets.push_back(k + "=" + v);
  co.backends = options.backends;
  co.grid = options.grid;
  for (const auto &[k, v] : options.choices)
    co.choices.push_back(k + "=" + v);
  co.files = options.files;
  if (!options.hfDir.empty())
    co.checkpoint = {CheckpointSource::Dir, options.hfDir};
  else if (!options.hfIndex.empty())
    co.checkpoint = {CheckpointSource::Index, options.hfIndex};
  else if (!options.hfInventory.empty())
    co.checkpoint = {CheckpointSource::Inventory, options.hfInventory};
  else if (!options.mcoreDir.empty()) {
    // Megatron-Core's distributed checkpoint of a TE model: its keys and
    // global shapes are the mcore_te_dist profile's (a release/ or iter_*
    // directory, or the top of the checkpoint with its tracker).
    std::string dir = rt::findDistCheckpoint(options.mcoreDir);
    co.checkpoint = {CheckpointSource::Dir, dir.empty() ? options.mcoreDir : dir};
    co.checkpointBackend = "mcore_te_dist";
  }
  auto session = std::make_shared<CheckSession>(co);

  // Errors reported outside the checks (a spec that fails to instantiate
  // or bind) count too; the printing handler still sees them.
  size_t reported = 0;
  mlir::DiagnosticEngine::HandlerID counter =
      context.getDiagEngine().registerHandler([&](mlir::Diagnostic &d) {
        if (d.getSeverity() == mlir::DiagnosticSeverity::Error)
          ++reported;
        return mlir::failure();
      });
  mlir::PassManager pm(&context);
  addCheckPasses(pm, session);
  bool ok = mlir::succeeded(pm.run(top));
  context.getDiagEngine().eraseHandler(counter);

  // One line per model and config, then the whole run.
  std::map<std::pair<std::string, std::string>, std::string> lines;
  // --verbose: under each line, every invalid configuration and why.
  std::map<std::pair<std::string, std::string>, std::string> details;
  std::vector<std::pair<std::string, std::string>> order;
  int configs = 0, valid = 0;
  std::set<std::string> models, backends;
  for (const CheckSession::Summary &s : session->summaries()) {
    auto key = std::make_pair(s.model, s.configFile);
    if (!lines.count(key)) {
      order.push_back(key);
      lines[key] = s.configFile.empty()
                       ? s.model + ": checked; no example config to instantiate"
                       : s.model + " (" + s.configFile + "): " +
                             std::to_string(s.params) + " parameters, " +
                             humanCount(s.elements) + " elements";
    }
    models.insert(s.model);
    if (!s.note.empty())
      lines[key] += "; " + s.note;
    if (s.backend.empty())
      continue;
    lines[key] += "; " + s.backend + ": " + std::to_string(s.tensors) +
                  " tensors, " + std::to_string(s.valid) + "/" +
                  std::to_string(s.configs) + (s.configs == 1 ? " configuration valid" : " configurations valid");
    configs += s.configs;
    valid += s.valid;
    for (const auto &[cfg, reasons] : s.invalid)
      for (const std::string &why : reasons)
        details[key] += "  " + s.backend + " " + cfg + ": " + why + "\n";
    backends.insert(s.backend);
  }
  for (const auto &key : order) {
    llvm::outs() << lines[key] << "\n";
    if (options.verbose)
      llvm::outs() << details[key];
  }
  size_t errors = std::max(session->findings().size(), reported);
  ok &= errors == 0;
  double seconds = std::chrono::duration<double>(
                       std::chrono::steady_clock::now() - start)
                       .count();
  char time[32];
  std::snprintf(time, sizeof time, "%.2f", seconds);
  llvm::outs() << "checked " << models.size() << " model"
               << (models.size() == 1 ? "" : "s") << " on " << backends.size()
               << " backend" << (backends.size() == 1 ? "" : "s") << ": "
               << configs << " configuration" << (configs == 1 ? "" : "s")
               << " (" << valid << " valid), "
               << errors << " error" << (errors == 1 ? "" : "s") << ", " << time
               << " s\n";
  return ok ? 0 : 1;
}
