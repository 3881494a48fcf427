#!/usr/bin/env python3
"""int8 on CPU (issue 24): one package per bench model carrying both denoiser variants
(`--quantize int8`: components.transformer float32 and components.transformer_int8, dynamic
int8 of the block Linears, exported from the same diffusers weights), then
  - speed: the denoiser call (the preset's shape, CFG batch of 2, one intra-op thread, after
    two warm-up calls) of transformer.pt and transformer_int8.pt timed interleaved, median of R;
  - quality: `vgen render --format png --precision float32|int8` of P prompts on that one
    package (same seeds), PSNR of every int8 frame against its float32 frame (8-bit RGB).

    python3 bench/int8.py --model tiny|medium|large|ltx [--runs R] [--prompts P]

tiny/medium/large are the Wan bench presets (bench/python/models.py; large is issue 24's >= 20M
parameter, 8-layer transformer); ltx is the tiny LTX-Video model (python -m vgen_export.ltx --tiny).
Writes bench/out/int8_<model>.json (with the load average before and after).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
from pathlib import Path

from common import BIN, OUT, VENV_PY, machine, write

PY = Path(__file__).resolve().parent / "python"
# width, height, frames, steps (the Wan ones as bench/e2e.py; LTX at its tiny package's defaults' size)
SHAPES = {"tiny": (64, 64, 9, 10), "medium": (128, 128, 9, 8), "large": (128, 128, 9, 8), "ltx": (64, 64, 9, 8)}

TIMER = r'''
import json, sys, time, torch
torch.set_num_threads(1)
pkg, shape, runs = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3])
man = json.load(open(pkg + "/manifest.json"))
mods = {k: torch.jit.load(pkg + "/" + man["components"][c]["file"]).eval()
        for k, c in (("float32", "transformer"), ("int8", "transformer_int8"))}
g = torch.Generator().manual_seed(0)
if man["family"] == "ltx-video":  # packed tokens, timestep, text, text mask, rope coordinates
    c, f, h, w = shape
    s, L, D = f * h * w, man["tokenizer"]["max_length"], man["transformer"]["caption_channels"]
    args = (torch.randn(2, s, c, generator=g), torch.full((2,), 500.0), torch.randn(2, L, D, generator=g),
            torch.ones(2, L), torch.rand(2, 3, s, generator=g) * 10)
    call = lambda m: m(*args)
else:  # forward_compact with a 12-row text context
    args = (torch.randn(2, *shape, generator=g), torch.full((2,), 500.0),
            torch.randn(2, 12, man["transformer"]["text_dim"], generator=g), torch.zeros(2, 12))
    call = lambda m: m.forward_compact(*args)
out = {k: [] for k in mods}
with torch.no_grad():
    for m in mods.values():
        for _ in range(2): call(m)
    for _ in range(runs):
        for k, m in mods.items():
            t0 = time.perf_counter(); call(m); out[k].append(time.perf_counter() - t0)
print(json.dumps(out))
'''


def run_quiet(cmd: list[str]) -> None:
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def ensure(preset: str) -> Path:
    """The package with both variants (exported once, then reused)."""
    d = OUT / "models" / preset
    pkg = d / "pkg_variants"
    if (pkg / "manifest.json").exists() and "precisions" in json.loads((pkg / "manifest.json").read_text()):
        return pkg
    if preset == "ltx":
        run_quiet([str(VENV_PY), "-m", "vgen_export.ltx", "--tiny", "--out", str(pkg), "--quantize", "int8"])
    else:
        run_quiet([str(VENV_PY), str(PY / "models.py"), "--preset", preset, "--out", str(d)])
        run_quiet([str(VENV_PY), "-m", "vgen_export.wan", "--diffusers", str(d / "diffusers"),
                   "--out", str(pkg), "--quantize", "int8"])
    return pkg


def frames(directory: Path):
    import numpy as np
    from PIL import Image
    return np.stack([np.asarray(Image.open(f), dtype=np.float64) for f in sorted(directory.glob("*.png"))])


def psnr(a, b) -> float:
    mse = float(((a - b) ** 2).mean())
    return math.inf if mse == 0 else 10 * math.log10(255.0 ** 2 / mse)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", choices=sorted(SHAPES), default="medium")
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--prompts", type=int, default=3)
    a = ap.parse_args()
    width, height, nframes, steps = SHAPES[a.model]
    pkg = ensure(a.model)
    before = os.getloadavg()
    man = json.loads((pkg / "manifest.json").read_text())
    lat = man["latent"]
    latent_shape = [lat["channels"], (nframes - 1) // lat["temporal_scale"] + 1, height // lat["spatial_scale"],
                    width // lat["spatial_scale"]]
    r = subprocess.run([str(VENV_PY), "-c", TIMER, str(pkg), json.dumps(latent_shape), str(a.runs)],
                       capture_output=True, text=True, check=True)
    times = json.loads(r.stdout.strip().splitlines()[-1])
    speed = {k: statistics.median(v) for k, v in times.items()}

    work = OUT / f"int8_{a.model}"
    work.mkdir(parents=True, exist_ok=True)
    quality = []
    for i in range(a.prompts):
        got = {}
        for precision in ("float32", "int8"):
            target = work / f"{precision}-{i}.png"
            subprocess.run(["rm", "-rf", str(target)], check=True)
            subprocess.run([str(BIN / "vgen"), "render", f"a red circle moving left, take {i}", "--model", str(pkg),
                            "--width", str(width), "--height", str(height), "--frames", str(nframes),
                            "--steps", str(steps), "--seed", str(100 + i), "--precision", precision,
                            "--format", "png", "-o", str(target)],
                           check=True, capture_output=True, text=True)
            got[precision] = frames(target)
        quality.append(psnr(got["float32"], got["int8"]))
    result = {"model": a.model, "family": man["family"], "package": str(pkg),
              "shape": {"width": width, "height": height, "frames": nframes, "steps": steps},
              "quantized_linears": man["export_checks"]["transformer_int8"].get("quantized_linears"),
              "transformer_mb": {k: round(man["components"][c]["bytes"] / 2**20, 2)
                                 for k, c in (("float32", "transformer"), ("int8", "transformer_int8"))},
              "denoiser_call_ms": {k: round(v * 1e3, 3) for k, v in speed.items()},
              "speedup": round(speed["float32"] / speed["int8"], 3),
              "psnr_db_per_prompt": [round(p, 2) for p in quality],
              "loadavg_1m_before_after": [round(before[0], 2), round(os.getloadavg()[0], 2)], "machine": machine()}
    write(f"int8_{a.model}", result)
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
