//===- Mxfp4.cpp - MXFP4 weights: packed E2M1 blocks and E8M0 scales ------===//
//
// An MXFP4 weight (GPT-OSS's experts) is stored, per row of its [out, in]
// matrix, in blocks of 32 inputs: 16 bytes holding 32 E2M1 values two a
// byte, and one E8M0 scale byte. The blocks and the scales are parameters
// of their own, laid out like the weight with its input side in blocks: a
// backend that keeps MXFP4 holds them in two tensors where the others hold
// the weight, and every split of the input side must fall on block
// boundaries. Backends that keep no MXFP4 hold the weight dequantized.
//
//===----------------------------------------------------------------------===//

#include "mdl/Runtime/Model/Layout.h"

#include <algorithm>

using namespace mdl;
using namespace mdl::rt;

namespace {

/// The bytes of one block (32 four-bit values).
constexpr int64_t kBlockBytes = kMxfp4Block / 2;

/// The atom of a block's bytes, after the block atom of the input side.
std::string bytesAtomName() { return std::to_string(kBlockBytes); }

/// Builds the blocks (`bytes`) or the scales parameter of MXFP4 weight `w`.
void makePart(const Param &w, bool bytes, Param &p) {
  WeightSides sides = weightSides(w);
  std::vector<std::string> in;
  int64_t cols = 1;
  for (size_t a : sides.in)
    in.push_back(w.atoms[a]), cols *= w.sizes[a];
  std::string blockAtom = blockAtomName(in, kMxfp4Block);
  p.path = w.path + (bytes ? ".blocks" : ".scales");
  p.dtype = DType::U8;
  size_t kept = sides.expert.size() + sides.out.size();
  p.atoms.assign(w.atoms.begin(), w.atoms.begin() + long(kept));
  p.sizes.assign(w.sizes.begin(), w.sizes.begin() + long(kept));
  // The expert and output axes as declared, then the input's blocks.
  size_t atoms = 0;
  for (int n : w.axisAtoms) {
    if (atoms >= kept)
      break;
    p.axisAtoms.push_back(n);
    atoms += size_t(n);
  }
  p.atoms.push_back(blockAtom);
  p.sizes.push_back(cols / kMxfp4Block);
  p.axisAtoms.push_back(1);
  if (bytes) {
    p.atoms.push_back(bytesAtomName());
    p.sizes.push_back(kBlockBytes);
    p.axisAtoms.push_back(1);
  }
  p.placement = w.placement;
  p.expert = w.expert;
  p.unit = w.unit;
  p.source = w.source;
  // Splits of the experts and the outputs are the weight's; a split of the
  // inputs splits the blocks, whole, or makes the configurations that use
  // it invalid (not the spec: a backend that never splits there is fine).
  for (const Split &split : w.splits) {
    auto onSide = [&](const std::vector<size_t> &side) {
      return std::all_of(split.atoms.begin(), split.atoms.end(),
                         [&](const std::string &a) {
                           return std::any_of(
                               side.begin(), side.end(),
                               [&](size_t i) { return w.atoms[i] == a; });
                         });
    };
    if (onSide(sides.expert) || onSide(sides.out)) {
      p.splits.push_back(split);
      continue;
    }
    Split t = split;
    t.why = split.why + " (MXFP4 blocks)";
    t.atoms = {blockAtom};
    t.padMultiple = nullptr;
    t.replicateWhenFewer = false;
    bool prefix = split.atoms.size() <= in.size() &&
                  std::equal(split.atoms.begin(), split.atoms.end(),
                             in.begin());
    if (split.padMultiple)
      t.indivisible = "a vocabulary-padded weight cannot be MXFP4";
    else if (split.replicateWhenFewer)
      t.indivisible = "a weight replicated over more ranks than it has "
                      "heads cannot keep MXFP4 blocks";
    else if (!prefix)
      t.indivisible = "it splits an inner dimension of the weight's inputs, "
                      "which the MXFP4 blocks do not follow";
    p.splits.push_back(t);
  }
}

/// Replaces, in the terms of `axis`, each part's weight with its blocks or
/// scales parameter. Returns "" or why it cannot.
std::string mapParts(std::vector<Term> &axis, const ModelLayout &m,
                     bool bytes) {
  for (Term &term : axis) {
    if (term.kind == Term::Product)
      if (std::string why = mapParts(term.children, m, bytes); !why.empty())
        return why;
    if (term.kind != Term::Parts)
      continue;
    for (Term::Part &part : term.parts) {
      if (part.isGroup())
        return "groups parts of MXFP4 weights, which their blocks cannot "
               "follow";
      const Param &w = m.params[size_t(part.param)];
      part.param = bytes ? w.mxfp4Blocks : w.mxfp4Scales;
    }
  }
  return "";
}

/// Rewrites tensor `t`, which holds only MXFP4 weights as an [out, in]
/// matrix (per expert), into the tensor of their blocks (`bytes`) or of
/// their scales. Returns "" or why it cannot.
std::string rewrite(const ModelLayout &m, TensorSpec &t, bool bytes) {
  if (t.offset != 0 || t.negExp || t.stored || !t.view.empty() ||
      t.splitAxis)
    return "transforms or reinterprets its weights, which their MXFP4 "
           "blocks cannot follow";
  std::vector<int> held = tensorParams(t);
  const Param &first = m.params[size_t(held.front())];
  WeightSides sides = weightSides(first);
  std::vector<std::string> in;
  for (size_t a : sides.in)
    in.push_back(first.atoms[a]);
  for (int param : held) {
    const Param &w = m.params[size_t(param)];
    WeightSides s = weightSides(w);
    std::vector<std::string> own;
    for (size_t a : s.in)
      own.push_back(w.atoms[a]);
    if (own != in)
      return "holds MXFP4 weights with different inputs";
  }
  // The inputs, in order, are the last axis, and only there.
  std::vector<std::string> last;
  for (const Term &term : t.axes.back()) {
    if (term.kind != Term::Atom)
      return "is not stored as an [out, in] matrix of its MXFP4 weights "
             "(its last axis must be their inputs)";
    last.push_back(term.atom);
  }
  if (last != in)
    return "is not stored as an [out, in] matrix of its MXFP4 weights "
           "(its last axis must be their inputs)";
  std::string blockAtom = blockAtomName(in, kMxfp4Block);
  t.axes.back() = {Term::makeAtom(blockAtom)};
  if (bytes) {
    if (m.mxfp4BytesAxis)
      t.axes.push_back({Term::makeAtom(bytesAtomName())});
    else
      t.axes.back().push_back(Term::makeAtom(bytesAtomName()));
  }
  for (size_t a = 0; a + 1 < t.axes.size(); ++a)
    if (std::string why = mapParts(t.axes[a], m, bytes); !why.empty())
      return why;
  if (t.param >= 0) {
    const Param &w = m.params[size_t(t.param)];
    t.param = bytes ? w.mxfp4Blocks : w.mxfp4Scales;
  }
  const std::string &suffix =
      bytes ? m.mxfp4BlocksSuffix : m.mxfp4ScalesSuffix;
  if (!suffix.empty())
    t.name.push_back({NameSegment::Text, suffix, "", 0});
  return "";
}

} // namespace

