"""Evaluate the vgen-shapes package through the real C++ runtime.

Renders prompts with ``build/bin/vgen render ... --model PKG``, decodes each video with the ffmpeg
CLI (raw rgb24), detects background, object colour, shape and direction of motion, and reports
accuracy per attribute (table + JSON).

    python -m vgen_demo_model.evaluate --model models/vgen-shapes [--split held_out|train|all]
        [--seeds 2] [--n 0] [--json out.json] [--ground-truth]

``--ground-truth`` validates the detector on clips from clips.py instead (no rendering).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from . import clips

ROOT = Path(__file__).resolve().parents[2]  # the repository: default paths (models/, build/)
ATTRS = ("color", "shape", "direction", "background")


# ----------------------------------------------------------------------------- decoding
def decode_video(path: Path | str) -> np.ndarray:
    """uint8 ``[F, H, W, 3]`` via ffprobe (size) and ffmpeg (raw rgb24)."""
    probe = subprocess.run(["ffprobe", "-v", "error", "-select_streams", "v:0", "-show_entries",
                            "stream=width,height", "-of", "json", str(path)],
                           capture_output=True, text=True, check=True).stdout
    s = json.loads(probe)["streams"][0]
    w, h = int(s["width"]), int(s["height"])
    raw = subprocess.run(["ffmpeg", "-v", "error", "-i", str(path), "-f", "rawvideo", "-pix_fmt", "rgb24", "-"],
                         capture_output=True, check=True).stdout
    return np.frombuffer(raw, np.uint8).reshape(-1, h, w, 3)


def clip_to_uint8(clip: np.ndarray, scale: int = 8) -> np.ndarray:
    """clips.render_clip output ``[3,F,h,w]`` in [-1,1] -> uint8 ``[F,H,W,3]`` (nearest upsampling)."""
    rgb = ((clip.transpose(1, 2, 3, 0) + 1) * 127.5).round().clip(0, 255).astype(np.uint8)
    return rgb.repeat(scale, 1).repeat(scale, 2)


# ----------------------------------------------------------------------------- detection
def _nearest(rgb: np.ndarray, palette: dict[str, tuple[int, int, int]], exclude: str | None = None) -> str:
    names = [n for n in palette if n != exclude]
    d = [float(np.sum((rgb - np.array(palette[n], np.float32)) ** 2)) for n in names]
    return names[int(np.argmin(d))]


def _fill_ratio(mask: np.ndarray) -> float | None:
    """Object pixels / bounding-box area, with a robust box (rows/cols holding >= 2% of the peak)."""
    rows, cols = mask.sum(1), mask.sum(0)
    if rows.max() < 3:
        return None
    r = np.nonzero(rows >= max(1, 0.02 * rows.max()))[0]
    c = np.nonzero(cols >= max(1, 0.02 * cols.max()))[0]
    r0, r1, c0, c1 = r[0], r[-1], c[0], c[-1]
    h, w = mask.shape
    if r0 == 0 or c0 == 0 or r1 == h - 1 or c1 == w - 1:  # touches the border: box is cut
        return None
    box = mask[r0:r1 + 1, c0:c1 + 1]
    return float(box.mean())


def analyse(frames: np.ndarray) -> dict:
    """Detect the attributes of a uint8 ``[F, H, W, 3]`` video."""
    x = frames.astype(np.float32)
    f, h, w, _ = x.shape
    border = np.concatenate([x[:, 0], x[:, -1], x[:, :, 0], x[:, :, -1]], axis=1).reshape(-1, 3)
    bg_rgb = np.median(border, axis=0)
    background = _nearest(bg_rgb, clips.BACKGROUNDS)
    bg_ref = np.array(clips.BACKGROUNDS[background], np.float32)
    dist = np.sqrt(((x - bg_ref) ** 2).sum(-1))  # [F,H,W]
    peak = np.percentile(dist.reshape(f, -1), 99.7, axis=1)  # per-frame object contrast
    thr = np.maximum(0.5 * peak, 60.0)[:, None, None]
    mask = dist > thr
    counts = mask.reshape(f, -1).sum(1)
    valid = counts >= max(4, 0.002 * h * w)
    result = {"background": background, "color": None, "shape": None, "direction": None,
              "object_frames": int(valid.sum())}
    if valid.sum() < 2:
        return result
    obj = x[mask & valid[:, None, None]]
    # The most saturated half of the object pixels (edges blend with the background).
    core = obj[np.argsort(-np.sqrt(((obj - bg_ref) ** 2).sum(-1)))[: max(1, len(obj) // 2)]]
    result["color_rgb"] = [round(float(v), 1) for v in np.median(core, axis=0)]
    result["color"] = _nearest(np.median(core, axis=0), clips.COLORS)
    fills = [fr for i in np.nonzero(valid)[0] if (fr := _fill_ratio(mask[i])) is not None]
    if fills:
        fill = float(np.median(fills))
        result["fill"] = round(fill, 3)
        result["shape"] = "triangle" if fill < 0.64 else ("circle" if fill < 0.885 else "square")
    yy, xx = np.mgrid[0:h, 0:w]
    idx = np.nonzero(valid)[0]
    cy = np.array([(yy * mask[i]).sum() / mask[i].sum() for i in idx]) / h
    cx = np.array([(xx * mask[i]).sum() / mask[i].sum() for i in idx]) / w
    k = max(1, len(idx) // 4)
    dy, dx = cy[-k:].mean() - cy[:k].mean(), cx[-k:].mean() - cx[:k].mean()
    result["motion"] = [round(float(dx), 3), round(float(dy), 3)]  # fraction of the frame (x right, y down)
    if max(abs(dx), abs(dy)) >= 0.1:
        if abs(dx) >= abs(dy):
            result["direction"] = "right" if dx > 0 else "left"
        else:
            result["direction"] = "down" if dy > 0 else "up"
    return result


def score(spec: clips.Spec, detected: dict) -> dict[str, bool]:
    return {"color": detected["color"] == spec.color, "shape": detected["shape"] == spec.shape,
            "direction": detected["direction"] == spec.direction,
            "background": detected["background"] == spec.background}


# ----------------------------------------------------------------------------- rendering
def vgen_binary() -> Path:
    return Path(os.environ.get("VGEN_BUILD_DIR", ROOT / "build")) / "bin" / "vgen"


def render(prompt: str, out: Path, model: Path, seed: int, extra: list[str] | None = None) -> float:
    """Run ``vgen render``; returns the wall time in seconds."""
    cmd = [str(vgen_binary()), "render", prompt, "-o", str(out), "--model", str(model), "--seed", str(seed),
           *(extra or [])]
    t0 = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        raise RuntimeError(f"vgen render failed ({r.returncode}): {r.stderr.strip()}")
    return time.perf_counter() - t0


def render_python(prompt: str, model: Path, seed: int) -> np.ndarray:
    """The same algorithm in Python (tools/vgen_export/reference_loop.py), without the C++ binary."""
    import torch
    from vgen_export import reference_loop as ref

    torch.set_num_threads(1)
    frames = ref.run_reference(Path(model), prompt, seed=seed)["frames"][0]  # [F,3,H,W] in [0,1]
    return (frames.permute(0, 2, 3, 1) * 255).round().clamp(0, 255).to(torch.uint8).numpy()


def eval_specs(split: str, n: int, seed: int) -> list[clips.Spec]:
    if split == "held_out":
        specs = clips.held_out_specs()
    else:
        rng = np.random.default_rng(seed + 7)
        specs = [clips.random_spec(rng, None if split == "all" else False) for _ in range(max(n, 16))]
    return specs[:n] if n > 0 else specs


def summarise(rows: list[dict]) -> dict:
    acc = {a: float(np.mean([r["correct"][a] for r in rows])) for a in ATTRS}
    acc["all_attributes"] = float(np.mean([all(r["correct"].values()) for r in rows]))
    return {"n": len(rows), "accuracy": acc}


def table(summary: dict) -> str:
    lines = ["| attribute | accuracy |", "|---|---|"]
    for k, v in summary["accuracy"].items():
        lines.append(f"| {k} | {100 * v:.1f}% |")
    return "\n".join(lines) + f"\n\n(n = {summary['n']} videos)"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", type=Path, default=ROOT / "models" / "vgen-shapes")
    ap.add_argument("--split", choices=("held_out", "train", "all"), default="held_out")
    ap.add_argument("--n", type=int, default=0, help="number of prompts (0: whole held-out set / 16)")
    ap.add_argument("--seeds", type=int, default=2, help="seeds per prompt (0, 1, ...)")
    ap.add_argument("--seed-offset", type=int, default=0)
    ap.add_argument("--json", type=Path, default=None, help="write results here")
    ap.add_argument("--ground-truth", action="store_true", help="validate the detector on clips.py clips")
    ap.add_argument("--python-reference", action="store_true",
                    help="generate with the Python reference loop instead of vgen render (no video codec)")
    ap.add_argument("--extra", default="", help="extra vgen render arguments, e.g. '--steps 10'")
    ap.add_argument("--step-cache", type=float, default=None,
                    help="passed as vgen render --step-cache X (0: off); the package's suggestion is its manifest's defaults.step_cache")
    a = ap.parse_args(argv)
    specs = eval_specs(a.split, a.n, a.seed_offset)
    rows = []
    times = []
    with tempfile.TemporaryDirectory(prefix="vgen_eval_") as tmp:
        for spec in specs:
            for s in range(a.seed_offset, a.seed_offset + a.seeds):
                if a.ground_truth:
                    frames = clip_to_uint8(clips.render_clip(spec, np.random.default_rng(s)))
                elif a.python_reference:
                    frames = render_python(spec.prompt, a.model, s)
                else:
                    out = Path(tmp) / "clip.mp4"
                    extra = a.extra.split() + ([] if a.step_cache is None else ["--step-cache", str(a.step_cache)])
                    times.append(render(spec.prompt, out, a.model, s, extra))
                    frames = decode_video(out)
                det = analyse(frames)
                rows.append({"prompt": spec.prompt, "seed": s, "detected": det, "correct": score(spec, det)})
                if not all(rows[-1]["correct"].values()):
                    print(f"miss: {spec.prompt!r} seed {s}: {det}", file=sys.stderr)
    summary = summarise(rows)
    if times:
        summary["render_seconds"] = {"mean": float(np.mean(times)), "max": float(np.max(times))}
    summary.update(split=a.split, model=str(a.model), ground_truth=a.ground_truth, extra=a.extra, step_cache=a.step_cache,
                   generator="ground truth" if a.ground_truth else ("python reference loop" if a.python_reference else "vgen render"))
    print(table(summary))
    if times:
        print(f"vgen render: mean {summary['render_seconds']['mean']:.2f} s, max {summary['render_seconds']['max']:.2f} s")
    if a.json:
        a.json.write_text(json.dumps({"summary": summary, "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
