#!/usr/bin/env python3
"""The driver behind tools/gpu_check.sh (which sets up the bundle, LD_LIBRARY_PATH and PYTHONPATH).

    python -m vgen_gpu.check --device cuda|cpu [--tiny] --vgen BIN --work DIR --out DIR [--budget-s S]

Runs the phases below, each in its own child process (a crash or a hang costs that phase only)
with a time box cut to what is left of the budget, and rewrites OUT/gpu_check.json after every
phase, so a run cut short still leaves the phases it finished. Big files (the diffusers
directory, the package, frames) stay in WORK, never in OUT (OUT comes back from the device).

Phases: environment, build_model (tiny: the tiny test pipeline; real: tools/vgen_export/
wan21_1_3b.py), export (bf16 package with an fp8 variant of the transformer, --quantize fp8;
tiny: a float32 one too), diffusers_single and
vgen_single (one job: same prompt, seed and size, bf16, same device), compare (PSNR of the 8-bit
frames; tiny: vgen bf16 vs vgen float32 as well), diffusers_batch and vgen_batch (8 jobs at a
smaller shape: a WanPipeline loop vs one vgen batch with --max-batch 8), vgen_fp8 (the single
job at precision fp8: e4m3 block Linears, torch._scaled_mm on capability >= 8.9; PSNR against
diffusers bf16 and vgen bf16), vgen_single_fusion.

Measures: s/step (median over the steps after the first; diffusers: callback_on_step_end with a
device synchronise; vgen: its trace's denoise-step spans), VAE decode (diffusers: vae.decode
with synchronises; vgen: the trace's decode spans), end-to-end (diffusers: the pipeline call,
models already loaded; vgen: the job's span in the trace and the whole process, model load and
its warm-up included), peak memory (on CUDA: nvidia-smi's memory.used sampled every 100 ms minus
the idle value, for both, plus torch.cuda.max_memory_allocated/reserved for diffusers; on CPU:
the child's peak RSS).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path


NEGATIVE = "low quality, blurry, static"
PROMPTS = ["a red circle moving left on a black background", "a blue square bouncing on a green field",
           "a yellow star spinning in a dark room", "a white boat floating on a sandy beach",
           "a black cat jumping in a city street", "a pink flower growing on a snowy mountain",
           "a green car moving right on a blue sky", "an orange fish falling in a white background"]
SEED = 1234
# (budget share in seconds, tiny) per phase; the real ones are planned for an H100 in < 8 min.
# H200 2026-11-27 run 2 (bench/results/gpu_check_h200_2026-11-27_run2.json) took 341 s in all,
# export 54 s; the fp8 variant adds one transformer export to it and vgen_fp8 one render (vgen_single:
# 35 s for two packages' worth of work on the tiny path, one on the real one). vgen_single_fusion
# (last: the first to go when time is short) renders the single job again with TorchScript's CUDA
# fusion on (model_backend.torchscript_gpu_fusion), the setting it replaced.
PHASES = [("environment", 30), ("build_model", 90), ("export", 180), ("diffusers_single", 110), ("vgen_single", 130),
          ("compare", 30), ("diffusers_batch", 80), ("vgen_batch", 80), ("vgen_fp8", 60), ("vgen_single_fusion", 50)]
# Best effort: no time is held back for them from the phases before (they get what is left).
OPTIONAL = {"vgen_single_fusion"}


def shapes(tiny: bool, steps: int | None) -> dict:
    if tiny:
        single = dict(width=48, height=32, frames=9, steps=steps or 4)
        batch = dict(width=32, height=32, frames=5, steps=3)
    else:  # 50 steps do not fit twice in the budget: s/step x 50 is the full render's denoise
        single = dict(width=832, height=480, frames=81, steps=steps or 10)
        batch = dict(width=832, height=480, frames=33, steps=10)
    return {"single": single, "batch": {**batch, "jobs": len(PROMPTS)}, "guidance": 5.0, "seed": SEED,
            "negative_prompt": NEGATIVE, "scheduler": "the package's (UniPC, flow_shift 3.0)"}


# ----------------------------------------------------------------------------- helpers
class PeakMemory:
    """nvidia-smi memory.used sampled every 100 ms on a thread; peak above the idle value (MiB)."""

    def __init__(self, device: str):
        self.device, self.samples, self.proc, self.idle = device, [], None, None

    def __enter__(self):
        if self.device != "cuda":
            return self
        self.idle = self._query()
        self.proc = subprocess.Popen(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits",
                                      "-i", "0", "-lms", "100"], stdout=subprocess.PIPE, text=True)
        threading.Thread(target=self._read, daemon=True).start()
        return self

    def _query(self) -> int:
        out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits", "-i", "0"],
                             capture_output=True, text=True, check=True).stdout
        return int(out.split()[0])

    def _read(self):
        for line in self.proc.stdout:
            if line.strip().isdigit():
                self.samples.append(int(line))

    def __exit__(self, *exc):
        if self.proc:
            self.proc.terminate()
            self.proc.wait()

    def result(self) -> dict:
        if self.device != "cuda":
            return {}
        peak = max(self.samples, default=None)
        return {"nvidia_smi_peak_mib": peak, "nvidia_smi_idle_mib": self.idle,
                "nvidia_smi_peak_above_idle_mib": None if peak is None else peak - self.idle}


def sync(device: str):
    import torch

    if device == "cuda":
        torch.cuda.synchronize()


def median_after_first(xs: list[float]) -> float | None:
    return statistics.median(xs[1:] if len(xs) > 1 else xs) if xs else None


def to_uint8(frames):
    """[F,H,W,3] floats in [0,1] -> uint8 (round to nearest, as vgen's frames are)."""
    import numpy as np

    return (np.clip(frames, 0.0, 1.0) * 255.0 + 0.5).astype(np.uint8)


def psnr(a, b) -> dict:
    import numpy as np

    a, b = a.astype(np.float64), b.astype(np.float64)
    per = [float(10 * np.log10(255.0 ** 2 / max(((x - y) ** 2).mean(), 1e-12))) for x, y in zip(a, b)]
    mse = ((a - b) ** 2).mean()
    return {"psnr_db": float(10 * np.log10(255.0 ** 2 / max(mse, 1e-12))), "min_frame_psnr_db": min(per),
            "max_abs_diff": int(np.abs(a - b).max()), "frames": len(per)}


def read_pngs(folder: Path):
    import numpy as np
    from PIL import Image

    files = sorted(folder.glob("*.png"))
    if not files:
        raise RuntimeError(f"no PNG frames in {folder}")
    return np.stack([np.asarray(Image.open(f).convert("RGB")) for f in files])


def vgen_env(args) -> dict:
    return dict(os.environ)  # gpu_check.sh set LD_LIBRARY_PATH to bundle/lib + the torch libraries


def run_vgen(args, cmd: list[str], log_name: str) -> dict:
    """Runs vgen, returns wall time, rc, peak memory (nvidia-smi on CUDA, the child's peak RSS on CPU)."""
    log = Path(args.work) / log_name
    with PeakMemory(args.device) as mem, open(log, "w") as out:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=out, text=True, env=vgen_env(args), cwd=args.work)
        stdout = proc.stdout.read()
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        wall = time.perf_counter() - t0
    res = {"rc": proc.returncode, "process_s": round(wall, 3), **mem.result()}
    if args.device != "cuda":
        res["peak_rss_mib"] = round(usage.ru_maxrss / 1024, 1)
    if proc.returncode != 0:
        raise RuntimeError(f"vgen exited {proc.returncode}: {log.read_text()[-2000:]}")
    try:
        res["stdout_json"] = json.loads(stdout.strip().splitlines()[-1]) if stdout.strip() else None
    except (json.JSONDecodeError, IndexError):
        res["stdout_tail"] = stdout[-500:]
    return res


