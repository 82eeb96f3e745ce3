//===- Params.cpp - mdlc params: the tensors of an HF checkpoint ----------===//

#include "Commands.h"

#include "mdl/Runtime/Base/Json.h"
#include "mdl/Runtime/Model/Plan.h"

#include "llvm/Support/raw_ostream.h"

#include <algorithm>

using namespace mdl;

int mdl::runParams(const Options &options, mlir::ModuleOp top,
                   mlir::MLIRContext &context) {
  std::string backendName =
      options.backends.empty() ? "hf" : options.backends.front();
  BoundSpec spec = bindSpec(options, top, context, backendName);
  if (!spec.binding)
    return 1;
  const rt::ModelLayout &layout = spec.binding->layout();
  // A layout the config makes unlistable (absurd sizes) is refused whole.
  rt::Planner planner(layout, ParallelConfig());
  if (!planner.valid()) {
    for (const std::string &why : planner.invalidReasons())
      mlir::emitError(mlir::UnknownLoc::get(&context)) << why;
    return 1;
  }
  std::vector<rt::TensorListing> tensors =
      rt::listTensors(layout, RankContext());
  std::sort(tensors.begin(), tensors.end(),
            [](const auto &a, const auto &b) { return a.name < b.name; });
  // Two entries naming one tensor is a bug in the spec.
  bool dup = false;
  for (size_t i = 1; i < tensors.size(); ++i)
    if (tensors[i].name == tensors[i - 1].name) {
      auto diag = mlir::emitError(spec.source(tensors[i].spec->source))
                  << "two layout entries name tensor '" << tensors[i].name
                  << "'";
      diag.attachNote(spec.source(tensors[i - 1].spec->source))
          << "the other entry";
      dup = true;
    }
  if (dup)
    return 1;
  if (options.format == "json") {
    json::Value arr = json::Value::array();
    for (const rt::TensorListing &t : tensors) {
      json::Value o = json::Value::object();
      o.set("name", json::Value::string(t.name));
      json::Value shape = json::Value::array();
      for (int64_t d : t.shape)
        shape.push(json::Value::integer(d));
      o.set("shape", std::move(shape));
      o.set("dtype",
            json::Value::string(std::string(safetensorsName(t.dtype))));
      // A duplicate names the tensor it copies (a checkpoint holds the
      // same bytes in both).
      if (t.spec->copy && t.spec->param >= 0)
        for (const rt::TensorListing &u : tensors)
          if (!u.spec->copy && u.spec->param == t.spec->param) {
            o.set("copy_of", json::Value::string(u.name));
            break;
          }
      arr.push(std::move(o));
    }
    llvm::outs() << json::write(arr, 2) << "\n";
    return 0;
  }
  for (const rt::TensorListing &t : tensors) {
    llvm::outs() << t.name << "\t[";
    for (size_t i = 0; i < t.shape.size(); ++i)
      llvm::outs() << (i ? "," : "") << t.shape[i];
    llvm::outs() << "]\t" << safetensorsName(t.dtype) << "\n";
  }
  return 0;
}
