//===- Processes.h - The processes one conversion runs on ------*- C++ -*-===//
//
// A conversion may be spread over several processes: launched by mpirun or
// srun (when mdl-convert is built with MPI), they agree on the outcome, so
// that any failure fails all of them with the first message and the output
// is committed once; named by the environment (torchrun's RANK and
// WORLD_SIZE, SLURM's SLURM_PROCID and SLURM_NTASKS), they only split the
// work, as `--rank` does.
//
//===----------------------------------------------------------------------===//

#ifndef MDL_CONVERT_PROCESSES_H
#define MDL_CONVERT_PROCESSES_H

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace mdl::convert {

class Processes {
public:
  virtual ~Processes() = default;

  /// The processes this one was launched among: an MPI job when launched
  /// by an MPI launcher (and built with MPI), the environment's share with
  /// `fromEnv`, else this process alone. Nothing, with `error` set, when
  /// `fromEnv` finds no share in the environment.
  static std::unique_ptr<Processes> start(bool fromEnv, std::string &error);
  /// Whether MDL was built with MPI.
  static bool haveMPI();

  int64_t index() const { return self; }
  int64_t count() const { return total; }
  /// Whether the processes talk to each other (an MPI job of several).
  virtual bool communicate() const { return false; }

  /// The outcome every process agrees on: each gives its exit code and
  /// message; all get those of the lowest-numbered process that failed
  /// (`code` 0 when none did).
  struct Outcome {
    int code = 0;
    std::string message;
    int64_t process = 0;
  };
  virtual Outcome agree(int code, const std::string &message) {
    return {code, message, self};
  }
  /// Waits until every process is here.
  virtual void barrier() {}

protected:
  Processes(int64_t self, int64_t total) : self(self), total(total) {}
  int64_t self, total;
};

/// Which of `sizes.size()` items of `sizes` bytes each of `processes`
/// processes takes, balanced by bytes: largest first, each to the process
/// with the fewest bytes so far (then the fewest items, then the
/// lowest-numbered).
std::vector<int64_t> balanceByBytes(const std::vector<uint64_t> &sizes,
                                    int64_t processes);

} // namespace mdl::convert

#endif // MDL_CONVERT_PROCESSES_H
