#!/usr/bin/env python3
"""Real size: Wan2.1-T2V-1.3B's transformer and VAE at their full size (random weights), through
the whole path: diffusers directory -> python -m vgen_export.wan -> vgen load -> vgen render, and
diffusers' WanPipeline on the same directory at the same shape and threads.

    python bench/real_size.py [--work /work/scratch/real13b] [--threads 2] [--steps 3]
                              [--width 64 --height 64 --frames 5] [--keep] [--skip-diffusers]

Nothing is downloaded: the configs are written here (see CONFIG_SOURCES) and the weights are
drawn with torch.manual_seed. The text encoder is a one-layer UMT5 with the real d_model (4096,
the transformer's text_dim) and the tiny test tokenizer; the real one is UMT5-XXL (24 layers).

Each phase runs as its own child process, one after the other (never vgen and diffusers at
once), and its peak RSS is that child's ru_maxrss (os.wait4). Prints a table and writes
bench/out/real_size.json. The work folder (~12 GB: the diffusers directory and the package)
is deleted at the end unless --keep.
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

from common import BIN, OUT, ROOT, VENV_PY, machine, table, write

GB = 1e9
PROMPT = "a red circle moving left on a black background"
NEGATIVE = "low quality, blurry"

# Wan2.1-T2V-1.3B as the Wan team's own config states it (wan/configs/wan_t2v_1_3B.py in
# Wan-Video/Wan2.1: dim 1536, ffn_dim 8960, num_heads 12, num_layers 30, freq_dim 256,
# patch (1,2,2), qk_norm, cross_attn_norm, eps 1e-6); diffusers' single-file loader
# (loaders/single_file_utils.py) names a checkpoint "wan-t2v-1.3B" by its patch embedding's
# 1536 channels. heads x head_dim = 12 x 128 = 1536. Everything else is diffusers'
# WanTransformer3DModel default (text_dim 4096 = UMT5-XXL's d_model, rope_max_seq_len 1024).
TRANSFORMER = dict(patch_size=(1, 2, 2), num_attention_heads=12, attention_head_dim=128, in_channels=16,
                   out_channels=16, text_dim=4096, freq_dim=256, ffn_dim=8960, num_layers=30,
                   cross_attn_norm=True, qk_norm="rms_norm_across_heads", eps=1e-6, rope_max_seq_len=1024)
# Wan 2.1's VAE is AutoencoderKLWan's default config (base_dim 96, z_dim 16, dim_mult
# [1,2,4,4], 2 res blocks, temporal downsampling [False,True,True], the 16 latents_mean/std):
# diffusers' single-file loader maps every Wan VAE checkpoint to the same repo config.
VAE: dict = {}
# UniPC flow-matching with flow_shift 3.0: WanPipeline's docstring ("3.0 for 480P").
SCHEDULER = dict(num_train_timesteps=1000, prediction_type="flow_prediction", use_flow_sigmas=True,
                 flow_shift=3.0, solver_order=2)
CONFIG_SOURCES = {"transformer": "Wan-Video/Wan2.1 wan/configs/wan_t2v_1_3B.py + diffusers defaults",
                  "vae": "diffusers AutoencoderKLWan defaults (= Wan 2.1 VAE)",
                  "scheduler": "diffusers WanPipeline docstring (UniPC, flow_shift 3.0 for 480p)",
                  "text_encoder": "UMT5 d_model 4096 (UMT5-XXL's), 1 layer, d_ff 256, 4 heads: NOT the real encoder"}


# --------------------------------------------------------------------------- child phases
def phase_build(work: Path, seed: int) -> dict:
    """The diffusers directory: save_pretrained of a WanPipeline with full-size random parts."""
    import torch
    from diffusers import AutoencoderKLWan, UniPCMultistepScheduler, WanPipeline, WanTransformer3DModel
    from transformers import UMT5Config, UMT5EncoderModel
    from vgen_export.tiny_wan import SPM_FILE_NAME, tokenizer_from_spm, train_tiny_spm

    spm = train_tiny_spm(work / SPM_FILE_NAME, seed=seed)
    tokenizer = tokenizer_from_spm(spm)
    torch.manual_seed(seed)
    t0 = time.perf_counter()
    encoder = UMT5EncoderModel(UMT5Config(vocab_size=len(tokenizer), d_model=4096, d_kv=64, d_ff=256, num_layers=1,
                                          num_heads=4, feed_forward_proj="gated-gelu", dropout_rate=0.0,
                                          is_encoder_decoder=False, use_cache=False)).eval()
    transformer = WanTransformer3DModel(**TRANSFORMER).eval()
    vae = AutoencoderKLWan(**VAE).eval()
    built = time.perf_counter() - t0
    pipe = WanPipeline(tokenizer=tokenizer, text_encoder=encoder, transformer=transformer, vae=vae,
                       scheduler=UniPCMultistepScheduler(**SCHEDULER))
    out = work / "diffusers"
    pipe.save_pretrained(out, safe_serialization=True, max_shard_size="20GB")
    shutil.copyfile(spm, out / "tokenizer" / SPM_FILE_NAME)
    count = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731
    return {"init_seconds": built, "params": {"transformer": count(transformer), "vae": count(vae),
                                              "text_encoder": count(encoder)}}


def phase_diffusers(work: Path, a) -> dict:
    """WanPipeline.from_pretrained on the directory, then one clip; per-step times from the
    transformer's first call of a step to the step-end callback."""
    import torch
    from diffusers import WanPipeline

    torch.set_num_threads(a.threads)
    t0, c0 = time.perf_counter(), time.process_time()
    pipe = WanPipeline.from_pretrained(work / "diffusers", torch_dtype=torch.float32)
    pipe.set_progress_bar_config(disable=True)
    load, load_cpu = time.perf_counter() - t0, time.process_time() - c0
    marks: dict[str, list[float]] = {"first_call": [], "end": []}

    def pre_hook(_m, _args):
        if len(marks["first_call"]) == len(marks["end"]):
            marks["first_call"].append(time.perf_counter())

    def on_end(_pipe, _i, _t, kwargs):
        marks["end"].append(time.perf_counter())
        return kwargs

    pipe.transformer.register_forward_pre_hook(pre_hook)
    t1 = time.perf_counter()
    with torch.no_grad():
        pipe(prompt=PROMPT, negative_prompt=NEGATIVE, height=a.height, width=a.width, num_frames=a.frames,
             num_inference_steps=a.steps, guidance_scale=5.0, generator=torch.Generator().manual_seed(0),
             output_type="np", callback_on_step_end=on_end)
    total = time.perf_counter() - t1
    steps = [e - s for s, e in zip(marks["first_call"], marks["end"])]
    return {"load_seconds": load, "load_cpu_seconds": load_cpu, "render_seconds": total, "step_seconds": steps,
            "threads": torch.get_num_threads()}


