//===- Cli.cpp - What MDL's command-line tools share ----------------------===//

#include "mdl/Runtime/Base/Cli.h"

#include <algorithm>
#include <cctype>
#include <filesystem>

using namespace mdl;

std::string cli::versionLine(std::string_view tool) {
  return std::string(tool) + " (MDL) " + kVersion;
}

std::string cli::errorText(std::string_view tool, std::string_view message,
                           bool usage) {
  std::string out =
      std::string(tool) + ": error: " + std::string(message) + "\n";
  if (usage)
    out += "(run '" + std::string(tool) + " --help' for usage)\n";
  return out;
}

std::string cli::normalizeBackendName(std::string_view name) {
  std::string out(name);
  for (char &c : out)
    c = c == '-' ? '_' : static_cast<char>(std::tolower(
                             static_cast<unsigned char>(c)));
  return out;
}

static size_t editDistance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j)
    row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1,
                         diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = up;
    }
  }
  return row[b.size()];
}

std::vector<std::string>
cli::closestNames(std::string_view name,
                  const std::vector<std::string> &known) {
  std::string wanted = normalizeBackendName(name);
  size_t limit = std::max<size_t>(1, wanted.size() / 3);
  std::vector<std::pair<size_t, std::string>> scored;
  for (const std::string &k : known) {
    size_t d = editDistance(wanted, normalizeBackendName(k));
    if (d <= limit)
      scored.push_back({d, k});
  }
  std::stable_sort(scored.begin(), scored.end(),
                   [](const auto &x, const auto &y) { return x.first < y.first; });
  std::vector<std::string> out;
  for (auto &s : scored)
    out.push_back(std::move(s.second));
  return out;
}

std::string cli::didYouMean(std::string_view name,
                            const std::vector<std::string> &known) {
  std::string out;
  std::vector<std::string> close = closestNames(name, known);
  if (!close.empty())
    out += "; did you mean '" + close.front() + "'?";
  if (known.empty())
    return out;
  out += " (valid: ";
  for (size_t i = 0; i < known.size(); ++i)
    out += (i ? ", " : "") + known[i];
  return out + ")";
}

std::string cli::uriOfPath(std::string_view path) {
  static const char *hex = "0123456789ABCDEF";
  std::string out;
  for (char c : path) {
    unsigned char u = static_cast<unsigned char>(c);
    if (std::isalnum(u) || c == '-' || c == '.' || c == '_' || c == '~' ||
        c == '/') {
      out += c;
    } else {
      out += '%';
      out += hex[u >> 4];
      out += hex[u & 15];
    }
  }
  return out;
}

std::string cli::configPathOf(const std::string &path) {
  std::error_code ec;
  if (!std::filesystem::is_directory(path, ec))
    return path;
  return path + (path.back() == '/' ? "" : "/") + "config.json";
}

bool cli::isFile(const std::string &path) {
  std::error_code ec;
  return std::filesystem::is_regular_file(path, ec);
}

std::optional<std::pair<std::string, std::string>>
cli::splitKeyValue(const std::string &text) {
  size_t eq = text.find('=');
  if (eq == std::string::npos || eq == 0)
    return std::nullopt;
  return std::pair{text.substr(0, eq), text.substr(eq + 1)};
}

cli::Option cli::flag(std::vector<std::string> names,
                      std::function<void()> set) {
  Option o;
  o.names = std::move(names);
  o.apply = [set](const std::string &) -> std::optional<std::string> {
    set();
    return std::nullopt;
  };
  return o;
}

cli::Option cli::flag(std::vector<std::string> names, bool &out) {
  return flag(std::move(names), [&out] { out = true; });
}

cli::Option cli::exitOption(std::vector<std::string> names,
                            std::function<void()> print) {
  Option o = flag(std::move(names), std::move(print));
  o.exits = true;
  return o;
}

cli::Option cli::valueOption(std::vector<std::string> names,
                             Option::Apply apply, std::string missing) {
  Option o;
  o.names = std::move(names);
  o.takesValue = true;
  o.apply = std::move(apply);
  o.missing = std::move(missing);
  return o;
}

cli::Option cli::nonEmptyOption(std::string name, std::string what,
                                std::function<void(const std::string &)> set) {
  return valueOption({name},
                     [=](const std::string &v) -> std::optional<std::string> {
                       if (v.empty())
                         return name + " needs " + what;
                       set(v);
                       return std::nullopt;
                     });
}

