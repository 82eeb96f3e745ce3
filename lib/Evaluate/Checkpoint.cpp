//===- Checkpoint.cpp - Comparing a spec with a real checkpoint -----------===//

#include "mdl/Evaluate/Checkpoint.h"
#include "mdl/Evaluate/Engine.h"

#include "mdl/Runtime/Checkpoint/Checkpoint.h"
#include "mdl/Runtime/Base/DType.h"
#include "mdl/Runtime/Base/File.h"

#include "mlir/IR/SymbolTable.h"
#include "llvm/ADT/StringExtras.h"

#include <set>
#include <unordered_set>

using namespace mlir;
using namespace mdl;

//===----------------------------------------------------------------------===//
// Reading
//===----------------------------------------------------------------------===//

static llvm::Error fail(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
}

/// Parses `[d0,d1,...]`.
static std::optional<std::vector<int64_t>> parseShape(StringRef text) {
  text = text.trim();
  if (!text.consume_front("[") || !text.consume_back("]"))
    return std::nullopt;
  std::vector<int64_t> shape;
  if (text.trim().empty())
    return shape;
  SmallVector<StringRef> dims;
  text.split(dims, ',');
  for (StringRef d : dims) {
    int64_t v;
    if (d.trim().getAsInteger(10, v) || v < 0)
      return std::nullopt;
    shape.push_back(v);
  }
  return shape;
}

static llvm::Expected<CheckpointContents> readInventory(StringRef path) {
  std::string text, error;
  if (!rt::readFile(path.str(), text, error))
    return fail(error);
  CheckpointContents out;
  SmallVector<StringRef> lines;
  StringRef(text).split(lines, '\n');
  for (size_t n = 0; n < lines.size(); ++n) {
    StringRef line = lines[n].rtrim("\r");
    if (line.trim().empty() || line.starts_with("#"))
      continue;
    // A string, not a Twine: a Twine returned from here would point at
    // temporaries that are gone.
    auto where = [&] { return path.str() + ":" + std::to_string(n + 1) + ": "; };
    SmallVector<StringRef> fields;
    line.split(fields, '\t');
    if (fields.size() < 3)
      return fail(where() +
                  "expected name<TAB>[d0,d1,...]<TAB>DTYPE, as mdlc params "
                  "prints");
    CheckpointEntry e;
    e.shape = parseShape(fields[1]);
    if (!e.shape)
      return fail(where() + "bad shape '" + fields[1] + "'");
    e.dtype = parseDType(fields[2].trim().str());
    if (!e.dtype)
      return fail(where() + "unknown dtype '" + fields[2] + "'");
    if (!out.emplace(fields[0].trim().str(), e).second)
      return fail(where() + "tensor '" + fields[0] + "' is listed twice");
  }
  return out;
}

llvm::Expected<CheckpointContents>
mdl::readCheckpointContents(const CheckpointSource &source) {
  std::string error;
  switch (source.kind) {
  case CheckpointSource::None:
    return CheckpointContents();
  case CheckpointSource::Inventory:
    return readInventory(source.path);
  case CheckpointSource::Index: {
    std::optional<rt::CheckpointIndex> index =
        rt::readCheckpointIndex(source.path, error);
    if (!index)
      return fail(error);
    CheckpointContents out;
    out.reserve(index->weightMap.size());
    for (const auto &entry : index->weightMap)
      out.emplace(entry.first, CheckpointEntry());
    return out;
  }
  case CheckpointSource::Dir: {
    std::unique_ptr<rt::Checkpoint> ckpt =
        rt::Checkpoint::open(source.path, error, /*headersOnly=*/true);
    if (!ckpt)
      return fail(error);
    CheckpointContents out;
    for (const auto &[name, ref] : ckpt->tensors())
      out[name] = {ref.info->shape, ref.info->dtype};
    return out;
  }
  }
  return fail("unknown checkpoint source");
}

//===----------------------------------------------------------------------===//
// Comparing
//===----------------------------------------------------------------------===//

