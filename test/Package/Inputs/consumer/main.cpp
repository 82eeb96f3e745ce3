// Uses the generated plans of qwen3: validity, one rank's tensors and its
// LoRA table on Megatron-Core, and the vLLM plan of the same config.
#include "qwen3_mcore_te.h"
#include "qwen3_vllm.h"

#include <cstdio>

int main(int argc, char **argv) {
  if (argc != 2)
    return 2;
  std::string error;
  auto mcore = mdl::gen::qwen3::mcore_te::load(argv[1], {}, error);
  auto vllm = mdl::gen::qwen3::vllm::load(argv[1], {}, error);
  if (!mcore || !vllm) {
    std::fprintf(stderr, "%s\n", error.c_str());
    return 1;
  }
  mdl::ParallelConfig bad;
  bad.tp = 3;
  for (const std::string &why : mdl::gen::qwen3::mcore_te::validate(*mcore, bad))
    std::printf("tp=3: %s\n", why.c_str());
  mdl::ParallelConfig config;
  config.tp = 2;
  config.pp = 2;
  auto tensors = mdl::gen::qwen3::mcore_te::rankTensors(*mcore, config, 1);
  std::printf("rank 1 of %s: %zu tensors\n", config.str().c_str(),
              tensors.size());
  for (const auto &t : mdl::gen::qwen3::mcore_te::loraTable(*mcore, config, 1, 8))
    if (t.module == "decoder.layers.0.self_attention.linear_qkv")
      std::printf("%s: %s, lora_A [%lld, %lld], lora_B [%lld, %lld]\n",
                  t.module.c_str(), t.baseClass.c_str(),
                  (long long)t.loraA[0], (long long)t.loraA[1],
                  (long long)t.loraB[0], (long long)t.loraB[1]);
  mdl::ParallelConfig tp2;
  tp2.tp = 2;
  std::printf("vllm rank 0: %zu tensors\n",
              mdl::gen::qwen3::vllm::rankTensors(*vllm, tp2, 0).size());
  return 0;
}
