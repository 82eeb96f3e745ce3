//===- Convert.cpp - Moving weights between layouts -----------------------===//

#include "mdl/Runtime/Convert/Convert.h"
#include "mdl/Runtime/Convert/Copy.h"
#include "mdl/Runtime/Base/DType.h"
#include "mdl/Runtime/Convert/Host.h"
#include "mdl/Runtime/Convert/RankRecord.h"
#include "mdl/Runtime/Checkpoint/Safetensors.h"
#include "mdl/Runtime/Convert/SafetensorsWriter.h"
#include "mdl/Runtime/Convert/WorkerPool.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <mutex>
#include <set>

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

using namespace mdl;
using namespace mdl::rt;
//===----------------------------------------------------------------------===//
// Converter
//===----------------------------------------------------------------------===//

Converter::Converter(const Binding &from, const ParallelConfig &fromConfig,
                     const Binding &to, const ParallelConfig &toConfig)
    : from(from), to(to), fromConfig(fromConfig), toConfig(toConfig),
      numThreads(usableCpus()) {
  std::set<int64_t> all;
  for (int64_t r = 0; r < Binding::numRanks(fromConfig); ++r)
    all.insert(r);
  restrictSources(all);
}

/// What holds the elements of `pc` in tensor `t`: the parameter's path, or
/// for a copy tensor (an MTP layer's embed_tokens) the path, the backend
/// and the copy's name, so that a copy is kept apart where both ends are
/// the same backend and hold it.
static std::string heldKey(const ModelLayout &m, const RankTensor &t,
                           const Piece &pc) {
  const std::string &path = m.params[size_t(pc.param)].path;
  return t.copy ? path + "\n" + m.backend + "\n" + t.name : path;
}

template <typename Map>
static std::string sourceKey(const ModelLayout &m, const RankTensor &t,
                             const Piece &pc, const Map &held) {
  std::string key = heldKey(m, t, pc);
  return held.count(key) ? key : m.params[size_t(pc.param)].path;
}

void Converter::restrictSources(const std::set<int64_t> &ranks) {
  holders.clear();
  for (int64_t r : ranks)
    for (const RankTensor &t : from.rankTensors(fromConfig, r)) {
      for (const Piece &pc : t.pieces) {
        auto &held = holders[heldKey(from.layout(), t, pc)];
        if (std::none_of(held.begin(), held.end(), [&](const HeldBox &b) {
              return b.lo == pc.lo && b.count == pc.count;
            }))
          held.push_back({r, pc.lo, pc.count});
      }
    }
}

/// "the checkpoint of rank N" and, when it was read from files, which: the
/// file, or the directory of its files.
static std::string rankCheckpointText(int64_t rank, const Checkpoint &ckpt) {
  std::string out = "the checkpoint of rank " + std::to_string(rank);
  std::vector<const std::string *> files;
  for (const auto &shard : ckpt.shards())
    if (shard->mapped())
      files.push_back(&shard->path);
  if (files.empty())
    return out;
  if (files.size() == 1)
    return out + " ('" + *files[0] + "')";
  auto dirOf = [](const std::string &path) {
    size_t slash = path.rfind('/');
    return slash == std::string::npos ? std::string(".")
                                      : path.substr(0, slash);
  };
  std::string dir = dirOf(*files[0]);
  for (const std::string *f : files)
    if (dirOf(*f) != dir)
      return out + " ('" + *files[0] + "' and " +
             std::to_string(files.size() - 1) + " more files)";
  return out + " (" + std::to_string(files.size()) + " files in '" + dir + "')";
}

