#!/usr/bin/env python3
"""Real size: a family's published configuration (random weights) through the whole path: a
diffusers directory -> python -m vgen_export.<family> -> vgen load -> vgen render, and the
diffusers pipeline on the same directory at the same shape and threads.

    python bench/real_size.py [--family wan|ltx2|hunyuan15] [--layers N] [--work DIR] [--threads 2]
                              [--steps 3] [--width 64 --height 64 --frames 5] [--keep] [--skip-diffusers]

Families (each builder's docstring names the source of every number and what it reduces):
- wan (default): Wan2.1-T2V-1.3B, built here (see CONFIG_SOURCES). The text encoder is a
  one-layer UMT5 with the real d_model (4096) and the tiny test tokenizer.
- ltx2: LTX-2 19B (vgen_export.ltx2_19b): transformer, connectors and one Gemma 3 12B-wide layer
  in bfloat16 (the released dtype), video VAE, audio VAE and vocoder in float32 at full size.
- hunyuan15: HunyuanVideo 1.5 480p T2V (vgen_export.hunyuan15_480p), float32; 3 Qwen 2.5-VL
  7B-wide layers, ByT5-small at full size, the VAE at full size.
--layers N keeps N of the transformer's blocks at the published width (every block is the same
size, so s/step scales to the full depth: the bench prints that estimate and its arithmetic).

Nothing is downloaded: configs are written by the builders and the weights are drawn with
torch.manual_seed. Each phase runs as its own child process, one after the other (never vgen and
diffusers at once), and its peak RSS is that child's ru_maxrss (os.wait4). Prints a table and
writes bench/out/real_size[_FAMILY].json. The work folder is deleted at the end unless --keep.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

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


# --------------------------------------------------------------------------- families
@dataclass(frozen=True)
class Family:
    title: str
    layers: int                      # the published depth
    exporter: Callable[[Path, Path, int], list[str]]  # (diffusers dir, package, threads) -> argv after python
    width: int = 64
    height: int = 64
    frames: int = 5
    guidance: float = 5.0


FAMILIES = {
    "wan": Family("Wan2.1-T2V-1.3B", 30, lambda d, p, t: ["-m", "vgen_export.wan", "--diffusers", str(d), "--out",
                                                        str(p), "--threads", str(t)]),
    # Both exported in bfloat16, the dtype their parts were saved in (the VAEs stay float32).
    "ltx2": Family("LTX-2 19B (T2V with audio)", 48, lambda d, p, t: ["-m", "vgen_export.ltx2", str(p), "--diffusers",
                                                                   str(d), "--threads", str(t), "--dtype", "bfloat16"],
                   frames=9, guidance=4.0),
    "hunyuan15": Family("HunyuanVideo 1.5 480p T2V", 54, lambda d, p, t: ["-m", "vgen_export.hunyuan15", "--diffusers",
                                                                        str(d), "--out", str(p), "--threads", str(t),
                                                                        "--dtype", "bfloat16"],
                        guidance=6.0),
}
# LTX2Pipeline with classifier-free guidance only, the guidance vgen's ltx2 family runs (as the
# parity reference tools/reference/ltx2_parity.py calls it).
LTX2_CFG_ONLY = dict(stg_scale=0.0, modality_scale=1.0, guidance_rescale=0.0, audio_guidance_scale=None,
                     audio_stg_scale=0.0, audio_modality_scale=1.0, audio_guidance_rescale=0.0,
                     spatio_temporal_guidance_blocks=None, frame_rate=24.0)


def safetensors_params(diffusers_dir: Path) -> dict[str, int]:
    """Parameters per component, read from the safetensors headers (nothing is loaded)."""
    counts: dict[str, int] = {}
    for f in sorted(diffusers_dir.glob("*/*.safetensors")):
        n = int.from_bytes(f.open("rb").read(8), "little")
        with f.open("rb") as fh:
            fh.seek(8)
            header = json.loads(fh.read(n))
        total = 0
        for name, meta in header.items():
            if name != "__metadata__":
                size = 1
                for d in meta["shape"]:
                    size *= d
                total += size
        counts[f.parent.name] = counts.get(f.parent.name, 0) + total
    return counts


# --------------------------------------------------------------------------- child phases
def build_wan(out: Path, a) -> None:
    """save_pretrained of a WanPipeline with full-size random parts."""
    import torch
    from diffusers import AutoencoderKLWan, UniPCMultistepScheduler, WanPipeline, WanTransformer3DModel
    from transformers import UMT5Config, UMT5EncoderModel
    from vgen_export.tiny_wan import SPM_FILE_NAME, tokenizer_from_spm, train_tiny_spm

    spm = train_tiny_spm(out.parent / SPM_FILE_NAME, seed=a.seed)
    tokenizer = tokenizer_from_spm(spm)
    torch.manual_seed(a.seed)
    encoder = UMT5EncoderModel(UMT5Config(vocab_size=len(tokenizer), d_model=4096, d_kv=64, d_ff=256, num_layers=1,
                                          num_heads=4, feed_forward_proj="gated-gelu", dropout_rate=0.0,
                                          is_encoder_decoder=False, use_cache=False)).eval()
    transformer = WanTransformer3DModel(**{**TRANSFORMER, "num_layers": a.layers}).eval()
    vae = AutoencoderKLWan(**VAE).eval()
    pipe = WanPipeline(tokenizer=tokenizer, text_encoder=encoder, transformer=transformer, vae=vae,
                       scheduler=UniPCMultistepScheduler(**SCHEDULER))
    pipe.save_pretrained(out, safe_serialization=True, max_shard_size="20GB")
    shutil.copyfile(spm, out / "tokenizer" / SPM_FILE_NAME)


def phase_build(work: Path, a) -> dict:
    """The diffusers directory of the family's published configuration, random weights."""
    import torch

    t0 = time.perf_counter()
    out = work / "diffusers"
    if a.family == "wan":
        build_wan(out, a)
        described = CONFIG_SOURCES
    elif a.family == "ltx2":
        from vgen_export import ltx2_19b

        ltx2_19b.write_ltx2_19b(out, layers=a.layers, seed=a.seed)
        described = ltx2_19b.describe(a.layers, 1, "torch.bfloat16")
    else:
        from vgen_export import hunyuan15_480p

        hunyuan15_480p.write_hunyuan15_480p(out, layers=a.layers, seed=a.seed, dtype=torch.bfloat16)
        described = hunyuan15_480p.describe(a.layers, 3, "torch.bfloat16")
    return {"init_and_save_seconds": time.perf_counter() - t0, "params": safetensors_params(out),
            "components": described}


