//===- Adapter.cpp - LoRA adapters between fused and separate modules -----===//

#include "mdl/Runtime/Convert/Adapter.h"
#include "mdl/Runtime/Base/Json.h"
#include "mdl/Runtime/Convert/SafetensorsWriter.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <cstring>
#include <functional>
#include <set>

using namespace mdl;
using namespace mdl::rt;

namespace {

constexpr const char *kPeftPrefix = "base_model.model.";
constexpr const char *kBlocksKey = "mdl.lora_blocks";

/// The linear weight tensors of a rank as 2-D [rows, cols] maps: for each
/// piece, which row holds each output index of its parameter and which
/// column each input index.
struct LinearPart {
  int param = -1;
  /// Rows by the parameter's flat output index (within its box), and the
  /// flat output index of each; likewise columns and input indices.
  std::vector<std::pair<int64_t, int64_t>> rows, cols; // (index, row/col)
};

struct LinearTensor {
  std::string module;
  int64_t rows = 0, cols = 0;
  std::vector<LinearPart> parts;
};

/// Enumerates the box of `atoms` of a piece: for each point, the flat
/// index over the parameter's full sizes of those atoms and the tensor
/// offset relative to the piece's base.
void enumerate(const Piece &pc, const std::vector<int64_t> &sizes,
               const std::vector<size_t> &atoms,
               const std::function<void(int64_t, int64_t)> &fn) {
  std::vector<int64_t> c(atoms.size(), 0);
  for (;;) {
    int64_t flat = 0, offset = 0;
    for (size_t k = 0; k < atoms.size(); ++k) {
      size_t a = atoms[k];
      flat = flat * sizes[a] + pc.lo[a] + c[k];
      offset += c[k] * pc.stride[a];
    }
    fn(flat, offset);
    size_t k = atoms.size();
    while (k > 0) {
      --k;
      if (++c[k] < pc.count[atoms[k]])
        break;
      c[k] = 0;
      if (k == 0)
        return;
    }
    if (atoms.empty())
      return;
  }
}

/// The 2-D linear weight tensors of one rank of `b`.
bool linearTensors(const Binding &b, const ParallelConfig &config,
                   int64_t rank, std::vector<LinearTensor> &out,
                   std::string &error) {
  const ModelLayout &m = b.layout();
  for (const RankTensor &t : b.rankTensors(config, rank)) {
    if (!isAdaptableWeight(m, t))
      continue;
    LinearTensor lt;
    lt.module = t.name.substr(0, t.name.size() - 7);
    lt.rows = t.shape[0];
    lt.cols = t.shape[1];
    for (const Piece &pc : t.pieces) {
      const Param &p = m.params[size_t(pc.param)];
      WeightSides sides = weightSides(p); // no expert side here
      const std::vector<size_t> &outAtoms = sides.out, &inAtoms = sides.in;
      for (size_t a : outAtoms)
        if (pc.stride[a] % lt.cols != 0) {
          error = "tensor '" + t.name + "' is not laid out as [out, in]: " +
                  "its adapter cannot be converted";
          return false;
        }
      LinearPart part;
      part.param = pc.param;
      int64_t baseRow = pc.base / lt.cols, baseCol = pc.base % lt.cols;
      enumerate(pc, p.sizes, outAtoms, [&](int64_t flat, int64_t offset) {
        part.rows.push_back({flat, baseRow + offset / lt.cols});
      });
      enumerate(pc, p.sizes, inAtoms, [&](int64_t flat, int64_t offset) {
        part.cols.push_back({flat, baseCol + offset});
      });
      lt.parts.push_back(std::move(part));
    }
    out.push_back(std::move(lt));
  }
  return true;
}

/// Where each output and input index of a parameter sits in HF's modules.
struct HfPlace {
  std::string module;
  std::map<int64_t, int64_t> row, col;
  int64_t rows = 0, cols = 0;
};

std::map<std::string, HfPlace> hfPlaces(const Binding &hf,
                                        std::vector<LinearTensor> &tensors,
                                        std::string &error) {
  std::map<std::string, HfPlace> out;
  if (!linearTensors(hf, ParallelConfig(), 0, tensors, error))
    return out;
  for (const LinearTensor &t : tensors)
    for (const LinearPart &p : t.parts) {
      HfPlace &place = out[hf.layout().params[size_t(p.param)].path];
      place.module = t.module;
      place.rows = t.rows;
      place.cols = t.cols;
      for (auto [flat, row] : p.rows)
        place.row[flat] = row;
      for (auto [flat, col] : p.cols)
        place.col[flat] = col;
    }
  return out;
}

LoraFactor zeros(DType dtype, int64_t rows, int64_t cols) {
  LoraFactor f;
  f.dtype = dtype;
  f.rows = rows;
  f.cols = cols;
  f.data.assign(size_t(rows * cols) * byteSize(dtype), 0);
  return f;
}

void copyElement(const LoraFactor &from, int64_t r, int64_t c, LoraFactor &to,
                 int64_t tr, int64_t tc) {
  size_t n = byteSize(from.dtype);
  std::memcpy(to.data.data() + size_t(tr * to.cols + tc) * n,
              from.data.data() + size_t(r * from.cols + c) * n, n);
}

} // namespace

