//===- fuzz-spec.cpp - Specs: parse, sema, IR, checks ---------------------===//
//
// The input is a spec beside the model library (so that its imports and
// example configs resolve), checked over a small grid.

#include "FuzzCommon.h"

using namespace mdl;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fuzz::writeInput("models/input.mdl", data, size);
  fuzz::runMdlc({"check", "models/input.mdl", "--grid", "tp=1,2", "pp=1,2"});
  return 0;
}