namespace {

/// Where the chunks of a tensor are: the chunk boundaries along each axis,
/// and the chunk holding each cell of the grid they make.
class ChunkGrid {
public:
  bool build(const std::vector<int64_t> &shape,
             const std::vector<Checkpoint::Chunk> &chunks, std::string &error) {
    bounds.assign(shape.size(), {});
    for (size_t k = 0; k < shape.size(); ++k) {
      bounds[k].push_back(0);
      bounds[k].push_back(shape[k]);
      for (const Checkpoint::Chunk &c : chunks)
        bounds[k].push_back(c.offsets[k]);
      std::sort(bounds[k].begin(), bounds[k].end());
      bounds[k].erase(std::unique(bounds[k].begin(), bounds[k].end()),
                      bounds[k].end());
    }
    cellStride.assign(shape.size(), 1);
    uint64_t cells = 1;
    for (size_t k = shape.size(); k-- > 0;) {
      cellStride[k] = int64_t(cells);
      cells *= bounds[k].size() - 1;
      if (cells > (uint64_t(1) << 26)) {
        error = "its chunks cut it into too many pieces";
        return false;
      }
    }
    owner.assign(size_t(cells), -1);
    for (size_t c = 0; c < chunks.size(); ++c) {
      // Every cell of the chunk's box.
      std::vector<int64_t> lo(shape.size()), hi(shape.size());
      for (size_t k = 0; k < shape.size(); ++k) {
        lo[k] = cellOf(k, chunks[c].offsets[k]);
        hi[k] = cellOf(k, chunks[c].offsets[k] + chunks[c].sizes[k] - 1) + 1;
        if (lo[k] >= hi[k])
          return true; // an empty chunk holds nothing
      }
      std::vector<int64_t> at = lo;
      while (true) {
        int64_t cell = 0;
        for (size_t k = 0; k < at.size(); ++k)
          cell += at[k] * cellStride[k];
        owner[size_t(cell)] = int64_t(c);
        size_t k = at.size();
        while (k-- > 0 && ++at[k] == hi[k])
          at[k] = lo[k];
        if (k == size_t(-1))
          break;
      }
    }
    return true;
  }
  /// The chunk holding element `at`, or -1.
  int64_t find(const std::vector<int64_t> &at) const {
    int64_t cell = 0;
    for (size_t k = 0; k < at.size(); ++k)
      cell += cellOf(k, at[k]) * cellStride[k];
    return owner[size_t(cell)];
  }

private:
  int64_t cellOf(size_t k, int64_t x) const {
    return int64_t(std::upper_bound(bounds[k].begin(), bounds[k].end(), x) -
                   bounds[k].begin()) -
           1;
  }
  std::vector<std::vector<int64_t>> bounds;
  std::vector<int64_t> cellStride;
  std::vector<int64_t> owner;
};

/// Box `pc` of a tensor of shape `shape` stored in `chunks`, cut into the
/// parts each chunk holds, each as a box of its chunk (strides and base in
/// the chunk's row-major layout): (chunk, piece) pairs. False, with
/// `error`, when the box's strides do not follow the tensor's axes.
bool splitByChunks(const Piece &pc, const std::vector<int64_t> &shape,
                   const std::vector<Checkpoint::Chunk> &chunks,
                   const ChunkGrid &grid,
                   std::vector<std::pair<size_t, Piece>> &out,
                   std::string &error) {
  size_t rank = shape.size();
  std::vector<int64_t> axisStride(rank, 1);
  for (size_t k = rank; k-- > 1;)
    axisStride[k - 1] = axisStride[k] * shape[k];
  size_t n = pc.lo.size();
  // Per atom: the axis it runs along and its step there.
  std::vector<int> axisOf(n, -1);
  std::vector<int64_t> step(n, 0);
  for (size_t a = 0; a < n; ++a) {
    if (pc.count[a] <= 1)
      continue;
    int64_t s = pc.stride[a];
    for (size_t k = 0; k < rank; ++k)
      if (s >= axisStride[k] && s % axisStride[k] == 0 &&
          (k == 0 || s < axisStride[k - 1])) {
        axisOf[a] = int(k);
        step[a] = s / axisStride[k];
        break;
      }
    if (axisOf[a] < 0) {
      error = "a box of it does not follow its axes";
      return false;
    }
  }
  std::vector<int64_t> base(rank);
  for (size_t k = 0; k < rank; ++k)
    base[k] = (pc.base / axisStride[k]) % shape[k];
  auto corners = [&](const std::vector<int64_t> &lo,
                     const std::vector<int64_t> &count,
                     std::vector<int64_t> &mn, std::vector<int64_t> &mx) {
    mn = base;
    for (size_t a = 0; a < n; ++a)
      if (axisOf[a] >= 0)
        mn[size_t(axisOf[a])] += (lo[a] - pc.lo[a]) * step[a];
    mx = mn;
    for (size_t a = 0; a < n; ++a)
      if (axisOf[a] >= 0)
        mx[size_t(axisOf[a])] += (count[a] - 1) * step[a];
  };
  auto within = [&](int64_t c, const std::vector<int64_t> &mx) {
    const Checkpoint::Chunk &ch = chunks[size_t(c)];
    for (size_t k = 0; k < rank; ++k)
      if (mx[k] >= ch.offsets[k] + ch.sizes[k])
        return false;
    return true;
  };
  {
    std::vector<int64_t> mn, mx;
    corners(pc.lo, pc.count, mn, mx);
    for (size_t k = 0; k < rank; ++k)
      if (mx[k] >= shape[k]) {
        error = "a box of it does not follow its axes";
        return false;
      }
  }
  auto emit = [&](int64_t c, const std::vector<int64_t> &lo,
                  const std::vector<int64_t> &count,
                  const std::vector<int64_t> &mn) {
    const Checkpoint::Chunk &ch = chunks[size_t(c)];
    std::vector<int64_t> cs(rank, 1);
    for (size_t k = rank; k-- > 1;)
      cs[k - 1] = cs[k] * ch.sizes[k];
    Piece sp;
    sp.param = pc.param;
    sp.lo = lo;
    sp.count = count;
    sp.stride.assign(n, 1);
    for (size_t a = 0; a < n; ++a)
      if (axisOf[a] >= 0)
        sp.stride[a] = step[a] * cs[size_t(axisOf[a])];
    sp.base = 0;
    for (size_t k = 0; k < rank; ++k)
      sp.base += (mn[k] - ch.offsets[k]) * cs[k];
    out.push_back({size_t(c), std::move(sp)});
  };
  std::function<bool(const std::vector<int64_t> &,
                     const std::vector<int64_t> &)>
      split = [&](const std::vector<int64_t> &lo,
                  const std::vector<int64_t> &count) {
        std::vector<int64_t> mn, mx;
        corners(lo, count, mn, mx);
        int64_t c = grid.find(mn);
        if (c >= 0 && within(c, mx)) {
          emit(c, lo, count, mn);
          return true;
        }
        // Cut along the outermost atom left, in runs of one chunk.
        int best = -1;
        for (size_t a = 0; a < n; ++a)
          if (count[a] > 1 && axisOf[a] >= 0 &&
              (best < 0 || pc.stride[a] > pc.stride[size_t(best)]))
            best = int(a);
        if (best < 0) {
          error = "an element of it is in no chunk";
          return false;
        }
        size_t b = size_t(best);
        std::vector<int64_t> l = lo, k = count;
        int64_t end = lo[b] + count[b];
        for (int64_t v = lo[b]; v < end;) {
          l[b] = v;
          k[b] = 1;
          corners(l, k, mn, mx);
          c = grid.find(mn);
          if (c < 0 || !within(c, mx)) {
            if (!split(l, k))
              return false;
            ++v;
            continue;
          }
          std::vector<int64_t> first = mn;
          int64_t w = v + 1;
          for (; w < end; ++w) {
            l[b] = w;
            corners(l, k, mn, mx);
            if (grid.find(mn) != c || !within(c, mx))
              break;
          }
          l[b] = v;
          k[b] = w - v;
          emit(c, l, k, first);
          v = w;
        }
        return true;
      };
  return split(pc.lo, pc.count);
}

} // namespace

