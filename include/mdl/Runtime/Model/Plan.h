//===- Plan.h - What one rank holds, as strided views -----------*- C++ -*-===//
//
// Planning a ModelLayout for a parallel configuration: whether the
// configuration is valid (and every reason it is not), which ranks exist,
// and for a rank every local tensor with the slices of parameters it holds.
// A slice is a box in the parameter's atomic dimensions and the affine map
// that places it in the tensor: element (c_0, ..., c_k) of the parameter is
// at `base + sum_i (c_i - lo_i) * stride_i` of the tensor. Conversion is
// copying between such views; coverage is tiling boxes.
//
//===----------------------------------------------------------------------===//

#ifndef MDL_RUNTIME_MODEL_PLAN_H
#define MDL_RUNTIME_MODEL_PLAN_H

#include "mdl/Runtime/Model/Layout.h"

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace mdl::rt {

/// The part of one dimension a rank holds: [lo, lo + count) of the
/// parameter, stored in `padded` >= count entries of the tensor (the rest is
/// vocabulary padding).
struct Extent {
  int64_t lo = 0, count = 0, padded = 0;
};

/// A slice of a parameter inside a tensor.
struct Piece {
  int param = -1;
  /// Per atom of the parameter: the box [lo, lo + count).
  std::vector<int64_t> lo, count;
  /// Per atom: the tensor element stride; 0 for an atom that indexes a
  /// tensor family by name.
  std::vector<int64_t> stride;
  /// Tensor element offset of the box's first element.
  int64_t base = 0;

  int64_t numElements() const;
};

/// A tensor of one rank. A family (`experts.{E}.w`) is one LocalTensor whose
/// family atoms range over the rank's local indices; each index is a tensor
/// of its own, whose pieces are the family's with that atom fixed.
struct LocalTensor {
  int spec = -1;
  std::vector<int64_t> shape;     // as stored (after any view)
  std::vector<int64_t> axesShape; // as the axes say
  DType dtype = DType::BF16;
  std::vector<Piece> pieces;
  /// Family atoms and the rank's range of each (local index i is global
  /// index lo + i).
  std::vector<std::pair<std::string, Extent>> families;
  int64_t localLayer = 0;

  int64_t numElements() const;
  /// The number of tensors the family stands for (1 without families).
  int64_t familySize() const;
  /// The name of family member `member` (row-major over the family atoms).
  std::string name(const ModelLayout &m, int64_t member = 0) const;
  /// The pieces of family member `member`: the family atoms fixed.
  std::vector<Piece> memberPieces(const ModelLayout &m, int64_t member) const;
};

/// One tensor of a rank, families expanded.
struct RankTensor {
  std::string name;
  std::vector<int64_t> shape;
  DType dtype = DType::BF16;
  /// A duplicate of a parameter held elsewhere, written on export.
  bool copy = false;
  /// Stored value = logical value + offset.
  int64_t offset = 0;
  /// Stored value = -exp(logical value).
  bool negExp = false;
  /// It holds FP8 block-quantized weights dequantized.
  bool dequantized = false;
  /// The slices it holds, with parameter indices into the layout.
  std::vector<Piece> pieces;
};

/// The number of ranks of a configuration (tp * pp * ep).
int64_t numRanks(const ParallelConfig &config);
/// The contexts of rank `rank` (one per virtual stage); ranks are numbered
/// tp fastest, then ep, then pp.
std::vector<RankContext> rankContexts(const ParallelConfig &config,
                                      int64_t rank);
/// The tensors of rank `rank`, families expanded, in plan order. With
/// virtual stages, the tensors of chunk c are named `model{c}.<name>`.
std::vector<RankTensor> rankTensors(const ModelLayout &m,
                                    const ParallelConfig &config,
                                    int64_t rank);
class Planner;
/// The same with a planner of the configuration, leaving out the tensor
/// specs marked in `skip`.
std::vector<RankTensor> rankTensors(const Planner &planner, int64_t rank,
                                    const std::vector<bool> *skip = nullptr);

/// One concrete tensor of a rank: its name, stored shape and dtype.
/// Families are expanded, one entry per index.
struct TensorListing {
  std::string name;
  std::vector<int64_t> shape;
  DType dtype;
  const TensorSpec *spec;
};
std::vector<TensorListing> listTensors(const ModelLayout &m,
                                       const RankContext &ctx);

/// Something wrong with a layout, found while planning it.
struct Problem {
  std::string check; // a stable check ID, e.g. "coverage"
  std::string message;
  int source = -1;   // the spec or param source id it is about
  int related = -1;  // another source involved, or -1
  bool operator<(const Problem &o) const {
    return std::tie(source, check, message) <
           std::tie(o.source, o.check, o.message);
  }
};

class Planner {
public:
  Planner(const ModelLayout &model, const ParallelConfig &config);

  const ModelLayout &model() const { return m; }
  const ParallelConfig &config() const { return cfg; }

  /// Every reason the configuration is invalid; empty when it is valid.
  const std::vector<std::string> &invalidReasons() const { return reasons; }
  bool valid() const { return reasons.empty(); }

  /// Every rank of the configuration (tp x pp x ep; each pipeline rank
  /// holds vpp chunks, listed as separate contexts). Expert-tensor ranks are
  /// laid on tensor ranks: etp rank = tp rank % etp.
  std::vector<RankContext> ranks() const;

  /// The extent of atom `atom` of parameter `param` on a rank.
  Extent extent(int param, const std::string &atom,
                const RankContext &ctx) const;
  /// Whether a tensor or parameter placed so lives on the rank.
  bool placedOn(const Placement &p, const RankContext &ctx) const;
  /// The virtual stage holding layer `layer` of the staged stack.
  int64_t stageOfLayer(int64_t layer) const;
  /// The first layer of a virtual stage.
  int64_t firstLayerOf(int64_t stage) const;

  /// The tensors of one rank. Problems of the layout found on the way
  /// (dimensions missing from a tensor, parts that disagree) are appended
  /// to `problems` when given.
  /// Specs marked in `skip` are left out.
  std::vector<LocalTensor> tensors(const RankContext &ctx,
                                   std::vector<Problem> *problems,
                                   const std::vector<bool> *skip = nullptr) const;
  /// The name of tensor `spec` on a rank (layer numbers local to the
  /// stage, family indices symbolic), or nothing when the rank does not
  /// hold it.
  std::optional<std::string> tensorName(int spec, const RankContext &ctx) const;
  /// One tensor of a rank; false when it does not exist there.
  bool tensor(int spec, const RankContext &ctx, LocalTensor &out,
              std::vector<Problem> *problems) const;

private:
  void validate();
  Placement placementOf(const TensorSpec &t) const;
  int64_t localLayerOf(const TensorSpec &t) const;

  const ModelLayout &m;
  ParallelConfig cfg;
  std::vector<std::string> reasons;
  /// Layers per virtual stage (pp * vpp of them).
  std::vector<int64_t> stageLayers;
};

/// Enumerates the parallel configurations of a grid. `axes` maps an axis
/// name (tp, pp, ep, etp, cp, dp, vpp) to its values.
std::vector<ParallelConfig>
expandGrid(const std::map<std::string, std::vector<int64_t>> &axes);

/// The default grid: tp 1,2,4,8; pp 1,2,4; ep 1,2,4,8; etp 1,2.
std::map<std::string, std::vector<int64_t>> defaultGrid();

} // namespace mdl::rt

#endif // MDL_RUNTIME_MODEL_PLAN_H
