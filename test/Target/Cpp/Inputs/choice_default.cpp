// Loads a config with the generated code of choice_default.mdl and prints
// the tensors of its HF layout, or the error.
#include "choice_default_hf.h"

#include <cstdio>

int main(int argc, char **argv) {
  if (argc != 2)
    return 2;
  std::string error;
  auto binding = mdl::gen::choosy::hf::load(argv[1], {}, error);
  if (!binding) {
    std::fprintf(stderr, "%s\n", error.c_str());
    return 1;
  }
  for (const auto &t : mdl::gen::choosy::hf::rankTensors(*binding, {}, 0))
    std::printf("%s\n", t.name.c_str());
  return 0;
}
