"""The Wan 2.2 TI2V-5B parts of a package (diffusers' WanPipeline / WanImageToVideoPipeline with
``expand_timesteps``), beside what every Wan package has:

- ``vae_decoder.pt`` is the usual chunked decoder (wan.export_vae_decoder), here of the
  z_dim-48 residual VAE with its output un-patchified (2x2 pixel shuffle) inside the module;
- ``vae_encoder.pt``: video [B,3,F,H,W] in [-1,1] -> the posterior mean [B,48,F',H/16,W/16]
  (the input patchified inside the module); image-to-video encodes the image alone (F = 1);
- ``transformer.pt`` takes per-token timesteps float32 [B, F'*H'/2*W'/2]
  (wan.export_transformer(per_token_timesteps=True)).

The runtime (stages/wan/wan_ti2v_family.hpp) runs text-to-video with every token at the step's
timestep, and image-to-video with the first latent frame replaced by the image's normalised
latents and its tokens at timestep 0, as diffusers does; the image is optional per job.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from . import manifest as mf
from .wan_i2v import export_vae_encoder


def export_ti2v_encoder(vae, out_dir: Path, gen) -> dict[str, Any]:
    """Writes vae_encoder.pt (the patchified Wan 2.2 encoder) and returns its checks."""
    return export_vae_encoder(vae, Path(out_dir) / "vae_encoder.pt", gen)


def add_ti2v_sections(manifest: dict[str, Any], out_dir: Path) -> None:
    """The manifest entries a wan2.2-ti2v package has besides a text-to-video one's."""
    manifest["components"]["vae_encoder"] = mf.component_entry(
        Path(out_dir), "vae_encoder.pt", format="torchscript", dtype="float32", methods=["forward", "encode_first"])
    manifest["transformer"]["timestep"] = "per_token"
    manifest["image_conditioning"] = {
        "mode": "first_latent_frame",
        "vae_encoder_input": "float32 [B,3,1,H,W] in [-1,1]: the image alone; output: the posterior mean",
        "condition": "(mean - latents_mean) / latents_std replaces latent frame 0 in every step's input "
                     "and in the final latents; that frame's tokens get timestep 0",
        "last_image": False,
    }
    manifest["inputs"] = {"image": "optional", "last_image": "none"}  # text- or image-to-video


__all__ = ["export_ti2v_encoder", "add_ti2v_sections"]
