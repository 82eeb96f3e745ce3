//===- fuzz-config.cpp - HF config.json -----------------------------------===//
//
// The input is a model's config.json: checked by mdlc (every backend, a
// small grid) and instantiated by mdl-convert (a dry run, which stops at
// the empty checkpoint after the model is instantiated and bound).

#include "FuzzCommon.h"

using namespace mdl;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fuzz::writeInput("config.json", data, size);
  fuzz::runMdlc({"check", "models/qwen3_moe.mdl", "--hf-config", "config.json",
                 "--grid", "tp=1,2", "ep=1,2"});
  fuzz::runConvert({"--model", "qwen3_moe", "--from", "hf", "--to", "mcore_te",
                    "--config", "config.json", "--dry-run", "models", "out"});
  fuzz::removeTree("out");
  return 0;
}
