//===- Transfer.cpp - Moving weights between running processes ------------===//

#include "mdl/Runtime/Convert/Transfer.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <unordered_map>

using namespace mdl;
using namespace mdl::rt;

namespace {

bool isF8(DType t) { return t == DType::F8E4M3 || t == DType::F8E5M2; }

std::string boxText(const Param &p, const std::vector<int64_t> &lo,
                    const std::vector<int64_t> &count) {
  std::string s = "{";
  for (size_t a = 0; a < lo.size(); ++a)
    s += (a ? ", " : "") + p.atoms[a] + " " + std::to_string(lo[a]) + ":" +
         std::to_string(lo[a] + count[a]);
  return s + "}";
}

/// A segment while the plan is built, with its own dimensions.
struct Seg {
  TransferSegment s;
  std::vector<TransferDim> dims;
  size_t elementSize = 1;
  uint64_t bytes() const { return uint64_t(s.elements) * elementSize; }
  /// Whether its elements are one contiguous run of its source (or
  /// destination) tensor.
  bool run(bool source) const {
    return dims.empty() ||
           (dims.size() == 1 &&
            (source ? dims.front().srcStride : dims.front().dstStride) == 1);
  }
};

/// A run of a tensor at least this long goes in a bucket of its own, sent
/// from or received into the tensor itself, rather than being copied into
/// a shared bucket (so a destination tensor may span several buckets).
constexpr uint64_t kOwnBucketBytes = 1 << 20;

/// 64-bit FNV-1a.
struct Digest {
  uint64_t h = 0xcbf29ce484222325ull;
  void bytes(const void *p, size_t n) {
    const auto *b = static_cast<const uint8_t *>(p);
    for (size_t i = 0; i < n; ++i) {
      h ^= b[i];
      h *= 0x100000001b3ull;
    }
  }
  template <typename T> void value(const T &v) { bytes(&v, sizeof v); }
  void text(const std::string &s) {
    value(uint64_t(s.size()));
    bytes(s.data(), s.size());
  }
};

} // namespace

namespace mdl::rt {

/// Builds a TransferPlan: the boxes each source rank holds, the boxes each
/// destination rank needs, their intersections as segments, and the
/// buckets of each link.
class TransferBuilder {
public:
  TransferBuilder(const Binding &from, const ParallelConfig &fromConfig,
                  const Binding &to, const ParallelConfig &toConfig,
                  const TransferOptions &options, TransferPlan &plan)
      : from(from), to(to), fromConfig(fromConfig), toConfig(toConfig),
        options(options), plan(plan) {}

  bool run(std::string &error);

private:
  struct Holder {
    int32_t rank, tensor, piece;
  };
  /// A box of a source parameter, with every source rank that holds it.
  struct SourceBox {
    std::vector<int64_t> lo, count;
    std::vector<Holder> holders;
  };
  /// The boxes of one source parameter, sorted by where they start along
  /// the atom that tells most of them apart.
  struct SourceParam {
    std::vector<SourceBox> boxes;
    size_t atom = 0;
    int64_t widest = 1;
    std::vector<int32_t> order; // by boxes[i].lo[atom]
  };

  /// The parameters segments move: the layouts', or their LoRA factors.
  const ModelLayout &srcParams() const {
    return srcView ? srcView->layout() : from.layout();
  }
  const ModelLayout &dstParams() const {
    return dstView ? dstView->layout() : to.layout();
  }
  bool selectParams(std::string &error);
  /// The tensors of a side's layout rank the plan may read or write (the
  /// LoRA factors of its weights, with LoRA views).
  bool tensorsOf(bool source, const Planner &planner, int64_t layoutRank,
                 std::vector<RankTensor> &out, std::string &error) const;
  bool readSources(std::string &error);
  bool indexSources(std::string &error);
  template <typename Fn>
  void overlapping(const SourceParam &sp, const std::vector<int64_t> &lo,
                   const std::vector<int64_t> &count, Fn &&fn) const;
  bool readDestinations(std::string &error);
  bool planRank(int64_t rank, std::string &error);
  bool segment(int64_t dstRank, int32_t dstTensor, const RankTensor &dt,
               const Piece &dp, const Holder &h,
               const std::vector<int64_t> &lo,
               const std::vector<int64_t> &count, std::string &error);
  int32_t sourceIndex(const Holder &h);
  int32_t paramIndex(int param);
  void pack();
  void schedule();
  void digest();