# --------------------------------------------------------------------------- parent
CPU_SECONDS: dict[str, float] = {}  # the last child's user + system CPU seconds ("last")


def timed_child(cmd: list[str], env: dict | None = None) -> tuple[str, float, int, str]:
    """Runs cmd; returns (stdout, wall seconds, peak RSS bytes, stderr): the child's own peak
    RSS (ru_maxrss of os.wait4 on its pid). Its CPU seconds go to CPU_SECONDS["last"]: on a
    shared machine wall time includes waiting for a core, CPU time does not."""
    t0 = time.perf_counter()
    with open(os.devnull, "rb") as devnull:
        p = subprocess.Popen(cmd, stdin=devnull, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env=env, cwd=ROOT)
    out, err = [], []
    import threading

    readers = [threading.Thread(target=lambda s, b: b.append(s.read()), args=(s, b)) for s, b in
               ((p.stdout, out), (p.stderr, err))]
    for r in readers:
        r.start()
    _, status, usage = os.wait4(p.pid, 0)
    for r in readers:
        r.join()
    p.returncode = os.waitstatus_to_exitcode(status)
    CPU_SECONDS["last"] = usage.ru_utime + usage.ru_stime
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, cmd[:4]))} failed ({p.returncode}):\n{''.join(err)[-4000:]}")
    return "".join(out), wall, usage.ru_maxrss * 1024, "".join(err)


def free_gb() -> float:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024 / GB
    return float("nan")


