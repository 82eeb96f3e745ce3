//===- Model.h - Models as generated code describes them --------*- C++ -*-===//
//
// Generated code describes a model and a backend with the declarations
// below: modules (values, parameters, children), the backend's layouts and
// settings. Their expressions are generated functions (`Expr`). The engine
// instantiates the model for a config.json, as the compiler does, and binds
// it to the backend, giving the ModelLayout that planning and conversion
// read. Plain C++17, no LLVM.
//
//===----------------------------------------------------------------------===//

#ifndef MDL_RUNTIME_MODEL_MODEL_H
#define MDL_RUNTIME_MODEL_MODEL_H

#include "mdl/Runtime/Model/Layout.h"
#include "mdl/Runtime/Base/Value.h"

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace mdl::rt {

class Instance;
class Eval;

/// An expression of a declaration: a generated function in generated code,
/// a closure over the IR in the compiler (which interprets it). Errors (a
/// missing key, a division by zero) are thrown as EvalError, which the
/// engine catches and reports with the spec location; nothing is thrown out
/// of the engine.
class Expr {
public:
  using Function = Value (*)(Eval &);
  Expr() = default;
  Expr(std::nullptr_t) {}
  Expr(Function f) : fn(f) {}
  Expr(std::function<Value(Eval &)> f, int site)
      : fn(std::move(f)), exprSite(site) {}

  explicit operator bool() const { return bool(fn); }
  Value operator()(Eval &e) const { return fn(e); }
  /// The number of the function the C++ emitter writes for it; -1 for the
  /// expressions that are called.
  int site() const { return exprSite; }

private:
  std::function<Value(Eval &)> fn;
  int exprSite = -1;
};

struct EvalError {
  std::string message;
  /// "file:line:col" in the spec: of the op that raised it where known
  /// (the compiler's interpreter knows it), else of the declaration being
  /// evaluated, which the engine puts in.
  std::string where;
  /// More places to look at: a config value, the instance it happened in.
  struct Note {
    std::string where, message;
  };
  std::vector<Note> notes;
  /// Already counted among the model's errors: a name whose evaluation
  /// failed earlier, or what depends on it.
  bool reported = false;

  /// "where: message", then a line "where: note: message" per note.
  std::string text() const;
};

//===----------------------------------------------------------------------===//
// Declarations
//===----------------------------------------------------------------------===//

struct ValueDecl {
  /// InputDim: an input that names a dimension (`H: dim`), whose size must
  /// be positive.
  enum Kind { Input, Config, Let, Dim, InputDim };
  std::string name;
  Kind kind = Let;
  /// The value; for an input, its default (null: none).
  Expr expr = nullptr;
  /// A factored dimension's factors (then `expr` is null).
  std::vector<std::string> factors;
  std::string where; // "file:line:col"
};

struct ParamDecl {
  std::string name;
  /// Axes as atoms: the weight's (expert first, then out..., in... for a
  /// linear) and, for a linear with a bias, the bias's.
  std::vector<std::vector<std::string>> axes, biasAxes;
  std::string expert;
  std::optional<DType> dtype;
  /// The tensor-parallel split the spec gives, with its dimension and the
  /// dimension's atoms.
  TensorParallelStyle style = TensorParallelStyle::None;
  std::vector<std::string> styleAtoms;
  std::string styleDim;
  bool linear = false, bias = false;
  /// A linear's output axes: `axes` holds the expert axis (if any), then
  /// this many output axes, then the input axes.
  int outAxes = 0;
  Expr cond = nullptr, biasCond = nullptr;
  /// A linear's FP8 block size (`scale(B)`); null: unscaled.
  Expr scaleBlock = nullptr;
  /// Whether a linear's weight is MXFP4 (`mxfp4`, or `mxfp4(cond)` when
  /// `mxfp4Cond` holds).
  bool mxfp4 = false;
  Expr mxfp4Cond = nullptr;
  std::string where;
};

struct CaseDecl {
  std::string module;
  Expr guard = nullptr;
  std::vector<std::pair<std::string, Expr>> args;
};

struct ChildDecl {
  std::string name;
  bool stack = false;
  Expr count = nullptr, cond = nullptr;
  std::vector<CaseDecl> cases;
  std::string where;
};

struct RequireDecl {
  Expr cond = nullptr;
  std::string message, where;
};

struct NeedDecl {
  std::string capability;
  std::optional<std::string> fallback;
  std::string where;
};

struct ModuleDecl {
  std::string name;
  std::vector<ValueDecl> values;
  std::vector<RequireDecl> requirements;
  std::vector<ParamDecl> params;
  std::vector<ChildDecl> children;
  std::vector<NeedDecl> needs;
  std::string where;
  // A model's: its default dtype and pipeline placement.
  Expr defaultDType = nullptr;
  std::vector<std::string> first, last;
  std::string stages;
  std::vector<std::pair<std::string, std::string>> fallbacks;
  /// A model's config entries marked `detect`: the candidates (a list),
  /// and the hf() paths the entry's value reads. A checkpoint settles the
  /// entry when the config holds none of them.
  struct Detectable {
    std::string name;
    Expr candidates = nullptr;
    std::vector<std::string> keys;
  };
  std::vector<Detectable> detectable;
};

/// A piece of a name template: text, a family dimension, a value, or the
/// stack index written as a plain placeholder (renumbered per stage).
struct NamePiece {
  enum Kind { Text, Family, Value, Index };
  Kind kind = Text;
  std::string text; // Text; Family: the atom
  Expr value = nullptr;
};

struct TermDecl {
  enum Kind { Atom, Unit, Product, Parts };
  Kind kind = Atom;
  std::string atom;
  std::vector<TermDecl> children;
  struct Part {
    std::string param; // dotted, relative to the layout's module; "": group
    std::vector<TermDecl> shape;
  };
  std::vector<Part> parts;
};

// Term constructors, for generated layouts and the compiler's.
TermDecl atom(std::string name);
TermDecl unit();
TermDecl product(std::vector<TermDecl> children);
TermDecl parts(std::vector<TermDecl::Part> parts);

struct TensorDecl {
  std::vector<NamePiece> name;
  std::string param; // the held parameter, or "" with a part set
  std::vector<std::vector<TermDecl>> axes;
  std::string forStack;
  bool copy = false;
  /// Zeros wherever it exists: written, never read (see TensorSpec::zero).
  bool zero = false;
  Expr copyIf = nullptr;
  int64_t offset = 0;
  /// Stored value = -exp(logical value) (see TensorSpec::negExp).
  bool negExp = false;
  std::optional<DType> stored;
  std::vector<TensorSpec::ViewAxis> view;
  std::optional<int> split;
  MeshAxis splitBy = MeshAxis::TP;
  /// `on first` or `on last`: the stage the tensor is kept on.
  std::optional<Placement::Kind> on;
  Expr when = nullptr;
  bool whenReadsContext = false;
  /// A cache the backend computes from the slices it holds (no checkpoint
  /// holds it), rebuilt after the `recompute` events.
  bool derived = false;
  bool hasRecompute = false;
  std::vector<std::string> recompute;
  std::string where;
};

struct MountDecl {
  std::string member;
  Expr when = nullptr;
  std::vector<NamePiece> path;
  std::string where;
};

struct ShardDecl {
  std::vector<std::string> params;
  std::string dim;
  std::vector<std::string> atoms;
  MeshAxis axis = MeshAxis::TP;
  bool replicate = false;
  /// Where the split holds: a condition on the parallel sizes, or null.
  Expr when = nullptr;
  std::string where;
};

struct DerivedDecl {
  std::string name;
  std::vector<std::string> sources;
  bool hasRecompute = false;
  std::vector<std::string> recompute;
  Expr when = nullptr;
  std::string where;
};

/// A tensor checkpoints of a backend may hold that is no parameter.
struct BufferDecl {
  std::string name;
  Expr when = nullptr;
  std::string where;
};

struct LayoutDecl {
  std::string module;
  std::optional<std::string> mount;
  std::string where;
  std::vector<TensorDecl> tensors;
  std::vector<MountDecl> mounts;
  std::vector<ShardDecl> shards;
  std::vector<DerivedDecl> derived;
  std::vector<BufferDecl> buffers;
  /// A model's layout: the defaults of backend choices for the model.
  struct ChoiceDefault {
    std::string choice;
    Expr value = nullptr;
    std::string where;
  };
  std::vector<ChoiceDefault> choiceDefaults;
};

/// A storage variant of a backend (`choice storage = ["plain", "packed"]`).
struct ChoiceDecl {
  std::string name;
  std::vector<std::string> options;
  std::string where;
};

/// The module class a backend uses for one parallel role.
using ClassDecl = ModelLayout::ModuleClass;

/// A backend with its bases folded in: the nearest declaration wins.
struct BackendDecl {
  std::string name;
  std::vector<MeshAxis> mesh;
  Expr vocabMultiple = nullptr;
  Expr rankDir = nullptr;
  /// Checkpoints: the file of a rank's weights in its rank_dir (`{part}`
  /// in it numbers the parts of a rank split at a maximum size), the
  /// tracker file that names the saved iteration, and whether a rank saves
  /// a file at all.
  Expr rankFile = nullptr;
  Expr trackerFile = nullptr;
  Expr rankSaved = nullptr;
  /// The backend whose layout LoRA adapters for this one are kept in.
  Expr adapterBackend = nullptr;
  Expr blockScaleSuffix = nullptr;
  /// How the backend keeps MXFP4 weights (`mxfp4_blocks_suffix`,
  /// `mxfp4_scales_suffix`, `mxfp4_bytes_axis`); without a scales suffix
  /// it holds them dequantized.
  Expr mxfp4BlocksSuffix = nullptr, mxfp4ScalesSuffix = nullptr,
       mxfp4BytesAxis = nullptr;
  /// Whether the layers of the staged stack are stacked along a leading
  /// axis of their tensors (Megatron's distributed checkpoints).
  Expr stackLayers = nullptr;
  std::vector<RequireDecl> requirements;
  std::vector<std::pair<std::string, Expr>> capabilities;
  std::vector<ChoiceDecl> choices;
  std::vector<ClassDecl> classes;
  std::vector<LayoutDecl> layouts;
};

struct ModelDecl {
  std::string name, spec;
  /// The config.json `architectures` and `model_type` values it serves.
  std::vector<std::string> architectures, modelTypes;
  /// The model first.
  std::vector<ModuleDecl> modules;
  const ModuleDecl *find(const std::string &module) const;
};

//===----------------------------------------------------------------------===//
// Instances
//===----------------------------------------------------------------------===//

/// An HF config.json with `--set` overrides.
class HFConfig {
public:
  static std::optional<HFConfig> load(const std::string &path,
                                      std::string &error);
  static HFConfig fromJson(json::Value root, std::string path);
  /// `key=value`: applies to every hf() path equal to key or ending in
  /// `.key`; value is JSON, or else a string.
  void addOverride(const std::string &key, const std::string &value);
  const json::Value *lookup(std::string_view path) const;
  /// "file:line:col" of a value of the config file; "" for a value an
  /// override gives.
  std::string locate(const json::Value &v) const;
  /// Whether override `key` applies to dotted path `path`.
  static bool keyMatches(std::string_view path, std::string_view key);
  /// An override's value: JSON, or else a string.
  static json::Value overrideValue(const std::string &value);
  const std::string &path() const { return filePath; }

private:
  std::string filePath, text;
  json::Value root;
  std::vector<std::pair<std::string, json::Value>> overrides;
};

/// One concrete parameter of an instance.
struct ParamInstance {
  std::string path;
  const ParamDecl *decl = nullptr;
  bool bias = false;
  std::vector<std::vector<std::string>> axes;
  std::vector<int64_t> sizes;
  DType dtype = DType::BF16;
  TensorParallelStyle style = TensorParallelStyle::None;
  std::vector<std::string> styleAtoms;
  std::string styleDim;
  std::string expert;
  /// The pipeline stage(s) that hold it.
  Placement stage;
  int64_t scaleBlock = 0;
  bool mxfp4 = false;
};

/// A config key read as an integer that is absent or below 1.
struct SizeKey {
  std::string key;
  bool missing = false;
  int64_t value = 0;
  /// "file:line:col" of the value in the config; "" for --set's.
  std::string at;
};

class Instance {
public:
  const ModuleDecl *module = nullptr;
  std::string path;
  /// The pipeline stage(s) that hold its parameters.
  Placement stage;
  Instance *parent = nullptr;
  std::string stackName;
  int64_t stackIndex = -1;
  std::map<std::string, std::unique_ptr<Instance>> instances;
  std::map<std::string, std::vector<std::unique_ptr<Instance>>> stacks;
  std::vector<ParamInstance> params;
  /// The declaration order of children, for walks.
  std::vector<std::string> childOrder;

  /// The value of a name of this instance's module.
  /// The value of `name`, computed once; a reference into the cache, so
  /// that reading a long list (a config's layer_types, per layer) copies
  /// nothing.
  const Value &get(const std::string &name);
  std::string describe() const;

private:
  friend class Model;
  friend class Eval;
  class Model *model = nullptr;
  std::map<std::string, Value> inputs, cache;
  /// The config keys a value was made of that are absent or hold an
  /// integer below 1 (what a size that is not positive names), per name
  /// that has any; inputs' from their arguments.
  std::map<std::string, std::vector<SizeKey>> keysOf, inputKeys;
  std::map<std::string, bool> inProgress;
  /// Names whose evaluation failed (and was reported).
  std::set<std::string> failed;
};

/// A model instantiated for a config.
class Model {
public:
  /// Instantiates `decl` for `config`; null with `error` set (the spec
  /// location, then the message) on any failure.
  static std::unique_ptr<Model> create(const ModelDecl &decl, HFConfig config,
                                       std::string &error);
  /// The same, with every error: each bad value of a module once (where
  /// declared), each failed requirement, then the first error of building
  /// parameters and children.
  /// With `raiseSingleStacks`, every stack of one element but the
  /// pipelined one gets two (for checks of names that must depend on the
  /// stack index); raisedStacks() lists them.
  static std::unique_ptr<Model> create(const ModelDecl &decl, HFConfig config,
                                       std::vector<EvalError> &errors,
                                       bool raiseSingleStacks = false);
  const std::vector<std::string> &raisedStacks() const { return raised; }

  const ModelDecl &decl() const { return *modelDecl; }
  const HFConfig &config() const { return hfConfig; }
  Instance &root() { return *rootInstance; }
  /// The model's default dtype (`dtype = ...`), if it has one.
  std::optional<DType> dtype() const { return defaultDType; }
  /// Visits every instance depth first, children in declaration order.
  void walk(const std::function<void(Instance &)> &fn);

private:
  friend class Instance;
  friend class Eval;
  Model(const ModelDecl &decl, HFConfig config)
      : modelDecl(&decl), hfConfig(std::move(config)) {}
  void build(Instance &node);
  void buildParams(Instance &node);
  void buildChildren(Instance &node);
  std::unique_ptr<Instance> makeChild(Instance &parent, const ChildDecl &c,
                                      const std::string &path,
                                      const Value *index);

  const ModelDecl *modelDecl;
  HFConfig hfConfig;
  std::unique_ptr<Instance> rootInstance;
  std::optional<DType> defaultDType;
  /// The top-level members placed `on first` or `on last`.
  std::map<std::string, Placement> placement;
  std::string stagedStack;
  /// Elements of every parameter so far, bounded by kMaxModelElements.
  int64_t elementCount = 0;
  /// Names being evaluated, and instances being built, one inside another.
  int evalDepth = 0;
  /// Parameters so far, bounded by kMaxParams.
  size_t paramCount = 0;
  bool raiseSingles = false;
  std::vector<std::string> raised;
  std::vector<EvalError> errors;
  /// Where the evaluation under way collects the SizeKeys it reads.
  std::vector<SizeKey> *sizeKeys = nullptr;
  /// An error for a dimension that is not positive: `what` (its name and
  /// instance) has size `size`, made of `keys`.
  EvalError sizeError(const std::string &what, int64_t size,
                      const std::vector<SizeKey> &keys) const;
};

/// What generated expressions read: the instance's names, the config, the
/// parallel context and the backend's choices, and block arguments.
class Eval {
public:
  Eval(Instance &scope, const RankContext *ctx = nullptr,
       const std::map<std::string, std::string> *choices = nullptr,
       std::vector<Value> args = {})
      : scope(scope), ctx(ctx), choices(choices), args(std::move(args)) {}

  const Value &get(const char *name) { return scope.get(name); }
  Value hf(const char *path, const char *type);
  Value context(const char *var);
  Value choice(const char *name, const char *first);
  bool is(const char *instance, const char *module);
  const Value &arg(size_t i);
  /// `v`, or an error when it is missing.
  const Value &present(const Value &v);

  Instance &scope;
  const RankContext *ctx;
  const std::map<std::string, std::string> *choices;
  std::vector<Value> args;
};

// Operators for generated code; they throw EvalError.
Value bin(Eval &e, BinaryOp op, const Value &l, const Value &r);
bool truthy(Eval &e, const Value &v);
Value neg(Eval &e, const Value &v);
Value index(Eval &e, const Value &list, const Value &i);
Value contains(Eval &e, const Value &list, const Value &v);
Value builtin(Eval &e, const char *name, std::vector<Value> args);
template <typename F> Value coalesce(Value a, F b) {
  if (a.kind != Value::Missing)
    return a;
  Value r = b();
  if (r.kind != Value::Missing)
    return r;
  a.triedKeys.insert(a.triedKeys.end(), r.triedKeys.begin(),
                     r.triedKeys.end());
  return a;
}
template <typename F> Value comprehend(Eval &e, const Value &src, F body) {
  Value out = Value::listOf({});
  for (const Value &x : e.present(src).list)
    out.list.push_back(e.present(body(x)));
  return out;
}

/// Compares the stacks of two instances of one model: an override may ask
/// for fewer elements than the checkpoint's config (at `configPath`) has,
/// never more. The reason when `asked` has more, else nothing.
std::optional<std::string> deeperThan(Instance &asked, Instance &has,
                                      const std::string &configPath);

//===----------------------------------------------------------------------===//
// Binding
//===----------------------------------------------------------------------===//

/// A model bound to a backend: its layout, and for each tensor the instance
/// whose layout declares it.
struct BoundLayout {
  ModelLayout layout;
  std::vector<Instance *> tensorNodes;
  std::vector<const ParamInstance *> params;
  /// "file:line:col" of each source id of the layout.
  std::vector<std::string> sources;
};

/// The option each choice of `backend` takes for `model` when nothing
/// settles it: the model layout's default (`choice x = expr;`), else the
/// first option. Throws EvalError.
std::map<std::string, std::string> defaultChoices(Model &model,
                                                  const BackendDecl &backend);
/// The same without throwing: nothing, with `error` set, on failure.
std::optional<std::map<std::string, std::string>>
defaultChoices(Model &model, const BackendDecl &backend, std::string &error);

/// Binds `model` to `backend` with the given choices (others take their
/// defaults); nothing, with `error` set, on failure. With `derivedView`,
/// the layout's tensors are the derived tensors the spec computes
/// (`derived "..." = ...`), and only they: where a backend's caches sit
/// beside the tensors they are computed from.
std::optional<BoundLayout>
bindModel(Model &model, const BackendDecl &backend,
          const std::map<std::string, std::string> &choices,
          std::string &error, bool derivedView = false);
/// The same, with every error (the block scales of several entries).
std::optional<BoundLayout>
bindModel(Model &model, const BackendDecl &backend,
          const std::map<std::string, std::string> &choices,
          std::vector<EvalError> &errors, bool derivedView = false);

} // namespace mdl::rt

#endif // MDL_RUNTIME_MODEL_MODEL_H
