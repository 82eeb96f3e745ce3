//===- Loader.cpp - Load spec files and their imports ---------------------===//

#include "mdl/Parse/Parser.h"
#include "mdl/Sema/Sema.h"
#include "mdl/Runtime/Base/File.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/SourceMgr.h"

using namespace mdl;

namespace {

class Loader {
public:
  Loader(const LoadOptions &options, llvm::SourceMgr &sm,
         mlir::MLIRContext &ctx, Program &program)
      : options(options), sm(sm), ctx(ctx), program(program) {}

  /// Loads `path` (and its imports). `importLoc` is where it was imported,
  /// invalid for a file named on the command line.
  const ast::File *load(const std::string &path, llvm::SMLoc importLoc);

  bool failed = false;

private:
  mlir::Location loc(llvm::SMLoc l) { return toLocation(sm, ctx, l); }
  std::optional<std::string> resolveImport(const ast::File &from,
                                           const ast::Import &imp);
  const ast::File *finish(std::unique_ptr<ast::File> file,
                          const std::string &key, const std::string &path,
                          llvm::SMLoc importLoc);

  const LoadOptions &options;
  llvm::SourceMgr &sm;
  mlir::MLIRContext &ctx;
  Program &program;
  llvm::StringMap<const ast::File *> loaded;
  /// The chain of files being loaded, with where each was imported.
  std::vector<std::pair<std::string, llvm::SMLoc>> chain;
};

std::string canonical(const std::string &path) {
  llvm::SmallString<256> real;
  if (!llvm::sys::fs::real_path(path, real))
    return std::string(real);
  return path;
}

std::optional<std::string> Loader::resolveImport(const ast::File &from,
                                                 const ast::Import &imp) {
  if (llvm::sys::path::is_absolute(imp.path))
    return llvm::sys::fs::exists(imp.path) ? std::optional(imp.path)
                                           : std::nullopt;
  llvm::SmallString<256> candidate(llvm::sys::path::parent_path(from.path));
  llvm::sys::path::append(candidate, imp.path);
  if (llvm::sys::fs::exists(candidate))
    return std::string(candidate);
  for (const std::string &dir : options.includeDirs) {
    llvm::SmallString<256> c(dir);
    llvm::sys::path::append(c, imp.path);
    if (llvm::sys::fs::exists(c))
      return std::string(c);
  }
  return std::nullopt;
}

const ast::File *Loader::load(const std::string &path, llvm::SMLoc importLoc) {
  std::string key = canonical(path);
  for (size_t i = 0; i < chain.size(); ++i) {
    if (chain[i].first != key)
      continue;
    // An import cycle: report it at the import that closes it, with the
    // whole chain as notes.
    std::string text;
    for (size_t j = i; j < chain.size(); ++j)
      text += llvm::sys::path::filename(chain[j].first).str() + " -> ";
    text += llvm::sys::path::filename(key).str();
    auto diag = mlir::emitError(loc(importLoc)) << "import cycle: " << text;
    for (size_t j = i + 1; j < chain.size(); ++j)
      diag.attachNote(loc(chain[j].second))
          << "'" << llvm::sys::path::filename(chain[j].first).str()
          << "' is imported here";
    failed = true;
    return nullptr;
  }
  if (auto it = loaded.find(key); it != loaded.end())
    return it->second;

  // A driver may have loaded the file already (to scan it for expected
  // diagnostics); parse that buffer rather than a second copy.
  unsigned bufferId = 0;
  for (unsigned id = 1; id <= sm.getNumBuffers() && !bufferId; ++id)
    if (sm.getMemoryBuffer(id)->getBufferIdentifier() == path)
      bufferId = id;
  if (!bufferId) {
    std::string text, error;
    if (!rt::readFile(path, text, error)) {
      mlir::emitError(importLoc.isValid() ? loc(importLoc)
                                          : mlir::UnknownLoc::get(&ctx))
          << error;
      failed = true;
      return nullptr;
    }
    bufferId = sm.AddNewSourceBuffer(
        llvm::MemoryBuffer::getMemBufferCopy(text, path), importLoc);
  }
  std::unique_ptr<ast::File> file = parseFile(sm, bufferId, ctx);
  if (!file) {
    failed = true;
    loaded[key] = nullptr;
    return nullptr;
  }
  return finish(std::move(file), key, path, importLoc);
}

const ast::File *Loader::finish(std::unique_ptr<ast::File> file,
                                const std::string &key,
                                const std::string &path,
                                llvm::SMLoc importLoc) {
  file->path = path;
  const ast::File *result = file.get();
  loaded[key] = result;

  chain.push_back({key, importLoc});
  for (const ast::Import &imp : result->imports) {
    std::optional<std::string> target = resolveImport(*result, imp);
    if (!target) {
      mlir::emitError(loc(imp.range.Start))
          << "cannot find imported file '" << imp.path << "'";
      failed = true;
      continue;
    }
    load(*target, imp.range.Start);
  }
  chain.pop_back();
  // Imports first: a file's declarations may use what it imports.
  program.files.push_back(std::move(file));
  return result;
}

} // namespace

std::unique_ptr<Program>
mdl::loadProgram(const std::vector<std::string> &paths,
                 const LoadOptions &options, llvm::SourceMgr &sourceMgr,
                 mlir::MLIRContext &context) {
  auto program = std::make_unique<Program>();
  Loader loader(options, sourceMgr, context, *program);
  for (const std::string &path : paths)
    if (const ast::File *f = loader.load(path, llvm::SMLoc()))
      if (!llvm::is_contained(program->mainFiles, f))
        program->mainFiles.push_back(f);
  if (loader.failed)
    return nullptr;
  return program;
}
