//===- Copy.cpp - Values and strided copies between views -----------------===//

#include "mdl/Runtime/Convert/Copy.h"

#include <algorithm>
#include <cmath>
#include <cstring>

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
} // namespace

uint16_t mdl::rt::floatToBf16(float f) {
  uint32_t b = floatToBits(f);
  if ((b & 0x7f800000) == 0x7f800000) // inf, nan
    return uint16_t((b >> 16) | ((b & 0xffff) ? 0x40 : 0));
  uint32_t rounding = 0x7fff + ((b >> 16) & 1);
  return uint16_t((b + rounding) >> 16);
}

namespace {

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

/// E4M3 as DeepSeek's checkpoints store it (the "fn" variant: no
/// infinities, S.1111.111 is NaN).
} // namespace

double mdl::rt::e4m3ToDouble(uint8_t b) {
  int exp = (b >> 3) & 0xf, mant = b & 7;
  double v = exp == 0xf && mant == 7 ? NAN
             : exp == 0             ? std::ldexp(mant, -9)
                                    : std::ldexp(8 + mant, exp - 10);
  return (b & 0x80) ? -v : v;
}

namespace {

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

/// A `T` read from, or written to, unaligned bytes.
template <typename T> T load(const uint8_t *in) {
  T v;
  std::memcpy(&v, in, sizeof v);
  return v;
}
template <typename T> void store(T v, uint8_t *out) {
  std::memcpy(out, &v, sizeof v);
}

} // namespace

double mdl::rt::loadValue(DType t, const uint8_t *in) {
  switch (t) {
  case DType::BF16:
    return bitsToFloat(uint32_t(load<uint16_t>(in)) << 16);
  case DType::F16:
    return halfToFloat(load<uint16_t>(in));
  case DType::F32:
    return load<float>(in);
  case DType::F64:
    return load<double>(in);
  case DType::I64:
    return double(load<int64_t>(in));
  case DType::I32:
    return load<int32_t>(in);
  case DType::F8E4M3:
    return e4m3ToDouble(*in);
  case DType::F8E5M2:
    return halfToFloat(uint16_t(*in) << 8); // E5M2 is the top byte of F16
  default:
    return 0;
  }
}

void mdl::rt::storeValue(double v, DType t, uint8_t *out) {
  switch (t) {
  case DType::BF16:
    return store(floatToBf16(toOddFloat(v)), out);
  case DType::F16:
    return store(floatToHalf(toOddFloat(v)), out);
  case DType::F32:
    return store(float(v), out);
  case DType::F64:
    return store(v, out);
  case DType::I64:
    return store(int64_t(std::llround(v)), out);
  case DType::I32:
    return store(int32_t(std::lround(v)), out);
  default:
    return;
  }
}

//===----------------------------------------------------------------------===//
// Strided copies
//===----------------------------------------------------------------------===//

namespace {

/// Whether the strides of `dims` (outermost first, then `inner`) each
/// exceed the span of the dimensions inside them, on the side `stride`
/// picks: then the runs come in increasing order on that side.
template <typename Dim, typename Stride>
bool nests(const std::vector<Dim> &dims, const Dim &inner, Stride stride) {
  int64_t span = (inner.n - 1) * stride(inner);
  bool ok = stride(inner) > 0;
  for (size_t k = dims.size(); k-- > 0;) {
    ok = ok && stride(dims[k]) > span;
    span += (dims[k].n - 1) * stride(dims[k]);
  }
  return ok;
}

} // namespace

bool BoxCopy::init(const Piece &src, DType srcType, int64_t srcOffset,
                   const Piece &dst, DType dstType, int64_t dstOffset,
                   bool srcNegExp, bool dstNegExp) {
  std::vector<Dim> dims;
  s0 = src.base;
  d0 = dst.base;
  size = 1;
  for (size_t a = 0; a < src.lo.size() && a < dst.lo.size(); ++a) {
    int64_t lo = std::max(src.lo[a], dst.lo[a]);
    int64_t hi = std::min(src.lo[a] + src.count[a], dst.lo[a] + dst.count[a]);
    if (hi <= lo)
      return false;
    s0 += (lo - src.lo[a]) * src.stride[a];
    d0 += (lo - dst.lo[a]) * dst.stride[a];
    size *= hi - lo;
    if (hi - lo > 1)
      dims.push_back({hi - lo, src.stride[a], dst.stride[a]});
  }
  // Target order, outermost first; then merge dimensions contiguous on
  // both sides into longer runs.
  std::sort(dims.begin(), dims.end(),
            [](const Dim &x, const Dim &y) { return x.d > y.d; });
  outer.clear();
  for (const Dim &dim : dims) {
    if (!outer.empty() && outer.back().d == dim.d * dim.n &&
        outer.back().s == dim.s * dim.n) {
      outer.back() = {outer.back().n * dim.n, dim.s, dim.d};
      continue;
    }
    outer.push_back(dim);
  }
  inner = outer.empty() ? Dim{1, 1, 1} : outer.back();
  if (!outer.empty())
    outer.pop_back();
  this->srcType = srcType;
  this->dstType = dstType;
  shift = double(dstOffset) - double(srcOffset);
  this->srcNegExp = srcNegExp;
  this->dstNegExp = dstNegExp;
  bytes = srcType == dstType && srcOffset == dstOffset &&
          srcNegExp == dstNegExp;
  contiguous = bytes && inner.s == 1 && inner.d == 1;
  runSpan = (inner.n - 1) * inner.d;
  // In target order, as in any view of a tensor, runs before a window are
  // skipped and the copy stops after it.
  ordered = nests(outer, inner, [](const Dim &x) { return x.d; });
  streaming = ordered && nests(outer, inner, [](const Dim &x) { return x.s; });
  return true;
}

