//===- Progress.h - Reporting a conversion's progress -----------*- C++ -*-===//
//
// Plain C++17. What a long conversion tells the person or program watching
// it: on a terminal one line rewritten in place with the rate and the time
// left; in a log (SLURM, nohup, CI) a line every few seconds; for programs
// one JSON object per line. Each form ends with a summary: bytes, tensors,
// ranks, time, throughput, and the threads that did the work.
//
//===----------------------------------------------------------------------===//

#ifndef MDL_RUNTIME_CONVERT_PROGRESS_H
#define MDL_RUNTIME_CONVERT_PROGRESS_H

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <string_view>

namespace mdl::rt {

struct ConvertProgress {
  int64_t ranksDone = 0, ranksTotal = 0;
  int64_t tensorsDone = 0, tensorsTotal = 0;
  uint64_t bytesDone = 0, bytesTotal = 0;
  /// The threads that have filled or copied bytes so far.
  unsigned threads = 0;
};

enum class ProgressMode { None, Terminal, Log, Json };

/// The mode a --progress=NAME names (none, tty, log, json, or auto: tty
/// when `terminal`, log otherwise).
std::optional<ProgressMode> parseProgressMode(std::string_view name,
                                              bool terminal);

class ProgressReporter {
public:
  /// Reports to `out` in `mode`, a log or JSON line at most every
  /// `interval` seconds (every update with 0).
  ProgressReporter(ProgressMode mode, std::FILE *out, double interval = 5);
  /// A new state; not thread-safe (the converter calls it under a lock).
  void update(const ConvertProgress &p);
  /// The summary after the last update: `error` empty on success.
  void finish(const ConvertProgress &p, const std::string &error = "");

private:
  double elapsed() const;
  std::string line(const ConvertProgress &p, double seconds) const;
  std::string json(const char *event, const ConvertProgress &p,
                   double seconds) const;

  ProgressMode mode;
  std::FILE *out;
  double interval, lastReport = 0;
  bool reported = false;
  std::chrono::steady_clock::time_point start;
};

} // namespace mdl::rt

#endif // MDL_RUNTIME_CONVERT_PROGRESS_H
