//===- BlockScale.cpp - FP8 block scales of quantized weights -------------===//
//
// A block-quantized weight (DeepSeek-V3's FP8 checkpoints) is stored with
// one F32 scale per B x B block of its [out, in] matrix. The scales are
// parameters of their own, laid out block for block like the weight: a
// tensor holding a slice of the weight is accompanied by one holding the
// scales of the same blocks, so every split of the weight must fall on
// block boundaries. Backends that keep no scales hold the weights
// dequantized instead.
//
//===----------------------------------------------------------------------===//

#include "mdl/Runtime/Model/Layout.h"

#include <algorithm>

using namespace mdl;
using namespace mdl::rt;

std::string mdl::rt::blockAtomName(const std::vector<std::string> &atoms,
                                   int64_t block) {
  std::string name;
  for (size_t i = 0; i < atoms.size(); ++i)
    name += (i ? "," : "") + atoms[i];
  if (atoms.size() > 1)
    name = "(" + name + ")";
  return name + "/" + std::to_string(block);
}

WeightSides mdl::rt::weightSides(const Param &w) {
  WeightSides s;
  size_t lead = w.expert.empty() ? 0 : 1;
  size_t atom = 0;
  for (size_t a = 0; a < w.axisAtoms.size(); ++a)
    for (int j = 0; j < w.axisAtoms[a]; ++j, ++atom)
      (a < lead                                ? s.expert
       : a < lead + size_t(w.linearOutAxes) ? s.out
                                               : s.in)
          .push_back(atom);
  return s;
}

