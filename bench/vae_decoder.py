#!/usr/bin/env python3
"""The Wan 2.1 VAE decoder as vgen exports it against diffusers' decode, in one process, on this
CPU: the default AutoencoderKLWan config (Wan 2.1's VAE, random weights; the export of
bench/tiled_decode.py, whose weights diffusers' model then loads, so both decode with the same
weights), the same latent, interleaved rounds after one untimed call each. vgen's module runs
as the runtime runs a once-per-job module on a CPU (TorchScript's optimiser off:
stages/model/model_backend.hpp, OncePerJobCalls). Also one torch.profiler op table per side
(self CPU time, top ops), to compare the op mix.

    python bench/vae_decoder.py [--latent F,H,W] [--rounds R] [--threads T]

Default latent 3,16,16 (9 frames at 128x128). Writes bench/out/vae_decoder.json.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

from common import machine, write
from tiled_decode import ensure_decoder


def top_ops(fn, n: int = 8) -> list[dict]:
    from torch.profiler import profile

    with profile() as p:
        fn()
    rows = sorted(p.key_averages(), key=lambda e: e.self_cpu_time_total, reverse=True)[:n]
    return [{"op": e.key, "self_ms": round(e.self_cpu_time_total / 1e3, 1), "calls": e.count} for e in rows]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--latent", default="3,16,16")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    from diffusers import AutoencoderKLWan
    from vgen_export.common import load_saved

    torch.set_num_threads(a.threads)
    decoder = load_saved(Path(ensure_decoder()))
    vae = AutoencoderKLWan().eval()
    prefix = "first."  # the exported module's first-chunk submodule holds post_quant_conv and decoder
    weights = {k[len(prefix):]: v for k, v in decoder.state_dict().items() if k.startswith(prefix)}
    missing = vae.load_state_dict(weights, strict=False).missing_keys
    if any(k.startswith(("decoder.", "post_quant_conv.")) for k in missing):
        sys.exit(f"diffusers' decoder did not get every exported weight: {missing[:5]}")
    f, h, w = (int(x) for x in a.latent.split(","))
    z = torch.randn(1, vae.config.z_dim, f, h, w, generator=torch.Generator().manual_seed(5))
    sides = {"diffusers": lambda: vae.decode(z, return_dict=False)[0], "vgen": lambda: decoder(z)}
    times: dict[str, list[float]] = {k: [] for k in sides}
    with torch.no_grad(), torch.jit.optimized_execution(False):
        outs = {k: fn() for k, fn in sides.items()}  # untimed first calls
        diff = float((outs["vgen"] - outs["diffusers"]).abs().max())
        for r in range(a.rounds):
            for k, fn in sides.items():
                t0 = time.perf_counter()
                fn()
                times[k].append(round(time.perf_counter() - t0, 3))
            print(f"round {r + 1}: " + ", ".join(f"{k} {v[-1]:.2f} s" for k, v in times.items()), file=sys.stderr)
        ops = {k: top_ops(fn) for k, fn in sides.items()}
    result = {"machine": machine(with_torch=True), "latent": [1, vae.config.z_dim, f, h, w],
              "video": [4 * (f - 1) + 1, 8 * h, 8 * w], "threads": a.threads, "seconds": times,
              "median_s": {k: statistics.median(v) for k, v in times.items()}, "max_abs_diff": diff, "top_ops": ops,
              "machine_after": machine()}
    for k, v in result["median_s"].items():
        print(f"{k}: median {v:.2f} s of {times[k]}")
    print(f"max |vgen - diffusers| {diff:.2e}")
    write("vae_decoder", result)


if __name__ == "__main__":
    main()
