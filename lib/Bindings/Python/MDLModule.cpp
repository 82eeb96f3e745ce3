//===- MDLModule.cpp - The mdl._mdl Python extension ----------------------===//
//
// The runtime as Python sees it: a model instantiated for a config (and,
// for an HF checkpoint, as its files hold it), its plans and LoRA tables as
// the JSON `mdlc` prints, and conversions between layouts whose sources and
// targets are tensors in the process's memory, given as (name, dtype,
// shape, address). The Python package (mdl/__init__.py) turns torch tensors
// and numpy arrays into those and back. Every runtime error is raised as
// mdl.Error with the runtime's message; the work runs without the GIL.
//
//===----------------------------------------------------------------------===//

#include "mdl/Runtime/Convert/Adapter.h"
#include "mdl/Runtime/Checkpoint/Checkpoint.h"
#include "mdl/Runtime/Checkpoint/DistCheckpoint.h"
#include "mdl/Runtime/Convert/CheckpointFiles.h"
#include "mdl/Runtime/Base/Cli.h"
#include "mdl/Runtime/Convert/Convert.h"
#include "mdl/Runtime/Model/Detect.h"
#include "mdl/Runtime/Base/File.h"
#include "mdl/Runtime/Model/Generated.h"
#include "mdl/Runtime/Model/Report.h"
#include "mdl/Runtime/Convert/Transfer.h"

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <map>
#include <set>

namespace py = pybind11;
using namespace mdl;
using namespace mdl::rt;

namespace {

/// What the runtime reports, raised in Python as mdl.Error.
struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// A tensor as Python hands it over: name, dtype (safetensors spelling),
/// shape and the address of its contiguous bytes.
using TensorArg =
    std::tuple<std::string, std::string, std::vector<int64_t>, uintptr_t>;

DType dtypeOf(const std::string &tensor, const std::string &name) {
  std::optional<DType> t = parseDType(name);
  if (!t)
    throw Error("tensor '" + tensor + "' has dtype " + name +
                ", which MDL does not know");
  return *t;
}

ParallelConfig parallelOf(const std::map<std::string, py::object> &given) {
  ParallelConfig c;
  for (const auto &[key, value] : given) {
    if (value.is_none())
      continue;
    if (key == "sp") {
      if (!py::isinstance<py::bool_>(value))
        throw Error("sp takes True or False");
      c.sp = value.cast<bool>();
      continue;
    }
    // Python's bool is an int; an axis size is not a bool.
    if (!py::isinstance<py::int_>(value) || py::isinstance<py::bool_>(value))
      throw Error(key + " takes an integer, not " +
                  std::string(py::str(py::repr(value))));
    int64_t n;
    try {
      n = value.cast<int64_t>();
    } catch (const py::cast_error &) {
      throw Error(key + " is out of range");
    }
    if (key == "first_stage_layers" || key == "last_stage_layers") {
      (key[0] == 'f' ? c.firstStageLayers : c.lastStageLayers) = n;
      continue;
    }
    auto size = std::find_if(
        std::begin(kParallelSizes), std::end(kParallelSizes),
        [&](const auto &named) { return key == named.first; });
    if (size == std::end(kParallelSizes))
      throw Error("unknown parallel axis '" + key +
                  "' (tp, pp, ep, etp, cp, dp, vpp, sp, first_stage_layers, "
                  "last_stage_layers)");
    c.*(size->second) = n;
  }
  if (std::optional<std::string> why = c.checkBounds())
    throw Error(*why);
  return c;
}

/// A transfer plan as Python reads it: tables of numbers (numpy arrays of
/// int64, a row per segment, dimension or bucket) and the tensors they
/// index.
class PyTransferPlan {
  void checkRank(bool source, int64_t rank) const {
    int64_t n = source ? plan->numSrcRanks() : plan->numDstRanks();
    if (rank < 0 || rank >= n)
      throw Error(std::string(source ? "source" : "destination") + " rank " +
                  std::to_string(rank) + " does not exist: the plan has " +
                  std::to_string(n));
  }

public:
  explicit PyTransferPlan(std::unique_ptr<TransferPlan> plan)
      : plan(std::move(plan)) {}

