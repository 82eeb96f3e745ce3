//===- fuzz-safetensors.cpp - safetensors files ---------------------------===//
//
// The input is an HF checkpoint's model.safetensors: its headers checked by
// mdlc, the file mapped and every tensor's bytes read, and converted by
// mdl-convert.

#include "FuzzCommon.h"

#include "mdl/Runtime/Safetensors.h"

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
  std::string error;
  if (std::unique_ptr<rt::Checkpoint> ckpt =
          rt::Checkpoint::open("hf/model.safetensors", error)) {
    unsigned sum = 0;
    for (const auto &[name, ref] : ckpt->tensors())
      if (const uint8_t *p = ckpt->data(ref))
        for (uint64_t i = 0, n = ref.info->numBytes(); i < n; i += 4096)
          sum += p[i];
    (void)sum;
  }
  fuzz::runConvert(
      {"--model", "qwen3", "--from", "hf", "--to", "mcore_te", "hf", "out"});
  fuzz::removeTree("out");
  return 0;
}
