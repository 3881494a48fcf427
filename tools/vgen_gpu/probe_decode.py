"""The GPU check's decode probe (issue 30 item 3): why vgen's "decode" was 1.2-1.5x diffusers' on
an H200 (4.41 against 2.95 s at 832x480x81; 1.35 against 1.13 s warm at 33 frames). The same
random latent, float32, through: diffusers' AutoencoderKLWan.decode (two calls); vgen's exported
decoder (WORK/pkg/vae_decoder.pt through torch.jit, as the runtime calls `forward`) with
LibTorch's optimiser on (first and second call of a fresh load) and off (another fresh load);
and the step after the decoder that vgen's decode span also holds: the clip to frames ([F,H,W,3]
in [0,1] on the host) done on the host after copying the float32 clip (vgen before 2026-11-28)
and on the device before the copy (stages/families/family_kit.cpp clip_frames, now), also into
page-locked (pinned) host memory; and the frames' bytes (stages/model/frame_bytes.cpp) made on
the host after the copy, as now, against on the device before a copy a quarter the size. Times are
synchronised wall clock; peak memory is torch.cuda.max_memory_allocated per variant; outputs are
compared (max |vgen - diffusers|). On --device cpu --tiny: the tiny package at its small shape.
"""

from __future__ import annotations

import time
from pathlib import Path

from vgen_gpu.measure import sync
from vgen_gpu.phases import shapes


def timed(device: str, fn):
    import torch

    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    sync(device)
    t0 = time.perf_counter()
    out = fn()
    sync(device)
    peak = torch.cuda.max_memory_allocated() / 2**20 if device == "cuda" else None
    return out, round(time.perf_counter() - t0, 4), (round(peak, 1) if peak is not None else None)


def phase_decode_probe(args) -> dict:
    import torch
    from diffusers import AutoencoderKLWan

    work, dev = Path(args.work), args.device
    shape = shapes(args.tiny, args.steps)["single"]
    vae = AutoencoderKLWan.from_pretrained(work / "diffusers", subfolder="vae", dtype=torch.float32).to(dev).eval()
    scale = 2 ** len([d for d in vae.config.temperal_downsample if d])  # latent frames: (F - 1) / 4 + 1
    spatial = 2 ** (len(vae.config.dim_mult) - 1)
    z = torch.randn(1, vae.config.z_dim, (shape["frames"] - 1) // scale + 1, shape["height"] // spatial,
                    shape["width"] // spatial, generator=torch.Generator().manual_seed(5)).to(dev)
    res = {"latent": list(z.shape)}
    with torch.no_grad():
        for i in (1, 2):
            ref, s, peak = timed(dev, lambda: vae.decode(z, return_dict=False)[0])
            res[f"diffusers_call{i}"] = {"s": s, "peak_mib": peak}
        ref = ref.float()
        del vae
        if dev == "cuda":
            torch.cuda.empty_cache()
        for optimise in (True, False):
            # the graph executor's optimise flag, as the runtime's TorchScriptOptimizerScope sets it
            with torch.jit.optimized_execution(optimise):
                module = torch.jit.load(str(work / "pkg" / "vae_decoder.pt"), map_location=dev).eval()
                name = "vgen_optimised" if optimise else "vgen_as_exported"
                for i in (1, 2):
                    out, s, peak = timed(dev, lambda: module.forward(z))
                    res[f"{name}_call{i}"] = {"s": s, "peak_mib": peak}
                res[f"{name}_max_abs_diff_vs_diffusers"] = float((out.float() - ref).abs().max())
                del module
        clip = out[0]

        def on_host():
            c = clip.to("cpu").float()
            return (c / 2 + 0.5).clamp(0, 1).permute(1, 2, 3, 0).contiguous()

        def on_device():
            return (clip / 2 + 0.5).clamp(0, 1).permute(1, 2, 3, 0).contiguous().to("cpu")

        def on_device_pinned():  # the same, copied into page-locked memory (issue 30 item 4)
            f = (clip / 2 + 0.5).clamp(0, 1).permute(1, 2, 3, 0).contiguous()
            if f.device.type != "cuda":
                return f.to("cpu")
            host = torch.empty(f.shape, dtype=f.dtype, pin_memory=True)
            host.copy_(f)
            return host

        def bytes_after_host(frames):  # stages/model/frame_bytes.cpp's quantisation, on the host
            return frames.mul(255.0).round().clamp(0, 255).to(torch.uint8)

        def bytes_on_device():  # frames and their bytes made on the device: a quarter of the copy
            f = (clip / 2 + 0.5).clamp(0, 1).permute(1, 2, 3, 0)
            return bytes_after_host(f).contiguous().to("cpu")

        for name, fn in (("frames_on_host", on_host), ("frames_on_device", on_device),
                         ("frames_on_device_pinned", on_device_pinned)):
            fn()
            frames, s, _ = timed(dev, fn)
            res[name] = {"s": s, "threads": torch.get_num_threads()}
        # Frames to bytes as the encode stage gets them: today (float frames copied, bytes made on
        # the host, off the compute thread) against bytes made on the device before the copy.
        host_frames = on_device()
        _, s, _ = timed(dev, lambda: bytes_after_host(host_frames))
        res["bytes_on_host_after_copy"] = {"s": s, "threads": torch.get_num_threads()}
        bytes_on_device()
        device_bytes, s, _ = timed(dev, bytes_on_device)
        res["bytes_on_device_then_copy"] = {"s": s, "mb": round(device_bytes.numel() / 1e6, 1),
                                            "float_frames_mb": round(host_frames.numel() * 4 / 1e6, 1)}
        res["bytes_equal"] = bool(torch.equal(device_bytes, bytes_after_host(host_frames)))
        res["frames_equal"] = bool(torch.equal(on_host(), on_device()))
    res["terms"] = ("float32 VAE, one clip; diffusers' decode excludes its pipeline's postprocess, vgen's decode span "
                    "includes the frames step (frames_on_*)")
    return res
