//===- fuzz-safetensors.cpp - safetensors files ---------------------------===//
//
// The input is an HF checkpoint's model.safetensors: its headers checked by
// mdlc, the file mapped and every tensor's bytes read, and converted by
// mdl-convert.

#include "FuzzCommon.h"

#include <filesystem>

using namespace mdl;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fuzz::enterScratch();
  static bool once = [] {
    fuzz::removeTree("hf");
    std::filesystem::create_directory("hf");
    std::filesystem::copy_file(MDL_SOURCE_DIR "/test/Fuzz/rank-dir/config.json",
                               "hf/config.json");
    return true;
  }();
  (void)once;
  fuzz::writeFile("hf/model.safetensors", data, size);
  fuzz::runMdlc({"check", "models/qwen3.mdl", "--backend", "hf", "--hf-dir",
                 "hf"});
  fuzz::readCheckpoint("hf/model.safetensors");
  fuzz::runConvert(
      {"--model", "qwen3", "--from", "hf", "--to", "mcore_te", "hf", "out"});
  fuzz::removeTree("out");
  return 0;
}
