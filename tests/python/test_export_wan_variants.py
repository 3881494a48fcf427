"""Which Wan pipeline a diffusers directory is (tools/vgen_export/detect_wan.py), the refusals
of what the exporter cannot write, and the tiny Wan 2.1 image-to-video, Wan 2.2 I2V-A14B and
Wan 2.2 TI2V exports.

Run: /root/.cache/vgen/venv/bin/python -m pytest -q tests/python/test_export_wan_variants.py
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from vgen_export import manifest as mf
from vgen_export import wan as ew
from vgen_export.detect_wan import UnsupportedWanPipeline, check_exportable, detect_wan
from vgen_export.tiny_wan import write_tiny_wan

torch.set_num_threads(1)
NONE = [None, None]


def config_dir(root: Path, pipeline: str, in_channels: int = 16, z_dim: int = 16, image_encoder: bool = False,
               transformer_2: bool = False, boundary_ratio=None, expand_timesteps=None, image_dim=None,
               pos_embed_seq_len=None, vae: dict | None = None) -> Path:
    """A diffusers directory holding only the JSON that detection reads (as real repos lay it out)."""
    index = {"_class_name": pipeline, "_diffusers_version": "0.42.1",
             "transformer": ["diffusers", "WanTransformer3DModel"], "vae": ["diffusers", "AutoencoderKLWan"],
             "text_encoder": ["transformers", "UMT5EncoderModel"], "tokenizer": ["transformers", "T5Tokenizer"],
             "scheduler": ["diffusers", "UniPCMultistepScheduler"],
             "transformer_2": ["diffusers", "WanTransformer3DModel"] if transformer_2 else NONE}
    if pipeline == "WanImageToVideoPipeline":
        index["image_encoder"] = ["transformers", "CLIPVisionModel"] if image_encoder else NONE
        index["image_processor"] = ["transformers", "CLIPImageProcessor"] if image_encoder else NONE
    if boundary_ratio is not None:
        index["boundary_ratio"] = boundary_ratio
    if expand_timesteps is not None:
        index["expand_timesteps"] = expand_timesteps
    root.mkdir(parents=True)
    (root / "model_index.json").write_text(json.dumps(index))
    for sub in ("transformer",) + (("transformer_2",) if transformer_2 else ()):
        (root / sub).mkdir()
        (root / sub / "config.json").write_text(json.dumps(
            {"in_channels": in_channels, "out_channels": z_dim, "image_dim": image_dim,
             "pos_embed_seq_len": pos_embed_seq_len}))
    (root / "vae").mkdir()
    (root / "vae" / "config.json").write_text(json.dumps({"z_dim": z_dim, **(vae or {})}))
    return root


# The layouts of the real diffusers repos (Wan-AI/*-Diffusers), in the fields detection reads.
LAYOUTS = {
    "wan2.1-t2v": dict(pipeline="WanPipeline"),
    "wan2.1-i2v": dict(pipeline="WanImageToVideoPipeline", in_channels=36, image_encoder=True, image_dim=1280),
    "wan2.1-flf2v": dict(pipeline="WanImageToVideoPipeline", in_channels=36, image_encoder=True, image_dim=1280,
                         pos_embed_seq_len=514),
    "wan2.2-ti2v": dict(pipeline="WanPipeline", in_channels=48, z_dim=48, expand_timesteps=True,
                        vae={"patch_size": 2, "is_residual": True, "scale_factor_spatial": 16}),
    "wan2.2-a14b-t2v": dict(pipeline="WanPipeline", transformer_2=True, boundary_ratio=0.875),
    "wan2.2-a14b-i2v": dict(pipeline="WanImageToVideoPipeline", in_channels=36, transformer_2=True,
                            boundary_ratio=0.9),
}


@pytest.mark.parametrize("name", sorted(LAYOUTS))
def test_detects_each_wan_layout(name, tmp_path):
    assert detect_wan(config_dir(tmp_path / "d", **LAYOUTS[name])).name == name


def test_cli_refusal_exits_2_with_the_reason(tmp_path, capsys):
    src = config_dir(tmp_path / "d", **{**LAYOUTS["wan2.2-a14b-i2v"], "image_encoder": True})
    assert ew.main(["--diffusers", str(src), "--out", str(tmp_path / "pkg")]) == 2
    err = capsys.readouterr().err
    assert "wan2.2-a14b-i2v" in err and "A14B I2V takes no image embeddings" in err
    assert not (tmp_path / "pkg").exists()  # refused before anything is written


@pytest.mark.parametrize("changes, reason", [
    (dict(image_encoder=True), "takes no image embeddings"),
    (dict(image_dim=1280), "takes no image embeddings"),
    (dict(expand_timesteps=True), "keeps one timestep per row"),
    (dict(pipeline="WanPipeline"), "in a WanPipeline directory"),
    (dict(in_channels=40), "image-to-video needs 36"),
])
def test_refuses_inconsistent_a14b_i2v_directories(changes, reason):
    v = detect_wan_layout("wan2.2-a14b-i2v", **changes)
    assert v.name == "wan2.2-a14b-i2v"
    with pytest.raises(UnsupportedWanPipeline, match=reason):
        check_exportable(v)


@pytest.mark.parametrize("name", ["wan2.2-ti2v", "wan2.1-flf2v", "wan2.2-a14b-i2v"])
def test_ti2v_flf2v_and_a14b_i2v_are_exportable(name):
    # Regression: Wan 2.2 TI2V, Wan 2.1 FLF2V and Wan 2.2 I2V-A14B directories used to be refused by name.
    check_exportable(detect_wan_layout(name))


def detect_wan_layout(name, **changes):
    import tempfile

    root = Path(tempfile.mkdtemp(prefix="vgen_layout_")) / "d"
    return detect_wan(config_dir(root, **{**LAYOUTS[name], **changes}))


@pytest.mark.parametrize("changes, reason", [
    (dict(expand_timesteps=None), "without expand_timesteps"),
    (dict(in_channels=100), "TI2V denoises the latents alone"),
    (dict(pipeline="WanImageToVideoPipeline", image_encoder=True), "TI2V takes no image embeddings"),
    (dict(vae={"patch_size": None}), "needs the Wan 2.2 VAE"),
])
def test_refuses_inconsistent_ti2v_directories(changes, reason):
    v = detect_wan_layout("wan2.2-ti2v", **changes)
    assert v.name == "wan2.2-ti2v"
    with pytest.raises(UnsupportedWanPipeline, match=reason):
        check_exportable(v)


@pytest.mark.parametrize("layout, reason", [
    (dict(pipeline="WanPipeline", in_channels=36), "in a WanPipeline directory"),
    (dict(pipeline="WanImageToVideoPipeline", in_channels=36, image_encoder=False), "needs an image_encoder"),
    (dict(pipeline="WanImageToVideoPipeline", in_channels=20, image_encoder=True, image_dim=8), "needs 36"),
    (dict(pipeline="WanAnimatePipeline"), "WanAnimatePipeline is not one vgen exports"),  # (VACE is: test_export_wan_vace.py)
])
def test_refuses_inconsistent_or_other_pipelines(layout, reason, tmp_path):
    with pytest.raises(UnsupportedWanPipeline, match=reason):
        check_exportable(detect_wan(config_dir(tmp_path / "d", **layout)))


@pytest.fixture(scope="module")
def i2v_export(tmp_path_factory):
    root = tmp_path_factory.mktemp("wan_i2v")
    src = write_tiny_wan(root / "diffusers", seed=0, variant="i2v")
    return src, root / "pkg", ew.export_wan(src, root / "pkg", dtype="float32", tiny=True, seed=0)


def test_i2v_directory_is_exported_as_i2v_not_silently_as_t2v(i2v_export):
    # Regression: an I2V directory used to be written as wan2.1-t2v (image encoder dropped).
    src, pkg, manifest = i2v_export
    assert detect_wan(src).name == "wan2.1-i2v"
    assert manifest["family"] == mf.FAMILY_WAN21_I2V
    assert manifest["transformer"]["in_channels"] == 36
    assert manifest["transformer"]["compact_context"] is False
    assert {"image_encoder", "vae_encoder"} <= set(manifest["components"])
    assert manifest["image_conditioning"]["image_tokens"] == 17
    assert manifest["image_conditioning"]["mask_channels"] == 4
    assert manifest["inputs"] == {"image": "required", "last_image": "none"}
    mf.read_manifest(pkg, verify_files=True)


def test_i2v_modules_match_eager(i2v_export):
    checks = i2v_export[2]["export_checks"]
    for name in ("image_encoder", "vae_encoder", "transformer"):
        for c in checks[name]["checks"]:
            assert c["max_abs_diff"] <= c["tolerance"], (name, c)
    # An image whose shortest edge is CLIP's size is processed exactly as CLIPImageProcessor does.
    assert checks["image_encoder"]["checks"][0]["max_abs_diff"] <= 1e-5


def test_i2v_manifest_without_its_image_encoder_is_refused(i2v_export, tmp_path):
    manifest = json.loads((i2v_export[1] / "manifest.json").read_text())
    del manifest["components"]["image_encoder"]
    with pytest.raises(mf.ManifestError, match="image_encoder"):
        mf.validate_manifest(manifest)


def test_i2v_reference_loop_matches_wan_image_to_video_pipeline(i2v_export):
    """The exported modules, composed as the C++ family composes them, give diffusers'
    WanImageToVideoPipeline's latents at every step and its frames (image at the video size)."""
    import PIL.Image
    from diffusers import WanImageToVideoPipeline
    from diffusers.pipelines.wan import pipeline_wan, pipeline_wan_i2v

    from vgen_export.reference_i2v import run_i2v_reference
    from vgen_export.reference_loop import run_wan_pipeline

    from vgen_reference.wan_i2v_parity import CASE, test_image

    pipeline_wan_i2v.prompt_clean = pipeline_wan.prompt_clean  # diffusers 0.42.1 calls ftfy unguarded
    pixels = test_image(CASE["height"], CASE["width"])
    pipe = WanImageToVideoPipeline.from_pretrained(i2v_export[0])
    for g in (5.0, 1.0):
        case = {**CASE, "guidance_scale": g}
        frames, steps = run_wan_pipeline(pipe, {**case, "image": PIL.Image.fromarray(pixels)}, 7)
        rec = run_i2v_reference(i2v_export[1], torch.from_numpy(pixels).permute(2, 0, 1).float() / 255.0,
                                case["prompt"], case["negative_prompt"], case["height"], case["width"],
                                case["num_frames"], case["num_inference_steps"], g, 7)
        for i, latents in enumerate(steps):
            assert float((rec[f"latents_{i:03d}"] - latents).abs().max()) <= 1e-4, (g, i)
        assert float((rec["frames"] - frames).abs().max()) <= 1e-4, g


