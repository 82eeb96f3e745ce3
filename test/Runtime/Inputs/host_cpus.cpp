// Reads CPU quotas from a cgroup tree built under argv[1]: cgroup v2 with a
// quota on an ancestor and a larger one below, v2 without a quota ("max"),
// v1 with a quota under the controller's own mount, v1 without one (-1), a
// hybrid system (v1 cpu without a quota, v2 under unified/ with one), lines
// that are not cgroups, and a tree with no files at all. usableCpus() is at
// least 1 and at most what the machine has.
#include "mdl/Runtime/Convert/Host.h"

#include <cstdio>
#include <fstream>
#include <string>
#include <sys/stat.h>
#include <thread>

using namespace mdl::rt;

static void put(const std::string &path, const std::string &text) {
  for (size_t i = 1; i < path.size(); ++i)
    if (path[i] == '/')
      ::mkdir(path.substr(0, i).c_str(), 0755);
  std::ofstream(path) << text;
}

static void show(const char *what, const std::string &cgroup,
                 const std::string &root) {
  std::optional<double> limit = cgroupCpuLimit(cgroup, root);
  if (limit)
    std::printf("%s: %.2f\n", what, *limit);
  else
    std::printf("%s: none\n", what);
}

int main(int argc, char **argv) {
  if (argc < 2)
    return 2;
  std::string t = argv[1];
  put(t + "/v2/job/cpu.max", "300000 100000\n");
  put(t + "/v2/job/step/cpu.max", "450000 100000\n");
  put(t + "/v2/free/cpu.max", "max 100000\n");
  put(t + "/v1/cpu,cpuacct/slurm/cpu.cfs_quota_us", "250000\n");
  put(t + "/v1/cpu,cpuacct/slurm/cpu.cfs_period_us", "100000\n");
  put(t + "/v1/cpu,cpuacct/cpu.cfs_quota_us", "-1\n");
  put(t + "/v1/cpu,cpuacct/cpu.cfs_period_us", "100000\n");
  put(t + "/hybrid/cpu/cpu.cfs_quota_us", "-1\n");
  put(t + "/hybrid/cpu/cpu.cfs_period_us", "100000\n");
  put(t + "/hybrid/unified/box/cpu.max", "150000 100000\n");
  show("v2 nested", "0::/job/step\n", t + "/v2");
  show("v2 max", "0::/free\n", t + "/v2");
  show("v1 quota", "4:memory:/x\n3:cpu,cpuacct:/slurm\n", t + "/v1");
  show("v1 none", "3:cpu,cpuacct:/\n", t + "/v1");
  show("hybrid", "1:cpu:/\n0::/box\n", t + "/hybrid");
  show("garbage", "no colons here\n::\n7:cpu\n", t + "/v2");
  show("no files", "0::/job/step\n", t + "/nothing");
  unsigned n = usableCpus(), hw = std::thread::hardware_concurrency();
  std::printf("usableCpus in [1, hardware]: %s\n",
              n >= 1 && (hw == 0 || n <= hw) ? "yes" : "no");
  return 0;
}
