//===- fuzz-adapter.cpp - LoRA adapters -----------------------------------===//
//
// The input is an HF-PEFT adapter_model.safetensors of qwen3 (the config
// of test/Fuzz/rank-dir), converted by mdl-convert --adapters to mcore_te
// at tp=2.

#include "FuzzCommon.h"

using namespace mdl;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fuzz::writeInput("adapters/adapter_model.safetensors", data, size,
                   "adapters");
  fuzz::runConvert({"--model", "qwen3", "--from", "hf", "--to", "mcore_te",
                    "--tp", "2", "--adapters", "adapters", "out"});
  fuzz::removeTree("out");
  return 0;
}