namespace {

/// The atoms of a weight's output and input sides.
struct Sides {
  std::vector<std::string> expert, out, in;
  std::vector<int64_t> outSizes, inSizes;
};

Sides sidesOf(const Param &w) {
  Sides s;
  WeightSides atoms = weightSides(w);
  for (size_t a : atoms.expert)
    s.expert.push_back(w.atoms[a]);
  for (size_t a : atoms.out)
    s.out.push_back(w.atoms[a]), s.outSizes.push_back(w.sizes[a]);
  for (size_t a : atoms.in)
    s.in.push_back(w.atoms[a]), s.inSizes.push_back(w.sizes[a]);
  return s;
}

int64_t product(const std::vector<int64_t> &v) {
  int64_t n = 1;
  for (int64_t x : v)
    n *= x;
  return n;
}

/// Builds the scale parameter of weight `w`.
void makeScale(const Param &w, Param &s) {
  Sides sides = sidesOf(w);
  int64_t b = w.scaleBlock;
  int64_t rows = product(sides.outSizes), cols = product(sides.inSizes);
  std::string outAtom = blockAtomName(sides.out, b);
  std::string inAtom = blockAtomName(sides.in, b);
  s.path = w.path + ".scale";
  s.dtype = DType::F32;
  s.atoms = sides.expert;
  s.sizes.clear();
  for (const std::string &e : sides.expert)
    s.sizes.push_back(w.sizes[size_t(w.atomIndex(e))]);
  s.atoms.push_back(outAtom);
  s.sizes.push_back((rows + b - 1) / b);
  s.atoms.push_back(inAtom);
  s.sizes.push_back((cols + b - 1) / b);
  s.axisAtoms.assign(sides.expert.size(), 1);
  s.axisAtoms.push_back(1);
  s.axisAtoms.push_back(1);
  s.placement = w.placement;
  s.expert = w.expert;
  s.unit = w.unit;
  s.source = w.source;
  // A split the scales cannot follow makes the configurations that use it
  // invalid, not the spec: a backend that never splits there is fine.
  for (const Split &split : w.splits) {
    Split t = split;
    t.why = split.why + " (FP8 scale blocks)";
    t.padMultiple = nullptr;
    t.replicateWhenFewer = false;
    auto isPrefix = [&](const std::vector<std::string> &side) {
      return split.atoms.size() <= side.size() &&
             std::equal(split.atoms.begin(), split.atoms.end(), side.begin());
    };
    bool onExpert = std::all_of(
        split.atoms.begin(), split.atoms.end(), [&](const std::string &a) {
          return std::find(sides.expert.begin(), sides.expert.end(), a) !=
                 sides.expert.end();
        });
    if (onExpert) {
      s.splits.push_back(t);
      continue;
    }
    bool out = isPrefix(sides.out);
    int64_t length = out ? rows : cols;
    t.atoms = {out ? outAtom : inAtom};
    if (split.padMultiple)
      t.indivisible = "a vocabulary-padded weight cannot keep block scales";
    else if (split.replicateWhenFewer) {
      // Up to as many ranks as heads the split is a plain one, which the
      // checks below (on the whole side) decide when it is applied.
      t.indivisible = "a weight replicated over more ranks than it has heads "
                      "cannot keep block scales";
      t.indivisibleAbove = 1;
      for (const std::string &a : split.atoms)
        t.indivisibleAbove *= w.sizes[size_t(w.atomIndex(a))];
      if (length % b != 0)
        t.indivisibleAbove = 0, t.indivisible =
            "its " + std::to_string(length) + " " + (out ? "rows" : "columns") +
            " end in a partial FP8 scale block of " + std::to_string(b);
    }
    else if (!out && !isPrefix(sides.in))
      t.indivisible = "it splits an inner dimension of the weight's rows or "
                      "columns, which the scale blocks do not follow";
    else if (length % b != 0)
      t.indivisible = "its " + std::to_string(length) + " " +
                      (out ? "rows" : "columns") +
                      " end in a partial FP8 scale block of " +
                      std::to_string(b);
    s.splits.push_back(t);
  }
}

/// The terms of a companion axis for one side (`outSide`: the rows) of the
/// weights a tensor holds: the side's atoms become one block atom, parts
/// their scales. `scaleOf` maps a weight to its scale parameter.
std::string blockTerms(const ModelLayout &m, const TensorSpec &t,
                       const std::vector<Term> &axis, bool outSide,
                       const std::vector<int> &scaleOf,
                       std::vector<Term> &result) {
  auto side = [&](int param) {
    Sides s = sidesOf(m.params[size_t(param)]);
    return std::make_pair(outSide ? s.out : s.in,
                          product(outSide ? s.outSizes : s.inSizes));
  };
  const char *what = outSide ? "output" : "input";
  std::vector<std::string> atoms;
  const Term *parts = nullptr;
  for (const Term &term : axis) {
    if (term.kind == Term::Atom)
      atoms.push_back(term.atom);
    else if (term.kind == Term::Parts && !parts && atoms.empty())
      parts = &term;
    else if (term.kind != Term::Unit)
      return "is not stored as whole rows and columns of its weights";
  }
  if (!parts) {
    // Every weight the tensor holds (its parts are on the other side) has
    // this side whole.
    int64_t block = 0;
    for (int param : tensorParams(t)) {
      const Param &w = m.params[size_t(param)];
      if (atoms != side(param).first)
        return std::string("does not hold the ") + what + " of " + w.path +
               " in order";
      if (block && block != w.scaleBlock)
        return "holds weights with scale blocks of different sizes";
      block = w.scaleBlock;
    }
    result.push_back(Term::makeAtom(blockAtomName(atoms, block)));
    return "";
  }
  Term blocked;
  blocked.kind = Term::Parts;
  int64_t block = 0;
  for (size_t k = 0; k < parts->parts.size(); ++k) {
    const Term::Part &p = parts->parts[k];
    if (p.isGroup())
      return "groups parts of weights, which their scales cannot follow";
    const Param &w = m.params[size_t(p.param)];
    std::vector<std::string> own;
    for (const Term &term : p.shape) {
      if (term.kind != Term::Atom)
        return "is not stored as whole rows and columns of its weights";
      own.push_back(term.atom);
    }
    if (!own.empty() && !atoms.empty())
      return "splits its parts' rows around shared dimensions";
    std::vector<std::string> whole = own;
    whole.insert(whole.end(), atoms.begin(), atoms.end());
    auto [sideAtoms, length] = side(p.param);
    if (whole != sideAtoms)
      return std::string("does not hold the whole ") + what + " of " +
             w.path + " in order";
    if (k + 1 < parts->parts.size() && length % w.scaleBlock != 0)
      return "holds " + w.path + ", whose " + std::to_string(length) +
             " rows end in a partial FP8 scale block, before other parts";
    if (block && block != w.scaleBlock)
      return "holds weights with scale blocks of different sizes";
    block = w.scaleBlock;
    Term::Part q;
    q.param = scaleOf[size_t(p.param)];
    if (!own.empty())
      q.shape.push_back(Term::makeAtom(blockAtomName(own, block)));
    blocked.parts.push_back(std::move(q));
  }
  result.push_back(std::move(blocked));
  if (!atoms.empty())
    result.push_back(Term::makeAtom(blockAtomName(atoms, block)));
  return "";
}

/// The companion of tensor `t` holding scaled weights; "" or why not.
std::string makeCompanion(const ModelLayout &m, const TensorSpec &t,
                          const std::vector<int> &scaleOf, TensorSpec &c) {
  if (t.offset != 0 || t.negExp || t.stored || !t.view.empty())
    return "transforms or reinterprets its weights, which their scales "
           "cannot follow";
  const Param &first = m.params[size_t(tensorParams(t).front())];
  // [E, out, in]; a per-expert family names E instead.
  size_t lead = !first.expert.empty() && t.axes.size() == 3 ? 1 : 0;
  if (t.axes.size() != lead + 2)
    return "is not stored as an [out, in] matrix" +
           std::string(lead ? " per expert" : "");
  c = t;
  c.name.push_back({NameSegment::Text, m.blockScaleSuffix, "", 0});
  c.param = t.param >= 0 ? scaleOf[size_t(t.param)] : -1;
  c.axes.resize(lead);
  for (int side = 0; side < 2; ++side) {
    std::vector<Term> axis;
    if (std::string why = blockTerms(m, t, t.axes[lead + size_t(side)],
                                     side == 0, scaleOf, axis);
        !why.empty())
      return why;
    c.axes.push_back(std::move(axis));
  }
  return "";
}

} // namespace

