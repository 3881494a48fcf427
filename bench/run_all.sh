#!/usr/bin/env bash
# Runs every benchmark (bench/README.md) one after the other and leaves the JSON results in
# bench/out/ (VGEN_BENCH_OUT) and the printed tables in bench/out/run_all.log.
#   bench/run_all.sh                    # 5 runs each (VGEN_BENCH_RUNS), torch intra-op threads 1
#   VGEN_BENCH_OMP=0 bench/run_all.sh   # leave OMP_NUM_THREADS unset (torch's default: one per core)
#   VGEN_BENCH_SKIP_BUILD=1 VGEN_BENCH_BIN=DIR bench/run_all.sh   # prebuilt binaries in DIR
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${VGEN_VENV:-$HOME/.cache/vgen/venv}/bin/python"
OMP="${VGEN_BENCH_OMP:-1}"
omp=()
[[ "$OMP" != 0 ]] && omp=(--omp-threads "$OMP")
mkdir -p "${VGEN_BENCH_OUT:-bench/out}"
log="${VGEN_BENCH_OUT:-bench/out}/run_all.log"
if [[ -z "${VGEN_BENCH_SKIP_BUILD:-}" ]]; then
  cmake --build "${VGEN_BUILD_DIR:-build}" -j1 --target vgen bench_pipeline bench_encode bench_jobs bench_memory
fi
{
  echo "== $(date -Is)  $(nproc) cpus, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
  uptime
  "$PY" bench/runtime_overhead.py
  "$PY" bench/encode.py
  "$PY" bench/memory.py
  "$PY" bench/batching.py --model tiny "${omp[@]}"
  "$PY" bench/batching.py --model tiny --jobs 48 "${omp[@]}"   # steady state: 6 groups of 8, not 2
  "$PY" bench/overlap.py --model tiny "${omp[@]}"
  "$PY" bench/overlap.py --model medium "${omp[@]}"
  "$PY" bench/e2e.py --model tiny "${omp[@]}"
  "$PY" bench/e2e.py --model medium "${omp[@]}"
  uptime
} 2>&1 | tee "$log"
