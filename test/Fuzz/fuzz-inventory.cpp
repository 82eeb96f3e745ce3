//===- fuzz-inventory.cpp - --hf-inventory files --------------------------===//

#include "FuzzCommon.h"

using namespace mdl;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fuzz::enterScratch();
  fuzz::writeFile("inventory.tsv", data, size);
  fuzz::checkQwen3Hf("--hf-inventory", "inventory.tsv");
  return 0;
}
