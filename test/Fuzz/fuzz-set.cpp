//===- fuzz-set.cpp - --set KEY=VALUE overrides ---------------------------===//
//
// Each line of the input is one --set override of a model's example
// config, given to mdlc check and to mdl-convert (a dry run).

#include "FuzzCommon.h"

using namespace mdl;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fuzz::enterScratch();
  std::vector<std::string> check = {"check", "models/qwen3_moe.mdl", "--grid",
                                    "tp=1,2"};
  std::vector<std::string> convert = {
      "--model", "qwen3_moe", "--from", "hf", "--to", "mcore_te", "--config",
      "models/configs/qwen3-30b-a3b/config.json", "--dry-run"};
  for (const std::string &line : fuzz::splitArgs(data, size)) {
    check.push_back("--set=" + line);
    convert.push_back("--set=" + line);
  }
  convert.push_back("models");
  convert.push_back("out");
  fuzz::runMdlc(check);
  fuzz::runConvert(convert);
  fuzz::removeTree("out");
  return 0;
}
