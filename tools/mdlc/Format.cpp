//===- Format.cpp - mdlc format: the canonical layout of specs ------------===//

#include "Commands.h"

#include "mdl/Parse/Parser.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/raw_ostream.h"

using namespace mdl;

int mdl::runFormat(const Options &options, llvm::SourceMgr &sourceMgr,
                   mlir::MLIRContext &context) {
  int code = 0;
  for (const std::string &f : options.files) {
    auto buffer = llvm::MemoryBuffer::getFile(f, /*IsText=*/true);
    if (!buffer) {
      llvm::errs() << "mdlc: error: cannot open '" << f
                   << "': " << buffer.getError().message() << "\n";
      code = 1;
      continue;
    }
    unsigned id = sourceMgr.AddNewSourceBuffer(std::move(*buffer), llvm::SMLoc());
    std::optional<std::string> text = formatFile(sourceMgr, id, context);
    if (!text) {
      code = 1;
      continue;
    }
    if (!options.inPlace) {
      llvm::outs() << *text;
      continue;
    }
    if (sourceMgr.getMemoryBuffer(id)->getBuffer() == *text)
      continue;
    // Written beside the file and renamed over it: an interrupted run
    // leaves the spec whole.
    std::string tmp = f + ".format-tmp";
    std::error_code ec;
    {
      llvm::raw_fd_ostream os(tmp, ec);
      if (!ec) {
        os << *text;
        os.close();
        ec = os.error();
      }
    }
    if (!ec)
      ec = llvm::sys::fs::rename(tmp, f);
    if (ec) {
      llvm::sys::fs::remove(tmp);
      llvm::errs() << "mdlc: error: cannot write '" << f
                   << "': " << ec.message() << "\n";
      code = 1;
    }
  }
  return code;
}
