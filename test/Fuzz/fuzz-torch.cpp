//===- fuzz-torch.cpp - PyTorch zip checkpoints ---------------------------===//
//
// The input is a model_optim_rng.pt as Megatron saves it (the seed: rank 1
// of a qwen3 checkpoint mdl-convert wrote): the zip read, data.pkl
// unpickled without running anything, and every tensor's bytes read.

#include "FuzzCommon.h"

#include "mdl/Runtime/Safetensors.h"

using namespace mdl;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fuzz::enterScratch();
  fuzz::writeFile("model_optim_rng.pt", data, size);
  std::string error;
  std::unique_ptr<rt::Checkpoint> ckpt =
      rt::Checkpoint::open("model_optim_rng.pt", error);
  if (!ckpt)
    return 0;
  unsigned sum = 0;
  for (const auto &[name, ref] : ckpt->tensors())
    if (const uint8_t *p = ckpt->data(ref))
      for (uint64_t i = 0, n = ref.info->numBytes(); i < n; i += 4096)
        sum += p[i];
  (void)sum;
  return 0;
}
