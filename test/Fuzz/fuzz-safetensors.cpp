//===- fuzz-safetensors.cpp - safetensors files ---------------------------===//
//
// The input is an HF checkpoint's model.safetensors: its headers checked by
// mdlc, the file mapped and every tensor's bytes read, and converted by
// mdl-convert.

#include "FuzzCommon.h"

using namespace mdl;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fuzz::writeInput("hf/model.safetensors", data, size, "hf");
  fuzz::checkQwen3Hf("--hf-dir", "hf");
  fuzz::readCheckpoint("hf/model.safetensors");
  fuzz::runConvert(
      {"--model", "qwen3", "--from", "hf", "--to", "mcore_te", "hf", "out"});
  fuzz::removeTree("out");
  return 0;
}
