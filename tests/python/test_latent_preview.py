"""The exporter's latent -> RGB preview fit (tools/vgen_export/latent_preview.py)."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[2]
from vgen_export import latent_preview as lp
from vgen_export import manifest as mf

MODEL = ROOT / "models" / "vgen-shapes"


def test_fit_recovers_a_linear_decoder_with_the_unnormalisation_inside():
    # A decoder that is linear in the un-normalised latents, nearest-upsampled: the fit must find
    # its factors over the *loop* latents, i.e. with latents_mean / latents_std folded in.
    a = torch.tensor([[0.6, -0.2, 0.1, 0.0], [0.0, 0.4, 0.2, -0.3], [0.1, 0.0, -0.5, 0.2]])
    b = torch.tensor([0.1, -0.2, 0.05])
    latent = {"channels": 4, "temporal_scale": 4, "spatial_scale": 8,
              "latents_mean": [0.5, -1.0, 0.25, 0.0], "latents_std": [2.0, 0.5, 1.0, 4.0]}

    def decode(z):  # [B, 4, F', H', W'] -> [B, 3, 1 + 4 (F' - 1), 8 H', 8 W'] in [-1, 1], kept inside
        rgb = torch.einsum("oc,bcfhw->bofhw", a, z) * 0.05 + b[None, :, None, None, None]
        frames = torch.repeat_interleave(rgb, 4, dim=2)[:, :, 3:]  # latent frame k -> output frame 4 k
        return F.interpolate(frames, scale_factor=(1, 8, 8), mode="nearest")

    section = lp.fit_latent_rgb(lp.wan_loop_decoder(decode, latent), latent, 64, 64, samples=4)
    std = torch.tensor(latent["latents_std"])
    mean = torch.tensor(latent["latents_mean"])
    want_w = a * 0.05 * std / 2                      # rgb = (decode / 2 + 0.5), z = x * std + mean
    want_b = (a * 0.05 @ mean + b) / 2 + 0.5
    assert torch.allclose(torch.tensor(section["weight"]), want_w, atol=1e-6)
    assert torch.allclose(torch.tensor(section["bias"]), want_b, atol=1e-6)
    assert section["fit"]["rmse"] < 1e-6


def test_add_preview_writes_the_section_and_keeps_checksums(tmp_path):
    if not (MODEL / "manifest.json").exists():
        pytest.skip("models/vgen-shapes missing")
    pkg = tmp_path / "pkg"
    shutil.copytree(MODEL, pkg)
    manifest = json.loads((pkg / mf.MANIFEST_NAME).read_text())
    manifest.pop("preview", None)  # a package from before previews
    (pkg / mf.MANIFEST_NAME).write_text(json.dumps(manifest))
    section = lp.add_preview(pkg, samples=4)["latent_rgb"]
    again = mf.read_manifest(pkg)  # checksums verified
    assert again["preview"]["latent_rgb"] == section
    w = torch.tensor(section["weight"])
    assert w.shape == (3, 3)
    # The bundled model's latents are RGB in [-1, 1]: the fit is close to diagonal, bias near 0.5.
    assert (w.diag() > 0.2).all() and (w - torch.diag(w.diag())).abs().max() < 0.05
    assert all(abs(v - 0.5) < 0.05 for v in section["bias"])
    # The committed package carries factors fitted this way (same seed and samples: the same numbers).
    committed = json.loads((MODEL / mf.MANIFEST_NAME).read_text())
    refit = lp.preview_section(committed, lp.torchscript_decoder(MODEL, committed))["latent_rgb"]
    assert torch.allclose(torch.tensor(refit["weight"]), torch.tensor(committed["preview"]["latent_rgb"]["weight"]),
                          atol=1e-9)


def test_the_ltx_decoder_folds_its_scaling_factor_and_decode_timestep_into_the_fit():
    # LTX's loop latents are un-normalised as z * std / scaling_factor + mean, and a conditioned
    # decoder gets the package's decode_timestep: the fit recovers a linear decoder through both.
    a = torch.tensor([[0.5, -0.2, 0.1], [0.0, 0.3, 0.2], [0.1, 0.0, -0.4]])
    b = torch.tensor([0.1, -0.2, 0.05])
    latent = {"channels": 3, "temporal_scale": 8, "spatial_scale": 32,
              "latents_mean": [0.5, -1.0, 0.25], "latents_std": [2.0, 0.5, 1.0]}
    vae = {"scaling_factor": 2.0, "timestep_conditioning": True, "decode_timestep": 0.05}
    seen = []

    def decode(x, t):  # un-normalised [B, 3, F', H', W'] -> [B, 3, 1 + 8 (F' - 1), 32 H', 32 W']
        seen.append(t)
        rgb = torch.einsum("oc,bcfhw->bofhw", a, x) * 0.05 + b[None, :, None, None, None]
        frames = torch.repeat_interleave(rgb, 8, dim=2)[:, :, 7:]
        return F.interpolate(frames, scale_factor=(1, 32, 32), mode="nearest")

    section = lp.fit_latent_rgb(lp.ltx_loop_decoder(decode, latent, vae), latent, 256, 256, samples=4)
    std, mean = torch.tensor(latent["latents_std"]), torch.tensor(latent["latents_mean"])
    want_w = a * 0.05 * std / 2.0 / 2           # x = z * std / 2 + mean, rgb = decode / 2 + 0.5
    want_b = (a * 0.05 @ mean + b) / 2 + 0.5
    assert torch.allclose(torch.tensor(section["weight"]), want_w, atol=1e-6)
    assert torch.allclose(torch.tensor(section["bias"]), want_b, atol=1e-6)
    assert all(torch.equal(t, torch.full((1,), 0.05)) for t in seen)
