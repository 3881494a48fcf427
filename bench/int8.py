#!/usr/bin/env python3
"""int8 on CPU (issue 24): the transformer of a bench model exported twice from the same
diffusers weights, float32 and `--quantize int8` (dynamic int8 of the block Linears), then
  - speed: the denoiser call (forward_compact, CFG batch of 2, the preset's shape, one
    intra-op thread, after two warm-up calls) timed interleaved, median of R runs;
  - quality: `vgen render --format png` of P prompts with each package (same seeds), PSNR of
    every int8 frame against its float32 frame (8-bit RGB).

    python3 bench/int8.py --model tiny|medium [--runs R] [--prompts P]

Writes bench/out/int8_<model>.json.
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "python"))
from common import BIN, OUT, ROOT, VENV_PY, machine, write  # noqa: E402

PY = Path(__file__).resolve().parent / "python"
SHAPES = {"tiny": (64, 64, 9, 10), "medium": (128, 128, 9, 8)}  # width, height, frames, steps (as bench/e2e.py)

TIMER = r'''
import json, sys, time, torch
torch.set_num_threads(1)
pkg_f, pkg_q, latent_shape, runs = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), int(sys.argv[4])
mods = {k: torch.jit.load(p + "/transformer.pt").eval() for k, p in (("float32", pkg_f), ("int8", pkg_q))}
g = torch.Generator().manual_seed(0)
man = json.load(open(pkg_f + "/manifest.json"))
x = torch.randn(2, *latent_shape, generator=g)
t = torch.full((2,), 500.0)
ctx = torch.randn(2, 12, man["transformer"]["text_dim"], generator=g)
bias = torch.zeros(2, 12)
out = {k: [] for k in mods}
with torch.no_grad():
    for m in mods.values():
        for _ in range(2): m.forward_compact(x, t, ctx, bias)
    for _ in range(runs):
        for k, m in mods.items():
            t0 = time.perf_counter(); m.forward_compact(x, t, ctx, bias); out[k].append(time.perf_counter() - t0)
print(json.dumps(out))
'''


def ensure(preset: str) -> tuple[Path, Path]:
    d = OUT / "models" / preset
    subprocess.run([str(VENV_PY), str(PY / "models.py"), "--preset", preset, "--out", str(d)], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    q = d / "pkg_int8"
    if not (q / "manifest.json").exists():
        subprocess.run([str(VENV_PY), str(ROOT / "tools" / "export_wan.py"), "--diffusers", str(d / "diffusers"),
                        "--out", str(q), "--quantize", "int8"], check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
    return d / "pkg", q


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
    pkg_f, pkg_q = ensure(a.model)
    man = json.loads((pkg_f / "manifest.json").read_text())
    lat = man["latent"]
    latent_shape = [lat["channels"], (nframes - 1) // lat["temporal_scale"] + 1, height // lat["spatial_scale"],
                    width // lat["spatial_scale"]]
    r = subprocess.run([str(VENV_PY), "-c", TIMER, str(pkg_f), str(pkg_q), json.dumps(latent_shape), str(a.runs)],
                       capture_output=True, text=True, check=True)
    times = json.loads(r.stdout.strip().splitlines()[-1])
    speed = {k: statistics.median(v) for k, v in times.items()}

    work = OUT / f"int8_{a.model}"
    work.mkdir(parents=True, exist_ok=True)
    quality = []
    for i in range(a.prompts):
        got = {}
        for name, pkg in (("float32", pkg_f), ("int8", pkg_q)):
            target = work / f"{name}-{i}.png"
            subprocess.run(["rm", "-rf", str(target)], check=True)
            subprocess.run([str(BIN / "vgen"), "render", f"a red circle moving left, take {i}", "--model", str(pkg),
                            "--width", str(width), "--height", str(height), "--frames", str(nframes),
                            "--steps", str(steps), "--seed", str(100 + i), "--format", "png", "-o", str(target)],
                           check=True, capture_output=True, text=True)
            got[name] = frames(target)
        quality.append(psnr(got["float32"], got["int8"]))
    result = {"model": a.model, "shape": {"width": width, "height": height, "frames": nframes, "steps": steps},
              "quantized_linears": json.loads((pkg_q / "manifest.json").read_text())["export_checks"]["transformer"]
              .get("quantized_linears"),
              "denoiser_call_ms": {k: round(v * 1e3, 3) for k, v in speed.items()},
              "speedup": round(speed["float32"] / speed["int8"], 3),
              "psnr_db_per_prompt": [round(p, 2) for p in quality], "machine": machine()}
    write(f"int8_{a.model}", result)
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
