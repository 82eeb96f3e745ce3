//===- mdl-safetensors.cpp - Inspect and write safetensors files ----------===//
//
//   mdl-safetensors list [--header-only] [--chunks] FILE|DIR
//   mdl-safetensors index INDEX.json
//   mdl-safetensors cat FILE|DIR NAME
//   mdl-safetensors write OUT.safetensors SPEC.json
//
// Exit codes: 0 success, 1 errors in the input, 2 bad usage. Plain C++ on
// the runtime library alone.
//
//===----------------------------------------------------------------------===//

#include "mdl/Runtime/Checkpoint/Checkpoint.h"
#include "mdl/Runtime/Checkpoint/DistCheckpoint.h"
#include "mdl/Runtime/Base/Cli.h"
#include "mdl/Runtime/Base/DType.h"
#include "mdl/Runtime/Base/File.h"
#include "mdl/Runtime/Base/Json.h"
#include "mdl/Runtime/Checkpoint/Safetensors.h"
#include "mdl/Runtime/Convert/SafetensorsWriter.h"

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

using namespace mdl;
using namespace mdl::rt;

static const char *kUsage = R"(usage: mdl-safetensors <command> ARGS...

Commands:
  list [--header-only] [--chunks] FILE|DIR
                      every tensor, name<TAB>[d0,d1,...]<TAB>dtype, sorted
                      by name; DIR is a checkpoint (index and shards, one
                      model.safetensors, or all *.safetensors) or a
                      distributed checkpoint (a directory with .metadata:
                      its tensors' global shapes, and its bytes items as
                      name<TAB>bytes). With --header-only, reads headers
                      (a distributed checkpoint's .metadata) without mapping
                      the data. With --chunks, each chunk of a distributed
                      checkpoint's tensor under it, as
                      <TAB>[offsets]+[sizes]<TAB>FILE@OFFSET+LENGTH
  index INDEX.json    the weight_map of an index, name<TAB>file, by name
  cat FILE|DIR NAME   the raw bytes of tensor NAME on stdout (of a
                      distributed checkpoint's tensor, assembled from its
                      chunks; of a bytes item, the item)
  write OUT SPEC.json write a file described by SPEC, an object
                        {"NAME": {"dtype": "F32", "shape": [2, 3],
                                  "fill": FILL}, ...,
                         "__metadata__": {"KEY": "VALUE", ...}}
                      FILL is
                        "zeros"          (the default)
                        "iota"           element i holds i; floats take it
                                         modulo 2^(mantissa bits + 1) so
                                         that it is exact (2^8 for BF16,
                                         2^11 F16, 2^24 F32, 2^53 F64,
                                         2^4 F8_E4M3, 2^3 F8_E5M2);
                                         integers wrap; BOOL alternates
                                         0, 1
                        "random:SEED"    byte k is byte k % 8 of
                                         splitmix64(SEED + (k / 8 + 1) *
                                         0x9E3779B97F4A7C15); BOOL keeps its
                                         lowest bit
                        "bytes:PATH"     the bytes of a file (relative to
                                         SPEC's directory)
                      OUT appears complete or not at all.

Options:
  --help, --version
)";

namespace {

int usageError(const std::string &message) {
  std::fputs(cli::errorText("mdl-safetensors", message, /*usage=*/true).c_str(),
             stderr);
  return 2;
}

int inputError(const std::string &message) {
  std::fputs(
      cli::errorText("mdl-safetensors", message, /*usage=*/false).c_str(),
      stderr);
  return 1;
}

/// The item bytes of a chunk, as `--chunks` prints them.
std::string chunkLine(const DistCheckpoint &ckpt, const DistChunk &c) {
  return "\t" + shapeText(c.offsets) + "+" + shapeText(c.sizes) + "\t" +
         ckpt.files()[c.file] + "@" + std::to_string(c.itemOffset) + "+" +
         std::to_string(c.itemLength) + "\n";
}

int listDist(const std::string &path, bool headersOnly, bool chunks) {
  std::string error;
  std::unique_ptr<DistCheckpoint> ckpt =
      DistCheckpoint::open(path, error, headersOnly);
  if (!ckpt)
    return inputError(error);
  std::string out;
  for (const auto &[name, e] : ckpt->entries()) {
    out += name + "\t" +
           (e.bytes ? "bytes"
                    : shapeText(e.shape) + "\t" +
                          std::string(safetensorsName(e.dtype))) +
           "\n";
    if (chunks)
      for (const DistChunk &c : e.chunks)
        out += chunkLine(*ckpt, c);
  }
  std::fwrite(out.data(), 1, out.size(), stdout);
  return 0;
}

int list(const std::string &path, bool headersOnly, bool chunks) {
  if (isDistCheckpoint(path))
    return listDist(path, headersOnly, chunks);
  if (chunks)
    return usageError("--chunks lists the chunks of a distributed checkpoint, "
                      "and " + path + " is none (it has no .metadata)");
  std::string error;
  std::unique_ptr<Checkpoint> ckpt = Checkpoint::open(path, error, headersOnly);
  if (!ckpt)
    return inputError(error);
  std::string out;
  for (const auto &[name, ref] : ckpt->tensors())
    out += name + "\t" + shapeText(ref.info->shape) + "\t" +
           std::string(safetensorsName(ref.info->dtype)) + "\n";
  std::fwrite(out.data(), 1, out.size(), stdout);
  return 0;
}

int index(const std::string &path) {
  std::string error;
  std::optional<CheckpointIndex> idx = readCheckpointIndex(path, error);
  if (!idx)
    return inputError(error);
  for (const auto &[name, file] : idx->weightMap)
    std::printf("%s\t%s\n", name.c_str(), file.c_str());
  return 0;
}

int writeOut(const uint8_t *data, size_t n) {
  if (n && std::fwrite(data, 1, n, stdout) != n)
    return inputError(std::string("cannot write to stdout: ") +
                      std::strerror(errno));
  return std::fflush(stdout) == 0 ? 0 : 1;
}

int catDist(const std::string &path, const std::string &name) {
  std::string error;
  std::unique_ptr<DistCheckpoint> ckpt = DistCheckpoint::open(path, error);
  if (!ckpt)
    return inputError(error);
  const DistEntry *e = ckpt->find(name);
  if (!e)
    return inputError(path + ": no tensor '" + name + "'");
  if (e->bytes) {
    const DistChunk &c = e->chunks.front();
    std::shared_ptr<MappedFile> f = MappedFile::open(ckpt->path(c.file), error);
    if (!f)
      return inputError(error);
    return writeOut(f->bytes() + c.itemOffset, size_t(c.itemLength));
  }
  std::vector<uint8_t> buffer(size_t(e->numElements()) * byteSize(e->dtype));
  ckpt->read(*e, buffer.data());
  return writeOut(buffer.data(), buffer.size());
}

int cat(const std::string &path, const std::string &name) {
  if (isDistCheckpoint(path))
    return catDist(path, name);
  std::string error;
  std::unique_ptr<Checkpoint> ckpt = Checkpoint::open(path, error);
  if (!ckpt)
    return inputError(error);
  const Checkpoint::TensorRef *ref = ckpt->find(name);
  if (!ref)
    return inputError(path + ": no tensor '" + name + "'");
  return writeOut(ckpt->data(*ref), size_t(ref->info->numBytes()));
}

//===----------------------------------------------------------------------===//
// Fills for `write`
//===----------------------------------------------------------------------===//

/// Encodes a small non-negative integer `v` (< 2^(mantissa + 1), so exact)
/// in a binary float format.
uint64_t encodeFloat(uint64_t v, int mantissa, int bias) {
  if (v == 0)
    return 0;
  int e = 63 - __builtin_clzll(v);
  uint64_t fraction = (v - (uint64_t(1) << e)) << (mantissa - e);
  return (uint64_t(e + bias) << mantissa) | fraction;
}

/// The bits of element `i` of an iota tensor.
uint64_t iotaBits(DType t, uint64_t i) {
  auto exact = [&](int mantissa, int bias) {
    return encodeFloat(i % (uint64_t(1) << (mantissa + 1)), mantissa, bias);
  };
  switch (t) {
  case DType::BF16:
    return exact(7, 127);
  case DType::F16:
    return exact(10, 15);
  case DType::F32:
    return exact(23, 127);
  case DType::F64:
    return exact(52, 1023);
  case DType::F8E4M3:
    return exact(3, 7);
  case DType::F8E5M2:
    return exact(2, 15);
  case DType::Bool:
    return i & 1;
  default:
    return i; // integers: the low bytes, two's complement
  }
}

uint64_t splitmix64(uint64_t seed, uint64_t word) {
  uint64_t z = seed + (word + 1) * 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/// A file whose bytes fill a tensor; shared by the fill's copies.
struct SourceFile {
  std::string path;
  int fd = -1;
  ~SourceFile() {
    if (fd >= 0)
      ::close(fd);
  }
};

/// Makes the fill of one tensor of `total` bytes (nullopt if the shape is
/// invalid, which add() reports) from its FILL string.
bool makeFill(const std::string &spec, const std::string &specDir, DType t,
              std::optional<uint64_t> total, SafetensorsWriter::FillFn &fill,
              std::string &error) {
  size_t size = byteSize(t);
  if (spec == "zeros") {
    fill = [](uint64_t, uint8_t *dst, size_t n, std::string &) {
      std::memset(dst, 0, n);
      return true;
    };
    return true;
  }
  if (spec == "iota") {
    fill = [t, size](uint64_t offset, uint8_t *dst, size_t n, std::string &) {
      for (size_t k = 0; k < n; ++k) {
        uint64_t byte = offset + k;
        dst[k] = uint8_t(iotaBits(t, byte / size) >> (8 * (byte % size)));
      }
      return true;
    };
    return true;
  }
  if (spec.rfind("random:", 0) == 0) {
    std::string digits = spec.substr(7);
    uint64_t seed = 0;
    bool ok = !digits.empty() && digits.size() <= 19;
    for (char c : digits)
      ok = ok && c >= '0' && c <= '9';
    if (!ok) {
      error =
          "random:SEED takes a decimal seed below 10^19, not '" + digits + "'";
      return false;
    }
    for (char c : digits)
      seed = seed * 10 + uint64_t(c - '0');
    uint8_t mask = t == DType::Bool ? 1 : 0xFF;
    fill = [seed, mask](uint64_t offset, uint8_t *dst, size_t n,
                        std::string &) {
      for (size_t k = 0; k < n; ++k) {
        uint64_t byte = offset + k;
        dst[k] = uint8_t(splitmix64(seed, byte / 8) >> (8 * (byte % 8))) & mask;
      }
      return true;
    };
    return true;
  }
  if (spec.rfind("bytes:", 0) == 0) {
    auto source = std::make_shared<SourceFile>();
    source->path = spec.substr(6);
    if (source->path.empty() || source->path[0] != '/')
      source->path = specDir + source->path;
    source->fd = ::open(source->path.c_str(), O_RDONLY | O_CLOEXEC);
    if (source->fd < 0) {
      error = source->path + ": cannot open: " + std::strerror(errno);
      return false;
    }
    // A regular file must fit exactly; anything else (a pipe, a device) is
    // read while writing, and a short one fails part-way through.
    struct stat st;
    if (::fstat(source->fd, &st) == 0 && S_ISREG(st.st_mode) && total &&
        uint64_t(st.st_size) != *total) {
      error = source->path + " holds " + std::to_string(st.st_size) +
              " bytes but the tensor needs " + std::to_string(*total);
      return false;
    }
    fill = [source](uint64_t offset, uint8_t *dst, size_t n, std::string &err) {
      while (n > 0) {
        ssize_t got = ::pread(source->fd, dst, n, off_t(offset));
        if (got < 0 && errno == EINTR)
          continue;
        if (got < 0) {
          err = source->path + ": cannot read: " + std::strerror(errno);
          return false;
        }
        if (got == 0) {
          err = source->path + ": ends at byte " + std::to_string(offset) +
                ", before the tensor does";
          return false;
        }
        dst += got;
        n -= size_t(got);
        offset += uint64_t(got);
      }
      return true;
    };
    return true;
  }
  error = "unknown fill '" + spec +
          "' (expected zeros, iota, random:SEED or bytes:PATH)";
  return false;
}

int write(const std::string &out, const std::string &specPath) {
  std::string text, error;
  if (!readFile(specPath, text, error))
    return inputError(error);
  auto fail = [&](const std::string &message) {
    return inputError(specPath + ": " + message);
  };
  json::ParseError parseError;
  std::optional<json::Value> spec = json::parse(text, parseError);
  if (!spec)
    return fail(std::to_string(parseError.line) + ":" +
                std::to_string(parseError.column) + ": " + parseError.message);
  if (spec->kind() != json::Value::Object)
    return fail("the spec must be a JSON object of tensors");
  size_t slash = specPath.rfind('/');
  std::string specDir =
      slash == std::string::npos ? "" : specPath.substr(0, slash + 1);

  SafetensorsWriter writer;
  for (const auto &[name, desc] : spec->members()) {
    if (name == "__metadata__") {
      if (desc.kind() != json::Value::Object)
        return fail("__metadata__ must be an object of strings");
      for (const auto &[key, value] : desc.members()) {
        if (value.kind() != json::Value::String)
          return fail("__metadata__ value of '" + key + "' must be a string");
        if (!writer.setMetadata(key, value.asString(), error))
          return fail(error);
      }
      continue;
    }
    std::string what = "tensor '" + name + "'";
    if (desc.kind() != json::Value::Object)
      return fail(what + " must be an object");
    for (const auto &member : desc.members())
      if (member.first != "dtype" && member.first != "shape" &&
          member.first != "fill")
        return fail(what + " has unknown key '" + member.first + "'");
    const json::Value *dtype = desc.get("dtype");
    const json::Value *shape = desc.get("shape");
    const json::Value *fillSpec = desc.get("fill");
    std::optional<DType> t;
    if (dtype && dtype->kind() == json::Value::String)
      t = parseDType(dtype->asString());
    if (!t)
      return fail(what + " needs a known dtype, e.g. \"F32\"");
    if (!shape || shape->kind() != json::Value::Array)
      return fail(what + " needs a shape, an array of integers");
    std::vector<int64_t> dims;
    for (const json::Value &d : shape->elements()) {
      if (d.kind() != json::Value::Int)
        return fail(what + " shape must hold integers");
      dims.push_back(d.asInt());
    }
    if (fillSpec && fillSpec->kind() != json::Value::String)
      return fail(what + " fill must be a string");
    std::optional<uint64_t> total = byteSize(*t);
    for (int64_t d : dims) {
      if (d < 0 || (d && *total > UINT64_MAX / uint64_t(d))) {
        total.reset();
        break;
      }
      *total *= uint64_t(d);
    }
    SafetensorsWriter::FillFn fill;
    if (!makeFill(fillSpec ? fillSpec->asString() : "zeros", specDir, *t, total,
                  fill, error))
      return fail(what + ": " + error);
    if (!writer.add(name, *t, std::move(dims), std::move(fill), error))
      return fail(error);
  }
  if (!writer.write(out, error))
    return inputError(error);
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty())
    return usageError("no command given");
  const std::string &cmd = args[0];
  if (cmd == "--help" || cmd == "-h") {
    std::fputs(kUsage, stdout);
    return 0;
  }
  if (cmd == "--version") {
    std::printf("%s\n", cli::versionLine("mdl-safetensors").c_str());
    return 0;
  }
  if (cmd == "list") {
    bool headersOnly = false, chunks = false;
    std::vector<std::string> paths;
    for (size_t i = 1; i < args.size(); ++i) {
      if (args[i] == "--header-only")
        headersOnly = true;
      else if (args[i] == "--chunks")
        chunks = true;
      else
        paths.push_back(args[i]);
    }
    if (paths.size() != 1 || paths[0].rfind("--", 0) == 0)
      return usageError("list takes [--header-only] [--chunks] FILE|DIR");
    return list(paths[0], headersOnly, chunks);
  }
  if (cmd == "index") {
    if (args.size() != 2)
      return usageError("index takes INDEX.json");
    return index(args[1]);
  }
  if (cmd == "cat") {
    if (args.size() != 3)
      return usageError("cat takes FILE|DIR NAME");
    return cat(args[1], args[2]);
  }
  if (cmd == "write") {
    if (args.size() != 3)
      return usageError("write takes OUT.safetensors SPEC.json");
    return write(args[1], args[2]);
  }
  return usageError("unknown command '" + cmd + "'" +
                    cli::didYouMean(cmd, {"list", "index", "cat", "write"}));
}
