//===- Cli.h - What MDL's command-line tools share -------------*- C++ -*-===//
//
// The version string, backend names as users spell them, and "did you
// mean" answers for unknown names, for every tool (mdlc, mdl-opt,
// mdl-safetensors, mdl-convert). Plain C++17, part of the runtime.
//
//===----------------------------------------------------------------------===//

#ifndef MDL_RUNTIME_CLI_H
#define MDL_RUNTIME_CLI_H

#include <string>
#include <string_view>
#include <vector>

namespace mdl::cli {

/// The project's version.
inline constexpr const char *kVersion = "0.1.0";

/// What `TOOL --version` prints: "TOOL (MDL) 0.1.0".
std::string versionLine(std::string_view tool);

/// A backend name as the specs spell it: lower case, `_` for `-`
/// (mcore-te, mcore_te and MCORE_TE are all mcore_te).
std::string normalizeBackendName(std::string_view name);

/// The names of `known` closest to `name` (edit distance at most a third
/// of its length, and at least 1), best first; ties keep `known`'s order.
std::vector<std::string> closestNames(std::string_view name,
                                      const std::vector<std::string> &known);

/// "; did you mean 'x'? (valid: a, b, c)" or " (valid: a, b, c)" for an
/// unknown `name`, to follow a message that names it.
std::string didYouMean(std::string_view name,
                       const std::vector<std::string> &known);

/// `path`/config.json when `path` is a directory, else `path`.
std::string configPathOf(const std::string &path);
/// Whether `path` names a regular file (or a link to one).
bool isFile(const std::string &path);

/// A relative or absolute file path as a URI reference: `%`, spaces and
/// other characters outside RFC 3986's unreserved set and `/` escaped.
std::string uriOfPath(std::string_view path);

} // namespace mdl::cli

#endif // MDL_RUNTIME_CLI_H