  const Binding &from, &to;
  ParallelConfig fromConfig, toConfig;
  const TransferOptions &options;
  TransferPlan &plan;
  /// With options.loraHf: the LoRA factors of each side.
  std::unique_ptr<LoraView> srcView, dstView;

  std::vector<bool> srcSelected, dstSelected, srcSkip, dstSkip;
  std::vector<std::vector<RankTensor>> srcRanks, dstRanks;
  /// Per source rank and tensor: its index in plan.srcTensors, or -1.
  std::vector<std::vector<int32_t>> srcIndex;
  /// Per destination rank: the tensors it writes (indices into dstRanks)
  /// with their selected pieces.
  struct Written {
    int32_t tensor;
    std::vector<Piece> pieces;
  };
  std::vector<std::vector<Written>> written;
  std::vector<SourceParam> sources;      // by source parameter
  std::vector<int> srcParamOf;           // by destination parameter
  std::vector<int32_t> paramIndexOf;     // by destination parameter
  std::vector<uint64_t> load;            // bytes by source rank
  std::map<std::pair<int32_t, int32_t>, std::vector<Seg>> links;
};

} // namespace mdl::rt

bool TransferBuilder::selectParams(std::string &error) {
  // The parameters of the two layouts (not of their LoRA views).
  const ModelLayout &sm = from.layout(), &dm = to.layout();
  srcSelected.assign(sm.params.size(), true);
  dstSelected.assign(dm.params.size(), true);
  if (options.onlyParams) {
    std::set<std::string> unknown = *options.onlyParams;
    for (size_t i = 0; i < dm.params.size(); ++i) {
      dstSelected[i] = options.onlyParams->count(dm.params[i].path) > 0;
      unknown.erase(dm.params[i].path);
    }
    if (!unknown.empty()) {
      error = dm.model + " has no parameter '" + *unknown.begin() + "'";
      return false;
    }
    for (size_t i = 0; i < sm.params.size(); ++i)
      srcSelected[i] = options.onlyParams->count(sm.params[i].path) > 0;
  }
  if (srcView)
    for (auto [view, selected] : {std::pair{srcView.get(), &srcSelected},
                                  std::pair{dstView.get(), &dstSelected}})
      for (size_t i = 0; i < selected->size(); ++i)
        (*selected)[i] = (*selected)[i] && view->adapted(int(i));
  // Tensor specs that hold no selected parameter are not planned at all,
  // so a plan of some parameters costs in proportion to them.
  auto skips = [](const ModelLayout &m, const std::vector<bool> &selected) {
    std::vector<bool> skip(m.tensors.size(), false);
    for (size_t i = 0; i < m.tensors.size(); ++i) {
      std::vector<int> params = tensorParams(m.tensors[i]);
      skip[i] = std::none_of(params.begin(), params.end(),
                             [&](int p) { return selected[size_t(p)]; });
    }
    return skip;
  };
  srcSkip = skips(sm, srcSelected);
  dstSkip = skips(dm, dstSelected);
  if (srcView) {
    srcSelected = srcView->select(srcSelected);
    dstSelected = dstView->select(dstSelected);
  }
  std::unordered_map<std::string, int> byPath;
  for (size_t i = 0; i < srcParams().params.size(); ++i)
    byPath.emplace(srcParams().params[i].path, int(i));
  const std::vector<Param> &dstList = dstParams().params;
  srcParamOf.assign(dstList.size(), -1);
  for (size_t i = 0; i < dstList.size(); ++i)
    if (auto it = byPath.find(dstList[i].path); it != byPath.end())
      srcParamOf[i] = it->second;
  paramIndexOf.assign(dstList.size(), -1);
  return true;
}

bool TransferBuilder::tensorsOf(bool source, const Planner &planner,
                                int64_t layoutRank,
                                std::vector<RankTensor> &out,
                                std::string &error) const {
  std::vector<RankTensor> tensors =
      rankTensors(planner, layoutRank, source ? &srcSkip : &dstSkip);
  const LoraView *view = source ? srcView.get() : dstView.get();
  if (!view) {
    out = std::move(tensors);
    return true;
  }
  return view->tensors(tensors, source ? options.srcLora : options.dstLora,
                       out, error);
}

