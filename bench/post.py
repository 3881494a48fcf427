#!/usr/bin/env python3
"""Post-stages: the time `vgen render` spends in the interpolate and upscale stages per output
frame, and their share of the whole job (the stage times the result JSON reports), on the
bundled demo model (models/vgen-shapes, 256x256, 16 frames) by default.

    python3 bench/post.py [--model DIR] [--size 256x256] [--frames 16] [--steps 8] [--runs N]
                          [--upscale-model POST_PACKAGE] [--interpolate-model POST_PACKAGE]
                          [--overlap-jobs N]

Variants: libavfilter (minterpolate, lanczos) and, with --upscale-model / --interpolate-model,
the exported RRDBNet / RIFE IFNet (`python -m vgen_export.post --realesrgan|--rife`); with both,
also the two models together. Writes bench/out/post.json.

The overlap case (issue 35, with --overlap-jobs N > 0): N jobs of distinct seeds through one
Runtime (`vgen batch --max-batch 1`: one job per denoiser call, so the next job's denoise runs
while the last one's interpolate + upscale run on the "post" pool), against the same N jobs
without post-stages. Reported: the batch's makespan and jobs/s for each, the no-overlap
estimate (the plain batch's makespan + N x one job's post-stage seconds alone, from the render
runs above), and how much of the post-stages' time the overlap hid: 1 - (makespan with post -
makespan without) / (N x the post-stage seconds of one job alone).
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from common import BIN, OUT, ROOT, RUNS, fmt, machine, mmm, run_json, stats, table, write


def render(model: Path, out: Path, w: int, h: int, frames: int, steps: int, extra: list[str]) -> dict:
    return run_json([BIN / "vgen", "render", "a red circle moving left", "-o", out, "--model", model, "--json",
                     "--width", w, "--height", h, "--frames", frames, "--steps", steps, "--seed", 1, *extra])


def batch(model: Path, out: Path, jobs: list[dict]) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    prompts = out / "jobs.jsonl"
    prompts.write_text("".join(json.dumps(j) + "\n" for j in jobs))
    return run_json([BIN / "vgen", "batch", prompts, "-o", out, "--model", model, "--max-batch", 1, "--json"])


def overlap_case(args, w: int, h: int, tmp: Path, alone: dict) -> tuple[dict, list]:
    """Makespan of N post jobs in one Runtime against N plain ones (see the module's doc)."""
    post = {"interpolate": 2, "upscale": 2}
    rows, out = [], {}
    for name, extra in [("none", {}), ("interpolate 2 + upscale 2", post)]:
        makespans = []
        for i in range(args.runs):
            jobs = [{"prompt": "a red circle moving left", "name": f"j{k}", "width": w, "height": h,
                     "frames": args.frames, "steps": args.steps, "seed": 100 * i + k + 1, **extra}
                    for k in range(args.overlap_jobs)]
            summary = batch(args.model, tmp / f"overlap-{len(out)}-{i}", jobs)
            assert summary.get("done", args.overlap_jobs) == args.overlap_jobs, summary
            makespans.append(summary["seconds"])
        out[name] = {"makespan_seconds": stats(makespans),
                     "jobs_per_second": stats([args.overlap_jobs / m for m in makespans])}
    n = args.overlap_jobs
    job_alone = alone["job_seconds"]["median"]
    post_alone = alone["post_ms_per_output_frame"]["median"] * alone["output_frames"] / 1000.0
    with_post, without = out["interpolate 2 + upscale 2"]["makespan_seconds"]["median"], out["none"]["makespan_seconds"]["median"]
    # No overlap at all: the plain jobs' makespan plus every job's post-stages one after another
    # (N x job_alone would also count each render's cold start, which the batch pays once).
    out["no_overlap_estimate_seconds"] = without + n * post_alone
    out["job_alone_seconds"] = job_alone
    out["post_seconds_alone_per_job"] = post_alone
    out["post_hidden_fraction"] = 1.0 - (with_post - without) / (n * post_alone) if post_alone > 0 else None
    for name in ("none", "interpolate 2 + upscale 2"):
        r = out[name]
        rows.append([f"{n} jobs, {name}", mmm(r["makespan_seconds"]), mmm(r["jobs_per_second"])])
    serial = out["no_overlap_estimate_seconds"]
    rows.append([f"{n} jobs, post, no-overlap estimate", fmt(serial), fmt(n / serial)])
    return out, rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", type=Path, default=ROOT / "models" / "vgen-shapes")
    ap.add_argument("--size", default="256x256")
    ap.add_argument("--frames", type=int, default=16)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--runs", type=int, default=RUNS)
    ap.add_argument("--upscale-model", type=Path)
    ap.add_argument("--interpolate-model", type=Path, help="a RIFE post package (python -m vgen_export.post --rife)")
    ap.add_argument("--overlap-jobs", type=int, default=4, help="the overlap case's jobs (0: skip it)")
    ap.add_argument("--only-overlap", action="store_true", help="of the per-frame cases only the overlap's baseline (interpolate 2 + upscale 2)")
    args = ap.parse_args()
    w, h = map(int, args.size.split("x"))
    cases = [("none", []), ("interpolate 2", ["--interpolate", "2"]), ("upscale 2 (lanczos)", ["--upscale", "2"]),
             ("interpolate 2 + upscale 2", ["--interpolate", "2", "--upscale", "2"])]
    tmp = Path(tempfile.mkdtemp(prefix="vgen-bench-post-"))
    if args.upscale_model:
        cfg = tmp / "config.json"
        cfg.write_text(json.dumps({"post": {"upscale_model": str(args.upscale_model)}}))
        cases.append(("upscale 2 (realesrgan)", ["--upscale", "2", "--config", str(cfg)]))
    if args.interpolate_model:
        cfg = tmp / "config-rife.json"
        cfg.write_text(json.dumps({"post": {"interpolate_model": str(args.interpolate_model)}}))
        cases.append(("interpolate 2 (rife)", ["--interpolate", "2", "--config", str(cfg)]))
        cases.append(("interpolate 4 (rife)", ["--interpolate", "4", "--config", str(cfg)]))
    if args.interpolate_model and args.upscale_model:
        cfg = tmp / "config-both.json"
        cfg.write_text(json.dumps({"post": {"interpolate_model": str(args.interpolate_model), "upscale_model": str(args.upscale_model)}}))
        cases.append(("interpolate 2 (rife) + upscale 2 (realesrgan)", ["--interpolate", "2", "--upscale", "2", "--config", str(cfg)]))
    rows, results = [], {}
    for name, extra in cases:
        if args.only_overlap and name != "interpolate 2 + upscale 2":
            continue  # the overlap's baseline is this one case
        per_frame, share, total = [], [], []
        out_frames = 0
        for i in range(args.runs):
            r = render(args.model, tmp / f"{len(results)}-{i}.mp4", w, h, args.frames, args.steps, extra)
            s = r["stage_seconds"]
            post = s.get("interpolate", 0.0) + s.get("upscale", 0.0)
            job = sum(s.values())
            factor = int(extra[extra.index("--interpolate") + 1]) if "--interpolate" in extra else 1
            out_frames = (args.frames - 1) * factor + 1
            per_frame.append(1000.0 * post / out_frames)
            share.append(100.0 * post / job)
            total.append(job)
        results[name] = {"post_ms_per_output_frame": stats(per_frame), "post_share_percent": stats(share),
                         "job_seconds": stats(total), "output_frames": out_frames}
        rows.append([name, out_frames, mmm(stats(per_frame)), mmm(stats(share)), mmm(stats(total))])
    print(table(["post", "frames out", "post ms / output frame", "post share of job %", "job s (stage sum)"], rows))
    overlap = None
    if args.overlap_jobs > 0:
        overlap, orows = overlap_case(args, w, h, tmp, results["interpolate 2 + upscale 2"])
        print()
        print(table(["overlap", "makespan s", "jobs / s"], orows))
        hidden = overlap["post_hidden_fraction"]
        print(f"post-stage time hidden by the overlap: {'n/a' if hidden is None else f'{100 * hidden:.0f} %'}"
              f" (post alone {fmt(overlap['post_seconds_alone_per_job'])} s per job)")
    write("post", {"machine": machine(), "model": str(args.model), "size": [w, h], "frames": args.frames,
                   "steps": args.steps, "runs": args.runs, "results": results, "overlap": overlap})


if __name__ == "__main__":
    main()