bool mdl::rt::isAdaptableWeight(const ModelLayout &m, const RankTensor &t) {
  if (t.copy || t.pieces.empty() || t.shape.size() != 2 || t.name.size() < 7 ||
      t.name.compare(t.name.size() - 7, 7, ".weight") != 0)
    return false;
  return std::all_of(t.pieces.begin(), t.pieces.end(), [&](const Piece &pc) {
    const Param &p = m.params[size_t(pc.param)];
    return p.linearOutAxes >= 0 && !p.bias && p.expert.empty();
  });
}

std::optional<Adapters> mdl::rt::readAdapters(const SafetensorsFile &file,
                                              std::string &error,
                                              const FactorNames &names) {
  Adapters out;
  std::set<std::string> seenA, seenB;
  for (const TensorInfo &t : file.tensors()) {
    std::string name = t.name;
    if (name.rfind(kPeftPrefix, 0) == 0)
      name = name.substr(std::strlen(kPeftPrefix));
    const std::string kA = "." + names.a + ".weight",
                      kB = "." + names.b + ".weight";
    auto endsWith = [&](const std::string &suffix) {
      return name.size() > suffix.size() &&
             name.compare(name.size() - suffix.size(), suffix.size(),
                          suffix) == 0;
    };
    bool isA = endsWith(kA), isB = endsWith(kB);
    if ((!isA && !isB) || t.shape.size() != 2) {
      error = file.path() + ": '" + t.name + "' is not a 2-D " + names.a +
              " or " + names.b + " weight";
      return std::nullopt;
    }
    std::string module =
        name.substr(0, name.size() - (isA ? kA : kB).size());
    LoraFactor f;
    f.dtype = t.dtype;
    f.rows = t.shape[0];
    f.cols = t.shape[1];
    const uint8_t *data = file.data(t);
    f.data.assign(data, data + t.numBytes());
    (isA ? out[module].a : out[module].b) = std::move(f);
    (isA ? seenA : seenB).insert(module);
  }
  if (auto it = file.metadata().find(kBlocksKey); it != file.metadata().end()) {
    json::ParseError perr;
    std::optional<json::Value> blocks = json::parse(it->second, perr);
    bool ok = blocks && blocks->kind() == json::Value::Object;
    for (const auto &[module, list] : ok ? blocks->members()
                                         : decltype(blocks->members()){}) {
      auto adapter = out.find(module);
      ok &= adapter != out.end() && list.kind() == json::Value::Array;
      int64_t total = 0;
      for (const json::Value &b : ok ? list.elements()
                                     : std::vector<json::Value>{}) {
        const json::Value *name = b.get("module"), *rank = b.get("rank");
        ok &= name && rank && name->kind() == json::Value::String &&
              rank->kind() == json::Value::Int && rank->asInt() > 0;
        if (!ok)
          break;
        adapter->second.blocks.push_back({name->asString(), rank->asInt()});
        total += rank->asInt();
      }
      ok &= adapter == out.end() || total == adapter->second.a.rows;
      if (!ok)
        break;
    }
    if (!ok) {
      error = file.path() + ": its " + kBlocksKey + " metadata does not " +
              "describe its adapters' rank blocks";
      return std::nullopt;
    }
  }
  for (const auto &[module, adapter] : out) {
    if (!seenA.count(module) || !seenB.count(module) ||
        adapter.a.rows != adapter.b.cols || adapter.a.dtype != adapter.b.dtype) {
      error = file.path() + ": the adapter of '" + module +
              "' needs " + names.a + " [r, in] and " + names.b +
              " [out, r] of one dtype";
      return std::nullopt;
    }
  }
  return out;
}