bool TransferBuilder::readSources(std::string &error) {
  Planner planner(from.layout(), fromConfig);
  int64_t n = plan.numSrcRanks();
  size_t numParams = srcParams().params.size();
  srcRanks.resize(size_t(n));
  srcIndex.resize(size_t(n));
  sources.resize(numParams);
  std::vector<std::map<std::vector<int64_t>, int32_t>> boxOf(numParams);
  for (int64_t r = 0; r < n; ++r) {
    if (!tensorsOf(true, planner, plan.srcLayoutRanks[size_t(r)],
                   srcRanks[size_t(r)], error))
      return false;
    const std::vector<RankTensor> &tensors = srcRanks[size_t(r)];
    srcIndex[size_t(r)].assign(tensors.size(), -1);
    for (size_t t = 0; t < tensors.size(); ++t) {
      // A duplicate (a tied head, an MTP copy) is not read: its parameter
      // is read where the layout holds it.
      if (tensors[t].copy)
        continue;
      for (size_t p = 0; p < tensors[t].pieces.size(); ++p) {
        const Piece &pc = tensors[t].pieces[p];
        if (!srcSelected[size_t(pc.param)])
          continue;
        std::vector<int64_t> key = pc.lo;
        key.insert(key.end(), pc.count.begin(), pc.count.end());
        SourceParam &sp = sources[size_t(pc.param)];
        auto [it, added] =
            boxOf[size_t(pc.param)].emplace(key, int32_t(sp.boxes.size()));
        if (added)
          sp.boxes.push_back({pc.lo, pc.count, {}});
        sp.boxes[size_t(it->second)].holders.push_back(
            {int32_t(r), int32_t(t), int32_t(p)});
      }
    }
  }
  return true;
}

template <typename Fn>
void TransferBuilder::overlapping(const SourceParam &sp,
                                  const std::vector<int64_t> &lo,
                                  const std::vector<int64_t> &count,
                                  Fn &&fn) const {
  size_t a = sp.atom;
  // Boxes starting in [lo - widest + 1, lo + count) may meet the query.
  auto begin = std::lower_bound(
      sp.order.begin(), sp.order.end(), lo[a] - sp.widest + 1,
      [&](int32_t b, int64_t v) { return sp.boxes[size_t(b)].lo[a] < v; });
  for (auto it = begin; it != sp.order.end(); ++it) {
    const SourceBox &box = sp.boxes[size_t(*it)];
    if (box.lo[a] >= lo[a] + count[a])
      break;
    bool meets = true;
    for (size_t k = 0; k < lo.size() && meets; ++k)
      meets = box.lo[k] < lo[k] + count[k] && lo[k] < box.lo[k] + box.count[k];
    if (meets)
      fn(*it, box);
  }
}

bool TransferBuilder::indexSources(std::string &error) {
  const ModelLayout &sm = srcParams();
  for (size_t p = 0; p < sources.size(); ++p) {
    SourceParam &sp = sources[p];
    if (sp.boxes.empty())
      continue;
    // The atom along which the boxes start at the most places.
    size_t atoms = sp.boxes.front().lo.size(), best = 0, bestCount = 0;
    for (size_t a = 0; a < atoms; ++a) {
      std::set<int64_t> starts;
      for (const SourceBox &b : sp.boxes)
        starts.insert(b.lo[a]);
      if (starts.size() > bestCount)
        best = a, bestCount = starts.size();
    }
    sp.atom = best;
    sp.order.resize(sp.boxes.size());
    for (size_t i = 0; i < sp.boxes.size(); ++i) {
      sp.order[i] = int32_t(i);
      sp.widest = std::max(sp.widest, atoms ? sp.boxes[i].count[best] : 1);
    }
    std::stable_sort(sp.order.begin(), sp.order.end(), [&](int32_t x, int32_t y) {
      return sp.boxes[size_t(x)].lo[best] < sp.boxes[size_t(y)].lo[best];
    });
    // Boxes that differ must not overlap: an element two of them hold
    // would be written twice.
    for (size_t i = 0; i < sp.boxes.size(); ++i) {
      const SourceBox &b = sp.boxes[i];
      bool clash = false;
      overlapping(sp, b.lo, b.count, [&](int32_t j, const SourceBox &o) {
        if (clash || size_t(j) == i)
          return;
        clash = true;
        const Param &param = sm.params[p];
        error = "source ranks " + std::to_string(b.holders.front().rank) +
                " and " + std::to_string(o.holders.front().rank) + " of " +
                sm.model + " on " + sm.backend + " hold overlapping boxes " +
                boxText(param, b.lo, b.count) + " and " +
                boxText(param, o.lo, o.count) + " of " + param.path +
                ": their common elements would be written twice";
      });
      if (clash)
        return false;
    }
  }
  return true;
}