  std::string digest() const { return plan->digest(); }
  int64_t numSrcRanks() const { return plan->numSrcRanks(); }
  int64_t numDstRanks() const { return plan->numDstRanks(); }
  uint64_t bucketBytes() const { return plan->bucketBytes(); }
  const std::vector<std::string> &params() const { return plan->params; }

  /// (name, shape, dtype) of each tensor a rank reads or writes.
  std::vector<std::tuple<std::string, std::vector<int64_t>, std::string>>
  tensors(bool source, int64_t rank) const {
    checkRank(source, rank);
    std::vector<std::tuple<std::string, std::vector<int64_t>, std::string>> out;
    for (const TransferTensor &t : source ? plan->sourceTensors(rank)
                                          : plan->destinationTensors(rank))
      out.emplace_back(t.name, t.shape, std::string(safetensorsName(t.dtype)));
    return out;
  }

  int64_t layoutRank(bool source, int64_t rank) const {
    checkRank(source, rank);
    return plan->layoutRank(source, rank);
  }

  /// A row per segment: source rank, source tensor, destination rank,
  /// destination tensor, parameter, bucket, first dimension, dimensions,
  /// source offset, destination offset, bucket offset (bytes), elements.
  py::array_t<int64_t> segments() const {
    return table(plan->segments, 12, [](const TransferSegment &s, int64_t *r) {
      int64_t v[] = {s.srcRank,   s.srcTensor, s.dstRank,      s.dstTensor,
                     s.param,     s.bucket,    s.firstDim,     s.numDims,
                     s.srcOffset, s.dstOffset, int64_t(s.bucketOffset),
                     s.elements};
      std::copy(std::begin(v), std::end(v), r);
    });
  }
  /// One field of every segment, as an array.
  template <typename T>
  py::array_t<T> perSegment(T TransferSegment::*field) const {
    py::array_t<T> out(py::ssize_t(plan->segments.size()));
    auto w = out.template mutable_unchecked<1>();
    for (size_t i = 0; i < plan->segments.size(); ++i)
      w(py::ssize_t(i)) = plan->segments[i].*field;
    return out;
  }
  /// The value added to each segment's elements after the cast.
  py::array_t<double> shifts() const {
    return perSegment(&TransferSegment::shift);
  }
  /// Each segment's value transform (TransferSegment::Transform).
  py::array_t<int32_t> transforms() const {
    return perSegment(&TransferSegment::transform);
  }
  /// A row per dimension: size, source stride, destination stride.
  py::array_t<int64_t> dims() const {
    return table(plan->dims, 3, [](const TransferDim &d, int64_t *r) {
      r[0] = d.size, r[1] = d.srcStride, r[2] = d.dstStride;
    });
  }
  /// A row per bucket, in schedule order: source rank, destination rank,
  /// bytes, first segment, segments, round, sent from the tensor itself,
  /// received into the tensor itself.
  py::array_t<int64_t> buckets() const {
    return table(plan->buckets, 8, [](const TransferBucket &b, int64_t *r) {
      int64_t v[] = {b.srcRank,      b.dstRank,     int64_t(b.bytes),
                     b.firstSegment, b.numSegments, b.round,
                     b.directSrc,    b.directDst};
      std::copy(std::begin(v), std::end(v), r);
    });
  }
  std::vector<std::tuple<int64_t, int64_t, uint64_t>> links() const {
    return plan->links();
  }
  uint64_t bytesIn(int64_t rank) const { return plan->bytesIn(rank); }
  uint64_t bytesOut(int64_t rank) const { return plan->bytesOut(rank); }
  uint64_t peakStaging(bool source, int64_t rank) const {
    return plan->peakStaging(source, rank);
  }

private:
  template <typename T, typename Fn>
  static py::array_t<int64_t> table(const std::vector<T> &rows, size_t width,
                                    Fn &&fill) {
    py::array_t<int64_t> out(
        {py::ssize_t(rows.size()), py::ssize_t(width)});
    int64_t *data = out.mutable_data();
    for (size_t i = 0; i < rows.size(); ++i)
      fill(rows[i], data + i * width);
    return out;
  }

