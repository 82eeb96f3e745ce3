//===- ChoiceReads.h - Which backend choices evaluation reads ---*- C++ -*-===//
//
// A check of a model under one combination of a backend's choices depends on
// the choices its evaluations read and on nothing else of the combination;
// recording them lets `mdlc check` take another combination that agrees on
// them from the first instead of binding and planning it again.
//
//===----------------------------------------------------------------------===//

#ifndef MDL_RUNTIME_MODEL_CHOICEREADS_H
#define MDL_RUNTIME_MODEL_CHOICEREADS_H

#include <set>
#include <string>

namespace mdl::rt {

/// While one lives, the names of the backend choices that evaluations on
/// this thread read (Eval::choice) are recorded in it, and in the ones it
/// is nested in.
class ChoiceReads {
public:
  ChoiceReads();
  ~ChoiceReads();
  ChoiceReads(const ChoiceReads &) = delete;
  ChoiceReads &operator=(const ChoiceReads &) = delete;

  const std::set<std::string> &names() const { return read; }
  /// Records a read of choice `name` in every live recorder.
  static void note(const char *name);

private:
  std::set<std::string> read;
  ChoiceReads *outer;
};

} // namespace mdl::rt

#endif // MDL_RUNTIME_MODEL_CHOICEREADS_H
