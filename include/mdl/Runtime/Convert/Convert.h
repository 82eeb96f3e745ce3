//===- Convert.h - Moving weights between layouts ---------------*- C++ -*-===//
//
// Conversion copies boxes of logical parameters from the tensors that hold
// them in one layout to the tensors that hold them in another: HF to one
// rank of a backend, every rank of a backend to HF, one backend to another.
// Each box is a strided view on both sides (see Plan.h), so conversion is
// strided copies, with the dtype and value transforms (`offset`) of each
// side applied in double precision and rounded once to the stored dtype.
// Sources are memory-mapped. Worker threads build each target file in
// chunks of a few MB, straight from the mapped sources, and write them at
// their offsets; when a target tensor is done the pages of its sources are
// released, so memory stays near the largest tensor. Plain C++17.
//
//===----------------------------------------------------------------------===//

#ifndef MDL_RUNTIME_CONVERT_CONVERT_H
#define MDL_RUNTIME_CONVERT_CONVERT_H

#include "mdl/Runtime/Checkpoint/Checkpoint.h"
#include "mdl/Runtime/Model/Generated.h"
#include "mdl/Runtime/Convert/Progress.h"
#include "mdl/Runtime/Convert/TensorFileWriter.h"

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace mdl::rt {

class Converter {
public:
  /// Converts from `from` (with its parallel configuration) to `to`.
  Converter(const Binding &from, const ParallelConfig &fromConfig,
            const Binding &to, const ParallelConfig &toConfig);

  /// Registers the checkpoint of source rank `rank`: every tensor the
  /// source plan expects must be there with its shape and dtype, and
  /// nothing else may be but the tensors in `dropped` (those of stack
  /// elements an override leaves out, see droppedTensors()), which are
  /// skipped.
  bool addSource(int64_t rank, std::shared_ptr<Checkpoint> checkpoint,
                 std::string &error,
                 const std::set<std::string> &dropped = {});
  /// A copy tensor of the sources (an MTP layer's copy of the embedding or
  /// the head) whose bytes differ from those of the tensor it copies, held
  /// alike, and which the target holds no copy of the same name of (such a
  /// copy keeps the source copy's bytes): what a conversion would replace
  /// by the copied tensor, as a message naming both; nothing when every
  /// copy is equal or kept (or held in another way, and not compared).
  /// Reads the copies' data.
  std::optional<std::string> differingCopy() const;
  /// The number of worker threads writeRank() uses (by default the CPUs
  /// this process may use: usableCpus()).
  void setThreads(unsigned n);
  /// Whether target files are written with direct I/O where the file
  /// system allows (off by default; see TensorFileWriter::setDirectIO()).
  void setDirectIO(bool on) { directIO = on; }
  /// The source ranks whose tensors target rank `rank` reads (a box that
  /// several ranks hold is read from the first), for the slices of
  /// `onlyParams` (paths) when given.
  std::vector<int64_t>
  sourcesOf(int64_t rank,
            const std::set<std::string> *onlyParams = nullptr) const;
  /// Writes target rank `rank` to `path` (safetensors, atomically). The
  /// sources it reads must have been added, and no source is added after.
  /// `progress` is called from the worker threads, one call at a time.
  bool writeRank(int64_t rank, const std::string &path, std::string &error,
                 const std::function<void(const ConvertProgress &)> &progress =
                     nullptr);
  /// Writes target rank `ranks[i]` to `paths[i]` for every i, as writeRank
  /// does, several files at a time: every tensor is planned before any file
  /// is written, and the first failure stops the rest (no incomplete file
  /// is left). `written(i)` is called once file i is complete; it and
  /// `progress` (over all the files) are called from the worker threads,
  /// one call at a time. `makeWriter(i)` gives the writer of file i (a
  /// SafetensorsWriter when null).
  using WriterFactory =
      std::function<std::unique_ptr<TensorFileWriter>(size_t file)>;
  bool writeRanks(const std::vector<int64_t> &ranks,
                  const std::vector<std::string> &paths, std::string &error,
                  const std::function<void(const ConvertProgress &)>
                      &progress = nullptr,
                  const std::function<void(size_t)> &written = nullptr,
                  const WriterFactory &makeWriter = nullptr);
  /// Says that only the source ranks in `ranks` exist (a checkpoint saved
  /// by some ranks only): each parameter is read from those among them
  /// that hold it. Call before addSource().
  void restrictSources(const std::set<int64_t> &ranks);
  /// A file to write: the tensors of target rank `rank` named in `tensors`
  /// (all of them when it is empty), in the rank's order.
  struct TargetFile {
    int64_t rank = 0;
    std::string path;
    std::vector<std::string> tensors;
    /// The bytes of its tensors, to share files out by.
    uint64_t bytes = 0;
  };
  /// Writes every file of `files` as writeRanks() does.
  bool writeFiles(const std::vector<TargetFile> &files, std::string &error,
                  const std::function<void(const ConvertProgress &)>
                      &progress = nullptr,
                  const std::function<void(size_t)> &written = nullptr,
                  const WriterFactory &makeWriter = nullptr);

  /// A tensor of a target rank in memory: `bytes` bytes at `data`.
  struct MemoryTarget {
    std::string name;
    uint8_t *data = nullptr;
    uint64_t bytes = 0;
  };
  /// Fills the tensors `targets` of target rank `rank` in memory, as
  /// writeFiles() fills files, on the worker threads. With `onlyParams`,
  /// only the slices of those parameters (paths) are written and the rest
  /// of each tensor is left as it is (an update of some weights).
  bool fillTensors(int64_t rank, const std::vector<MemoryTarget> &targets,
                   std::string &error,
                   const std::set<std::string> *onlyParams = nullptr);

  /// One copy of a plan: the box [lo, lo + count) of a parameter (per
  /// atom) from a tensor of a source rank into a tensor of the target
  /// rank.
  struct PlannedCopy {
    std::string target;
    int64_t sourceRank = 0;
    std::string source;
    std::string param;
    std::vector<std::string> atoms;
    std::vector<int64_t> lo, count;
  };
  /// The copies that make target rank `rank`, from the sources added
  /// (their data is not read: a source may be a description without
  /// data), restricted to `onlyParams` when given.
  std::vector<PlannedCopy>
  plannedCopies(int64_t rank,
                const std::set<std::string> *onlyParams = nullptr) const;

private:
  /// A source tensor with data, for comparing copies with what they copy.
  struct HeldTensor {
    int64_t rank = 0;
    const Checkpoint *checkpoint = nullptr;
    const std::string *name = nullptr;
    const uint8_t *data = nullptr;
    uint64_t bytes = 0;
    DType dtype = DType::BF16;
    int64_t offset = 0;
    bool negExp = false;
    std::vector<Piece> pieces;
  };
  std::vector<HeldTensor> copies, copied;

  struct View {
    const uint8_t *data = nullptr;
    uint64_t bytes = 0; // of the source tensor
    /// The mapped file it is in, or null for a tensor in memory (which is
    /// never released nor copied from a file).
    const std::string *file = nullptr;
    /// The source tensor's name.
    const std::string *tensor = nullptr;
    uint64_t fileOffset = 0; // of its bytes in `file`
    DType dtype = DType::BF16;
    int64_t offset = 0;
    bool negExp = false;
    Piece piece;
    int64_t rank = 0;
  };
  struct Job;
  struct SourceCopy;
  bool plan(const RankTensor &t, Job &job, std::string &error) const;
  bool planDequant(const RankTensor &t, const Piece &target, Job &job,
                   std::set<std::pair<const uint8_t *, uint64_t>> &sources,
                   bool &done, std::string &error) const;
  bool planMxfp4(const RankTensor &t, const Piece &target, Job &job,
                 std::set<std::pair<const uint8_t *, uint64_t>> &sources,
                 bool &done, std::string &error) const;
  /// The copies from the views of `key` (the parameter `param`, or a copy
  /// tensor of it kept apart) into `box`.
  bool gather(int param, const std::string &key, const Piece &box,
              DType dtype, int64_t offset, bool negExp,
              std::vector<SourceCopy> &copies,
              std::set<std::pair<const uint8_t *, uint64_t>> &sources,
              const std::string &tensor, std::string &error) const;
  /// Writes the target elements in [begin, end) of the job's dequantized
  /// pieces to `out` (which holds element `begin`).
  void dequantize(const Job &job, int64_t begin, int64_t end,
                  uint8_t *out) const;
  /// The same for the job's k-th dequantized piece, an MXFP4 weight.
  void dequantizeMxfp4(const Job &job, size_t k, int64_t begin, int64_t end,
                       uint8_t *out) const;
  /// Tells the kernel not to read ahead in the source tensors that `jobs`
  /// read sparsely: short runs, together less than half of the tensor.
  static void adviseSparseReads(const std::vector<const Job *> &jobs);
  bool fill(const Job &job, uint64_t offset, uint8_t *out, size_t n,
            std::string &error) const;

  const Binding &from, &to;
  ParallelConfig fromConfig, toConfig;
  unsigned numThreads = 1;
  bool directIO = false;
  std::vector<std::shared_ptr<Checkpoint>> keep;
  /// Per parameter of the source layout: the views that hold it (a copy
  /// tensor's under its own key, heldKey() in Convert.cpp).
  std::map<std::string, std::vector<View>> views;
  /// Per parameter path of the source layout: each box of it the source
  /// ranks hold, with the first rank that holds it (a replicated box is
  /// read from there only).
  struct HeldBox {
    int64_t rank;
    std::vector<int64_t> lo, count;
  };
  std::map<std::string, std::vector<HeldBox>> holders;
};

} // namespace mdl::rt

#endif // MDL_RUNTIME_CONVERT_CONVERT_H