BlockScaleResult mdl::rt::addBlockScales(ModelLayout &m,
                                         DType dequantizedDType) {
  BlockScaleResult result;
  size_t numParams = m.params.size();
  std::vector<int> scaleOf(numParams, -1);
  for (size_t i = 0; i < numParams; ++i) {
    if (m.params[i].scaleBlock <= 0)
      continue;
    Param s;
    makeScale(m.params[i], s);
    s.scaleOf = int(i);
    scaleOf[i] = int(m.params.size());
    m.params[i].scale = scaleOf[i];
    m.params.push_back(std::move(s));
  }
  size_t numTensors = m.tensors.size();
  for (size_t t = 0; t < numTensors; ++t) {
    std::vector<int> held = tensorParams(m.tensors[t]);
    size_t scaled = size_t(std::count_if(held.begin(), held.end(), [&](int p) {
      return scaleOf[size_t(p)] >= 0;
    }));
    if (scaled == 0)
      continue;
    if (m.blockScaleSuffix.empty()) {
      m.tensors[t].dequantized = true;
      m.tensors[t].stored = dequantizedDType;
      continue;
    }
    if (scaled != held.size()) {
      result.errors.push_back(
          {int(t), "holds FP8 block-scaled weights with others"});
      continue;
    }
    TensorSpec c;
    if (std::string why = makeCompanion(m, m.tensors[t], scaleOf, c);
        !why.empty()) {
      result.errors.push_back({int(t), why});
      continue;
    }
    result.companionOf.push_back(int(t));
    m.tensors.push_back(std::move(c));
  }
  return result;
}