bool mdl::rt::writeAdapters(const Adapters &adapters, const std::string &prefix,
                            const std::string &path, std::string &error,
                            const FactorNames &names) {
  SafetensorsWriter writer;
  json::Value blocks = json::Value::object();
  for (const auto &[module, adapter] : adapters) {
    if (adapter.blocks.empty())
      continue;
    json::Value list = json::Value::array();
    for (const auto &[name, rank] : adapter.blocks) {
      json::Value b = json::Value::object();
      b.set("module", json::Value::string(name));
      b.set("rank", json::Value::integer(rank));
      list.push(std::move(b));
    }
    blocks.set(module, std::move(list));
  }
  if (!blocks.members().empty() &&
      !writer.setMetadata(kBlocksKey, json::write(blocks), error))
    return false;
  for (const auto &[module, adapter] : adapters)
    for (auto [suffix, f] : {std::pair{"." + names.a + ".weight", &adapter.a},
                             std::pair{"." + names.b + ".weight", &adapter.b}})
      if (!writer.add(prefix + module + suffix, f->dtype, {f->rows, f->cols},
                      f->data.data(), error))
        return false;
  return writer.write(path, error);
}

std::optional<Adapters>
mdl::rt::adaptersToBackend(const Binding &hf, const Binding &backend,
                           const ParallelConfig &config, int64_t rank,
                           const Adapters &peft, std::string &error) {
  std::vector<LinearTensor> hfTensors, tensors;
  std::map<std::string, HfPlace> places = hfPlaces(hf, hfTensors, error);
  if (!error.empty() || !linearTensors(backend, config, rank, tensors, error))
    return std::nullopt;
  std::set<std::string> known;
  for (const LinearTensor &t : hfTensors)
    known.insert(t.module);
  std::set<std::string> weights;
  for (const RankTensor &t : hf.rankTensors(ParallelConfig(), 0))
    weights.insert(t.name);
  for (const auto &[module, adapter] : peft)
    if (!known.count(module)) {
      error = "the adapters name module '" + module + "', which is " +
              (weights.count(module + ".weight")
                   ? "no dense linear module of the model (adapters of "
                     "experts, norms or embeddings are not converted)"
                   : "no linear module of the model in HF");
      return std::nullopt;
    }
  Adapters out;
  for (const LinearTensor &t : tensors) {
    // The adapted HF modules this module draws from, in order, and where
    // each one's rank block starts.
    std::vector<std::string> sources;
    std::map<std::string, int64_t> block;
    int64_t rankSize = 0;
    const Adapter *first = nullptr;
    for (const LinearPart &p : t.parts) {
      const std::string &m =
          places[backend.layout().params[size_t(p.param)].path].module;
      auto it = peft.find(m);
      if (it == peft.end() || block.count(m))
        continue;
      block[m] = rankSize;
      rankSize += it->second.a.rows;
      sources.push_back(m);
      if (first && first->a.dtype != it->second.a.dtype) {
        error = "the adapters of '" + t.module + "' have different dtypes";
        return std::nullopt;
      }
      first = &it->second;
    }
    if (sources.empty())
      continue;
    Adapter fused;
    for (const std::string &m : sources)
      fused.blocks.push_back({m, peft.at(m).a.rows});
    fused.a = zeros(first->a.dtype, rankSize, t.cols);
    fused.b = zeros(first->a.dtype, t.rows, rankSize);
    for (const LinearPart &p : t.parts) {
      const HfPlace &place = places[backend.layout().params[size_t(p.param)].path];
      auto it = peft.find(place.module);
      if (it == peft.end())
        continue;
      const Adapter &src = it->second;
      int64_t off = block[place.module];
      if (src.a.cols != place.cols || src.b.rows != place.rows) {
        error = "the adapter of '" + place.module + "' is [" +
                std::to_string(src.b.rows) + ", r] x [r, " +
                std::to_string(src.a.cols) + "], but the module is [" +
                std::to_string(place.rows) + ", " + std::to_string(place.cols) +
                "]";
        return std::nullopt;
      }
      for (auto [flat, row] : p.rows)
        for (int64_t k = 0; k < src.b.cols; ++k)
          copyElement(src.b, place.row.at(flat), k, fused.b, row, off + k);
      for (auto [flat, col] : p.cols)
        for (int64_t k = 0; k < src.a.rows; ++k)
          copyElement(src.a, k, place.col.at(flat), fused.a, off + k, col);
    }
    out[t.module] = std::move(fused);
  }
  return out;
}

