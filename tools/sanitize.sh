#!/usr/bin/env bash
# Runs the runtime, stage and API unit tests under a sanitizer:
#   tools/sanitize.sh asan   # AddressSanitizer + UndefinedBehaviorSanitizer (build-asan/)
#   tools/sanitize.sh tsan   # ThreadSanitizer (build-tsan/)
#   tools/sanitize.sh asan-torch   # ASan+UBSan with LibTorch (build-asan-torch/): our code is
#                                  # instrumented, the torch wheel is not; adds the model tests
# asan and tsan leave the LibTorch parts out (TSan over an uninstrumented LibTorch/OpenMP only
# yields false reports), so their API tests are those that build without it.
# Extra arguments go to ctest (e.g. -R http). VGEN_JOBS: parallel build and test jobs.
set -euo pipefail
kind="${1:?usage: tools/sanitize.sh asan|tsan|asan-torch [ctest flags]}"
shift
case "$kind" in asan|tsan|asan-torch) ;; *) echo "usage: tools/sanitize.sh asan|tsan|asan-torch" >&2; exit 2;; esac
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="$root/build-$kind"
py="${VGEN_VENV:-$HOME/.cache/vgen/venv}/bin/python"; [ -x "$py" ] || py=""
if [ "$kind" = asan-torch ]; then
  torch_cmake="$("$py" -c 'import torch; print(torch.utils.cmake_prefix_path)')"
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DVGEN_WITH_TORCH=ON \
    -DCMAKE_PREFIX_PATH="$torch_cmake" -DVGEN_PYTHON="$py" -DVGEN_SANITIZE=asan >/dev/null
else
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Debug -DVGEN_WITH_TORCH=OFF -DVGEN_PYTHON="$py" \
    -DVGEN_SANITIZE="$kind" >/dev/null
fi
cmake --build "$build" -j "${VGEN_JOBS:-$(nproc)}"
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:detect_stack_use_after_return=0"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1"
cd "$build"
# Every component test (tests/<area>/[<subfolder>/]test_<name>.cpp) must run here: asan-torch builds them
# all and fails on one that is not registered with ctest; asan and tsan name the ones they
# leave out (the LibTorch components), so a torch-free test missing from them shows.
registered="$(ctest -N -L 'runtime|stages|api' | sed -n 's/^ *Test *#[0-9]*: //p')"
missing=()
while IFS= read -r src; do
  area="$(realpath --relative-to="$root/tests" "$src" | cut -d/ -f1)"  # tests/<area>/<subfolder...>/test_<name>.cpp
  name="$(basename "$src" .cpp)"
  grep -qxF "$area.${name#test_}" <<<"$registered" || missing+=("$area.${name#test_}")
done < <(find "$root/tests/runtime" "$root/tests/stages" "$root/tests/api" -name 'test_*.cpp' | sort)
if [ "${#missing[@]}" -gt 0 ]; then
  if [ "$kind" = asan-torch ]; then
    echo "sanitize.sh: component tests not registered with ctest: ${missing[*]}" >&2
    exit 1
  fi
  echo "sanitize.sh: left out of the $kind build (expected: the LibTorch components): ${missing[*]}"
fi
ctest --output-on-failure -j "${VGEN_JOBS:-$(nproc)}" -L 'runtime|stages|api' "$@"