cli::Option cli::integerOption(std::string name, int64_t min, int64_t max,
                               std::function<void(int64_t)> set) {
  return valueOption(
      {name}, [=](const std::string &v) -> std::optional<std::string> {
        if (v.empty())
          return name + " needs a number";
        std::optional<int64_t> n = parseBoundedInt(v, min, max);
        if (!n)
          return name + " takes an integer from " + std::to_string(min) +
                 " to " + std::to_string(max) + ", not '" + v + "'";
        set(*n);
        return std::nullopt;
      });
}

cli::Option cli::choiceOption(std::string name, std::vector<std::string> words,
                              std::function<void(size_t)> set) {
  return valueOption(
      {name}, [=](const std::string &v) -> std::optional<std::string> {
        auto it = std::find(words.begin(), words.end(), v);
        if (it != words.end()) {
          set(size_t(it - words.begin()));
          return std::nullopt;
        }
        std::string list;
        for (size_t i = 0; i < words.size(); ++i)
          list += (i == 0 ? "" : i + 1 == words.size() ? " or " : ", ") +
                  words[i];
        return name + " takes " + list;
      });
}

cli::Option
cli::keyValueOption(std::string name,
                    std::function<void(std::string, std::string)> set) {
  return valueOption({name},
                     [=](const std::string &v) -> std::optional<std::string> {
                       std::optional<std::pair<std::string, std::string>> kv =
                           splitKeyValue(v);
                       if (!kv)
                         return name + " takes KEY=VALUE";
                       set(std::move(kv->first), std::move(kv->second));
                       return std::nullopt;
                     });
}

std::vector<cli::Option> cli::parallelOptions(ParallelConfig &config,
                                              std::set<std::string> &given,
                                              int64_t &rank) {
  std::vector<Option> out;
  for (auto [name, size] : kParallelSizes)
    out.push_back(
        integerOption("--" + std::string(name), 1, kMaxAxisSize,
                      [&, name = std::string(name), size = size](int64_t n) {
                        config.*size = n;
                        given.insert(name);
                      }));
  out.push_back(flag({"--sp"}, [&] {
    config.sp = true;
    given.insert("sp");
  }));
  std::pair<const char *, std::optional<int64_t> *> stages[] = {
      {"first-stage-layers", &config.firstStageLayers},
      {"last-stage-layers", &config.lastStageLayers}};
  for (auto [name, layers] : stages)
    out.push_back(
        integerOption(std::string("--") + name, 0, kMaxCount,
                      [&given, name = name, layers = layers](int64_t n) {
                        *layers = n;
                        given.insert(name);
                      }));
  out.push_back(
      integerOption("--rank", 0, kMaxCount, [&rank](int64_t n) { rank = n; }));
  return out;
}

/// The value of `a` if it spells option `name` with one attached (--name=V,
/// -name=V, or -xV for a one-letter option).
static std::optional<std::string> attachedValue(const std::string &a,
                                                const std::string &name) {
  bool letter = name.size() == 2 && name[0] == '-' && name[1] != '-';
  std::string prefix = letter ? name : name + "=";
  if (a.compare(0, prefix.size(), prefix) != 0)
    return std::nullopt;
  return a.substr(prefix.size());
}

cli::Parsed cli::parseArgs(
    Args &args, const std::vector<Option> &options,
    const std::function<std::optional<std::string>(const std::string &)>
        &positional) {
  Parsed out;
  while (!args.done() && !out.exit && !out.error) {
    std::string a = args.take();
    const Option *found = nullptr;
    std::optional<std::string> value;
    for (const Option &o : options) {
      for (const std::string &name : o.names) {
        if (a == name || (o.takesValue && (value = attachedValue(a, name)))) {
          found = &o;
          break;
        }
      }
      if (found)
        break;
    }
    if (!found && (a.empty() || a[0] != '-' || a == "-")) {
      out.error = positional(a);
      continue;
    }
    if (!found) {
      std::vector<std::string> known;
      for (const Option &o : options)
        for (const std::string &name : o.names)
          if (name.compare(0, 2, "--") == 0)
            known.push_back(name);
      std::vector<std::string> close =
          closestNames(a.substr(0, a.find('=')), known);
      out.error =
          "unknown option '" + a + "'" +
          (close.empty() ? "" : "; did you mean '" + close.front() + "'?");
      continue;
    }
    if (found->takesValue && !value) {
      if (args.done() && !found->missing.empty()) {
        out.error = found->missing;
        continue;
      }
      value = args.done() ? "" : args.take();
    }
    out.error = found->apply(value.value_or(""));
    out.exit = !out.error && found->exits;
  }
  return out;
}
