//===- CheckpointFiles.cpp - The files of a checkpoint directory ----------===//

#include "mdl/Runtime/Convert/CheckpointFiles.h"
#include "mdl/Runtime/Checkpoint/DistCheckpoint.h"
#include "mdl/Runtime/Convert/DistCheckpointWriter.h"
#include "mdl/Runtime/Convert/SafetensorsWriter.h"
#include "mdl/Runtime/Convert/TorchCheckpointWriter.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <numeric>
#include <set>
#include <sstream>

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

using namespace mdl;
using namespace mdl::rt;

namespace {

bool isFile(const std::string &p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

bool isDirectory(const std::string &p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

bool endsWith(const std::string &s, std::string_view suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string iterationDir(int64_t iteration) {
  char name[32];
  std::snprintf(name, sizeof name, "iter_%07lld", (long long)iteration);
  return name;
}

std::string join(const std::string &dir, const std::string &name) {
  return name.empty() ? dir : dir + "/" + name;
}

/// `text` with every `{part}` replaced by `part`.
std::string withPart(std::string text, const std::string &part) {
  static const std::string key = "{part}";
  for (size_t at = text.find(key); at != std::string::npos;
       at = text.find(key, at + part.size()))
    text.replace(at, key.size(), part);
  return text;
}

std::string padded(size_t n, size_t width) {
  std::string s = std::to_string(n);
  return std::string(s.size() < width ? width - s.size() : 0, '0') + s;
}

/// The names of the entries of `dir` that `keep` accepts, sorted; nothing
/// when it cannot be read.
std::optional<std::vector<std::string>>
listDir(const std::string &dir,
        const std::function<bool(const std::string &)> &keep) {
  DIR *d = ::opendir(dir.c_str());
  if (!d)
    return std::nullopt;
  std::vector<std::string> names;
  while (const dirent *entry = ::readdir(d)) {
    std::string name = entry->d_name;
    if (name != "." && name != ".." && keep(name))
      names.push_back(name);
  }
  ::closedir(d);
  std::sort(names.begin(), names.end());
  return names;
}

} // namespace

std::optional<uint64_t> mdl::rt::parseByteSize(std::string_view text) {
  size_t digits = 0;
  while (digits < text.size() && std::isdigit((unsigned char)text[digits]))
    ++digits;
  if (digits == 0 || digits > 18)
    return std::nullopt;
  uint64_t n = std::stoull(std::string(text.substr(0, digits)));
  std::string unit(text.substr(digits));
  std::string upper = unit;
  for (char &c : upper)
    c = char(std::toupper((unsigned char)c));
  static const std::pair<const char *, uint64_t> units[] = {
      {"", 1},          {"B", 1},
      {"KB", 1000},     {"MB", 1000'000},      {"GB", 1000'000'000},
      {"KIB", 1 << 10}, {"MIB", 1 << 20},      {"GIB", uint64_t(1) << 30}};
  for (auto [name, scale] : units)
    if (upper == name) {
      if (n > UINT64_MAX / scale)
        return std::nullopt;
      // `Kb`, `Mb`, `Gb`: bits.
      bool bits = unit.size() == 2 && unit[1] == 'b';
      return bits ? n * scale / 8 : n * scale;
    }
  return std::nullopt;
}

std::vector<std::vector<size_t>>
mdl::rt::splitBySize(const std::vector<uint64_t> &sizes, uint64_t max) {
  std::vector<std::vector<size_t>> parts;
  std::vector<size_t> current;
  uint64_t currentSize = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] > max) {
      parts.push_back({i});
      continue;
    }
    if (currentSize + sizes[i] > max) {
      parts.push_back(std::move(current));
      current.clear();
      currentSize = 0;
    }
    current.push_back(i);
    currentSize += sizes[i];
  }
  if (!current.empty() || parts.empty())
    parts.push_back(std::move(current));
  return parts;
}

//===----------------------------------------------------------------------===//
// Writing
//===----------------------------------------------------------------------===//

OutputFiles mdl::rt::planOutputFiles(const Binding &to,
                                     const ParallelConfig &config,
                                     const std::vector<int64_t> &ranks,
                                     const std::string &top,
                                     const OutputFormat &format) {
  OutputFiles out;
  bool hfLayout = format.kind == OutputFormat::HF;
  uint64_t maxBytes = format.maxBytes;
  std::string rankFile =
      format.kind == OutputFormat::RankSafetensors ? "model.safetensors" : "";
  std::string tracker =
      format.kind == OutputFormat::Backend ? to.trackerFile() : "";
  out.iteration = std::max<int64_t>(format.iteration, 0);
  out.rankRoot = top;
  if (!tracker.empty()) {
    out.tracker = top + "/" + tracker;
    out.trackerText =
        format.iteration < 0 ? "release" : std::to_string(format.iteration);
    out.rankRoot = top + "/" + (format.iteration < 0
                                    ? "release"
                                    : iterationDir(format.iteration));
  }
  // The rank files go under the rank root.
  const std::string &outDir = out.rankRoot;
  out.dirs.push_back(outDir);
  for (int64_t r : ranks) {
    std::vector<RankTensor> tensors = to.rankTensors(config, r);
    std::vector<uint64_t> sizes;
    for (const RankTensor &t : tensors)
      sizes.push_back(numBytes(t.shape, t.dtype));
    std::string dir = hfLayout ? outDir : join(outDir, to.rankDir(config, r));
    if (dir != outDir)
      out.dirs.push_back(dir);
    std::string file = hfLayout            ? "model{part}.safetensors"
                       : !rankFile.empty() ? rankFile
                                           : to.rankFile(config, r);
    // A rank whose file has no part number is written whole.
    std::vector<std::vector<size_t>> parts =
        file.find("{part}") == std::string::npos && !hfLayout
            ? std::vector<std::vector<size_t>>{{}}
            : splitBySize(sizes, maxBytes);
    std::map<std::string, std::string> weightMap;
    uint64_t total = 0;
    for (size_t p = 0; p < parts.size(); ++p) {
      // HF numbers shards from 1 of N, and names a single one plainly.
      std::string part = !hfLayout        ? std::to_string(p)
                         : parts.size() == 1 ? ""
                                             : "-" + padded(p + 1, 5) + "-of-" +
                                                   padded(parts.size(), 5);
      std::string name = withPart(file, part);
      Converter::TargetFile target{r, join(dir, name), {}};
      for (size_t i : parts[p]) {
        target.tensors.push_back(tensors[i].name);
        weightMap[tensors[i].name] = name;
        total += sizes[i];
        target.bytes += sizes[i];
      }
      if (parts[p].empty()) // the whole rank
        target.bytes = std::accumulate(sizes.begin(), sizes.end(), uint64_t(0));
      out.files.push_back(std::move(target));
    }
    if (hfLayout && parts.size() > 1) {
      // Keys sorted and indented by 2, as transformers writes the index.
      std::string text = "{\n  \"metadata\": {\n    \"total_size\": " +
                         std::to_string(total) + "\n  },\n  \"weight_map\": {";
      for (auto it = weightMap.begin(); it != weightMap.end(); ++it)
        text += std::string(it == weightMap.begin() ? "" : ",") + "\n    " +
                json::quote(it->first) + ": " + json::quote(it->second);
      out.indexPath = join(outDir, "model.safetensors.index.json");
      out.indexText = text + "\n  }\n}\n";
    }
  }
  return out;
}

size_t mdl::rt::leadingAxes(const ModelLayout &m, const RankTensor &t) {
  size_t rank = t.shape.size();
  std::vector<int64_t> stride(rank, 1);
  for (size_t k = rank; k-- > 1;)
    stride[k - 1] = stride[k] * t.shape[k];
  size_t k = 0;
  for (; k + 1 < rank; ++k) {
    // The atoms that run along axis k: none (a stacked layer's index is
    // its box's place), or the expert dimension alone.
    bool ok = true;
    for (const Piece &p : t.pieces) {
      const Param &param = m.params[size_t(p.param)];
      for (size_t a = 0; a < p.lo.size() && ok; ++a)
        if (p.count[a] > 1 && p.stride[a] >= stride[k] &&
            (k == 0 || p.stride[a] < stride[k - 1]))
          ok = !param.expert.empty() && param.atoms[a] == param.expert &&
               p.stride[a] == stride[k];
      if (!ok)
        break;
    }
    if (!ok)
      break;
  }
  return k;
}

std::unique_ptr<TensorFileWriter>
mdl::rt::makeRankWriter(const std::string &path, const OutputFiles &files,
                        const ParallelConfig &config, const Binding *to,
                        int64_t rank) {
  if (endsWith(path, std::string("/") + kDistMetadataFile)) {
    auto w = std::make_unique<DistCheckpointWriter>();
    if (to)
      for (const RankTensor &t : to->rankTensors(config, rank))
        w->setLeadingAxes(t.name, leadingAxes(to->layout(), t));
    w->setIteration(files.iteration);
    for (const auto &[key, value] : files.commonArgs)
      w->setArg(key, value);
    return w;
  }
  if (!endsWith(path, ".pt"))
    return std::make_unique<SafetensorsWriter>();
  auto w = std::make_unique<TorchCheckpointWriter>();
  // The state dicts as rankTensors names them: one, or one per virtual
  // stage with its tensors prefixed `model<c>.`.
  std::vector<std::string> keys;
  for (int64_t c = 0; c < config.vpp; ++c)
    keys.push_back(config.vpp > 1 ? "model" + std::to_string(c) : "model");
  w->setStateDicts(keys, config.vpp > 1);
  // Megatron's checkpoint_version 3.0, as an int: torch 1.13's weights-only
  // unpickler has no floats, and 3 == 3.0 wherever Megatron compares it.
  w->setInt("checkpoint_version", 3);
  w->setInt("iteration", files.iteration);
  return w;
}

//===----------------------------------------------------------------------===//
// Reading
//===----------------------------------------------------------------------===//

std::optional<SourceFiles> mdl::rt::findRankFiles(const Binding &from,
                                                   const std::string &path,
                                                   std::string &error) {
  // Rank directories hold one file each (no `{part}`).
  std::string rankFile = from.rankFile(ParallelConfig(), 0),
              tracker = from.trackerFile();
  auto fileIn = [&](const std::string &dir) -> std::string {
    for (const std::string &f : {rankFile, std::string("model.safetensors")})
      if (isFile(dir + "/" + f))
        return dir + "/" + f;
    return "";
  };
  std::string dir = path;
  while (dir.size() > 1 && dir.back() == '/')
    dir.pop_back();
  SourceFiles s;
  // The iteration directory the tracker names, if there is one.
  auto followTracker = [&]() {
    if (tracker.empty() || !isFile(dir + "/" + tracker))
      return true;
    std::ifstream in(dir + "/" + tracker);
    std::string text;
    std::getline(in, text);
    while (!text.empty() && (text.back() == ' ' || text.back() == '\r'))
      text.pop_back();
    if (text == "release")
      s.rankRoot = dir + "/release";
    else if (!text.empty() && text.size() <= 12 &&
             text.find_first_not_of("0123456789") == std::string::npos)
      s.rankRoot = dir + "/" + iterationDir(std::stoll(text));
    else {
      error = dir + "/" + tracker + " holds '" + text +
              "', not 'release' or an iteration number";
      return false;
    }
    if (!isDirectory(s.rankRoot)) {
      error = dir + "/" + tracker + " names " + s.rankRoot +
              ", which is not a directory";
      return false;
    }
    return true;
  };
  if (from.rankDir(ParallelConfig(), 0).empty()) {
    // The ranks' files are at the top (vLLM's sharded_state), or in the
    // iteration directory a tracker names (a distributed checkpoint).
    s.rankRoot = dir;
    if (!followTracker())
      return std::nullopt;
    return s;
  }
  if (std::string file = fileIn(dir); !file.empty()) {
    // One rank's directory.
    size_t slash = dir.rfind('/');
    s.rankRoot = slash == std::string::npos ? "." : dir.substr(0, slash);
    s.rankFiles[slash == std::string::npos ? dir : dir.substr(slash + 1)] =
        file;
    return s;
  }
  s.rankRoot = dir;
  if (!followTracker())
    return std::nullopt;
  DIR *d = ::opendir(s.rankRoot.c_str());
  if (!d) {
    error = "cannot read the directory '" + s.rankRoot + "'";
    return std::nullopt;
  }
  while (const dirent *e = ::readdir(d)) {
    std::string name = e->d_name;
    if (name == "." || name == "..")
      continue;
    if (std::string file = fileIn(s.rankRoot + "/" + name); !file.empty())
      s.rankFiles[name] = file;
  }
  ::closedir(d);
  if (s.rankFiles.empty()) {
    error = "'" + path + "' holds no rank directory with a " + rankFile +
            (rankFile == "model.safetensors" ? "" : " or model.safetensors") +
            (tracker.empty() ? "" : " (and no " + tracker + ")");
    return std::nullopt;
  }
  return s;
}

std::optional<std::vector<std::string>>
SourceFiles::filesOf(const Binding &from, const ParallelConfig &config,
                     int64_t rank, std::string &error) const {
  std::string name = from.rankDir(config, rank);
  if (!rankFiles.empty()) {
    auto it = rankFiles.find(name);
    if (it != rankFiles.end())
      return std::vector<std::string>{it->second};
    error = "'" + rankRoot + "' has no rank directory " + name + " (rank " +
            std::to_string(rank) + " of " + config.str() + ")";
    return std::nullopt;
  }
  std::string rankDir = join(rankRoot, name);
  std::string file = from.rankFile(config, rank);
  size_t at = file.find("{part}");
  if (at == std::string::npos)
    return std::vector<std::string>{join(rankDir, file)};
  // Parts numbered from 0, in order.
  std::string prefix = file.substr(0, at), suffix = file.substr(at + 6);
  std::map<uint64_t, std::string> parts;
  std::optional<std::vector<std::string>> names =
      listDir(rankDir, [&](const std::string &name) {
        if (name.size() <= prefix.size() + suffix.size() ||
            name.compare(0, prefix.size(), prefix) != 0 ||
            name.compare(name.size() - suffix.size(), suffix.size(),
                         suffix) != 0)
          return false;
        std::string number = name.substr(
            prefix.size(), name.size() - prefix.size() - suffix.size());
        if (number.size() > 9 ||
            !std::all_of(number.begin(), number.end(),
                         [](char c) { return std::isdigit((unsigned char)c); }))
          return false;
        parts[std::stoull(number)] = name;
        return true;
      });
  if (!names || parts.empty()) {
    error = "'" + rankDir + "' has no file " + withPart(file, "N") +
            " of rank " + std::to_string(rank);
    return std::nullopt;
  }
  std::vector<std::string> out;
  for (auto &[n, name] : parts)
    out.push_back(join(rankDir, name));
  return out;
}

std::map<int64_t, std::string> mdl::rt::savedRankDirs(
    const Binding &b, const ParallelConfig &config) {
  std::map<int64_t, std::string> out;
  for (int64_t r = 0; r < Binding::numRanks(config); ++r)
    if (b.rankSaved(config, r))
      out[r] = b.rankDir(config, r);
  return out;
}

std::optional<ParallelConfig> mdl::rt::inferConfig(
    const Binding &from, const SourceFiles &source,
    const std::function<std::shared_ptr<Checkpoint>(const std::string &,
                                                    std::string &)> &open,
    std::string &error) {
  const auto &files = source.rankFiles;
  int64_t n = int64_t(files.size());
  // Virtual stages from the state dicts the first file holds.
  std::shared_ptr<Checkpoint> first = open(files.begin()->second, error);
  if (!first)
    return std::nullopt;
  std::set<std::string> chunks;
  for (const auto &[name, ref] : first->tensors())
    if (name.compare(0, 5, "model") == 0 && name.find('.') != std::string::npos)
      chunks.insert(name.substr(0, name.find('.')));
  ParallelConfig c;
  c.vpp = std::max<int64_t>(1, int64_t(chunks.size()));

  // Whether the directories found are those of `c`'s ranks, with every
  // rank that saves among them; ranks in order, so most candidates fail
  // at their first ranks.
  auto namesMatch = [&]() {
    std::set<std::string> seen;
    for (int64_t r = 0; r < Binding::numRanks(c); ++r) {
      std::string dir = from.rankDir(c, r);
      if (files.count(dir))
        seen.insert(dir);
      else if (from.rankSaved(c, r))
        return false;
    }
    return int64_t(seen.size()) == n;
  };
  std::string firstMismatch;
  for (c.tp = 1; c.tp <= n; ++c.tp)
    for (c.pp = 1; c.tp * c.pp <= n; ++c.pp)
      for (c.ep = 1; c.ep <= n; ++c.ep)
        for (c.etp = 1; c.etp <= c.tp; ++c.etp) {
          if (c.tp % c.etp || !namesMatch() || !from.validate(c).empty())
            continue;
          // The tensors of a saved rank's file must be those of the plan.
          std::map<int64_t, std::string> saved = savedRankDirs(from, c);
          auto it = saved.begin();
          std::shared_ptr<Checkpoint> ckpt = open(files.at(it->second), error);
          if (!ckpt)
            return std::nullopt;
          std::vector<RankTensor> tensors = from.rankTensors(c, it->first);
          bool same = tensors.size() == ckpt->tensors().size();
          for (const RankTensor &t : tensors) {
            const Checkpoint::TensorRef *ref = same ? ckpt->find(t.name) : nullptr;
            same = ref && ref->info->shape == t.shape && ref->info->dtype == t.dtype;
          }
          if (same)
            return c;
          if (firstMismatch.empty())
            firstMismatch = c.str();
        }
  std::string names;
  for (const auto &[name, file] : files)
    names += (names.empty() ? "" : ", ") + name;
  error = "'" + source.rankRoot + "' (" + names + ") is no checkpoint of " +
          from.layout().model + " on " + from.layout().backend + ": " +
          (firstMismatch.empty()
               ? std::string("no parallel configuration saves those rank "
                             "directories")
               : "its directories are those of " + firstMismatch +
                     " (with vpp " + std::to_string(c.vpp) +
                     "), but the tensors of its first rank are not");
  return std::nullopt;
}

//===----------------------------------------------------------------------===//
// What travels with the weights
//===----------------------------------------------------------------------===//

bool mdl::rt::carryFiles(const std::string &inDir, const std::string &outDir,
                         const std::vector<std::string> &written,
                         std::vector<std::string> &created,
                         std::string &error) {
  std::optional<std::vector<std::string>> names =
      listDir(inDir, [&](const std::string &name) {
        // Weights in any of the formats checkpoints use, their indices,
        // and Megatron's tracker of the latest iteration.
        for (std::string_view weights :
             {".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".index.json",
              ".tmp"})
          if (endsWith(name, weights))
            return false;
        if (name == "latest_checkpointed_iteration.txt" ||
            name.find(".tmp.") != std::string::npos ||
            std::find(written.begin(), written.end(), name) != written.end())
          return false;
        return isFile(inDir + "/" + name);
      });
  if (!names) {
    error = "cannot read the directory '" + inDir + "': " + std::strerror(errno);
    return false;
  }
  for (const std::string &name : *names) {
    std::ifstream in(inDir + "/" + name, std::ios::binary);
    std::stringstream text;
    text << in.rdbuf();
    std::string path = outDir + "/" + name;
    std::string tmp = path + ".tmp." + std::to_string(::getpid());
    bool existed = isFile(path);
    {
      std::ofstream out(tmp, std::ios::binary);
      out << text.str();
      if (!in || !out) {
        error = "cannot copy '" + inDir + "/" + name + "' to '" + path + "'";
        std::remove(tmp.c_str());
        return false;
      }
    }
    if (std::rename(tmp.c_str(), path.c_str()) != 0) {
      error = "cannot write '" + path + "': " + std::strerror(errno);
      std::remove(tmp.c_str());
      return false;
    }
    if (!existed)
      created.push_back(path);
  }
  return true;
}

static bool setMatching(json::Value &node, const std::string &path,
                        const std::string &key, const json::Value &value) {
  if (node.kind() != json::Value::Object)
    return false;
  bool any = false;
  std::vector<std::string> names;
  for (const auto &member : node.members())
    names.push_back(member.first);
  for (const std::string &name : names) {
    std::string sub = path.empty() ? name : path + "." + name;
    if (HFConfig::keyMatches(sub, key)) {
      node.set(name, value);
      any = true;
    } else {
      any |= setMatching(*node.get(name), sub, key, value);
    }
  }
  return any;
}

void mdl::rt::setConfigKey(json::Value &config, const std::string &key,
                           const std::string &value, bool create) {
  json::Value v = HFConfig::overrideValue(value);
  if (setMatching(config, "", key, v) || !create ||
      config.kind() != json::Value::Object)
    return;
  // A new key: at its dotted path, creating the objects on the way.
  json::Value *node = &config;
  size_t start = 0;
  for (size_t dot; (dot = key.find('.', start)) != std::string::npos;
       start = dot + 1) {
    std::string part = key.substr(start, dot - start);
    json::Value *next = node->get(part);
    if (!next || next->kind() != json::Value::Object) {
      node->set(part, json::Value::object());
      next = node->get(part);
    }
    node = next;
  }
  node->set(key.substr(start), v);
}

std::string mdl::rt::outputConfigText(
    const std::string &text,
    const std::vector<std::pair<std::string, std::string>> &overrides,
    std::optional<DType> castTo, const ModelLayout &target) {
  json::ParseError perr;
  std::optional<json::Value> config = json::parse(text, perr);
  if (!config)
    return text;
  bool changed = !overrides.empty() || castTo;
  for (const auto &[k, v] : overrides)
    setConfigKey(*config, k, v);
  if (castTo) {
    setConfigKey(*config, "torch_dtype", std::string(torchName(*castTo)));
    setConfigKey(*config, "dtype", std::string(torchName(*castTo)),
                 /*create=*/false);
  }
  // A checkpoint of FP8 weights dequantized is one of the dequantized
  // model.
  if (std::any_of(target.tensors.begin(), target.tensors.end(),
                  [](const TensorSpec &t) { return t.dequantized; }))
    changed |= config->erase("quantization_config");
  return changed ? json::write(*config, 2) + "\n" : text;
}
