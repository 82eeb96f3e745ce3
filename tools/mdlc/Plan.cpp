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

#include "mdl/Runtime/Base/DType.h"
#include "mdl/Runtime/Base/Json.h"
#include "mdl/Runtime/Model/Plan.h"
#include "mdl/Runtime/Model/Report.h"

#include "llvm/Support/Regex.h"
#include "llvm/Support/raw_ostream.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

using namespace mdl;

namespace {

/// `q[G 0:2, P 0:8, D 0:256]`: the box of a parameter a piece holds.
std::string boxText(const rt::ModelLayout &m, const rt::Piece &p) {
  const rt::Param &param = m.params[p.param];
  std::vector<std::string> dims;
  for (size_t a = 0; a < param.atoms.size(); ++a)
    dims.push_back(
        fmt::format("{} {}:{}", param.atoms[a], p.lo[a], p.lo[a] + p.count[a]));
  return fmt::format("{}[{}]", param.path, fmt::join(dims, ", "));
}

std::string rankText(const RankContext &c) {
  return fmt::format("tp {}, pp {}, ep {}, etp {}", c.tpRank, c.ppRank,
                     c.epRank, c.etpRank);
}

/// The rank's place on the axes the configuration splits: "tp 1, ep 0".
std::string axesText(const RankContext &c, const ParallelConfig &p) {
  std::vector<std::string> axes;
  auto add = [&](const char *axis, int64_t size, int64_t rank) {
    if (size > 1)
      axes.push_back(fmt::format("{} {}", axis, rank));
  };
  add("tp", p.tp, c.tpRank);
  add("pp", p.pp, c.ppRank);
  add("ep", p.ep, c.epRank);
  add("etp", p.etp, c.etpRank);
  return fmt::format("{}", fmt::join(axes, ", "));
}

} // namespace

int mdl::runPlan(const Options &options, mlir::ModuleOp top,
                 mlir::MLIRContext &context) {
  BoundSpec spec = bindSpec(options, top, context, options.backends.front());
  if (!spec.binding)
    return 1;
  const rt::ModelLayout &m = spec.binding->layout();
  rt::Planner planner(m, options.parallel);
  if (reportInvalid(planner, options))
    return 1;
  std::vector<RankContext> contexts = planner.ranks();
  int64_t numRanks =
      options.parallel.tp * options.parallel.pp * options.parallel.ep;
  if (options.rank >= numRanks) {
    llvm::errs() << "mdlc: error: rank " << options.rank << " does not exist: "
                 << options.parallel.str() << " has " << numRanks
                 << " ranks\n";
    return 2;
  }

  warnDefaultAxes(options, m);
  if (options.format == "json") {
    llvm::outs() << json::write(rt::planJson(m, options.parallel, options.rank,
                                             spec.configPath),
                                2)
                 << "\n";
    return 0;
  }
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

  if (!picture) {
    llvm::outs() << m.model << " on " << m.backend << ", "
                 << options.parallel.str() << " (" << spec.configPath << ")\n";
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
  for (const RankContext &ctx : contexts) {
    int64_t r = rt::rankNumber(ctx, options.parallel);
    if (options.rank >= 0 && r != options.rank)
      continue;
    // A layout rank no process holds (vLLM's (tp, ep) pairs beyond its
    // tp x dp processes) has no state to list.
    bool process = spec.binding->rankSaved(options.parallel, r);
    if (r != lastRank && !picture) {
      lastRank = r;
      llvm::outs() << "rank " << r << " (" << rankText(ctx) << ")"
                   << (process ? ":" : ": no process holds it") << "\n";
    }
    if (!process)
      continue;
    for (const rt::LocalTensor &lt : planner.tensors(ctx, nullptr)) {
      const rt::TensorSpec &spec = m.tensors[lt.spec];
      std::string name = rt::planName(m, lt);
      if (picture) {
        if (tensorPattern.match(name))
          pictureOf.add("pp " + std::to_string(ctx.ppRank) + " chunk " +
                            std::to_string(ctx.chunk),
                        name, r, axesText(ctx, options.parallel), lt);
        continue;
      }
      llvm::outs() << "  " << name << " " << shapeText(lt.shape, ", ") << " "
                   << safetensorsName(lt.dtype);
      if (options.parallel.vpp > 1)
        llvm::outs() << " (chunk " << ctx.chunk << ")";
      if (spec.copy)
        llvm::outs() << " (copy)";
      if (spec.offset)
        llvm::outs() << fmt::format(" (stored = value {} {})",
                                    spec.offset > 0 ? '+' : '-',
                                    std::abs(spec.offset));
      if (spec.negExp)
        llvm::outs() << " (stored = -exp(value))";
      llvm::outs() << "\n";
      for (const rt::Piece &p : lt.pieces) {
        const rt::Param &param = m.params[p.param];
        std::string line =
            fmt::format("    {} at {} strides", boxText(m, p), p.base);
        for (size_t a = 0; a < param.atoms.size(); ++a)
          line += fmt::format(" {}={}", param.atoms[a], p.stride[a]);
        std::vector<std::pair<int64_t, int64_t>> rows;
        if (lt.axesShape.size() >= 2)
          rows = rowsOf(p, lt.axesShape);
        // The first eight row runs, and how many there are beyond.
        std::vector<std::string> runs;
        for (size_t i = 0; i < rows.size() && i < 8; ++i)
          runs.push_back(fmt::format("{}:{}", rows[i].first, rows[i].second));
        if (!runs.empty())
          line += fmt::format(" rows {}", fmt::join(runs, ", "));
        if (rows.size() > 8)
          line += fmt::format(", ... ({} runs)", rows.size());
        llvm::outs() << line << "\n";
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
  return 0;
}