  std::unique_ptr<TransferPlan> plan;
};

/// A model of the compiled-in library instantiated for a config.json; with
/// a checkpoint, as the checkpoint holds it (storage variants and open
/// config entries settled from its tensor names, as mdl-convert does).
class PyModel {
public:
  PyModel(const std::string &configPath, std::string name,
          const std::vector<std::pair<std::string, std::string>> &overrides,
          const std::map<std::string, std::string> &choices,
          const std::string &checkpoint)
      : configPath(configPath), overrides(overrides), choices(choices) {
    std::string error;
    std::optional<HFConfig> plain = HFConfig::load(configPath, error);
    if (!plain)
      throw Error(error);
    if (name.empty()) {
      const ModelDecl *serving = servingModel(*plain, error);
      if (!serving)
        throw Error(error);
      name = serving->name;
    }
    name = cli::normalizeBackendName(name);
    for (const Generated *g : registry())
      if (g->model.name == name) {
        unit = g;
        if (g->backend.name != "hf")
          backendNames.push_back(g->backend.name);
      }
    if (!unit)
      throw Error("no model named '" + name + "' is compiled in");
    std::function<bool(const std::string &)> holds;
    if (!checkpoint.empty()) {
      hfCheckpoint = Checkpoint::open(checkpoint, error);
      if (!hfCheckpoint)
        throw Error(error);
      holds = [&](const std::string &t) { return hfCheckpoint->find(t); };
    }
    // Without a checkpoint the overrides are part of the config; with one,
    // they are asked of the model it holds.
    HFConfig config = *plain;
    std::vector<std::pair<std::string, std::string>> asked = overrides;
    if (!holds) {
      for (const auto &[k, v] : overrides)
        config.addOverride(k, v);
      asked.clear();
    }
    std::optional<OpenedModel> opened =
        openModel(unit->model, unit->hf, config, {}, asked, choices, holds,
                  configPath, error);
    if (!opened)
      throw Error(error);
    std::shared_ptr<Model> held = opened->held.model;
    instance = opened->instance;
    this->choices = opened->held.choices;
    // Tensors of stack elements the overrides leave out are in the
    // checkpoint but not read.
    if (held != instance) {
      heldHf = bindTo(held, "hf");
      dropped = droppedTensors(*heldHf, binding("hf"), ParallelConfig(), 0);
    }
  }

  /// The binding of `backend` with the modules it builds under LoRA (its
  /// `lora` choice on).
  const Binding &loraBinding(const std::string &backend,
                             const ParallelConfig &c) {
    std::string b = cli::normalizeBackendName(backend);
    std::unique_ptr<Binding> &slot = loraBindings[b];
    if (!slot) {
      std::map<std::string, std::string> withLora = choices;
      const BackendDecl &decl = backendDecl(b);
      selectLoraModules(decl.choices, withLora);
      std::string error;
      if (!(slot = Binding::bind(instance, decl, withLora, error)))
        throw Error(error);
    }
    throwInvalid(*slot, c);
    return *slot;
  }
  static LoraNaming loraNaming(const std::vector<std::string> &fields) {
    if (fields.size() != 4)
      throw Error("a LoRA naming is (A name, B name, prefix, dtype)");
    LoraNaming n;
    n.names.a = fields[0];
    n.names.b = fields[1];
    n.prefix = fields[2];
    std::optional<DType> dtype = parseDType(fields[3]);
    if (!dtype)
      throw Error("unknown dtype '" + fields[3] + "' for LoRA factors");
    n.dtype = *dtype;
    return n;
  }

  const std::string &name() const { return unit->model.name; }
  std::vector<std::string> backends() const {
    std::vector<std::string> out = {"hf"};
    out.insert(out.end(), backendNames.begin(), backendNames.end());
    return out;
  }

