#!/usr/bin/env python3
"""Post-stages: the time `vgen render` spends in the interpolate and upscale stages per output
frame, and their share of the whole job (the stage times the result JSON reports), on the
bundled demo model (models/vgen-shapes, 256x256, 16 frames) by default.

    python3 bench/post.py [--model DIR] [--size 256x256] [--frames 16] [--steps 8] [--runs N]
                          [--upscale-model POST_PACKAGE]

Variants: libavfilter (minterpolate, lanczos) and, with --upscale-model, the exported RRDBNet
(`python -m vgen_export.post`). Writes bench/out/post.json.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from common import BIN, OUT, ROOT, RUNS, machine, mmm, run_json, stats, table, write


def render(model: Path, out: Path, w: int, h: int, frames: int, steps: int, extra: list[str]) -> dict:
    return run_json([BIN / "vgen", "render", "a red circle moving left", "-o", out, "--model", model, "--json",
                     "--width", w, "--height", h, "--frames", frames, "--steps", steps, "--seed", 1, *extra])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", type=Path, default=ROOT / "models" / "vgen-shapes")
    ap.add_argument("--size", default="256x256")
    ap.add_argument("--frames", type=int, default=16)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--runs", type=int, default=RUNS)
    ap.add_argument("--upscale-model", type=Path)
    args = ap.parse_args()
    w, h = map(int, args.size.split("x"))
    cases = [("none", []), ("interpolate 2", ["--interpolate", "2"]), ("upscale 2 (lanczos)", ["--upscale", "2"]),
             ("interpolate 2 + upscale 2", ["--interpolate", "2", "--upscale", "2"])]
    tmp = Path(tempfile.mkdtemp(prefix="vgen-bench-post-"))
    if args.upscale_model:
        cfg = tmp / "config.json"
        cfg.write_text(json.dumps({"post": {"upscale_model": str(args.upscale_model)}}))
        cases.append(("upscale 2 (realesrgan)", ["--upscale", "2", "--config", str(cfg)]))
    rows, results = [], {}
    for name, extra in cases:
        per_frame, share, total = [], [], []
        out_frames = 0
        for i in range(args.runs):
            r = render(args.model, tmp / f"{len(results)}-{i}.mp4", w, h, args.frames, args.steps, extra)
            s = r["stage_seconds"]
            post = s.get("interpolate", 0.0) + s.get("upscale", 0.0)
            job = sum(s.values())
            out_frames = (args.frames - 1) * (2 if "--interpolate" in extra else 1) + 1
            per_frame.append(1000.0 * post / out_frames)
            share.append(100.0 * post / job)
            total.append(job)
        results[name] = {"post_ms_per_output_frame": stats(per_frame), "post_share_percent": stats(share),
                         "job_seconds": stats(total), "output_frames": out_frames}
        rows.append([name, out_frames, mmm(stats(per_frame)), mmm(stats(share)), mmm(stats(total))])
    print(table(["post", "frames out", "post ms / output frame", "post share of job %", "job s (stage sum)"], rows))
    write("post", {"machine": machine(), "model": str(args.model), "size": [w, h], "frames": args.frames,
                   "steps": args.steps, "runs": args.runs, "results": results})


if __name__ == "__main__":
    main()
