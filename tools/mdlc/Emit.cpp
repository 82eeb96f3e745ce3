//===- Emit.cpp - mdlc emit: C++ for a model and its backends -------------===//

#include "Commands.h"

#include "mdl/Evaluate/Engine.h"

#include "mdl/Target/Cpp/CppEmitter.h"
#include "mdl/Transforms/Passes.h"

#include "mlir/Pass/PassManager.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/ToolOutputFile.h"

#include <set>

using namespace mlir;
using namespace mdl;

int mdl::runEmit(const Options &options, ModuleOp top, MLIRContext &context) {
  ModuleDeclOp model = theModel(top, options.files.front());
  if (!model)
    return 1;
  std::unique_ptr<SpecDecls> decls = SpecDecls::build(model);
  if (!decls)
    return 1;
  // With a config, the model must instantiate for it; the code does not
  // depend on it.
  if (!options.hfConfig.empty()) {
    std::optional<rt::HFConfig> config =
        loadEngineConfig(options.hfConfig, options.sets, context);
    if (!config || !instantiate(*decls, std::move(*config)))
      return 1;
  }
  std::vector<std::string> backends = options.backends;
  if (backends.empty())
    for (auto b : top.getOps<BackendOp>())
      if (llvm::any_of(top.getOps<LayoutOp>(), [&](LayoutOp l) {
            return l.getBackend() == b.getSymName();
          }))
        backends.push_back(b.getSymName().str());
  // The backends as the spec names them (mcore-te is mcore_te).
  for (std::string &b : backends)
    if (const rt::BackendDecl *backend = decls->backend(b))
      b = backend->name;
    else
      return 1;

  if (std::error_code ec = llvm::sys::fs::create_directories(options.outputDir)) {
    llvm::errs() << "mdlc: error: cannot create '" << options.outputDir
                 << "': " << ec.message() << "\n";
    return 1;
  }
  // The spec files read, for build systems to rerun on change.
  std::set<std::string> inputs;
  top.walk([&](Operation *op) {
    if (auto loc = dyn_cast<FileLineColLoc>(op->getLoc()))
      inputs.insert(loc.getFilename().str());
  });
  std::string targets;
  CppEmitOptions emit;
  emit.specName = llvm::sys::path::filename(options.files.front()).str();
  emit.baseDir =
      llvm::sys::path::parent_path(options.files.front()).str();
  for (const std::string &b : backends) {
    auto backend = cast<BackendOp>(SymbolTable::lookupSymbolIn(top, b));
    // Files are named by the spec, so that build systems know them before
    // reading it.
    std::string stem =
        llvm::sys::path::stem(options.files.front()).str() + "_" + b;
    emit.headerName = stem + ".h";
    std::string headerPath = options.outputDir + "/" + stem + ".h";
    std::string sourcePath = options.outputDir + "/" + stem + ".cpp";
    std::error_code ec;
    // Files appear whole or not at all.
    llvm::ToolOutputFile header(headerPath, ec, llvm::sys::fs::OF_Text);
    if (!ec) {
      llvm::ToolOutputFile source(sourcePath, ec, llvm::sys::fs::OF_Text);
      if (!ec) {
        if (failed(emitCpp(model, backend, emit, header.os(), source.os())))
          return 1;
        header.keep();
        source.keep();
        targets += headerPath + " " + sourcePath + " ";
        continue;
      }
    }
    llvm::errs() << "mdlc: error: cannot write in '" << options.outputDir
                 << "': " << ec.message() << "\n";
    return 1;
  }
  if (!options.depfile.empty()) {
    std::error_code ec;
    llvm::ToolOutputFile dep(options.depfile, ec, llvm::sys::fs::OF_Text);
    if (ec) {
      llvm::errs() << "mdlc: error: cannot write '" << options.depfile
                   << "': " << ec.message() << "\n";
      return 1;
    }
    dep.os() << targets << ":";
    for (const std::string &f : inputs)
      dep.os() << " " << f;
    dep.os() << "\n";
    dep.keep();
  }
  return 0;
}
