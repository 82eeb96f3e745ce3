//===- File.h - Reading inputs safely, keeping outputs apart ----*- C++ -*-===//
//
// Plain C++17. Every file MDL reads whole (specs, imports, config.json,
// plan.json, inventories, indexes) is read through readFile(): what is not a
// regular file (/dev/zero, a FIFO, a directory) is refused and the size is
// bounded, so that no input reads forever or exhausts memory.
//
//===----------------------------------------------------------------------===//

#ifndef MDL_RUNTIME_BASE_FILE_H
#define MDL_RUNTIME_BASE_FILE_H

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace mdl::rt {

/// The largest text file readFile() reads by default (an inventory of a
/// 100k-tensor checkpoint is about 10 MB).
constexpr uint64_t kMaxTextFileSize = uint64_t(256) << 20;

/// Closes a file descriptor when it goes out of scope.
struct FdGuard {
  int fd = -1;
  FdGuard() = default;
  FdGuard(const FdGuard &) = delete;
  FdGuard &operator=(const FdGuard &) = delete;
  ~FdGuard();
};

/// Opens `path` for reading and checks that it is a regular file; `size` is
/// its size. On failure `error` says why, naming the path.
bool openRegular(const std::string &path, FdGuard &guard, uint64_t &size,
                 std::string &error);

/// Reads exactly `n` bytes at `offset`; false (errno set) if it cannot.
bool preadAll(int fd, uint8_t *dst, size_t n, uint64_t offset);

/// Reads the regular file `path` whole into `out`, refusing files larger
/// than `maxSize`. On failure `error` says why, naming the path.
bool readFile(const std::string &path, std::string &out, std::string &error,
              uint64_t maxSize = kMaxTextFileSize);

/// Writes a small file atomically: to `<path>.tmp.<pid>`, renamed over
/// `path`.
bool writeFileAtomically(const std::string &path, const std::string &text,
                         std::string &error);

/// Creates directory `path` (its parent must exist); true when it exists
/// already. `created` says whether this call made it.
bool makeDirectory(const std::string &path, bool &created, std::string &error);

/// The absolute path `path` names with every symbolic link resolved; for a
/// path that does not exist yet, its nearest existing ancestor is resolved
/// and the rest appended.
std::string resolvedPath(const std::string &path);

/// Why the output directory `output` may not be written: it is, contains
/// or is inside one of `inputs` (files or directories; symbolic links
/// resolved). nullopt when it is apart from all of them.
std::optional<std::string>
outputOverlapsInput(const std::string &output,
                    const std::vector<std::string> &inputs);

} // namespace mdl::rt

#endif // MDL_RUNTIME_BASE_FILE_H
