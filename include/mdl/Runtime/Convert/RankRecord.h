//===- RankRecord.h - What a rank file says it holds ------------*- C++ -*-===//
//
// Plain C++17. Every rank file a conversion writes records which rank of
// which parallel configuration of which model and backend it holds (in a
// safetensors file's __metadata__, or in a file beside a checkpoint of
// another format), and every reader checks it: two rank directories swapped
// (same tensor names and shapes) are an error, not a wrong checkpoint.
//
//===----------------------------------------------------------------------===//

#ifndef MDL_RUNTIME_CONVERT_RANKRECORD_H
#define MDL_RUNTIME_CONVERT_RANKRECORD_H

#include "mdl/Runtime/Base/Parallel.h"

#include <cstdint>
#include <map>
#include <optional>
#include <string>

namespace mdl::rt {

/// One rank of one parallel configuration of a model on a backend.
struct RankIdentity {
  std::string model, backend;
  ParallelConfig config;
  int64_t rank = 0;

  /// "rank 1 of deepseek_v3 on vllm, tp=2 pp=1 ep=1 etp=1".
  std::string str() const;
};

/// The record of `id`, as string keys and values ("mdl.model",
/// "mdl.backend", "mdl.configuration", "mdl.rank").
std::map<std::string, std::string> rankRecord(const RankIdentity &id);

/// Checks the record found in the file `path` (its metadata) against the
/// rank it is read as. A file with no record (written by another tool) is
/// accepted; one whose record names another rank, configuration, model or
/// backend is not: the error names both.
std::optional<std::string>
checkRankRecord(const std::map<std::string, std::string> &found,
                const RankIdentity &expected, const std::string &path);

} // namespace mdl::rt

#endif // MDL_RUNTIME_CONVERT_RANKRECORD_H
