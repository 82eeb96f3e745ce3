//===- Checks.cpp - The check passes --------------------------------------===//
//
// Each check pass reports the findings of its own check IDs from a shared
// CheckSession, as errors at the spec lines involved, with the check ID in
// brackets and a note saying in which configurations it occurs.
//
//===----------------------------------------------------------------------===//

#include "mdl/Evaluate/Check.h"
#include "mdl/Transforms/Passes.h"

namespace mdl {
#define GEN_PASS_DEF_CHECKCOVERAGE
#define GEN_PASS_DEF_CHECKSHAPES
#define GEN_PASS_DEF_CHECKREINTERPRET
#define GEN_PASS_DEF_CHECKFUSEDSPLIT
#define GEN_PASS_DEF_CHECKPARALLEL
#define GEN_PASS_DEF_CHECKSTACKDEPTH
#define GEN_PASS_DEF_CHECKTIEDVOCAB
#define GEN_PASS_DEF_CHECKCAPABILITIES
#define GEN_PASS_DEF_CHECKDERIVED
#define GEN_PASS_DEF_CHECKCHECKPOINT
#include "mdl/Transforms/Passes.h.inc"
} // namespace mdl

using namespace mlir;
using namespace mdl;

namespace {

/// The body every check pass shares: `ids` are the checks it reports, those
/// the registry (allChecks) gives to the pass's argument.
template <typename Base>
struct CheckPassImpl : public Base {
  /// With a session shared by a pipeline of checks, findings do not fail
  /// the pass, so that every check reports; the caller reads the verdict
  /// from the session.
  CheckPassImpl(std::shared_ptr<CheckSession> session = nullptr)
      : ids(checksOfPass(Base::getArgumentName())),
        session(std::move(session)), findingsFail(!this->session) {}
  template <typename Options>
  CheckPassImpl(const Options &options)
      : Base(options), ids(checksOfPass(Base::getArgumentName())) {}
  CheckPassImpl(const CheckPassImpl &other)
      : Base(other), ids(other.ids), session(other.session),
        findingsFail(other.findingsFail) {}

  void runOnOperation() override {
    ModuleOp top = this->getOperation();
    // The runtime's engine reads backends with their bases folded in (a
    // no-op on a module prepared already).
    OpPassManager prepare(ModuleOp::getOperationName());
    prepare.addPass(createPrepareEmit());
    if (failed(this->runPipeline(prepare, top))) {
      this->signalPassFailure();
      return;
    }
    if (!session) {
      CheckOptions o;
      o.hfConfig = this->hfConfig;
      o.sets.assign(this->overrides.begin(), this->overrides.end());
      o.backends.assign(this->backendNames.begin(), this->backendNames.end());
      if (std::optional<std::string> err = parseGrid(this->grid, o.grid)) {
        top.emitError() << *err;
        this->signalPassFailure();
        return;
      }
      o.choices.assign(this->choices.begin(), this->choices.end());
      if (!this->hfDir.empty())
        o.checkpoint = {CheckpointSource::Dir, this->hfDir};
      else if (!this->hfIndex.empty())
        o.checkpoint = {CheckpointSource::Index, this->hfIndex};
      else if (!this->hfInventory.empty())
        o.checkpoint = {CheckpointSource::Inventory, this->hfInventory};
      session = std::make_shared<CheckSession>(o);
    }
    // In a shared pipeline an error of the preparation (a choice that
    // fails to bind) is already reported and counted by the caller; the
    // later checks still report theirs.
    bool failed = mlir::failed(session->prepare(top)) && findingsFail;
    for (const CheckSession::Finding &f : session->findings()) {
      if (!llvm::is_contained(ids, f.check))
        continue;
      failed |= findingsFail;
      auto diag = emitError(f.at) << f.message << " [" << f.check << "]";
      if (f.similar)
        diag << " (and " << f.similar << " more like it)";
      std::string where = f.model;
      if (!f.backend.empty())
        where += " on " + f.backend;
      if (!f.firstConfig.empty()) {
        where += " with " + f.firstConfig;
        if (f.configs > 1)
          where += " and " + std::to_string(f.configs - 1) +
                   " more configuration" + (f.configs > 2 ? "s" : "");
      }
      if (f.related)
        diag.attachNote(f.related) << "the other one";
      diag.attachNote() << "in " << where << ", instantiated from "
                        << f.configFile;
    }
    this->markAllAnalysesPreserved();
    if (failed)
      this->signalPassFailure();
  }

  std::vector<std::string> ids;
  std::shared_ptr<CheckSession> session;
  bool findingsFail = true;
};

#define MDL_CHECK_PASS(Name)                                                 \
  struct Name##Pass : CheckPassImpl<mdl::impl::Name##Base<Name##Pass>> {      \
    using CheckPassImpl::CheckPassImpl;                                      \
  };

MDL_CHECK_PASS(CheckCoverage)
MDL_CHECK_PASS(CheckShapes)
MDL_CHECK_PASS(CheckReinterpret)
MDL_CHECK_PASS(CheckFusedSplit)
MDL_CHECK_PASS(CheckParallel)
MDL_CHECK_PASS(CheckStackDepth)
MDL_CHECK_PASS(CheckTiedVocab)
MDL_CHECK_PASS(CheckCapabilities)
MDL_CHECK_PASS(CheckDerived)
MDL_CHECK_PASS(CheckCheckpoint)

} // namespace

void mdl::addCheckPasses(OpPassManager &pm,
                         std::shared_ptr<CheckSession> session) {
  pm.addPass(std::make_unique<CheckStackDepthPass>(session));
  pm.addPass(std::make_unique<CheckParallelPass>(session));
  pm.addPass(std::make_unique<CheckCoveragePass>(session));
  pm.addPass(std::make_unique<CheckShapesPass>(session));
  pm.addPass(std::make_unique<CheckReinterpretPass>(session));
  pm.addPass(std::make_unique<CheckFusedSplitPass>(session));
  pm.addPass(std::make_unique<CheckTiedVocabPass>(session));
  pm.addPass(std::make_unique<CheckCapabilitiesPass>(session));
  pm.addPass(std::make_unique<CheckDerivedPass>(session));
  pm.addPass(std::make_unique<CheckCheckpointPass>(session));
}
