#!/usr/bin/env bash
# Runs the runtime, stage and API unit tests under a sanitizer:
#   tools/sanitize.sh asan   # AddressSanitizer + UndefinedBehaviorSanitizer (build-asan/)
#   tools/sanitize.sh tsan   # ThreadSanitizer (build-tsan/)
# The LibTorch parts are left out (an uninstrumented LibTorch only yields false reports), so
# the API tests that run are those that build without it (config, batch_input, http_server).
# Extra arguments go to ctest (e.g. -R http). VGEN_JOBS: parallel build and test jobs.
set -euo pipefail
kind="${1:?usage: tools/sanitize.sh asan|tsan [ctest flags]}"
shift
case "$kind" in asan|tsan) ;; *) echo "usage: tools/sanitize.sh asan|tsan" >&2; exit 2;; esac
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="$root/build-$kind"
py="${VGEN_VENV:-$HOME/.cache/vgen/venv}/bin/python"; [ -x "$py" ] || py=""
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Debug -DVGEN_WITH_TORCH=OFF -DVGEN_PYTHON="$py" \
  -DVGEN_SANITIZE="$kind" >/dev/null
cmake --build "$build" -j "${VGEN_JOBS:-$(nproc)}"
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:detect_stack_use_after_return=0"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1"
cd "$build"
ctest --output-on-failure -j "${VGEN_JOBS:-$(nproc)}" -L 'runtime|stages|api' "$@"