def load_pipeline(a):
    """The family's diffusers pipeline from the directory, each part in the dtype it was saved in.
    The video VAE is loaded first and its encoder dropped: text-to-video never calls it, and the
    LTX-2 and HunyuanVideo 1.5 encoders are 2.8 and 1.6 GB in float32 (the peak would otherwise
    hold them beside everything else)."""
    import gc

    import torch

    src = a.work / "diffusers"
    if a.family == "wan":
        from diffusers import WanPipeline

        return WanPipeline.from_pretrained(src, torch_dtype=torch.float32)
    bf16 = torch.bfloat16
    if a.family == "ltx2":
        from diffusers import AutoencoderKLLTX2Video as Vae
        from diffusers import LTX2Pipeline as Pipeline
        from diffusers import LTX2VideoTransformer3DModel as Transformer
        from diffusers.pipelines.ltx2 import LTX2TextConnectors
        from transformers import Gemma3ForConditionalGeneration as TextEncoder

        extra = lambda: {"connectors": LTX2TextConnectors.from_pretrained(src, subfolder="connectors",  # noqa: E731
                                                                          torch_dtype=bf16)}
    else:
        from diffusers import AutoencoderKLHunyuanVideo15 as Vae
        from diffusers import HunyuanVideo15Pipeline as Pipeline
        from diffusers import HunyuanVideo15Transformer3DModel as Transformer
        from transformers import Qwen2_5_VLTextModel as TextEncoder
        from transformers import T5EncoderModel

        extra = lambda: {"text_encoder_2": T5EncoderModel.from_pretrained(src / "text_encoder_2",  # noqa: E731
                                                                          dtype=bf16).eval()}
    vae = Vae.from_pretrained(src, subfolder="vae", torch_dtype=torch.float32).eval()
    del vae.encoder
    gc.collect()
    return Pipeline.from_pretrained(
        src, torch_dtype=torch.float32, vae=vae,
        transformer=Transformer.from_pretrained(src, subfolder="transformer", torch_dtype=bf16).eval(),
        text_encoder=TextEncoder.from_pretrained(src / "text_encoder", dtype=bf16).eval(), **extra())