def trace_spans(trace_file: Path) -> dict[str, list[float]]:
    """Complete ("X") events of a vgen trace grouped by name: durations in seconds."""
    spans: dict[str, list[float]] = {}
    for e in json.loads(trace_file.read_text())["traceEvents"]:
        if e.get("ph") == "X":
            spans.setdefault(e["name"], []).append(e.get("dur", 0) / 1e6)
    return spans


def summarise_trace(spans: dict[str, list[float]]) -> dict:
    step = next((v for k, v in spans.items() if k.startswith("denoise") and "step" in k), None) or \
        next((v for k, v in spans.items() if k.startswith("step")), [])
    decode = next((v for k, v in spans.items() if k.startswith("decode")), [])
    return {"s_per_step": median_after_first(step), "steps_seen": len(step), "first_step_s": step[0] if step else None,
            # vgen's warm-up decodes twice at the smallest size before the job: the job's is the last
            "vae_decode_s": decode[-1] if decode else None,
            "span_names": {k: [len(v), round(sum(v), 3)] for k, v in sorted(spans.items())}}


# ----------------------------------------------------------------------------- phases
def phase_environment(args) -> dict:
    import torch

    res = {"python": sys.version.split()[0], "torch": torch.__version__, "torch_file": torch.__file__,
           "cuda_available": torch.cuda.is_available(), "glibc": os.confstr("CS_GNU_LIBC_VERSION"),
           "platform": platform.platform(), "cpu_count": os.cpu_count()}
    try:
        res["os"] = next(l.split("=", 1)[1].strip().strip('"') for l in open("/etc/os-release")
                         if l.startswith("PRETTY_NAME="))
    except (OSError, StopIteration):
        pass
    if torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        res["gpu"] = {"name": p.name, "total_mib": p.total_memory // 2 ** 20, "capability": [p.major, p.minor]}
    import diffusers

    res["diffusers"] = diffusers.__version__
    res["diffusers_file"] = diffusers.__file__
    bundle = Path(args.vgen).resolve().parents[1] / "bundle.json"
    if bundle.is_file():
        b = json.loads(bundle.read_text())
        res["bundle"] = {k: b.get(k) for k in ("glibc_required", "glibcxx_required_by_vgen", "torch_built_against")}
        res["bundle"]["libraries"] = len(b.get("libraries", []))
    v = subprocess.run([args.vgen, "--version"], capture_output=True, text=True, env=vgen_env(args), timeout=60)
    res["vgen_version"] = (v.stdout + v.stderr).strip()[-300:]
    if v.returncode != 0:
        raise RuntimeError(f"vgen --version exited {v.returncode}: {res['vgen_version']}")
    return res


def phase_build_model(args) -> dict:
    work = Path(args.work)
    t0 = time.perf_counter()
    if args.tiny:
        from vgen_export.tiny_wan import write_tiny_wan

        write_tiny_wan(work / "diffusers", seed=0)
        desc = {"model": "tiny random Wan 2.1 T2V (tools/vgen_export/tiny_wan.py)"}
    else:
        from vgen_export.wan21_1_3b import describe, write_wan21_1_3b

        write_wan21_1_3b(work / "diffusers", text_layers=args.text_layers, device=args.device)
        desc = describe(args.text_layers)
    size = sum(f.stat().st_size for f in (work / "diffusers").rglob("*") if f.is_file())
    return {**desc, "seconds": round(time.perf_counter() - t0, 2), "bytes": size}


def phase_export(args) -> dict:
    from vgen_export import wan as ew

    work, res = Path(args.work), {}
    for dtype, name in [("bfloat16", "pkg")] + ([("float32", "pkg_f32")] if args.tiny else []):
        t0 = time.perf_counter()
        m = ew.export_wan(work / "diffusers", work / name, dtype=dtype, tiny=args.tiny, seed=0,
                          quantize="fp8" if name == "pkg" else None)
        worst = {k: max(c["max_abs_diff"] for c in v["checks"]) for k, v in m["export_checks"].items()
                 if isinstance(v, dict) and "checks" in v}
        res[dtype] = {"seconds": round(time.perf_counter() - t0, 2), "max_abs_diff_jit_vs_eager": worst,
                      "compact_context": m["transformer"]["compact_context"],
                      "component_dtypes": {k: v.get("dtype") for k, v in m["components"].items()},
                      "component_bytes": {k: v.get("bytes") for k, v in m["components"].items()
                                          if k.startswith("transformer")}}
    return res


def load_pipeline(args):
    import torch
    from diffusers import AutoencoderKLWan, WanPipeline

    src = Path(args.work) / "diffusers"
    vae = AutoencoderKLWan.from_pretrained(src, subfolder="vae", dtype=torch.float32)
    pipe = WanPipeline.from_pretrained(src, vae=vae, dtype=torch.bfloat16).to(args.device)
    pipe.set_progress_bar_config(disable=True)
    return pipe


def timed_call(args, pipe, prompt: str, seed: int, shape: dict, step_times: list | None = None,
               decode_times: list | None = None):
    import torch

    last = [0.0]

    def on_step(_pipe, _i, _t, kwargs):
        sync(args.device)
        now = time.perf_counter()
        if step_times is not None:
            step_times.append(now - last[0])
        last[0] = now
        return {}

    decode = pipe.vae.decode

    def timed_decode(*a, **kw):
        sync(args.device)
        t0 = time.perf_counter()
        out = decode(*a, **kw)
        sync(args.device)
        if decode_times is not None:
            decode_times.append(time.perf_counter() - t0)
        return out

    pipe.vae.decode = timed_decode
    try:
        with torch.no_grad():
            sync(args.device)
            t0 = last[0] = time.perf_counter()
            # The first step's time includes the text encoding and the latents' setup.
            frames = pipe(prompt=prompt, negative_prompt=NEGATIVE, height=shape["height"], width=shape["width"],
                          num_frames=shape["frames"], num_inference_steps=shape["steps"], guidance_scale=5.0,
                          generator=torch.Generator().manual_seed(seed), output_type="np",
                          callback_on_step_end=on_step).frames[0]
            sync(args.device)
            return frames, time.perf_counter() - t0
    finally:
        del pipe.vae.decode


def phase_diffusers_single(args) -> dict:
    import numpy as np
    import torch

    shape = shapes(args.tiny, args.steps)["single"]
    steps, decodes = [], []
    # The idle value is read before the models load, as for vgen (whose process starts after it):
    # both peaks count weights, CUDA context and activations.
    with PeakMemory(args.device) as mem:
        t0 = time.perf_counter()
        pipe = load_pipeline(args)
        load_s = time.perf_counter() - t0
        frames, e2e = timed_call(args, pipe, PROMPTS[0], SEED, shape, steps, decodes)
    np.save(Path(args.work) / "diffusers_frames.npy", to_uint8(frames))
    res = {"load_s": round(load_s, 2), "end_to_end_s": round(e2e, 3), "s_per_step": median_after_first(steps),
           "step_s": [round(s, 4) for s in steps], "first_step_s": steps[0] if steps else None, "vae_decode_s": sum(decodes), **mem.result(),
           "finite": bool(np.isfinite(frames).all())}
    if args.device == "cuda":
        res["torch_max_allocated_mib"] = torch.cuda.max_memory_allocated() // 2 ** 20
        res["torch_max_reserved_mib"] = torch.cuda.max_memory_reserved() // 2 ** 20
    else:
        import resource

        res["peak_rss_mib"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    return res


def vgen_job_flags(args, shape: dict) -> list[str]:
    return ["--device", "cuda:0" if args.device == "cuda" else "cpu", "--width", str(shape["width"]),
            "--height", str(shape["height"]), "--frames", str(shape["frames"]), "--steps", str(shape["steps"]),
            "--guidance", "5.0", "--negative-prompt", NEGATIVE, "--step-cache", "0"]


def render_vgen(args, package: str, out_name: str, config: dict | None = None, extra: tuple[str, ...] = ()) -> dict:
    work = Path(args.work)
    shape = shapes(args.tiny, args.steps)["single"]
    trace = work / f"{out_name}.trace.json"
    cmd = [args.vgen, "render", PROMPTS[0], "-o", str(work / out_name), "--format", "png", "--model",
           str(work / package), "--seed", str(SEED), "--max-batch", "1", "--trace", str(trace), "--json",
           *vgen_job_flags(args, shape), *extra]
    if config:
        (work / f"{out_name}.config.json").write_text(json.dumps(config))
        cmd += ["--config", str(work / f"{out_name}.config.json")]
    res = run_vgen(args, cmd, f"{out_name}.log")
    res.update(summarise_trace(trace_spans(trace)))
    return res


def phase_vgen_single(args) -> dict:
    res = {"bfloat16": render_vgen(args, "pkg", "vgen_frames")}
    if args.tiny:
        res["float32"] = render_vgen(args, "pkg_f32", "vgen_frames_f32")
    return res


def phase_vgen_single_fusion(args) -> dict:
    return render_vgen(args, "pkg", "vgen_frames_fusion", {"model_backend": {"torchscript_gpu_fusion": True}})


def phase_vgen_fp8(args) -> dict:
    """The single job at fp8 (the bf16 package's transformer_fp8): s/step against vgen_bf16's,
    frames against diffusers bf16 and vgen bf16 (on a CUDA device below capability 8.9 vgen
    refuses the job, exit 2 naming precision: the phase then fails with that message)."""
    import numpy as np

    work = Path(args.work)
    res = render_vgen(args, "pkg", "vgen_frames_fp8", extra=("--precision", "fp8"))
    ours = read_pngs(work / "vgen_frames_fp8")
    res["psnr_vs_diffusers_bf16"] = psnr(ours, np.load(work / "diffusers_frames.npy"))
    res["psnr_vs_vgen_bf16"] = psnr(ours, read_pngs(work / "vgen_frames"))
    return res


def phase_compare(args) -> dict:
    import numpy as np

    work = Path(args.work)
    ref = np.load(work / "diffusers_frames.npy")
    ours = read_pngs(work / "vgen_frames")
    if ours.shape != ref.shape:
        raise RuntimeError(f"frame shapes differ: vgen {ours.shape} vs diffusers {ref.shape}")
    res = {"vgen_bf16_vs_diffusers_bf16": psnr(ours, ref)}
    if args.tiny:
        res["vgen_bf16_vs_vgen_float32"] = psnr(ours, read_pngs(work / "vgen_frames_f32"))
    return res


def phase_diffusers_batch(args) -> dict:
    shape = shapes(args.tiny, args.steps)["batch"]
    with PeakMemory(args.device) as mem:
        pipe = load_pipeline(args)
        timed_call(args, pipe, PROMPTS[0], 0, {**shape, "steps": 1})  # warm-up at this shape, not counted
        t0 = time.perf_counter()
        per_job = [round(timed_call(args, pipe, p, SEED + i, shape)[1], 3) for i, p in enumerate(PROMPTS)]
        total = time.perf_counter() - t0
    return {"jobs": len(PROMPTS), "total_s": round(total, 3), "jobs_per_min": round(60 * len(PROMPTS) / total, 3),
            "job_s": per_job, "shape": shape, **mem.result()}


def phase_vgen_batch(args) -> dict:
    work = Path(args.work)
    shape = shapes(args.tiny, args.steps)["batch"]
    prompts = work / "batch_prompts.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": p, "seed": SEED + i}) + "\n" for i, p in enumerate(PROMPTS)))
    trace = work / "vgen_batch.trace.json"
    cmd = [args.vgen, "batch", str(prompts), "--out", str(work / "vgen_batch"), "--model", str(work / "pkg"),
           "--max-batch", str(len(PROMPTS)), "--trace", str(trace), "--json", "--format", "mp4",
           *vgen_job_flags(args, shape)]
    res = run_vgen(args, cmd, "vgen_batch.log")
    summary = res.get("stdout_json") or {}
    res["trace"] = summarise_trace(trace_spans(trace))
    # Throughput over the jobs' own time (first job start .. last job end), as the loop is timed;
    # process_s adds the model load and warm-up.
    res["jobs"] = len(PROMPTS)
    # The jobs' own span (each job's seconds run from its submission, after the models loaded):
    # the last one's end, comparable with the diffusers loop's total over loaded, warmed models.
    done = [j.get("seconds") for j in summary.get("jobs", [])] if isinstance(summary, dict) else []
    if done and all(isinstance(x, (int, float)) for x in done):
        res["jobs_span_s"] = round(max(done), 3)
        res["jobs_per_min"] = round(60 * len(PROMPTS) / max(done), 3)
    res["jobs_per_min_process"] = round(60 * len(PROMPTS) / res["process_s"], 3)
    res["summary_keys"] = sorted(summary)[:20] if isinstance(summary, dict) else None
    return res


