#!/usr/bin/env bash
# Builds the libFuzzer harnesses with clang-19 (ASan, UBSan) in build-fuzz/
# (MDL_FUZZ_BUILD_DIR picks another directory) and runs each for a bounded
# time, starting from its seed corpus in test/Fuzz/corpus/NAME. New inputs
# go to BUILD/fuzz/corpus-NAME, never into the tree; a crash, a leak of the
# time limit or of memory is written to BUILD/fuzz/crash-NAME-* and fails
# the run.
#
#   test/Fuzz/run.sh [SECONDS_PER_HARNESS [NAME...]]
set -euo pipefail
cd "$(dirname "$0")/../.."
seconds=${1:-20}
shift || true
build=${MDL_FUZZ_BUILD_DIR:-build-fuzz}
names=("$@")
if [ ${#names[@]} -eq 0 ]; then
  names=(spec config set inventory index safetensors torch plan rank adapter cmdline)
fi

mkdir -p "$build"
# The harnesses work in a scratch directory of their own: absolute paths.
build=$(realpath "$build")
cmake -G Ninja -S . -B "$build" \
  -DCMAKE_C_COMPILER=clang-19 -DCMAKE_CXX_COMPILER=clang++-19 \
  -DMLIR_DIR=/usr/lib/llvm-19/lib/cmake/mlir \
  -DLLVM_EXTERNAL_LIT=/usr/lib/llvm-19/build/utils/lit/lit.py \
  -DCMAKE_BUILD_TYPE=Release -DMDL_FUZZ=ON > "$build/configure.log" ||
  { cat "$build/configure.log"; exit 1; }
# Debian's LLVM libraries are not instrumented (see test/lit.cfg.py): their
# containers' poisoning is not ASan's to check, in the build (mdlc generates
# code for the harnesses) as in the runs.
export ASAN_OPTIONS=detect_leaks=0:allow_user_poisoning=0
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
cmake --build "$build" --target mdl-fuzzers
failed=()
for name in "${names[@]}"; do
  corpus="$build/fuzz/corpus-$name"
  mkdir -p "$corpus"
  echo "== fuzzing $name for ${seconds}s"
  # Tokens that lead to the kinds of bad input found before.
  dict=()
  if [ -f "test/Fuzz/dict/$name.dict" ]; then
    dict=(-dict="$PWD/test/Fuzz/dict/$name.dict")
  fi
  if ! "$build/fuzz/mdl-fuzz-$name" "$corpus" "$PWD/test/Fuzz/corpus/$name" \
      "${dict[@]}" \
      -max_total_time="$seconds" -timeout=30 -rss_limit_mb=4096 \
      -detect_leaks=0 -close_fd_mask=2 -print_final_stats=0 \
      -artifact_prefix="$build/fuzz/crash-$name-" \
      > "$build/fuzz/$name.log" 2>&1; then
    tail -n 60 "$build/fuzz/$name.log"
    failed+=("$name")
  else
    grep -E "^(#[0-9]+ +DONE|Done [0-9]+ runs)" "$build/fuzz/$name.log" || true
  fi
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzzing found problems in: ${failed[*]} (inputs in $build/fuzz/crash-*)"
  exit 1
fi
echo "fuzzing: ${#names[@]} harnesses ran ${seconds}s each, no problem found"