bool Converter::addSource(int64_t rank, std::shared_ptr<Checkpoint> ckpt,
                          std::string &error,
                          const std::set<std::string> &dropped) {
  // A file that says it holds another rank is not read as this one.
  RankIdentity id{from.layout().model, from.layout().backend, fromConfig,
                  rank};
  for (const auto &shard : ckpt->shards())
    if (std::optional<std::string> wrong =
            checkRankRecord(shard->header().metadata, id, shard->path)) {
      error = *wrong;
      return false;
    }
  std::set<std::string> expected;
  for (const RankTensor &t : from.rankTensors(fromConfig, rank)) {
    expected.insert(t.name);
    const Checkpoint::TensorRef *ref = ckpt->find(t.name);
    if (!ref) {
      error = rankCheckpointText(rank, *ckpt) + " has no tensor '" + t.name +
              "', which " + from.layout().model + " on " +
              from.layout().backend + " holds there";
      return false;
    }
    // A vocabulary padded further than the spec pads it (a training run's
    // padding for its tensor-parallel size) holds the same rows first.
    bool padded = ref->info->dtype == t.dtype &&
                  ref->info->shape.size() == t.shape.size() &&
                  !t.shape.empty() && ref->info->shape[0] > t.shape[0] &&
                  std::equal(t.shape.begin() + 1, t.shape.end(),
                             ref->info->shape.begin() + 1) &&
                  std::any_of(t.pieces.begin(), t.pieces.end(),
                              [&](const Piece &pc) {
                                const Param &p = from.layout().params[size_t(
                                    pc.param)];
                                return std::any_of(
                                    p.splits.begin(), p.splits.end(),
                                    [](const Split &s) {
                                      return bool(s.padMultiple);
                                    });
                              });
    if (!padded &&
        (ref->info->shape != t.shape || ref->info->dtype != t.dtype)) {
      error = "tensor '" + t.name + "' is " + shapeText(ref->info->shape) +
              " " + std::string(safetensorsName(ref->info->dtype)) + " in " +
              rankCheckpointText(rank, *ckpt) + ", but the spec says " +
              shapeText(t.shape) + " " + std::string(safetensorsName(t.dtype));
      return false;
    }
    const uint8_t *data = ckpt->data(*ref);
    if (data)
      (t.copy ? copies : copied)
          .push_back({rank, ckpt.get(), &ref->info->name, data,
                      ref->info->numBytes(), t.dtype, t.offset, t.negExp,
                      t.pieces});
    // A distributed checkpoint's tensor is read from its chunks: each box
    // cut into the parts its chunks hold.
    const std::vector<Checkpoint::Chunk> *chunks = ckpt->chunks(*ref);
    ChunkGrid grid;
    if (chunks && !grid.build(ref->info->shape, *chunks, error)) {
      error = "tensor '" + t.name + "' of " + ref->shard->path + ": " + error;
      return false;
    }
    for (const Piece &pc : t.pieces) {
      // A parameter replicated over ranks is read from the first only.
      std::vector<View> &held = views[heldKey(from.layout(), t, pc)];
      if (std::any_of(held.begin(), held.end(), [&](const View &v) {
            return v.piece.lo == pc.lo && v.piece.count == pc.count &&
                   v.dtype == t.dtype && v.offset == t.offset &&
                   v.negExp == t.negExp;
          }))
        continue;
      if (!chunks) {
        held.push_back({data, ref->info->numBytes(),
                        ref->shard->mapped() ? &ref->shard->path : nullptr,
                        &ref->info->name,
                        ref->shard->header().dataStart + ref->info->dataBegin,
                        t.dtype, t.offset, t.negExp, pc, rank});
        continue;
      }
      std::vector<std::pair<size_t, Piece>> parts;
      if (!splitByChunks(pc, ref->info->shape, *chunks, grid, parts, error)) {
        error = "tensor '" + t.name + "' of " + ref->shard->path + ": " + error;
        return false;
      }
      for (auto &[c, piece] : parts) {
        const Checkpoint::Chunk &ch = (*chunks)[c];
        held.push_back({ch.data, ch.bytes, ch.file, &ref->info->name,
                        ch.fileOffset, t.dtype, t.offset, t.negExp,
                        std::move(piece), rank});
      }
    }
  }
  for (const auto &[name, ref] : ckpt->tensors())
    if (!expected.count(name) && !dropped.count(name) &&
        !from.layout().buffers.count(name)) {
      error = rankCheckpointText(rank, *ckpt) + " holds tensor '" + name + "'" +
              (ref.shard->mapped() && ckpt->shards().size() > 1
                   ? " (in '" + ref.shard->path + "')"
                   : std::string()) +
              ", which " + from.layout().model + " on " +
              from.layout().backend + " does not describe there";
      return false;
    }
  keep.push_back(std::move(ckpt));
  return true;
}

std::optional<std::string> Converter::differingCopy() const {
  auto sameBoxes = [](const std::vector<Piece> &a,
                      const std::vector<Piece> &b) {
    if (a.size() != b.size())
      return false;
    for (size_t i = 0; i < a.size(); ++i)
      if (a[i].param != b[i].param || a[i].lo != b[i].lo ||
          a[i].count != b[i].count || a[i].stride != b[i].stride ||
          a[i].base != b[i].base)
        return false;
    return true;
  };
  // The copies a target of the same backend holds keep their bytes.
  std::set<std::string> kept;
  if (to.layout().backend == from.layout().backend)
    for (int64_t r = 0; r < Binding::numRanks(toConfig); ++r)
      for (const RankTensor &t : to.rankTensors(toConfig, r))
        if (t.copy)
          kept.insert(t.name);
  for (const HeldTensor &c : copies) {
    if (kept.count(*c.name))
      continue;
    for (const HeldTensor &t : copied) {
      if (t.bytes != c.bytes || t.dtype != c.dtype || t.offset != c.offset ||
          t.negExp != c.negExp ||
          !sameBoxes(t.pieces, c.pieces))
        continue;
      if (std::memcmp(t.data, c.data, c.bytes) == 0)
        break;
      std::string where =
          c.checkpoint == t.checkpoint
              ? " of " + rankCheckpointText(c.rank, *c.checkpoint)
              : " (of " + rankCheckpointText(c.rank, *c.checkpoint) + " and " +
                    rankCheckpointText(t.rank, *t.checkpoint) + ")";
      return "tensors '" + *c.name + "' and '" + *t.name + "'" + where +
             " differ, but " + from.layout().model + " on " +
             from.layout().backend + " has the first as a copy of the " +
             "second: the conversion would write '" + *t.name +
             "' in its place (--replace-copies accepts that)";
    }
  }
  return std::nullopt;
}

std::vector<int64_t>
Converter::sourcesOf(int64_t rank,
                     const std::set<std::string> *onlyParams) const {
  std::set<int64_t> out;
  for (const RankTensor &t : to.rankTensors(toConfig, rank))
    for (const Piece &pc : t.pieces) {
      const std::string &path = to.layout().params[size_t(pc.param)].path;
      if (onlyParams && !onlyParams->count(path))
        continue;
      auto it = holders.find(sourceKey(to.layout(), t, pc, holders));
      if (it == holders.end())
        continue;
      for (const HeldBox &b : it->second) {
        bool meets = true;
        for (size_t a = 0; a < b.lo.size() && a < pc.lo.size(); ++a)
          meets &= b.lo[a] < pc.lo[a] + pc.count[a] &&
                   pc.lo[a] < b.lo[a] + b.count[a];
        if (meets)
          out.insert(b.rank);
      }
    }
  return {out.begin(), out.end()};
}

/// Runs of a source file shorter than this are copied from its mapping.
constexpr uint64_t kMinFileCopy = 256 << 10;
/// Sources read in runs shorter than this, and sparsely, are read without
/// read-ahead.
constexpr int64_t kSparseRun = 64 << 10;

static bool isF8(DType t) {
  return t == DType::F8E4M3 || t == DType::F8E5M2;
}

/// A copy from a source tensor.
struct Converter::SourceCopy {
  BoxCopy box;
  const uint8_t *data;     // the source tensor's bytes, mapped
  const std::string *file; // and where they are
  uint64_t fileOffset;
};

/// A target tensor being written: the copies that fill it.
struct Converter::Job {
  const RankTensor *tensor = nullptr;
  using Copy = SourceCopy;
  std::vector<Copy> copies;
  /// The source tensors it reads (data, bytes), released when it is done.
  std::vector<std::pair<const uint8_t *, uint64_t>> sources;
  /// Some elements belong to no piece (padding) and stay zero.
  bool padded = false;
  uint64_t size = 0;
  std::atomic<uint64_t> done{0};

