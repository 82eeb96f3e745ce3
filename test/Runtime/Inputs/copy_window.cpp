// Random strided copies: copyIntersection over a whole target tensor equals
// an element-by-element reference, and the same copy done one window at a
// time (as mdl-convert's worker threads fill chunks of a file) equals the
// whole copy. Prints the number of cases and of mismatches.

#include "mdl/Runtime/Convert/Copy.h"

#include <cstdio>
#include <algorithm>
#include <cstring>
#include <random>

using namespace mdl;
using namespace mdl::rt;

namespace {

std::mt19937_64 rng(42);

int64_t uniform(int64_t lo, int64_t hi) { // [lo, hi]
  return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
}

/// A box of a parameter with `extents`, placed in a tensor whose axes are
/// the parameter's in a random order, each with room around the box.
struct Placed {
  Piece piece;
  int64_t elements = 1;
};

Placed place(const std::vector<int64_t> &extents) {
  size_t atoms = extents.size();
  Placed p;
  std::vector<int64_t> size(atoms), at(atoms), order(atoms);
  for (size_t a = 0; a < atoms; ++a) {
    int64_t lo = uniform(0, extents[a] - 1);
    p.piece.lo.push_back(lo);
    p.piece.count.push_back(uniform(1, extents[a] - lo));
    size[a] = p.piece.count[a] + uniform(0, 2);
    at[a] = uniform(0, size[a] - p.piece.count[a]);
    order[a] = int64_t(a);
  }
  std::shuffle(order.begin(), order.end(), rng);
  p.piece.stride.assign(atoms, 0);
  for (size_t k = atoms; k-- > 0;) {
    p.piece.stride[size_t(order[k])] = p.elements;
    p.elements *= size[size_t(order[k])];
  }
  for (size_t a = 0; a < atoms; ++a)
    p.piece.base += at[a] * p.piece.stride[a];
  p.piece.param = 0;
  return p;
}

/// The reference: every element of the intersection, one at a time.
void reference(const Piece &src, const uint8_t *s, DType st, int64_t so,
               const Piece &dst, uint8_t *d, DType dt, int64_t dof) {
  size_t atoms = src.lo.size();
  std::vector<int64_t> lo(atoms), hi(atoms);
  for (size_t a = 0; a < atoms; ++a) {
    lo[a] = std::max(src.lo[a], dst.lo[a]);
    hi[a] = std::min(src.lo[a] + src.count[a], dst.lo[a] + dst.count[a]);
    if (hi[a] <= lo[a])
      return;
  }
  std::vector<int64_t> i = lo;
  for (;;) {
    int64_t si = src.base, di = dst.base;
    for (size_t a = 0; a < atoms; ++a) {
      si += (i[a] - src.lo[a]) * src.stride[a];
      di += (i[a] - dst.lo[a]) * dst.stride[a];
    }
    storeValue(loadValue(st, s + si * byteSize(st)) + double(dof - so), dt,
               d + di * byteSize(dt));
    size_t a = atoms;
    while (a > 0 && ++i[a - 1] == hi[a - 1]) {
      i[a - 1] = lo[a - 1];
      --a;
    }
    if (a == 0)
      return;
  }
}

} // namespace

int main() {
  int cases = 0, mismatches = 0;
  const DType types[] = {DType::BF16, DType::F32, DType::F64};
  for (int c = 0; c < 3000; ++c) {
    std::vector<int64_t> extents(size_t(uniform(1, 4)));
    for (int64_t &e : extents)
      e = uniform(1, 9);
    Placed src = place(extents), dst = place(extents);
    DType st = types[uniform(0, 2)], dt = uniform(0, 1) ? st : types[uniform(0, 2)];
    int64_t so = 0, dof = uniform(0, 3) ? 0 : 1;
    // Source values that every dtype holds exactly: small integers.
    std::vector<uint8_t> s(size_t(src.elements) * byteSize(st));
    for (int64_t k = 0; k < src.elements; ++k)
      storeValue(double(uniform(0, 100)), st, s.data() + k * byteSize(st));
    size_t bytes = size_t(dst.elements) * byteSize(dt);
    std::vector<uint8_t> want(bytes, 0), whole(bytes, 0), windows(bytes, 0);
    reference(src.piece, s.data(), st, so, dst.piece, want.data(), dt, dof);
    int64_t n = copyIntersection(src.piece, s.data(), st, so, dst.piece,
                                 whole.data(), dt, dof);
    int64_t m = 0;
    for (int64_t begin = 0; begin < dst.elements;) {
      int64_t end = std::min(dst.elements, begin + uniform(1, 12));
      m += copyIntersection(src.piece, s.data(), st, so, dst.piece,
                            windows.data() + begin * byteSize(dt), dt, dof,
                            begin, end);
      begin = end;
    }
    ++cases;
    if (whole != want || windows != want || n != m) {
      ++mismatches;
      if (mismatches <= 5)
        std::printf("mismatch in case %d (%zu atoms; copied %lld, in windows "
                    "%lld)\n",
                    c, extents.size(), (long long)n, (long long)m);
    }
  }
  std::printf("%d cases, %d mismatches\n", cases, mismatches);
  return mismatches ? 1 : 0;
}
