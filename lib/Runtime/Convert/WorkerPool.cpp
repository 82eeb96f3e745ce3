//===- WorkerPool.cpp - Running work on several threads -------------------===//

#include "mdl/Runtime/Convert/WorkerPool.h"

#include <thread>
#include <vector>

void mdl::rt::runWorkers(size_t n, const std::function<void()> &work) {
  std::vector<std::thread> helpers;
  for (size_t t = 1; t < n; ++t) {
    try {
      helpers.emplace_back(work);
    } catch (...) {
      break; // no more threads: the others do the work
    }
  }
  work();
  for (std::thread &t : helpers)
    t.join();
}
