//===- File.cpp - Reading input files safely, keeping outputs apart -------===//

#include "mdl/Runtime/Base/File.h"

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

using namespace mdl::rt;

mdl::rt::FdGuard::~FdGuard() {
  if (fd >= 0)
    ::close(fd);
}

bool mdl::rt::openRegular(const std::string &path, FdGuard &guard,
                          uint64_t &size, std::string &error) {
  // O_NONBLOCK: opening a FIFO must not wait for a writer; it is refused
  // below like every other file that is not regular.
  guard.fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (guard.fd < 0) {
    error = path + ": cannot open: " + std::strerror(errno);
    return false;
  }
  struct stat st;
  if (::fstat(guard.fd, &st) != 0) {
    error = path + ": cannot stat: " + std::strerror(errno);
    return false;
  }
  if (!S_ISREG(st.st_mode)) {
    error = path + (S_ISDIR(st.st_mode) ? ": is a directory"
                                        : ": is not a regular file");
    return false;
  }
  size = uint64_t(st.st_size);
  return true;
}

bool mdl::rt::preadAll(int fd, uint8_t *dst, size_t n, uint64_t offset) {
  while (n > 0) {
    ssize_t got = ::pread(fd, dst, n, off_t(offset));
    if (got < 0 && errno == EINTR)
      continue;
    if (got <= 0) {
      if (got == 0)
        errno = EIO; // the file shrank under us
      return false;
    }
    dst += got;
    n -= size_t(got);
    offset += uint64_t(got);
  }
  return true;
}

bool mdl::rt::readFile(const std::string &path, std::string &out,
                       std::string &error, uint64_t maxSize) {
  FdGuard guard;
  uint64_t size = 0;
  if (!openRegular(path, guard, size, error))
    return false;
  if (size > maxSize) {
    error = path + ": file is " + std::to_string(size) +
            " bytes, more than the limit of " + std::to_string(maxSize);
    return false;
  }
  out.resize(size_t(size));
  if (!preadAll(guard.fd, reinterpret_cast<uint8_t *>(out.data()), out.size(),
                0)) {
    error = path + ": cannot read: " + std::strerror(errno);
    return false;
  }
  return true;
}

std::string mdl::rt::resolvedPath(const std::string &path) {
  std::string absolute = path;
  if (absolute.empty() || absolute[0] != '/') {
    char cwd[PATH_MAX];
    absolute = std::string(::getcwd(cwd, sizeof cwd) ? cwd : ".") + "/" + path;
  }
  std::vector<std::string> parts;
  for (size_t i = 0; i < absolute.size();) {
    size_t j = absolute.find('/', i);
    if (j == std::string::npos)
      j = absolute.size();
    if (j > i)
      parts.push_back(absolute.substr(i, j - i));
    i = j + 1;
  }
  // The longest prefix that exists, resolved; then the rest, by name.
  for (size_t n = parts.size() + 1; n-- > 0;) {
    std::string prefix;
    for (size_t i = 0; i < n; ++i)
      prefix += "/" + parts[i];
    char buf[PATH_MAX];
    if (!::realpath(prefix.empty() ? "/" : prefix.c_str(), buf))
      continue;
    std::string out = buf;
    for (size_t i = n; i < parts.size(); ++i) {
      if (parts[i] == ".")
        continue;
      if (parts[i] == "..") {
        size_t slash = out.rfind('/');
        out.erase(slash == 0 ? 1 : slash);
        continue;
      }
      out += (out == "/" ? "" : "/") + parts[i];
    }
    return out;
  }
  return absolute;
}

/// Whether `inner` is `outer` or below it (both resolved).
static bool within(const std::string &inner, const std::string &outer) {
  if (inner.compare(0, outer.size(), outer) != 0)
    return false;
  return inner.size() == outer.size() || outer == "/" ||
         inner[outer.size()] == '/';
}

std::optional<std::string>
mdl::rt::outputOverlapsInput(const std::string &output,
                             const std::vector<std::string> &inputs) {
  std::string out = resolvedPath(output);
  for (const std::string &input : inputs) {
    std::string in = resolvedPath(input);
    const char *how = out == in            ? "is"
                      : within(out, in)    ? "is inside"
                      : within(in, out)    ? "contains"
                                           : nullptr;
    if (how)
      return "the output directory '" + output + "' " + how + " the input '" +
             input + "'" + (out == output && in == input
                                ? std::string()
                                : " (" + out + ", " + in + ")") +
             ": refusing to write where the input is read";
  }
  return std::nullopt;
}

bool mdl::rt::writeFileAtomically(const std::string &path,
                                  const std::string &text, std::string &error) {
  std::string tmp = path + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::binary);
    out << text;
    if (!out) {
      error = "cannot write '" + path + "'";
      std::remove(tmp.c_str());
      return false;
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    error = "cannot write '" + path + "'";
    std::remove(tmp.c_str());
    return false;
  }
  return true;
}

bool mdl::rt::makeDirectory(const std::string &path, bool &created,
                            std::string &error) {
  created = false;
  struct stat st;
  if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode))
    return true;
  if (::mkdir(path.c_str(), 0755) != 0) {
    // Another process may have made it meanwhile.
    if (errno == EEXIST && ::stat(path.c_str(), &st) == 0 &&
        S_ISDIR(st.st_mode))
      return true;
    error = "cannot create directory '" + path + "': " + std::strerror(errno);
    return false;
  }
  created = true;
  return true;
}
