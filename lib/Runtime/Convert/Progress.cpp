//===- Progress.cpp - Reporting a conversion's progress -------------------===//

#include "mdl/Runtime/Convert/Progress.h"
#include "mdl/Runtime/Base/Json.h"

#include <algorithm>
#include <cmath>

using namespace mdl;
using namespace mdl::rt;

std::optional<ProgressMode> mdl::rt::parseProgressMode(std::string_view name,
                                                       bool terminal) {
  if (name == "auto")
    return terminal ? ProgressMode::Terminal : ProgressMode::Log;
  if (name == "tty")
    return ProgressMode::Terminal;
  if (name == "log")
    return ProgressMode::Log;
  if (name == "json")
    return ProgressMode::Json;
  if (name == "none")
    return ProgressMode::None;
  return std::nullopt;
}

ProgressReporter::ProgressReporter(ProgressMode mode, std::FILE *out,
                                   double interval)
    : mode(mode), out(out), interval(std::max(0.0, interval)),
      start(std::chrono::steady_clock::now()) {}

double ProgressReporter::elapsed() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                       start)
      .count();
}

namespace {

std::string format(const char *fmt, double a, double b = 0) {
  char buf[64];
  std::snprintf(buf, sizeof buf, fmt, a, b);
  return buf;
}

/// A size in B, kB, MB or GB (powers of 1000).
std::string bytesText(double n) {
  return n < 1e3   ? format("%.0f B", n)
         : n < 1e6 ? format("%.1f kB", n / 1e3)
         : n < 1e9 ? format("%.1f MB", n / 1e6)
                   : format("%.2f GB", n / 1e9);
}

/// Bytes per second, once there is something to measure.
double rate(const ConvertProgress &p, double seconds) {
  return seconds > 0 ? double(p.bytesDone) / seconds : 0;
}

std::string duration(double s) {
  if (s < 60)
    return format("%.0f s", s);
  long t = std::lround(s);
  return std::to_string(t / 3600) + format(":%02.0f:%02.0f", double(t / 60 % 60),
                                           double(t % 60));
}

} // namespace

std::string ProgressReporter::line(const ConvertProgress &p,
                                   double seconds) const {
  double r = rate(p, seconds);
  std::string s = bytesText(double(p.bytesDone)) + " of " +
                  bytesText(double(p.bytesTotal));
  if (p.bytesTotal)
    s += format(" (%.0f%%)", 100.0 * double(p.bytesDone) / double(p.bytesTotal));
  s += ", " + std::to_string(p.tensorsDone) + "/" +
       std::to_string(p.tensorsTotal) + " tensors, " +
       std::to_string(p.ranksDone) + "/" + std::to_string(p.ranksTotal) +
       " ranks, " + bytesText(r) + "/s";
  if (r > 0)
    s += ", ETA " + duration(double(p.bytesTotal - p.bytesDone) / r);
  return s;
}

std::string ProgressReporter::json(const char *event, const ConvertProgress &p,
                                   double seconds) const {
  json::Value j = json::Value::object();
  j.set("event", json::Value::string(event));
  auto integer = [&](const char *key, double v) {
    j.set(key, json::Value::integer(int64_t(std::llround(v))));
  };
  integer("bytes_done", double(p.bytesDone));
  integer("bytes_total", double(p.bytesTotal));
  integer("tensors_done", double(p.tensorsDone));
  integer("tensors_total", double(p.tensorsTotal));
  integer("ranks_done", double(p.ranksDone));
  integer("ranks_total", double(p.ranksTotal));
  integer("milliseconds", seconds * 1e3);
  double r = rate(p, seconds);
  integer("bytes_per_second", r);
  if (r > 0)
    integer("eta_seconds", double(p.bytesTotal - p.bytesDone) / r);
  integer("threads", p.threads);
  return json::write(j) + "\n";
}

void ProgressReporter::update(const ConvertProgress &p) {
  if (mode == ProgressMode::None)
    return;
  double now = elapsed();
  // A terminal line is redrawn a few times a second; others are logged.
  double every = mode == ProgressMode::Terminal ? 0.2 : interval;
  if (reported && now - lastReport < every)
    return;
  // The first line of a log waits for the first interval.
  if (!reported && mode != ProgressMode::Terminal && now < every)
    return;
  reported = true;
  lastReport = now;
  std::string text = mode == ProgressMode::Json ? json("progress", p, now)
                     : mode == ProgressMode::Log
                         ? "progress: " + line(p, now) + "\n"
                         : "\r" + line(p, now) + "    ";
  std::fputs(text.c_str(), out);
  std::fflush(out);
}

void ProgressReporter::finish(const ConvertProgress &p,
                              const std::string &error) {
  if (mode == ProgressMode::None)
    return;
  double now = elapsed();
  if (mode == ProgressMode::Terminal && reported)
    std::fputc('\n', out);
  if (mode == ProgressMode::Json) {
    std::string text = json(error.empty() ? "done" : "failed", p, now);
    if (!error.empty()) {
      text.pop_back(); // the newline
      text.pop_back(); // the closing brace
      text += ",\"error\":" + json::quote(error) + "}\n";
    }
    std::fputs(text.c_str(), out);
  } else if (error.empty()) {
    std::string text = "converted " + bytesText(double(p.bytesDone)) + ", " +
                       std::to_string(p.tensorsDone) + " tensors, " +
                       std::to_string(p.ranksDone) + " ranks in " +
                       format("%.2f s", now) + ", " + bytesText(rate(p, now)) +
                       "/s, " + std::to_string(p.threads) + " threads\n";
    std::fputs(text.c_str(), out);
  }
  std::fflush(out);
}
