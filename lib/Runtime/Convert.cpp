//===- Convert.cpp - Moving weights between layouts -----------------------===//

#include "mdl/Runtime/Convert.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <set>

using namespace mdl;
using namespace mdl::rt;

//===----------------------------------------------------------------------===//
// Values
//===----------------------------------------------------------------------===//

namespace {

float bitsToFloat(uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

uint32_t floatToBits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

float halfToFloat(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000) << 16;
  int exp = (h >> 10) & 0x1f;
  uint32_t mant = h & 0x3ff;
  if (exp == 0x1f)
    return bitsToFloat(sign | 0x7f800000 | (mant << 13));
  if (exp == 0) {
    float v = std::ldexp(float(mant), -24);
    return sign ? -v : v;
  }
  return bitsToFloat(sign | uint32_t(exp - 15 + 127) << 23 | mant << 13);
}

/// Rounds a float to bfloat16, nearest even.
uint16_t floatToBf16(float f) {
  uint32_t b = floatToBits(f);
  if ((b & 0x7f800000) == 0x7f800000) // inf, nan
    return uint16_t((b >> 16) | ((b & 0xffff) ? 0x40 : 0));
  uint32_t rounding = 0x7fff + ((b >> 16) & 1);
  return uint16_t((b + rounding) >> 16);
}

uint16_t floatToHalf(float f) {
  uint32_t b = floatToBits(f);
  uint16_t sign = uint16_t((b >> 16) & 0x8000);
  uint32_t absBits = b & 0x7fffffff;
  if (absBits >= 0x7f800000) // inf, nan
    return sign | 0x7c00 | (absBits > 0x7f800000 ? 0x200 : 0);
  float a = bitsToFloat(absBits);
  if (a >= 65520.0f) // rounds to infinity
    return sign | 0x7c00;
  if (a < 6.103515625e-05f) { // subnormal: a multiple of 2^-24
    float scaled = a * 16777216.0f; // exact
    float r = std::nearbyint(scaled); // the default mode rounds to even
    return sign | uint16_t(r);
  }
  uint32_t exp = (absBits >> 23) - 127 + 15;
  uint32_t mant = absBits & 0x7fffff;
  uint32_t h = exp << 10 | mant >> 13;
  uint32_t rest = mant & 0x1fff;
  if (rest > 0x1000 || (rest == 0x1000 && (h & 1)))
    ++h;
  return sign | uint16_t(h);
}

/// Rounds a double to a float that keeps the sticky information in its
/// last bit (round to odd), so that a second rounding to a narrower format
/// gives the correctly rounded result.
float toOddFloat(double d) {
  float f = float(d);
  if (double(f) == d || std::isnan(d) || std::isinf(f))
    return f;
  uint32_t b = floatToBits(f);
  if ((b & 1) == 0) {
    // Step toward d, which makes the last bit odd.
    float g = std::nextafter(f, d > double(f) ? INFINITY : -INFINITY);
    return g;
  }
  return f;
}

} // namespace

double mdl::rt::loadValue(DType t, const uint8_t *in) {
  switch (t) {
  case DType::BF16: {
    uint16_t h;
    std::memcpy(&h, in, 2);
    return bitsToFloat(uint32_t(h) << 16);
  }
  case DType::F16: {
    uint16_t h;
    std::memcpy(&h, in, 2);
    return halfToFloat(h);
  }
  case DType::F32: {
    float f;
    std::memcpy(&f, in, 4);
    return f;
  }
  case DType::F64: {
    double d;
    std::memcpy(&d, in, 8);
    return d;
  }
  case DType::I64: {
    int64_t i;
    std::memcpy(&i, in, 8);
    return double(i);
  }
  case DType::I32: {
    int32_t i;
    std::memcpy(&i, in, 4);
    return i;
  }
  default:
    return 0;
  }
}

void mdl::rt::storeValue(double v, DType t, uint8_t *out) {
  switch (t) {
  case DType::BF16: {
    uint16_t h = floatToBf16(toOddFloat(v));
    std::memcpy(out, &h, 2);
    return;
  }
  case DType::F16: {
    uint16_t h = floatToHalf(toOddFloat(v));
    std::memcpy(out, &h, 2);
    return;
  }
  case DType::F32: {
    float f = float(v);
    std::memcpy(out, &f, 4);
    return;
  }
  case DType::F64:
    std::memcpy(out, &v, 8);
    return;
  case DType::I64: {
    int64_t i = int64_t(std::llround(v));
    std::memcpy(out, &i, 8);
    return;
  }
  case DType::I32: {
    int32_t i = int32_t(std::lround(v));
    std::memcpy(out, &i, 4);
    return;
  }
  default:
    return;
  }
}