def phase_diffusers(work: Path, a) -> dict:
    """The pipeline on the directory, then one clip. A step runs from the transformer's first
    call after the previous step to its last scheduler step (LTX-2 steps video and audio); the
    transformer blocks' own time is summed per step (forward hooks), which is what scales with
    --layers."""
    import torch

    torch.set_num_threads(a.threads)
    t0, c0 = time.perf_counter(), time.process_time()
    pipe = load_pipeline(a)
    pipe.set_progress_bar_config(disable=True)
    load, load_cpu = time.perf_counter() - t0, time.process_time() - c0
    spans: list[list] = []  # [start, end, seconds inside the blocks]
    block_start: list[float] = []

    def pre_hook(_m, _args):
        if not spans or spans[-1][1] is not None:
            spans.append([time.perf_counter(), None, 0.0])

    def block_pre(_m, _args):
        block_start.append(time.perf_counter())

    def block_post(_m, _args, _out):
        spans[-1][2] += time.perf_counter() - block_start.pop()

    scheduler_cls = type(pipe.scheduler)
    original_step = scheduler_cls.step

    def step(self, *args, **kwargs):
        out = original_step(self, *args, **kwargs)
        spans[-1][1] = time.perf_counter()
        return out

    pipe.transformer.register_forward_pre_hook(pre_hook)
    blocks = getattr(pipe.transformer, "transformer_blocks", None) or pipe.transformer.blocks
    for block in blocks:
        block.register_forward_pre_hook(block_pre)
        block.register_forward_hook(block_post)
    family = FAMILIES[a.family]
    call = dict(prompt=PROMPT, negative_prompt=NEGATIVE, height=a.height, width=a.width, num_frames=a.frames,
                num_inference_steps=a.steps, generator=torch.Generator().manual_seed(0), output_type="np")
    if a.family == "ltx2":
        call.update(LTX2_CFG_ONLY, guidance_scale=family.guidance)
    elif a.family == "hunyuan15":
        pipe.guider.guidance_scale = family.guidance  # the guider carries the scale, not the call
    else:
        call.update(guidance_scale=family.guidance)
    scheduler_cls.step = step
    t1 = time.perf_counter()
    try:
        with torch.no_grad():
            pipe(**call)
    finally:
        scheduler_cls.step = original_step
    total = time.perf_counter() - t1
    return {"load_seconds": load, "load_cpu_seconds": load_cpu, "render_seconds": total,
            "step_seconds": [e - s for s, e, _ in spans], "block_seconds": [b for _, _, b in spans],
            "blocks": len(blocks), "threads": torch.get_num_threads()}


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


