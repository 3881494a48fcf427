"""Fit a package's latent -> RGB preview projection and write it into its manifest.

    python -m vgen_export.latent_preview --model models/vgen-shapes

While a job denoises, the runtime shows a cheap preview of its latents (stages/preview.hpp): each
latent pixel's channels times a 3 x C matrix plus a bias give an RGB colour in [0, 1], with no
VAE call. The factors are fitted here by least squares against the package's own VAE decoder:

* latents: random fields the size of the package's smallest resolution, half smooth
  (low-resolution noise upsampled, as a denoised image's latents are) and half white noise, at
  standard deviations from 0.25 to 1 (a noisy mid-loop latent and a clean final one both occur);
* target: the decoded frames ``(decode(latents) / 2 + 0.5).clamp(0, 1)``, averaged over each latent
  pixel's ``spatial_scale x spatial_scale`` patch, latent frame ``k`` against output frame
  ``k * temporal_scale``;
* ``decode`` takes the loop's latents as they are between steps and does the family's own
  un-normalisation (Wan: ``latents / (1 / std) + mean``, :func:`wan_loop_decoder`; LTX:
  ``latents * std / scaling_factor + mean`` and the decode timestep, :func:`ltx_loop_decoder`),
  so the fit folds it into the factors. Another family's exporter passes its own ``decode``.

The manifest gains ``preview.latent_rgb`` = ``{"weight": [3][C], "bias": [3], "fit": {...}}``.
Exporters call :func:`preview_section` with the decoder they wrote; this script adds the section
to a package made before previews existed (only the manifest changes; the component checksums
stay). A package without the section simply has previews off.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Callable

import torch
import torch.nn.functional as F

# Absolute imports: besides `python -m vgen_export.latent_preview`, older vgen builds tell users to
# run this file by its path (api/engine.cpp), which works as long as the package is installed.
from vgen_export import manifest as mf
from vgen_export.common import load_saved

Decoder = Callable[[torch.Tensor], torch.Tensor]  # loop latents [B, C, F', H', W'] -> [B, 3, F, H, W] in [-1, 1]


def decoded_frame_of(latent_frame: int, temporal_scale: int) -> int:
    """The output frame a latent frame is compared with (and the preview shows)."""
    return latent_frame * temporal_scale


def random_latents(gen: torch.Generator, shape: tuple[int, ...], smooth: bool, scale: float) -> torch.Tensor:
    b, c, f, h, w = shape
    if smooth:
        coarse = torch.randn(b, c, f, max(1, h // 4), max(1, w // 4), generator=gen)
        z = F.interpolate(coarse, size=(f, h, w), mode="trilinear", align_corners=False)
        z = z / z.std().clamp_min(1e-6)
    else:
        z = torch.randn(shape, generator=gen)
    return z * scale


def preview_targets(video: torch.Tensor, latent_frames: int, temporal_scale: int, spatial_scale: int) -> torch.Tensor:
    """[B, 3, F', H', W']: each latent pixel's patch of its frame, averaged, in [0, 1]."""
    rgb = (video.float() / 2 + 0.5).clamp(0, 1)
    frames = [decoded_frame_of(k, temporal_scale) for k in range(latent_frames)]
    picked = rgb[:, :, frames]  # [B, 3, F', H, W]
    b, _, f, h, w = picked.shape
    pooled = F.avg_pool2d(picked.transpose(1, 2).reshape(b * f, 3, h, w), spatial_scale)
    return pooled.reshape(b, f, 3, h // spatial_scale, w // spatial_scale).transpose(1, 2)


def fit_latent_rgb(decode: Decoder, latent: dict[str, Any], height: int, width: int, *, samples: int = 16,
                   seed: int = 0) -> dict[str, Any]:
    """Least-squares ``rgb ~ weight @ latent + bias`` over `samples` random latents decoded by `decode`.

    `latent` is the manifest's ``latent`` section; `height`/`width` the output size to fit at (the
    package's smallest is cheapest). Returns the manifest's ``preview.latent_rgb`` section.
    """
    c, ts, ss = int(latent["channels"]), int(latent["temporal_scale"]), int(latent["spatial_scale"])
    shape = (1, c, 2, height // ss, width // ss)  # two latent frames: the first and one chunk
    gen = torch.Generator().manual_seed(seed)
    xs, ys = [], []
    with torch.no_grad():
        for i in range(samples):
            scale = 0.25 + 0.75 * i / max(1, samples - 1)
            z = random_latents(gen, shape, smooth=i % 2 == 0, scale=scale)
            video = decode(z)
            y = preview_targets(video, shape[2], ts, ss)
            xs.append(z.permute(0, 2, 3, 4, 1).reshape(-1, c))
            ys.append(y.permute(0, 2, 3, 4, 1).reshape(-1, 3))
    x, y = torch.cat(xs).double(), torch.cat(ys).double()
    design = torch.cat([x, torch.ones(x.shape[0], 1, dtype=x.dtype)], dim=1)
    solution = torch.linalg.lstsq(design, y).solution  # [C + 1, 3]
    residual = design @ solution - y
    rmse = float(residual.pow(2).mean().sqrt())
    return {
        "weight": [[float(v) for v in row] for row in solution[:c].T],
        "bias": [float(v) for v in solution[c]],
        "frame_alignment": "latent frame k ~ output frame k * temporal_scale",
        "fit": {"method": "least squares against the package's vae_decoder (tools/vgen_export/latent_preview.py)",
                "samples": samples, "points": int(x.shape[0]), "size": [height, width], "seed": seed,
                "rmse": round(rmse, 6)},
    }


def fit_size(manifest: dict[str, Any]) -> tuple[int, int]:
    """The package's smallest output size with at least 8 latent pixels a side (cheap to decode)."""
    at_least = 8 * int(manifest["latent"]["spatial_scale"])

    def side(axis: str) -> int:
        r = manifest["resolution"][axis]
        m = int(r["multiple_of"])
        want = -(-max(int(r["min"]), at_least, m) // m) * m
        return min(want, int(r["max"]) // m * m) if int(r["max"]) >= m else m
    return side("height"), side("width")


def preview_section(manifest: dict[str, Any], decoder: Decoder, *, samples: int = 16, seed: int = 0) -> dict[str, Any]:
    """The manifest's ``preview`` section for a package whose decoder is `decoder`."""
    height, width = fit_size(manifest)
    return {"latent_rgb": fit_latent_rgb(decoder, manifest["latent"], height, width, samples=samples, seed=seed)}


def wan_loop_decoder(vae: Callable[[torch.Tensor], torch.Tensor], latent: dict[str, Any], dtype=torch.float32) -> Decoder:
    """Wan's decode of loop latents (stages/wan/wan_family.cpp): un-normalise, then the VAE."""
    c = int(latent["channels"])
    mean = torch.tensor(latent["latents_mean"], dtype=torch.float32).view(1, c, 1, 1, 1)
    std = torch.tensor(latent["latents_std"], dtype=torch.float32).view(1, c, 1, 1, 1)
    return lambda z: vae((z / (1.0 / std) + mean).to(dtype)).float()


def ltx_loop_decoder(vae: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], latent: dict[str, Any],
                     vae_section: dict[str, Any], dtype=torch.float32) -> Decoder:
    """LTX's decode of loop latents (stages/ltx/ltx_family.cpp, decode_latents): ``z * std /
    scaling_factor + mean``, then the decoder at the package's decode_timestep when it is
    timestep-conditioned (0 otherwise). The decode noise a conditioned decoder mixes in at
    decode_noise_scale is left out: the preview is of the latents themselves."""
    c = int(latent["channels"])
    mean = torch.tensor(latent["latents_mean"], dtype=torch.float32).view(1, c, 1, 1, 1)
    std = torch.tensor(latent["latents_std"], dtype=torch.float32).view(1, c, 1, 1, 1)
    scaling = float(vae_section.get("scaling_factor", 1.0))
    t = float(vae_section.get("decode_timestep", 0.0)) if vae_section.get("timestep_conditioning") else 0.0

    def decode(z: torch.Tensor) -> torch.Tensor:
        x = z * std / scaling + mean
        return vae(x.to(dtype), torch.full((z.shape[0],), t, dtype=torch.float32)).float()
    return decode


def torchscript_decoder(pkg_dir: Path, manifest: dict[str, Any]) -> Decoder:
    """The package's vae_decoder.pt behind its family's un-normalisation (Wan's, or LTX's for an
    ``ltx-video`` package)."""
    entry = manifest["components"]["vae_decoder"]
    module = load_saved(Path(pkg_dir) / entry["file"], map_location="cpu").eval()
    dtype = getattr(torch, entry.get("dtype", manifest.get("dtype", "float32")))
    if manifest.get("family") == mf.FAMILY_LTX_VIDEO:
        return ltx_loop_decoder(module, manifest["latent"], manifest.get("vae", {}), dtype)
    return wan_loop_decoder(module, manifest["latent"], dtype)


def add_preview(pkg_dir: Path, samples: int = 16, seed: int = 0) -> dict[str, Any]:
    """Fits the factors of an existing package and rewrites its manifest with them."""
    manifest = json.loads((Path(pkg_dir) / mf.MANIFEST_NAME).read_text())
    manifest["preview"] = preview_section(manifest, torchscript_decoder(pkg_dir, manifest), samples=samples, seed=seed)
    mf.write_manifest(pkg_dir, manifest)
    mf.read_manifest(pkg_dir)  # checksums still hold: only the manifest changed
    return manifest["preview"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", type=Path, required=True, help="the package directory")
    ap.add_argument("--samples", type=int, default=16)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    section = add_preview(a.model, a.samples, a.seed)["latent_rgb"]
    print(f"{a.model}: preview.latent_rgb fitted on {section['fit']['points']} latent pixels, "
          f"rmse {section['fit']['rmse']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
