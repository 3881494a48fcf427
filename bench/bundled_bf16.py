"""float32 vs bf16 on the CPU for the bundled model (issue 30 item 1).

    python bench/bundled_bf16.py [--runs 5] [--eval-seeds 0]

A scratch copy of models/vgen-shapes with a bf16 denoiser variant (vgen_demo_model.variants
--bf16: bench/out/models/bundled/pkg_bf16, default still float32), so one package serves both and
`--precision bfloat16` picks the variant. Then, interleaved run by run after one untimed run of
each (page cache, the self-tuner's probe):
- `vgen demo` end to end (tools/demo.sh's work: its six prompts, the package's defaults:
  256x256, 16 frames, 16 steps, step cache 0.1), wall seconds;
- `vgen render` of the demo's first prompt (seed 1) with --json: wall and stage seconds.
The frames' PSNR bf16 vs float32: the six demo prompts rendered --format png at each precision.
With --eval-seeds N, tools/demo_model/evaluate.py on the held-out prompts (N seeds each) at
each precision. vgen's threads are its default (the user's: no OMP_NUM_THREADS).
Prints a table, writes bench/out/bundled_bf16.json with the machine's load before and after.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

from common import BIN, BUILD, OUT, ROOT, VENV_PY, machine, mmm, stats, table, write

MODEL = ROOT / "models" / "vgen-shapes"
PRECISIONS = ("float32", "bfloat16")


def tools_env() -> dict:
    """The worktree's tools/ as the vgen_demo_model and vgen_export packages (the venv's editable
    install may point at another checkout): a folder of links named as the packages import."""
    shim = OUT / "pythonpath"
    shim.mkdir(parents=True, exist_ok=True)
    for name, folder in (("vgen_demo_model", "demo_model"), ("vgen_export", "vgen_export")):
        link = shim / name
        if not link.is_symlink() or link.resolve() != (ROOT / "tools" / folder).resolve():
            link.unlink(missing_ok=True)
            link.symlink_to(ROOT / "tools" / folder)
    return {**os.environ, "PYTHONPATH": str(shim)}


def ensure_package(extra: list[str], name: str) -> Path:
    pkg = OUT / "models" / "bundled" / name
    if not (pkg / "manifest.json").exists():
        subprocess.run([str(VENV_PY), "-m", "vgen_demo_model.variants", "--model", str(MODEL), "--out", str(pkg), *extra],
                       check=True, env=tools_env())
    return pkg


def precision_args(p: str) -> list[str]:
    return ["--precision", p]


def demo(pkg: Path, p: str, out: Path, fmt: str | None = None) -> float:
    t0 = time.perf_counter()
    subprocess.run([str(BIN / "vgen"), "demo", "--model", str(pkg), "--out", str(out), *precision_args(p),
                    *(["--format", fmt] if fmt else [])], check=True, capture_output=True, text=True)
    return time.perf_counter() - t0


def render(pkg: Path, p: str, out: Path) -> tuple[float, dict]:
    t0 = time.perf_counter()
    r = subprocess.run([str(BIN / "vgen"), "render", "a red circle moving right", "--model", str(pkg), "--seed", "1",
                        *precision_args(p), "--json", "-o", str(out)], check=True, capture_output=True, text=True)
    return time.perf_counter() - t0, json.loads(r.stdout.strip().splitlines()[-1])["stage_seconds"]


def psnr_frames(a: Path, b: Path) -> dict:
    import numpy as np
    from PIL import Image

    def frames(d: Path):
        files = sorted(d.rglob("*.png"))
        if not files:
            raise RuntimeError(f"no frames under {d}")
        return np.stack([np.asarray(Image.open(f), dtype=np.float64) for f in files])

    out = {}
    for clip in sorted(x.name for x in a.iterdir() if x.is_dir()):
        fa, fb = frames(a / clip), frames(b / clip)
        mse = float(((fa - fb) ** 2).mean())
        out[clip] = math.inf if mse == 0 else round(10 * math.log10(255.0 ** 2 / mse), 2)
    return out


def evaluate(pkg: Path, p: str, seeds: int) -> dict:
    path = OUT / f"eval_bundled_{p}.json"
    subprocess.run([str(VENV_PY), "-m", "vgen_demo_model.evaluate", "--model", str(pkg), "--split", "held_out",
                    "--seeds", str(seeds), "--extra", f"--precision {p}", "--json", str(path)], check=True,
                   env={**tools_env(), "VGEN_BUILD_DIR": str(BUILD)})
    return json.loads(path.read_text())["summary"]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--eval-seeds", type=int, default=0)
    a = ap.parse_args()
    pkg = ensure_package(["--bf16"], "pkg_bf16")
    before = machine(with_torch=False)
    work = OUT / "bundled_bf16"
    work.mkdir(parents=True, exist_ok=True)
    demo_s = {p: [] for p in PRECISIONS}
    render_s = {p: [] for p in PRECISIONS}
    stages: dict[str, dict[str, list]] = {p: {} for p in PRECISIONS}
    for p in PRECISIONS:  # untimed
        demo(pkg, p, work / f"demo_{p}")
        render(pkg, p, work / f"render_{p}.mp4")
    for _ in range(a.runs):
        for p in PRECISIONS:
            demo_s[p].append(demo(pkg, p, work / f"demo_{p}"))
            seconds, st = render(pkg, p, work / f"render_{p}.mp4")
            render_s[p].append(seconds)
            for k, v in st.items():
                stages[p].setdefault(k, []).append(v)
    for p in PRECISIONS:
        demo(pkg, p, work / f"png_{p}", "png")
    psnr = psnr_frames(work / "png_float32", work / "png_bfloat16")
    result = {"package": str(pkg), "runs": a.runs, "machine_before": before,
              "vgen_demo_seconds": {p: stats(v) for p, v in demo_s.items()},
              "vgen_render_seconds": {p: stats(v) for p, v in render_s.items()},
              "render_stage_seconds": {p: {k: stats(v) for k, v in s.items()} for p, s in stages.items()},
              "psnr_bf16_vs_float32_db": psnr, "raw": {"demo": demo_s, "render": render_s}}
    rows = [["vgen demo (6 clips, s)", mmm(result["vgen_demo_seconds"]["float32"]), mmm(result["vgen_demo_seconds"]["bfloat16"]),
             f"{stats(demo_s['float32'])['median'] / stats(demo_s['bfloat16'])['median']:.2f}x"],
            ["vgen render (1 clip, s)", mmm(result["vgen_render_seconds"]["float32"]),
             mmm(result["vgen_render_seconds"]["bfloat16"]),
             f"{stats(render_s['float32'])['median'] / stats(render_s['bfloat16'])['median']:.2f}x"]]
    for k in stages["float32"]:
        f, b = stats(stages["float32"][k]), stats(stages["bfloat16"][k])
        rows.append([f"render's {k} stage (s)", mmm(f), mmm(b), f"{f['median'] / b['median']:.2f}x" if b["median"] else "-"])
    if a.eval_seeds:
        result["held_out"] = {p: evaluate(pkg, p, a.eval_seeds) for p in PRECISIONS}
        for attr in result["held_out"]["float32"]["accuracy"]:
            rows.append([f"held-out {attr} (%)"] + [f"{100 * result['held_out'][p]['accuracy'][attr]:.1f}" for p in PRECISIONS]
                        + ["-"])
    result["machine_after"] = machine(with_torch=False)
    print(table(["", "float32", "bf16", "speed-up"], rows))
    print("PSNR bf16 vs float32 (dB), per demo clip:", json.dumps(psnr))
    write("bundled_bf16", result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