namespace {

/// How alike two names are: the length of their common prefix and suffix.
size_t likeness(StringRef a, StringRef b) {
  size_t prefix = 0;
  while (prefix < a.size() && prefix < b.size() && a[prefix] == b[prefix])
    ++prefix;
  size_t suffix = 0;
  while (suffix < a.size() - prefix && suffix < b.size() - prefix &&
         a[a.size() - 1 - suffix] == b[b.size() - 1 - suffix])
    ++suffix;
  return prefix + suffix;
}

class Comparison {
  /// A vocabulary padded further than the spec pads it (the padding of a
  /// training run's tensor-parallel size) holds the same rows first, as
  /// Megatron loads it: not another shape.
  bool paddedFurther(const rt::TensorListing &t,
                     const std::vector<int64_t> &stored) const {
    if (stored.size() != t.shape.size() || t.shape.empty() ||
        stored[0] <= t.shape[0] ||
        !std::equal(t.shape.begin() + 1, t.shape.end(), stored.begin() + 1))
      return false;
    for (int p : rt::tensorParams(*t.spec))
      for (const rt::Split &s : bound.layout.params[size_t(p)].splits)
        if (s.padMultiple)
          return true;
    return false;
  }

public:
  Comparison(const rt::BoundLayout &bound, const CheckpointContents &ckpt,
             ModuleDeclOp model, StringRef configPath,
             const std::set<std::string> &dropped)
      : bound(bound), ckpt(ckpt), modelLoc(model.getLoc()),
        configPath(configPath), dropped(dropped) {}

  CheckpointComparison run() {
    expected = rt::listTensors(bound.layout, {});
    std::unordered_set<std::string_view> names;
    names.reserve(expected.size());
    for (size_t i = 0; i < expected.size(); ++i) {
      const rt::TensorListing &t = expected[i];
      names.insert(t.name);
      rt::Instance *node = nodeOf(t);
      auto it = ckpt.find(t.name);
      bool present = it != ckpt.end();
      for (rt::Instance *n = node; n; n = n->parent) {
        ++total[n];
        if (!present)
          ++absent[n];
        auto [it, fresh] = prefix.try_emplace(n, t.name);
        if (!fresh)
          keepCommonPrefix(it->second, t.name);
      }
      if (!present) {
        missing.push_back(i);
        continue;
      }
      const CheckpointEntry &e = it->second;
      if (e.shape && *e.shape != t.shape && !paddedFurther(t, *e.shape))
        report("checkpoint-shape", "tensor '" + t.name + "' is " +
                                       shapeText(t.shape) +
                                       " in the spec but " +
                                       shapeText(*e.shape) +
                                       " in the checkpoint",
               at(t));
      else if (e.dtype && *e.dtype != t.dtype)
        report("checkpoint-dtype",
               "tensor '" + t.name + "' is " +
                   std::string(safetensorsName(t.dtype)) +
                   " in the spec but " +
                   std::string(safetensorsName(*e.dtype)) +
                   " in the checkpoint",
               at(t));
    }
    for (const auto &entry : ckpt)
      if (!names.count(entry.first) && !dropped.count(entry.first) &&
          !bound.layout.buffers.count(entry.first))
        unexpected.insert(entry.first);

    reportAbsentParts(*rootOf());
    reportMissing();
    for (const std::string &name : unexpected) {
      const CheckpointEntry &e = ckpt.at(name);
      std::string what = "'" + name + "'";
      if (e.shape)
        what += " " + shapeText(*e.shape);
      if (e.dtype)
        what += " " + std::string(safetensorsName(*e.dtype));
      report("checkpoint-unexpected",
             "the checkpoint holds tensor " + what +
                 ", which the spec does not describe",
             modelLoc);
    }
    return {std::move(out), expected.size(), expected.size() - missing.size()};
  }

private:
  rt::Instance *nodeOf(const rt::TensorListing &t) const {
    return bound.tensorNodes[size_t(t.spec - bound.layout.tensors.data())];
  }
  Location at(const rt::TensorListing &t) const {
    return locationOf(bound.sources[size_t(t.spec->source)], modelLoc);
  }
  /// Where `module` declares its child `member`.
  Location memberLoc(const rt::ModuleDecl &module,
                     const std::string &member) const {
    for (const rt::ChildDecl &c : module.children)
      if (c.name == member)
        return locationOf(c.where, modelLoc);
    return modelLoc;
  }
  rt::Instance *rootOf() const {
    rt::Instance *n = bound.tensorNodes.front();
    while (n->parent)
      n = n->parent;
    return n;
  }
  void report(std::string check, std::string message, Location loc) {
    out.push_back({std::move(check), std::move(message), loc});
  }
  /// Cuts `a` to its common prefix with `b`.
  static void keepCommonPrefix(std::string &a, const std::string &b) {
    size_t n = 0;
    while (n < a.size() && n < b.size() && a[n] == b[n])
      ++n;
    a.resize(n);
  }
  /// Whether the checkpoint holds nothing of an instance: none of its
  /// tensors, and nothing else where they would be (which would rather be
  /// another storage of them).
  bool whollyAbsent(rt::Instance *n) {
    if (total.lookup(n) == 0 || absent.lookup(n) != total.lookup(n))
      return false;
    std::string where = prefix.lookup(n);
    where = where.substr(0, where.rfind('.') + 1);
    auto it = unexpected.lower_bound(where);
    return where.empty() || it == unexpected.end() ||
           it->compare(0, where.size(), where) != 0;
  }

