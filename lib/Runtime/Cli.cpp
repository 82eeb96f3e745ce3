//===- Cli.cpp - What MDL's command-line tools share ----------------------===//

#include "mdl/Runtime/Cli.h"

#include <algorithm>
#include <filesystem>
#include <cctype>

using namespace mdl;

std::string cli::versionLine(std::string_view tool) {
  return std::string(tool) + " (MDL) " + kVersion;
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
