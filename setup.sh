#!/usr/bin/env bash
# Sets MDL up on Debian 12 and runs it.
#
#   ./setup.sh              install what is missing, build, then check and
#                           instantiate every model under models/
#   ./setup.sh test         the same set-up, then the whole test suite; with
#                           MDL_FUZZ_SECONDS=N, then every libFuzzer harness
#                           of test/Fuzz for N seconds (test/Fuzz/run.sh)
#   ./setup.sh test --sanitize
#                           the test suite built with AddressSanitizer and
#                           UndefinedBehaviorSanitizer (in build-sanitize/)
#
# Installing needs root (or sudo); it is skipped when everything is there.
set -euo pipefail
cd "$(dirname "$0")"

mode=${1:-run}
sanitize=OFF
build=${MDL_BUILD_DIR:-build}
if [ "${2:-}" = "--sanitize" ]; then
  sanitize=ON
  build=${MDL_BUILD_DIR:-build-sanitize}
fi
case "$mode" in
  run|test) ;;
  *) echo "usage: $0 [run|test] [--sanitize]" >&2; exit 2 ;;
esac

packages=(g++ cmake ninja-build python3 python3-numpy python3-torch llvm-19-dev libmlir-19-dev
          mlir-19-tools llvm-19-tools antlr4 libantlr4-runtime-dev libfmt-dev
          uuid-dev pkg-config librsvg2-bin clang-19 libclang-rt-19-dev
          openmpi-bin libopenmpi-dev python3-dev pybind11-dev python3-pytest)
# The editor grammar's test runs on node with modules from npm; a node that
# is already there (e.g. from NodeSource, which bundles npm) is used as is.
command -v node >/dev/null && command -v npm >/dev/null || packages+=(nodejs npm)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
    missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "== installing: ${missing[*]}"
  sudo=""
  [ "$(id -u)" -ne 0 ] && sudo=sudo
  $sudo apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q \
    --no-install-recommends "${missing[@]}"
fi

echo "== building in $build"
mkdir -p "$build"
cmake -G Ninja -S . -B "$build" \
  -DMLIR_DIR=/usr/lib/llvm-19/lib/cmake/mlir \
  -DLLVM_EXTERNAL_LIT=/usr/lib/llvm-19/build/utils/lit/lit.py \
  -DCMAKE_BUILD_TYPE=Release -DMDL_SANITIZE=$sanitize > "$build/configure.log" ||
  { cat "$build/configure.log"; exit 1; }
cmake --build "$build"

if [ "$mode" = test ]; then
  echo "== testing"
  cmake --build "$build" --target check-mdl
  if [ "$sanitize" = OFF ] && [ "${MDL_FUZZ_SECONDS:-0}" != 0 ]; then
    echo "== fuzzing"
    test/Fuzz/run.sh "$MDL_FUZZ_SECONDS"
  fi
else
  echo "== checking every model under models/"
  "$build/bin/mdlc" check models/*.mdl
fi
