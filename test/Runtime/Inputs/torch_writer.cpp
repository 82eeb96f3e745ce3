// Writes torch checkpoints with TorchCheckpointWriter for torch-writer.test:
//  big.pt: one 10 MB F32 tensor (values i) and a BF16 one, on 4 threads, so
//          chunks of one storage are filled and CRC'd by several threads;
//  many.pt: 70000 tiny I32 tensors (values their index), two state dicts
//          (model0, model1), past the 65535 entries of a plain zip: zip64
//          end records.
// Then reads both back with readTorchStateDict and checks every value.

#include "mdl/Runtime/Checkpoint/TorchCheckpoint.h"
#include "mdl/Runtime/Convert/TorchCheckpointWriter.h"

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

using namespace mdl;
using namespace mdl::rt;

int main(int argc, char **argv) {
  if (argc != 2)
    return 2;
  std::string dir = argv[1], error;
  const int64_t n = 10 << 18; // 2.6M floats, 10 MB
  {
    TorchCheckpointWriter w;
    w.setThreads(4);
    TensorFileWriter::FillFn fill = [](uint64_t offset, uint8_t *dst, size_t bytes,
                                       std::string &) {
      for (size_t i = 0; i < bytes / 4; ++i) {
        float v = float(offset / 4 + i);
        std::memcpy(dst + 4 * i, &v, 4);
      }
      return true;
    };
    static const uint16_t bf16[3] = {0x3f80, 0x4000, 0x4040}; // 1, 2, 3
    if (!w.add("big", DType::F32, {n / 1024, 1024}, fill, error) ||
        !w.add("small", DType::BF16, {3}, bf16, error))
      return std::fprintf(stderr, "%s\n", error.c_str()), 1;
    w.setInt("iteration", 7);
    if (!w.write(dir + "/big.pt", error))
      return std::fprintf(stderr, "%s\n", error.c_str()), 1;
  }
  const int64_t count = 70000;
  std::vector<int32_t> values(count);
  {
    TorchCheckpointWriter w;
    w.setStateDicts({"model0", "model1"}, true);
    for (int64_t i = 0; i < count; ++i) {
      values[size_t(i)] = int32_t(i);
      std::string name = "model" + std::to_string(i % 2) + ".t" + std::to_string(i);
      if (!w.add(name, DType::I32, {1}, &values[size_t(i)], error))
        return std::fprintf(stderr, "%s\n", error.c_str()), 1;
    }
    if (!w.write(dir + "/many.pt", error))
      return std::fprintf(stderr, "%s\n", error.c_str()), 1;
  }
  // Read back.
  std::optional<TorchStateDict> big = readTorchStateDict(dir + "/big.pt", error);
  std::optional<TorchStateDict> many = readTorchStateDict(dir + "/many.pt", error);
  if (!big || !many)
    return std::fprintf(stderr, "%s\n", error.c_str()), 1;
  int64_t bad = 0;
  const TensorInfo *t = big->header.find("big");
  const uint8_t *base = big->zip->bytes();
  for (int64_t i = 0; t && i < n; ++i) {
    float v;
    std::memcpy(&v, base + t->dataBegin + 4 * i, 4);
    bad += v != float(i);
  }
  for (int64_t i = 0; i < count; ++i) {
    const TensorInfo *x = many->header.find(
        "model" + std::to_string(i % 2) + ".t" + std::to_string(i));
    int32_t v = -1;
    if (x)
      std::memcpy(&v, many->zip->bytes() + x->dataBegin, 4);
    bad += v != i;
  }
  std::printf("read back: big %zu tensors, many %zu tensors, %lld wrong values\n",
              big->header.tensors.size(), many->header.tensors.size(),
              (long long)bad);
  return bad != 0;
}