  const Binding &binding(const std::string &backend) {
    std::string b = cli::normalizeBackendName(backend);
    std::unique_ptr<Binding> &slot = bindings[b];
    if (!slot)
      slot = bindTo(instance, b);
    return *slot;
  }

  std::vector<std::string> validate(const std::string &backend,
                                    const ParallelConfig &c) {
    return binding(backend).validate(c);
  }
  /// The configuration, or mdl.Error with every reason it is invalid.
  const Binding &valid(const std::string &backend, const ParallelConfig &c) {
    const Binding &b = binding(backend);
    throwInvalid(b, c);
    return b;
  }
  void throwInvalid(const Binding &b, const ParallelConfig &c) {
    std::vector<std::string> why = b.validate(c);
    if (why.empty())
      return;
    std::string all;
    for (const std::string &w : why)
      all += "\n  " + w;
    throw Error(c.str() + " is not a valid configuration of " + name() +
                " on " + b.layout().backend + ":" + all);
  }
  void checkRank(const ParallelConfig &c, int64_t rank) {
    if (rank < 0 || rank >= numRanks(c))
      throw Error("rank " + std::to_string(rank) + " does not exist: " +
                  c.str() + " has " + std::to_string(numRanks(c)) + " ranks");
  }

  std::string planJson(const std::string &backend, const ParallelConfig &c,
                       int64_t rank) {
    const Binding &b = valid(backend, c);
    if (rank != -1)
      checkRank(c, rank);
    return json::write(rt::planJson(b.layout(), c, rank, configPath), 2);
  }
  std::string loraJson(const std::string &backend, const ParallelConfig &c,
                       int64_t rank, int64_t r) {
    // The modules the backend builds with LoRA enabled.
    std::map<std::string, std::string> withLora = choices;
    const BackendDecl &decl = backendDecl(backend);
    selectLoraModules(decl.choices, withLora);
    std::string error;
    std::unique_ptr<Binding> b = Binding::bind(instance, decl, withLora, error);
    if (!b)
      throw Error(error);
    throwInvalid(*b, c);
    checkRank(c, rank);
    if (r < 1 || r > kMaxAxisSize)
      throw Error("the LoRA rank r takes an integer from 1 to " +
                  std::to_string(kMaxAxisSize) + ", not " + std::to_string(r));
    return json::write(rt::loraJson(b->layout(), c, rank, r), 2);
  }

  /// The tensors of a rank: (name, shape, dtype).
  std::vector<std::tuple<std::string, std::vector<int64_t>, std::string>>
  rankTensors(const std::string &backend, const ParallelConfig &c,
              int64_t rank) {
    const Binding &b = valid(backend, c);
    checkRank(c, rank);
    std::vector<std::tuple<std::string, std::vector<int64_t>, std::string>> out;
    for (const RankTensor &t : b.rankTensors(c, rank))
      out.emplace_back(t.name, t.shape, std::string(safetensorsName(t.dtype)));
    return out;
  }

  /// The source ranks target rank `rank` reads.
  std::vector<int64_t>
  sourcesOf(const std::string &from, const ParallelConfig &fromConfig,
            const std::string &to, const ParallelConfig &toConfig, int64_t rank,
            const std::optional<std::set<std::string>> &onlyParams) {
    Converter converter(valid(from, fromConfig), fromConfig,
                        valid(to, toConfig), toConfig);
    checkRank(toConfig, rank);
    return converter.sourcesOf(rank, onlyParams ? &*onlyParams : nullptr);
  }

