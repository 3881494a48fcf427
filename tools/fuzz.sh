#!/usr/bin/env bash
# Builds and runs one libFuzzer harness (tests/fuzz/README.md):
#   tools/fuzz.sh jobspec|config|http [libFuzzer flags, e.g. -runs=1000000 or -max_total_time=600]
# Installs clang-14 and its fuzzer runtime (libclang-rt-14-dev) when missing; the other build
# dependencies are the project's own (tools/setup.sh). Configures build-fuzz/ (VGEN_FUZZ_BUILD
# overrides) with clang++-14, VGEN_FUZZ=ON, VGEN_WITH_TORCH=OFF; every library is built with
# coverage instrumentation and ASan+UBSan. Builds only the one harness (VGEN_JOBS parallel
# jobs) and runs it over its seed corpus tests/fuzz/corpus/<name>/ (read only) and the
# growing corpus build-fuzz/corpus/<name>/, with tests/fuzz/<name>.dict. A crash leaves its
# input in build-fuzz/crashes/<name>/ and exits non-zero; rerun it with
#   build-fuzz/bin/fuzz_<name> build-fuzz/crashes/<name>/crash-...
set -euo pipefail
name="${1:-}"
case "$name" in jobspec|config|http) shift ;; *) echo "usage: tools/fuzz.sh jobspec|config|http [libFuzzer flags]" >&2; exit 2;; esac
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${VGEN_FUZZ_BUILD:-$root/build-fuzz}"

missing=()
command -v clang++-14 >/dev/null || missing+=(clang-14)
compgen -G "/usr/lib/llvm-14/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a" >/dev/null || missing+=(libclang-rt-14-dev)
if ((${#missing[@]})); then
  echo "[fuzz] installing Debian packages: ${missing[*]}" >&2
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# Debug keeps assertions (Beast's and Boost.JSON's BOOST_ASSERTs are worth hitting); -O1 for speed.
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG="-g -O1" \
  -DCMAKE_CXX_COMPILER=clang++-14 -DVGEN_FUZZ=ON -DVGEN_WITH_TORCH=OFF -DVGEN_PYTHON= >/dev/null
cmake --build "$build" -j "${VGEN_JOBS:-$(nproc)}" --target "fuzz_$name"

mkdir -p "$build/corpus/$name" "$build/crashes/$name"
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:detect_stack_use_after_return=0}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
dict=()
[ -f "$root/tests/fuzz/$name.dict" ] && dict=(-dict="$root/tests/fuzz/$name.dict")
exec "$build/bin/fuzz_$name" -artifact_prefix="$build/crashes/$name/" -print_final_stats=1 "${dict[@]}" "$@" \
  "$build/corpus/$name" "$root/tests/fuzz/corpus/$name"
