#!/usr/bin/env python3
"""End to end: `vgen batch` over a prompt list against diffusers' WanPipeline in a Python loop
over the same prompts (same size, frames, steps, guidance, negative prompt, per-prompt seeds),
each clip written as MP4 by the ffmpeg CLI with vgen's x264 settings. Both load the same
weights (bench/python/models.py writes the diffusers directory and exports the vgen package
from it). Outputs are compared: every MP4 decoded, max abs diff of the RGB against diffusers'.

    python3 bench/e2e.py --model tiny|medium [--prompts N] [--batches 1,4,8] [--runs R]
                         [--omp-threads T]

Throughput = prompts / wall time of the whole command (process start, imports or package
load, every job, every MP4), and "loop" = prompts / time in the job loop only (diffusers:
after from_pretrained; vgen: batch summary seconds, which still include the lazy TorchScript
module loads). Targets: tiny >= 2x diffusers, medium >= 1.3x (best vgen row, process wall).
--omp-threads sets OMP_NUM_THREADS (torch intra-op threads) for BOTH sides; default: unset.
--as-user runs it as a new user would (issue 24): OMP_NUM_THREADS/MKL_NUM_THREADS removed from
both sides' environment and one vgen row with no batching flags ("vgen batch (defaults)");
target >= 2x on every model. The large preset is the >= 20M-parameter, 8-layer transformer.

Writes bench/out/e2e_<model>.json.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from common import BIN, OUT, RUNS, ROOT, VENV_PY, machine, mmm, stats, table, write

PY = Path(__file__).resolve().parent / "python"
PRESETS = {  # size, frames, steps per model; guidance 5 and the tiny negative prompt for both
    "tiny": {"width": 64, "height": 64, "frames": 9, "steps": 10, "prompts": 16, "target": 2.0},
    "medium": {"width": 128, "height": 128, "frames": 9, "steps": 8, "prompts": 6, "target": 1.3},
    "large": {"width": 128, "height": 128, "frames": 9, "steps": 8, "prompts": 4, "target": 2.0},
}
AS_USER_TARGET = 2.0  # issue 24: vgen with default flags >= 2x the diffusers loop on every model
NEGATIVE = "low quality, blurry"
GUIDANCE = 5.0
SUBJECTS = ["a red circle moving left on a black background", "a blue square bouncing on a white background",
            "a green triangle spinning on a blue sky", "a yellow star falling on a green field",
            "a white cat jumping on a city street", "a black dog floating on a sandy beach",
            "an orange ball growing in a dark room", "a purple cube shrinking on a snowy mountain"]


def ensure_model(preset: str) -> Path:
    d = OUT / "models" / preset
    subprocess.run([str(VENV_PY), str(PY / "models.py"), "--preset", preset, "--out", str(d)], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return d


def write_prompts(path: Path, n: int) -> None:
    lines = [json.dumps({"prompt": f"{SUBJECTS[i % len(SUBJECTS)]}, take {i}", "seed": 1000 + i,
                         "name": f"clip-{i:03d}"}) for i in range(n)]
    path.write_text("\n".join(lines) + "\n")


def decode(path: Path):
    import numpy as np
    raw = subprocess.run(["ffmpeg", "-loglevel", "error", "-i", str(path), "-f", "rawvideo", "-pix_fmt", "rgb24", "-"],
                         capture_output=True, check=True).stdout
    return np.frombuffer(raw, np.uint8).astype(np.int16)


def png_frames(d: Path):
    import numpy as np
    from PIL import Image
    return np.stack([np.asarray(Image.open(f).convert("RGB")) for f in sorted(d.glob("frame_*.png"))]).astype(np.int16)


def diff_stats(pairs) -> dict[str, float]:
    worst, total, n = 0, 0.0, 0
    for a, b in pairs:
        if a.shape != b.shape:
            return {"max": -1, "mean": -1.0}
        d = abs(a - b)
        worst, total, n = max(worst, int(d.max())), total + float(d.sum()), n + d.size
    return {"max": worst, "mean": total / max(n, 1)}


def compare(ref_dir: Path, mp4_dirs: dict[str, Path], png_dirs: dict[str, Path], names: list[str]) -> dict:
    """Pre-encode frames (vgen --format png against diffusers' uint8 frames) and decoded MP4s."""
    import numpy as np
    out = {}
    for label, d in mp4_dirs.items():
        mp4 = diff_stats((decode(ref_dir / f"{x}.mp4"), decode(d / f"{x}.mp4")) for x in names)
        pre = diff_stats((np.load(ref_dir / f"{x}.npy").astype(np.int16), png_frames(png_dirs[label] / x)) for x in names)
        out[label] = {"decoded_max_abs_diff": mp4["max"], "decoded_mean_abs_diff": mp4["mean"],
                      "frames_max_abs_diff": pre["max"], "frames_mean_abs_diff": pre["mean"]}
    return out


def label_of(max_batch: int) -> str:
    return f"vgen batch --max-batch {max_batch}" if max_batch else "vgen batch (defaults)"


def run(cmd: list, env: dict) -> tuple[float, str]:
    t0 = time.perf_counter()
    p = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, env=env)
    dt = time.perf_counter() - t0
    if p.returncode != 0:
        raise RuntimeError(f"{cmd[0]} failed ({p.returncode}):\n{p.stderr[-3000:]}")
    return dt, p.stdout


