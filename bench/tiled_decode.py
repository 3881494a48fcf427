#!/usr/bin/env python3
"""VAE decode tiled vs untiled: peak RSS and time of one decode at a real size through the Wan
2.1 VAE decoder (diffusers' AutoencoderKLWan default config, the 1.3B/14B VAE, random weights)
exported as vgen exports it (vgen_export.wan_vae), driven by bench_tiled_decode: untiled (the
decoder's forward) and tiled by stages/exec/tiled_decode (diffusers' default tiles, 256 px
every 192 px), each in a fresh process so that VmHWM is that setting's own peak.

    python bench/tiled_decode.py [--sizes 480p,720p] [--latent-frames 2] [--runs R]

480p is 832x480 (latent 60x104), 720p 1280x720 (latent 90x160); latent frames 2 are 5 video
frames (the decoder works one latent frame at a time, so the chunk of 4 frames after the first
sets the peak; more frames add time and the output's size, not the peak's working set).
Writes bench/out/tiled_decode.json.
"""

from __future__ import annotations

import argparse
import sys

import torch

from common import BIN, OUT, machine, run_json, stats, table, write, fmt

SIZES = {"480p": (60, 104), "720p": (90, 160)}


def ensure_decoder() -> str:
    path = OUT / "models" / "wan21_vae" / "vae_decoder.pt"
    if not path.exists():
        from diffusers import AutoencoderKLWan
        from vgen_export.wan_vae import export_vae_decoder

        path.parent.mkdir(parents=True, exist_ok=True)
        torch.manual_seed(0)
        vae = AutoencoderKLWan().eval()  # the default config is Wan 2.1's VAE
        with torch.no_grad():
            export_vae_decoder(vae, path, torch.Generator().manual_seed(0))
    return str(path)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="480p,720p")
    ap.add_argument("--latent-frames", type=int, default=2)
    ap.add_argument("--runs", type=int, default=1)
    a = ap.parse_args()
    decoder = ensure_decoder()
    m = machine()
    results: dict[str, dict[str, list]] = {}
    for size in a.sizes.split(","):
        h, w = SIZES[size]
        for tiling in ("off", "on"):
            for r in range(a.runs):
                o = run_json([BIN / "bench_tiled_decode", "--decoder", decoder,
                              "--latent", f"{a.latent_frames},{h},{w}", "--tiling", tiling])
                results.setdefault(size, {}).setdefault(tiling, []).append(o)
                print(f"{size} tiling {tiling} run {r + 1}: {o['seconds']:.1f} s, peak {o['hwm_bytes'] / 2**20:.0f} MiB",
                      file=sys.stderr)
    mib = lambda b: b / 2**20  # noqa: E731
    rows = []
    for size, by in results.items():
        for tiling, rs in by.items():
            rows.append([size, tiling, rs[0]["tiles_per_frame"], fmt(stats(x["seconds"] for x in rs)["median"]),
                         f"{stats(mib(x['hwm_bytes']) for x in rs)['median']:.0f}",
                         f"{stats(mib(x['loaded_rss_bytes']) for x in rs)['median']:.0f}"])
    print(table(["size", "tiling", "tiles", "seconds", "peak RSS MiB", "RSS after load MiB"], rows))
    write("tiled_decode", {"machine": m, "latent_frames": a.latent_frames, "decoder": decoder, "runs": results})


if __name__ == "__main__":
    main()