bool TransferBuilder::readDestinations(std::string &error) {
  const ModelLayout &dm = dstParams(), &sm = srcParams();
  Planner planner(to.layout(), toConfig);
  int64_t n = plan.numDstBase;
  dstRanks.resize(size_t(n));
  written.resize(size_t(n));
  plan.dstTensors.resize(size_t(n));
  for (int64_t r = 0; r < n; ++r) {
    if (!tensorsOf(false, planner, plan.dstLayoutRanks[size_t(r)],
                   dstRanks[size_t(r)], error))
      return false;
    const std::vector<RankTensor> &tensors = dstRanks[size_t(r)];
    for (size_t t = 0; t < tensors.size(); ++t) {
      const RankTensor &rt = tensors[t];
      Written w{int32_t(t), {}};
      int64_t held = 0;
      for (const Piece &pc : rt.pieces) {
        // An empty box (a tensor parallel rank's vocabulary rows all past
        // the end) writes nothing.
        if (!dstSelected[size_t(pc.param)] || pc.numElements() == 0)
          continue;
        const Param &param = dm.params[size_t(pc.param)];
        int sp = srcParamOf[size_t(pc.param)];
        // MXFP4 weights: one side holds blocks and scales, the other the
        // weights dequantized, which is a conversion one way and a
        // quantization the other.
        if ((sp < 0 || sources[size_t(sp)].boxes.empty()) &&
            (param.mxfp4 || param.mxfp4Of >= 0)) {
          error = "tensor '" + rt.name + "' of " + dm.backend + " holds " +
                  (param.mxfp4
                       ? "MXFP4 weights dequantized, which a sync cannot make "
                         "from the MXFP4 blocks and scales of " +
                             sm.backend + " (convert the checkpoint instead)"
                       : "MXFP4 blocks and scales, which a sync cannot make "
                         "from the dequantized weights of " +
                             sm.backend + " (it does not quantize)");
          return false;
        }
        if (sp < 0 || sources[size_t(sp)].boxes.empty()) {
          error = "no rank of " + sm.model + " on " + sm.backend + " at " +
                  fromConfig.str() + " holds " + param.path +
                  ", which tensor '" + rt.name + "' of rank " +
                  std::to_string(r) + " of " + dm.backend + " at " +
                  toConfig.str() + " holds";
          return false;
        }
        // A tensor that holds FP8 block-quantized weights dequantized is
        // filled by a conversion, not a byte move, unless the source holds
        // them dequantized too.
        const SourceBox &box = sources[size_t(sp)].boxes.front();
        const Holder &h = box.holders.front();
        if (rt.dequantized && param.scale >= 0 &&
            isF8(srcRanks[size_t(h.rank)][size_t(h.tensor)].dtype)) {
          error = "tensor '" + rt.name + "' of " + dm.backend +
                  " holds FP8 block-quantized weights dequantized, which "
                  "a sync cannot make from the FP8 blocks and scales of " +
                  sm.backend + " (convert the checkpoint instead)";
          return false;
        }
        held += pc.numElements();
        w.pieces.push_back(pc);
      }
      if (w.pieces.empty())
        continue;
      if (held > numElements(rt.shape)) {
        error = "tensor '" + rt.name + "' of rank " + std::to_string(r) +
                " of " + dm.backend + " has " +
                std::to_string(numElements(rt.shape)) +
                " elements, but its parameters' boxes hold " +
                std::to_string(held) + ": some would be written twice";
        return false;
      }
      plan.dstTensors[size_t(r)].push_back({rt.name, rt.shape, rt.dtype});
      written[size_t(r)].push_back(std::move(w));
    }
  }
  return true;
}

int32_t TransferBuilder::sourceIndex(const Holder &h) {
  int32_t &index = srcIndex[size_t(h.rank)][size_t(h.tensor)];
  if (index < 0) {
    const RankTensor &t = srcRanks[size_t(h.rank)][size_t(h.tensor)];
    auto &list = plan.srcTensors[size_t(h.rank)];
    index = int32_t(list.size());
    list.push_back({t.name, t.shape, t.dtype});
  }
  return index;
}

