"""The GPU check's fp8 Linear probe (issue 30 item 1): one block Linear of Wan 2.1 1.3B at the
single job's size (65520 rows: the CFG pair of 32760 tokens; 1536->1536, 1536->8960, 8960->1536),
bf16 activations, timed alone so that the fp8 step's cost can be split: bf16 F.linear; the fp8
forward as it was until 2026-11-28 (float32 quantisation, 39 bytes an input element); as it is
(tools/vgen_export/quantize.py, 9 bytes); the quantisation alone; torch._scaled_mm alone on an
input quantised beforehand (the GEMM's own time, what a fused quantisation would approach).
Median of CUDA-event times after a warm-up, fresh random inputs (never zeros), each output's
relative error against a float32 product. On --device cpu --tiny: a small Linear, and only what
a CPU runs (bf16 F.linear, the quantisation, the dequantised fp8 path); the rest recorded as
skipped with the reason.
"""

from __future__ import annotations

import statistics
import time

from vgen_gpu.measure import sync

REAL = {"rows": 65520, "shapes": [(1536, 1536), (1536, 8960), (8960, 1536)]}
TINY = {"rows": 64, "shapes": [(32, 48)]}


def old_fp8_forward(x, weight, scale, bias, out_features: int):
    """Fp8Linear's CUDA branch before 2026-11-28, kept here to time against."""
    import torch

    rows = x.reshape(-1, x.size(-1)).float()
    row_scale = (rows.abs().amax(dim=1, keepdim=True) / 448.0).clamp(min=1e-12)
    xq = (rows / row_scale).clamp(-448.0, 448.0).to(torch.float8_e4m3fn)
    y = torch._scaled_mm(xq, weight.t(), scale_a=row_scale, scale_b=scale.unsqueeze(0), out_dtype=torch.bfloat16)
    return (y.to(x.dtype) + bias).reshape(list(x.shape[:-1]) + [out_features])


def timed(device: str, fn, reps: int) -> float:
    """Median seconds of fn() over reps calls (CUDA events on a GPU, the host clock on a CPU)."""
    import torch

    for _ in range(3):
        fn()
    sync(device)
    times = []
    for _ in range(reps):
        if device == "cuda":
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn()
            b.record()
            b.synchronize()
            times.append(a.elapsed_time(b) / 1000.0)
        else:
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


def rel_err(out, ref) -> float:
    import torch

    out = out.float()
    if not torch.isfinite(out).all():
        return float("nan")
    return float((out - ref).norm() / ref.norm())


def phase_fp8_linear_probe(args) -> dict:
    import torch
    import torch.nn.functional as F

    from vgen_export.quantize import Fp8Linear, quantize_rows_e4m3

    cuda = args.device == "cuda"
    plan = TINY if args.tiny else REAL
    gen = torch.Generator().manual_seed(11)
    res = {"rows": plan["rows"], "shapes": {}}
    for k, n in plan["shapes"]:
        lin = torch.nn.Linear(k, n)
        with torch.no_grad():
            lin.weight.copy_(torch.randn(n, k, generator=gen) * k ** -0.5)
            lin.bias.copy_(torch.randn(n, generator=gen) * 0.1)
        fp8 = Fp8Linear(lin, torch.bfloat16).to(args.device)
        w = lin.weight.to(args.device, torch.bfloat16)
        b = lin.bias.to(args.device, torch.bfloat16)
        x = torch.randn(plan["rows"], k, generator=gen).to(args.device, torch.bfloat16)
        ref = x.float() @ lin.weight.to(args.device).float().t() + lin.bias.to(args.device).float()
        flops = 2.0 * plan["rows"] * k * n
        row, reps = {"flops": flops}, 20 if cuda else 5
        with torch.no_grad():
            variants = {"bf16_linear": lambda: F.linear(x, w, b),
                        "quantise_only": lambda: quantize_rows_e4m3(x),
                        "fp8_now": lambda: fp8(x)}
            if cuda and fp8.tensor_cores:
                xq, xs = quantize_rows_e4m3(x)
                variants["fp8_before"] = lambda: old_fp8_forward(x, fp8.weight, fp8.scale, fp8.bias, n)
                variants["scaled_mm_only"] = lambda: torch._scaled_mm(xq, fp8.weight.t(), scale_a=xs,
                                                                      scale_b=fp8.scale.unsqueeze(0),
                                                                      out_dtype=torch.bfloat16)
            else:
                row["skipped"] = {"fp8_before": "torch._scaled_mm with row-wise scales needs a CUDA device",
                                  "scaled_mm_only": "torch._scaled_mm with row-wise scales needs a CUDA device"}
            for name, fn in variants.items():
                s = timed(args.device, fn, reps)
                row[name] = {"ms": round(s * 1000.0, 4)}
                if name != "quantise_only":
                    out = fn()
                    row[name]["rel_err_vs_float32"] = rel_err(out if name != "scaled_mm_only" else out + b, ref)
                    row[name]["tflops_per_s"] = round(flops / s / 1e12, 1)
        if "fp8_now" in row and "bf16_linear" in row:
            row["fp8_now_vs_bf16"] = round(row["bf16_linear"]["ms"] / row["fp8_now"]["ms"], 3)
        res["shapes"][f"{k}x{n}"] = row
    return res
