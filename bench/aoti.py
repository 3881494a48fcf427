"""TorchScript vs AOTInductor (issue 31): the same package's transformer as its TorchScript file
and as its compiled .pt2, on this CPU.

    python bench/aoti.py --model tiny|medium|large|bundled [--dtype float32|bfloat16] [--runs N] [--threads T] [--e2e]
                         [--unpack-ablation]

Builds the bench model (bench/python/models.py) and exports it a second time with
--compile aoti (bench/out/models/<preset>/pkg_aoti, pkg_aoti_bfloat16 for --dtype bfloat16;
Inductor compiles with VGEN_AOTI_THREADS threads, default 1). Then, interleaved run by run:
- the denoiser call: forward_compact at the package's default shape (cond and uncond rows), the
  TorchScript module (torch.jit, after its two profiling calls) against the .pt2 (torch's own
  AOTIModelPackageLoader, which vgen's "aoti" backend uses);
- with --e2e, `vgen render` end to end on pkg_aoti (the .pt2s serve: transformer and VAE
  decoder) and on its TorchScript twin
  (the same folder, the manifest without the compiled entry), after one untimed render of each
  (the self-tuner's first-job probe, keyed by backend, is not what is compared), with each
  render's stage seconds (text, denoise, decode, encode: its --json).
--model bundled: the bundled model (models/vgen-shapes), compiled into a scratch copy by
vgen_demo_model.variants --bf16 --compile aoti (bench/out/models/bundled/pkg_aoti: every
component's forward, the float32 denoiser and its bf16 variant, one package for both dtypes;
--dtype bfloat16 renders with --precision bfloat16), at the demo's job (256x256, 16 frames, 16
steps, the package's step cache).
Prints a table, writes bench/out/aoti_<preset>.json with the machine's load (say it: the
machine is shared) and Inductor's report (compile seconds, size, fused kernels, extern ops).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from common import BIN, OUT, ROOT, VENV_PY, machine, mmm, stats, table, write


def bundled_package() -> Path:
    """The bundled model compiled into a scratch copy (never into models/: a .pt2 is specific to
    this CPU and torch)."""
    from bundled_bf16 import tools_env

    aoti = OUT / "models" / "bundled" / "pkg_aoti"
    if not (aoti / "manifest.json").exists():
        subprocess.run([str(VENV_PY), "-m", "vgen_demo_model.variants", "--model", str(ROOT / "models" / "vgen-shapes"),
                        "--out", str(aoti), "--bf16", "--compile", "aoti"], check=True, env=tools_env())
    return aoti


def ensure_packages(preset: str, dtype: str = "float32") -> tuple[Path, Path]:
    if preset == "bundled":
        return torchscript_twin(bundled_package(), OUT / "models" / "bundled" / "pkg_aoti_torchscript")
    base = OUT / "models" / preset
    subprocess.run([str(VENV_PY), str(ROOT / "bench" / "python" / "models.py"), "--preset", preset, "--out", str(base)],
                   check=True, env={**os.environ, "PYTHONPATH": str(ROOT / "tools")})
    suffix = "" if dtype == "float32" else "_" + dtype
    aoti = base / ("pkg_aoti" + suffix)
    # (a package compiled before the VAE was compiled too is compiled again)
    if not (aoti / "manifest.json").exists() or \
            "compiled" not in json.loads((aoti / "manifest.json").read_text())["components"]["vae_decoder"]:
        if aoti.exists():
            shutil.rmtree(aoti)
        code = ("import sys; from pathlib import Path; from vgen_export.wan import export_wan; "
                f"export_wan(Path({str(base / 'diffusers')!r}), Path({str(aoti)!r}), dtype={dtype!r}, "
                f"tiny={preset == 'tiny'}, seed=0, compile='aoti')")
        subprocess.run([str(VENV_PY), "-c", code], check=True, env={**os.environ, "PYTHONPATH": str(ROOT / "tools")})
    return torchscript_twin(aoti, base / ("pkg_aoti_torchscript" + suffix))


def torchscript_twin(aoti: Path, twin: Path) -> tuple[Path, Path]:
    """The same files as `aoti`, the manifest without the compiled entries."""
    if twin.exists():
        shutil.rmtree(twin)
    twin.mkdir()
    manifest = json.loads((aoti / "manifest.json").read_text())
    for name in os.listdir(aoti):
        if name != "manifest.json" and not name.endswith(".pt2"):
            os.link(aoti / name, twin / name)  # (a symlink would point outside the package: refused)
    for c in manifest["components"].values():
        c.pop("compiled", None)
    (twin / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    return aoti, twin


# The job shape of bench/e2e.py's presets (the packages' own defaults are Wan's 480p, 81 frames).
SHAPE = {"tiny": dict(width=64, height=64, frames=9, steps=10), "medium": dict(width=128, height=128, frames=9, steps=8),
         "large": dict(width=128, height=128, frames=9, steps=8),
         "bundled": dict(width=256, height=256, frames=16, steps=16)}  # the package's defaults (the demo's)


def transformer_component(preset: str, dtype: str) -> str:
    """The denoiser's component: the bundled package carries bf16 as a variant of its own."""
    return "transformer_bf16" if preset == "bundled" and dtype == "bfloat16" else "transformer"