int32_t TransferBuilder::paramIndex(int param) {
  int32_t &index = paramIndexOf[size_t(param)];
  if (index < 0) {
    index = int32_t(plan.params.size());
    plan.params.push_back(dstParams().params[size_t(param)].path);
  }
  return index;
}

bool TransferBuilder::segment(int64_t dstRank, int32_t dstTensor,
                              const RankTensor &dt, const Piece &dp,
                              const Holder &h, const std::vector<int64_t> &lo,
                              const std::vector<int64_t> &count,
                              std::string &error) {
  const RankTensor &st = srcRanks[size_t(h.rank)][size_t(h.tensor)];
  const Piece &sp = st.pieces[size_t(h.piece)];
  double shift = double(dt.offset - st.offset);
  int32_t transform = st.negExp == dt.negExp ? TransferSegment::Plain
                      : dt.negExp            ? TransferSegment::NegExp
                                             : TransferSegment::LogNeg;
  if (st.dtype != dt.dtype || shift != 0 ||
      transform != TransferSegment::Plain) {
    bool floats = isFloat(st.dtype) && isFloat(dt.dtype);
    if (isF8(st.dtype) || isF8(dt.dtype) || !floats) {
      error = "tensor '" + dt.name + "' is " +
              std::string(safetensorsName(dt.dtype)) + " but its source '" +
              st.name + "' is " + std::string(safetensorsName(st.dtype)) +
              (shift != 0 ? " with another value offset" : "") +
              (transform != TransferSegment::Plain
                   ? " (one stores -exp of the values)"
                   : "") +
              ": a sync converts between 16-, 32- and 64-bit floats only";
      return false;
    }
  }
  Seg seg;
  seg.elementSize = byteSize(dt.dtype);
  TransferSegment &s = seg.s;
  s.srcRank = h.rank;
  s.srcTensor = sourceIndex(h);
  s.dstRank = int32_t(dstRank);
  s.dstTensor = dstTensor;
  s.param = paramIndex(dp.param);
  s.shift = shift;
  s.transform = transform;
  s.srcOffset = sp.base;
  s.dstOffset = dp.base;
  s.elements = 1;
  for (size_t a = 0; a < lo.size(); ++a) {
    s.srcOffset += (lo[a] - sp.lo[a]) * sp.stride[a];
    s.dstOffset += (lo[a] - dp.lo[a]) * dp.stride[a];
    s.elements *= count[a];
    if (count[a] > 1)
      seg.dims.push_back({count[a], sp.stride[a], dp.stride[a]});
  }
  // The destination's order, outermost first, then runs merged where both
  // sides are contiguous across them.
  std::stable_sort(seg.dims.begin(), seg.dims.end(),
                   [](const TransferDim &x, const TransferDim &y) {
                     return x.dstStride > y.dstStride;
                   });
  std::vector<TransferDim> merged;
  for (const TransferDim &d : seg.dims) {
    if (!merged.empty()) {
      TransferDim &m = merged.back();
      if (m.srcStride == d.srcStride * d.size &&
          m.dstStride == d.dstStride * d.size) {
        m.size *= d.size;
        m.srcStride = d.srcStride;
        m.dstStride = d.dstStride;
        continue;
      }
    }
    merged.push_back(d);
  }
  seg.dims = std::move(merged);
  load[size_t(h.rank)] += seg.bytes();
  links[{h.rank, int32_t(dstRank)}].push_back(std::move(seg));
  return true;
}

