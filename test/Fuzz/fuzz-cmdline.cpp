//===- fuzz-cmdline.cpp - command lines of mdlc and mdl-convert -----------===//
//
// The input is a command line, one argument per line (or NUL-separated);
// the first names the tool, mdlc or mdl-convert. Paths stay inside the
// scratch directory: an argument that starts with '/' or holds ".." is
// not run.

#include "FuzzCommon.h"

using namespace mdl;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fuzz::enterScratch();
  std::vector<std::string> args = fuzz::splitArgs(data, size);
  if (args.empty())
    return 0;
  for (const std::string &a : args)
    if (a.find("..") != std::string::npos ||
        a.find('/') == 0 || a.find("=/") != std::string::npos)
      return 0;
  std::string tool = args.front();
  args.erase(args.begin());
  if (tool == "mdlc")
    fuzz::runMdlc(args);
  else if (tool == "mdl-convert")
    fuzz::runConvert(args);
  return 0;
}
