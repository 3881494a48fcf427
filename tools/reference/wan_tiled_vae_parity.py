"""Reference for the C++ tiled-decode parity test (tests/stages/exec/test_tiled_decode.cpp):
the tiny random Wan VAE exported as vgen's decoder (vgen_export.wan_vae), and diffusers' own
``AutoencoderKLWan`` decoding the same latents with ``enable_tiling`` at tiny tile sizes (so a
few-latent-pixel frame spans 3 x 3 overlapping tiles) and without it.

Usage: python -m vgen_reference.wan_tiled_vae_parity OUT_DIR -> prints JSON {decoder, reference,
tiling, ...}. reference.pt is a TorchScript module whose buffers are the tensors (C++: attr(NAME)):
latents [2,16,3,9,11], frames_tiled and frames_untiled [2,3,9,72,88] in [-1, 1]."""
import json
import pathlib
import sys

import torch

from vgen_export.reference_loop import dump_tensors
from vgen_export.tiny_wan import tiny_vae
from vgen_export.wan_vae import export_vae_decoder

# Output pixels, as enable_tiling takes them; height and width differ so that a swap shows.
TILING = dict(tile_sample_min_height=32, tile_sample_min_width=48, tile_sample_stride_height=24,
              tile_sample_stride_width=32)
SHAPE = (2, 16, 3, 9, 11)  # two latents in one batch, three latent frames (temporal chunks)
SEED = 7


def main():
    torch.set_num_threads(1)
    out = pathlib.Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(SEED)
    vae = tiny_vae()
    gen = torch.Generator().manual_seed(SEED)
    with torch.no_grad():
        report = export_vae_decoder(vae, out / "vae_decoder.pt", gen)
        # Scaled so that some decoded values leave [-1, 1]: a clamp before the blend would show.
        latents = 3.0 * torch.randn(SHAPE, generator=gen)
        untiled = vae.decode(latents, return_dict=False)[0]
        vae.enable_tiling(**TILING)
        tiled = vae.decode(latents, return_dict=False)[0]
    dump_tensors(out / "ref", {"latents": latents, "frames_tiled": tiled, "frames_untiled": untiled},
                 {"tiling": TILING, "seed": SEED})
    print(json.dumps({"decoder": str(out / "vae_decoder.pt"), "reference": str(out / "ref" / "reference.pt"),
                      "tiling": TILING, "spatial_scale": int(vae.spatial_compression_ratio),
                      "export_checks": report["checks"],
                      "clamped_fraction": float((tiled.abs() >= 1.0).float().mean()),
                      "tiled_vs_untiled_max_abs_diff": float((tiled - untiled).abs().max())}))


if __name__ == "__main__":
    main()
