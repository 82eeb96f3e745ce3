//===- fuzz-index.cpp - model.safetensors.index.json ----------------------===//

#include "FuzzCommon.h"

using namespace mdl;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fuzz::checkQwen3Hf("--hf-index", fuzz::writeInput(
                                       "model.safetensors.index.json", data,
                                       size));
  return 0;
}
