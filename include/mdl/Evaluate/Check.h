//===- Check.h - Checking models over grids of configurations --*- C++ -*-===//
//
// A CheckSession evaluates every model of a module against its configs,
// binds it to each backend and plans it for every parallel configuration
// of a grid, collecting findings (problems with a stable check ID, where
// they are, and in how many configurations they occur). The check passes
// read the findings of their own IDs; `mdlc check` reads the summary.
//
//===----------------------------------------------------------------------===//

#ifndef MDL_EVALUATE_CHECK_H
#define MDL_EVALUATE_CHECK_H

#include "mdl/Evaluate/Checkpoint.h"
#include "mdl/Evaluate/Engine.h"
#include "mdl/Runtime/Model/Plan.h"

#include "mlir/IR/BuiltinOps.h"

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace mdl {

struct CheckOptions {
  /// The HF config; empty: each model's example configs.
  std::string hfConfig;
  /// KEY=VALUE overrides of the HF config.
  std::vector<std::string> sets;
  /// Backends to check; empty: every backend some layout describes.
  std::vector<std::string> backends;
  /// The grid (axis -> values, parsed once from `--grid`); empty: the
  /// default grid.
  std::map<std::string, std::vector<int64_t>> grid;
  /// name=value storage variants of the backends.
  std::vector<std::string> choices;
  /// Only files whose models to check; empty: every model.
  std::vector<std::string> files;
  /// A checkpoint to compare each model with, and the backend whose tensors
  /// it holds.
  CheckpointSource checkpoint;
  std::string checkpointBackend = "hf";

  std::string key() const;
};

/// Parses a grid such as "tp=1,2,4 pp=1,2"; an error message on failure.
std::optional<std::string>
parseGrid(llvm::StringRef text, std::map<std::string, std::vector<int64_t>> &out);

class CheckSession {
public:
  explicit CheckSession(CheckOptions options) : opts(std::move(options)) {}

  /// Evaluates everything once; later calls return the first result.
  /// Errors of evaluation (missing config keys, failed requires) are
  /// reported as diagnostics here.
  mlir::LogicalResult prepare(mlir::ModuleOp top);

  struct Finding {
    std::string check;
    std::string message;
    mlir::LocationAttr at;
    std::string model, backend, configFile;
    /// The parallel configurations it occurs in (the first one, and how many).
    std::string firstConfig;
    int configs = 0;
    std::set<std::string> configsSeen;
    /// How many more places (other layers) have the same problem.
    int similar = 0;
    /// Another place involved, shown as a note.
    mlir::LocationAttr related;
  };
  const std::vector<Finding> &findings() const { return found; }

  struct Summary {
    std::string model, configFile, backend;
    size_t params = 0;
    int64_t elements = 0;
    int configs = 0, valid = 0;
    /// The configurations that are invalid, with their reasons.
    std::vector<std::pair<std::string, std::vector<std::string>>> invalid;
    size_t tensors = 0; // of the first valid configuration, one rank
    /// Said instead of the backend's counts (a checkpoint's comparison).
    std::string note;
  };
  const std::vector<Summary> &summaries() const { return sums; }

  const CheckOptions &options() const { return opts; }

private:
  void checkModel(ModuleDeclOp model, const std::string &configPath,
                  const std::map<std::string, std::vector<int64_t>> &grid);
  /// Checks one binding of the model, under one combination of the
  /// backend's choices (`label` names those that are not the defaults);
  /// `summarize`: its counts make the backend's summary. Appends to
  /// `record`, when given, each finding with the parallel configuration it
  /// occurs in (without `label`). Returns the binding, if there is one.
  std::optional<rt::BoundLayout>
  checkBinding(ModuleDeclOp model, rt::Model &inst,
               const rt::BackendDecl &backend,
               const std::map<std::string, std::string> &combo,
               const std::string &label, const std::string &configPath,
               const std::vector<ParallelConfig> &points, bool summarize,
               std::vector<std::pair<Finding, std::string>> *record = nullptr);
  /// Reports each configuration of a `deploy` the spec makes invalid;
  /// `bound` holds the bindings of the default choices made so far, by
  /// backend.
  void checkDeploy(ModuleDeclOp model, DeployOp deploy, SpecDecls &decls,
                   rt::Model &inst,
                   const std::map<std::string, std::string> &choices,
                   const std::string &configPath,
                   const std::map<std::string, rt::BoundLayout> &bound);
  void add(Finding f, const std::string &config);
  /// Binds `inst` to `backend` with `choices`, its errors tagged `bind`;
  /// nothing, and the session failed, when it does not bind.
  std::optional<rt::BoundLayout>
  bindChecked(ModuleDeclOp model, rt::Model &inst,
              const rt::BackendDecl &backend,
              const std::map<std::string, std::string> &choices);
  /// Compares the checkpoint with `inst` bound with `choices`; `held` is
  /// the model as the checkpoint holds it (before overrides), `detected`
  /// what the checkpoint settled.
  void checkCheckpoint(ModuleDeclOp model, rt::Model &inst, rt::Model *held,
                       const rt::BackendDecl &backend,
                       const std::string &configPath,
                       const std::map<std::string, std::string> &choices,
                       const std::string &detected);

  CheckOptions opts;
  bool prepared = false;
  bool ok = true;
  std::vector<Finding> found;
  std::map<std::tuple<std::string, std::string, const void *>, size_t> index;
  std::vector<Summary> sums;
  std::optional<CheckpointContents> checkpoint;
};

/// The registry of check IDs: the pass that reports each (empty for the
/// checks the session reports before any pass runs) and what it guards.
/// The check passes, `mdlc check --list-checks` and the test of
/// docs/checks.md all read it.
struct CheckInfo {
  const char *id;
  const char *pass;
  const char *guards;
};
llvm::ArrayRef<CheckInfo> allChecks();
/// The IDs the pass with argument `pass` reports.
std::vector<std::string> checksOfPass(llvm::StringRef pass);

} // namespace mdl

#endif // MDL_EVALUATE_CHECK_H
