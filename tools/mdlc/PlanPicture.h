//===- PlanPicture.h - Pictures of what each rank holds --------*- C++ -*-===//
//
// `mdlc plan --format=svg|diagram --tensor REGEX`: for each tensor whose
// name matches, one bar per rank holding it, as long as the rank's tensor
// has rows (its first dimension), coloured by the parameter (part of a
// fused tensor) that fills each run of rows and labelled with the part of
// the parameter's box the rank holds. Tensors every rank holds alike are
// marked replicated. SVG for people, a text diagram for terminals and
// tests.
//
//===----------------------------------------------------------------------===//

#ifndef MDLC_PLANPICTURE_H
#define MDLC_PLANPICTURE_H

#include "mdl/Runtime/Model/Layout.h"
#include "mdl/Runtime/Model/Plan.h"

#include <string>
#include <vector>

namespace mdl {

/// The row runs of a tensor's first dimension that a piece fills, merged
/// and sorted; empty when they cannot be told (more than `maxRuns` runs,
/// or strides that do not fall on rows). A 1-D tensor has rows of one
/// element.
std::vector<std::pair<int64_t, int64_t>>
rowsOf(const rt::Piece &p, std::vector<int64_t> shape, int64_t maxRuns = 64);

class PlanPicture {
public:
  PlanPicture(const rt::ModelLayout &m, std::string title)
      : m(m), title(std::move(title)) {}
  /// Adds tensor `lt` of rank `rank` (described by `who`, "tp 1, ep 0"),
  /// shown as `name`; `group` keeps apart tensors of different pipeline
  /// stages that share a local name.
  void add(const std::string &group, const std::string &name, int64_t rank,
           const std::string &who, const rt::LocalTensor &lt);
  bool empty() const { return tensors.empty(); }
  std::string svg() const;
  std::string diagram() const;

private:
  struct Segment {
    int64_t lo, hi;
    int param;
  };
  struct Row {
    int64_t rank;
    std::string who;
    int64_t rows;
    std::vector<Segment> segments;
    /// The boxes held, to label parts and tell replicated tensors.
    std::vector<rt::Piece> pieces;
  };
  struct Tensor {
    std::string key, name, shape;
    bool copy = false;
    std::vector<Row> rows;
    /// Parameters in order of appearance, each with its colour's index.
    std::vector<int> params;
    bool replicated() const;
  };
  std::string label(const Row &row, int param) const;

  const rt::ModelLayout &m;
  std::string title;
  std::vector<Tensor> tensors;
};

} // namespace mdl

#endif // MDLC_PLANPICTURE_H