  /// Fills the tensors `targets` of rank `rank` of `to` from `sources`
  /// (rank -> tensors) of `from`, or from the checkpoint the model was
  /// opened with.
  void convert(const std::string &from, const ParallelConfig &fromConfig,
               const std::map<int64_t, std::vector<TensorArg>> &sources,
               const std::string &to, const ParallelConfig &toConfig,
               int64_t rank, const std::vector<TensorArg> &targets,
               const std::optional<std::set<std::string>> &onlyParams,
               unsigned threads) {
    Converter converter(valid(from, fromConfig), fromConfig,
                        valid(to, toConfig), toConfig);
    checkRank(toConfig, rank);
    if (threads)
      converter.setThreads(threads);
    addSources(converter, from, fromConfig, sources, rank, onlyParams);
    std::vector<Converter::MemoryTarget> memory;
    const std::vector<RankTensor> expected =
        binding(to).rankTensors(toConfig, rank);
    for (const auto &[name, dtype, shape, address] : targets) {
      auto it =
          std::find_if(expected.begin(), expected.end(),
                       [&](const RankTensor &t) { return t.name == name; });
      if (it != expected.end() &&
          (it->shape != shape || it->dtype != dtypeOf(name, dtype)))
        throw Error("tensor '" + name + "' is " + shapeText(shape) + " " +
                    dtype + ", but rank " + std::to_string(rank) + " of " +
                    name_() + " on " + to + " holds it as " +
                    shapeText(it->shape) + " " +
                    std::string(safetensorsName(it->dtype)));
      memory.push_back({name, reinterpret_cast<uint8_t *>(address),
                        numBytes(shape, dtypeOf(name, dtype))});
    }
    std::string error;
    bool ok;
    {
      py::gil_scoped_release unlocked;
      ok = converter.fillTensors(rank, memory, error,
                                 onlyParams ? &*onlyParams : nullptr);
    }
    if (!ok)
      throw Error(error);
  }

  /// The copies that make rank `rank` of `to` from `from`: (target tensor,
  /// source rank, source tensor, parameter, atoms, lo, count).
  std::vector<py::tuple>
  plannedCopies(const std::string &from, const ParallelConfig &fromConfig,
                const std::string &to, const ParallelConfig &toConfig,
                int64_t rank,
                const std::optional<std::set<std::string>> &onlyParams) {
    Converter converter(valid(from, fromConfig), fromConfig,
                        valid(to, toConfig), toConfig);
    checkRank(toConfig, rank);
    // Descriptions of the source ranks, without data.
    std::map<int64_t, std::vector<TensorArg>> described;
    for (int64_t s :
         converter.sourcesOf(rank, onlyParams ? &*onlyParams : nullptr))
      for (const RankTensor &t : binding(from).rankTensors(fromConfig, s))
        described[s].emplace_back(t.name, std::string(safetensorsName(t.dtype)),
                                  t.shape, 0);
    addSources(converter, from, fromConfig, described, rank, onlyParams);
    std::vector<py::tuple> out;
    for (const Converter::PlannedCopy &c :
         converter.plannedCopies(rank, onlyParams ? &*onlyParams : nullptr))
      out.push_back(py::make_tuple(c.target, c.sourceRank, c.source, c.param,
                                   c.atoms, c.lo, c.count));
    return out;
  }

  /// The transfer plan from `from` to `to` (TransferPlan).
  /// With `loraRank` > 0, a plan of LoRA adapters only; each side's
  /// naming is (A name, B name, prefix, dtype).
  PyTransferPlan
  transferPlan(const std::string &from, const ParallelConfig &fromConfig,
               const std::string &to, const ParallelConfig &toConfig,
               uint64_t bucketBytes, int64_t replicas,
               const std::optional<std::set<std::string>> &onlyParams,
               int64_t loraRank, const std::vector<std::string> &srcLora,
               const std::vector<std::string> &dstLora) {
    bool lora = loraRank != 0;
    const Binding &src = lora ? loraBinding(from, fromConfig)
                              : valid(from, fromConfig),
                  &dst = lora ? loraBinding(to, toConfig)
                              : valid(to, toConfig);
    TransferOptions options;
    options.bucketBytes = bucketBytes;
    options.dstReplicas = replicas;
    options.onlyParams = onlyParams ? &*onlyParams : nullptr;
    if (lora) {
      options.loraHf = &loraBinding("hf", ParallelConfig());
      options.loraRank = loraRank;
      options.srcLora = loraNaming(srcLora);
      options.dstLora = loraNaming(dstLora);
    }
    std::string error;
    std::unique_ptr<TransferPlan> plan;
    {
      py::gil_scoped_release unlocked;
      plan = TransferPlan::build(src, fromConfig, dst, toConfig, options,
                                 error);
    }
    if (!plan)
      throw Error(error);
    return PyTransferPlan(std::move(plan));
  }