def full_depth_estimate(steps: list[float], blocks: list[float] | None, layers: int, full: int,
                        block_share: float | None) -> dict | None:
    """Steady s/step (the mean of steps 2.., or the only step) scaled to the published depth:
    the part outside the blocks stays, the blocks' part grows by full / layers. Diffusers gives
    the blocks' time itself (hooks); for vgen (TorchScript, no hooks) the share of the step that
    diffusers spent in the blocks is assumed: said so in the result."""
    steady = steps[1:] or steps
    if not steady:
        return None
    step = sum(steady) / len(steady)
    if blocks is not None:
        inside = sum(blocks[1:] or blocks) / len(steady)
        share, how = inside / step, "measured (block forward hooks)"
    elif block_share is not None:
        share, how = block_share, "assumed: the diffusers run's share of the step inside the blocks"
    else:
        return None
    per_block = step * share / layers
    estimate = step * (1 - share) + per_block * full
    return {"steady_step_seconds": step, "block_share": share, "block_share_source": how,
            "per_block_seconds": per_block, "full_depth_step_seconds": estimate,
            "arithmetic": f"{step:.2f} s x (1 - {share:.3f}) + {per_block:.3f} s/block x {full} blocks = {estimate:.1f} s"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--family", choices=sorted(FAMILIES), default="wan")
    ap.add_argument("--work", type=Path, default=None, help="default /work/scratch/real13b (wan), "
                                                            "/work/scratch/realsize_FAMILY (others)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--width", type=int, default=None, help="default: the family's smallest practical size (64)")
    ap.add_argument("--height", type=int, default=None)
    ap.add_argument("--frames", type=int, default=None, help="default 5 (ltx2: 9, its 8k+1 rule)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--keep", action="store_true", help="keep the work folder")
    ap.add_argument("--skip-diffusers", action="store_true")
    ap.add_argument("--layers", type=int, default=None,
                    help="transformer blocks at the published width (default: the published depth)")
    ap.add_argument("--phase", choices=["build", "diffusers"], help=argparse.SUPPRESS)  # child mode
    a = ap.parse_args()
    family = FAMILIES[a.family]
    a.layers = a.layers or family.layers
    a.width, a.height, a.frames = a.width or family.width, a.height or family.height, a.frames or family.frames
    a.work = a.work or Path("/work/scratch/real13b" if a.family == "wan" else f"/work/scratch/realsize_{a.family}")
    if a.phase:
        print(json.dumps(phase_build(a.work, a) if a.phase == "build" else phase_diffusers(a.work, a)))
        return
    env = {**os.environ, "OMP_NUM_THREADS": str(a.threads),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "tools"), os.environ.get("PYTHONPATH")]))}
    me = [str(VENV_PY), str(Path(__file__).resolve()), "--family", a.family, "--work", str(a.work), "--threads",
          str(a.threads), "--steps", str(a.steps), "--width", str(a.width), "--height", str(a.height), "--frames",
          str(a.frames), "--layers", str(a.layers), "--seed", str(a.seed)]
    a.work.mkdir(parents=True, exist_ok=True)
    pkg, result = a.work / "pkg", {"machine": machine(), "family": a.family, "title": family.title,
                                   "params": {k: str(v) for k, v in vars(a).items()},
                                   "published_layers": family.layers}
    if a.family == "wan":
        result.update(config_sources=CONFIG_SOURCES, transformer_config={**TRANSFORMER, "num_layers": a.layers})
    result["mem_available_gb_start"] = free_gb()
    try:
        if not (a.work / "diffusers" / "model_index.json").exists():
            out, wall, rss, _ = timed_child(me + ["--phase", "build"], env)
            result["build"] = {**json.loads(out.splitlines()[-1]), "wall_seconds": wall, "peak_rss_gb": rss / GB,
                               "cpu_seconds": CPU_SECONDS["last"]}
            print(f"built the diffusers directory in {wall:.0f} s (peak RSS {rss / GB:.2f} GB)", file=sys.stderr)
        if not (pkg / "manifest.json").exists():
            _, wall, rss, _ = timed_child([str(VENV_PY), *family.exporter(a.work / "diffusers", pkg, a.threads)], env)
            result["export"] = {"wall_seconds": wall, "peak_rss_gb": rss / GB, "cpu_seconds": CPU_SECONDS["last"]}
            print(f"exported in {wall:.0f} s (peak RSS {rss / GB:.2f} GB)", file=sys.stderr)
        manifest = json.loads((pkg / "manifest.json").read_text())
        # A split component's weights are the .safetensors beside its .pt (docs/MODEL_PACKAGE.md).
        sizes = {n: c["bytes"] + (lambda w: w.stat().st_size if w.exists() else 0)((pkg / c["file"]).with_suffix(
                     ".safetensors")) for n, c in manifest["components"].items()}
        result["component_bytes"] = sizes
        result["export_checks_max_abs_diff"] = {
            name: max((c.get("max_abs_diff", 0.0) for c in check.get("checks", [])), default=None)
            for name, check in manifest.get("export_checks", {}).items() if isinstance(check, dict)}
        weights = sum(v for k, v in sizes.items() if k != "tokenizer")

        out, wall, rss, _ = timed_child([str(BIN / "bench_load"), "--model", str(pkg)], env)
        result["vgen_load"] = {**json.loads(out), "wall_seconds": wall, "peak_rss_gb": rss / GB,
                               "cpu_seconds": CPU_SECONDS["last"], "loadavg_1m": os.getloadavg()[0]}
        print(f"vgen load: {wall:.1f} s, peak RSS {rss / GB:.2f} GB for {weights / GB:.2f} GB of weights",
              file=sys.stderr)

        trace, video = a.work / "trace.json", a.work / "vgen.mp4"
        out, wall, rss, _ = timed_child([str(BIN / "vgen"), "render", PROMPT, "-o", str(video), "--model", str(pkg),
                                         "--width", str(a.width), "--height", str(a.height), "--frames", str(a.frames),
                                         "--steps", str(a.steps), "--guidance", str(family.guidance),
                                         "--negative-prompt", NEGATIVE, "--seed", "0", "--trace", str(trace),
                                         "--json"], env)
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
    d = result.get("diffusers")
    if d:
        d["full_depth_estimate"] = full_depth_estimate(d["step_seconds"], d["block_seconds"], a.layers, family.layers,
                                                       None)
    share = d["full_depth_estimate"]["block_share"] if d and d["full_depth_estimate"] else None
    result["vgen_render"]["full_depth_estimate"] = full_depth_estimate(result["vgen_render"]["step_seconds"], None,
                                                                       a.layers, family.layers, share)
    rows = [["vgen", f"{result['vgen_load']['total_seconds']:.1f}", f"{result['vgen_render']['peak_rss_gb']:.2f}",
             " / ".join(f"{s:.2f}" for s in result["vgen_render"]["step_seconds"]),
             f"{result['vgen_render']['wall_seconds']:.1f}"]]
    if d:
        rows.append(["diffusers", f"{d['load_seconds']:.1f}", f"{d['peak_rss_gb']:.2f}",
                     " / ".join(f"{s:.2f}" for s in d["step_seconds"]), f"{d['wall_seconds']:.1f}"])
    print(f"\nreal size {family.title} (random weights), {a.layers} of {family.layers} blocks, {a.width}x{a.height}, "
          f"{a.frames} frames, {a.steps} steps, guidance {family.guidance}, {a.threads} threads; "
          f"weights {weights / GB:.2f} GB")
    print(table(["runtime", "load s", "peak RSS GB", "s per step", "process wall s"], rows))
    for name, part in (("export", result.get("export")), ("build", result.get("build"))):
        if part:
            print(f"{name}: {part['wall_seconds']:.0f} s wall, {part['cpu_seconds']:.0f} s CPU, "
                  f"peak RSS {part['peak_rss_gb']:.2f} GB")
    for name, est in (("vgen", result["vgen_render"]["full_depth_estimate"]),
                      ("diffusers", d["full_depth_estimate"] if d else None)):
        if est:
            print(f"estimate at {family.layers} blocks, {name}: {est['arithmetic']} ({est['block_share_source']})")
    print(f"load average (1 min) during the phases: vgen {result['vgen_render']['loadavg_1m']:.1f}"
          + (f", diffusers {d['loadavg_1m']:.1f}" if d else ""))
    write("real_size" if a.family == "wan" else f"real_size_{a.family}", result)


if __name__ == "__main__":
    main()
