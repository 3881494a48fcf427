#!/usr/bin/env python3
"""Encode: vgen's encode stage (stages/encode.hpp encode_to_file, via bench_encode) against the
ffmpeg CLI encoding the identical raw RGB24 frames with the same settings (libx264 veryfast,
crf 23, yuv420p via BT.709 limited range with bilinear+accurate_rnd swscale, GOP 2 s, one
encoder thread, +faststart). Frames/s per encode; target: vgen >= 0.95x the CLI.
The outputs are decoded and compared (max abs diff of the decoded RGB).

    python3 bench/encode.py [--sizes 256x256x81,832x480x81] [--runs N]

Writes bench/out/encode.json.
"""

from __future__ import annotations

import argparse
import subprocess
from pathlib import Path

from common import BIN, OUT, RUNS, machine, mmm, run_json, stats, table, timed, write


def ffmpeg_cmd(raw: Path, w: int, h: int, fps: int, out: Path) -> list:
    return ["ffmpeg", "-hide_banner", "-loglevel", "error", "-y", "-f", "rawvideo", "-pix_fmt", "rgb24",
            "-s", f"{w}x{h}", "-r", str(fps), "-i", raw, "-filter_threads", "1",
            "-vf", "scale=out_color_matrix=bt709:out_range=tv:flags=bilinear+accurate_rnd",
            "-pix_fmt", "yuv420p", "-c:v", "libx264", "-preset", "veryfast", "-crf", "23", "-g", str(2 * fps),
            "-threads", "1", "-color_primaries", "bt709", "-color_trc", "bt709", "-colorspace", "bt709",
            "-color_range", "tv", "-movflags", "+faststart", out]


def decode(path: Path) -> bytes:
    return subprocess.run(["ffmpeg", "-loglevel", "error", "-i", str(path), "-f", "rawvideo", "-pix_fmt", "rgb24", "-"],
                          capture_output=True, check=True).stdout


def max_abs_diff(a: bytes, b: bytes) -> int:
    if len(a) != len(b):
        return -1
    try:
        import numpy as np
        return int(np.abs(np.frombuffer(a, np.uint8).astype(np.int16) - np.frombuffer(b, np.uint8)).max())
    except ImportError:
        return max((abs(x - y) for x, y in zip(a, b)), default=0)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="256x256x81,832x480x81")
    ap.add_argument("--fps", type=int, default=16)
    ap.add_argument("--runs", type=int, default=RUNS)
    a = ap.parse_args()
    work = OUT / "encode"
    work.mkdir(parents=True, exist_ok=True)
    m = machine()
    results, rows = [], []
    for size in a.sizes.split(","):
        w, h, n = (int(x) for x in size.split("x"))
        raw = work / f"frames_{w}x{h}x{n}.rgb"
        vgen_secs, cli_secs = [], []
        cli_out = work / f"ffmpeg_{w}x{h}.mp4"
        for r in range(a.runs):  # one encode per call, interleaved with the CLI
            v = run_json([BIN / "bench_encode", "--width", w, "--height", h, "--frames", n, "--fps", a.fps,
                          "--runs", 1, "--out", work, "--raw", raw])
            vgen_secs += v["seconds"]
            cli_secs.append(timed(ffmpeg_cmd(raw, w, h, a.fps, cli_out)))
        diff = max_abs_diff(decode(Path(v["file"])), decode(cli_out))
        vs, cs = stats(n / s for s in vgen_secs), stats(n / s for s in cli_secs)
        ratio = vs["median"] / cs["median"]
        results.append({"size": size, "frames": n, "vgen_fps": vs, "ffmpeg_cli_fps": cs, "ratio": ratio,
                        "vgen_seconds": vgen_secs, "ffmpeg_cli_seconds": cli_secs,
                        "vgen_bytes": Path(v["file"]).stat().st_size, "ffmpeg_cli_bytes": cli_out.stat().st_size,
                        "decoded_max_abs_diff": diff, "met": ratio >= 0.95})
        rows.append([f"{w}x{h}, {n} frames", mmm(vs), mmm(cs), f"{ratio:.2f}x", str(diff)])
    print(f"\nencode (libx264 veryfast crf 23 yuv420p, 1 thread); frames/s per encode; {a.runs} runs, "
          f"median (min-max); nproc {m['nproc']}, {m['cpu_model']}, load {m['loadavg_1m']}")
    print(table(["clip", "vgen encode_to_file fps", "ffmpeg CLI fps", "ratio", "decoded max|diff|"], rows))
    print("target >= 0.95x: " + ", ".join(f"{r['size']} {'met' if r['met'] else 'MISSED'}" for r in results))
    print("(the CLI time includes its process start and reading the raw file from the page cache)")
    write("encode", {"machine": m, "params": vars(a), "results": results})


if __name__ == "__main__":
    main()