  /// A piece holding an FP8 weight that the source stores quantized: its
  /// E4M3 values and the scales of the blocks they fall in, each gathered
  /// into a contiguous box, then multiplied (in f32, as DeepSeek's
  /// weight_dequant does) and rounded once to the tensor's dtype.
  ///
  /// Or (`mxfp4`) a piece holding an MXFP4 weight that the source stores as
  /// blocks and scales: the blocks and the scales its rows and columns fall
  /// in, each gathered into a contiguous box ([experts..., out..., blocks,
  /// 16 bytes] and [experts..., out..., blocks]), then each E2M1 value
  /// times 2^(scale - 127), exact, rounded once to the tensor's dtype.
  struct Dequant {
    Piece target, weightBox, scaleBox;
    std::vector<Copy> weightCopies, scaleCopies;
    int64_t block = 0;
    WeightSides sides;
    bool mxfp4 = false;
  };
  std::vector<Dequant> dequants;
  /// The scales of each piece in `dequants`, gathered by the first fill()
  /// and dropped when the tensor is done.
  mutable std::once_flag scalesOnce;
  mutable std::vector<std::vector<float>> scales;
  /// The MXFP4 blocks of each piece in `dequants`, likewise.
  mutable std::vector<std::vector<uint8_t>> blocks;
};

/// A contiguous (row-major) box like `box`.
static Piece contiguous(const Piece &box) {
  Piece out = box;
  out.base = 0;
  int64_t stride = 1;
  for (size_t i = box.count.size(); i-- > 0;) {
    out.stride[i] = stride;
    stride *= box.count[i];
  }
  return out;
}

/// Flat index of the coordinates `c` (of atoms `atoms`, sizes `sizes`).
static int64_t flatIndex(const std::vector<size_t> &atoms,
                         const std::vector<int64_t> &sizes,
                         const std::vector<int64_t> &c) {
  int64_t index = 0;
  for (size_t a : atoms)
    index = index * sizes[a] + c[a];
  return index;
}

/// How flatIndex(atoms, sizes, c) moves when c[a] grows by one.
static int64_t flatStep(const std::vector<size_t> &atoms,
                        const std::vector<int64_t> &sizes, size_t a) {
  int64_t step = 0;
  for (size_t b : atoms)
    step = b == a ? 1 : step * sizes[b];
  return step;
}

/// Every E4M3 byte as a float (each value is one exactly).
static const std::array<float, 256> &e4m3Floats() {
  static const std::array<float, 256> table = [] {
    std::array<float, 256> t{};
    for (size_t b = 0; b < t.size(); ++b)
      t[b] = float(e4m3ToDouble(uint8_t(b)));
    return t;
  }();
  return table;
}

void Converter::setThreads(unsigned n) {
  numThreads = std::max(1u, std::min(n, 1024u));
}

bool Converter::plan(const RankTensor &t, Job &job, std::string &error) const {
  job.tensor = &t;
  int64_t elements = 1, held = 0;
  for (int64_t s : t.shape)
    elements *= s;
  job.size = uint64_t(elements) * byteSize(t.dtype);
  std::set<std::pair<const uint8_t *, uint64_t>> sources;
  for (const Piece &target : t.pieces) {
    if (t.dequantized) {
      bool done = false;
      if (!planDequant(t, target, job, sources, done, error))
        return false;
      if (done) {
        held += target.numElements();
        continue;
      }
    }
    if (!gather(target.param, sourceKey(to.layout(), t, target, views),
                target, t.dtype, t.offset, t.negExp, job.copies, sources,
                t.name, error))
      return false;
    held += target.numElements();
  }
  job.padded = held < elements;
  job.sources.assign(sources.begin(), sources.end());
  return true;
}

/// The copies from the source views of `param` into `box`, a piece of a
/// tensor of `dtype` storing values plus `offset` (or, with `negExp`,
/// -exp of them); false (with `error`) unless they cover it.
bool Converter::gather(int param, const std::string &key, const Piece &box,
                       DType dtype, int64_t offset, bool negExp,
                       std::vector<SourceCopy> &copies,
                       std::set<std::pair<const uint8_t *, uint64_t>> &sources,
                       const std::string &tensor, std::string &error) const {
  const std::string &path = to.layout().params[size_t(param)].path;
  int64_t covered = 0;
  if (auto it = views.find(key); it != views.end())
    for (const View &v : it->second) {
      SourceCopy copy{BoxCopy(), v.data, v.file, v.fileOffset};
      if (!copy.box.init(v.piece, v.dtype, v.offset, box, dtype, offset,
                         v.negExp, negExp))
        continue;
      if ((isF8(v.dtype) || isF8(dtype)) &&
          (v.dtype != dtype || v.offset != offset || v.negExp != negExp)) {
        error = "tensor '" + tensor + "' would convert 8-bit floats, " +
                "which move as bytes only";
        return false;
      }
      covered += copy.box.size;
      copies.push_back(std::move(copy));
      if (v.file)
        sources.insert({v.data, v.bytes});
    }
  if (covered < box.numElements()) {
    error = "no source holds all of " + path + " for tensor '" + tensor +
            "' (" + std::to_string(covered) + " of " +
            std::to_string(box.numElements()) + " elements)";
    return false;
  }
  return true;
}

bool Converter::planDequant(
    const RankTensor &t, const Piece &target, Job &job,
    std::set<std::pair<const uint8_t *, uint64_t>> &sources, bool &done,
    std::string &error) const {
  const ModelLayout &m = to.layout();
  const Param &w = m.params[size_t(target.param)];
  if (w.mxfp4)
    return planMxfp4(t, target, job, sources, done, error);
  auto it = views.find(w.path);
  // A source that holds the weight dequantized too is copied as it is.
  done = w.scale >= 0 && it != views.end() && !it->second.empty() &&
         it->second.front().dtype == DType::F8E4M3;
  if (!done)
    return true;
  Job::Dequant d;
  d.target = target;
  d.block = w.scaleBlock;
  d.sides = weightSides(w);
  d.weightBox = contiguous(target);
  // The scale blocks the box touches: experts as the box, rows and columns
  // from the blocks of its first to those of its last element.
  std::vector<int64_t> first = target.lo, last = target.lo;
  for (size_t a = 0; a < last.size(); ++a)
    last[a] += target.count[a] - 1;
  Piece scale;
  scale.param = w.scale;
  for (size_t a : d.sides.expert) {
    scale.lo.push_back(target.lo[a]);
    scale.count.push_back(target.count[a]);
  }
  for (const std::vector<size_t> *side : {&d.sides.out, &d.sides.in}) {
    int64_t lo = flatIndex(*side, w.sizes, first) / d.block;
    int64_t hi = flatIndex(*side, w.sizes, last) / d.block;
    scale.lo.push_back(lo);
    scale.count.push_back(hi - lo + 1);
  }
  scale.stride.assign(scale.lo.size(), 0);
  d.scaleBox = contiguous(scale);
  if (!gather(target.param, w.path, d.weightBox, DType::F8E4M3, 0, false,
              d.weightCopies, sources, t.name, error) ||
      !gather(w.scale, m.params[size_t(w.scale)].path, d.scaleBox, DType::F32,
              0, false, d.scaleCopies, sources, t.name, error))
    return false;
  job.dequants.push_back(std::move(d));
  return true;
}

