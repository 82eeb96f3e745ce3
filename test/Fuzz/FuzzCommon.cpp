//===- FuzzCommon.cpp - What the libFuzzer harnesses share ----------------===//

#include "FuzzCommon.h"

#include "Commands.h"

#include "mdl/Runtime/Checkpoint/Checkpoint.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "llvm/Support/SourceMgr.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>

#include <fcntl.h>
#include <unistd.h>

int mdl_convert_main(int argc, char **argv);

namespace fs = std::filesystem;

void mdl::fuzz::enterScratch() {
  static bool entered = false;
  if (entered)
    return;
  entered = true;
  char dir[] = "/tmp/mdl-fuzz.XXXXXX";
  if (!::mkdtemp(dir))
    std::abort();
  fs::copy(MDL_SOURCE_DIR "/models", fs::path(dir) / "models",
           fs::copy_options::recursive);
  if (::chdir(dir) != 0)
    std::abort();
  static std::string keep = dir;
  std::atexit([] {
    std::error_code ec;
    fs::remove_all(keep, ec);
  });
  int null = ::open("/dev/null", O_WRONLY);
  ::dup2(null, 1);
}

void mdl::fuzz::writeFile(const std::string &path, const uint8_t *data,
                          size_t size) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char *>(data), std::streamsize(size));
}

void mdl::fuzz::writeFile(const std::string &path, const std::string &text) {
  writeFile(path, reinterpret_cast<const uint8_t *>(text.data()), text.size());
}

void mdl::fuzz::removeTree(const std::string &path) {
  std::error_code ec;
  fs::remove_all(path, ec);
}

void mdl::fuzz::makeConfigDir(const std::string &dir) {
  static std::set<std::string> made;
  if (!made.insert(dir).second)
    return;
  removeTree(dir);
  fs::create_directory(dir);
  fs::copy_file(MDL_SOURCE_DIR "/test/Fuzz/rank-dir/config.json",
                fs::path(dir) / "config.json");
}

std::string mdl::fuzz::writeInput(const std::string &path, const uint8_t *data,
                                  size_t size, const std::string &configDir) {
  enterScratch();
  if (!configDir.empty())
    makeConfigDir(configDir);
  writeFile(path, data, size);
  return path;
}

int mdl::fuzz::runMdlc(const std::vector<std::string> &args) {
  Options options;
  if (std::optional<int> code = parseOptions(args, options, "usage\n"))
    return *code;
  mlir::MLIRContext context;
  context.printOpOnDiagnostic(false);
  llvm::SourceMgr sourceMgr;
  mlir::ScopedDiagnosticHandler quiet(
      &context, [](mlir::Diagnostic &) { return mlir::success(); });
  return runCommand(options, sourceMgr, context);
}

int mdl::fuzz::checkQwen3Hf(const std::string &option,
                            const std::string &path) {
  return runMdlc(
      {"check", "models/qwen3.mdl", "--backend", "hf", option, path});
}

int mdl::fuzz::runConvert(const std::vector<std::string> &args) {
  std::vector<std::string> all = {"mdl-convert", "--quiet"};
  all.insert(all.end(), args.begin(), args.end());
  std::vector<char *> argv;
  for (std::string &a : all)
    argv.push_back(a.data());
  argv.push_back(nullptr);
  return mdl_convert_main(int(all.size()), argv.data());
}

void mdl::fuzz::readCheckpoint(const std::string &path) {
  std::string error;
  std::unique_ptr<rt::Checkpoint> ckpt = rt::Checkpoint::open(path, error);
  if (!ckpt)
    return;
  unsigned sum = 0;
  for (const auto &[name, ref] : ckpt->tensors())
    if (const uint8_t *p = ckpt->data(ref))
      for (uint64_t i = 0, n = ref.info->numBytes(); i < n; i += 4096)
        sum += p[i];
  (void)sum;
}

std::vector<std::string> mdl::fuzz::splitArgs(const uint8_t *data,
                                              size_t size) {
  std::vector<std::string> args(1);
  for (size_t i = 0; i < size; ++i) {
    if (data[i] == 0 || data[i] == '\n')
      args.emplace_back();
    else
      args.back() += char(data[i]);
  }
  if (args.back().empty())
    args.pop_back();
  return args;
}
