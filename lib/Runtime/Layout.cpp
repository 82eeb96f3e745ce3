//===- Layout.cpp - What each rank of a backend holds ---------------------===//

#include "mdl/Runtime/Layout.h"

#include <algorithm>

using namespace mdl;
using namespace mdl::rt;

int Param::atomIndex(const std::string &name) const {
  for (size_t i = 0; i < atoms.size(); ++i)
    if (atoms[i] == name)
      return int(i);
  return -1;
}

int64_t Param::numElements() const {
  int64_t n = 1;
  for (int64_t s : sizes)
    n *= s;
  return n;
}

std::string
mdl::rt::renderName(const TensorSpec &t, int64_t localLayer,
                    const std::vector<std::pair<std::string, int64_t>>
                        &familyIndex) {
  std::string out;
  for (const NameSegment &s : t.name) {
    switch (s.kind) {
    case NameSegment::Text:
      out += s.text;
      break;
    case NameSegment::LayerIndex:
      out += std::to_string(localLayer);
      break;
    case NameSegment::Family:
      for (const auto &[atom, index] : familyIndex)
        if (atom == s.atom) {
          out += std::to_string(index);
          break;
        }
      break;
    }
  }
  return out;
}

int64_t mdl::rt::termSize(const Term &t, int param, const ExtentFn &extent) {
  switch (t.kind) {
  case Term::Atom:
    return extent(param, t.atom);
  case Term::Unit:
    return 1;
  case Term::Product: {
    int64_t n = 1;
    for (const Term &c : t.children)
      n *= termSize(c, param, extent);
    return n;
  }
  case Term::Parts: {
    int64_t n = 0;
    for (const Term::Part &p : t.parts) {
      int64_t m = 1;
      for (const Term &c : p.shape)
        m *= termSize(c, p.param, extent);
      n += m;
    }
    return n;
  }
  }
  return 0;
}

std::vector<int> mdl::rt::tensorParams(const TensorSpec &t) {
  std::vector<int> out;
  if (t.param >= 0)
    out.push_back(t.param);
  std::function<void(const Term &)> walk = [&](const Term &term) {
    if (term.kind == Term::Parts)
      for (const Term::Part &p : term.parts)
        out.push_back(p.param);
    for (const Term &c : term.children)
      walk(c);
  };
  for (const auto &axis : t.axes)
    for (const Term &term : axis)
      walk(term);
  return out;
}

std::vector<std::string> mdl::rt::familyAtoms(const TensorSpec &t) {
  std::vector<std::string> out;
  for (const NameSegment &s : t.name)
    if (s.kind == NameSegment::Family &&
        std::find(out.begin(), out.end(), s.atom) == out.end())
      out.push_back(s.atom);
  return out;
}

std::vector<int64_t> mdl::rt::globalShape(const ModelLayout &m,
                                          const TensorSpec &t) {
  if (!t.view.empty())
    return t.view;
  // Shared terms take their size from the first parameter of the tensor.
  std::vector<int> params = tensorParams(t);
  int first = params.empty() ? -1 : params.front();
  ExtentFn full = [&](int p, const std::string &atom) -> int64_t {
    if (p < 0)
      p = first;
    const Param &param = m.params[p];
    int i = param.atomIndex(atom);
    return i < 0 ? 0 : param.sizes[i];
  };
  std::vector<int64_t> shape;
  for (const auto &axis : t.axes) {
    int64_t n = 1;
    for (const Term &term : axis)
      n *= termSize(term, first, full);
    shape.push_back(n);
  }
  return shape;
}

DType mdl::rt::storedDType(const ModelLayout &m, const TensorSpec &t) {
  if (t.stored)
    return *t.stored;
  std::vector<int> params = tensorParams(t);
  return params.empty() ? DType::BF16 : m.params[params.front()].dtype;
}

std::vector<TensorListing> mdl::rt::listTensors(const ModelLayout &m,
                                                const RankContext &ctx) {
  std::vector<TensorListing> out;
  for (const TensorSpec &t : m.tensors) {
    if (t.when && !t.when(ctx))
      continue;
    std::vector<int64_t> shape = globalShape(m, t);
    DType dtype = storedDType(m, t);
    std::vector<std::string> family = familyAtoms(t);
    int64_t layer = 0;
    for (const NameSegment &s : t.name)
      if (s.kind == NameSegment::LayerIndex)
        layer = s.layer;
    if (family.empty()) {
      out.push_back({renderName(t, layer), shape, dtype, &t});
      continue;
    }
    // One tensor per index of the family atoms, last atom fastest.
    std::vector<int> params = tensorParams(t);
    const Param &p = m.params[params.front()];
    std::vector<int64_t> counts;
    for (const std::string &a : family) {
      int i = p.atomIndex(a);
      counts.push_back(i < 0 ? 0 : p.sizes[i]);
    }
    std::vector<int64_t> index(family.size(), 0);
    bool any = true;
    for (int64_t c : counts)
      any &= c > 0;
    while (any) {
      std::vector<std::pair<std::string, int64_t>> fi;
      for (size_t i = 0; i < family.size(); ++i)
        fi.push_back({family[i], index[i]});
      out.push_back({renderName(t, layer, fi), shape, dtype, &t});
      size_t k = family.size();
      while (k > 0) {
        --k;
        if (++index[k] < counts[k])
          break;
        index[k] = 0;
        if (k == 0)
          any = false;
      }
    }
  }
  return out;
}