bool Converter::planMxfp4(
    const RankTensor &t, const Piece &target, Job &job,
    std::set<std::pair<const uint8_t *, uint64_t>> &sources, bool &done,
    std::string &error) const {
  const ModelLayout &m = to.layout();
  const Param &w = m.params[size_t(target.param)];
  // A source that holds the weight dequantized is copied as it is.
  auto it = views.find(m.params[size_t(w.mxfp4Blocks)].path);
  done = it != views.end() && !it->second.empty();
  if (!done)
    return true;
  Job::Dequant d;
  d.mxfp4 = true;
  d.target = target;
  d.block = kMxfp4Block;
  d.sides = weightSides(w);
  // The blocks the box touches: experts and rows as the box, columns from
  // the block of its first to that of its last element.
  std::vector<int64_t> last = target.lo;
  for (size_t a = 0; a < last.size(); ++a)
    last[a] += target.count[a] - 1;
  Piece scale;
  scale.param = w.mxfp4Scales;
  for (const std::vector<size_t> *side : {&d.sides.expert, &d.sides.out})
    for (size_t a : *side) {
      scale.lo.push_back(target.lo[a]);
      scale.count.push_back(target.count[a]);
    }
  int64_t lo = flatIndex(d.sides.in, w.sizes, target.lo) / d.block;
  int64_t hi = flatIndex(d.sides.in, w.sizes, last) / d.block;
  scale.lo.push_back(lo);
  scale.count.push_back(hi - lo + 1);
  scale.stride.assign(scale.lo.size(), 0);
  d.scaleBox = contiguous(scale);
  Piece blocks = scale;
  blocks.param = w.mxfp4Blocks;
  blocks.lo.push_back(0);
  blocks.count.push_back(kMxfp4Block / 2);
  blocks.stride.push_back(0);
  d.weightBox = contiguous(blocks);
  if (!gather(w.mxfp4Blocks, m.params[size_t(w.mxfp4Blocks)].path,
              d.weightBox, DType::U8, 0, false, d.weightCopies, sources,
              t.name, error) ||
      !gather(w.mxfp4Scales, m.params[size_t(w.mxfp4Scales)].path,
              d.scaleBox, DType::U8, 0, false, d.scaleCopies, sources,
              t.name, error))
    return false;
  job.dequants.push_back(std::move(d));
  return true;
}

/// The E2M1 values of the 16 four-bit codes (sign, two exponent bits, one
/// mantissa bit).
static const float kE2M1[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,
                                4.0f,  6.0f,  -0.0f, -0.5f, -1.0f, -1.5f,
                                -2.0f, -3.0f, -4.0f, -6.0f};

/// Walks the runs of `box` along its last atom that have elements in the
/// window [begin, end) of its tensor: fn(c, i, at, j0, j1) for each, with
/// `c` the run's first coordinates, `i` the index of its first element in
/// the box, `at` that element's place in the tensor and [j0, j1) the run's
/// elements inside the window.
template <typename Fn>
static void forEachRunInWindow(const Piece &box, int64_t begin, int64_t end,
                               Fn &&fn) {
  std::vector<int64_t> c = box.lo;
  size_t last = c.size() - 1;
  int64_t run = box.count[last], stride = box.stride[last];
  int64_t elements = box.numElements();
  for (int64_t i = 0; i < elements; i += run) {
    int64_t at = box.base;
    for (size_t a = 0; a < c.size(); ++a)
      at += (c[a] - box.lo[a]) * box.stride[a];
    int64_t j0 = 0, j1 = run;
    if (stride > 0) {
      if (at < begin)
        j0 = (begin - at + stride - 1) / stride;
      j1 = std::min(run, std::max<int64_t>(0, end - at + stride - 1) / stride);
    }
    if (j0 < j1)
      fn(c, i, at, j0, j1);
    for (size_t a = last; a-- > 0;) {
      if (++c[a] < box.lo[a] + box.count[a])
        break;
      c[a] = box.lo[a];
    }
  }
}

/// Stores a dequantized f32 value as `dtype` (storeValue's rounding; bf16
/// directly, for speed).
static void storeFloat(float value, DType dtype, uint8_t *dst) {
  if (dtype == DType::BF16) {
    uint16_t h = floatToBf16(value);
    std::memcpy(dst, &h, 2);
  } else {
    storeValue(value, dtype, dst);
  }
}

void Converter::dequantizeMxfp4(const Job &job, size_t k, int64_t begin,
                                int64_t end, uint8_t *out) const {
  const RankTensor &t = *job.tensor;
  size_t size = byteSize(t.dtype);
  const Job::Dequant &d = job.dequants[k];
  const std::vector<float> &scales = job.scales[k];
  const std::vector<uint8_t> &blocks = job.blocks[k];
  const Param &w = to.layout().params[size_t(d.target.param)];
  // Every run of the box along its last atom that has elements in the
  // window: its expert and row (in the boxes' order) and its column pick
  // the block, the byte and the nibble (the lower first) of each element;
  // along the run either the row or the column moves by a fixed step.
  size_t rowAxes = d.sides.expert.size() + d.sides.out.size();
  int64_t numBlocks = d.scaleBox.count[rowAxes],
          block0 = d.scaleBox.lo[rowAxes];
  size_t last = d.target.lo.size() - 1;
  int64_t stride = d.target.stride[last];
  int64_t rowStep = 0;
  size_t axis = 0;
  for (const std::vector<size_t> *side : {&d.sides.expert, &d.sides.out})
    for (size_t a : *side) {
      rowStep = a == last ? 1 : rowStep * d.scaleBox.count[axis];
      ++axis;
    }
  int64_t columnStep = flatStep(d.sides.in, w.sizes, last);
  forEachRunInWindow(d.target, begin, end, [&](const std::vector<int64_t> &c,
                                               int64_t, int64_t at,
                                               int64_t j0, int64_t j1) {
    int64_t row0 = 0, k = 0;
    for (const std::vector<size_t> *side : {&d.sides.expert, &d.sides.out})
      for (size_t a : *side)
        row0 = row0 * d.scaleBox.count[k++] + (c[a] - d.target.lo[a]);
    int64_t column0 = flatIndex(d.sides.in, w.sizes, c);
    for (int64_t j = j0; j < j1; ++j) {
      int64_t row = row0 + j * rowStep, column = column0 + j * columnStep;
      int64_t blockIndex = row * numBlocks + column / d.block - block0;
      int64_t within = column % d.block;
      uint8_t byte = blocks[size_t(blockIndex * (d.block / 2) + within / 2)];
      float value = kE2M1[within % 2 ? byte >> 4 : byte & 0xF] *
                    scales[size_t(blockIndex)];
      storeFloat(value, t.dtype,
                 out + (at + j * stride - begin) * int64_t(size));
    }
  });
}