BlockScaleResult mdl::rt::addMxfp4(ModelLayout &m) {
  BlockScaleResult result;
  size_t numParams = m.params.size();
  for (size_t i = 0; i < numParams; ++i) {
    if (!m.params[i].mxfp4)
      continue;
    for (bool bytes : {true, false}) {
      Param p;
      makePart(m.params[i], bytes, p);
      p.mxfp4Of = int(i);
      (bytes ? m.params[i].mxfp4Blocks : m.params[i].mxfp4Scales) =
          int(m.params.size());
      m.params.push_back(std::move(p));
    }
  }
  size_t numTensors = m.tensors.size();
  for (size_t t = 0; t < numTensors; ++t) {
    std::vector<int> held = tensorParams(m.tensors[t]);
    size_t quantized =
        size_t(std::count_if(held.begin(), held.end(), [&](int p) {
          return m.params[size_t(p)].mxfp4;
        }));
    if (quantized == 0)
      continue;
    if (!m.keepsMxfp4()) {
      m.tensors[t].dequantized = true;
      continue;
    }
    if (quantized != held.size()) {
      result.errors.push_back({int(t), "holds MXFP4 weights with others"});
      continue;
    }
    TensorSpec scales = m.tensors[t];
    if (std::string why = rewrite(m, scales, false); !why.empty()) {
      result.errors.push_back({int(t), why});
      continue;
    }
    if (std::string why = rewrite(m, m.tensors[t], true); !why.empty()) {
      result.errors.push_back({int(t), why});
      continue;
    }
    result.companionOf.push_back(int(t));
    m.tensors.push_back(std::move(scales));
  }
  return result;
}
