//===- Host.cpp - What the machine gives this process ---------------------===//

#include "mdl/Runtime/Convert/Host.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

#ifdef __linux__
#include <sched.h>
#endif

using namespace mdl;

namespace {

std::optional<std::string> readSmallFile(const std::string &path) {
  std::ifstream in(path);
  if (!in)
    return std::nullopt;
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

/// The quota of one cgroup directory in CPUs, if it sets one.
std::optional<double> quotaIn(const std::string &dir, bool v2) {
  double quota = 0, period = 0;
  if (v2) {
    // "max 100000" (no limit) or "QUOTA PERIOD".
    std::optional<std::string> text = readSmallFile(dir + "/cpu.max");
    if (!text)
      return std::nullopt;
    std::istringstream in(*text);
    std::string q;
    if (!(in >> q >> period) || q == "max")
      return std::nullopt;
    quota = std::strtod(q.c_str(), nullptr);
  } else {
    std::optional<std::string> q = readSmallFile(dir + "/cpu.cfs_quota_us");
    std::optional<std::string> p = readSmallFile(dir + "/cpu.cfs_period_us");
    if (!q || !p)
      return std::nullopt;
    quota = std::strtod(q->c_str(), nullptr); // -1: no limit
    period = std::strtod(p->c_str(), nullptr);
  }
  if (quota <= 0 || period <= 0)
    return std::nullopt;
  return quota / period;
}

} // namespace

std::optional<double> mdl::rt::cgroupCpuLimit(std::string_view procSelfCgroup,
                                              const std::string &root) {
  std::optional<double> limit;
  std::istringstream lines{std::string(procSelfCgroup)};
  for (std::string line; std::getline(lines, line);) {
    // ID:CONTROLLERS:PATH; v2 is "0::PATH".
    size_t c1 = line.find(':'), c2 = line.find(':', c1 + 1);
    if (c1 == std::string::npos || c2 == std::string::npos)
      continue;
    std::string id = line.substr(0, c1),
                controllers = line.substr(c1 + 1, c2 - c1 - 1),
                path = line.substr(c2 + 1);
    bool v2 = id == "0" && controllers.empty();
    std::vector<std::string> mounts;
    if (v2) {
      mounts = {root, root + "/unified"};
    } else {
      bool cpu = false;
      std::istringstream names(controllers);
      for (std::string n; std::getline(names, n, ',');)
        cpu |= n == "cpu";
      if (!cpu)
        continue;
      mounts = {root + "/" + controllers, root + "/cpu", root + "/cpu,cpuacct"};
    }
    // The cgroup and each of its ancestors may set a quota.
    while (!path.empty() && path.back() == '/')
      path.pop_back();
    for (;;) {
      for (const std::string &m : mounts)
        if (std::optional<double> q = quotaIn(m + path, v2))
          limit = limit ? std::min(*limit, *q) : *q;
      if (path.empty())
        break;
      size_t slash = path.rfind('/');
      path.erase(slash == std::string::npos ? 0 : slash);
    }
  }
  return limit;
}

unsigned mdl::rt::usableCpus() {
  unsigned cpus = std::thread::hardware_concurrency();
#ifdef __linux__
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0)
    cpus = unsigned(CPU_COUNT(&set));
#endif
  if (std::optional<std::string> text = readSmallFile("/proc/self/cgroup"))
    if (std::optional<double> limit =
            cgroupCpuLimit(*text, "/sys/fs/cgroup"))
      cpus = std::min(cpus, unsigned(std::ceil(*limit)));
  return std::max(1u, cpus);
}
