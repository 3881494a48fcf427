"""The GPU check's step profile (issue 30): where one denoiser call's time goes on the device, to
test the arithmetic docs/PERFORMANCE.md plans with ("attention is 71 % of a step's FLOPs at
832x480x81, so fp8 Linears cannot make a step 1.3x faster") and to size what CUDA graphs could
save (the time between kernels).

step_profile: diffusers' WanTransformer3DModel from WORK/diffusers in bf16 (the same kernels as
vgen's step within rounding: both call PyTorch's ops; vgen's s/step equals diffusers'), one
call at the single job's shape with the CFG pair as two rows (as vgen calls it), after two
warm-up calls; three timed calls (synchronised wall clock, median), then one under
torch.profiler. Kernel time is split by kernel name into attention, matrix products and the
rest, beside the FLOPs of each (counted from the model's config: Linear weights x tokens x 2;
attention 4 x tokens x keys x width per row and layer, self and cross) and the rate each
achieved. gap_ms: the call's wall time less its kernels' time (launches, host work, idle).
On --device cpu --tiny: the tiny model at its small shape, CPU ops by self time, the same keys.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

from vgen_gpu.measure import sync
from vgen_gpu.phases import shapes

ATTENTION = ("flash", "fmha", "attention", "sdpa", "attn")
MATMUL = ("gemm", "cutlass", "xmma", "nvjet", "cublas", "addmm", "aten::mm", "aten::bmm", "matmul", "linear")


def category(name: str) -> str:
    n = name.lower()
    if any(k in n for k in ATTENTION):
        return "attention"
    if any(k in n for k in MATMUL):
        return "matmul"
    return "other"


def flops(transformer, rows: int, tokens: int, text: int) -> dict:
    import torch

    cfg = transformer.config
    width = cfg.num_attention_heads * cfg.attention_head_dim
    layers = len(transformer.blocks)
    linear = sum(m.weight.numel() for m in transformer.blocks.modules() if isinstance(m, torch.nn.Linear))
    # cross-attention's keys and values project the text, not the video tokens
    kv_cross = sum(m.weight.numel() for n, m in transformer.blocks.named_modules()
                   if isinstance(m, torch.nn.Linear) and ".attn2." in f".{n}." and n.split(".")[-1] in ("to_k", "to_v"))
    return {"matmul": 2.0 * rows * (tokens * (linear - kv_cross) + text * kv_cross),
            "attention": 4.0 * rows * layers * width * (tokens * tokens + tokens * text)}


def phase_step_profile(args) -> dict:
    import torch
    from diffusers import WanTransformer3DModel

    work = Path(args.work)
    shape = shapes(args.tiny, args.steps)["single"]
    model = WanTransformer3DModel.from_pretrained(work / "diffusers", subfolder="transformer",
                                                  dtype=torch.bfloat16).to(args.device).eval()
    cfg = model.config
    pt, ph, pw = cfg.patch_size
    frames, h, w = (shape["frames"] - 1) // 4 + 1, shape["height"] // 8, shape["width"] // 8
    rows, text = 2, 512
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(rows, cfg.in_channels, frames, h, w, generator=gen).to(args.device, torch.bfloat16)
    t = torch.tensor([500.0, 500.0], device=args.device)
    ctx = torch.randn(rows, text, cfg.text_dim, generator=gen).to(args.device, torch.bfloat16)
    tokens = (frames // pt) * (h // ph) * (w // pw)

    def call():
        with torch.no_grad():
            return model(hidden_states=x, timestep=t, encoder_hidden_states=ctx, return_dict=False)[0]

    for _ in range(2):
        call()
    sync(args.device)
    walls = []
    for _ in range(3):
        t0 = time.perf_counter()
        out = call()
        sync(args.device)
        walls.append(time.perf_counter() - t0)
    if not torch.isfinite(out.float()).all():
        raise RuntimeError("step_profile: the transformer's output is not finite")
    cuda = args.device == "cuda"
    activities = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if cuda else [])
    with torch.profiler.profile(activities=activities) as prof:
        call()
        sync(args.device)
    by = {"attention": 0.0, "matmul": 0.0, "other": 0.0}
    kernels = 0
    for e in prof.key_averages():
        if cuda:  # the kernels themselves (device-side events), not the ops that launched them
            if "CUDA" not in str(getattr(e, "device_type", "")):
                continue
            us = getattr(e, "self_device_time_total", None) or getattr(e, "self_cuda_time_total", 0)
        else:
            us = e.self_cpu_time_total
        if us <= 0:
            continue
        kernels += e.count
        by[category(e.key)] += us / 1000.0
    total = sum(by.values())
    f = flops(model, rows, tokens, text)
    call_ms = statistics.median(walls) * 1000.0
    return {"shape": shape, "rows": rows, "tokens_per_row": tokens, "text_rows": text, "call_ms": round(call_ms, 2),
            "call_ms_all": [round(s * 1000.0, 2) for s in walls], "kernel_ms": round(total, 2), "kernel_launches": kernels,
            "gap_ms": round(call_ms - total, 2),
            "by_category_ms": {k: round(v, 2) for k, v in by.items()},
            "by_category_share": {k: round(v / total, 4) for k, v in by.items()} if total else {},
            "flops": {k: v for k, v in f.items()},
            "flops_share_attention": round(f["attention"] / (f["attention"] + f["matmul"]), 4),
            "tflops_per_s": {k: round(f[k] / (by[k] / 1000.0) / 1e12, 1) for k in f if by[k] > 0},
            "terms": "kernel (GPU) or op self (CPU) time of one profiled call; flops counted from the config"}