void Converter::dequantize(const Job &job, int64_t begin, int64_t end,
                           uint8_t *out) const {
  const RankTensor &t = *job.tensor;
  size_t size = byteSize(t.dtype);
  // The scales of every piece, gathered once: a 4-byte float per block of
  // block x block weights.
  std::call_once(job.scalesOnce, [&] {
    job.scales.resize(job.dequants.size());
    job.blocks.resize(job.dequants.size());
    for (size_t k = 0; k < job.dequants.size(); ++k) {
      const Job::Dequant &d = job.dequants[k];
      job.scales[k].resize(size_t(d.scaleBox.numElements()));
      int64_t lo, hi;
      if (d.mxfp4) {
        // E8M0 scales as the floats 2^(s - 127) (an exponent alone: every
        // one is a float but 255, the format's NaN).
        std::vector<uint8_t> exponents(job.scales[k].size());
        for (const Job::Copy &c : d.scaleCopies)
          c.box.run(c.data, exponents.data(), 0, int64_t(exponents.size()),
                    lo, hi);
        for (size_t i = 0; i < exponents.size(); ++i)
          job.scales[k][i] =
              exponents[i] == 255
                  ? std::numeric_limits<float>::quiet_NaN()
                  : float(std::ldexp(1.0, int(exponents[i]) - 127));
        job.blocks[k].resize(size_t(d.weightBox.numElements()));
        for (const Job::Copy &c : d.weightCopies)
          c.box.run(c.data, job.blocks[k].data(), 0,
                    int64_t(job.blocks[k].size()), lo, hi);
        continue;
      }
      for (const Job::Copy &c : d.scaleCopies)
        c.box.run(c.data, reinterpret_cast<uint8_t *>(job.scales[k].data()),
                  0, int64_t(job.scales[k].size()), lo, hi);
    }
  });
  const std::array<float, 256> &e4m3 = e4m3Floats();
  std::vector<uint8_t> values;
  for (size_t k = 0; k < job.dequants.size(); ++k) {
    const Job::Dequant &d = job.dequants[k];
    if (d.mxfp4) {
      dequantizeMxfp4(job, k, begin, end, out);
      continue;
    }
    const std::vector<float> &scales = job.scales[k];
    const Param &w = to.layout().params[size_t(d.target.param)];
    size_t numExperts = d.sides.expert.size();
    int64_t rows = d.scaleBox.count[numExperts],
            cols = d.scaleBox.count[numExperts + 1];
    int64_t rowBlock0 = d.scaleBox.lo[numExperts],
            colBlock0 = d.scaleBox.lo[numExperts + 1];
    // Every run of the box along its last atom (there the block row and
    // column, the expert and the target element move by fixed steps) that
    // has elements in the window: its E4M3 values read, multiplied (in f32,
    // as DeepSeek's weight_dequant does) and rounded once.
    size_t last = d.target.lo.size() - 1;
    int64_t run = d.target.count[last], stride = d.target.stride[last];
    int64_t outStep = flatStep(d.sides.out, w.sizes, last),
            inStep = flatStep(d.sides.in, w.sizes, last), expertStep = 0;
    for (size_t e = 0; e < numExperts; ++e)
      expertStep = d.sides.expert[e] == last ? 1
                                             : expertStep * d.scaleBox.count[e];
    values.resize(size_t(run));
    forEachRunInWindow(d.target, begin, end, [&](const std::vector<int64_t> &c,
                                                 int64_t i, int64_t at,
                                                 int64_t j0, int64_t j1) {
      int64_t lo, hi;
      for (const Job::Copy &copy : d.weightCopies)
        copy.box.run(copy.data, values.data(), i, i + run, lo, hi);
      int64_t expert = 0;
      for (size_t e = 0; e < numExperts; ++e) {
        size_t a = d.sides.expert[e];
        expert = expert * d.scaleBox.count[e] + (c[a] - d.target.lo[a]);
      }
      int64_t outIndex = flatIndex(d.sides.out, w.sizes, c),
              inIndex = flatIndex(d.sides.in, w.sizes, c);
      for (int64_t j = j0; j < j1; ++j) {
        int64_t row = (outIndex + j * outStep) / d.block - rowBlock0;
        int64_t col = (inIndex + j * inStep) / d.block - colBlock0;
        float product =
            e4m3[values[size_t(j)]] *
            scales[size_t(((expert + j * expertStep) * rows + row) * cols +
                          col)];
        storeFloat(product, t.dtype,
                   out + (at + j * stride - begin) * int64_t(size));
      }
    });
  }
}

bool Converter::fill(const Job &job, uint64_t offset, uint8_t *out, size_t n,
                     std::string &error) const {
  const RankTensor &t = *job.tensor;
  size_t size = byteSize(t.dtype);
  if (offset % size || n % size) {
    error = "a chunk splits an element";
    return false;
  }
  // Padding (vocabulary rows past the end) stays zero.
  if (job.padded || !job.dequants.empty())
    std::memset(out, 0, n);
  int64_t begin = int64_t(offset / size), end = begin + int64_t(n / size);
  // Dequantized pieces are computed a window at a time, which bounds the
  // memory a large FP8 tensor takes to its scales.
  if (!job.dequants.empty())
    dequantize(job, begin, end, out);
  for (const Job::Copy &c : job.copies) {
    int64_t readLo, readHi;
    c.box.run(c.data, out, begin, end, readLo, readHi);
    // What a streaming copy has read, later windows do not read again.
    if (c.box.streaming && c.file && readHi > readLo) {
      size_t element = byteSize(c.box.sourceType());
      SafetensorsFile::release(c.data + readLo * element,
                               uint64_t(readHi - readLo) * element);
    }
  }
  return true;
}

