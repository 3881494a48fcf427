"""The GPU check's phases (tools/vgen_gpu/check.py runs each in its own child process): one
function phase_<name>(args) -> dict per phase, its result recorded as WORK/phase-<name>.json.
The compiled phases (AOTInductor) are in tools/vgen_gpu/compiled.py.

Measures: s/step (median over the steps after the first; diffusers: callback_on_step_end with a
device synchronise; vgen: its trace's denoise-step spans), VAE decode (diffusers: vae.decode
with synchronises; vgen: the trace's device decode spans), end to end (diffusers: the pipeline
call, models already loaded, no file written; vgen: the job's span in the trace from submission
to the end of its decode, the comparable figure, and to its files, plus the whole process,
model load included), peak memory (on CUDA: nvidia-smi's memory.used sampled every 100 ms minus
the idle value, for both, plus torch.cuda.max_memory_allocated/reserved for diffusers; on CPU:
the child's peak RSS).
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

from vgen_gpu.measure import (PeakMemory, batch_after_warmup, completion_rate, median_after_first, psnr, read_pngs,
                              read_trace, run_vgen, summarise_trace, sync, to_uint8)

NEGATIVE = "low quality, blurry, static"
PROMPTS = ["a red circle moving left on a black background", "a blue square bouncing on a green field",
           "a yellow star spinning in a dark room", "a white boat floating on a sandy beach",
           "a black cat jumping in a city street", "a pink flower growing on a snowy mountain",
           "a green car moving right on a blue sky", "an orange fish falling in a white background"]
SEED = 1234
# vgen_batch's warm-up: as many jobs as the batch at its shape with this many steps, before the
# measured jobs (TorchScript's profiling executor profiles a graph's first call and optimises it
# at the second; a third covers a group whose first step ran before all its jobs had joined).
# Never the measured jobs' step count: jobs of equal steps share a denoise group (the tiny
# batch's 3 steps: 2 there).
WARMUP_STEPS = 3
# vgen_leases: the same jobs with 1 and with 2 leases on the device; the first LEASE_WARMUP jobs
# to finish are its warm-up (measure.completion_rate).
LEASES = (1, 2)
LEASE_WARMUP = 2


def shapes(tiny: bool, steps: int | None) -> dict:
    if tiny:
        single = dict(width=48, height=32, frames=9, steps=steps or 4)
        batch = dict(width=32, height=32, frames=5, steps=3)
    else:  # 50 steps do not fit twice in the budget: s/step x 50 is the full render's denoise
        single = dict(width=832, height=480, frames=81, steps=steps or 10)
        batch = dict(width=832, height=480, frames=33, steps=10)
    warmup = WARMUP_STEPS if batch["steps"] != WARMUP_STEPS else WARMUP_STEPS - 1
    # Small enough that one job leaves the GPU idle between its calls (where a second lease pays)
    # and that both runs fit about a minute (docs/PERFORMANCE.md, "Two leases on one GPU").
    leases = dict(width=32, height=32, frames=5, steps=3) if tiny else dict(width=480, height=272, frames=17, steps=6)
    return {"single": single, "batch": {**batch, "jobs": len(PROMPTS), "warmup_steps": warmup},
            "leases": {**leases, "jobs": len(PROMPTS), "warmup_jobs": LEASE_WARMUP, "leases": list(LEASES)}, "guidance": 5.0,
            "seed": SEED, "negative_prompt": NEGATIVE, "scheduler": "the package's (UniPC, flow_shift 3.0)"}


def selected(args) -> set[str]:
    """The phases this run was asked for (check.py's --only, groups expanded): the export writes
    the variants only the selected phases render."""
    from vgen_gpu.plan import expand_only

    return expand_only(args.only)


# ----------------------------------------------------------------------------- set-up phases
def phase_environment(args) -> dict:
    import torch

    res = {"python": sys.version.split()[0], "torch": torch.__version__, "torch_file": torch.__file__,
           "cuda_available": torch.cuda.is_available(), "glibc": os.confstr("CS_GNU_LIBC_VERSION"),
           "platform": platform.platform(), "cpu_count": os.cpu_count(),
           # AOTInductor compiles its wrapper with a C++ compiler, Triton its launcher with a C one
           "compilers": {c: shutil.which(c) for c in ("c++", "g++", "cc", "gcc")},
           "python_h": (Path(sysconfig.get_paths()["include"]) / "Python.h").is_file()}  # Triton's launcher
    try:
        import triton

        res["triton"] = triton.__version__
    except ImportError:
        res["triton"] = None
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
    v = subprocess.run([args.vgen, "--version"], capture_output=True, text=True, timeout=60)
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
    """The bf16 package; its fp8 variant when vgen_fp8 runs, a float32 package (tiny) when compare does."""
    from vgen_export import wan as ew

    work, res, phases = Path(args.work), {}, selected(args)
    for dtype, name in [("bfloat16", "pkg")] + ([("float32", "pkg_f32")] if args.tiny and "compare" in phases else []):
        t0 = time.perf_counter()
        m = ew.export_wan(work / "diffusers", work / name, dtype=dtype, tiny=args.tiny, seed=0,
                          quantize="fp8" if name == "pkg" and "vgen_fp8" in phases else None)
        worst = {k: max(c["max_abs_diff"] for c in v["checks"]) for k, v in m["export_checks"].items()
                 if isinstance(v, dict) and "checks" in v}
        res[dtype] = {"seconds": round(time.perf_counter() - t0, 2), "max_abs_diff_jit_vs_eager": worst,
                      "compact_context": m["transformer"]["compact_context"],
                      "component_dtypes": {k: v.get("dtype") for k, v in m["components"].items()},
                      "component_bytes": {k: v.get("bytes") for k, v in m["components"].items()
                                          if k.startswith("transformer")}}
    return res


# ----------------------------------------------------------------------------- diffusers
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
           "step_s": [round(s, 4) for s in steps], "first_step_s": steps[0] if steps else None,
           "vae_decode_s": sum(decodes), **mem.result(), "finite": bool(np.isfinite(frames).all())}
    if args.device == "cuda":
        res["torch_max_allocated_mib"] = torch.cuda.max_memory_allocated() // 2 ** 20
        res["torch_max_reserved_mib"] = torch.cuda.max_memory_reserved() // 2 ** 20
    else:
        import resource

        res["peak_rss_mib"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    return res


def phase_diffusers_batch(args) -> dict:
    """The 8 jobs as a WanPipeline loop over loaded models, warmed at the shape (one 1-step call)
    before the clock; each job's steps and decode recorded as in the single job."""
    shape = shapes(args.tiny, args.steps)["batch"]
    with PeakMemory(args.device) as mem:
        pipe = load_pipeline(args)
        timed_call(args, pipe, PROMPTS[0], 0, {**shape, "steps": 1})  # warm-up at this shape, not counted
        t0 = time.perf_counter()
        jobs = []
        for i, p in enumerate(PROMPTS):
            steps, decodes = [], []
            e2e = timed_call(args, pipe, p, SEED + i, shape, steps, decodes)[1]
            jobs.append({"end_to_end_s": round(e2e, 4), "s_per_step": median_after_first(steps),
                         "first_step_s": round(steps[0], 4) if steps else None, "step_s": [round(s, 4) for s in steps],
                         "vae_decode_s": round(sum(decodes), 4)})
        total = time.perf_counter() - t0
    later = [s for j in jobs for s in j["step_s"][1:]]  # each job's steps after its first
    return {"jobs": len(PROMPTS), "total_s": round(total, 3), "jobs_per_min": round(60 * len(PROMPTS) / total, 3),
            "job_s": [j["end_to_end_s"] for j in jobs], "s_per_step": statistics.median(later) if later else None,
            "first_step_s": statistics.median(j["first_step_s"] for j in jobs),
            "vae_decode_s": statistics.median(j["vae_decode_s"] for j in jobs),
            "per_job": jobs, "shape": shape, **mem.result()}


# ----------------------------------------------------------------------------- vgen
def vgen_job_flags(args, shape: dict) -> list[str]:
    return ["--device", "cuda:0" if args.device == "cuda" else "cpu", "--width", str(shape["width"]),
            "--height", str(shape["height"]), "--frames", str(shape["frames"]), "--steps", str(shape["steps"]),
            "--guidance", "5.0", "--negative-prompt", NEGATIVE, "--step-cache", "0"]


def render_vgen(args, package: str, out_name: str, config: dict | None = None, extra: tuple[str, ...] = ()) -> dict:
    work = Path(args.work)
    shape = shapes(args.tiny, args.steps)["single"]
    trace = work / f"{out_name}.trace.json"
    shutil.rmtree(work / out_name, ignore_errors=True)  # a rerun on a warm machine (png writes a new directory)
    cmd = [args.vgen, "render", PROMPTS[0], "-o", str(work / out_name), "--format", "png", "--model",
           str(work / package), "--seed", str(SEED), "--max-batch", "1", "--trace", str(trace), "--json",
           *vgen_job_flags(args, shape), *extra]
    if config:
        (work / f"{out_name}.config.json").write_text(json.dumps(config))
        cmd += ["--config", str(work / f"{out_name}.config.json")]
    res = run_vgen(args, cmd, f"{out_name}.log")
    res.update(summarise_trace(read_trace(trace)))
    return res


def phase_vgen_single(args) -> dict:
    res = {"bfloat16": render_vgen(args, "pkg", "vgen_frames")}
    if (Path(args.work) / "pkg_f32").is_dir():
        res["float32"] = render_vgen(args, "pkg_f32", "vgen_frames_f32")
    return res


def phase_vgen_single_fusion(args) -> dict:
    return render_vgen(args, "pkg", "vgen_frames_fusion", {"model_backend": {"torchscript_gpu_fusion": True}})


def phase_vgen_single_cudnn(args) -> dict:
    """vgen_single's job with cuDNN's attention first (model_backend.attention; PyTorch's default
    priority puts it after math, so it is never picked otherwise): s/step against vgen_bf16's,
    frames against diffusers bf16 and vgen bf16, as vgen_fp8's."""
    import numpy as np

    work = Path(args.work)
    res = render_vgen(args, "pkg", "vgen_frames_cudnn", {"model_backend": {"attention": ["cudnn", "flash", "efficient", "math"]}})
    ours = read_pngs(work / "vgen_frames_cudnn")
    res["psnr_vs_diffusers_bf16"] = psnr(ours, np.load(work / "diffusers_frames.npy"))
    res["psnr_vs_vgen_bf16"] = psnr(ours, read_pngs(work / "vgen_frames"))
    return res


def phase_vgen_single_unoptimised(args) -> dict:
    """vgen_single's job with model_backend.torchscript_gpu_optimize false: every TorchScript call
    on the GPU runs as exported (no profiling first call, no optimising second one)."""
    return render_vgen(args, "pkg", "vgen_frames_unoptimised", {"model_backend": {"torchscript_gpu_optimize": False}})


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
    res = {"vgen_bf16_vs_diffusers_bf16": psnr(read_pngs(work / "vgen_frames"), np.load(work / "diffusers_frames.npy"))}
    if (work / "vgen_frames_f32").is_dir():
        res["vgen_bf16_vs_vgen_float32"] = psnr(read_pngs(work / "vgen_frames"), read_pngs(work / "vgen_frames_f32"))
    return res


def phase_vgen_batch(args) -> dict:
    """The 8 jobs through one `vgen batch --max-batch 8`, on the terms diffusers' loop gets: 8
    warm-up jobs at the same shape (warmup_steps steps, their own denoise group: a job of another
    step count never joins it) come first in the same process, and the measured jobs' span is read
    from the trace after it (measure.batch_after_warmup). vgen has no setting that warms a given
    shape at start-up ("warmup" calls each module at the package's smallest size)."""
    work = Path(args.work)
    shape = shapes(args.tiny, args.steps)["batch"]
    prompts = work / "batch_prompts.jsonl"
    lines = [{"prompt": p, "seed": i, "steps": shape["warmup_steps"], "name": f"warmup-{i}"} for i, p in enumerate(PROMPTS)]
    lines += [{"prompt": p, "seed": SEED + i, "name": f"job-{i}"} for i, p in enumerate(PROMPTS)]
    prompts.write_text("".join(json.dumps(x) + "\n" for x in lines))
    trace = work / "vgen_batch.trace.json"
    shutil.rmtree(work / "vgen_batch", ignore_errors=True)  # else a rerun finds the outputs done and skips them
    # One compute thread on the device, as vgen gives a GPU (api/runtime_tuning.cpp): on a CPU
    # the tuner may give two, and the measured group would run beside the warm-up instead of after it.
    config = work / "vgen_batch.config.json"
    config.write_text(json.dumps({"threads": {"per_device": 1}}))
    cmd = [args.vgen, "batch", str(prompts), "--out", str(work / "vgen_batch"), "--model", str(work / "pkg"),
           "--config", str(config), "--max-batch", str(len(PROMPTS)), "--trace", str(trace), "--json",
           "--format", "mp4", *vgen_job_flags(args, shape)]
    res = run_vgen(args, cmd, "vgen_batch.log")
    summary = res.pop("stdout_json", None) or {}
    res.update(batch_after_warmup(read_trace(trace), len(PROMPTS)))
    res["jobs"] = len(PROMPTS)
    res["jobs_per_min"] = round(60 * len(PROMPTS) / res["jobs_span_s"], 3)
    # each job's seconds from its submission (the measured ones' include the warm-up they queued behind)
    res["job_seconds"] = {i["name"]: i["seconds"] for i in summary.get("jobs", [])} if isinstance(summary, dict) else None
    res["jobs_per_min_process"] = round(60 * len(PROMPTS) / res["process_s"], 3)
    return res


def compare_outputs(a: Path, b: Path) -> dict:
    """Which videos of two runs' output folders (by name) are byte for byte the same."""
    def digests(folder: Path) -> dict[str, str]:
        return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.glob("*.mp4"))}
    da, db = digests(a), digests(b)
    both = sorted(set(da) & set(db))
    return {"files": len(both), "identical": sum(da[n] == db[n] for n in both),
            "differing": [n for n in both if da[n] != db[n]],
            "only_in_one": sorted(set(da) ^ set(db))}


