"""Export of the tiny LTX-Video pipeline (python -m vgen_export.ltx), what it refuses, and `vgen render`
with the exported package end to end.

Run: /root/.cache/vgen/venv/bin/python -m pytest -q tests/python/test_export_ltx.py
(the render tests need build/bin/vgen; VGEN_BUILD_DIR picks another build).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]

from vgen_export import ltx as el
from vgen_export import manifest as mf
from vgen_export.tiny_ltx import write_tiny_ltx
from test_cli_render import render_and_probe  # the CLI tests' render + ffprobe (same folder)

torch.set_num_threads(1)
BUILD = Path(os.environ.get("VGEN_BUILD_DIR", ROOT / "build"))
VGEN = BUILD / "bin" / "vgen"


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    root = tmp_path_factory.mktemp("ltx")
    src = write_tiny_ltx(root / "diffusers", seed=0)
    manifest = el.export_ltx(src, root / "pkg", dtype="float32", tiny=True, seed=0, decode_timestep=0.05,
                             decode_noise_scale=0.025)
    return src, root / "pkg", manifest


def test_manifest_describes_the_ltx_package(exported):
    _, pkg, manifest = exported
    assert mf.read_manifest(pkg)["family"] == "ltx-video"
    assert manifest["resolution"]["height"]["multiple_of"] == 32
    assert manifest["frames"]["k_multiple"] == 8
    assert manifest["latent"]["channels"] == 8
    assert manifest["vae"] == {"scaling_factor": 1.0, "timestep_conditioning": True, "decode_timestep": 0.05,
                               "decode_noise_scale": 0.025}
    assert manifest["scheduler"]["config"]["use_dynamic_shifting"] is True
    assert manifest["defaults"]["negative_prompt"] == ""  # LTXPipeline's when none is given
    for name in ("text_encoder", "transformer", "vae_decoder"):
        for check in manifest["export_checks"][name]["checks"]:
            assert check["max_abs_diff"] <= check["tolerance"], (name, check)


def test_the_package_also_runs_image_to_video(exported):
    # LTXImageToVideoPipeline uses the same components: the VAE encoder (posterior mean and std,
    # as diffusers samples it) and a transformer checked with per-token timesteps.
    _, pkg, manifest = exported
    assert manifest["inputs"] == {"image": "optional", "last_image": "none"}
    assert manifest["transformer"]["timestep"] == "per_token"
    assert "vae_encoder" in mf.read_manifest(pkg)["components"]
    assert any(len(c["timestep"]) == 2 for c in manifest["export_checks"]["transformer"]["checks"])
    for check in manifest["export_checks"]["vae_encoder"]["checks"]:
        assert check["max_abs_diff"] <= check["tolerance"], check


def test_the_manifest_carries_preview_factors_fitted_against_the_ltx_decoder(exported):
    # Issue 21: an LTX package previews like a Wan one; the exporter fits the factors against
    # the decoder it wrote, through LTX's un-normalisation and decode timestep.
    from vgen_export import latent_preview as lp
    _, pkg, manifest = exported
    section = mf.read_manifest(pkg)["preview"]["latent_rgb"]
    c = manifest["latent"]["channels"]
    assert len(section["weight"]) == 3 and all(len(row) == c for row in section["weight"])
    assert len(section["bias"]) == 3
    assert section["fit"]["size"] == list(lp.fit_size(manifest))
    refit = lp.preview_section(manifest, lp.torchscript_decoder(pkg, manifest))["latent_rgb"]
    assert torch.allclose(torch.tensor(refit["weight"]), torch.tensor(section["weight"]), atol=1e-9)
    # On latents it was not fitted on, the projection beats a flat grey image against the decoder.
    decode = lp.torchscript_decoder(pkg, manifest)
    ts, ss = manifest["latent"]["temporal_scale"], manifest["latent"]["spatial_scale"]
    h, w = lp.fit_size(manifest)
    weight, bias = torch.tensor(section["weight"]), torch.tensor(section["bias"])
    gen = torch.Generator().manual_seed(99)
    with torch.no_grad():
        for smooth in (True, False):
            z = lp.random_latents(gen, (1, c, 2, h // ss, w // ss), smooth=smooth, scale=0.8)
            target = lp.preview_targets(decode(z), 2, ts, ss)
            shown = (torch.einsum("oc,bcfhw->bofhw", weight, z) + bias[None, :, None, None, None]).clamp(0, 1)
            mse, grey = (shown - target).pow(2).mean().item(), (0.5 - target).pow(2).mean().item()
            print(f"LTX preview (smooth={smooth}): mse {mse:.3g}, grey {grey:.3g}")
            assert mse < grey


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def _edit(path: Path, **changes) -> None:
    cfg = json.loads(path.read_text())
    cfg.update(changes)
    path.write_text(json.dumps(cfg))


@pytest.mark.parametrize("part,changes,needle", [
    ("vae/config.json", {"decoder_inject_noise": [True, False, False, False]}, "decoder_inject_noise"),
    ("transformer/config.json", {"patch_size": 2}, "patch_size"),
    ("scheduler/scheduler_config.json", {"use_karras_sigmas": True}, "use_karras_sigmas"),
    ("scheduler/scheduler_config.json", {"_class_name": "UniPCMultistepScheduler"}, "UniPCMultistepScheduler"),
    ("model_index.json", {"_class_name": "WanPipeline"}, "WanPipeline"),
])
def test_refuses_what_it_cannot_export(exported, tmp_path, part, changes, needle):
    src = _copy(exported[0], tmp_path / "src")
    _edit(src / part, **changes)
    out = tmp_path / "pkg"
    r = subprocess.run([sys.executable, "-m", "vgen_export.ltx", "--diffusers", str(src), "--out", str(out)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 2, r.stderr
    assert needle in r.stderr
    assert not out.exists()  # refused before anything is written


@pytest.mark.skipif(not VGEN.exists(), reason="build/bin/vgen not built")
def test_vgen_render_with_the_ltx_package(exported, tmp_path):
    out = tmp_path / "clip.mp4"
    r, streams = render_and_probe(exported[1], "a red circle moving left", out, "--width", "96", "--height", "64",
                                  "--frames", "17", "--steps", "2", "--fps", "24")
    assert r.stdout.strip() == str(out)
    probe = streams[0]
    assert (probe["codec_name"], probe["width"], probe["height"], int(probe["nb_read_frames"])) == ("h264", 96, 64, 17)


@pytest.mark.skipif(not VGEN.exists(), reason="build/bin/vgen not built")
@pytest.mark.parametrize("flag,value,field", [("--frames", "12", "frames"), ("--width", "48", "width")])
def test_vgen_render_names_the_bad_field(exported, tmp_path, flag, value, field):
    out = tmp_path / "clip.mp4"
    r = subprocess.run([str(VGEN), "render", "x", "-o", str(out), "--model", str(exported[1]), flag, value],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 2
    assert field in r.stderr
    assert not out.exists()
