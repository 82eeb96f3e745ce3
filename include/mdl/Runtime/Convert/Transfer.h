//===- Transfer.h - Moving weights between running processes ----*- C++ -*-===//
//
// A transfer plan says which bytes move from the ranks of one layout (a
// trainer's) to the ranks of another (a serving engine's), when both are
// processes holding their tensors in memory. It is made of segments: a box
// of one parameter, seen on each side as a strided view of a tensor (an
// element offset and, per dimension, a size and a stride in elements) with
// the same shape. Each segment is packed into a bucket of its link (source
// rank, destination rank) at a fixed byte offset, in the destination's
// dtype: the cast and the value shift of a zero-centred norm are applied
// when packing. Buckets hold at most a set number of bytes (a larger tensor
// is split) and are ordered once for every process. Every element of every
// destination tensor the plan writes comes from exactly one source box; a
// destination element no source holds, or one two sources would write, is
// an error when the plan is built. The plan holds nothing but numbers: an
// executor (the Python package's mdl.sync) moves the bytes. Plain C++17.
//
//===----------------------------------------------------------------------===//

#ifndef MDL_RUNTIME_CONVERT_TRANSFER_H
#define MDL_RUNTIME_CONVERT_TRANSFER_H

#include "mdl/Runtime/Convert/LoraView.h"
#include "mdl/Runtime/Model/Generated.h"

#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace mdl::rt {

struct TransferOptions {
  /// The most bytes a bucket holds.
  uint64_t bucketBytes = uint64_t(256) << 20;
  /// Copies of the destination (data-parallel engine replicas): replica k's
  /// rank r is destination rank k * (ranks of one copy) + r.
  int64_t dstReplicas = 1;
  /// Only the slices of these parameters (paths); null: every parameter.
  const std::set<std::string> *onlyParams = nullptr;
  /// Each destination rank reads only the source rank that is the same
  /// rank of its layout: both sides are one backend at one configuration
  /// (a rank's derived tensors refreshed from its own tensors).
  bool local = false;
  /// LoRA adapters only (LoraView.h): with the HF binding of the model, the
  /// plan moves the rank-`loraRank` factors of the modules HF-PEFT adapts,
  /// each side's named and stored as its naming says, instead of weights.
  const Binding *loraHf = nullptr;
  int64_t loraRank = 0;
  LoraNaming srcLora, dstLora;
};

/// A tensor of a rank the plan reads or writes.
struct TransferTensor {
  std::string name;
  std::vector<int64_t> shape;
  DType dtype = DType::BF16;
};

/// A box of a parameter moved from a source tensor to a destination tensor.
/// Its dimensions are `dims[firstDim, firstDim + numDims)`; element
/// (i_0, ..., i_n) is element `srcOffset + sum i_k * srcStride_k` of the
/// source tensor (row-major) and `dstOffset + sum i_k * dstStride_k` of the
/// destination tensor, and byte `bucketOffset + (row-major index) *
/// byteSize(dtype)` of its bucket. The value moved is the source's cast to
/// the destination's dtype, plus `shift`, or through `transform`.
struct TransferSegment {
  int32_t srcRank = 0, srcTensor = 0, dstRank = 0, dstTensor = 0;
  int32_t param = 0;
  int32_t bucket = 0;
  int32_t firstDim = 0, numDims = 0;
  int64_t srcOffset = 0, dstOffset = 0;
  uint64_t bucketOffset = 0;
  int64_t elements = 0;
  double shift = 0;
  /// Where one side stores -exp of the values (`neg_exp`: vLLM's A of a
  /// Mamba mixer beside Megatron's A_log): the value moved is -exp(s +
  /// shift) (NegExp) or log(-s) + shift (LogNeg) of the source's s,
  /// computed in float64 when packing and rounded once to the
  /// destination's dtype.
  enum Transform : int32_t {
    Plain = 0,
    NegExp = 1, // the destination stores -exp of the values
    LogNeg = 2, // the source does
  };
  int32_t transform = Plain;
};

struct TransferDim {
  int64_t size = 1, srcStride = 1, dstStride = 1;
};