bool BoxCopy::locate(int64_t at, int64_t &from, int64_t &count) const {
  if (!contiguous || !ordered || at < d0)
    return false;
  int64_t rest = at - d0, si = s0;
  for (const Dim &dim : outer) {
    int64_t c = std::min(rest / dim.d, dim.n - 1);
    si += c * dim.s;
    rest -= c * dim.d;
  }
  if (rest >= inner.n)
    return false;
  from = si + rest;
  count = inner.n - rest;
  return true;
}

int64_t BoxCopy::run(const uint8_t *src, uint8_t *dst, int64_t begin,
                     int64_t end, int64_t &readLo, int64_t &readHi) const {
  size_t srcSize = byteSize(srcType), dstSize = byteSize(dstType);
  std::vector<int64_t> counter(outer.size(), 0);
  int64_t si = s0, di = d0, copied = 0;
  readLo = INT64_MAX;
  readHi = INT64_MIN;
  if (ordered && begin > d0) {
    int64_t rest = begin - d0;
    for (size_t k = 0; k < outer.size(); ++k) {
      int64_t c = std::min(rest / outer[k].d, outer[k].n - 1);
      counter[k] = c;
      si += c * outer[k].s;
      di += c * outer[k].d;
      rest -= c * outer[k].d;
    }
  }
  // The next run: advance the innermost outer counter that can.
  auto advance = [&] {
    for (size_t level = outer.size(); level-- > 0;) {
      if (++counter[level] < outer[level].n) {
        si += outer[level].s;
        di += outer[level].d;
        return true;
      }
      si -= (outer[level].n - 1) * outer[level].s;
      di -= (outer[level].n - 1) * outer[level].d;
      counter[level] = 0;
    }
    return false;
  };
  do {
    if (ordered && di >= end)
      break;
    // The elements of the run inside the window: [k0, k1).
    int64_t k0 = 0, k1 = inner.n;
    if (inner.d > 0) {
      if (di < begin)
        k0 = (begin - di + inner.d - 1) / inner.d;
      if (di + runSpan >= end)
        k1 = std::min(k1, std::max<int64_t>(0, end - di + inner.d - 1) /
                              inner.d);
    }
    if (k0 >= k1)
      continue;
    int64_t first = si + k0 * inner.s, last = si + (k1 - 1) * inner.s;
    readLo = std::min(readLo, std::min(first, last));
    readHi = std::max(readHi, std::max(first, last) + 1);
    if (contiguous) {
      std::memcpy(dst + (di + k0 - begin) * dstSize, src + first * srcSize,
                  size_t(k1 - k0) * srcSize);
      copied += k1 - k0;
      continue;
    }
    for (int64_t k = k0; k < k1; ++k) {
      int64_t at = di + k * inner.d;
      if (at < begin || at >= end)
        continue;
      const uint8_t *from = src + (si + k * inner.s) * srcSize;
      uint8_t *to = dst + (at - begin) * dstSize;
      if (bytes) {
        std::memcpy(to, from, srcSize);
      } else {
        double v = loadValue(srcType, from);
        if (srcNegExp)
          v = std::log(-v);
        v += shift;
        if (dstNegExp)
          v = -std::exp(v);
        storeValue(v, dstType, to);
      }
      ++copied;
    }
  } while (advance());
  if (readLo > readHi)
    readLo = readHi = 0;
  return copied;
}

int64_t mdl::rt::copyIntersection(const Piece &src, const uint8_t *srcData,
                                  DType srcType, int64_t srcOffset,
                                  const Piece &dst, uint8_t *dstData,
                                  DType dstType, int64_t dstOffset,
                                  int64_t windowBegin, int64_t windowEnd) {
  BoxCopy copy;
  if (!copy.init(src, srcType, srcOffset, dst, dstType, dstOffset))
    return 0;
  int64_t lo, hi;
  return copy.run(srcData, dstData, windowBegin, windowEnd, lo, hi);
}
