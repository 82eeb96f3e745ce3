//===- LoraView.cpp - LoRA factors as tensors of a layout -----------------===//

#include "mdl/Runtime/Convert/LoraView.h"

#include "mdl/Runtime/Model/Lora.h"

#include <set>
#include <unordered_map>

using namespace mdl;
using namespace mdl::rt;

/// The most a LoRA rank may be (far above any adapter's).
constexpr int64_t kMaxLoraRank = int64_t(1) << 16;

std::unique_ptr<LoraView> LoraView::build(const Binding &hf,
                                          const ModelLayout &layout,
                                          int64_t rank, std::string &error) {
  if (rank < 1 || rank > kMaxLoraRank) {
    error = "a LoRA rank is a number from 1 to " +
            std::to_string(kMaxLoraRank) + ", not " + std::to_string(rank);
    return nullptr;
  }
  std::unique_ptr<LoraView> view(new LoraView());
  view->base = &layout;
  view->rank = rank;
  view->factors.model = layout.model;
  view->factors.backend = layout.backend;
  view->aOf.assign(layout.params.size(), -1);
  view->bOf.assign(layout.params.size(), -1);
  std::unordered_map<std::string, int> byPath;
  for (size_t i = 0; i < layout.params.size(); ++i)
    byPath.emplace(layout.params[i].path, int(i));
  std::vector<Param> &factors = view->factors.params;
  const ModelLayout &h = hf.layout();
  // The modules HF's LoRA table offers (not the head, say).
  std::set<std::string> targets;
  for (const LoraTarget &target : loraTable(h, ParallelConfig(), 0, rank))
    targets.insert(target.module + ".weight");
  for (const RankTensor &t : hf.rankTensors(ParallelConfig(), 0)) {
    if (!targets.count(t.name) || !isAdaptableWeight(h, t))
      continue;
    int a = -1;
    std::vector<int64_t> inSizes;
    for (const Piece &pc : t.pieces) {
      auto it = byPath.find(h.params[size_t(pc.param)].path);
      if (it == byPath.end() || view->bOf[size_t(it->second)] >= 0)
        continue;
      const Param &p = layout.params[size_t(it->second)];
      WeightSides sides = weightSides(p);
      std::vector<int64_t> sizes;
      for (size_t i : sides.in)
        sizes.push_back(p.sizes[i]);
      if (a < 0) {
        Param A;
        A.path = p.path + ".lora_A";
        A.atoms = {"r"};
        A.sizes = {rank};
        for (size_t i : sides.in)
          A.atoms.push_back(p.atoms[i]);
        A.sizes.insert(A.sizes.end(), sizes.begin(), sizes.end());
        A.axisAtoms = {1, int(sides.in.size())};
        a = int(factors.size());
        factors.push_back(std::move(A));
        inSizes = sizes;
      } else if (sizes != inSizes) {
        error = "the weights of HF module '" + t.name + "' take inputs of " +
                "different shapes: one LoRA A cannot serve them";
        return nullptr;
      }
      Param B;
      B.path = p.path + ".lora_B";
      for (size_t i : sides.out) {
        B.atoms.push_back(p.atoms[i]);
        B.sizes.push_back(p.sizes[i]);
      }
      B.atoms.push_back("r");
      B.sizes.push_back(rank);
      B.axisAtoms = {int(sides.out.size()), 1};
      view->aOf[size_t(it->second)] = a;
      view->bOf[size_t(it->second)] = int(factors.size());
      factors.push_back(std::move(B));
    }
  }
  if (factors.empty()) {
    error = layout.model + " on " + layout.backend +
            " has no linear module of HF's LoRA table";
    return nullptr;
  }
  return view;
}

std::vector<bool> LoraView::select(const std::vector<bool> &selected) const {
  std::vector<bool> out(factors.params.size(), false);
  for (size_t p = 0; p < selected.size() && p < bOf.size(); ++p)
    if (selected[p] && bOf[p] >= 0) {
      out[size_t(aOf[p])] = true;
      out[size_t(bOf[p])] = true;
    }
  return out;
}

bool LoraView::adapted(int param) const { return bOf[size_t(param)] >= 0; }

bool LoraView::tensors(const std::vector<RankTensor> &weights,
                       const LoraNaming &naming, std::vector<RankTensor> &out,
                       std::string &error) const {
  const std::string suffix = ".weight";
  for (const RankTensor &t : weights) {
    if (!isAdaptableWeight(*base, t))
      continue;
    int64_t rows = t.shape[0], cols = t.shape[1];
    std::string module =
        naming.prefix + t.name.substr(0, t.name.size() - suffix.size());
    RankTensor A, B;
    A.name = module + "." + naming.names.a + suffix;
    B.name = module + "." + naming.names.b + suffix;
    A.shape = {rank, cols};
    B.shape = {rows, rank};
    A.dtype = B.dtype = naming.dtype;
    std::vector<bool> hasA(factors.params.size(), false);
    for (const Piece &pc : t.pieces) {
      int p = pc.param;
      if (bOf[size_t(p)] < 0)
        continue;
      WeightSides sides = weightSides(base->params[size_t(p)]);
      // B's rows are the weight's rows, A's columns its columns.
      Piece b;
      b.param = bOf[size_t(p)];
      for (size_t i : sides.out) {
        if (pc.stride[i] % cols != 0) {
          error = "tensor '" + t.name + "' is not laid out as [out, in]: " +
                  "its adapter cannot be synced";
          return false;
        }
        b.lo.push_back(pc.lo[i]);
        b.count.push_back(pc.count[i]);
        b.stride.push_back(pc.stride[i] / cols * rank);
      }
      b.lo.push_back(0);
      b.count.push_back(rank);
      b.stride.push_back(1);
      b.base = pc.base / cols * rank;
      B.pieces.push_back(std::move(b));
      int a = aOf[size_t(p)];
      if (hasA[size_t(a)])
        continue;
      hasA[size_t(a)] = true;
      Piece ap;
      ap.param = a;
      ap.lo = {0};
      ap.count = {rank};
      ap.stride = {cols};
      for (size_t i : sides.in) {
        ap.lo.push_back(pc.lo[i]);
        ap.count.push_back(pc.count[i]);
        ap.stride.push_back(pc.stride[i]);
      }
      ap.base = pc.base % cols;
      A.pieces.push_back(std::move(ap));
    }
    if (B.pieces.empty())
      continue;
    out.push_back(std::move(A));
    out.push_back(std::move(B));
  }
  return true;
}