  /// The plan that computes each rank's derived tensors of `backend` (those
  /// the spec says how to compute) from the rank's own tensors: a transfer
  /// plan whose every link is a rank to itself.
  PyTransferPlan
  refreshPlan(const std::string &backend, const ParallelConfig &config,
              const std::optional<std::set<std::string>> &onlyParams) {
    const Binding &b = valid(backend, config);
    std::unique_ptr<Binding> &view = derivedViews[b.layout().backend];
    std::string error;
    if (!view && !(view = b.derivedView(error)))
      throw Error(error);
    TransferOptions options;
    options.bucketBytes = uint64_t(1) << 62; // copies, never on a wire
    options.onlyParams = onlyParams ? &*onlyParams : nullptr;
    options.local = true;
    std::unique_ptr<TransferPlan> plan;
    {
      py::gil_scoped_release unlocked;
      plan = TransferPlan::build(b, config, *view, config, options, error);
    }
    if (!plan)
      throw Error(error);
    return PyTransferPlan(std::move(plan));
  }

  /// Writes the HF checkpoint of `sources` (rank -> tensors of `from`) to
  /// `outDir` as mdl-convert --to hf does: model.safetensors, or shards
  /// and their index above `maxShard` bytes, and config.json.
  void saveHf(const std::string &from, const ParallelConfig &fromConfig,
              const std::map<int64_t, std::vector<TensorArg>> &sources,
              const std::string &outDir, const std::string &maxShardSize,
              unsigned threads) {
    std::optional<uint64_t> maxShard = parseByteSize(maxShardSize);
    if (!maxShard || !*maxShard)
      throw Error("max_shard_size takes a size such as 5GB, 500MB, 20KB or "
                  "a number of bytes, not '" +
                  maxShardSize + "'");
    const Binding &hf = binding("hf");
    Converter converter(valid(from, fromConfig), fromConfig, hf,
                        ParallelConfig());
    if (threads)
      converter.setThreads(threads);
    addSources(converter, from, fromConfig, sources, 0, std::nullopt);
    std::string error;
    bool created;
    if (!makeDirectory(outDir, created, error))
      throw Error(error);
    OutputFormat format;
    format.kind = OutputFormat::HF;
    format.maxBytes = *maxShard;
    OutputFiles output =
        planOutputFiles(hf, ParallelConfig(), {0}, outDir, format);
    bool ok;
    {
      py::gil_scoped_release unlocked;
      ok = converter.writeFiles(output.files, error);
    }
    std::string configText;
    if (!ok ||
        (!output.indexPath.empty() &&
         !writeFileAtomically(output.indexPath, output.indexText, error)) ||
        !readFile(configPath, configText, error) ||
        !writeFileAtomically(
            outDir + "/config.json",
            outputConfigText(configText, overrides, std::nullopt, hf.layout()),
            error))
      throw Error(error);
  }

  /// The derived tensors of a backend: (name, the parameters they are
  /// computed from, the events that refresh them).
  std::vector<std::tuple<std::string, std::vector<std::string>,
                         std::vector<std::string>, bool>>
  derived(const std::string &backend) {
    const Binding &b = binding(backend);
    std::vector<std::tuple<std::string, std::vector<std::string>,
                           std::vector<std::string>, bool>>
        out;
    for (const ModelLayout::DerivedTensor &d : b.derived()) {
      std::vector<std::string> params;
      for (int p : d.params)
        params.push_back(b.layout().params[size_t(p)].path);
      out.emplace_back(d.name, params, d.recompute, d.computed);
    }
    return out;
  }

  /// The paths of the parameters of the model.
  std::vector<std::string> params() {
    std::vector<std::string> out;
    for (const Param &p : binding("hf").layout().params)
      out.push_back(p.path);
    return out;
  }