void Converter::adviseSparseReads(const std::vector<const Job *> &jobs) {
  // Read-ahead around a fault of a mapping reads far more than a short run
  // (a row-parallel slice of each row, an expert-tensor slice of each
  // expert's rows): it fetches the whole tensor for an eighth of it.
  struct Reads {
    uint64_t bytes = 0, tensorBytes = 0;
    int64_t shortestRun = INT64_MAX;
  };
  std::map<const uint8_t *, Reads> reads;
  auto count = [&](const SourceCopy &c, uint64_t tensorBytes) {
    if (!c.file)
      return;
    Reads &r = reads[c.data];
    r.bytes += uint64_t(c.box.size) * byteSize(c.box.sourceType());
    r.tensorBytes = tensorBytes;
    r.shortestRun = std::min(r.shortestRun, c.box.sourceRunBytes());
  };
  for (const Job *job : jobs) {
    std::map<const uint8_t *, uint64_t> sizes(job->sources.begin(),
                                              job->sources.end());
    for (const SourceCopy &c : job->copies)
      count(c, sizes[c.data]);
    for (const Job::Dequant &d : job->dequants) {
      for (const SourceCopy &c : d.weightCopies)
        count(c, sizes[c.data]);
      for (const SourceCopy &c : d.scaleCopies)
        count(c, sizes[c.data]);
    }
  }
  uint64_t page = uint64_t(::sysconf(_SC_PAGESIZE));
  for (const auto &[data, r] : reads) {
    if (r.shortestRun >= kSparseRun || 2 * r.bytes >= r.tensorBytes)
      continue;
    uintptr_t first = reinterpret_cast<uintptr_t>(data) / page * page;
    uintptr_t last = reinterpret_cast<uintptr_t>(data) + r.tensorBytes;
    ::madvise(reinterpret_cast<void *>(first), last - first, MADV_RANDOM);
  }
}

bool Converter::writeRank(
    int64_t rank, const std::string &path, std::string &error,
    const std::function<void(const ConvertProgress &)> &progress) {
  return writeRanks({rank}, {path}, error, progress);
}

bool Converter::writeRanks(
    const std::vector<int64_t> &ranks, const std::vector<std::string> &paths,
    std::string &error,
    const std::function<void(const ConvertProgress &)> &progress,
    const std::function<void(size_t)> &written,
    const WriterFactory &makeWriter) {
  std::vector<TargetFile> files;
  for (size_t f = 0; f < std::min(ranks.size(), paths.size()); ++f)
    files.push_back({ranks[f], paths[f], {}});
  return writeFiles(files, error, progress, written, makeWriter);
}

bool Converter::writeFiles(
    const std::vector<TargetFile> &targets, std::string &error,
    const std::function<void(const ConvertProgress &)> &progress,
    const std::function<void(size_t)> &written,
    const WriterFactory &makeWriter) {
  size_t files = targets.size();
  // Every tensor of every file is planned before anything is written.
  std::vector<std::vector<RankTensor>> tensors(files);
  std::vector<std::vector<Job>> jobs(files);
  ConvertProgress state;
  state.ranksTotal = int64_t(files);
  for (size_t f = 0; f < files; ++f) {
    tensors[f] = to.rankTensors(toConfig, targets[f].rank);
    if (!targets[f].tensors.empty()) {
      std::set<std::string> keep(targets[f].tensors.begin(),
                                 targets[f].tensors.end());
      tensors[f].erase(std::remove_if(tensors[f].begin(), tensors[f].end(),
                                      [&](const RankTensor &t) {
                                        return !keep.count(t.name);
                                      }),
                       tensors[f].end());
    }
    jobs[f] = std::vector<Job>(tensors[f].size());
    state.tensorsTotal += int64_t(tensors[f].size());
    for (size_t i = 0; i < tensors[f].size(); ++i) {
      if (!plan(tensors[f][i], jobs[f][i], error))
        return false;
      state.bytesTotal += jobs[f][i].size;
    }
  }
  std::vector<const Job *> planned;
  for (const std::vector<Job> &fileJobs : jobs)
    for (const Job &job : fileJobs)
      planned.push_back(&job);
  adviseSparseReads(planned);

  // Files are written several at a time, each on its own threads: writes
  // to one file take its lock, writes to different files run in parallel.
  // A failure stops the others; a writer removes its incomplete file.
  std::mutex mutex; // guards state, firstError and the callbacks
  std::string firstError;
  std::atomic<bool> failed{false};
  std::atomic<size_t> nextFile{0};
  size_t atOnce = std::max<size_t>(1, std::min<size_t>(numThreads, files));
  unsigned perFile = std::max(1u, numThreads / unsigned(atOnce));
  auto fail = [&](const std::string &message) {
    std::lock_guard<std::mutex> lock(mutex);
    if (!failed.exchange(true))
      firstError = message;
    return false;
  };
  // Source files, opened when first read from (-1 when they cannot be).
  std::map<const std::string *, int> fds;
  auto openFile = [&](const std::string *file) {
    std::lock_guard<std::mutex> lock(mutex);
    auto [it, added] = fds.emplace(file, -1);
    if (added)
      it->second = ::open(file->c_str(), O_RDONLY | O_CLOEXEC);
    return it->second;
  };
  // Each thread that works counts itself once per call.
  static std::atomic<uint64_t> calls{0};
  uint64_t call = ++calls;
  auto countThread = [&] {
    thread_local uint64_t counted = 0;
    if (counted == call)
      return;
    counted = call;
    std::lock_guard<std::mutex> lock(mutex);
    ++state.threads;
  };
  // Counts `n` bytes of `job` as done; the last release its sources.
  auto finish = [&](Job *job, uint64_t n) {
    countThread();
    if ((job->done += n) < job->size)
      return;
    for (const auto &[data, bytes] : job->sources)
      SafetensorsFile::release(data, bytes);
    std::vector<std::vector<float>>().swap(job->scales);
    std::vector<std::vector<uint8_t>>().swap(job->blocks);
    std::lock_guard<std::mutex> lock(mutex);
    state.bytesDone += job->size;
    ++state.tensorsDone;
    if (progress)
      progress(state);
  };
  auto writeFile = [&](size_t f) {
    std::unique_ptr<TensorFileWriter> made =
        makeWriter ? makeWriter(f) : std::make_unique<SafetensorsWriter>();
    TensorFileWriter &writer = *made;
    writer.setThreads(perFile);
    writer.setDirectIO(directIO);
    // Three chunks waiting on the disk per thread filling them kept the
    // disk busy in bench/convert; over all files at once, at most 24 (a
    // buffer of 6 MB each) and at least one per file.
    writer.setWaitingWrites(std::max<unsigned>(
        1, std::min<unsigned>(3 * perFile, 24 / unsigned(atOnce))));
    std::string err;
    // Each rank file of a sharded layout records the rank it holds;
    // addSource() checks it. An unsharded checkpoint (HF) has no ranks to
    // swap and stays as its framework writes it.
    if (!to.layout().mesh.empty())
      for (const auto &[key, value] : rankRecord(
               {to.layout().model, to.layout().backend, toConfig, targets[f].rank}))
        if (!writer.setMetadata(key, value, err))
          return fail(err);
    for (size_t i = 0; i < tensors[f].size(); ++i) {
      Job *job = &jobs[f][i];
      TensorFileWriter::FillFn fillFn = [&, job](uint64_t offset,
                                                  uint8_t *dst, size_t n,
                                                  std::string &fillError) {
        if (failed) {
          fillError = "stopped";
          return false;
        }
        if (!fill(*job, offset, dst, n, fillError))
          return false;
        finish(job, n);
        return true;
      };
      // Bytes that are a long run of a source file are copied from there
      // (short runs are cheaper to copy from the mapping).
      TensorFileWriter::SourceFn sourceFn = [&, job](uint64_t offset,
                                                      size_t &n, int &fd,
                                                      uint64_t &fileOffset) {
        size_t size = byteSize(job->tensor->dtype);
        int64_t from, count;
        if (failed || offset % size)
          return false;
        for (const Job::Copy &c : job->copies) {
          if (!c.box.locate(int64_t(offset / size), from, count))
            continue;
          if (!c.file)
            return false;
          if (uint64_t(count) * size < kMinFileCopy &&
              uint64_t(count) * size < n)
            return false;
          if ((fd = openFile(c.file)) < 0)
            return false;
          n = std::min(n, size_t(count) * size);
          fileOffset = c.fileOffset + uint64_t(from) * size;
          finish(job, n);
          return true;
        }
        return false;
      };
      if (!writer.add(tensors[f][i].name, tensors[f][i].dtype,
                      tensors[f][i].shape, std::move(fillFn),
                      std::move(sourceFn), err))
        return fail(err);
    }
    if (!writer.write(targets[f].path, err))
      return fail(err);
    std::lock_guard<std::mutex> lock(mutex);
    ++state.ranksDone;
    if (written)
      written(f);
    if (progress)
      progress(state);
    return true;
  };
  auto work = [&] {
    while (!failed) {
      size_t f = nextFile++;
      if (f >= files || !writeFile(f))
        return;
    }
  };
  runWorkers(atOnce, work);
  for (const auto &[file, fd] : fds)
    if (fd >= 0)
      ::close(fd);
  if (failed) {
    error = firstError;
    return false;
  }
  return true;
}