  /// Reports the highest instances the checkpoint holds nothing of, and the
  /// elements of stacks it holds nothing of, as config disagreements.
  void reportAbsentParts(rt::Instance &node) {
    for (auto &[member, child] : node.instances) {
      if (!whollyAbsent(child.get())) {
        reportAbsentParts(*child);
        continue;
      }
      covered.insert(child.get());
      report("checkpoint-config",
             "the config (" + configPath + ") gives " + child->describe() +
                 ", but the checkpoint holds none of its " +
                 std::to_string(total.lookup(child.get())) + " tensors",
             memberLoc(*node.module, member));
    }
    for (auto &[member, elements] : node.stacks) {
      std::vector<int64_t> gone;
      for (auto &element : elements) {
        if (whollyAbsent(element.get())) {
          covered.insert(element.get());
          gone.push_back(element->stackIndex);
        } else {
          reportAbsentParts(*element);
        }
      }
      if (gone.empty())
        continue;
      std::string stack = node.path.empty() ? member : node.path + "." + member;
      std::string which = gone.size() == 1
                              ? "element " + std::to_string(gone.front())
                              : "elements " + std::to_string(gone.front()) +
                                    " to " + std::to_string(gone.back());
      report("checkpoint-config",
             "the config (" + configPath + ") gives stack '" + stack + "' " +
                 std::to_string(elements.size()) +
                 " elements, but the checkpoint holds nothing of " + which +
                 " (it holds " + std::to_string(elements.size() - gone.size()) +
                 ")",
             memberLoc(*node.module, member));
    }
  }

  bool isCovered(rt::Instance *n) const {
    for (; n; n = n->parent)
      if (covered.count(n))
        return true;
    return false;
  }

  void reportMissing() {
    // Renames are looked for among a bounded number of pairs: a checkpoint
    // of another model (a 100,000-name index against a spec that expects
    // none of it) is reported in time linear in its names.
    constexpr uint64_t kMaxRenamePairs = uint64_t(1) << 22;
    bool searchRenames =
        uint64_t(missing.size()) * unexpected.size() <= kMaxRenamePairs;
    const std::set<std::string> none;
    for (size_t i : missing) {
      const rt::TensorListing &t = expected[i];
      if (isCovered(nodeOf(t)))
        continue;
      // A renamed tensor: the unique most alike unexpected one of the same
      // shape and dtype.
      std::string best;
      size_t bestScore = 0;
      bool tie = false;
      for (const std::string &u : searchRenames ? unexpected : none) {
        const CheckpointEntry &e = ckpt.at(u);
        if ((e.shape && *e.shape != t.shape) || (e.dtype && *e.dtype != t.dtype))
          continue;
        size_t score = likeness(t.name, u);
        if (score > bestScore) {
          best = u, bestScore = score, tie = false;
        } else if (score == bestScore) {
          tie = true;
        }
      }
      if (!best.empty() && !tie &&
          2 * bestScore >= std::min(t.name.size(), best.size())) {
        unexpected.erase(best);
        report("checkpoint-missing",
               "tensor '" + t.name + "' is missing from the checkpoint, " +
                   "which holds '" + best +
                   "' of the same shape and dtype instead (renamed?)",
               at(t));
        continue;
      }
      report("checkpoint-missing",
             "tensor '" + t.name + "' " + shapeText(t.shape) + " " +
                 std::string(safetensorsName(t.dtype)) +
                 " is missing from the checkpoint",
             at(t));
    }
  }

  const rt::BoundLayout &bound;
  const CheckpointContents &ckpt;
  Location modelLoc;
  std::string configPath;
  const std::set<std::string> &dropped;
  std::vector<rt::TensorListing> expected;
  std::vector<size_t> missing;
  std::set<std::string> unexpected;
  llvm::DenseMap<rt::Instance *, size_t> total, absent;
  /// The common prefix of the names of the tensors under an instance.
  llvm::DenseMap<rt::Instance *, std::string> prefix;
  std::set<rt::Instance *> covered;
  std::vector<CheckpointFinding> out;
};

} // namespace

CheckpointComparison
mdl::compareCheckpoint(const rt::BoundLayout &bound,
                       const CheckpointContents &ckpt, ModuleDeclOp model,
                       StringRef configPath,
                       const std::set<std::string> &dropped) {
  if (bound.tensorNodes.empty())
    return {};
  return Comparison(bound, ckpt, model, configPath, dropped).run();
}
