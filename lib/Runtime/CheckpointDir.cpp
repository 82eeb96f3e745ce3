//===- CheckpointDir.cpp - The files of a checkpoint directory ------------===//

#include "mdl/Runtime/CheckpointDir.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <dirent.h>
#include <fstream>
#include <map>
#include <numeric>
#include <sstream>
#include <sys/stat.h>
#include <unistd.h>

using namespace mdl;
using namespace mdl::rt;

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

static std::string join(const std::string &dir, const std::string &name) {
  return name.empty() ? dir : dir + "/" + name;
}

/// `text` with every `{part}` replaced by `part`.
static std::string withPart(std::string text, const std::string &part) {
  static const std::string key = "{part}";
  for (size_t at = text.find(key); at != std::string::npos;
       at = text.find(key, at + part.size()))
    text.replace(at, key.size(), part);
  return text;
}

static std::string padded(size_t n, size_t width) {
  std::string s = std::to_string(n);
  return std::string(s.size() < width ? width - s.size() : 0, '0') + s;
}

OutputFiles mdl::rt::planOutputFiles(const Binding &to,
                                     const ParallelConfig &config,
                                     const std::vector<int64_t> &ranks,
                                     const std::string &outDir, bool hfLayout,
                                     uint64_t maxBytes,
                                     const std::string &rankFile) {
  OutputFiles out;
  out.dirs.push_back(outDir);
  for (int64_t r : ranks) {
    std::vector<RankTensor> tensors = to.rankTensors(config, r);
    std::vector<uint64_t> sizes;
    for (const RankTensor &t : tensors) {
      uint64_t n = byteSize(t.dtype);
      for (int64_t d : t.shape)
        n *= uint64_t(d);
      sizes.push_back(n);
    }
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

/// The names of the entries of `dir` that `keep` accepts, sorted; nothing
/// when it cannot be read.
static std::optional<std::vector<std::string>>
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

std::optional<std::vector<std::string>>
mdl::rt::rankFiles(const Binding &from, const ParallelConfig &config,
                   int64_t rank, const std::string &dir, std::string &error) {
  std::string rankDir = join(dir, from.rankDir(config, rank));
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

static bool endsWith(const std::string &s, std::string_view suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool mdl::rt::carryFiles(const std::string &inDir, const std::string &outDir,
                         const std::vector<std::string> &written,
                         std::vector<std::string> &created,
                         std::string &error) {
  auto isRegular = [](const std::string &p) {
    struct stat st;
    return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode);
  };
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
        return isRegular(inDir + "/" + name);
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
    bool existed = isRegular(path);
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
