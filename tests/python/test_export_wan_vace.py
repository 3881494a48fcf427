"""Wan VACE export (tools/vgen_export/wan_vace.py): detection with no flag (WanVACEPipeline's
model_index.json / the transformer's vace_layers), the refusals of inconsistent directories,
and the tiny VACE package: its transformer takes the control inputs with a per-row scale and
matches diffusers' WanVACETransformer3DModel, and its manifest says what the package takes.

Run: /root/.cache/vgen/venv/bin/python -m pytest -q tests/python/test_export_wan_vace.py
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from vgen_export import wan as ew
from vgen_export.common import load_saved
from vgen_export.detect_wan import UnsupportedWanPipeline, check_exportable, detect_wan
from vgen_export.tiny_wan import write_tiny_wan

torch.set_num_threads(1)
NONE = [None, None]


def vace_dir(root: Path, pipeline: str = "WanVACEPipeline", vace_layers=(0, 5, 10), vace_in_channels: int = 96,
             in_channels: int = 16, transformer_2: bool = False) -> Path:
    """The JSON detection reads, laid out as Wan-AI/Wan2.1-VACE-1.3B-diffusers is."""
    index = {"_class_name": pipeline, "_diffusers_version": "0.42.1",
             "transformer": ["diffusers", "WanVACETransformer3DModel"], "vae": ["diffusers", "AutoencoderKLWan"],
             "text_encoder": ["transformers", "UMT5EncoderModel"], "tokenizer": ["transformers", "T5Tokenizer"],
             "scheduler": ["diffusers", "UniPCMultistepScheduler"],
             "transformer_2": ["diffusers", "WanVACETransformer3DModel"] if transformer_2 else NONE}
    if transformer_2:
        index["boundary_ratio"] = 0.875
    root.mkdir(parents=True)
    (root / "model_index.json").write_text(json.dumps(index))
    cfg = {"in_channels": in_channels, "out_channels": 16, "vace_in_channels": vace_in_channels}
    if vace_layers is not None:
        cfg["vace_layers"] = list(vace_layers)
    for sub in ("transformer",) + (("transformer_2",) if transformer_2 else ()):
        (root / sub).mkdir()
        (root / sub / "config.json").write_text(json.dumps(cfg))
    (root / "vae").mkdir()
    (root / "vae" / "config.json").write_text(json.dumps({"z_dim": 16}))
    return root


def test_detects_vace_without_a_flag(tmp_path):
    v = detect_wan(vace_dir(tmp_path / "d"))
    assert v.name == "wan2.1-vace"
    check_exportable(v)


@pytest.mark.parametrize("changes, reason", [
    (dict(pipeline="WanPipeline"), "vace_layers in a WanPipeline directory"),
    (dict(vace_layers=None), "without transformer vace_layers"),
    (dict(vace_in_channels=64), "VACE needs 96"),
    (dict(in_channels=36), "VACE denoises the latents alone"),
    (dict(transformer_2=True), "two VACE experts are not implemented"),
])
def test_refuses_inconsistent_or_unsupported_vace_directories(tmp_path, changes, reason):
    with pytest.raises(UnsupportedWanPipeline, match=reason):
        check_exportable(detect_wan(vace_dir(tmp_path / "d", **changes)))


@pytest.fixture(scope="module")
def tiny_vace(tmp_path_factory):
    root = tmp_path_factory.mktemp("vace")
    src = write_tiny_wan(root / "diffusers", seed=0, variant="vace")
    return src, ew.export_wan(src, root / "pkg", dtype="float32", tiny=True, seed=0), root / "pkg"


def test_tiny_vace_manifest_says_what_the_package_takes(tiny_vace):
    _, manifest, pkg = tiny_vace
    assert manifest["family"] == "wan2.1-vace"
    assert manifest["inputs"] == {"video": "optional", "mask_video": "optional", "reference_images": "optional"}
    assert manifest["vace"]["layers"] == [0, 1] and manifest["vace"]["in_channels"] == 96
    assert manifest["components"]["transformer"]["methods"] == ["forward"]
    assert (pkg / "vae_encoder.pt").is_file()
    for name in ("transformer", "vae_encoder"):
        for check in manifest["export_checks"][name]["checks"]:
            assert check["max_abs_diff"] <= check["tolerance"], (name, check)


def test_exported_vace_transformer_matches_diffusers_per_row_scale(tiny_vace):
    from diffusers import WanVACETransformer3DModel

    src, manifest, pkg = tiny_vace
    eager = WanVACETransformer3DModel.from_pretrained(src, subfolder="transformer").eval()
    loaded = load_saved(pkg / "transformer.pt")
    g = torch.Generator().manual_seed(5)
    x = torch.randn(2, 16, 3, 4, 6, generator=g)
    t = torch.tensor([900.0, 250.0])
    ctx = torch.randn(2, manifest["tokenizer"]["max_length"], manifest["transformer"]["text_dim"], generator=g)
    control = torch.randn(2, 96, 3, 4, 6, generator=g)
    scale = torch.tensor([[1.0, 1.0], [0.25, 1.5]])
    with torch.no_grad():
        out = loaded(x, t, ctx, control, scale)
        for r in range(2):
            ref = eager(hidden_states=x[r:r + 1], timestep=t[r:r + 1], encoder_hidden_states=ctx[r:r + 1],
                        control_hidden_states=control[r:r + 1], control_hidden_states_scale=scale[r],
                        return_dict=False)[0]
            assert (out[r:r + 1] - ref).abs().max().item() <= 1e-5
        # The control input matters: a scale of 0 differs from the scaled one.
        off = loaded(x, t, ctx, control, torch.zeros(2, 2))
        assert (off - out).abs().max().item() > 1e-3