//===----------------------------------------------------------------------===//
// Strided copies
//===----------------------------------------------------------------------===//

int64_t mdl::rt::copyIntersection(const Piece &src, const uint8_t *srcData,
                                  DType srcType, int64_t srcOffset,
                                  const Piece &dst, uint8_t *dstData,
                                  DType dstType, int64_t dstOffset) {
  struct Dim {
    int64_t n, s, d; // extent, source stride, target stride
  };
  std::vector<Dim> dims;
  int64_t s0 = src.base, d0 = dst.base, total = 1;
  for (size_t a = 0; a < src.lo.size(); ++a) {
    int64_t lo = std::max(src.lo[a], dst.lo[a]);
    int64_t hi = std::min(src.lo[a] + src.count[a], dst.lo[a] + dst.count[a]);
    if (hi <= lo)
      return 0;
    s0 += (lo - src.lo[a]) * src.stride[a];
    d0 += (lo - dst.lo[a]) * dst.stride[a];
    total *= hi - lo;
    if (hi - lo > 1)
      dims.push_back({hi - lo, src.stride[a], dst.stride[a]});
  }
  // Target order, outermost first; then merge dimensions contiguous on
  // both sides into longer runs.
  std::sort(dims.begin(), dims.end(),
            [](const Dim &x, const Dim &y) { return x.d > y.d; });
  std::vector<Dim> merged;
  for (const Dim &dim : dims) {
    if (!merged.empty() && merged.back().d == dim.d * dim.n &&
        merged.back().s == dim.s * dim.n) {
      merged.back() = {merged.back().n * dim.n, dim.s, dim.d};
      continue;
    }
    merged.push_back(dim);
  }
  size_t srcSize = byteSize(srcType), dstSize = byteSize(dstType);
  bool bytes = srcType == dstType && srcOffset == dstOffset;
  Dim inner = merged.empty() ? Dim{1, 1, 1} : merged.back();
  if (!merged.empty())
    merged.pop_back();
  bool contiguous = bytes && inner.s == 1 && inner.d == 1;
  std::vector<int64_t> counter(merged.size(), 0);
  int64_t si = s0, di = d0;
  double shift = double(dstOffset) - double(srcOffset);
  for (;;) {
    if (contiguous) {
      std::memcpy(dstData + di * dstSize, srcData + si * srcSize,
                  size_t(inner.n) * srcSize);
    } else {
      for (int64_t k = 0; k < inner.n; ++k) {
        const uint8_t *from = srcData + (si + k * inner.s) * srcSize;
        uint8_t *to = dstData + (di + k * inner.d) * dstSize;
        if (bytes)
          std::memcpy(to, from, srcSize);
        else
          storeValue(loadValue(srcType, from) + shift, dstType, to);
      }
    }
    // The next run: advance the innermost outer counter that can.
    size_t level = merged.size();
    for (;;) {
      if (level == 0)
        return total;
      --level;
      if (++counter[level] < merged[level].n) {
        si += merged[level].s;
        di += merged[level].d;
        break;
      }
      si -= (merged[level].n - 1) * merged[level].s;
      di -= (merged[level].n - 1) * merged[level].d;
      counter[level] = 0;
    }
  }
}

//===----------------------------------------------------------------------===//
// Converter
//===----------------------------------------------------------------------===//

Converter::Converter(const Binding &from, const ParallelConfig &fromConfig,
                     const Binding &to, const ParallelConfig &toConfig)
    : from(from), to(to), fromConfig(fromConfig), toConfig(toConfig) {
  for (int64_t r = 0; r < Binding::numRanks(fromConfig); ++r)
    for (const RankTensor &t : from.rankTensors(fromConfig, r)) {
      if (t.copy)
        continue;
      for (const Piece &pc : t.pieces) {
        auto &h = holders[from.layout().params[size_t(pc.param)].path];
        if (h.empty() || h.back() != r)
          h.push_back(r);
      }
    }
}

static std::string shapeText(const std::vector<int64_t> &shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    s += (i ? "," : "") + std::to_string(shape[i]);
  return s + "]";
}

