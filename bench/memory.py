#!/usr/bin/env python3
"""Memory: peak RSS (VmHWM) of a vgen::Runtime on the tiny package holding 100 and 10,000
queued jobs (bench_memory: warm-up job, try_submit N distinct jobs, keep the handles, sample,
shutdown). Target: peak(10,000) <= peak(100) + 50 MB.

    python bench/memory.py [--counts 100,10000] [--runs R]

Writes bench/out/memory.json.
"""

from __future__ import annotations

import argparse
import sys

from common import BIN, OUT, RUNS, machine, mmm, run_json, stats, table, write
from e2e import ensure_model


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--counts", default="100,10000")
    ap.add_argument("--runs", type=int, default=RUNS)
    a = ap.parse_args()
    counts = [int(c) for c in a.counts.split(",")]
    model = ensure_model("tiny")
    m = machine()
    runs: dict[int, list] = {c: [] for c in counts}
    for r in range(a.runs):
        for c in counts:
            o = run_json([BIN / "bench_memory", "--model", model / "pkg", "--out", OUT / "memory", "--queued", c])
            runs[c].append(o)
            print(f"run {r + 1}/{a.runs} {c} queued: peak {o['queued_sample']['hwm_kb'] / 1024:.1f} MB", file=sys.stderr)
    mb = lambda kb: kb / 1024  # noqa: E731
    summary = {c: {"peak_mb": stats(mb(x["queued_sample"]["hwm_kb"]) for x in rs),
                   "baseline_rss_mb": stats(mb(x["baseline"]["rss_kb"]) for x in rs),
                   "queued_rss_mb": stats(mb(x["queued_sample"]["rss_kb"]) for x in rs),
                   "per_job_kb": stats((x["queued_sample"]["rss_kb"] - x["baseline"]["rss_kb"]) / c for x in rs),
                   "submit_seconds": stats(x["submit_seconds"] for x in rs),
                   "cancelled": [x["cancelled"] for x in rs]} for c, rs in runs.items()}
    lo, hi = min(counts), max(counts)
    growth = summary[hi]["peak_mb"]["median"] - summary[lo]["peak_mb"]["median"]
    print(f"\nmemory: vgen::Runtime (tiny package) with N queued jobs; {a.runs} runs, median (min-max); "
          f"nproc {m['nproc']}, load {m['loadavg_1m']}")
    print(table(["queued jobs", "peak RSS MB (VmHWM)", "RSS before submit MB", "RSS queued MB", "RSS per queued job kB",
                 "try_submit all (s)"],
                [[str(c), mmm(s["peak_mb"]), mmm(s["baseline_rss_mb"]), mmm(s["queued_rss_mb"]), mmm(s["per_job_kb"]),
                  mmm(s["submit_seconds"])] for c, s in summary.items()]))
    print(f"peak({hi}) - peak({lo}) = {growth:.1f} MB (target <= 50 MB: {'met' if growth <= 50 else 'MISSED'})")
    write("memory", {"machine": m, "params": vars(a), "summary": summary, "growth_mb": growth, "target_mb": 50,
                     "met": growth <= 50, "runs": runs})


if __name__ == "__main__":
    main()
