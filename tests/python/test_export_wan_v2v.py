"""Wan 2.1 text-to-video packages for video-to-video (issue 34): ``export_wan(video_input=True)``
(``--video-input``) ships the VAE encoder beside the decoder and writes ``inputs.video``.

Run: /root/.cache/vgen/venv/bin/python -m pytest -q tests/python/test_export_wan_v2v.py
"""

from __future__ import annotations

import json

import pytest
import torch

from vgen_export import manifest as mf
from vgen_export import wan as ew
from vgen_export.tiny_wan import write_tiny_wan

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    root = tmp_path_factory.mktemp("wan_v2v")
    src = write_tiny_wan(root / "diffusers", seed=0)
    manifest = ew.export_wan(src, root / "pkg", dtype="float32", tiny=True, seed=0, video_input=True)
    return src, root / "pkg", manifest


def test_manifest_takes_a_video_and_names_the_encoder(exported):
    _, pkg, manifest = exported
    assert manifest["family"] == mf.FAMILY_WAN21_T2V
    assert manifest["inputs"] == {"video": "optional"}
    enc = manifest["components"]["vae_encoder"]
    assert enc["file"] == "vae_encoder.pt" and (pkg / "vae_encoder.pt").is_file()
    assert enc["methods"] == ["forward", "encode_first"]
    # the checks the exporter ran against diffusers' encoder are in the manifest, and passed
    checks = manifest["export_checks"]["vae_encoder"]["checks"]
    assert checks and all(c["max_abs_diff"] <= c["tolerance"] for c in checks)
    on_disk = json.loads((pkg / "manifest.json").read_text())
    assert on_disk["inputs"] == {"video": "optional"}


def test_encoder_is_the_posterior_mean_of_diffusers_vae(exported):
    src, pkg, _ = exported
    from diffusers import AutoencoderKLWan

    vae = AutoencoderKLWan.from_pretrained(src, subfolder="vae", dtype=torch.float32).eval()
    enc = torch.jit.load(str(pkg / "vae_encoder.pt"))
    gen = torch.Generator().manual_seed(7)
    for shape in ((1, 3, 9, 32, 48), (2, 3, 5, 16, 16), (1, 3, 1, 24, 32)):
        x = torch.rand(shape, generator=gen) * 2 - 1
        with torch.no_grad():
            ref = vae.encode(x).latent_dist.mode()  # WanVideoToVideoPipeline: sample_mode="argmax"
            got = enc(x)
        assert got.shape == ref.shape
        assert (got - ref).abs().max().item() <= 1e-5, shape


def test_video_input_is_refused_for_other_wan_pipelines(tmp_path):
    src = write_tiny_wan(tmp_path / "diffusers", seed=0, variant="i2v")
    with pytest.raises(ValueError, match="video_input: only for Wan 2.1 text-to-video"):
        ew.export_wan(src, tmp_path / "pkg", tiny=True, video_input=True)
    assert not (tmp_path / "pkg").exists()  # refused before anything is written