bool Converter::addSource(int64_t rank, std::shared_ptr<Checkpoint> ckpt,
                          std::string &error) {
  std::set<std::string> expected;
  for (const RankTensor &t : from.rankTensors(fromConfig, rank)) {
    expected.insert(t.name);
    const Checkpoint::TensorRef *ref = ckpt->find(t.name);
    if (!ref) {
      error = "the checkpoint of rank " + std::to_string(rank) +
              " has no tensor '" + t.name + "', which " +
              from.layout().model + " on " + from.layout().backend +
              " holds there";
      return false;
    }
    if (ref->info->shape != t.shape || ref->info->dtype != t.dtype) {
      error = "tensor '" + t.name + "' is " + shapeText(ref->info->shape) +
              " " + std::string(safetensorsName(ref->info->dtype)) +
              " in the checkpoint, but the spec says " + shapeText(t.shape) +
              " " + std::string(safetensorsName(t.dtype));
      return false;
    }
    if (t.copy)
      continue;
    const uint8_t *data = ckpt->data(*ref);
    for (const Piece &pc : t.pieces)
      views[from.layout().params[size_t(pc.param)].path].push_back(
          {data, t.dtype, t.offset, pc, rank});
  }
  for (const auto &[name, ref] : ckpt->tensors())
    if (!expected.count(name)) {
      error = "the checkpoint of rank " + std::to_string(rank) +
              " holds tensor '" + name + "', which " + from.layout().model +
              " on " + from.layout().backend + " does not describe there";
      return false;
    }
  keep.push_back(std::move(ckpt));
  return true;
}

std::vector<int64_t> Converter::sourcesOf(int64_t rank) const {
  std::set<int64_t> out;
  for (const RankTensor &t : to.rankTensors(toConfig, rank))
    for (const Piece &pc : t.pieces) {
      auto it = holders.find(to.layout().params[size_t(pc.param)].path);
      if (it != holders.end())
        out.insert(it->second.begin(), it->second.end());
    }
  return {out.begin(), out.end()};
}

bool Converter::fill(const RankTensor &t, uint8_t *out,
                     std::string &error) const {
  for (const Piece &target : t.pieces) {
    const std::string &path = to.layout().params[size_t(target.param)].path;
    auto it = views.find(path);
    int64_t covered = 0;
    if (it != views.end())
      for (const View &v : it->second) {
        if ((v.dtype == DType::F8E4M3 || v.dtype == DType::F8E5M2 ||
             t.dtype == DType::F8E4M3 || t.dtype == DType::F8E5M2) &&
            (v.dtype != t.dtype || v.offset != t.offset)) {
          error = "tensor '" + t.name + "' would convert 8-bit floats, " +
                  "which move as bytes only";
          return false;
        }
        covered += copyIntersection(v.piece, v.data, v.dtype, v.offset,
                                    target, out, t.dtype, t.offset);
      }
    if (covered < target.numElements()) {
      error = "no source holds all of " + path + " for tensor '" + t.name +
              "' (" + std::to_string(covered) + " of " +
              std::to_string(target.numElements()) + " elements)";
      return false;
    }
  }
  return true;
}

bool Converter::writeRank(
    int64_t rank, const std::string &path, std::string &error,
    const std::function<void(const ConvertProgress &)> &progress) {
  std::vector<RankTensor> tensors = to.rankTensors(toConfig, rank);
  SafetensorsWriter writer;
  ConvertProgress state;
  state.tensorsTotal = int64_t(tensors.size());
  for (const RankTensor &t : tensors) {
    int64_t n = 1;
    for (int64_t s : t.shape)
      n *= s;
    state.bytesTotal += uint64_t(n) * byteSize(t.dtype);
  }
  // Each tensor is built whole when the writer first asks for it, then
  // streamed; only one buffer is alive at a time.
  auto buffer = std::make_shared<std::vector<uint8_t>>();
  auto failure = std::make_shared<std::string>();
  for (const RankTensor &t : tensors) {
    const RankTensor *tp = &t;
    SafetensorsWriter::FillFn fillFn = [this, tp, buffer, failure, &state,
                                        &progress](uint64_t offset,
                                                   uint8_t *dst, size_t n,
                                                   std::string &err) {
      size_t size = 1;
      for (int64_t s : tp->shape)
        size *= size_t(s);
      size *= byteSize(tp->dtype);
      if (offset == 0) {
        // Padding (vocabulary rows past the end) stays zero.
        buffer->assign(size, 0);
        if (!fill(*tp, buffer->data(), err)) {
          *failure = err;
          return false;
        }
      }
      std::memcpy(dst, buffer->data() + offset, n);
      if (offset + n == size) {
        state.bytesDone += size;
        ++state.tensorsDone;
        buffer->clear();
        buffer->shrink_to_fit();
        if (progress)
          progress(state);
      }
      return true;
    };
    if (!writer.add(t.name, t.dtype, t.shape, fillFn, error))
      return false;
  }
  if (!writer.write(path, error)) {
    if (!failure->empty())
      error = *failure;
    return false;
  }
  return true;
}
