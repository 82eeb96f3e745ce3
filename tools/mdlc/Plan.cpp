//===- Plan.cpp - mdlc plan: what each rank holds --------------------------===//
//
// For a backend and a parallel configuration: whether it is valid, and for
// each rank (or one) every local tensor with its shape, dtype and the
// slices of parameters it holds. A slice prints as the parameter's box,
// `q[G 0:2, P 0:8, D 0:256, H 0:2560]`, where it starts in the tensor and
// the tensor stride of each dimension; for a matrix also the rows it fills.
//
//===----------------------------------------------------------------------===//

#include "Commands.h"
#include "PlanPicture.h"

#include "mdl/Evaluate/Bind.h"
#include "mdl/Runtime/DType.h"
#include "mdl/Runtime/Json.h"
#include "mdl/Runtime/Plan.h"

#include "llvm/Support/Regex.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>

using namespace mdl;

namespace {

std::string boxText(const rt::ModelLayout &m, const rt::Piece &p) {
  const rt::Param &param = m.params[p.param];
  std::string s = param.path + "[";
  for (size_t a = 0; a < param.atoms.size(); ++a)
    s += (a ? ", " : "") + param.atoms[a] + " " + std::to_string(p.lo[a]) +
         ":" + std::to_string(p.lo[a] + p.count[a]);
  return s + "]";
}

std::string rankText(const RankContext &c) {
  return "tp " + std::to_string(c.tpRank) + ", pp " + std::to_string(c.ppRank) +
         ", ep " + std::to_string(c.epRank) + ", etp " +
         std::to_string(c.etpRank);
}

/// The rank's place on the axes the configuration splits: "tp 1, ep 0".
std::string axesText(const RankContext &c, const ParallelConfig &p) {
  std::string s;
  auto add = [&](const char *axis, int64_t size, int64_t rank) {
    if (size > 1)
      s += (s.empty() ? "" : ", ") + std::string(axis) + " " +
           std::to_string(rank);
  };
  add("tp", p.tp, c.tpRank);
  add("pp", p.pp, c.ppRank);
  add("ep", p.ep, c.epRank);
  add("etp", p.etp, c.etpRank);
  return s;
}

} // namespace