def phase_vgen_leases(args) -> dict:
    """8 queued jobs (after LEASE_WARMUP more) through `vgen batch --max-batch 1` with one lease
    on the device and with two (threads.per_gpu on a GPU: two compute threads queueing on the
    device's one CUDA stream; on a CPU threads.per_device), one process each: jobs/min at the
    steady rate (measure.completion_rate), peak memory, the time two model calls ran at once, the
    ratio of the two rates, and which jobs' files differ between the two runs (same jobs, seeds
    and kernels: a file that differs is either a kernel that is not deterministic or two leases
    corrupting each other's tensors, which is what one stream per GPU is there to prevent).
    --max-batch 1: each job is its own denoise group, so that two leases can run two jobs; a
    batch of 8 would be one group on one lease."""
    work = Path(args.work)
    shape = shapes(args.tiny, args.steps)["leases"]
    jobs = LEASE_WARMUP + len(PROMPTS)
    prompts = work / "leases_prompts.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": PROMPTS[i % len(PROMPTS)], "seed": SEED + i, "name": f"job-{i}"}) + "\n"
                               for i in range(jobs)))
    res = {"shape": shape}
    for leases in LEASES:
        name = f"vgen_leases_{leases}"
        threads = {"per_device": 1, "per_gpu": leases} if args.device == "cuda" else {"per_device": leases}
        config = work / f"{name}.config.json"
        config.write_text(json.dumps({"threads": threads}))
        trace = work / f"{name}.trace.json"
        shutil.rmtree(work / name, ignore_errors=True)  # else a rerun finds the outputs done and skips them
        # --log-level info: the leases line below is info (vgen's default is warn)
        cmd = [args.vgen, "--log-level", "info", "batch", str(prompts), "--out", str(work / name), "--model", str(work / "pkg"),
               "--config", str(config), "--max-batch", "1", "--trace", str(trace), "--json", "--format", "mp4",
               *vgen_job_flags(args, shape)]
        run = run_vgen(args, cmd, f"{name}.log")
        run.pop("stdout_json", None)
        run.update(completion_rate(read_trace(trace), LEASE_WARMUP))
        run["threads"] = threads
        # api/compute_devices.cpp logs a GPU's leases and their one stream
        run["stream_lines"] = [l.strip()[-160:] for l in (work / f"{name}.log").read_text().splitlines()
                               if "CUDA stream" in l][:8]
        if run["measured_jobs"] != len(PROMPTS):
            raise RuntimeError(f"{name}: {run['jobs_seen']} jobs in the trace, expected {jobs}")
        if run["compute_threads"] > leases:
            raise RuntimeError(f"{name}: model calls on {run['compute_threads']} compute threads with {leases} lease(s)")
        res[str(leases)] = run
    res["outputs"] = compare_outputs(work / f"vgen_leases_{LEASES[0]}", work / f"vgen_leases_{LEASES[-1]}")
    one, two = res["1"].get("jobs_per_min"), res["2"].get("jobs_per_min")
    res["throughput_ratio_2_vs_1"] = round(two / one, 4) if one and two else None
    peak = "nvidia_smi_peak_above_idle_mib" if args.device == "cuda" else "peak_rss_mib"
    if res["1"].get(peak) and res["2"].get(peak):
        res["peak_memory_ratio_2_vs_1"] = round(res["2"][peak] / res["1"][peak], 4)
    return res