def step_spans(trace: Path) -> list[float]:
    events = json.loads(trace.read_text())["traceEvents"]
    return [e["dur"] / 1e6 for e in sorted((e for e in events if e.get("name") == "denoise step"), key=lambda e: e["ts"])]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", type=Path, default=Path("/work/scratch/real13b"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--width", type=int, default=64)
    ap.add_argument("--height", type=int, default=64)
    ap.add_argument("--frames", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--keep", action="store_true", help="keep the work folder")
    ap.add_argument("--skip-diffusers", action="store_true")
    ap.add_argument("--layers", type=int, default=TRANSFORMER["num_layers"],
                    help="transformer blocks (30: the real 1.3B; fewer for a quicker, smaller run)")
    ap.add_argument("--phase", choices=["build", "diffusers"], help=argparse.SUPPRESS)  # child mode
    a = ap.parse_args()
    TRANSFORMER["num_layers"] = a.layers
    if a.phase:
        print(json.dumps(phase_build(a.work, a.seed) if a.phase == "build" else phase_diffusers(a.work, a)))
        return
    env = {**os.environ, "OMP_NUM_THREADS": str(a.threads)}
    me = [str(VENV_PY), str(Path(__file__).resolve()), "--work", str(a.work), "--threads", str(a.threads),
          "--steps", str(a.steps), "--width", str(a.width), "--height", str(a.height), "--frames", str(a.frames), "--layers", str(a.layers)]
    a.work.mkdir(parents=True, exist_ok=True)
    pkg, result = a.work / "pkg", {"machine": machine(), "params": {k: str(v) for k, v in vars(a).items()},
                                   "config_sources": CONFIG_SOURCES, "transformer_config": TRANSFORMER}
    result["mem_available_gb_start"] = free_gb()
    try:
        if not (a.work / "diffusers" / "model_index.json").exists():
            out, wall, rss, _ = timed_child(me + ["--phase", "build"], env)
            result["build"] = {**json.loads(out.splitlines()[-1]), "wall_seconds": wall, "peak_rss_gb": rss / GB,
                               "cpu_seconds": CPU_SECONDS["last"]}
            print(f"built the diffusers directory in {wall:.0f} s (peak RSS {rss / GB:.2f} GB)", file=sys.stderr)
        if not (pkg / "manifest.json").exists():
            _, wall, rss, _ = timed_child([str(VENV_PY), "-m", "vgen_export.wan", "--diffusers", str(a.work / "diffusers"),
                                           "--out", str(pkg), "--threads", str(a.threads)], env)
            result["export"] = {"wall_seconds": wall, "peak_rss_gb": rss / GB, "cpu_seconds": CPU_SECONDS["last"]}
            print(f"exported in {wall:.0f} s (peak RSS {rss / GB:.2f} GB)", file=sys.stderr)
        manifest = json.loads((pkg / "manifest.json").read_text())
        sizes = {n: c["bytes"] for n, c in manifest["components"].items()}
        result["component_bytes"] = sizes
        weights = sum(v for k, v in sizes.items() if k != "tokenizer")

        out, wall, rss, _ = timed_child([str(BIN / "bench_load"), "--model", str(pkg)], env)
        result["vgen_load"] = {**json.loads(out), "wall_seconds": wall, "peak_rss_gb": rss / GB,
                               "cpu_seconds": CPU_SECONDS["last"], "loadavg_1m": os.getloadavg()[0]}
        print(f"vgen load: {wall:.1f} s, peak RSS {rss / GB:.2f} GB for {weights / GB:.2f} GB of weights",
              file=sys.stderr)

        trace, video = a.work / "trace.json", a.work / "vgen.mp4"
        out, wall, rss, _ = timed_child([str(BIN / "vgen"), "render", PROMPT, "-o", str(video), "--model", str(pkg),
                                         "--width", str(a.width), "--height", str(a.height), "--frames", str(a.frames),
                                         "--steps", str(a.steps), "--guidance", "5", "--negative-prompt", NEGATIVE,
                                         "--seed", "0", "--trace", str(trace), "--json"], env)
        job = json.loads(out.splitlines()[-1])
        result["vgen_render"] = {"wall_seconds": wall, "peak_rss_gb": rss / GB, "step_seconds": step_spans(trace),
                                 "cpu_seconds": CPU_SECONDS["last"], "loadavg_1m": os.getloadavg()[0],
                                 "stage_seconds": job["stage_seconds"]}
        print(f"vgen render: {wall:.1f} s, peak RSS {rss / GB:.2f} GB, steps {result['vgen_render']['step_seconds']}",
              file=sys.stderr)

        if not a.skip_diffusers:
            out, wall, rss, _ = timed_child(me + ["--phase", "diffusers"], env)
            result["diffusers"] = {**json.loads(out.splitlines()[-1]), "wall_seconds": wall, "peak_rss_gb": rss / GB,
                                   "cpu_seconds": CPU_SECONDS["last"], "loadavg_1m": os.getloadavg()[0]}
            print(f"diffusers: {wall:.1f} s, peak RSS {rss / GB:.2f} GB, steps {result['diffusers']['step_seconds']}",
                  file=sys.stderr)
    finally:
        if not a.keep:
            shutil.rmtree(a.work, ignore_errors=True)
    result["weights_gb"] = weights / GB
    rows = [["vgen", f"{result['vgen_load']['total_seconds']:.1f}", f"{result['vgen_render']['peak_rss_gb']:.2f}",
             " / ".join(f"{s:.2f}" for s in result["vgen_render"]["step_seconds"]),
             f"{result['vgen_render']['wall_seconds']:.1f}"]]
    if "diffusers" in result:
        d = result["diffusers"]
        rows.append(["diffusers", f"{d['load_seconds']:.1f}", f"{d['peak_rss_gb']:.2f}",
                     " / ".join(f"{s:.2f}" for s in d["step_seconds"]), f"{d['wall_seconds']:.1f}"])
    print(f"\nreal size Wan2.1-T2V-1.3B (random weights), {a.width}x{a.height}, {a.frames} frames, {a.steps} steps, "
          f"guidance 5, {a.threads} threads; weights {weights / GB:.2f} GB")
    print(table(["runtime", "load s", "peak RSS GB", "s per step", "process wall s"], rows))
    print(f"load average (1 min) during the phases: vgen {result['vgen_render']['loadavg_1m']:.1f}"
          + (f", diffusers {result['diffusers']['loadavg_1m']:.1f}" if "diffusers" in result else ""))
    write("real_size", result)


if __name__ == "__main__":
    main()
