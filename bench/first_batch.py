#!/usr/bin/env python3
"""The first `vgen batch` on a fresh tune cache against a warm one, and a diffusers loop (issue 31 item 5).

    python3 bench/first_batch.py --model medium|large [--prompts 8] [--rounds 3] [--no-probe-first]

Every round runs, in a rotating order (interleaved, so the machine's drifting load hits each alike),
the same jobs (8 prompts by default, the preset's size, frames and steps, guidance 5):
  - "fresh cache": `vgen batch` with default flags and an empty tune cache (a new folder each
    run): the start measures nothing of unknown cost (at most tune.first_wait_s, 2 s); the
    jobs' own denoiser timings sweep the batch size at group boundaries;
  - "warm cache": `vgen batch` with default flags and a cache whose search is complete (filled
    once, untimed, by a run with tune.first_wait_s 86400: the whole probe up front);
  - "probe first": the behaviour before issue 31 on a fresh cache (tune.first_wait_s 86400: the
    first job waits for the whole probe), for comparison;
  - "diffusers loop": bench/python/diffusers_loop.py on the same jobs (+ ffmpeg CLI).
Wall time of the whole command (process start to exit); median over the rounds. The goals:
fresh within 15 % of warm, and never slower than the diffusers loop.
Writes bench/results/first_batch_<model>_<date>.txt and .json.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import statistics
import sys
import time
from pathlib import Path

from common import BIN, OUT, ROOT, VENV_PY, machine
from e2e import GUIDANCE, NEGATIVE, PRESETS, PY, ensure_model, run, write_prompts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", choices=["tiny", "medium", "large"], default="medium")
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--no-probe-first", action="store_true", help="leave out the old behaviour's case (saves its runs)")
    ap.add_argument("--no-diffusers", action="store_true", help="leave out the diffusers loop (minutes per run)")
    args = ap.parse_args()
    preset = PRESETS[args.model]
    n = args.prompts
    model = ensure_model(args.model)
    work = OUT / f"first_batch_{args.model}"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    prompts = work / "prompts.jsonl"
    write_prompts(prompts, n)
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "VGEN_TUNE_DIR")}
    whole_probe = work / "whole_probe.json"
    whole_probe.write_text(json.dumps({"tune": {"first_wait_s": 86400}}))
    job = ["--width", preset["width"], "--height", preset["height"], "--frames", preset["frames"], "--steps", preset["steps"],
           "--guidance", GUIDANCE, "--negative-prompt", NEGATIVE]
    counter = [0]

    def vgen(cache: Path, config: Path | None = None) -> tuple[float, str]:
        counter[0] += 1
        out = work / "runs" / str(counter[0])
        e = dict(env, XDG_CACHE_HOME=str(cache))
        dt, _ = run([BIN / "vgen", "batch", prompts, "--model", model / "pkg", "--output-dir", out, *job,
                     *(["--config", config] if config else [])], e)
        shutil.rmtree(out, ignore_errors=True)
        return dt, ""

    fresh_samples: list[list] = []  # what each fresh run left in its cache (observed on its jobs or measured)

    def fresh(config: Path | None = None) -> float:
        cache = work / "caches" / f"fresh{counter[0]}"
        shutil.rmtree(cache, ignore_errors=True)
        dt = vgen(cache, config)[0]
        if config is None:
            for f in (cache / "vgen" / "tune").glob("*.json"):
                doc = json.loads(f.read_text())
                fresh_samples.append([{k: s.get(k) for k in ("batch", "leases", "intra_op", "step_s", "job_s", "observed")}
                                      for s in doc.get("samples", [])])
        return dt

    warm_cache = work / "caches" / "warm"
    fill_s = vgen(warm_cache, whole_probe)[0]  # untimed in the table: fills the warm cache (whole search)
    tuned_files = list((warm_cache / "vgen" / "tune").glob("*.json"))
    tuned = json.loads(tuned_files[0].read_text()) if tuned_files else {}

    def diffusers() -> float:
        dt, _ = run([VENV_PY, PY / "diffusers_loop.py", "--diffusers", model / "diffusers", "--prompts", prompts,
                     "--out", work / "diffusers", *job], env)
        return dt

    cases = {"fresh cache": lambda: fresh(), "warm cache": lambda: vgen(warm_cache)[0],
             "probe first": lambda: fresh(whole_probe), "diffusers loop": diffusers}
    if args.no_probe_first:
        del cases["probe first"]
    if args.no_diffusers:
        del cases["diffusers loop"]
    load_before = machine()
    walls: dict[str, list[float]] = {k: [] for k in cases}
    names = list(cases)
    for r in range(args.rounds):
        order = names[r % len(names):] + names[: r % len(names)]
        for name in order:
            walls[name].append(cases[name]())
            print(f"round {r} {name:>15}: {walls[name][-1]:.2f} s", file=sys.stderr)
    load_after = machine()
    med = {k: statistics.median(v) for k, v in walls.items()}
    fresh_over_warm = med["fresh cache"] / med["warm cache"]
    fresh_over_diffusers = med["fresh cache"] / med["diffusers loop"] if "diffusers loop" in med else float("nan")
    choice = tuned.get("choice", {})
    lines = [f"first vgen batch on a fresh tune cache vs a warm one: model {args.model}, {n} prompts of "
             f"{preset['width']}x{preset['height']}, {preset['frames']} frames, {preset['steps']} steps, guidance {GUIDANCE}; "
             f"wall of the whole command, median of {args.rounds} interleaved rounds; {datetime.datetime.utcnow():%Y-%m-%d %H:%M} UTC",
             f"machine: {load_before['nproc']} cores, {load_before['cpu_model']}; load average (1/5/15 min) before "
             f"{load_before['loadavg_1m']}/{load_before['loadavg_5m']}/{load_before['loadavg_15m']}, after "
             f"{load_after['loadavg_1m']}/{load_after['loadavg_5m']}/{load_after['loadavg_15m']} (shared with other builds)",
             "", f"{'case':<16} {'median s':>9}   runs"]
    for name in names:
        lines.append(f"{name:<16} {med[name]:>9.2f}   " + " ".join(f"{w:.2f}" for w in walls[name]))
    lines += ["", f"warm cache's choice: batch {choice.get('batch')}, {choice.get('leases')} lease(s) x {choice.get('intra_op')} "
              f"thread(s); its whole probe {tuned.get('probe_s', 0):.1f} s over {len(tuned.get('samples', []))} settings "
              f"(the filling run: {fill_s:.2f} s)",
              f"fresh / warm: {fresh_over_warm:.3f} -> {'within' if fresh_over_warm <= 1.15 else 'NOT within'} 15 %",
              (f"fresh / diffusers loop: {fresh_over_diffusers:.3f} -> {'not slower' if fresh_over_diffusers <= 1.0 else 'SLOWER'}"
               if "diffusers loop" in med else "fresh / diffusers loop: not run (--no-diffusers)")]
    text = "\n".join(lines) + "\n"
    print(text)
    res = ROOT / "bench" / "results"
    date = datetime.date.today().isoformat()
    (res / f"first_batch_{args.model}_{date}.txt").write_text(text)
    (res / f"first_batch_{args.model}_{date}.json").write_text(json.dumps(
        {"model": args.model, "jobs": n, "preset": preset, "rounds": args.rounds, "walls": walls, "medians": med,
         "fresh_over_warm": fresh_over_warm, "fresh_samples": fresh_samples, "fresh_over_diffusers": fresh_over_diffusers, "tuned": tuned,
         "machine_before": load_before, "machine_after": load_after, "time": time.time()}, indent=1) + "\n")


if __name__ == "__main__":
    main()
