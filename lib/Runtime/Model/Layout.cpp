//===- Layout.cpp - What each rank of a backend holds ---------------------===//

#include "mdl/Runtime/Model/Layout.h"

#include <algorithm>

using namespace mdl;
using namespace mdl::rt;

int Param::atomIndex(const std::string &name) const {
  for (size_t i = 0; i < atoms.size(); ++i)
    if (atoms[i] == name)
      return int(i);
  return -1;
}

int64_t Param::numElements() const { return mdl::numElements(sizes); }

std::vector<KernelPath> mdl::rt::kernelPaths(const ModelLayout &m) {
  std::vector<KernelPath> out;
  for (const ModelLayout::CapabilityNeed &n : m.needs) {
    auto it = m.capabilities.find(n.capability);
    out.push_back({n.instance, n.capability,
                   it != m.capabilities.end() && it->second, n.fallback});
  }
  return out;
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
    case NameSegment::Family: {
      bool given = false;
      for (const auto &[atom, index] : familyIndex)
        if (atom == s.atom) {
          out += std::to_string(index);
          given = true;
          break;
        }
      if (!given) // a name for messages: the family's index stays symbolic
        out += "{" + s.atom + "}";
      break;
    }
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
      // A group's shared dimensions are those of its first parameter.
      int owner = p.isGroup() ? partParams(p).front() : p.param;
      int64_t m = 1;
      for (const Term &c : p.shape)
        m *= termSize(c, owner, extent);
      n += m;
    }
    return n;
  }
  }
  return 0;
}

static void collectParams(const Term &term, std::vector<int> &out) {
  if (term.kind == Term::Parts)
    for (const Term::Part &p : term.parts) {
      if (!p.isGroup())
        out.push_back(p.param);
      for (const Term &c : p.shape)
        collectParams(c, out);
    }
  for (const Term &c : term.children)
    collectParams(c, out);
}

std::vector<int> mdl::rt::partParams(const Term::Part &p) {
  std::vector<int> out;
  if (!p.isGroup())
    out.push_back(p.param);
  for (const Term &c : p.shape)
    collectParams(c, out);
  return out;
}

std::vector<int> mdl::rt::tensorParams(const TensorSpec &t) {
  std::vector<int> out;
  if (t.param >= 0)
    out.push_back(t.param);
  for (const auto &axis : t.axes)
    for (const Term &term : axis)
      collectParams(term, out);
  return out;
}

int64_t mdl::rt::viewAxisSize(
    const TensorSpec::ViewAxis &v,
    const std::function<int64_t(const std::string &)> &extent) {
  int64_t n = v.factor;
  for (const std::string &a : v.atoms)
    n *= extent(a);
  return n;
}
