//===- Host.h - What the machine gives this process -------------*- C++ -*-===//
//
// Plain C++17 (Linux). The CPUs a process may use: its affinity mask,
// lowered by the CPU quota of its cgroups (v2 `cpu.max`, v1
// `cpu.cfs_quota_us` over `cpu.cfs_period_us`), as containers and batch
// schedulers set them.
//
//===----------------------------------------------------------------------===//

#ifndef MDL_RUNTIME_CONVERT_HOST_H
#define MDL_RUNTIME_CONVERT_HOST_H

#include <optional>
#include <string>
#include <string_view>

namespace mdl::rt {

/// The CPUs this process may use, at least 1: the CPUs of its affinity mask,
/// at most the smallest cgroup quota over its cgroup and their ancestors,
/// rounded up.
unsigned usableCpus();

/// The smallest CPU quota, in CPUs, over the cgroups `procSelfCgroup` (the
/// text of /proc/self/cgroup) names and their ancestors, under the cgroup
/// file systems mounted at `root` (v2 at `root` or `root`/unified, v1 at
/// `root`/CONTROLLERS, `root`/cpu or `root`/cpu,cpuacct); none when no
/// quota is set or nothing can be read.
std::optional<double> cgroupCpuLimit(std::string_view procSelfCgroup,
                                     const std::string &root);

} // namespace mdl::rt

#endif // MDL_RUNTIME_CONVERT_HOST_H
