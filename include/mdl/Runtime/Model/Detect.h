//===- Detect.h - What a checkpoint settles ---------------------*- C++ -*-===//
//
// A config may leave open how a checkpoint is stored: the backend's choices
// (packed or per-expert experts, the text model's prefix) and config entries
// marked `detect` whose keys the config lacks (Qwen3-Next's MTP depth). With
// a checkpoint at hand, every combination is tried and the one under which
// the checkpoint holds the most of the tensors expected wins; then the one
// whose model has the fewest parameters (no MTP layer is promised that the
// checkpoint lacks); then the one closest to the defaults (the official
// release's). Storage choices do not change the parameters, so an absent
// part's storage stays the default. The compiler
// (`mdlc check --hf-*`) and generated code (`mdl-convert`) both settle
// through settle(), each scoring with its own engine. Plain C++17.
//
//===----------------------------------------------------------------------===//

#ifndef MDL_RUNTIME_MODEL_DETECT_H
#define MDL_RUNTIME_MODEL_DETECT_H

#include "mdl/Runtime/Model/Generated.h"

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace mdl::rt {

/// Something a checkpoint may settle: a choice of the backend, or a config
/// entry the config leaves open.
struct Unknown {
  /// The choice, or the config key the entry is overridden through.
  std::string name;
  /// The choice's options, or the entry's candidates as JSON text.
  std::vector<std::string> options;
  /// The option taken without a checkpoint.
  size_t dflt = 0;
  bool entry = false;
};

/// How well a checkpoint matches one combination.
struct Match {
  size_t present = 0; // expected tensors the checkpoint holds
  size_t params = 0;  // parameters of the model
};

struct Settlement {
  /// The option picked for each unknown.
  std::vector<size_t> pick;
  /// Whether the checkpoint decided it: another option alone matches
  /// differently (holds another number of tensors, or has another number
  /// of parameters).
  std::vector<bool> decisive;
};

/// Tries every combination of options; `match` scores one (nothing when
/// the combination does not instantiate or bind, which then loses).
/// Nothing when no combination could be scored.
std::optional<Settlement>
settle(const std::vector<Unknown> &unknowns,
       const std::function<std::optional<Match>(const std::vector<size_t> &)>
           &match);

/// The options `pick` takes for the config entries, in order: what tells
/// one instance of the model from another.
std::vector<size_t> pickedEntries(const std::vector<Unknown> &unknowns,
                                  const std::vector<size_t> &pick);
/// Whether `pick` takes every config entry's default (the plain instance).
bool entriesAtDefaults(const std::vector<Unknown> &unknowns,
                       const std::vector<size_t> &pick);
/// The backend choices of `pick`: `fixed`, with the picked option of each
/// choice among the unknowns.
std::map<std::string, std::string>
pickedChoices(const std::vector<Unknown> &unknowns,
              const std::vector<size_t> &pick,
              const std::map<std::string, std::string> &fixed);

/// "name=value (detected)" for each unknown the checkpoint decided.
std::string detectedNote(const std::vector<Unknown> &unknowns,
                         const Settlement &s);

/// A model and its HF checkpoint, settled.
struct Detection {
  /// The model as the checkpoint holds it: the config with the settled
  /// entries.
  std::shared_ptr<Model> model;
  /// Every choice of the backend.
  std::map<std::string, std::string> choices;
  /// The settled config entries, as `key=JSON` overrides.
  std::vector<std::pair<std::string, std::string>> values;
  /// What the checkpoint decided, for the user.
  std::string note;
};

/// Settles `model` on `backend` for a checkpoint of config `config` holding
/// the tensors `holds` says it holds (rank 0 of the unparallel
/// configuration, as HF checkpoints are). Choices in `fixed` are not
/// detected, nor are entries whose keys `overrides` (`--set`) give.
/// Nothing, with `error` set, when the config does not instantiate.
std::optional<Detection>
detectCheckpoint(const ModelDecl &model, const BackendDecl &backend,
                 const HFConfig &config,
                 const std::vector<std::pair<std::string, std::string>>
                     &overrides,
                 const std::map<std::string, std::string> &fixed,
                 const std::function<bool(const std::string &)> &holds,
                 std::string &error);

/// A model opened for a conversion: as its checkpoint holds it, and as
/// asked.
struct OpenedModel {
  /// As the checkpoint holds it: the config with the entries settled, and
  /// every choice of the backend.
  Detection held;
  /// As asked: with the overrides, which may lower a depth (the tensors of
  /// the stack elements it drops are then skipped: droppedTensors()),
  /// never raise it; `held.model` itself without overrides.
  std::shared_ptr<Model> instance;
  /// The config `instance` is made from.
  HFConfig config;
};

/// Opens `model` for a checkpoint on `backend` of config `config`, whose
/// entries `settled` are already settled (`key=JSON`, e.g. from a
/// conversion's record), with `choices` and the `overrides` (`--set`). The
/// config alone is checked first: a model whose tensors on `backend`
/// cannot even be listed (sizes out of bounds) is refused before any
/// checkpoint is read. With `holds` (the tensor names of an HF checkpoint),
/// what the config leaves open is settled from the checkpoint
/// (detectCheckpoint()). Nothing, with `error` set, on any failure.
std::optional<OpenedModel>
openModel(const ModelDecl &model, const BackendDecl &backend,
          const HFConfig &config,
          const std::vector<std::pair<std::string, std::string>> &settled,
          const std::vector<std::pair<std::string, std::string>> &overrides,
          const std::map<std::string, std::string> &choices,
          const std::function<bool(const std::string &)> &holds,
          const std::string &configPath, std::string &error);

/// The tensors rank `rank` of `holds` (the checkpoint's own model) has that
/// the same rank of `asked` (the model with overrides that lower a depth)
/// does not: those of the dropped stack elements, which a conversion skips.
std::set<std::string> droppedTensors(const Binding &holds,
                                     const Binding &asked,
                                     const ParallelConfig &config,
                                     int64_t rank);

} // namespace mdl::rt

#endif // MDL_RUNTIME_MODEL_DETECT_H
