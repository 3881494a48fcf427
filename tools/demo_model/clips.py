"""Seeded synthetic clips for the vgen-shapes demo model.

Prompt language: ``a {color} {shape} moving {direction}`` optionally followed by
``on a {background} background`` (black when omitted; never the object's colour).
A clip is ``float32 [3, F, H, W]`` in [-1, 1]: one flat-coloured shape that crosses the frame
(from near one edge to near the other) over the clip, on a flat background.

Everything is a pure function of the seed (numpy ``default_rng``), so datasets are reproducible.
"""
from __future__ import annotations

from dataclasses import dataclass
from itertools import product

import numpy as np

COLORS = {
    "red": (255, 0, 0), "green": (0, 200, 0), "blue": (0, 0, 255), "yellow": (255, 255, 0),
    "cyan": (0, 255, 255), "magenta": (255, 0, 255), "white": (255, 255, 255), "orange": (255, 140, 0),
}
SHAPES = ("circle", "square", "triangle")
DIRECTIONS = ("left", "right", "up", "down")
BACKGROUNDS = {"black": (0, 0, 0), "white": (255, 255, 255), "gray": (128, 128, 128)}
COLOR_NAMES = tuple(COLORS)
BG_NAMES = tuple(BACKGROUNDS)

# Held-out attribute combinations: never seen in training, used by the evaluator by default.
# 12 of the 96 (colour, shape, direction) triples; every single attribute value stays in training.
HELD_OUT_TRIPLES = tuple(
    (c, s, d) for (ci, c), (si, s), (di, d) in product(enumerate(COLOR_NAMES), enumerate(SHAPES), enumerate(DIRECTIONS))
    if (ci + 2 * si + 3 * di) % 8 == 0
)
# (colour, background) pairs never seen in training (with any shape/direction).
HELD_OUT_COLOR_BG = (("red", "gray"), ("blue", "white"), ("yellow", "gray"), ("cyan", "white"))


@dataclass(frozen=True)
class Spec:
    color: str
    shape: str
    direction: str
    background: str = "black"
    say_background: bool = True  # False: prompt omits the suffix (only for black)

    @property
    def prompt(self) -> str:
        p = f"a {self.color} {self.shape} moving {self.direction}"
        if self.say_background or self.background != "black":
            p += f" on a {self.background} background"
        return p


def allowed_backgrounds(color: str) -> list[str]:
    return [b for b in BG_NAMES if BACKGROUNDS[b] != COLORS[color]]


def is_held_out(spec: Spec) -> bool:
    return (spec.color, spec.shape, spec.direction) in HELD_OUT_TRIPLES or \
        (spec.color, spec.background) in HELD_OUT_COLOR_BG


def parse_prompt(prompt: str) -> Spec:
    words = prompt.strip().split()
    if len(words) < 5 or words[0] != "a" or words[3] != "moving":
        raise ValueError(f"not in the prompt language: {prompt!r}")
    bg, say = "black", False
    if len(words) > 5:
        if words[5:7] != ["on", "a"] or len(words) != 9 or words[8] != "background":
            raise ValueError(f"not in the prompt language: {prompt!r}")
        bg, say = words[7], True
    return Spec(words[1], words[2], words[4], bg, say)


def random_spec(rng: np.random.Generator, held_out: bool | None = False) -> Spec:
    """A random spec; ``held_out=False`` only training combinations, ``True`` only held-out, None any."""
    while True:
        c = COLOR_NAMES[rng.integers(len(COLOR_NAMES))]
        s = SHAPES[rng.integers(len(SHAPES))]
        d = DIRECTIONS[rng.integers(len(DIRECTIONS))]
        bgs = allowed_backgrounds(c)
        b = bgs[rng.integers(len(bgs))]
        spec = Spec(c, s, d, b, bool(b != "black" or rng.random() < 0.5))
        if held_out is None or is_held_out(spec) == held_out:
            return spec


def held_out_specs() -> list[Spec]:
    """The evaluation set: every held-out triple (background cycling over the allowed ones),
    plus every held-out (colour, background) pair with a training shape/direction."""
    specs = []
    for i, (c, s, d) in enumerate(HELD_OUT_TRIPLES):
        bgs = allowed_backgrounds(c)
        specs.append(Spec(c, s, d, bgs[i % len(bgs)], True))
    for i, (c, b) in enumerate(HELD_OUT_COLOR_BG):
        s, d = SHAPES[i % 3], DIRECTIONS[(i + 1) % 4]
        specs.append(Spec(c, s, d, b, True))
    return specs