# ----------------------------------------------------------------------------- driver
def run_phase(args) -> int:
    import torch

    torch.set_num_threads(os.cpu_count() or 1)
    out = Path(args.work) / f"phase-{args.phase}.json"
    try:
        res = globals()[f"phase_{args.phase}"](args)
        out.write_text(json.dumps({"status": "ok", "result": res}, default=str))
        return 0
    except Exception as e:  # recorded, the next phases still run
        out.write_text(json.dumps({"status": "failed", "error": f"{type(e).__name__}: {e}"[-3000:],
                                   "traceback": traceback.format_exc()[-3000:]}))
        traceback.print_exc()
        return 1


def write_report(path: Path, report: dict):
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(report, indent=1, default=str))
    tmp.replace(path)


def derive(report: dict):
    """The table's rows, from whatever phases finished."""
    r = {k: v.get("result") for k, v in report["phases"].items() if v.get("status") == "ok"}
    table = {}
    d, v = r.get("diffusers_single"), (r.get("vgen_single") or {}).get("bfloat16")
    for name, x in (("diffusers_bf16", d), ("vgen_bf16", v)):
        if x:
            table[name] = {k: x.get(k) for k in ("s_per_step", "first_step_s", "vae_decode_s", "end_to_end_s", "process_s",
                                                 "nvidia_smi_peak_above_idle_mib", "torch_max_allocated_mib",
                                                 "peak_rss_mib") if k in x}
    if v and isinstance(v.get("stdout_json"), dict):  # the job's own time, submission to its file
        table["vgen_bf16"]["end_to_end_s"] = v["stdout_json"].get("seconds")
        table["vgen_bf16"]["stage_s"] = v["stdout_json"].get("stage_seconds")
    f = r.get("vgen_single_fusion")
    if f:
        table["vgen_bf16_torchscript_gpu_fusion"] = {
            "s_per_step": f.get("s_per_step"), "first_step_s": f.get("first_step_s"), "vae_decode_s": f.get("vae_decode_s"), "process_s": f.get("process_s"),
            "end_to_end_s": (f.get("stdout_json") or {}).get("seconds"),
            "stage_s": (f.get("stdout_json") or {}).get("stage_seconds")}
    q = r.get("vgen_fp8")
    table["vgen_fp8"] = {
        "s_per_step": q.get("s_per_step"), "first_step_s": q.get("first_step_s"), "vae_decode_s": q.get("vae_decode_s"),
        "process_s": q.get("process_s"), "end_to_end_s": (q.get("stdout_json") or {}).get("seconds"),
        **{k: q.get(k) for k in ("nvidia_smi_peak_above_idle_mib", "torch_max_allocated_mib", "peak_rss_mib") if k in q},
        "psnr_vs_diffusers_bf16": q.get("psnr_vs_diffusers_bf16"), "psnr_vs_vgen_bf16": q.get("psnr_vs_vgen_bf16"),
    } if q else "not measured: phase vgen_fp8 did not finish (see phases.vgen_fp8)"
    if r.get("compare"):
        table["psnr"] = r["compare"]
    b = {"diffusers_loop": r.get("diffusers_batch"), "vgen_batch": r.get("vgen_batch")}
    table["batch"] = {k: ({"jobs_per_min": x.get("jobs_per_min") or x.get("jobs_per_min_process"),
                           "total_s": x.get("total_s") or x.get("jobs_span_s") or x.get("process_s"),
                           "process_s": x.get("process_s"),
                           "nvidia_smi_peak_above_idle_mib": x.get("nvidia_smi_peak_above_idle_mib")} if x else None)
                      for k, x in b.items()}
    report["table"] = table


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    ap.add_argument("--tiny", action="store_true")
    ap.add_argument("--vgen", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--budget-s", type=float, default=None,
                    help="all phases together (default 450: the device's 8 minutes less the set-up; --tiny: 1200)")
    ap.add_argument("--steps", type=int, default=None, help="steps of the single-job render")
    ap.add_argument("--text-layers", type=int, default=1, help="real size: UMT5-XXL layers (24 = the real depth)")
    ap.add_argument("--only", default="", help="comma-separated phases to run (default: all)")
    ap.add_argument("--phase", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.phase:
        return run_phase(args)

    if args.budget_s is None:
        args.budget_s = 1200.0 if args.tiny else 450.0
    out, work = Path(args.out), Path(args.work)
    out.mkdir(parents=True, exist_ok=True)
    work.mkdir(parents=True, exist_ok=True)
    report_file = out / "gpu_check.json"
    start = time.perf_counter()
    deadline = start + args.budget_s
    report = {"started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "device": args.device,
              "tiny": args.tiny, "budget_s": args.budget_s, "shapes": shapes(args.tiny, args.steps), "phases": {}}
    if not args.tiny:
        report["note"] = ("single job: fewer steps than Wan's 50 (the budget); a 50-step render's denoise time is "
                          "s_per_step x 50. Text encoder reduced, see phases.build_model.")
    only = set(filter(None, args.only.split(",")))
    failed = False
    for name, share in PHASES:
        if only and name not in only:
            continue
        left = deadline - time.perf_counter()
        if left < 5:
            report["phases"][name] = {"status": "skipped", "error": "out of budget"}
            write_report(report_file, report)
            continue
        if name == "vgen_single_fusion" and args.device != "cuda":  # a CUDA-only setting
            report["phases"][name] = {"status": "skipped", "error": "TorchScript fusion is a CUDA setting"}
            write_report(report_file, report)
            continue
        reserved = sum(s for n, s in PHASES if n not in report["phases"] and n not in OPTIONAL and n != name)
        timeout = left if args.tiny else min(left, share + max(0.0, left - share - reserved))
        print(f"== {name} (time box {timeout:.0f} s)", flush=True)
        cmd = [sys.executable, __file__, "--phase", name] + [a for a in sys.argv[1:]]
        t0 = time.perf_counter()
        # Its own process group: a phase over its time box goes with the vgen it started.
        (work / f"phase-{name}.json").unlink(missing_ok=True)
        child = subprocess.Popen(cmd, start_new_session=True)
        try:
            rc = child.wait(timeout=timeout)
            status = json.loads((work / f"phase-{name}.json").read_text()) if (work / f"phase-{name}.json").is_file() \
                else {"status": "failed", "error": f"exited {rc} without a result"}
        except subprocess.TimeoutExpired:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()
            status = {"status": "timeout", "error": f"over its time box of {timeout:.0f} s"}
        status["seconds"] = round(time.perf_counter() - t0, 2)
        report["phases"][name] = status
        failed |= status["status"] != "ok"
        print(f"== {name}: {status['status']} in {status['seconds']} s", flush=True)
        derive(report)
        report["elapsed_s"] = round(time.perf_counter() - start, 2)
        write_report(report_file, report)
    report["ok"] = not failed
    write_report(report_file, report)
    print(json.dumps(report.get("table", {}), indent=1, default=str))
    return 0 if not failed else 1


if __name__ == "__main__":
    sys.exit(main())
