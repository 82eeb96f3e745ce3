//===- Instance.h - Evaluating a model for a concrete config ---*- C++ -*-===//
//
// A model evaluated against an HF config.json is a tree of module instances,
// each with the values of its names (computed on demand by interpreting the
// IR's expression regions) and its parameters with concrete shapes. The
// `mdl-instantiate` pass prints this tree as IR; the checks and `mdlc params`
// read it directly.
//
//===----------------------------------------------------------------------===//

#ifndef MDL_EVALUATE_INSTANCE_H
#define MDL_EVALUATE_INSTANCE_H

#include "mdl/Dialect/MDL/MDLOps.h"
#include "mdl/Runtime/DType.h"
#include "mdl/Runtime/Json.h"
#include "mdl/Runtime/Parallel.h"
#include "mdl/Runtime/Value.h"

#include "mlir/Support/LogicalResult.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSet.h"

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace mdl {

/// A value of the expression language (shared with generated code).
using EvalValue = rt::Value;
using rt::toJson;

/// An HF config.json, with `--set` overrides.
class HFConfig {
public:
  /// Reads and parses `path`; reports errors at the file's line:col.
  static std::unique_ptr<HFConfig> load(const std::string &path,
                                        mlir::MLIRContext &context);
  /// Overrides: `key=value` applies to every hf() path equal to key or
  /// ending in `.key`. `value` is JSON, or else taken as a string.
  void addOverride(const std::string &key, const std::string &value);

  /// The value at a dotted path, or null.
  const json::Value *lookup(llvm::StringRef path) const;
  const std::string &path() const { return filePath; }
  /// The location of a value in the config file, for diagnostics; none
  /// for a value given with --set.
  std::optional<mlir::Location> locate(const json::Value &v,
                                       mlir::MLIRContext &ctx) const;

private:
  static bool isWithin(const json::Value &root, const json::Value &v);
  std::string filePath;
  std::string text;
  json::Value root;
  std::vector<std::pair<std::string, json::Value>> overrides;
};

/// One parameter of an instance, with concrete sizes.
struct ConcreteParam {
  std::string path;            // "layers.3.attn.q" (".bias" for a bias)
  mlir::Operation *decl;       // the mdl.param or mdl.linear
  bool bias = false;
  /// Atomic dimension names per axis, and their sizes in the same order.
  std::vector<std::vector<std::string>> axes;
  std::vector<int64_t> sizes;
  mdl::DType dtype = mdl::DType::BF16;
  ParallelStyleAttr style;     // may be null
  std::string expert;          // expert dimension, if grouped
  std::string stage;           // "first", "last", "all" or a stack index
  int64_t scaleBlock = 0;      // FP8 block size of a scaled weight, or 0

  int64_t numElements() const;
  /// Sizes of each axis (product of its atoms).
  std::vector<int64_t> shape() const;
  /// Index of atom `name` in `sizes`, or -1.
  int atomIndex(llvm::StringRef name) const;
};

class Instantiation;

/// What a region may read besides the names of its instance: the parallel
/// context (in layouts and backends) and the backend's chosen storage
/// variants.
struct EvalEnv {
  const RankContext *rank = nullptr;
  const llvm::StringMap<std::string> *choices = nullptr;
};

/// One instance of a module.
class InstanceNode {
public:
  ModuleDeclOp module;
  std::string path; // "" for the model, "layers.3", "layers.3.attn"
  std::string stage;
  InstanceNode *parent = nullptr;
  /// For an element of a stack: the stack and the index.
  std::string stackName;
  int64_t stackIndex = -1;

  /// Children by member name: one node for an instance (absent when its
  /// condition is false), one per index for a stack.
  std::map<std::string, std::unique_ptr<InstanceNode>> instances;
  std::map<std::string, std::vector<std::unique_ptr<InstanceNode>>> stacks;
  std::vector<ConcreteParam> params;

  /// The value of a name declared in this module.
  mlir::FailureOr<EvalValue> get(llvm::StringRef name, mlir::Location useLoc);
  /// The same, as a reference into the cache (which keeps it): reading a
  /// long list (a config's layer_types, per layer) copies nothing.
  mlir::FailureOr<const EvalValue *> getRef(llvm::StringRef name,
                                            mlir::Location useLoc);
  /// Evaluates a region of an op of this module (or a layout of it, or a
  /// backend) and returns what it yields.
  mlir::FailureOr<std::vector<EvalValue>>
  evalRegion(mlir::Region &region, llvm::ArrayRef<EvalValue> args = {},
             const EvalEnv &env = {});
  /// Like evalRegion for a region yielding one value; an empty region
  /// gives `dflt`.
  mlir::FailureOr<EvalValue> evalOne(mlir::Region &region,
                                     const EvalValue &dflt,
                                     const EvalEnv &env = {});

  /// The size of dimension `name` of this module (an atom or factored).
  mlir::FailureOr<int64_t> dimSize(llvm::StringRef name, mlir::Location loc);

  /// "layers.3.attn (GatedAttention)", for notes.
  std::string describe() const;

private:
  friend class Instantiation;
  Instantiation *inst = nullptr;
  /// Values given by the instantiating case, by input name.
  llvm::StringMap<EvalValue> inputs;
  llvm::StringMap<EvalValue> cache;
  llvm::StringMap<bool> inProgress;
  llvm::StringSet<> failedNames;
};

/// A model evaluated against an HF config.
class Instantiation {
public:
  /// Evaluates `model` against `config`. Reports every error it finds
  /// (missing keys, type errors, failed requires, bad sizes) and returns
  /// null if there was any. With `raiseSingleStacks`, every stack of one
  /// element but the pipelined one gets two (for checks of names that
  /// must depend on the stack index); `raisedStacks` lists them.
  static std::unique_ptr<Instantiation> create(ModuleDeclOp model,
                                               const HFConfig &config,
                                               bool raiseSingleStacks = false);

  ModuleDeclOp model;
  const HFConfig &config;
  std::unique_ptr<InstanceNode> root;

  /// Every parameter, depth first in declaration order.
  std::vector<const ConcreteParam *> allParams() const;
  /// Visits every node, depth first.
  void walk(llvm::function_ref<void(InstanceNode &)> fn);
  /// The model's default dtype (`dtype = ...`), if it has one.
  std::optional<mdl::DType> dtype() const { return defaultDType; }
  /// The evaluated config entries of the model.
  std::vector<std::pair<std::string, EvalValue>> configValues();
  /// The stacks given two elements instead of one (`raiseSingleStacks`).
  const std::vector<std::string> &raisedStacks() const { return raised; }

private:
  friend class InstanceNode;
  Instantiation(ModuleDeclOp model, const HFConfig &config)
      : model(model), config(config) {}
  mlir::LogicalResult build(InstanceNode &node);
  mlir::LogicalResult buildParams(InstanceNode &node);
  mlir::LogicalResult buildChildren(InstanceNode &node);
  std::unique_ptr<InstanceNode> makeChild(InstanceNode &parent,
                                          mlir::Operation *member,
                                          mlir::Region &cases,
                                          const std::string &path,
                                          const EvalValue *index);
  std::optional<mdl::DType> defaultDType;
  bool hadError = false;
  bool raiseSingles = false;
  std::vector<std::string> raised;
  size_t paramCount = 0;
  /// Names being evaluated, and instances being built, one inside another.
  int evalDepth = 0;
  /// Elements of every parameter so far, bounded by rt::kMaxModelElements.
  int64_t elementCount = 0;
  /// Parameters and instances placed by the model's pipeline op.
  llvm::StringMap<std::string> placement;
  std::string stagedStack;
};

} // namespace mdl

#endif // MDL_EVALUATE_INSTANCE_H