std::optional<Adapters>
mdl::rt::adaptersToHf(const Binding &hf, const Binding &backend,
                      const ParallelConfig &config,
                      const std::vector<Adapters> &ranks, std::string &error) {
  std::vector<LinearTensor> hfTensors;
  std::map<std::string, HfPlace> places = hfPlaces(hf, hfTensors, error);
  if (!error.empty())
    return std::nullopt;
  // Per HF module, the backend modules whose adapters hold some of its
  // rows, in order, each with the rank rows that belong to it ([from,
  // from + size) of the backend adapter's rank, all of it without blocks)
  // and where they go in the HF module's rank (at `to`).
  struct Share {
    int64_t from = 0, size = 0, to = 0;
  };
  std::vector<std::vector<LinearTensor>> rankTensors(ranks.size());
  std::map<std::string, std::vector<std::string>> sources;
  std::map<std::string, std::map<std::string, Share>> shares;
  for (size_t r = 0; r < ranks.size(); ++r) {
    if (!linearTensors(backend, config, int64_t(r), rankTensors[r], error))
      return std::nullopt;
    for (const LinearTensor &t : rankTensors[r]) {
      auto it = ranks[r].find(t.module);
      if (it == ranks[r].end())
        continue;
      const Adapter &src = it->second;
      for (const LinearPart &p : t.parts) {
        const std::string &m =
            places[backend.layout().params[size_t(p.param)].path].module;
        if (shares[m].count(t.module))
          continue;
        Share share{0, src.a.rows, 0};
        if (!src.blocks.empty()) {
          share.size = 0;
          int64_t at = 0;
          for (const auto &[name, rows] : src.blocks) {
            if (name == m)
              share = {at, rows, 0};
            at += rows;
          }
        }
        shares[m][t.module] = share;
        sources[m].push_back(t.module);
      }
    }
  }
  Adapters out;
  for (const LinearTensor &m : hfTensors) {
    auto src = sources.find(m.module);
    if (src == sources.end())
      continue;
    int64_t rankSize = 0;
    for (const std::string &t : src->second) {
      Share &share = shares[m.module][t];
      share.to = rankSize;
      rankSize += share.size;
    }
    if (rankSize == 0)
      continue;
    Adapter &a = out[m.module];
    DType dtype = DType::BF16;
    for (size_t r = 0; r < ranks.size(); ++r)
      if (auto it = ranks[r].find(src->second.front()); it != ranks[r].end())
        dtype = it->second.a.dtype;
    a.a = zeros(dtype, rankSize, m.cols);
    a.b = zeros(dtype, m.rows, rankSize);
  }
  for (size_t r = 0; r < ranks.size(); ++r)
    for (const LinearTensor &t : rankTensors[r]) {
      auto it = ranks[r].find(t.module);
      if (it == ranks[r].end())
        continue;
      const Adapter &src = it->second;
      if (src.a.cols != t.cols || src.b.rows != t.rows) {
        error = "the adapter of '" + t.module + "' on rank " +
                std::to_string(r) + " does not fit the module [" +
                std::to_string(t.rows) + ", " + std::to_string(t.cols) + "]";
        return std::nullopt;
      }
      for (const LinearPart &p : t.parts) {
        const HfPlace &place =
            places[backend.layout().params[size_t(p.param)].path];
        auto dst = out.find(place.module);
        if (dst == out.end())
          continue;
        const Share &share = shares[place.module][t.module];
        for (auto [flat, row] : p.rows)
          for (int64_t k = 0; k < share.size; ++k)
            copyElement(src.b, row, share.from + k, dst->second.b,
                        place.row.at(flat), share.to + k);
        for (auto [flat, col] : p.cols)
          for (int64_t k = 0; k < share.size; ++k)
            copyElement(src.a, share.from + k, col, dst->second.a,
                        share.to + k, place.col.at(flat));
      }
    }
  return out;
}

