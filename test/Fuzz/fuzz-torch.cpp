//===- fuzz-torch.cpp - PyTorch zip checkpoints ---------------------------===//
//
// The input is a model_optim_rng.pt as Megatron saves it (the seed: rank 1
// of a qwen3 checkpoint mdl-convert wrote): the zip read, data.pkl
// unpickled without running anything, and every tensor's bytes read.

#include "FuzzCommon.h"


using namespace mdl;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fuzz::readCheckpoint(fuzz::writeInput("model_optim_rng.pt", data, size));
  return 0;
}
