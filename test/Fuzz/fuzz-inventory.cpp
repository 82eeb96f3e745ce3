//===- fuzz-inventory.cpp - --hf-inventory files --------------------------===//

#include "FuzzCommon.h"

using namespace mdl;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fuzz::checkQwen3Hf("--hf-inventory",
                     fuzz::writeInput("inventory.tsv", data, size));
  return 0;
}
