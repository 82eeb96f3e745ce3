//===- Layout.h - What each rank of a backend holds -------------*- C++ -*-===//
//
// The semantics of layouts, in plain C++17 so that the compiler's checks and
// the generated code share them. A ModelLayout is a model instantiated for
// one config and bound to one backend: its logical parameters (atomic named
// dimensions with sizes, and how mesh axes split them) and its tensors
// (name templates and axis term trees over those dimensions). Planning it
// for a rank gives each local tensor with the slices of parameters it holds
// as strided views, from which conversion copies and coverage checks follow.
//
//===----------------------------------------------------------------------===//

#ifndef MDL_RUNTIME_MODEL_LAYOUT_H
#define MDL_RUNTIME_MODEL_LAYOUT_H

#include "mdl/Runtime/Base/DType.h"
#include "mdl/Runtime/Base/Parallel.h"

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace mdl::rt {

/// Where pipeline parallelism places a parameter or tensor.
struct Placement {
  enum Kind { All, First, Last, Layer };
  Kind kind = All;
  int64_t layer = 0; // Layer: index in the staged stack
};

/// How one mesh axis splits one dimension of a parameter. The dimension
/// may be factored: its atoms, outermost first, are split as one row-major
/// index, so each rank's chunk must be a box in them.
struct Split {
  std::vector<std::string> atoms;
  MeshAxis axis = MeshAxis::TP;
  /// When the axis has more ranks than the dimension has entries (and a
  /// multiple of them), each entry is replicated over axis/size ranks
  /// instead of being an error (vLLM's kv heads).
  bool replicateWhenFewer = false;
  /// Pads the (single-atom) dimension up to a multiple of this before
  /// splitting (vocab padding); null: no padding.
  std::function<int64_t(const ParallelConfig &)> padMultiple;
  /// For messages: "column(G) of layers.3.attn.q".
  std::string why;
  /// Why the dimension cannot be split at all (the ragged last block of a
  /// weight's FP8 scales), or "".
  std::string indivisible;
  /// When positive, `indivisible` holds only for more ranks than this: the
  /// scales of a weight whose split replicates it when the axis has more
  /// ranks than its heads (vLLM's kv heads) follow a plain split.
  int64_t indivisibleAbove = 0;
  /// The configurations where the split holds (a layout's `shard ... when`,
  /// or where such a split does not hold, for the style it overrides);
  /// null: all. `whenKey` tells conditions apart (equal keys, equal
  /// conditions).
  std::function<bool(const ParallelConfig &)> when;
  std::string whenKey;

  bool holdsIn(const ParallelConfig &config) const {
    return !when || when(config);
  }
};

/// A logical parameter of the instantiated model.
struct Param {
  std::string path;                 // "layers.3.attn.q", "layers.3.attn.o.bias"
  DType dtype = DType::BF16;
  std::vector<std::string> atoms;   // atomic dimension names
  std::vector<int64_t> sizes;       // their sizes
  /// The declared axes: how many atoms each spans (for display).
  std::vector<int> axisAtoms;
  std::vector<Split> splits;
  /// How tensor parallelism splits it on this backend: the spec's style, or
  /// the one a layout's `shard ... by tp` gives.
  TensorParallelStyle style = TensorParallelStyle::None;
  Placement placement;
  /// For a linear's weight: how many output axes follow the expert axis (if
  /// any) before the input axes; -1 for other parameters.
  int linearOutAxes = -1;
  /// A linear's bias.
  bool bias = false;
  /// An FP8 block-quantized weight: the side of its square scale blocks.
  int64_t scaleBlock = 0;
  /// For a block-quantized weight, its scale parameter; for a scale, its
  /// weight (see addBlockScales); -1 otherwise.
  int scale = -1, scaleOf = -1;
  /// An MXFP4 weight (`linear ... mxfp4`), whose logical value is held in
  /// `dtype`: its packed E2M1 blocks and its E8M0 scales parameters (see
  /// addMxfp4). For those two, `mxfp4Of` is the weight; -1 otherwise.
  bool mxfp4 = false;
  int mxfp4Blocks = -1, mxfp4Scales = -1, mxfp4Of = -1;
  /// The expert dimension of a grouped parameter, or "".
  std::string expert;
  /// The innermost stack element the parameter belongs to (an index into
  /// ModelLayout::unitIndex), or -1.
  int unit = -1;
  /// For diagnostics: where the parameter was declared.
  int source = -1;

  int atomIndex(const std::string &name) const;
  int64_t numElements() const;
};

/// One term of an axis: an atom, a unit axis, a product, or a part set.
struct Term {
  enum Kind { Atom, Unit, Product, Parts };
  Kind kind = Atom;
  std::string atom;            // Atom
  std::vector<Term> children;  // Product
  /// A part: a parameter with the dimensions it adds, or (param -1) a
  /// group, whose shape holds a part set of its own.
  struct Part {
    int param = -1;
    std::vector<Term> shape;   // a product; empty adds no dimension
    bool isGroup() const { return param < 0; }
  };
  std::vector<Part> parts;     // Parts

  static Term makeAtom(std::string name) {
    Term t;
    t.atom = std::move(name);
    return t;
  }
};

/// A piece of a tensor name.
struct NameSegment {
  enum Kind { Text, Family, LayerIndex };
  Kind kind = Text;
  std::string text;   // Text
  std::string atom;   // Family: one tensor per (local) index of this atom
  int64_t layer = 0;  // LayerIndex: global index in the staged stack
};

struct TensorSpec {
  std::vector<NameSegment> name;
  /// Each axis is a product of terms.
  std::vector<std::vector<Term>> axes;
  /// The parameter, when the tensor holds one (no part set).
  int param = -1;
  /// A duplicate of a parameter held by another tensor (tied heads, MTP
  /// copies): written on export, not counted for coverage.
  bool copy = false;
  /// The tensor holds zeros where it exists (a bias a framework adds once
  /// after a reduction, kept by one rank and zeroed on the others): written
  /// as zeros, never read, not counted for coverage. A zero tensor is also
  /// a `copy`.
  bool zero = false;
  /// Stored value = logical value + offset (zero-centred norms).
  int64_t offset = 0;
  /// Stored value = -exp(logical value), computed in double and rounded
  /// once (vLLM's Mamba-2 A from A_log); read back as log(-stored), which
  /// is exact only where the stored precision resolves the logical value.
  bool negExp = false;
  /// The tensor holds FP8 block-quantized weights dequantized (value times
  /// its block's scale), in the `stored` dtype: a backend that keeps no
  /// block scales (see addBlockScales).
  bool dequantized = false;
  std::optional<DType> stored;
  /// The stored shape when it differs from the axes (a reinterpretation):
  /// each view axis is a number times the per-rank extents of some atoms.
  /// A `claim` axis was written as a bare dimension name: it says that axis
  /// is that dimension.
  struct ViewAxis {
    int64_t factor = 1;
    std::vector<std::string> atoms;
    bool claim = false;
    std::string spelling; // as written, for messages
  };
  std::vector<ViewAxis> view;
  /// `split N by axis`: the tensor claims to be an even chunk of its
  /// gathered form along axis N.
  std::optional<int> splitAxis;
  MeshAxis splitBy = MeshAxis::TP;
  std::optional<Placement> on;
  /// Whether the tensor exists on a rank; null: always.
  std::function<bool(const RankContext &)> when;
  /// The innermost stack element the tensor's layout belongs to, or -1.
  int unit = -1;
  int source = -1;
  /// The mounts that place it, outermost first: the source of the entry
  /// that decides (a stack's or instance's `at`, the module layout's, or
  /// the member's declaration) and a number that tells the instances it
  /// places apart (the elements of one stack); empty where unknown.
  std::vector<std::pair<int, int>> mounts;
};

/// A model bound to one backend.
struct ModelLayout {
  std::string model, backend;
  std::vector<Param> params;
  std::vector<TensorSpec> tensors;
  /// Number of layers in the staged stack (0: no pipeline placement).
  int64_t stagedLayers = 0;
  /// Per stack element that parameters or tensors belong to: its index in
  /// its stack.
  std::vector<int64_t> unitIndex;
  bool hasPipeline = false;
  /// The mesh axes the backend supports.
  std::vector<MeshAxis> mesh;
  /// The backend's own conditions on a parallel configuration: each gives
  /// the reason a configuration is invalid, or nothing.
  std::vector<std::function<std::optional<std::string>(const ParallelConfig &)>>
      requirements;
  /// Parameters the last stage needs to compute logits, with the one to
  /// hold instead when absent (`last head ?? embed`): (wanted, fallback).
  std::vector<std::pair<int, int>> lastStageNeeds;
  std::string lastStageNeedsWhy; // "head, or embed when tied"

  /// The backend's device capabilities, and what the model's modules need.
  std::map<std::string, bool> capabilities;
  struct CapabilityNeed {
    std::string instance;   // "layers.1.ple (Ple)"
    std::string capability;
    std::optional<std::string> fallback;
    int source = -1;
  };
  std::vector<CapabilityNeed> needs;

  /// Caches the backend computes from parameters.
  struct DerivedTensor {
    std::string name;
    std::vector<int> params;
    std::vector<std::string> recompute;
    bool hasRecompute = false;
    /// The spec says how to compute it from the slices the rank holds
    /// (bindModel's derived view binds it as a tensor).
    bool computed = false;
    int source = -1;
  };
  std::vector<DerivedTensor> derived;

  /// Tensors a checkpoint may hold that are no parameters (persistent
  /// buffers the framework recomputes): read past, never written.
  std::set<std::string> buffers;

  /// The storage variants the layout was bound with (`expert_storage`).
  std::map<std::string, std::string> choices;

  /// The suffix of the tensors that hold FP8 block scales next to their
  /// weights (`let block_scale_suffix = "_scale_inv";`), or "": the backend
  /// keeps no scales and holds block-quantized weights dequantized.
  std::string blockScaleSuffix;

  /// How the backend keeps MXFP4 weights: the suffixes of the tensors of
  /// their packed blocks and of their scales, and whether the 16 bytes of a
  /// block are an axis of their own ([out, in/32, 16]) or one with the
  /// blocks ([out, in/2]). An empty scales suffix: the backend holds MXFP4
  /// weights dequantized.
  std::string mxfp4BlocksSuffix, mxfp4ScalesSuffix;
  bool mxfp4BytesAxis = false;
  bool keepsMxfp4() const { return !mxfp4ScalesSuffix.empty(); }

  /// The module class the backend uses for each parallel role, with its
  /// properties (`sizes`, `returns`, `lora`, `input_is_parallel`), or for
  /// the modules of one name (`class "router" = ...`: no role).
  struct ModuleClass {
    std::optional<ModuleRole> role;
    std::string module, name;
    std::map<std::string, std::string> properties;
  };
  std::vector<ModuleClass> classes;
};

/// The path a module that needs a device capability takes on a backend:
/// its fast path when the backend has the capability, else its fallback
/// (none: the module cannot run there, which the checker reports).
struct KernelPath {
  std::string instance, capability;
  bool fast = false;
  std::optional<std::string> fallback;
};
std::vector<KernelPath> kernelPaths(const ModelLayout &m);

/// Renders a tensor name for a rank: family atoms take `familyIndex`,
/// layer indices are renumbered local to the rank's stage.
std::string renderName(const TensorSpec &t, int64_t localLayer,
                       const std::vector<std::pair<std::string, int64_t>>
                           &familyIndex = {});

/// Size of a term for parameter `param` using `extent(param, atom)`.
using ExtentFn = std::function<int64_t(int param, const std::string &atom)>;
int64_t termSize(const Term &t, int param, const ExtentFn &extent);

/// The parameters a tensor holds (one, or one per part, groups included).
std::vector<int> tensorParams(const TensorSpec &t);
/// The parameters of a part (itself, or those of a group).
std::vector<int> partParams(const Term::Part &p);

/// FP8 block scales (`linear ... scale(B)`). Adds to `m`, for each weight
/// with a scale block B, its scale parameter `<weight>.scale`: F32, one
/// value per B x B block of the weight's [out, in] matrix (per expert),
/// split as the weight is. Each tensor holding such weights then gets a
/// companion named with `m.blockScaleSuffix` that holds the scales of the
/// same blocks, or, when the backend keeps no scales, is marked as holding
/// them dequantized in `dequantizedDType`.
struct BlockScaleResult {
  /// Per tensor added, the tensor it accompanies.
  std::vector<int> companionOf;
  /// Tensors that cannot hold block-scaled weights, with the reason.
  std::vector<std::pair<int, std::string>> errors;
};
BlockScaleResult addBlockScales(ModelLayout &m, DType dequantizedDType);
/// Whether `p` is the block scale of a weight that `m`'s backend holds
/// dequantized: no tensor holds it, and its splits constrain nothing.
inline bool foldedScale(const ModelLayout &m, const Param &p) {
  return p.scaleOf >= 0 && m.blockScaleSuffix.empty();
}

/// MXFP4 weights (`linear ... mxfp4`, OCP Microscaling: blocks of 32 E2M1
/// values along the input side sharing an E8M0 scale 2^(s - 127), two
/// values a byte, the lower nibble first). Adds to `m`, for each such
/// weight, its blocks parameter `<weight>.blocks` (U8, [E, out..., in/32,
/// 16]) and its scales parameter `<weight>.scales` (U8, [E, out...,
/// in/32]), split as the weight is. On a backend that keeps MXFP4, each
/// tensor holding such weights becomes the tensor of their blocks (its
/// name with `m.mxfp4BlocksSuffix`) and gets a companion with their scales;
/// elsewhere it is marked as holding them dequantized.
BlockScaleResult addMxfp4(ModelLayout &m);
/// The number of values an MXFP4 scale covers along the input side.
constexpr int64_t kMxfp4Block = 32;
/// Whether `p` is a parameter `m`'s backend does not hold because it holds
/// the other form of an MXFP4 weight: the blocks and scales on a backend
/// that dequantizes, the logical weight on one that keeps MXFP4.
inline bool foldedMxfp4(const ModelLayout &m, const Param &p) {
  return m.keepsMxfp4() ? p.mxfp4 : p.mxfp4Of >= 0;
}
/// The atoms (indices into `atoms`) of a linear weight's expert, output and
/// input sides, each in order.
struct WeightSides {
  std::vector<size_t> expert, out, in;
};
WeightSides weightSides(const Param &w);
/// The name of the block atom of atoms `atoms` in blocks of `block`.
std::string blockAtomName(const std::vector<std::string> &atoms,
                          int64_t block);

/// Size of a view axis, given the extent of each atom.
int64_t viewAxisSize(const TensorSpec::ViewAxis &v,
                     const std::function<int64_t(const std::string &)> &extent);

} // namespace mdl::rt

#endif // MDL_RUNTIME_MODEL_LAYOUT_H
