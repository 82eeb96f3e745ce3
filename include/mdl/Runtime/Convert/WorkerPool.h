//===- WorkerPool.h - Running work on several threads -----------*- C++ -*-===//
//
// Plain C++17. The threads that stream tensor files and convert checkpoints.
//
//===----------------------------------------------------------------------===//

#ifndef MDL_RUNTIME_CONVERT_WORKERPOOL_H
#define MDL_RUNTIME_CONVERT_WORKERPOOL_H

#include <cstddef>
#include <functional>

namespace mdl::rt {

/// Runs `work` on `n` threads (the caller's among them) and waits for all;
/// when no more threads can be started, those running do the work.
void runWorkers(size_t n, const std::function<void()> &work);

} // namespace mdl::rt

#endif // MDL_RUNTIME_CONVERT_WORKERPOOL_H
