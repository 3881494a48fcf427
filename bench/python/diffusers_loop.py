#!/usr/bin/env python3
"""The Python baseline of the end-to-end bench (run with the tooling venv): diffusers'
``WanPipeline`` called in a plain loop over a JSONL prompt file (the same file `vgen batch`
reads), each clip then written as MP4 by piping its uint8 RGB frames to the ffmpeg CLI with
vgen's encoder settings (libx264 veryfast crf 23, yuv420p BT.709 limited range, GOP 2 s, one
encoder thread, +faststart).

    python bench/python/diffusers_loop.py --diffusers DIR --prompts FILE.jsonl --out DIR
        --width W --height H --frames F --steps S --guidance G --negative-prompt P [--fps 16]
        [--profile FILE]

Each line: {"prompt", "seed", "name"}. The uint8 frames are also saved as OUT/NAME.npy. Frames to uint8 as vgen does: round(x * 255) clamped.
Prints one JSON object: import/load/loop seconds and per job pipe/encode seconds. --profile
runs torch.profiler over the first job and writes its op table to FILE.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import time
from pathlib import Path

T_START = time.perf_counter()
import numpy as np  # noqa: E402
import torch  # noqa: E402
from diffusers import WanPipeline  # noqa: E402

T_IMPORTED = time.perf_counter()


def ffmpeg_encode(frames: np.ndarray, fps: float, out: Path) -> None:
    n, h, w, _ = frames.shape
    g = max(1, round(2 * fps))
    cmd = ["ffmpeg", "-hide_banner", "-loglevel", "error", "-y", "-f", "rawvideo", "-pix_fmt", "rgb24",
           "-s", f"{w}x{h}", "-r", f"{fps:g}", "-i", "-", "-filter_threads", "1",
           "-vf", "scale=out_color_matrix=bt709:out_range=tv:flags=bilinear+accurate_rnd",
           "-pix_fmt", "yuv420p", "-c:v", "libx264", "-preset", "veryfast", "-crf", "23", "-g", str(g),
           "-threads", "1", "-color_primaries", "bt709", "-color_trc", "bt709", "-colorspace", "bt709",
           "-color_range", "tv", "-movflags", "+faststart", str(out)]
    subprocess.run(cmd, input=np.ascontiguousarray(frames).tobytes(), check=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--diffusers", type=Path, required=True)
    ap.add_argument("--prompts", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--width", type=int, required=True)
    ap.add_argument("--height", type=int, required=True)
    ap.add_argument("--frames", type=int, required=True)
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--guidance", type=float, required=True)
    ap.add_argument("--negative-prompt", required=True)
    ap.add_argument("--fps", type=float, default=16.0)
    ap.add_argument("--profile", type=Path)
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    jobs = [json.loads(line) for line in a.prompts.read_text().splitlines() if line.strip()]

    t0 = time.perf_counter()
    pipe = WanPipeline.from_pretrained(a.diffusers, torch_dtype=torch.float32)
    pipe.set_progress_bar_config(disable=True)
    t_loaded = time.perf_counter()
    results = []
    for k, job in enumerate(jobs):
        t1 = time.perf_counter()
        kwargs = dict(prompt=job["prompt"], negative_prompt=a.negative_prompt, height=a.height, width=a.width,
                      num_frames=a.frames, num_inference_steps=a.steps, guidance_scale=a.guidance,
                      generator=torch.Generator().manual_seed(int(job["seed"])), output_type="np")
        if a.profile and k == 0:
            from torch.profiler import ProfilerActivity, profile

            with profile(activities=[ProfilerActivity.CPU]) as prof:
                video = pipe(**kwargs).frames[0]
            a.profile.write_text(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=25))
        else:
            video = pipe(**kwargs).frames[0]
        frames = np.clip(np.round(video * 255.0), 0, 255).astype(np.uint8)  # [F, H, W, 3]
        t2 = time.perf_counter()
        np.save(a.out / f"{job['name']}.npy", frames)  # pre-encode frames, for the comparison
        ffmpeg_encode(frames, a.fps, a.out / f"{job['name']}.mp4")
        t3 = time.perf_counter()
        results.append({"name": job["name"], "pipe_seconds": t2 - t1, "encode_seconds": t3 - t2})
    t_end = time.perf_counter()
    print(json.dumps({"import_seconds": T_IMPORTED - T_START, "load_seconds": t_loaded - t0,
                      "loop_seconds": t_end - t_loaded, "jobs": results,
                      "torch_threads": torch.get_num_threads(), "interop_threads": torch.get_num_interop_threads()}))


if __name__ == "__main__":
    main()