bool TransferBuilder::planRank(int64_t rank, std::string &error) {
  const ModelLayout &dm = dstParams();
  int64_t base = plan.baseRank(rank);
  const std::vector<RankTensor> &tensors = dstRanks[size_t(base)];
  std::vector<bool> linked(plan.srcTensors.size(), false);
  for (size_t w = 0; w < written[size_t(base)].size(); ++w) {
    const Written &wt = written[size_t(base)][w];
    const RankTensor &dt = tensors[size_t(wt.tensor)];
    for (const Piece &dp : wt.pieces) {
      const SourceParam &sp = sources[size_t(srcParamOf[size_t(dp.param)])];
      int64_t covered = 0;
      bool ok = true;
      overlapping(sp, dp.lo, dp.count, [&](int32_t, const SourceBox &box) {
        if (!ok)
          return;
        std::vector<int64_t> lo(dp.lo.size()), count(dp.lo.size());
        int64_t n = 1;
        for (size_t a = 0; a < lo.size(); ++a) {
          lo[a] = std::max(dp.lo[a], box.lo[a]);
          count[a] = std::min(dp.lo[a] + dp.count[a],
                              box.lo[a] + box.count[a]) - lo[a];
          n *= count[a];
        }
        // Of the ranks that hold the box, the one with the fewest bytes to
        // send so far, counting a link not yet used as a megabyte more.
        const Holder *best = nullptr;
        uint64_t bestCost = 0;
        for (const Holder &h : box.holders) {
          if (options.local && plan.srcLayoutRanks[size_t(h.rank)] !=
                                   plan.layoutRank(false, rank))
            continue;
          uint64_t cost =
              load[size_t(h.rank)] + (linked[size_t(h.rank)] ? 0 : 1u << 20);
          if (!best || cost < bestCost)
            best = &h, bestCost = cost;
        }
        if (!best)
          return;
        linked[size_t(best->rank)] = true;
        covered += n;
        ok = segment(rank, int32_t(w), dt, dp, *best, lo, count, error);
      });
      if (!ok)
        return false;
      if (covered != dp.numElements()) {
        const Param &param = dm.params[size_t(dp.param)];
        std::string box = param.path + " " + boxText(param, dp.lo, dp.count);
        std::string elements = " (" + std::to_string(covered) + " of " +
                               std::to_string(dp.numElements()) + " elements)";
        error = options.local
                    ? "rank " + std::to_string(plan.layoutRank(false, rank)) +
                          " of " + dm.backend + " at " + toConfig.str() +
                          " does not hold all of " + box +
                          ", from which it computes '" + dt.name + "'" +
                          elements
                    : "no rank of " + from.layout().backend + " at " +
                          fromConfig.str() + " holds all of " + box +
                          " for tensor '" + dt.name + "' of rank " +
                          std::to_string(rank) + " of " + dm.backend +
                          elements;
        return false;
      }
    }
  }
  return true;
}

/// Splits `s` into segments of at most `cap` bytes, along its outermost
/// dimensions.
static void splitSegment(const Seg &s, uint64_t cap, std::vector<Seg> &out) {
  if (s.bytes() <= cap || s.dims.empty()) {
    out.push_back(s);
    return;
  }
  const TransferDim outer = s.dims.front();
  int64_t inner = s.s.elements / outer.size;
  uint64_t innerBytes = uint64_t(inner) * s.elementSize;
  Seg part = s;
  if (innerBytes <= cap) {
    int64_t step = int64_t(cap / innerBytes);
    for (int64_t i = 0; i < outer.size; i += step) {
      part.dims.front().size = std::min(step, outer.size - i);
      part.s.srcOffset = s.s.srcOffset + i * outer.srcStride;
      part.s.dstOffset = s.s.dstOffset + i * outer.dstStride;
      part.s.elements = part.dims.front().size * inner;
      out.push_back(part);
    }
    return;
  }
  part.dims.erase(part.dims.begin());
  part.s.elements = inner;
  for (int64_t i = 0; i < outer.size; ++i) {
    part.s.srcOffset = s.s.srcOffset + i * outer.srcStride;
    part.s.dstOffset = s.s.dstOffset + i * outer.dstStride;
    splitSegment(part, cap, out);
  }
}

