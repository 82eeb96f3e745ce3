//===- Generated.h - What generated code offers its users -------*- C++ -*-===//
//
// Generated code (`mdlc emit`, `mdl_generate()`) declares a model and a
// backend and registers them; this header is what it includes and what its
// users call: a Binding (the model instantiated for a config.json and bound
// to the backend) gives the validity of a parallel configuration, each
// rank's tensors, and the LoRA injection table. Conversion is in
// mdl/Runtime/Convert/Convert.h. Plain C++17; nothing throws out of it.
//
//===----------------------------------------------------------------------===//

#ifndef MDL_RUNTIME_MODEL_GENERATED_H
#define MDL_RUNTIME_MODEL_GENERATED_H

#include "mdl/Runtime/Model/Lora.h"
#include "mdl/Runtime/Model/Model.h"
#include "mdl/Runtime/Model/Plan.h"

#include <memory>
#include <string>
#include <vector>

namespace mdl::rt {

/// A model and a backend as one generated unit declares them, with the HF
/// backend that checkpoints use.
struct Generated {
  const ModelDecl &model;
  const BackendDecl &backend;
  const BackendDecl &hf;
};

/// Every generated unit linked into the program registers itself.
struct Registration {
  explicit Registration(const Generated &g);
};
const std::vector<const Generated *> &registry();
/// The unit of `model` and `backend` (dashes in names read as
/// underscores), or null.
const Generated *findGenerated(const std::string &model,
                               const std::string &backend);

/// The model whose spec serves `config`: its `model_type` or one of its
/// `architectures` is one the spec declares (`serves`), and when several
/// do, the one that matches both. Null, with `error` naming what the config
/// holds and what the compiled-in specs serve, unless there is exactly one.
const ModelDecl *servingModel(const HFConfig &config, std::string &error);

/// A backend's choice named `lora` with an option `on` says which modules
/// the backend builds when it runs with LoRA enabled (vLLM's profile).
/// Tools that describe LoRA (`mdlc lora`, `mdl-convert --adapters`) select
/// it unless `choices` already does.
void selectLoraModules(const std::vector<ChoiceDecl> &backendChoices,
                       std::map<std::string, std::string> &choices);

struct LoadOptions {
  /// `key=value` overrides of the config (`mtp_num_hidden_layers=0`).
  std::vector<std::pair<std::string, std::string>> overrides;
  /// Storage variants of the backend (`expert_storage=packed`).
  std::map<std::string, std::string> choices;
};

/// A model instantiated for a config and bound to a backend.
class Binding {
public:
  static std::unique_ptr<Binding> load(const ModelDecl &model,
                                       const BackendDecl &backend,
                                       const std::string &configPath,
                                       const LoadOptions &options,
                                       std::string &error);
  /// Binds an instantiated model to another backend (the same instance).
  static std::unique_ptr<Binding>
  bind(std::shared_ptr<Model> model, const BackendDecl &backend,
       const std::map<std::string, std::string> &choices, std::string &error);

  const ModelLayout &layout() const { return bound.layout; }
  const BoundLayout &boundLayout() const { return bound; }
  const BackendDecl &backend() const { return *backendDecl; }
  std::shared_ptr<Model> model() const { return instance; }

  /// Every reason `config` is invalid; empty when it is valid. Axes the
  /// backend lacks must be 1.
  std::vector<std::string> validate(const ParallelConfig &config) const;
  /// The number of ranks (tp * pp * ep).
  static int64_t numRanks(const ParallelConfig &config) {
    return rt::numRanks(config);
  }
  /// The tensors of rank `rank` (see rt::rankTensors).
  std::vector<RankTensor> rankTensors(const ParallelConfig &config,
                                      int64_t rank) const {
    return rt::rankTensors(bound.layout, config, rank);
  }
  /// The directory a rank's checkpoint goes to: the backend's `rank_dir`,
  /// or `rank_TT`.
  std::string rankDir(const ParallelConfig &config, int64_t rank) const;
  /// The file of a rank's weights in its directory: the backend's
  /// `rank_file`, or `model.safetensors`. Its extension says the format
  /// (`.pt`: a torch checkpoint, TorchCheckpoint.h); `{part}` in it
  /// numbers the parts of a rank split at a maximum size.
  std::string rankFile(const ParallelConfig &config, int64_t rank) const;
  /// The backend's `tracker_file` (Megatron's
  /// `latest_checkpointed_iteration.txt`), or "" when its checkpoints have
  /// none: then the rank directories are at the top of a checkpoint,
  /// otherwise in `release/` or `iter_NNNNNNN/` beside it.
  std::string trackerFile() const;
  /// Whether rank `rank` saves a file: the backend's `rank_saved`, or true.
  bool rankSaved(const ParallelConfig &config, int64_t rank) const;
  /// The backend whose layout adapters for this one are kept in: the
  /// backend's `adapter_backend`, or its own name.
  std::string adapterBackend() const;
  /// The path each module that needs a device capability takes here.
  std::vector<KernelPath> kernelPaths() const {
    return rt::kernelPaths(bound.layout);
  }
  /// The derived tensors of the backend with the events that refresh them.
  const std::vector<ModelLayout::DerivedTensor> &derived() const {
    return bound.layout.derived;
  }
  /// The derived tensors the spec computes, bound as the tensors of a
  /// layout of their own (the same instance and choices): a transfer plan
  /// from this binding to it, local to each rank, refreshes them.
  std::unique_ptr<Binding> derivedView(std::string &error) const;

private:
  std::shared_ptr<Model> instance;
  const BackendDecl *backendDecl = nullptr;
  BoundLayout bound;
};

/// The LoRA injection table of rank `rank` (see mdl/Runtime/Model/Lora.h).
inline std::vector<LoraTarget> loraTable(const Binding &binding,
                                         const ParallelConfig &config,
                                         int64_t rank, int64_t r = 16) {
  return loraTable(binding.layout(), config, rank, r);
}

} // namespace mdl::rt

#endif // MDL_RUNTIME_MODEL_GENERATED_H
