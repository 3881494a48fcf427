#!/usr/bin/env python3
"""The auto-tuner's choice against a sweep of fixed settings, on the same run (issue 24).

    python3 bench/auto_tune.py --model tiny|large [--prompts N] [--rounds R]

Every round runs `vgen batch` over the same prompt file once per setting, in a rotating
order (interleaved, so that the machine's load changes hit every setting alike):
  - fixed: batching.max_batch in 1, 2, 4, 8 x threads (1 lease x all cores, or one lease per
    core x 1 thread), given as numbers in a config file (no probe);
  - auto: the built-in defaults ("auto" everywhere) with the tuner's cache in a folder of its
    own. Its first run (before the rounds) probes and is reported apart; the rounds read the
    cache, as every later start does.
Wall time of the whole command (process start to exit), median over the rounds. The report
says the auto run's choice and where it lands against the best fixed setting, the probe's
cost, the machine and its load (the machine is shared: the load is part of the result).
Writes bench/results/auto_tune_<model>_<date>.txt and .json. Models: bench/python/models.py.
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

from common import BIN, OUT, ROOT, machine
from e2e import PRESETS, ensure_model, run, write_prompts


def config_for(dir_: Path, name: str, cfg: dict) -> Path:
    p = dir_ / f"{name}.json"
    p.write_text(json.dumps(cfg))
    return p


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", choices=["tiny", "medium", "large"], default="tiny")
    ap.add_argument("--prompts", type=int, default=None, help="jobs per run (default: 16 tiny, 4 otherwise)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--budget", type=float, default=30.0, help="the tuner's probe budget, seconds")
    ap.add_argument("--batches", default="1,2,4,8", help="fixed max_batch values swept (at most --prompts)")
    args = ap.parse_args()
    preset = PRESETS[args.model]
    n = args.prompts or (16 if args.model == "tiny" else 4)
    cores = os.cpu_count() or 1
    pkg = ensure_model(args.model) / "pkg"
    work = OUT / f"auto_tune_{args.model}"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    prompts = work / "prompts.jsonl"
    write_prompts(prompts, n)
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    env["XDG_CACHE_HOME"] = str(work / "cache")  # the auto runs' own tuner cache

    settings: dict[str, Path] = {}
    splits = [(1, cores)] + ([(cores, 1)] if cores > 1 else [])
    for b in [int(x) for x in args.batches.split(",")]:
        if b > n:
            continue
        for leases, intra in splits:
            name = f"fixed b{b} {leases}x{intra}"
            settings[name] = config_for(work, name.replace(" ", "_"), {
                "batching": {"max_batch": b}, "threads": {"per_device": leases, "intra_op": intra}})
    settings["auto"] = config_for(work, "auto", {"tune": {"budget_s": args.budget}})  # everything else: defaults

    job_flags = ["--width", preset["width"], "--height", preset["height"], "--frames", preset["frames"],
                 "--steps", preset["steps"], "--guidance", 5.0, "--negative-prompt", "low quality, blurry"]

    def one(name: str, tag: str) -> float:
        out = work / "runs" / f"{name.replace(' ', '_')}_{tag}"
        shutil.rmtree(out, ignore_errors=True)
        dt, _ = run([BIN / "vgen", "batch", prompts, "--model", pkg, "--config", settings[name], "--output-dir", out,
                     *job_flags], env)
        shutil.rmtree(out, ignore_errors=True)
        return dt

    load_before = machine()
    first_auto = one("auto", "first")  # probes and fills the cache
    cache_files = list((work / "cache" / "vgen" / "tune").glob("*.json"))
    tuned = json.loads(cache_files[0].read_text()) if cache_files else {}
    walls: dict[str, list[float]] = {k: [] for k in settings}
    names = list(settings)
    for r in range(args.rounds):
        order = names[r % len(names):] + names[: r % len(names)]
        for name in order:
            walls[name].append(one(name, f"r{r}"))
            print(f"round {r} {name:>20}: {walls[name][-1]:.2f} s", file=sys.stderr)
    load_after = machine()

    med = {k: statistics.median(v) for k, v in walls.items()}
    fixed = {k: v for k, v in med.items() if k != "auto"}
    best_name = min(fixed, key=fixed.get)
    ratio = med["auto"] / fixed[best_name]
    date = datetime.date.today().isoformat()
    lines = [f"auto-tune vs fixed settings: model {args.model} ({pkg}), {n} jobs of {preset['width']}x{preset['height']}, "
             f"{preset['frames']} frames, {preset['steps']} steps, guidance 5; vgen batch wall (process), "
             f"median of {args.rounds} interleaved rounds",
             f"machine: {load_before['nproc']} cores, {load_before['cpu_model']}; load average (1/5/15 min) before "
             f"{load_before['loadavg_1m']}/{load_before['loadavg_5m']}/{load_before['loadavg_15m']}, after "
             f"{load_after['loadavg_1m']}/{load_after['loadavg_5m']}/{load_after['loadavg_15m']} (shared with other builds)",
             "", f"{'setting':<22} {'median s':>9} {'jobs/s':>7} {'vs best fixed':>13}   runs"]
    for name in sorted(med, key=med.get):
        lines.append(f"{name:<22} {med[name]:>9.2f} {n / med[name]:>7.2f} {med[name] / fixed[best_name]:>12.2f}x   "
                     + " ".join(f"{w:.2f}" for w in walls[name]))
    choice = tuned.get("choice", {})
    lines += ["", f"auto chose: batch {choice.get('batch')}, {choice.get('leases')} lease(s) x {choice.get('intra_op')} "
              f"thread(s); probe {tuned.get('probe_s', 0):.1f} s over {len(tuned.get('samples', []))} settings "
              f"(first auto run, probe included: {first_auto:.2f} s)",
              f"auto / best fixed ({best_name}): {ratio:.3f} -> {'within' if ratio <= 1.10 else 'NOT within'} 10 %"]
    text = "\n".join(lines) + "\n"
    print(text)
    res = ROOT / "bench" / "results"
    (res / f"auto_tune_{args.model}_{date}.txt").write_text(text)
    (res / f"auto_tune_{args.model}_{date}.json").write_text(json.dumps(
        {"model": args.model, "jobs": n, "preset": preset, "rounds": args.rounds, "walls": walls, "medians": med,
         "best_fixed": best_name, "auto_over_best": ratio, "first_auto_s": first_auto, "tuned": tuned,
         "machine_before": load_before, "machine_after": load_after, "time": time.time()}, indent=1) + "\n")


if __name__ == "__main__":
    main()