void TransferBuilder::pack() {
  uint64_t cap = options.bucketBytes;
  // Each link's segments, a destination tensor at a time, into buckets:
  // a tensor that fits in a bucket is not split across two, but for its
  // long runs, which go alone.
  std::vector<std::vector<Seg>> buckets;
  std::vector<std::pair<int32_t, int32_t>> owners;
  for (auto &[link, segs] : links) {
    std::vector<Seg> current;
    uint64_t used = 0;
    auto close = [&] {
      if (current.empty())
        return;
      buckets.push_back(std::move(current));
      owners.push_back(link);
      current.clear();
      used = 0;
    };
    for (size_t i = 0; i < segs.size();) {
      size_t j = i;
      uint64_t group = 0;
      for (; j < segs.size() && segs[j].s.dstTensor == segs[i].s.dstTensor; ++j)
        group += segs[j].bytes();
      if (used + group > cap && group <= cap)
        close();
      for (; i < j; ++i) {
        std::vector<Seg> parts;
        splitSegment(segs[i], cap, parts);
        for (Seg &p : parts) {
          // A long run on either side: no copy on that side.
          bool own = p.bytes() >= kOwnBucketBytes &&
                     ((p.run(true) && p.s.shift == 0) || p.run(false));
          if (own || used + p.bytes() > cap)
            close();
          used += p.bytes();
          current.push_back(std::move(p));
          if (own)
            close();
        }
      }
    }
    close();
  }
  links.clear();

  // The schedule: each link's buckets in turn, each in the first round in
  // which neither its source nor its destination is busy.
  std::vector<int32_t> round(buckets.size());
  {
    std::map<std::pair<int32_t, int32_t>, std::vector<size_t>> byLink;
    for (size_t b = 0; b < buckets.size(); ++b)
      byLink[owners[b]].push_back(b);
    std::vector<int32_t> srcFree(plan.srcTensors.size(), 0),
        dstFree(size_t(plan.numDstRanks()), 0);
    for (size_t k = 0;; ++k) {
      bool any = false;
      for (auto &[link, list] : byLink) {
        if (k >= list.size())
          continue;
        any = true;
        int32_t &sf = srcFree[size_t(link.first)],
                &df = dstFree[size_t(link.second)];
        int32_t r = std::max(sf, df);
        round[list[k]] = r;
        sf = df = r + 1;
      }
      if (!any)
        break;
    }
  }
  std::vector<size_t> order(buckets.size());
  for (size_t b = 0; b < order.size(); ++b)
    order[b] = b;
  std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) {
    return std::tie(round[x], owners[x]) < std::tie(round[y], owners[y]);
  });
  for (size_t b : order) {
    std::vector<Seg> &segs = buckets[b];
    // Wider elements first: each starts at a multiple of its size.
    std::stable_sort(segs.begin(), segs.end(), [](const Seg &x, const Seg &y) {
      return x.elementSize > y.elementSize;
    });
    TransferBucket bucket;
    bucket.srcRank = owners[b].first;
    bucket.dstRank = owners[b].second;
    bucket.round = round[b];
    bucket.firstSegment = int32_t(plan.segments.size());
    bucket.numSegments = int32_t(segs.size());
    int32_t index = int32_t(plan.buckets.size());
    for (Seg &s : segs) {
      s.s.bucket = index;
      s.s.bucketOffset = bucket.bytes;
      s.s.firstDim = int32_t(plan.dims.size());
      s.s.numDims = int32_t(s.dims.size());
      plan.dims.insert(plan.dims.end(), s.dims.begin(), s.dims.end());
      bucket.bytes += s.bytes();
      plan.segments.push_back(s.s);
    }
    if (segs.size() == 1) {
      const Seg &s = segs.front();
      bucket.directSrc = s.run(true) && s.s.shift == 0 &&
                         s.s.transform == TransferSegment::Plain &&
                         plan.sourceType(s.s) == plan.wireType(s.s);
      bucket.directDst = s.run(false);
    }
    plan.buckets.push_back(bucket);
  }
}

void TransferBuilder::digest() {
  Digest d;
  d.value(plan.numDstBase);
  for (const auto *side : {&plan.srcLayoutRanks, &plan.dstLayoutRanks}) {
    d.value(uint64_t(side->size()));
    d.bytes(side->data(), side->size() * sizeof(int64_t));
  }
  d.value(plan.replicas);
  d.value(plan.cap);
  for (const auto *side : {&plan.srcTensors, &plan.dstTensors}) {
    d.value(uint64_t(side->size()));
    for (const std::vector<TransferTensor> &rank : *side) {
      d.value(uint64_t(rank.size()));
      for (const TransferTensor &t : rank) {
        d.text(t.name);
        d.value(t.dtype);
        d.value(uint64_t(t.shape.size()));
        d.bytes(t.shape.data(), t.shape.size() * sizeof(int64_t));
      }
    }
  }
  for (const std::string &p : plan.params)
    d.text(p);
  for (const TransferSegment &s : plan.segments) {
    d.value(s.srcRank), d.value(s.srcTensor), d.value(s.dstRank);
    d.value(s.dstTensor), d.value(s.param), d.value(s.bucket);
    d.value(s.firstDim), d.value(s.numDims), d.value(s.srcOffset);
    d.value(s.dstOffset), d.value(s.bucketOffset), d.value(s.elements);
    d.value(s.shift), d.value(s.transform);
  }
  for (const TransferDim &x : plan.dims)
    d.value(x.size), d.value(x.srcStride), d.value(x.dstStride);
  for (const TransferBucket &b : plan.buckets) {
    d.value(b.srcRank), d.value(b.dstRank), d.value(b.bytes);
    d.value(b.firstSegment), d.value(b.numSegments), d.value(b.round);
    d.value(b.directSrc), d.value(b.directDst);
  }
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", (unsigned long long)d.h);
  plan.digestText = text;
}

