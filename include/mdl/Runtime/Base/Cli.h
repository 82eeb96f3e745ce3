//===- Cli.h - What MDL's command-line tools share --------------*- C++ -*-===//
//
// The version string, backend names as users spell them, "did you mean"
// answers for unknown names, and command-line options declared as tables
// (with the parallel-configuration options mdlc and mdl-convert share), for
// every tool (mdlc, mdl-opt, mdl-safetensors, mdl-convert). Plain C++17,
// part of the runtime.
//
//===----------------------------------------------------------------------===//

#ifndef MDL_RUNTIME_BASE_CLI_H
#define MDL_RUNTIME_BASE_CLI_H

#include "mdl/Runtime/Base/Parallel.h"

#include <cstdint>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace mdl::cli {

/// The project's version.
inline constexpr const char *kVersion = "0.1.0";

/// What `TOOL --version` prints: "TOOL (MDL) 0.1.0".
std::string versionLine(std::string_view tool);

/// What a tool prints for an error: "TOOL: error: MESSAGE", and for a usage
/// error a line that points at --help.
std::string errorText(std::string_view tool, std::string_view message,
                      bool usage);

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

/// `text` split at its first `=` into a key (not empty) and a value.
std::optional<std::pair<std::string, std::string>>
splitKeyValue(const std::string &text);

//===----------------------------------------------------------------------===//
// Options declared as a table
//===----------------------------------------------------------------------===//

/// One option of a tool's command line. A tool declares its options once,
/// in a table; parsing and the "did you mean" answer for an unknown option
/// both come from it.
struct Option {
  /// Applies the option with its value ("" for a flag); returns a usage
  /// error, or nullopt.
  using Apply =
      std::function<std::optional<std::string>(const std::string &value)>;
  /// Its spellings, e.g. {"--verbose", "-v"}. A value follows as --name=V,
  /// -name=V or the next argument; a one-letter option's also as -xV.
  std::vector<std::string> names;
  bool takesValue = false;
  Apply apply;
  /// The usage error when the value is missing; without one, the option
  /// gets "" (and says what it needs itself).
  std::string missing;
  /// Whether the program stops after it with exit code 0 (--help).
  bool exits = false;
};

/// A flag: `set` runs when it is given.
Option flag(std::vector<std::string> names, std::function<void()> set);
/// A flag that sets `out`.
Option flag(std::vector<std::string> names, bool &out);
/// An option that prints and stops the program (--help, --version).
Option exitOption(std::vector<std::string> names, std::function<void()> print);
/// An option with a value; `missing` as Option::missing.
Option valueOption(std::vector<std::string> names, Option::Apply apply,
                   std::string missing = "");
/// An option whose value may not be empty: "NAME needs WHAT" otherwise.
Option nonEmptyOption(std::string name, std::string what,
                      std::function<void(const std::string &)> set);
/// An option taking an integer from `min` to `max`: "NAME needs a number"
/// without one, "NAME takes an integer from MIN to MAX, not 'V'" when it
/// is out of bounds or not a decimal integer.
Option integerOption(std::string name, int64_t min, int64_t max,
                     std::function<void(int64_t)> set);
/// An option taking one of `words`: `set` gets its index; "NAME takes A, B
/// or C" otherwise.
Option choiceOption(std::string name, std::vector<std::string> words,
                    std::function<void(size_t)> set);
/// --set or --choice: KEY=VALUE, "NAME takes KEY=VALUE" otherwise.
Option keyValueOption(std::string name,
                      std::function<void(std::string, std::string)> set);

/// The options of a parallel configuration as mdlc and mdl-convert read
/// them: --tp --pp --ep --etp --cp --dp --vpp N (1 to kMaxAxisSize), --sp,
/// --first-stage-layers N and --last-stage-layers N (0 to kMaxCount) into
/// `config`, each given recorded in `given` by its name without dashes
/// (tp, sp, first-stage-layers, ...); --rank R (0 to kMaxCount) into
/// `rank`.
std::vector<Option> parallelOptions(ParallelConfig &config,
                                    std::set<std::string> &given,
                                    int64_t &rank);

/// The arguments of a command line, taken one by one.
class Args {
public:
  explicit Args(std::vector<std::string> args) : args(std::move(args)) {}
  bool done() const { return next >= args.size(); }
  const std::string &peek() const { return args[next]; }
  std::string take() { return args[next++]; }

private:
  std::vector<std::string> args;
  size_t next = 0;
};

/// How parsing a command line ended.
struct Parsed {
  /// An option that stops the program (--help) ran.
  bool exit = false;
  /// A usage error.
  std::optional<std::string> error;
};

/// Parses `args` by `options`, in order, up to the first error or option
/// that exits. An argument that is not an option (or is "-") goes to
/// `positional`, which may return a usage error; an unknown option is one,
/// naming the closest known option.
Parsed
parseArgs(Args &args, const std::vector<Option> &options,
          const std::function<std::optional<std::string>(const std::string &)>
              &positional);

} // namespace mdl::cli

#endif // MDL_RUNTIME_BASE_CLI_H