def denoiser_inputs(manifest: dict, torch, shape: dict, component: str = "transformer"):
    d, t = shape, manifest["transformer"]
    lat = manifest["latent"]
    f = (d["frames"] - 1) // lat["temporal_scale"] + 1
    h, w = d["height"] // lat["spatial_scale"], d["width"] // lat["spatial_scale"]
    rows = 2  # cond and uncond
    gen = torch.Generator().manual_seed(0)
    dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}[manifest["components"][component]["dtype"]]
    x = torch.randn(rows, t["in_channels"], f, h, w, generator=gen).to(dtype)
    ts = torch.full((rows,), 500.0)  # (float32 in every package: the time embedder stays float32)
    if component != "transformer" or "forward_compact" not in manifest["components"]["transformer"]["methods"]:
        # forward: the text rows padded to max_length, as vgen passes them (the bundled model)
        ctx = torch.randn(rows, manifest["tokenizer"]["max_length"], t["text_dim"], generator=gen)
        ctx[:, 10:] = 0
        return x, ts, ctx.to(dtype)
    ctx = torch.randn(rows, 12, t["text_dim"], generator=gen).to(dtype)
    bias = torch.zeros(rows, 12)
    return x, ts, ctx, bias


def bench_calls(aoti: Path, runs: int, threads: int, shape: dict, component: str = "transformer") -> dict:
    import torch
    from torch._inductor.package import load_package

    torch.set_num_threads(threads)
    manifest = json.loads((aoti / "manifest.json").read_text())
    args = denoiser_inputs(manifest, torch, shape, component)
    method = "forward_compact" if len(args) == 4 else "forward"
    script = getattr(torch.jit.load(str(aoti / manifest["components"][component]["file"])), method)
    compiled = load_package(str(aoti / f"{component}.cpu.pt2"), f"{method}-model")
    with torch.inference_mode():
        for _ in range(3):  # TorchScript's profiling executor optimises on the second call
            ref = script(*args)
            got = compiled(*args)
        got = got[0] if isinstance(got, (list, tuple)) else got
        diff = float((got.float() - ref.float()).abs().max())
        times = {"torchscript": [], "aoti": []}
        for _ in range(runs):
            for name, fn in (("torchscript", lambda: script(*args)), ("aoti", lambda: compiled(*args))):
                t0 = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - t0)
    return {"shape": list(args[0].shape), "max_abs_diff": diff, "seconds": {k: stats(v) for k, v in times.items()}}


def bench_e2e(aoti: Path, twin: Path, runs: int, threads: int, shape: dict, extra: list[str] | None = None,
              unpack_ablation: bool = False) -> dict:
    # unpack_ablation: a third case, the .pt2s loaded through torch's own loader (a temporary
    # folder per process) instead of the machine's unpacked copy (stages/model/aoti_library_cache).
    cases = [("torchscript", twin), ("aoti", aoti)] + ([("aoti_unpack_each_process", aoti)] if unpack_ablation else [])
    times = {name: [] for name, _ in cases}
    stages = {name: {} for name, _ in cases}  # the job's own stage seconds (--json): text, denoise, decode, encode
    out = OUT / "aoti_e2e"
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}

    def render(name: str, pkg: Path, r: int) -> float:
        if name == "aoti_unpack_each_process":
            env["VGEN_AOTI_CACHE"] = "off"
        else:
            env.pop("VGEN_AOTI_CACHE", None)
        t0 = time.perf_counter()
        p = subprocess.run([str(BIN / "vgen"), "render", "a red circle moving left", "--model", str(pkg),
                            "--seed", "1", "--width", str(shape["width"]), "--height", str(shape["height"]),
                            "--frames", str(shape["frames"]), "--steps", str(shape["steps"]), *(extra or []), "--json",
                            "--output", str(out / f"{name}_{r}.mp4")], check=True, env=env,
                           capture_output=True, text=True)
        seconds = time.perf_counter() - t0
        result = json.loads(p.stdout.strip().splitlines()[-1])
        if r >= 0:
            for stage, sec in result["stage_seconds"].items():
                stages[name].setdefault(stage, []).append(sec)
        return seconds

    for name, pkg in cases:
        render(name, pkg, -1)  # warm: the tune cache (its key has the backend), the page cache, the unpacked copy
    for r in range(runs):
        for name, pkg in cases:
            times[name].append(render(name, pkg, r))
    return {"seconds": {k: stats(v) for k, v in times.items()},
            "stage_seconds": {k: {s: stats(v) for s, v in per.items()} for k, per in stages.items()}}