  const std::string &configFile() const { return configPath; }

private:
  const std::string &name_() const { return unit->model.name; }

  const BackendDecl &backendDecl(const std::string &backend) {
    std::string b = cli::normalizeBackendName(backend);
    if (b == "hf")
      return unit->hf;
    if (const Generated *g = findGenerated(unit->model.name, b))
      return g->backend;
    throw Error("model '" + name_() + "' has no backend '" + backend + "'" +
                cli::didYouMean(b, backends()));
  }

  std::unique_ptr<Binding> bindTo(std::shared_ptr<Model> model,
                                  const std::string &backend) {
    std::string error;
    std::unique_ptr<Binding> b =
        Binding::bind(std::move(model), backendDecl(backend), choices, error);
    if (!b)
      throw Error(error);
    return b;
  }

  /// Adds the sources target rank `rank` reads: the tensors given for
  /// each source rank, or the model's HF checkpoint.
  void addSources(Converter &converter, const std::string &from,
                  const ParallelConfig &fromConfig,
                  const std::map<int64_t, std::vector<TensorArg>> &sources,
                  int64_t rank,
                  const std::optional<std::set<std::string>> &onlyParams) {
    std::string error;
    for (int64_t s :
         converter.sourcesOf(rank, onlyParams ? &*onlyParams : nullptr)) {
      std::shared_ptr<Checkpoint> ckpt;
      std::set<std::string> skip;
      auto given = sources.find(s);
      if (given != sources.end()) {
        std::vector<Checkpoint::MemoryTensor> tensors;
        for (const auto &[name, dtype, shape, address] : given->second)
          tensors.push_back({name, dtypeOf(name, dtype), shape,
                             reinterpret_cast<const void *>(address)});
        ckpt = Checkpoint::inMemory("the tensors of rank " + std::to_string(s),
                                    tensors, error);
      } else if (cli::normalizeBackendName(from) == "hf" && hfCheckpoint) {
        ckpt = hfCheckpoint;
        skip = dropped;
      } else if (distCheckpoint &&
                 cli::normalizeBackendName(from) == distBackend) {
        ckpt = distCheckpoint;
      } else {
        throw Error("the tensors of source rank " + std::to_string(s) + " of " +
                    name_() + " on " + from + " at " + fromConfig.str() +
                    " are needed but not given");
      }
      if (!ckpt || !converter.addSource(s, ckpt, error, skip))
        throw Error(error);
    }
  }

public:
  /// Reads the tensors of `backend` (a distributed checkpoint's layout,
  /// mcore_te_dist) from the distributed checkpoint `dir` names: its
  /// directory, or the top of a checkpoint whose tracker names it.
  void openDist(const std::string &dir, const std::string &backend) {
    std::string found = findDistCheckpoint(dir), error;
    if (found.empty())
      throw Error("'" + dir + "' is not a distributed checkpoint: it has no "
                  ".metadata or metadata.json, nor a tracker naming a "
                  "directory that has one");
    std::shared_ptr<Checkpoint> c = Checkpoint::open(found, error);
    if (!c)
      throw Error(error);
    distCheckpoint = std::move(c);
    distBackend = cli::normalizeBackendName(backend);
  }

private:
  std::shared_ptr<Checkpoint> distCheckpoint;
  std::string distBackend;
  const Generated *unit = nullptr;
  std::vector<std::string> backendNames;
  std::string configPath;
  std::vector<std::pair<std::string, std::string>> overrides;
  std::map<std::string, std::string> choices;
  std::shared_ptr<Checkpoint> hfCheckpoint;
  std::shared_ptr<Model> instance;
  std::unique_ptr<Binding> heldHf;
  std::set<std::string> dropped;
  std::map<std::string, std::unique_ptr<Binding>> bindings;
  /// By backend: its derived tensors bound as a layout (refreshPlan).
  std::map<std::string, std::unique_ptr<Binding>> derivedViews;
  /// By backend: bound with its LoRA modules (loraBinding).
  std::map<std::string, std::unique_ptr<Binding>> loraBindings;
};

/// Every compiled-in model: name, spec file, backends, model types and
/// architectures it serves.
py::list models() {
  std::map<std::string, py::dict> byName;
  py::list out;
  for (const Generated *g : registry()) {
    py::dict &d = byName[g->model.name];
    if (!d.contains("name")) {
      d["name"] = g->model.name;
      d["spec"] = g->model.spec;
      d["backends"] = py::list();
      d["model_types"] = g->model.modelTypes;
      d["architectures"] = g->model.architectures;
    }
    d["backends"].cast<py::list>().append(g->backend.name);
  }
  for (auto &[name, d] : byName)
    out.append(d);
  return out;
}

} // namespace

