//===- Processes.cpp - The processes one conversion runs on ---------------===//

#include "Processes.h"

#include "mdl/Runtime/Base/Parallel.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <numeric>
#include <optional>
#include <thread>
#include <utility>

#ifdef MDL_HAVE_MPI
#include <mpi.h>
#endif

using namespace mdl;
using namespace mdl::convert;

namespace {

/// The share a launcher that does not connect its processes names.
class EnvironmentShare : public Processes {
public:
  EnvironmentShare(int64_t self, int64_t total) : Processes(self, total) {}
};

#ifdef MDL_HAVE_MPI
class MPIJob : public Processes {
public:
  MPIJob(int64_t self, int64_t total) : Processes(self, total) {}
  ~MPIJob() override { MPI_Finalize(); }
  bool communicate() const override { return total > 1; }

  Outcome agree(int code, const std::string &message) override {
    waitForAll();
    std::vector<int> codes(size_t(total), 0);
    MPI_Allgather(&code, 1, MPI_INT, codes.data(), 1, MPI_INT, MPI_COMM_WORLD);
    auto failed =
        std::find_if(codes.begin(), codes.end(), [](int c) { return c != 0; });
    if (failed == codes.end())
      return {};
    Outcome out;
    out.code = *failed;
    out.process = failed - codes.begin();
    // The failed process sends its message to all.
    int root = int(out.process);
    uint64_t length = message.size();
    MPI_Bcast(&length, 1, MPI_UINT64_T, root, MPI_COMM_WORLD);
    out.message = self == root ? message : std::string(length, '\0');
    MPI_Bcast(out.message.data(), int(length), MPI_CHAR, root, MPI_COMM_WORLD);
    return out;
  }
  void barrier() override { waitForAll(); }

private:
  /// Waits until every process is here, sleeping rather than spinning as
  /// MPI's blocking calls do: a process that wrote its files may wait long
  /// for the others, and would take CPU from them.
  static void waitForAll() {
    MPI_Request request;
    MPI_Ibarrier(MPI_COMM_WORLD, &request);
    int done = 0;
    while (MPI_Test(&request, &done, MPI_STATUS_IGNORE) == MPI_SUCCESS &&
           !done)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
};

/// Whether an MPI launcher started this process (Open MPI's mpirun, or a
/// PMI/PMIx launcher such as srun): only then is MPI initialised, so that a
/// plain run neither pays for nor depends on an MPI runtime.
bool launchedByMPI() {
  for (const char *v : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE"})
    if (std::getenv(v))
      return true;
  return false;
}
#endif

/// An integer variable of the environment, when set and valid.
std::optional<int64_t> envInt(const char *name, int64_t min, int64_t max) {
  const char *v = std::getenv(name);
  return v ? parseBoundedInt(v, min, max) : std::nullopt;
}

} // namespace

bool Processes::haveMPI() {
#ifdef MDL_HAVE_MPI
  return true;
#else
  return false;
#endif
}

std::unique_ptr<Processes> Processes::start(bool fromEnv, std::string &error) {
#ifdef MDL_HAVE_MPI
  if (launchedByMPI()) {
    MPI_Init(nullptr, nullptr);
    int self = 0, total = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &self);
    MPI_Comm_size(MPI_COMM_WORLD, &total);
    return std::make_unique<MPIJob>(self, total);
  }
#endif
  if (!fromEnv)
    return std::make_unique<EnvironmentShare>(0, 1);
  for (auto [rankVar, sizeVar] :
       {std::pair{"RANK", "WORLD_SIZE"}, {"SLURM_PROCID", "SLURM_NTASKS"}}) {
    if (!std::getenv(rankVar) && !std::getenv(sizeVar))
      continue;
    std::optional<int64_t> total = envInt(sizeVar, 1, kMaxRanks);
    std::optional<int64_t> self =
        total ? envInt(rankVar, 0, *total - 1) : std::nullopt;
    if (!self) {
      auto shown = [](const char *var) {
        const char *v = std::getenv(var);
        return std::string(var) + "=" + (v ? v : "(unset)");
      };
      error = "--ranks-from-env: " + shown(rankVar) + " and " + shown(sizeVar) +
              " name no process (" + rankVar + " from 0 to " + sizeVar +
              " - 1)";
      return nullptr;
    }
    return std::make_unique<EnvironmentShare>(*self, *total);
  }
  error = "--ranks-from-env: neither RANK and WORLD_SIZE (torchrun) nor "
          "SLURM_PROCID and SLURM_NTASKS (srun) are set";
  return nullptr;
}

std::vector<int64_t> convert::balanceByBytes(const std::vector<uint64_t> &sizes,
                                             int64_t processes) {
  std::vector<size_t> order(sizes.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return sizes[a] > sizes[b]; });
  // Bytes, then files, so that empty files are shared out too.
  std::vector<std::pair<uint64_t, size_t>> load(static_cast<size_t>(processes));
  std::vector<int64_t> owner(sizes.size(), 0);
  for (size_t i : order) {
    size_t p = std::min_element(load.begin(), load.end()) - load.begin();
    owner[i] = int64_t(p);
    load[p].first += sizes[i];
    ++load[p].second;
  }
  return owner;
}
