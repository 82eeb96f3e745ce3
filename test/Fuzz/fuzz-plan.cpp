//===- fuzz-plan.cpp - plan.json of a backend checkpoint ------------------===//
//
// The input is the plan.json of a backend checkpoint, read by mdl-convert
// (a dry run: what each rank of the HF target would hold).

#include "FuzzCommon.h"

using namespace mdl;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fuzz::writeInput("backend/plan.json", data, size, "backend");
  fuzz::runConvert({"--model", "qwen3", "--from", "mcore_te", "--to", "hf",
                    "--dry-run", "backend", "out"});
  fuzz::runConvert({"--model", "qwen3", "--from", "mcore_te", "--to", "vllm",
                    "--dry-run", "backend", "out"});
  return 0;
}