def frame_parity(aoti: Path, twin: Path, threads: int, shape: dict, extra: list[str]) -> dict:
    """One render of each as PNG frames (8-bit): the largest difference and the share of values
    that differ. The compiled denoiser's float difference is bench_calls' max_abs_diff; 8-bit
    frames show it only where a value sits on a rounding boundary."""
    import numpy as np
    from PIL import Image

    out = OUT / "aoti_parity"
    out.mkdir(parents=True, exist_ok=True)
    frames = {}
    for name, pkg in (("torchscript", twin), ("aoti", aoti)):
        d = out / name
        subprocess.run([str(BIN / "vgen"), "render", "a red circle moving left", "--model", str(pkg), "--seed", "1",
                        "--width", str(shape["width"]), "--height", str(shape["height"]), "--frames", str(shape["frames"]),
                        "--steps", str(shape["steps"]), *extra, "--format", "png", "-o", str(d)], check=True,
                       env={**os.environ, "OMP_NUM_THREADS": str(threads)}, capture_output=True)
        frames[name] = np.stack([np.asarray(Image.open(f), dtype=np.float64) for f in sorted(d.glob("*.png"))])
    diff = np.abs(frames["aoti"] - frames["torchscript"])
    return {"frames": int(frames["aoti"].shape[0]), "max_abs_diff_0_1": float(diff.max() / 255.0),
            "values_differing": float((diff > 0).mean())}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="tiny", choices=["tiny", "medium", "large", "bundled"])
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--e2e", action="store_true")
    ap.add_argument("--unpack-ablation", action="store_true",
                    help="with --e2e: also render with VGEN_AOTI_CACHE=off (torch's loader unpacks each process)")
    a = ap.parse_args()
    before = machine(with_torch=False)
    aoti, twin = ensure_packages(a.model, a.dtype)
    checks = json.loads((aoti / "manifest.json").read_text())["export_checks"]
    component = transformer_component(a.model, a.dtype)
    report = checks[component]["aoti"]
    vae_report = checks["vae_decoder"]["aoti"]
    calls = bench_calls(aoti, a.runs, a.threads, SHAPE[a.model], component)
    result = {"model": a.model, "dtype": a.dtype, "threads": a.threads, "shape": SHAPE[a.model],
              "inductor": {k: report[k] for k in ("compile_seconds", "bytes", "kernels")},
              "inductor_vae_decoder": {k: vae_report[k] for k in ("compile_seconds", "bytes", "kernels")},
              "denoiser_call": calls, "machine_before": before}
    if a.model == "bundled":  # every compiled component (the text encoder too), and the frames
        result["inductor_components"] = {n: {k: c["aoti"][k] for k in ("compile_seconds", "bytes", "kernels")}
                                         for n, c in checks.items() if isinstance(c, dict) and "aoti" in c}
        result["frame_parity"] = frame_parity(aoti, twin, a.threads, SHAPE[a.model], ["--precision", a.dtype])
        print("frames, aoti vs torchscript:", json.dumps(result["frame_parity"]))
    rows = [["denoiser call (s)", mmm(calls["seconds"]["torchscript"]), mmm(calls["seconds"]["aoti"]),
             f"{calls['seconds']['torchscript']['median'] / calls['seconds']['aoti']['median']:.2f}x"]]
    if a.e2e:
        extra = ["--precision", a.dtype] if a.model == "bundled" else []
        e2e = bench_e2e(aoti, twin, max(3, a.runs // 5), a.threads, SHAPE[a.model], extra, a.unpack_ablation)
        result["render"] = e2e
        rows.append(["vgen render (s)", mmm(e2e["seconds"]["torchscript"]), mmm(e2e["seconds"]["aoti"]),
                     f"{e2e['seconds']['torchscript']['median'] / e2e['seconds']['aoti']['median']:.2f}x"])
        st = e2e["stage_seconds"]
        for stage in st["torchscript"]:
            if stage not in st["aoti"]:
                continue
            ts, ao = st["torchscript"][stage], st["aoti"][stage]
            rows.append([f"render's {stage} stage (s)", mmm(ts), mmm(ao),
                         f"{ts['median'] / ao['median']:.2f}x" if ao["median"] > 0 else "-"])
        if "aoti_unpack_each_process" in e2e["seconds"]:
            each = e2e["seconds"]["aoti_unpack_each_process"]
            rows.append(["vgen render, .pt2 unpacked per process (s)", mmm(e2e["seconds"]["torchscript"]), mmm(each),
                         f"{e2e['seconds']['torchscript']['median'] / each['median']:.2f}x"])
    result["machine_after"] = machine(with_torch=False)
    print(f"{a.model} {a.dtype}: shape {calls['shape']}, max |aoti - torchscript| = {calls['max_abs_diff']:.3g}; Inductor: "
          f"{report['compile_seconds']} s, {report['bytes'] / 1e6:.1f} MB, {report['kernels']}; VAE decoder: "
          f"{vae_report['compile_seconds']} s, {vae_report['bytes'] / 1e6:.1f} MB, {vae_report['kernels']}")
    print(table(["", "torchscript", "aoti", "speed-up"], rows))
    write(f"aoti_{a.model}" + ("" if a.dtype == "float32" else "_" + a.dtype), result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