/// A parallel configuration is a dict of axes in Python (`{"tp": 2}`);
/// parallelOf() says what is wrong with one.
template <> struct pybind11::detail::type_caster<ParallelConfig> {
  PYBIND11_TYPE_CASTER(ParallelConfig, const_name("dict"));
  bool load(handle src, bool) {
    if (!py::isinstance<py::dict>(src))
      return false;
    value = parallelOf(src.cast<std::map<std::string, py::object>>());
    return true;
  }
};

PYBIND11_MODULE(_mdl, m) {
  m.doc() = "MDL's runtime: plans, LoRA tables and conversions in memory";
  m.attr("__version__") = cli::kVersion;
  py::register_exception<Error>(m, "Error", PyExc_ValueError);
  m.def("models", &models);
  m.def("parallel_text", [](const ParallelConfig &c) { return c.str(); });
  m.def("num_ranks", [](const ParallelConfig &c) { return numRanks(c); });
  m.def("find_dist_checkpoint", &findDistCheckpoint);
  py::class_<PyModel>(m, "Model")
      .def(py::init<const std::string &, std::string,
                    const std::vector<std::pair<std::string, std::string>> &,
                    const std::map<std::string, std::string> &,
                    const std::string &>(),
           py::arg("config"), py::arg("name"), py::arg("overrides"),
           py::arg("choices"), py::arg("checkpoint"))
      .def_property_readonly("name", &PyModel::name)
      .def_property_readonly("config", &PyModel::configFile)
      .def_property_readonly("backends", &PyModel::backends)
      .def_property_readonly("params", &PyModel::params)
      .def("validate", &PyModel::validate)
      .def("plan_json", &PyModel::planJson)
      .def("lora_json", &PyModel::loraJson)
      .def("rank_tensors", &PyModel::rankTensors)
      .def("sources_of", &PyModel::sourcesOf)
      .def("convert", &PyModel::convert)
      .def("open_dist", &PyModel::openDist)
      .def("planned_copies", &PyModel::plannedCopies)
      .def("save_hf", &PyModel::saveHf)
      .def("derived", &PyModel::derived)
      .def("transfer_plan", &PyModel::transferPlan)
      .def("refresh_plan", &PyModel::refreshPlan);
  py::class_<PyTransferPlan>(m, "TransferPlan")
      .def_property_readonly("digest", &PyTransferPlan::digest)
      .def_property_readonly("num_src_ranks", &PyTransferPlan::numSrcRanks)
      .def_property_readonly("num_dst_ranks", &PyTransferPlan::numDstRanks)
      .def_property_readonly("bucket_bytes", &PyTransferPlan::bucketBytes)
      .def_property_readonly("params", &PyTransferPlan::params)
      .def("tensors", &PyTransferPlan::tensors)
      .def("layout_rank", &PyTransferPlan::layoutRank)
      .def("segments", &PyTransferPlan::segments)
      .def("shifts", &PyTransferPlan::shifts)
      .def("transforms", &PyTransferPlan::transforms)
      .def("dims", &PyTransferPlan::dims)
      .def("buckets", &PyTransferPlan::buckets)
      .def("links", &PyTransferPlan::links)
      .def("bytes_in", &PyTransferPlan::bytesIn)
      .def("bytes_out", &PyTransferPlan::bytesOut)
      .def("peak_staging", &PyTransferPlan::peakStaging);
}