bool Converter::fillTensors(int64_t rank,
                            const std::vector<MemoryTarget> &targets,
                            std::string &error,
                            const std::set<std::string> *onlyParams) {
  std::vector<RankTensor> all = to.rankTensors(toConfig, rank);
  std::map<std::string, const RankTensor *> byName;
  for (const RankTensor &t : all)
    byName[t.name] = &t;
  const ModelLayout &m = to.layout();
  std::vector<RankTensor> tensors;
  tensors.reserve(targets.size());
  for (const MemoryTarget &target : targets) {
    auto it = byName.find(target.name);
    if (it == byName.end()) {
      error = "rank " + std::to_string(rank) + " of " + m.model + " on " +
              m.backend + " at " + toConfig.str() + " has no tensor '" +
              target.name + "'";
      return false;
    }
    RankTensor t = *it->second;
    int64_t elements = 1;
    for (int64_t s : t.shape)
      elements *= s;
    if (target.bytes != uint64_t(elements) * byteSize(t.dtype)) {
      error = "tensor '" + t.name + "' is " + shapeText(t.shape) + " " +
              std::string(safetensorsName(t.dtype)) + " (" +
              std::to_string(uint64_t(elements) * byteSize(t.dtype)) +
              " bytes), not " + std::to_string(target.bytes) + " bytes";
      return false;
    }
    if (onlyParams)
      t.pieces.erase(std::remove_if(t.pieces.begin(), t.pieces.end(),
                                    [&](const Piece &p) {
                                      return !onlyParams->count(
                                          m.params[size_t(p.param)].path);
                                    }),
                     t.pieces.end());
    tensors.push_back(std::move(t));
  }
  std::vector<Job> jobs(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (!plan(tensors[i], jobs[i], error))
      return false;
    if (onlyParams && !jobs[i].dequants.empty()) {
      error = "tensor '" + tensors[i].name + "' is dequantized from " +
              "quantized blocks, which an update of some parameters does "
              "not rewrite";
      return false;
    }
    // An update leaves what it does not hold as it was.
    if (onlyParams)
      jobs[i].padded = false;
  }
  std::vector<const Job *> planned;
  for (const Job &job : jobs)
    planned.push_back(&job);
  adviseSparseReads(planned);
  // Chunks of a few MB of every tensor, filled on the worker threads.
  auto chunkOf = [&](size_t i) {
    uint64_t size = byteSize(tensors[i].dtype);
    return std::max<uint64_t>(size, (4u << 20) / size * size);
  };
  std::vector<std::pair<size_t, uint64_t>> chunks;
  for (size_t i = 0; i < jobs.size(); ++i)
    for (uint64_t at = 0; at < jobs[i].size; at += chunkOf(i))
      chunks.push_back({i, at});
  std::atomic<size_t> next{0};
  std::atomic<bool> failed{false};
  std::mutex mutex;
  auto work = [&] {
    for (size_t c; !failed && (c = next++) < chunks.size();) {
      auto [i, at] = chunks[c];
      Job &job = jobs[i];
      size_t n = size_t(std::min(chunkOf(i), job.size - at));
      std::string err;
      if (!fill(job, at, targets[i].data + at, n, err)) {
        std::lock_guard<std::mutex> lock(mutex);
        if (!failed.exchange(true))
          error = err;
        return;
      }
      // The last chunk of a tensor releases the mapped pages it read.
      if ((job.done += n) == job.size)
        for (const auto &[data, bytes] : job.sources)
          SafetensorsFile::release(data, bytes);
    }
  };
  runWorkers(std::max<size_t>(1, std::min<size_t>(numThreads, chunks.size())),
             work);
  return !failed;
}

std::vector<Converter::PlannedCopy>
Converter::plannedCopies(int64_t rank,
                         const std::set<std::string> *onlyParams) const {
  std::vector<PlannedCopy> out;
  const ModelLayout &m = to.layout();
  for (const RankTensor &t : to.rankTensors(toConfig, rank))
    for (const Piece &pc : t.pieces) {
      const Param &param = m.params[size_t(pc.param)];
      auto it = views.find(sourceKey(m, t, pc, views));
      if ((onlyParams && !onlyParams->count(param.path)) || it == views.end())
        continue;
      for (const View &v : it->second) {
        PlannedCopy c{t.name,      v.rank, *v.tensor, param.path,
                      param.atoms, {},     {}};
        bool empty = false;
        for (size_t a = 0; a < pc.lo.size(); ++a) {
          int64_t lo = std::max(pc.lo[a], v.piece.lo[a]);
          int64_t hi = std::min(pc.lo[a] + pc.count[a],
                                v.piece.lo[a] + v.piece.count[a]);
          empty |= hi <= lo;
          c.lo.push_back(lo);
          c.count.push_back(hi - lo);
        }
        if (!empty)
          out.push_back(std::move(c));
      }
    }
  return out;
}