@pytest.fixture(scope="module")
def a14b_i2v_export(tmp_path_factory):
    root = tmp_path_factory.mktemp("wan_a14b_i2v")
    src = write_tiny_wan(root / "diffusers", seed=0, variant="a14b-i2v")
    return src, root / "pkg", ew.export_wan(src, root / "pkg", dtype="float32", tiny=True, seed=0)


def test_a14b_i2v_is_exported_with_two_experts_and_no_image_encoder(a14b_i2v_export):
    src, pkg, manifest = a14b_i2v_export
    assert detect_wan(src).name == "wan2.2-a14b-i2v"
    assert manifest["family"] == mf.FAMILY_WAN22_A14B_I2V
    assert manifest["transformer"]["in_channels"] == 36
    assert {"transformer_2", "vae_encoder"} <= set(manifest["components"])
    assert "image_encoder" not in manifest["components"]
    assert manifest["image_conditioning"]["image_encoder"] is False
    assert manifest["image_conditioning"]["mask_channels"] == 4
    assert manifest["experts"]["boundary_ratio"] == 0.9
    assert manifest["inputs"] == {"image": "required", "last_image": "none"}
    # No image rows in the context: the compact text context works for both experts.
    assert manifest["transformer"]["compact_context"] is True
    for name in ("transformer", "transformer_2", "vae_encoder"):
        for c in manifest["export_checks"][name]["checks"]:
            assert c["max_abs_diff"] <= c["tolerance"], (name, c)
    mf.read_manifest(pkg, verify_files=True)
    del manifest["components"]["vae_encoder"]
    with pytest.raises(mf.ManifestError, match="vae_encoder"):
        mf.validate_manifest(manifest)


