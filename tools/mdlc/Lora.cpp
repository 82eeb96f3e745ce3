//===- Lora.cpp - mdlc lora: the LoRA injection table of a rank -----------===//

#include "Commands.h"

#include "mdl/Runtime/Base/DType.h"
#include "mdl/Runtime/Model/Generated.h"
#include "mdl/Runtime/Base/Json.h"
#include "mdl/Runtime/Model/Lora.h"
#include "mdl/Runtime/Model/Report.h"

#include "llvm/Support/raw_ostream.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

using namespace mdl;

int mdl::runLora(const Options &options, mlir::ModuleOp top,
                 mlir::MLIRContext &context) {
  // The modules the backend builds with LoRA enabled.
  Options withLora = options;
  ModuleDeclOp model = theModel(top, options.files.front());
  if (!model)
    return 1;
  if (std::unique_ptr<SpecDecls> decls = SpecDecls::build(model))
    if (const rt::BackendDecl *b = decls->backend(options.backends.front()))
      rt::selectLoraModules(b->choices, withLora.choices);
  BoundSpec spec = bindSpec(withLora, top, context, options.backends.front());
  if (!spec.binding)
    return 1;
  const rt::ModelLayout &m = spec.binding->layout();
  warnDefaultAxes(options, m);
  rt::Planner planner(m, options.parallel);
  if (reportInvalid(planner, options))
    return 1;
  int64_t rank = std::max<int64_t>(options.rank, 0);
  if (rank >= rt::numRanks(options.parallel)) {
    llvm::errs() << "mdlc: error: rank " << rank << " does not exist: "
                 << options.parallel.str() << " has "
                 << rt::numRanks(options.parallel) << " ranks\n";
    return 2;
  }
  if (options.format == "json") {
    llvm::outs() << json::write(rt::loraJson(m, options.parallel, rank,
                                             options.loraRank),
                                2)
                 << "\n";
    return 0;
  }
  std::vector<rt::LoraTarget> table =
      rt::loraTable(m, options.parallel, rank, options.loraRank);
  std::vector<std::string> allLinear = rt::allLinearTargets(m);
  llvm::outs() << m.model << " on " << m.backend << ", "
               << options.parallel.str() << ", rank " << rank << ", r "
               << options.loraRank << "\n";
  for (const rt::LoraTarget &t : table) {
    std::string line = fmt::format(
        "{}: {} {} ({} sizes in {}, out {}), lora_A {}, lora_B {}, delta {}, "
        "sharded {}, returns {}",
        t.module, moduleRoleName(t.role), t.baseClass, t.sizes, t.inFeatures,
        t.outFeatures, shapeText(t.loraA, ", "), shapeText(t.loraB, ", "),
        shapeText(t.delta, ", "), t.sharded, t.returns);
    // A row-parallel base that scatters its own input needs the adapter's
    // input scattered the same way.
    if (t.inputIsParallel)
      line += ", input_is_parallel";
    else if (t.role == ModuleRole::Row && t.sharded == "A")
      line += ", scatters its input";
    if (t.localExperts)
      line += fmt::format(", {} local experts", t.localExperts);
    if (!t.allReduceGrads.empty())
      line += fmt::format(", TP all-reduce of grads of {}",
                          fmt::join(t.allReduceGrads, " "));
    llvm::outs() << line << "\n";
  }
  llvm::outs() << fmt::format("all-linear:{}{}\n", allLinear.empty() ? "" : " ",
                              fmt::join(allLinear, " "));
  return 0;
}
