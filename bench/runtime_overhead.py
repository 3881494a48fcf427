#!/usr/bin/env python3
"""Runtime overhead: vgen's Pipeline (bench_pipeline) against the same pipeline in Python
asyncio (bench/python/asyncio_pipeline.py): 4 fixed-cost stub stages on a 2-thread compute
pool, same job count, queue capacities and worker counts. Target: vgen >= 20x asyncio jobs/s.

    python3 bench/runtime_overhead.py [--jobs N] [--workers S] [--queue Q] [--threads W] [--cost-us C]

Writes bench/out/runtime_overhead.json.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from common import BIN, RUNS, machine, mmm, run_json, stats, table, write

HERE = Path(__file__).resolve().parent


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=20000)
    ap.add_argument("--stages", type=int, default=4)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--queue", type=int, default=16)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--cost-us", type=float, default=1.0)
    ap.add_argument("--latency-jobs", type=int, default=2000)
    ap.add_argument("--runs", type=int, default=RUNS)
    a = ap.parse_args()
    flags = ["--jobs", a.jobs, "--stages", a.stages, "--workers", a.workers, "--queue", a.queue,
             "--threads", a.threads, "--cost-us", a.cost_us, "--latency-jobs", a.latency_jobs]
    impls = {"vgen": [BIN / "bench_pipeline", *flags],
             "python-asyncio": [sys.executable, HERE / "python" / "asyncio_pipeline.py", *flags]}
    m = machine()
    runs: dict[str, list] = {k: [] for k in impls}
    for r in range(a.runs):  # interleaved, so machine load drifts hit both alike
        for name, cmd in impls.items():
            runs[name].append(run_json(cmd))
            print(f"run {r + 1}/{a.runs} {name}: {runs[name][-1]['jobs_per_s']:.0f} jobs/s", file=sys.stderr)
    summary = {name: {"jobs_per_s": stats(x["jobs_per_s"] for x in rs),
                      "latency_us_median": stats(x["latency_us_median"] for x in rs),
                      "per_hop_us": stats(x["per_hop_us"] for x in rs)} for name, rs in runs.items()}
    ratio = summary["vgen"]["jobs_per_s"]["median"] / summary["python-asyncio"]["jobs_per_s"]["median"]
    print(f"\nruntime overhead: {a.jobs} jobs, {a.stages} stages x {a.workers} workers, queue {a.queue}, "
          f"{a.threads} compute threads, {a.cost_us} us busy CPU per stage; {a.runs} runs, median (min-max); "
          f"nproc {m['nproc']}, {m['cpu_model']}, load {m['loadavg_1m']}")
    print(table(["impl", "jobs/s", "1-job latency (us)", "per-hop overhead (us)"],
                [[n, mmm(s["jobs_per_s"]), mmm(s["latency_us_median"]), mmm(s["per_hop_us"])]
                 for n, s in summary.items()]))
    print(f"vgen / asyncio jobs/s: {ratio:.2f}x (target >= 20x: {'met' if ratio >= 20 else 'MISSED'})")
    write("runtime_overhead", {"machine": m, "params": vars(a), "summary": summary, "ratio": ratio,
                               "target": 20.0, "met": ratio >= 20, "runs": runs})


if __name__ == "__main__":
    main()
