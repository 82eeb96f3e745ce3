//===- fuzz-rank.cpp - rank files of a backend checkpoint -----------------===//
//
// The input is rank 1's model.safetensors of a qwen3 checkpoint on
// mcore_te at tp=2 (whose plan.json and config.json are in
// test/Fuzz/rank-dir), converted to HF by mdl-convert.

#include "FuzzCommon.h"

#include <filesystem>

using namespace mdl;
namespace fs = std::filesystem;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fuzz::enterScratch();
  static bool once = [] {
    fuzz::removeTree("backend");
    fs::copy(MDL_SOURCE_DIR "/test/Fuzz/rank-dir", "backend",
             fs::copy_options::recursive);
    return true;
  }();
  (void)once;
  fs::create_directories("backend/mp_rank_01");
  fuzz::writeFile("backend/mp_rank_01/model.safetensors", data, size);
  fuzz::runConvert(
      {"--model", "qwen3", "--from", "mcore_te", "--to", "hf", "backend", "out"});
  fuzz::removeTree("out");
  return 0;
}
