// Loads a qwen3 config with the generated code and prints how many tensors
// the first rank holds, and the highest layer number among them.
#include "qwen3_mcore_te.h"

#include <cstdio>

int main(int argc, char **argv) {
  if (argc != 2)
    return 2;
  std::string error;
  auto binding = mdl::gen::qwen3::mcore_te::load(argv[1], {}, error);
  if (!binding) {
    std::fprintf(stderr, "%s\n", error.c_str());
    return 1;
  }
  mdl::ParallelConfig config;
  config.tp = 2;
  auto tensors = mdl::gen::qwen3::mcore_te::rankTensors(*binding, config, 0);
  int last = -1;
  for (const auto &t : tensors) {
    int layer;
    if (std::sscanf(t.name.c_str(), "decoder.layers.%d.", &layer) == 1 &&
        layer > last)
      last = layer;
  }
  std::printf("%zu tensors, layers 0..%d\n", tensors.size(), last);
  return 0;
}