bool TransferBuilder::run(std::string &error) {
  for (bool source : {true, false}) {
    const Binding &b = source ? from : to;
    const ParallelConfig &c = source ? fromConfig : toConfig;
    std::vector<std::string> why = b.validate(c);
    if (!why.empty()) {
      error = c.str() + " is not a valid configuration of " +
              b.layout().model + " on " + b.layout().backend + ": " +
              why.front();
      return false;
    }
  }
  if (options.bucketBytes < 8) {
    error = "a bucket must hold at least 8 bytes, not " +
            std::to_string(options.bucketBytes);
    return false;
  }
  if (options.dstReplicas < 1 || options.dstReplicas > kMaxAxisSize) {
    error = "the destination's replicas take a number from 1 to " +
            std::to_string(kMaxAxisSize) + ", not " +
            std::to_string(options.dstReplicas);
    return false;
  }
  plan.cap = options.bucketBytes;
  plan.replicas = options.dstReplicas;
  for (int64_t r = 0, n = numRanks(fromConfig); r < n; ++r)
    if (from.rankSaved(fromConfig, r))
      plan.srcLayoutRanks.push_back(r);
  for (int64_t r = 0, n = numRanks(toConfig); r < n; ++r)
    if (to.rankSaved(toConfig, r))
      plan.dstLayoutRanks.push_back(r);
  plan.numDstBase = int64_t(plan.dstLayoutRanks.size());
  if (options.loraHf &&
      (!(srcView = LoraView::build(*options.loraHf, from.layout(),
                                   options.loraRank, error)) ||
       !(dstView = LoraView::build(*options.loraHf, to.layout(),
                                   options.loraRank, error))))
    return false;
  plan.srcTensors.resize(plan.srcLayoutRanks.size());
  load.assign(plan.srcTensors.size(), 0);
  if (!selectParams(error) || !readSources(error) || !indexSources(error) ||
      !readDestinations(error))
    return false;
  for (int64_t r = 0; r < plan.numDstRanks(); ++r)
    if (!planRank(r, error))
      return false;
  pack();
  digest();
  return true;
}

std::unique_ptr<TransferPlan>
TransferPlan::build(const Binding &from, const ParallelConfig &fromConfig,
                    const Binding &to, const ParallelConfig &toConfig,
                    const TransferOptions &options, std::string &error) {
  std::unique_ptr<TransferPlan> plan(new TransferPlan());
  TransferBuilder builder(from, fromConfig, to, toConfig, options, *plan);
  if (!builder.run(error))
    return nullptr;
  return plan;
}

std::vector<std::tuple<int64_t, int64_t, uint64_t>> TransferPlan::links() const {
  std::map<std::pair<int64_t, int64_t>, uint64_t> bytes;
  for (const TransferBucket &b : buckets)
    bytes[{b.srcRank, b.dstRank}] += b.bytes;
  std::vector<std::tuple<int64_t, int64_t, uint64_t>> out;
  for (const auto &[link, n] : bytes)
    out.emplace_back(link.first, link.second, n);
  return out;
}

uint64_t TransferPlan::bytesOf(bool source, int64_t rank) const {
  uint64_t n = 0;
  for (const TransferBucket &b : buckets)
    if ((source ? b.srcRank : b.dstRank) == rank)
      n += b.bytes;
  return n;
}

uint64_t TransferPlan::peakStaging(bool source, int64_t rank) const {
  uint64_t largest = 0, staged = 0;
  for (const TransferBucket &b : buckets) {
    if ((source ? b.srcRank : b.dstRank) != rank ||
        (source ? b.directSrc : b.directDst))
      continue;
    largest = std::max(largest, b.bytes);
    ++staged;
  }
  return largest * std::min<uint64_t>(staged, 2);
}
