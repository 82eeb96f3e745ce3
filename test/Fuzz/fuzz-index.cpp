//===- fuzz-index.cpp - model.safetensors.index.json ----------------------===//

#include "FuzzCommon.h"

using namespace mdl;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fuzz::enterScratch();
  fuzz::writeFile("model.safetensors.index.json", data, size);
  fuzz::checkQwen3Hf("--hf-index", "model.safetensors.index.json");
  return 0;
}
