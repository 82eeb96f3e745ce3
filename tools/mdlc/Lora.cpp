//===- Lora.cpp - mdlc lora: the LoRA injection table of a rank -----------===//

#include "Commands.h"

#include "mdl/Evaluate/Bind.h"
#include "mdl/Runtime/Adapter.h"
#include "mdl/Runtime/DType.h"
#include "mdl/Runtime/Json.h"
#include "mdl/Runtime/Lora.h"

#include "llvm/Support/raw_ostream.h"

using namespace mdl;

int mdl::runLora(const Options &options, mlir::ModuleOp top,
                 mlir::MLIRContext &context) {
  // The modules the backend builds with LoRA enabled.
  Options withLora = options;
  if (ModuleDeclOp model = theModel(top, options.files.front()))
    if (std::unique_ptr<Backend> b =
            Backend::lookup(model, options.backends.front()))
      rt::selectLoraModules(b->choices(), withLora.choices);
  BoundSpec spec = bindSpec(withLora, top, context, options.backends.front());
  if (!spec.bound)
    return 1;
  const std::unique_ptr<BoundModel> &bound = spec.bound;
  const rt::ModelLayout &m = bound->layout;
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
  std::vector<rt::LoraTarget> table =
      rt::loraTable(m, options.parallel, rank, options.loraRank);
  std::vector<std::string> allLinear = rt::allLinearTargets(m);
  if (options.format == "json") {
    json::Value out = json::Value::object();
    out.set("model", json::Value::string(m.model));
    out.set("backend", json::Value::string(m.backend));
    out.set("config", json::Value::string(options.parallel.str()));
    out.set("rank", json::Value::integer(rank));
    out.set("r", json::Value::integer(options.loraRank));
    json::Value targets = json::Value::array();
    auto ints = [](const std::vector<int64_t> &v) {
      json::Value a = json::Value::array();
      for (int64_t x : v)
        a.push(json::Value::integer(x));
      return a;
    };
    for (const rt::LoraTarget &t : table) {
      json::Value j = json::Value::object();
      j.set("module", json::Value::string(t.module));
      j.set("role", json::Value::string(t.role));
      j.set("class", json::Value::string(t.baseClass));
      j.set("sizes", json::Value::string(t.sizes));
      j.set("in_features", json::Value::integer(t.inFeatures));
      j.set("out_features", json::Value::integer(t.outFeatures));
      j.set("lora_A", ints(t.loraA));
      j.set("lora_B", ints(t.loraB));
      j.set("delta", ints(t.delta));
      j.set("sharded", json::Value::string(t.sharded));
      j.set("returns", json::Value::string(t.returns));
      j.set("input_is_parallel", json::Value::boolean(t.inputIsParallel));
      if (t.localExperts)
        j.set("local_experts", json::Value::integer(t.localExperts));
      j.set("grad_all_reduce", json::Value::strings(t.allReduceGrads));
      targets.push(std::move(j));
    }
    out.set("targets", std::move(targets));
    out.set("all_linear", json::Value::strings(allLinear));
    llvm::outs() << json::write(out, 2) << "\n";
    return 0;
  }
  llvm::outs() << m.model << " on " << m.backend << ", "
               << options.parallel.str() << ", rank " << rank << ", r "
               << options.loraRank << "\n";
  for (const rt::LoraTarget &t : table) {
    llvm::outs() << t.module << ": " << t.role << " " << t.baseClass << " ("
                 << t.sizes << " sizes in " << t.inFeatures << ", out "
                 << t.outFeatures << "), lora_A " << shapeText(t.loraA, ", ")
                 << ", lora_B " << shapeText(t.loraB, ", ") << ", delta "
                 << shapeText(t.delta, ", ") << ", sharded " << t.sharded
                 << ", returns " << t.returns;
    // A row-parallel base that scatters its own input needs the adapter's
    // input scattered the same way.
    if (t.inputIsParallel)
      llvm::outs() << ", input_is_parallel";
    else if (t.role == "row" && t.sharded == "A")
      llvm::outs() << ", scatters its input";
    if (t.localExperts)
      llvm::outs() << ", " << t.localExperts << " local experts";
    if (!t.allReduceGrads.empty()) {
      llvm::outs() << ", TP all-reduce of grads of";
      for (const std::string &g : t.allReduceGrads)
        llvm::outs() << " " << g;
    }
    llvm::outs() << "\n";
  }
  llvm::outs() << "all-linear:";
  for (const std::string &n : allLinear)
    llvm::outs() << " " << n;
  llvm::outs() << "\n";
  return 0;
}