def test_a14b_i2v_reference_loop_matches_wan_image_to_video_pipeline(a14b_i2v_export):
    """The exported experts and VAE encoder, composed as the C++ family composes them, give the
    two-expert WanImageToVideoPipeline's latents at every step and its frames."""
    import PIL.Image

    from vgen_export.reference_i2v import run_i2v_reference
    from vgen_export.reference_loop import run_wan_pipeline

    from vgen_reference.wan_i2v_parity import CASE, i2v_pipeline, test_image

    pixels = test_image(CASE["height"], CASE["width"])
    pipe = i2v_pipeline(a14b_i2v_export[0])
    frames, steps = run_wan_pipeline(pipe, {**CASE, "image": PIL.Image.fromarray(pixels)}, 7)
    rec = run_i2v_reference(a14b_i2v_export[1], torch.from_numpy(pixels).permute(2, 0, 1).float() / 255.0,
                            CASE["prompt"], CASE["negative_prompt"], CASE["height"], CASE["width"],
                            CASE["num_frames"], CASE["num_inference_steps"], CASE["guidance_scale"], 7)
    assert rec["image_embeds"] is None
    for i, latents in enumerate(steps):
        assert float((rec[f"latents_{i:03d}"] - latents).abs().max()) <= 1e-4, i
    assert float((rec["frames"] - frames).abs().max()) <= 1e-4