def _shape_mask(shape: str, yy: np.ndarray, xx: np.ndarray, cy: float, cx: float, r: float) -> np.ndarray:
    dy, dx = yy - cy, xx - cx
    if shape == "circle":
        return dy * dy + dx * dx <= r * r
    if shape == "square":
        h = r * 0.9
        return (np.abs(dy) <= h) & (np.abs(dx) <= h)
    if shape == "triangle":  # upright isosceles: apex at top, base at bottom
        top, bottom = -r * 1.05, r * 0.95
        half = (dy - top) / (bottom - top) * r * 1.05
        return (dy >= top) & (dy <= bottom) & (np.abs(dx) <= half)
    raise ValueError(shape)


def render_clip(spec: Spec, rng: np.random.Generator, frames: int = 16, size: int = 32,
                supersample: int = 2) -> np.ndarray:
    """``float32 [3, frames, size, size]`` in [-1, 1]. Random size, lateral offset and start/end."""
    s = size * supersample
    r = rng.uniform(0.15, 0.19) * size
    margin = r + 1.0
    # Lateral offset within +-5 % of the centre line: with a wide range (the whole frame, then
    # 40 %) the 2-core training budget did not suffice to learn where to put the object.
    lateral = rng.uniform(0.45 * size, 0.55 * size)
    start = rng.uniform(margin, margin + 0.08 * size)
    end = rng.uniform(size - margin - 0.08 * size, size - margin)
    if spec.direction in ("left", "up"):
        start, end = size - start, size - end
    along = np.linspace(start, end, frames)
    coords = (np.arange(s) + 0.5) / supersample
    yy, xx = np.meshgrid(coords, coords, indexing="ij")
    fg = np.array(COLORS[spec.color], np.float32) / 127.5 - 1.0
    bg = np.array(BACKGROUNDS[spec.background], np.float32) / 127.5 - 1.0
    out = np.empty((3, frames, size, size), np.float32)
    for f in range(frames):
        if spec.direction in ("left", "right"):
            cy, cx = lateral, along[f]
        else:
            cy, cx = along[f], lateral
        m = _shape_mask(spec.shape, yy, xx, cy, cx, r).astype(np.float32)
        m = m.reshape(size, supersample, size, supersample).mean(axis=(1, 3))
        out[:, f] = bg[:, None, None] + (fg - bg)[:, None, None] * m[None]
    return out


def make_batch(rng: np.random.Generator, batch: int, frames: int = 16, size: int = 32,
               held_out: bool | None = False) -> tuple[np.ndarray, list[Spec]]:
    specs = [random_spec(rng, held_out) for _ in range(batch)]
    return np.stack([render_clip(sp, rng, frames, size) for sp in specs]), specs


def corpus(seed: int = 0, n: int = 4000) -> list[str]:
    """Prompts covering the whole language (for training the SentencePiece model)."""
    rng = np.random.default_rng(seed)
    return [random_spec(rng, None).prompt for _ in range(n)]


if __name__ == "__main__":
    import argparse
    import subprocess

    ap = argparse.ArgumentParser(description="write one ground-truth clip as mp4 (ffmpeg)")
    ap.add_argument("prompt")
    ap.add_argument("-o", "--out", required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--scale", type=int, default=8)
    a = ap.parse_args()
    clip = render_clip(parse_prompt(a.prompt), np.random.default_rng(a.seed))
    rgb = ((clip.transpose(1, 2, 3, 0) + 1) * 127.5).round().clip(0, 255).astype(np.uint8)
    rgb = rgb.repeat(a.scale, 1).repeat(a.scale, 2)
    f, h, w, _ = rgb.shape
    subprocess.run(["ffmpeg", "-y", "-loglevel", "error", "-f", "rawvideo", "-pix_fmt", "rgb24", "-s", f"{w}x{h}",
                    "-r", "8", "-i", "-", "-pix_fmt", "yuv420p", a.out], input=rgb.tobytes(), check=True)