def main() -> None:
    import os

    ap = argparse.ArgumentParser()
    ap.add_argument("--model", choices=sorted(PRESETS), default="tiny")
    ap.add_argument("--prompts", type=int)
    ap.add_argument("--batches", default=None, help="vgen --max-batch values (default tiny 1,4,8; medium 1,4)")
    ap.add_argument("--runs", type=int, default=RUNS)
    ap.add_argument("--omp-threads", type=int)
    ap.add_argument("--as-user", action="store_true", help="default threads on both sides, vgen without batching flags")
    ap.add_argument("--profile", action="store_true", help="torch.profiler over diffusers' first job (last run)")
    a = ap.parse_args()
    p = PRESETS[a.model]
    n = a.prompts or p["prompts"]
    batches = [int(b) for b in (a.batches or ("1,4,8" if a.model == "tiny" else "1,4")).split(",")]
    env = dict(os.environ)
    if a.as_user:
        if a.omp_threads or a.batches:
            ap.error("--as-user runs defaults: no --omp-threads or --batches with it")
        for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            env.pop(k, None)
        batches = [0]  # 0: no --max-batch flag
    if a.omp_threads:
        env["OMP_NUM_THREADS"] = str(a.omp_threads)
    model = ensure_model(a.model)
    tag = f"e2e_{a.model}" + ("_as_user" if a.as_user else "")
    work = OUT / tag
    work.mkdir(parents=True, exist_ok=True)
    prompts = work / "prompts.jsonl"
    write_prompts(prompts, n)
    job = ["--width", p["width"], "--height", p["height"], "--frames", p["frames"], "--steps", p["steps"],
           "--guidance", GUIDANCE, "--negative-prompt", NEGATIVE]
    m = machine(with_torch=True)
    m["OMP_NUM_THREADS"] = env.get("OMP_NUM_THREADS", "unset")
    impls: dict[str, list] = {"diffusers loop + ffmpeg CLI": [VENV_PY, PY / "diffusers_loop.py", "--diffusers",
                                                               model / "diffusers", "--prompts", prompts, "--out",
                                                               work / "diffusers", *job]}
    for b in batches:
        impls[label_of(b)] = [BIN / "vgen", "batch", prompts, "--out", work / f"vgen_mb{b}", "--model", model / "pkg",
                              *job, "--force", "--json", *(["--max-batch", b] if b else [])]
    runs: dict[str, list] = {k: [] for k in impls}
    for r in range(a.runs):  # interleaved, so drifting machine load hits every row alike
        for name, cmd in impls.items():
            if a.profile and r == a.runs - 1 and name.startswith("diffusers"):
                cmd = [*cmd, "--profile", work / "diffusers_profile.txt"]
            wall, stdout = run(cmd, env)
            o = json.loads(stdout.strip().splitlines()[-1])
            loop = o["loop_seconds"] if "loop_seconds" in o else o["seconds"]
            failed = 0 if "loop_seconds" in o else o["total"] - o["counts"].get("done", 0)
            runs[name].append({"wall_seconds": wall, "loop_seconds": loop, "failed": failed, "detail": o})
            print(f"run {r + 1}/{a.runs} {name}: {wall:.2f} s wall, {loop:.2f} s loop", file=sys.stderr)
    names = [f"clip-{i:03d}" for i in range(n)]
    png_dirs = {}
    for b in batches:  # untimed: the same jobs as PNG frames, to compare pre-encode pixels
        label = label_of(b)
        png_dirs[label] = work / f"vgen_png_mb{b}"
        run([*impls[label][:4], png_dirs[label], *impls[label][5:], "--format", "png"], env)
    diffs = compare(work / "diffusers", {label_of(b): work / f"vgen_mb{b}" for b in batches}, png_dirs, names)
    base = stats(n / x["wall_seconds"] for x in runs["diffusers loop + ffmpeg CLI"])["median"]
    base_loop = stats(n / x["loop_seconds"] for x in runs["diffusers loop + ffmpeg CLI"])["median"]
    summary, rows = {}, []
    for name, rs in runs.items():
        tw, tl = stats(n / x["wall_seconds"] for x in rs), stats(n / x["loop_seconds"] for x in rs)
        d = diffs.get(name, {})
        summary[name] = {"prompts_per_s": tw, "loop_prompts_per_s": tl, "speedup": tw["median"] / base,
                         "loop_speedup": tl["median"] / base_loop, **d,
                         "failed_jobs": sum(x["failed"] for x in rs)}
        rows.append([name, mmm(tw), f"{tw['median'] / base:.2f}x", mmm(tl), f"{tl['median'] / base_loop:.2f}x",
                     "reference" if name.startswith("diffusers") else
                     f"{d['frames_max_abs_diff']} (mean {d['frames_mean_abs_diff']:.4f})",
                     "reference" if name.startswith("diffusers") else
                     f"{d['decoded_max_abs_diff']} (mean {d['decoded_mean_abs_diff']:.3f})"])
    best = max(v["speedup"] for k, v in summary.items() if k.startswith("vgen"))
    target = AS_USER_TARGET if a.as_user else p["target"]
    print(f"\nend to end, {a.model} random Wan: {n} prompts, {p['width']}x{p['height']}, {p['frames']} frames, "
          f"{p['steps']} steps, guidance {GUIDANCE}; {a.runs} runs, median (min-max); nproc {m['nproc']}, "
          f"{m['cpu_model']}, OMP_NUM_THREADS {m['OMP_NUM_THREADS']}, load {m['loadavg_1m']}")
    print(table(["command", "prompts/s (whole command)", "speedup", "prompts/s (job loop)", "loop speedup",
                 "frames max|diff| vs diffusers (0-255)", "decoded MP4 max|diff|"], rows))
    print(f"best vgen / diffusers (whole command): {best:.2f}x (target >= {target}x: "
          f"{'met' if best >= target else 'MISSED'})")
    write(tag, {"machine": m, "params": {**vars(a), **p, "prompts": n, "guidance": GUIDANCE,
                                                       "negative_prompt": NEGATIVE, "batches": batches},
                             "summary": summary, "best_speedup": best, "target": target,
                             "met": best >= target, "runs": runs})


if __name__ == "__main__":
    main()
