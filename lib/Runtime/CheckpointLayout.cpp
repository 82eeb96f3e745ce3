//===- CheckpointLayout.cpp - Where a backend's rank files are ------------===//

#include "mdl/Runtime/CheckpointLayout.h"
#include "mdl/Runtime/Safetensors.h"
#include "mdl/Runtime/TorchCheckpoint.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <set>

#include <dirent.h>
#include <sys/stat.h>

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

} // namespace

OutputLayout mdl::rt::outputLayout(const Binding &to, const std::string &out,
                                   bool safetensors, int64_t iteration) {
  OutputLayout l;
  l.rankRoot = out;
  l.rankFile = safetensors ? "model.safetensors" : "";
  std::string tracker = safetensors ? "" : to.trackerFile();
  l.iteration = std::max<int64_t>(iteration, 0);
  if (!tracker.empty()) {
    l.tracker = out + "/" + tracker;
    l.trackerText = iteration < 0 ? "release" : std::to_string(iteration);
    l.rankRoot = out + "/" + (iteration < 0 ? "release" : iterationDir(iteration));
  }
  return l;
}

std::unique_ptr<TensorFileWriter>
mdl::rt::makeRankWriter(const std::string &path, const OutputLayout &layout,
                        const ParallelConfig &config) {
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
  w->setInt("iteration", layout.iteration);
  return w;
}

std::optional<SourceLayout> mdl::rt::findRankFiles(const Binding &from,
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
  SourceLayout s;
  if (std::string file = fileIn(dir); !file.empty()) {
    // One rank's directory.
    size_t slash = dir.rfind('/');
    s.rankRoot = slash == std::string::npos ? "." : dir.substr(0, slash);
    s.rankFiles[slash == std::string::npos ? dir : dir.substr(slash + 1)] =
        file;
    return s;
  }
  s.rankRoot = dir;
  if (!tracker.empty() && isFile(dir + "/" + tracker)) {
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
      return std::nullopt;
    }
    if (!isDirectory(s.rankRoot)) {
      error = dir + "/" + tracker + " names " + s.rankRoot +
              ", which is not a directory";
      return std::nullopt;
    }
  }
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

std::map<int64_t, std::string> mdl::rt::savedRankDirs(
    const Binding &b, const ParallelConfig &config) {
  std::map<int64_t, std::string> out;
  for (int64_t r = 0; r < Binding::numRanks(config); ++r)
    if (b.rankSaved(config, r))
      out[r] = b.rankDir(config, r);
  return out;
}

std::optional<ParallelConfig> mdl::rt::inferConfig(
    const Binding &from, const SourceLayout &source,
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