/// The value of `key` in PEFT's rank_pattern or alpha_pattern `patterns`
/// for `module`: a key equal to the module's name or to a last part of it.
static const json::Value *patternFor(const json::Value *patterns,
                                     const std::string &module) {
  if (!patterns || patterns->kind() != json::Value::Object)
    return nullptr;
  for (const auto &[key, value] : patterns->members())
    if (module == key ||
        (module.size() > key.size() &&
         module.compare(module.size() - key.size(), key.size(), key) == 0 &&
         module[module.size() - key.size() - 1] == '.'))
      return &value;
  return nullptr;
}

std::optional<json::Value> mdl::rt::adapterConfig(const json::Value &source,
                                                  const Adapters &adapters,
                                                  std::string &error) {
  auto number = [](const json::Value *v, double otherwise) {
    return v && (v->kind() == json::Value::Int ||
                 v->kind() == json::Value::Double)
               ? v->asDouble()
               : otherwise;
  };
  const json::Value *rsloraFlag = source.get("use_rslora");
  bool rslora = rsloraFlag && rsloraFlag->kind() == json::Value::Bool &&
                rsloraFlag->asBool();
  auto scaleOf = [&](double alpha, double r) {
    return alpha / (rslora ? std::sqrt(r) : r);
  };
  double r = number(source.get("r"), 8), alpha = number(source.get("lora_alpha"), 8);
  const json::Value *ranks = source.get("rank_pattern"),
                    *alphas = source.get("alpha_pattern");
  // Every module of the source has the scale of the defaults or of a
  // pattern.
  double scale = scaleOf(alpha, r);
  for (const json::Value *patterns : {ranks, alphas})
    if (patterns && patterns->kind() == json::Value::Object)
      for (const auto &[key, value] : patterns->members()) {
        double s = scaleOf(number(patternFor(alphas, key), alpha),
                           number(patternFor(ranks, key), r));
        if (std::abs(s - scale) > 1e-9 * std::abs(scale)) {
          error = "the source adapters' '" + key + "' modules have the " +
                  "scale lora_alpha / r " + std::to_string(s) +
                  ", others " + std::to_string(scale) +
                  ": fused modules could not keep both";
          return std::nullopt;
        }
      }
  // The most common rank is the default.
  std::map<int64_t, size_t> counts;
  for (const auto &[module, adapter] : adapters)
    ++counts[adapter.a.rows];
  int64_t base = int64_t(r);
  size_t most = 0;
  for (auto [rank, n] : counts)
    if (n > most)
      base = rank, most = n;
  auto alphaFor = [&](int64_t rank) {
    double a = scale * (rslora ? std::sqrt(double(rank)) : double(rank));
    return a == std::floor(a) && std::abs(a) < 1e15
               ? json::Value::integer(int64_t(a))
               : json::Value::number(a);
  };
  // Patterns by last name where every module of that name agrees.
  auto lastName = [](const std::string &m) {
    size_t dot = m.rfind('.');
    return dot == std::string::npos ? m : m.substr(dot + 1);
  };
  std::map<std::string, std::set<int64_t>> byName;
  for (const auto &[module, adapter] : adapters)
    byName[lastName(module)].insert(adapter.a.rows);
  json::Value rankPattern = json::Value::object(),
              alphaPattern = json::Value::object();
  std::set<std::string> done;
  for (const auto &[module, adapter] : adapters) {
    int64_t rank = adapter.a.rows;
    if (rank == base)
      continue;
    std::string key = byName[lastName(module)].size() == 1 ? lastName(module)
                                                           : module;
    if (!done.insert(key).second)
      continue;
    rankPattern.set(key, json::Value::integer(rank));
    alphaPattern.set(key, alphaFor(rank));
  }
  json::Value out = source;
  if (out.kind() != json::Value::Object)
    out = json::Value::object();
  out.set("r", json::Value::integer(base));
  out.set("lora_alpha", alphaFor(base));
  out.set("rank_pattern", std::move(rankPattern));
  out.set("alpha_pattern", std::move(alphaPattern));
  std::vector<std::string> targets;
  for (const auto &[name, ranksOfName] : byName)
    targets.push_back(name);
  if (!targets.empty())
    out.set("target_modules", json::Value::strings(targets));
  return out;
}
