//===- FuzzCommon.h - What the libFuzzer harnesses share --------*- C++ -*-===//
//
// Each harness (fuzz-*.cpp) feeds its input to one surface of MDL through
// the real command-line entry points: mdlc's commands and mdl-convert's
// main(), run in a private scratch directory that holds a copy of the model
// library. The input is written there as the file the surface reads.
//
//===----------------------------------------------------------------------===//

#ifndef MDL_FUZZ_FUZZCOMMON_H
#define MDL_FUZZ_FUZZCOMMON_H

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace mdl::fuzz {

/// Makes the scratch directory (once), copies models/ into it and enters
/// it; stdout goes to /dev/null.
void enterScratch();
/// Writes `data` to `path` (relative to the scratch directory).
void writeFile(const std::string &path, const uint8_t *data, size_t size);
void writeFile(const std::string &path, const std::string &text);
/// Removes `path` and everything under it.
void removeTree(const std::string &path);
/// Makes the directory `dir` (emptied first) with the config.json of the
/// tiny qwen3 of test/Fuzz/rank-dir in it, once a process: the harness
/// writes its input beside that config.
void makeConfigDir(const std::string &dir);
/// Enters the scratch directory and writes the input `data` there at
/// `path`; with `configDir`, beside the tiny qwen3's config.json in it (see
/// makeConfigDir). Returns `path`.
std::string writeInput(const std::string &path, const uint8_t *data,
                       size_t size, const std::string &configDir = "");
/// Runs mdlc with `args` (its diagnostics discarded); its exit code.
int runMdlc(const std::vector<std::string> &args);
/// Checks models/qwen3.mdl on hf against `path`, given with `option`
/// (--hf-dir, --hf-index, ...); mdlc's exit code.
int checkQwen3Hf(const std::string &option, const std::string &path);
/// Runs mdl-convert with `args`; its exit code.
int runConvert(const std::vector<std::string> &args);
/// Opens `path` as a checkpoint, when it is one, and touches a byte of
/// every page of every tensor, so that bad offsets and sizes are read.
void readCheckpoint(const std::string &path);
/// Splits `data` at NUL bytes and newlines into arguments.
std::vector<std::string> splitArgs(const uint8_t *data, size_t size);

} // namespace mdl::fuzz

#endif // MDL_FUZZ_FUZZCOMMON_H
