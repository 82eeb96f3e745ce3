//===- Copy.h - Values and strided copies between views ---------*- C++ -*-===//
//
// Plain C++17. The element-level half of conversion: values loaded from and
// stored to each dtype (rounded once, to nearest even), and the copy of the
// intersection of two boxes of one parameter between two strided views (see
// Plan.h), as runs along the innermost dimension. A copy between equal
// dtypes and value offsets moves bytes; otherwise each value is converted.
//
//===----------------------------------------------------------------------===//

#ifndef MDL_RUNTIME_CONVERT_COPY_H
#define MDL_RUNTIME_CONVERT_COPY_H

#include "mdl/Runtime/Base/DType.h"
#include "mdl/Runtime/Model/Plan.h"

#include <cstdint>
#include <vector>

namespace mdl::rt {

/// Copies the intersection of two boxes of one parameter from `src` (data
/// of dtype `srcType`, values stored plus `srcOffset`) to `dst`. With the
/// same dtype and offset, bytes are moved; otherwise values are converted
/// (floats only; F8 moves as bytes only). Only the target elements in
/// [windowBegin, windowEnd) are written, and `dstData` holds element
/// `windowBegin`. Returns the number of elements written.
int64_t copyIntersection(const Piece &src, const uint8_t *srcData,
                         DType srcType, int64_t srcOffset, const Piece &dst,
                         uint8_t *dstData, DType dstType, int64_t dstOffset,
                         int64_t windowBegin = 0,
                         int64_t windowEnd = INT64_MAX);

/// Rounds `v` to `t` (round to nearest even, once) and stores it at `out`.
void storeValue(double v, DType t, uint8_t *out);
double loadValue(DType t, const uint8_t *in);

/// `f` rounded to bfloat16 (to nearest even), as its bits.
uint16_t floatToBf16(float f);
/// The value of an FP8 E4M3 (fn) byte.
double e4m3ToDouble(uint8_t b);

/// The copy of the intersection of a source and a target box of one
/// parameter, as runs along the innermost dimension, run for a window of
/// the target's elements at a time.
class BoxCopy {
public:
  /// False when the boxes do not intersect. A side with `negExp` stores
  /// -exp of its values (and no offset): the source's are read as
  /// log(-stored), the target's written as -exp(value), in double.
  bool init(const Piece &src, DType srcType, int64_t srcOffset,
            const Piece &dst, DType dstType, int64_t dstOffset,
            bool srcNegExp = false, bool dstNegExp = false);
  /// Copies the target elements in [begin, end) (`dst` holds element
  /// `begin`) and returns their number; the source elements read are then
  /// in [readLo, readHi).
  int64_t run(const uint8_t *src, uint8_t *dst, int64_t begin, int64_t end,
              int64_t &readLo, int64_t &readHi) const;

  /// For a byte copy whose runs are contiguous: whether target element
  /// `at` is in a run, and then the source element it comes from and how
  /// many elements follow it in the run.
  bool locate(int64_t at, int64_t &from, int64_t &count) const;
  DType sourceType() const { return srcType; }
  /// The bytes of the source each run reads contiguously.
  int64_t sourceRunBytes() const {
    return (inner.s == 1 ? inner.n : 1) * int64_t(byteSize(srcType));
  }

  int64_t size = 0;
  /// The source is read in increasing order as the target is written, so
  /// each window reads past what the earlier ones read.
  bool streaming = false;

private:
  struct Dim {
    int64_t n, s, d; // extent, source stride, target stride
  };
  std::vector<Dim> outer; // outermost first
  Dim inner{1, 1, 1};
  int64_t s0 = 0, d0 = 0, runSpan = 0;
  DType srcType = DType::BF16, dstType = DType::BF16;
  double shift = 0;
  bool srcNegExp = false, dstNegExp = false;
  bool bytes = false, contiguous = false, ordered = false;
};

} // namespace mdl::rt

#endif // MDL_RUNTIME_CONVERT_COPY_H