@pytest.fixture(scope="module")
def ti2v_export(tmp_path_factory):
    root = tmp_path_factory.mktemp("wan_ti2v")
    src = write_tiny_wan(root / "diffusers", seed=0, variant="ti2v")
    return src, root / "pkg", ew.export_wan(src, root / "pkg", dtype="float32", tiny=True, seed=0)


def test_ti2v_directory_is_exported_as_one_text_and_image_to_video_package(ti2v_export):
    src, pkg, manifest = ti2v_export
    assert detect_wan(src).name == "wan2.2-ti2v"
    assert manifest["family"] == mf.FAMILY_WAN22_TI2V
    assert manifest["latent"]["channels"] == 48 and manifest["latent"]["spatial_scale"] == 16
    assert manifest["resolution"]["height"]["multiple_of"] == 32  # latent scale 16 x patch 2
    assert manifest["transformer"]["timestep"] == "per_token"
    assert manifest["inputs"] == {"image": "optional", "last_image": "none"}
    assert "vae_encoder" in manifest["components"] and "image_encoder" not in manifest["components"]
    mf.read_manifest(pkg, verify_files=True)


def test_ti2v_modules_match_eager(ti2v_export):
    checks = ti2v_export[2]["export_checks"]
    for name in ("vae_encoder", "vae_decoder", "transformer"):
        assert checks[name]["checks"], name
        for c in checks[name]["checks"]:
            assert c["max_abs_diff"] <= c["tolerance"], (name, c)
    # The transformer was checked with per-token timesteps (tokens = F' * H'/2 * W'/2).
    assert checks["transformer"]["checks"][0]["shape"][1] == 48
    assert checks["transformer"]["compact_context"]["usable"] is True


def test_ti2v_manifest_without_its_vae_encoder_is_refused(ti2v_export):
    manifest = json.loads((ti2v_export[1] / "manifest.json").read_text())
    del manifest["components"]["vae_encoder"]
    with pytest.raises(mf.ManifestError, match="vae_encoder"):
        mf.validate_manifest(manifest)