int mdl::runPlan(const Options &options, mlir::ModuleOp top,
                 mlir::MLIRContext &context) {
  BoundSpec spec = bindSpec(options, top, context, options.backends.front());
  if (!spec.bound)
    return 1;
  const std::unique_ptr<BoundModel> &bound = spec.bound;
  const rt::ModelLayout &m = bound->layout;
  rt::Planner planner(m, options.parallel);
  if (reportInvalid(planner, options))
    return 1;
  // Ranks are numbered with tp fastest, then ep, then pp.
  std::vector<RankContext> contexts = planner.ranks();
  auto rankNumber = [&](const RankContext &c) {
    return (c.ppRank * options.parallel.ep + c.epRank) * options.parallel.tp +
           c.tpRank;
  };
  int64_t numRanks =
      options.parallel.tp * options.parallel.pp * options.parallel.ep;
  if (options.rank >= numRanks) {
    llvm::errs() << "mdlc: error: rank " << options.rank << " does not exist: "
                 << options.parallel.str() << " has " << numRanks
                 << " ranks\n";
    return 2;
  }

  warnDefaultAxes(options, m);
  bool picture = options.format == "svg" || options.format == "diagram";
  // POSIX extended regular expressions, searched in each tensor's name.
  llvm::Regex tensorPattern(options.tensorPattern);
  std::string regexError;
  if (picture && !tensorPattern.isValid(regexError)) {
    llvm::errs() << "mdlc: error: --tensor '" << options.tensorPattern
                 << "' is not a regular expression: " << regexError << "\n";
    return 2;
  }
  PlanPicture pictureOf(m, m.model + " on " + m.backend + ", " +
                               options.parallel.str());

  json::Value jranks = json::Value::array();
  if (options.format == "text") {
    llvm::outs() << m.model << " on " << m.backend << ", "
                 << options.parallel.str() << " (" << spec.config->path() << ")\n";
    for (const auto &[name, value] : m.choices)
      llvm::outs() << name << " = " << value << "\n";
    if (!m.capabilities.empty()) {
      llvm::outs() << "capabilities:";
      for (const auto &[name, has] : m.capabilities)
        llvm::outs() << " " << name << (has ? "" : " (no)");
      llvm::outs() << "\n";
    }
    for (const rt::KernelPath &k : rt::kernelPaths(m)) {
      llvm::outs() << k.instance << " needs " << k.capability << ": ";
      if (k.fast)
        llvm::outs() << "fast path\n";
      else if (k.fallback)
        llvm::outs() << "fallback (" << *k.fallback << ")\n";
      else
        llvm::outs() << "no path\n";
    }
  }
  int64_t lastRank = -1;
  json::Value *jtensors = nullptr;
  for (const RankContext &ctx : contexts) {
    int64_t r = rankNumber(ctx);
    if (options.rank >= 0 && r != options.rank)
      continue;
    if (r != lastRank && !picture) {
      lastRank = r;
      if (options.format == "text") {
        llvm::outs() << "rank " << r << " (" << rankText(ctx) << "):\n";
      } else {
        json::Value jr = json::Value::object();
        jr.set("rank", json::Value::integer(r));
        jr.set("tp", json::Value::integer(ctx.tpRank));
        jr.set("pp", json::Value::integer(ctx.ppRank));
        jr.set("ep", json::Value::integer(ctx.epRank));
        jr.set("etp", json::Value::integer(ctx.etpRank));
        jr.set("tensors", json::Value::array());
        jranks.push(std::move(jr));
        jtensors = jranks.elements().back().get("tensors");
      }
    }
    for (const rt::LocalTensor &lt : planner.tensors(ctx, nullptr)) {
      const rt::TensorSpec &spec = m.tensors[lt.spec];
      // A family prints once, with the range of its index.
      std::string name;
      for (const rt::NameSegment &s : spec.name) {
        if (s.kind == rt::NameSegment::Text)
          name += s.text;
        else if (s.kind == rt::NameSegment::LayerIndex)
          name += std::to_string(lt.localLayer);
        else
          for (const auto &f : lt.families)
            if (f.first == s.atom)
              name += "{" + s.atom + " 0.." +
                      std::to_string(f.second.count - 1) + "}";
      }
      if (picture) {
        if (tensorPattern.match(name))
          pictureOf.add("pp " + std::to_string(ctx.ppRank) + " chunk " +
                            std::to_string(ctx.chunk),
                        name, r, axesText(ctx, options.parallel), lt);
        continue;
      }
      if (options.format == "json") {
        json::Value jt = json::Value::object();
        jt.set("name", json::Value::string(name));
        json::Value shape = json::Value::array();
        for (int64_t d : lt.shape)
          shape.push(json::Value::integer(d));
        jt.set("shape", std::move(shape));
        jt.set("dtype",
               json::Value::string(std::string(safetensorsName(lt.dtype))));
        if (options.parallel.vpp > 1)
          jt.set("chunk", json::Value::integer(ctx.chunk));
        if (spec.copy)
          jt.set("copy", json::Value::boolean(true));
        json::Value fam = json::Value::object();
        for (const auto &f : lt.families)
          fam.set(f.first, json::Value::array(
                               {json::Value::integer(f.second.lo),
                                json::Value::integer(f.second.lo +
                                                     f.second.count)}));
        if (!lt.families.empty())
          jt.set("families", std::move(fam));
        json::Value slices = json::Value::array();
        for (const rt::Piece &p : lt.pieces) {
          const rt::Param &param = m.params[p.param];
          json::Value js = json::Value::object();
          js.set("param", json::Value::string(param.path));
          json::Value box = json::Value::object(), strides = json::Value::object();
          for (size_t a = 0; a < param.atoms.size(); ++a) {
            // [begin, end), as the text form's `lo:hi`.
            box.set(param.atoms[a],
                    json::Value::array({json::Value::integer(p.lo[a]),
                                        json::Value::integer(p.lo[a] +
                                                             p.count[a])}));
            strides.set(param.atoms[a], json::Value::integer(p.stride[a]));
          }
          js.set("box", std::move(box));
          js.set("offset", json::Value::integer(p.base));
          js.set("strides", std::move(strides));
          slices.push(std::move(js));
        }
        jt.set("slices", std::move(slices));
        jtensors->push(std::move(jt));
        continue;
      }
      llvm::outs() << "  " << name << " " << shapeText(lt.shape, ", ") << " "
                   << safetensorsName(lt.dtype);
      if (options.parallel.vpp > 1)
        llvm::outs() << " (chunk " << ctx.chunk << ")";
      if (spec.copy)
        llvm::outs() << " (copy)";
      if (spec.offset)
        llvm::outs() << " (stored = value " << (spec.offset > 0 ? "+ " : "- ")
                     << std::abs(spec.offset) << ")";
      llvm::outs() << "\n";
      for (const rt::Piece &p : lt.pieces) {
        const rt::Param &param = m.params[p.param];
        llvm::outs() << "    " << boxText(m, p) << " at " << p.base
                     << " strides";
        for (size_t a = 0; a < param.atoms.size(); ++a)
          llvm::outs() << " " << param.atoms[a] << "=" << p.stride[a];
        std::vector<std::pair<int64_t, int64_t>> rows;
        if (lt.axesShape.size() >= 2)
          rows = rowsOf(p, lt.axesShape);
        if (!rows.empty()) {
          llvm::outs() << " rows";
          for (size_t i = 0; i < rows.size() && i < 8; ++i)
            llvm::outs() << (i ? ", " : " ") << rows[i].first << ":"
                         << rows[i].second;
          if (rows.size() > 8)
            llvm::outs() << ", ... (" << rows.size() << " runs)";
        }
        llvm::outs() << "\n";
      }
    }
  }
  if (picture) {
    if (pictureOf.empty()) {
      llvm::errs() << "mdlc: error: no tensor of " << m.model << " on "
                   << m.backend << " matches --tensor '"
                   << options.tensorPattern << "'\n";
      return 1;
    }
    llvm::outs() << (options.format == "svg" ? pictureOf.svg()
                                             : pictureOf.diagram());
    return 0;
  }
  if (options.format == "json") {
    json::Value out = json::Value::object();
    out.set("model", json::Value::string(m.model));
    out.set("backend", json::Value::string(m.backend));
    out.set("config", json::Value::string(options.parallel.str()));
    out.set("source", json::Value::string(spec.config->path()));
    json::Value caps = json::Value::object();
    for (const auto &[name, has] : m.capabilities)
      caps.set(name, json::Value::boolean(has));
    out.set("capabilities", std::move(caps));
    json::Value paths = json::Value::array();
    for (const rt::KernelPath &k : rt::kernelPaths(m)) {
      json::Value p = json::Value::object();
      p.set("instance", json::Value::string(k.instance));
      p.set("capability", json::Value::string(k.capability));
      p.set("path", json::Value::string(k.fast       ? "fast"
                                        : k.fallback ? "fallback"
                                                     : "none"));
      if (k.fallback)
        p.set("fallback", json::Value::string(*k.fallback));
      paths.push(std::move(p));
    }
    out.set("paths", std::move(paths));
    out.set("ranks", std::move(jranks));
    llvm::outs() << json::write(out, 2) << "\n";
  }
  return 0;
}