/// One message of one link: its segments are `segments[firstSegment,
/// firstSegment + numSegments)`, in byte order.
struct TransferBucket {
  int32_t srcRank = 0, dstRank = 0;
  uint64_t bytes = 0;
  int32_t firstSegment = 0, numSegments = 0;
  /// Its place in the schedule: in a round, each process sends or receives
  /// at most one bucket.
  int32_t round = 0;
  /// One segment that is a contiguous run of its source tensor, in the
  /// destination's dtype, unshifted: sent from the tensor itself.
  bool directSrc = false;
  /// One segment that is a contiguous run of its destination tensor:
  /// received into the tensor itself.
  bool directDst = false;
};

class TransferPlan {
public:
  /// The plan from `from` at `fromConfig` to `to` at `toConfig` (bindings
  /// of one model instance), or null with `error`.
  static std::unique_ptr<TransferPlan>
  build(const Binding &from, const ParallelConfig &fromConfig,
        const Binding &to, const ParallelConfig &toConfig,
        const TransferOptions &options, std::string &error);

  /// A side's ranks are its processes: the ranks of its layout that hold a
  /// state (the backend's `rank_saved`: the (tp, ep) pairs some process
  /// holds), in layout order (tp fastest, then ep, then pp).
  int64_t numSrcRanks() const { return int64_t(srcTensors.size()); }
  /// Destination ranks, replicas included.
  int64_t numDstRanks() const { return numDstBase * replicas; }
  /// The destination rank of one copy that destination rank `rank` is.
  int64_t baseRank(int64_t rank) const { return rank % numDstBase; }
  /// The layout's rank that a side's rank `rank` is.
  int64_t layoutRank(bool source, int64_t rank) const {
    return source ? srcLayoutRanks[size_t(rank)]
                  : dstLayoutRanks[size_t(baseRank(rank))];
  }

  /// The tensors of source rank `rank` the plan reads, and those of
  /// destination rank `rank` it writes (segments index them).
  const std::vector<TransferTensor> &sourceTensors(int64_t rank) const {
    return srcTensors[size_t(rank)];
  }
  const std::vector<TransferTensor> &destinationTensors(int64_t rank) const {
    return dstTensors[size_t(baseRank(rank))];
  }
  /// Segments in bucket order, buckets in schedule order.
  std::vector<TransferSegment> segments;
  std::vector<TransferDim> dims;
  std::vector<TransferBucket> buckets;
  /// The destination's dtype of each segment (wire dtype) and the
  /// source's, by segment.
  DType wireType(const TransferSegment &s) const {
    return destinationTensors(s.dstRank)[size_t(s.dstTensor)].dtype;
  }
  DType sourceType(const TransferSegment &s) const {
    return sourceTensors(s.srcRank)[size_t(s.srcTensor)].dtype;
  }
  /// The parameter paths segments name.
  std::vector<std::string> params;

  /// The same for every process that built the same plan (64-bit FNV-1a of
  /// everything above, in hex).
  std::string digest() const { return digestText; }

  /// Bytes that move from each source rank to each destination rank, for
  /// the pairs that exchange any: (source, destination, bytes).
  std::vector<std::tuple<int64_t, int64_t, uint64_t>> links() const;
  /// The bytes destination rank `rank` receives and writes, or (with
  /// `source`) source rank `rank` sends.
  uint64_t bytesOf(bool source, int64_t rank) const;
  uint64_t bytesIn(int64_t rank) const { return bytesOf(false, rank); }
  uint64_t bytesOut(int64_t rank) const { return bytesOf(true, rank); }
  /// The staging memory a side's rank needs: two buffers (one being
  /// filled or emptied while the other is on the wire) of its largest
  /// bucket that is not sent from, or received into, a tensor itself.
  uint64_t peakStaging(bool source, int64_t rank) const;
  uint64_t bucketBytes() const { return cap; }

private:
  TransferPlan() = default;
  std::vector<std::vector<TransferTensor>> srcTensors, dstTensors;
  std::vector<int64_t> srcLayoutRanks, dstLayoutRanks;
  int64_t numDstBase = 0, replicas = 1;
  uint64_t cap = 0;
  std::string digestText;
  friend class TransferBuilder;
};

} // namespace mdl::rt

#endif // MDL_RUNTIME_CONVERT_TRANSFER_H
