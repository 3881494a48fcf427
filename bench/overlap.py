#!/usr/bin/env python3
"""Overlap: makespan of N jobs submitted together to one vgen::Runtime against the sum of
their stage times, where each stage time is measured with the job running alone (bench_jobs:
a warm-up job, then the N jobs one at a time = "serial", then N jobs with fresh prompts all at
once = "concurrent"). overlap = sum of serial stage seconds / concurrent makespan: > 1 means
stages of different jobs ran at the same time (preprocess, denoise, decode on the device
worker, encode on the codec worker, plus the io thread).

    python bench/overlap.py [--model tiny|medium] [--jobs N] [--max-batch B] [--runs R]
                            [--omp-threads T]

Writes bench/out/overlap_<model>.json (also the per-stage serial seconds: the profile of
where a job's time goes).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from common import BIN, OUT, RUNS, machine, mmm, run_json, stats, table, write
from e2e import GUIDANCE, NEGATIVE, PRESETS, ensure_model

STAGES = ["preprocess", "denoise", "decode", "encode"]


def bench_jobs_cmd(model: Path, preset: dict, jobs: int, max_batch: int, mode: str, out: Path) -> list:
    return [BIN / "bench_jobs", "--model", model / "pkg", "--out", out, "--jobs", jobs, "--width", preset["width"],
            "--height", preset["height"], "--frames", preset["frames"], "--steps", preset["steps"],
            "--guidance", GUIDANCE, "--negative-prompt", NEGATIVE, "--max-batch", max_batch, "--mode", mode]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", choices=sorted(PRESETS), default="tiny")
    ap.add_argument("--jobs", type=int, default=None, help="default: tiny 16, medium 4")
    ap.add_argument("--max-batch", type=int, default=1)
    ap.add_argument("--runs", type=int, default=RUNS)
    ap.add_argument("--omp-threads", type=int)
    a = ap.parse_args()
    env = {"OMP_NUM_THREADS": str(a.omp_threads)} if a.omp_threads else {}
    p = PRESETS[a.model]
    jobs = a.jobs or (16 if a.model == "tiny" else 4)
    model = ensure_model(a.model)
    m = machine(with_torch=True)
    m["OMP_NUM_THREADS"] = env.get("OMP_NUM_THREADS", os.environ.get("OMP_NUM_THREADS", "unset"))
    runs = []
    for r in range(a.runs):
        o = run_json(bench_jobs_cmd(model, p, jobs, a.max_batch, "both", OUT / f"overlap_{a.model}"), env=env)
        serial_stage = {s: sum(x["stage_seconds"].get(s, 0.0) for x in o["serial"]["results"]) for s in STAGES}
        conc_stage = {s: sum(x["stage_seconds"].get(s, 0.0) for x in o["concurrent"]["results"]) for s in STAGES}
        run = {"serial_makespan": o["serial"]["makespan"], "serial_stage_sum": sum(serial_stage.values()),
               "serial_stage_seconds": serial_stage, "concurrent_makespan": o["concurrent"]["makespan"],
               "concurrent_stage_sum": sum(conc_stage.values()), "concurrent_stage_seconds": conc_stage,
               "warmup_seconds": o["warmup_seconds"], "warmup_stage_seconds": o["warmup"]["stage_seconds"],
               "intra_op_threads": o["intra_op_threads"]}
        run["overlap"] = run["serial_stage_sum"] / run["concurrent_makespan"]
        runs.append(run)
        print(f"run {r + 1}/{a.runs}: serial sum {run['serial_stage_sum']:.2f} s, concurrent makespan "
              f"{run['concurrent_makespan']:.2f} s, overlap {run['overlap']:.2f}x", file=sys.stderr)
    keys = ["serial_stage_sum", "serial_makespan", "concurrent_makespan", "concurrent_stage_sum", "overlap"]
    summary = {k: stats(x[k] for x in runs) for k in keys}
    summary["serial_stage_seconds"] = {s: stats(x["serial_stage_seconds"][s] for x in runs) for s in STAGES}
    summary["warmup_stage_seconds"] = {s: stats(x["warmup_stage_seconds"].get(s, 0.0) for x in runs) for s in STAGES}
    print(f"\noverlap, {a.model} random Wan: {jobs} jobs, {p['width']}x{p['height']}, {p['frames']} frames, "
          f"{p['steps']} steps, max_batch {a.max_batch}; {a.runs} runs, median (min-max); nproc {m['nproc']}, "
          f"OMP_NUM_THREADS {m['OMP_NUM_THREADS']}, load {m['loadavg_1m']}")
    print(table(["measure", "seconds"], [[k.replace("_", " "), mmm(summary[k])] for k in keys]))
    total = sum(summary["serial_stage_seconds"][s]["median"] for s in STAGES)
    print("\nwhere a job's time goes (jobs run alone, sum over jobs; median seconds, share):")
    print(table(["stage", "seconds", "share", "first job (model load + warm-up)"],
                [[s, mmm(summary["serial_stage_seconds"][s]), f"{summary['serial_stage_seconds'][s]['median'] / total:.0%}",
                  mmm(summary["warmup_stage_seconds"][s])] for s in STAGES]))
    write(f"overlap_{a.model}", {"machine": m, "params": {**vars(a), **p, "jobs": jobs}, "summary": summary,
                                 "runs": runs})


if __name__ == "__main__":
    main()
