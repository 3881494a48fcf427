"""Export of the tiny Wan 2.1 pipeline to a vgen model package, and the reference loop.

Run: /root/.cache/vgen/venv/bin/python -m pytest -q tests/python/test_export_wan.py
The end-to-end tests are the contract for the C++ runtime: running the exported
components in the order of tools/vgen_export/reference_loop.py reproduces
diffusers.WanPipeline frames within 1e-4.
"""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from vgen_export import common as ec
from vgen_export import manifest as mf
from vgen_export import reference_loop as rl
from vgen_export import wan as ew
from vgen_export import wan_vae as ev
from vgen_export.tiny_wan import write_tiny_wan

torch.set_num_threads(1)
E2E_TOL = 1e-4
CASE = dict(prompt="a red circle moving left on a black background", negative_prompt="blurry, low quality",
            height=32, width=32, num_frames=5, num_inference_steps=3, guidance_scale=5.0)


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    root = tmp_path_factory.mktemp("wan")
    src = write_tiny_wan(root / "diffusers", seed=0)
    manifest = ew.export_wan(src, root / "pkg", dtype="float32", tiny=True, seed=0)
    return src, root / "pkg", manifest


@pytest.fixture(scope="module")
def pipe(exported):
    from diffusers import WanPipeline

    p = WanPipeline.from_pretrained(exported[0])
    p.set_progress_bar_config(disable=True)
    return p


@pytest.fixture(scope="module")
def pkg(exported):
    return rl.load_package(exported[1])


def run_pipe(pipe, case, seed, scheduler=None):
    """WanPipeline frames (output_type="pt") and its latents after every step."""
    return rl.run_wan_pipeline(pipe, case, seed, scheduler)


def assert_matches(rec, expected):
    """Per-step latents (sensitive to the text path, which the tiny VAE damps) and frames."""
    frames, steps = expected
    assert len(steps) == len(rec["timesteps"])
    for i, latents in enumerate(steps):
        assert (rec[f"latents_{i:03d}"] - latents).abs().max() <= E2E_TOL, f"step {i}"
    assert rec["frames"].shape == frames.shape
    assert (rec["frames"] - frames).abs().max() <= E2E_TOL


# ----------------------------------------------------------------------------- manifest
def test_manifest_fields(exported, pipe):
    _, pkg_dir, manifest = exported
    on_disk = json.loads((pkg_dir / "manifest.json").read_text())
    assert on_disk == json.loads(json.dumps(manifest))
    assert on_disk["format"] == "vgen-model-package" and on_disk["format_version"] == 1
    assert on_disk["family"] == "wan2.1-t2v" and on_disk["dtype"] == "float32"
    assert sorted(p.name for p in pkg_dir.iterdir()) == sorted(
        ["manifest.json", "text_encoder.pt", "transformer.pt", "vae_decoder.pt", "tokenizer.model"])
    for name, entry in on_disk["components"].items():
        assert entry["sha256"] == mf.sha256_file(pkg_dir / entry["file"]), name
        assert entry["bytes"] == (pkg_dir / entry["file"]).stat().st_size
    tok = on_disk["tokenizer"]
    assert (tok["max_length"], tok["pad_id"], tok["eos_id"]) == (512, 0, 1)
    assert tok["vocab_size"] == pipe.text_encoder.config.vocab_size
    assert on_disk["text_encoder"]["output_dim"] == pipe.text_encoder.config.d_model
    sched = on_disk["scheduler"]
    assert sched["type"] == "UniPCMultistepScheduler"
    assert sched["config"]["flow_shift"] == 3.0 and sched["config"]["use_flow_sigmas"] is True
    assert sched["config"]["prediction_type"] == "flow_prediction"
    lat = on_disk["latent"]
    assert (lat["channels"], lat["temporal_scale"], lat["spatial_scale"]) == (16, 4, 8)
    assert lat["latents_mean"] == pytest.approx(list(pipe.vae.config.latents_mean))
    assert lat["latents_std"] == pytest.approx(list(pipe.vae.config.latents_std))
    assert on_disk["transformer"]["patch_size"] == [1, 2, 2]
    assert on_disk["resolution"]["height"] == {"multiple_of": 16, "min": 16, "max": 512}
    assert on_disk["frames"] == {"rule": "4k+1", "k_multiple": 4, "min": 1, "max": 81}
    assert set(on_disk["defaults"]) == {"steps", "guidance_scale", "height", "width", "frames", "fps",
                                        "negative_prompt"}
    checks = on_disk["export_checks"]
    assert checks["tokenizer"]["mismatches"] == 0
    for name in ("text_encoder", "transformer", "vae_decoder"):
        assert len(checks[name]["checks"]) >= 2
        assert checks[name]["device_constants_left"] == 0
        for check in checks[name]["checks"]:
            assert check["max_abs_diff"] <= 1e-5, (name, check)
    inv = checks["text_encoder"]["padding_invariance"]
    assert inv["invariant"] and inv["padded_rows_zero"] and inv["max_abs_diff"] <= 1e-5
    assert on_disk["text_encoder"]["padding_invariant"] is True
    assert on_disk["transformer"]["compact_context"] is True
    assert on_disk["components"]["transformer"]["methods"] == ["forward", "forward_compact"]
    compact = checks["transformer"]["compact_context"]
    assert compact["usable"] and all(c["max_abs_diff"] <= 1e-5 for c in compact["checks"])


def test_reader_rejects_unknown_version_and_bad_hash(exported, tmp_path):
    _, pkg_dir, _ = exported
    copy = tmp_path / "pkg"
    shutil.copytree(pkg_dir, copy)
    mf.read_manifest(copy)
    data = json.loads((copy / "manifest.json").read_text())
    (copy / "manifest.json").write_text(json.dumps({**data, "format_version": 2}))
    with pytest.raises(mf.ManifestError, match="format_version"):
        mf.read_manifest(copy)
    (copy / "manifest.json").write_text(json.dumps(data))
    with open(copy / "transformer.pt", "ab") as f:
        f.write(b"x")
    with pytest.raises(mf.ManifestError, match="sha256"):
        mf.read_manifest(copy)


def test_cli_requires_one_source():
    with pytest.raises(SystemExit):
        ew.main(["--out", "/nonexistent"])


# ----------------------------------------------------------------------------- components
def test_modules_bake_no_device(pkg):
    """Tracing on CPU records .to(x.device) as .to("cpu"); the exporter rewrites those so one
    file runs on any device. (No GPU here: checked structurally.)"""
    for module in (pkg.text_encoder, pkg.transformer, pkg.vae_decoder):
        assert ec.count_device_constants(module) == 0
    assert "prim::device" in str(pkg.transformer.transformer.graph)


def test_tokenizer_matches_pipeline(pkg, pipe):
    prompts = ["a red circle moving left", "  A  Blue\tcat &amp; dog\n spinning ", "", "xyz ÄÖ 123 !!"]
    ids, mask = rl.spm_tokenize(pkg.root / "tokenizer.model", prompts, 512, clean=True)
    from diffusers.pipelines.wan.pipeline_wan import prompt_clean

    ref = pipe.tokenizer([prompt_clean(p) for p in prompts], padding="max_length", max_length=512,
                         truncation=True, add_special_tokens=True, return_attention_mask=True,
                         return_tensors="pt")
    assert torch.equal(ids, ref.input_ids) and torch.equal(mask, ref.attention_mask)
    long_ids, long_mask = rl.spm_tokenize(pkg.root / "tokenizer.model", ["red " * 600], 512)
    assert long_mask.all() and long_ids[0, -1] == 1  # truncated to 511 pieces + eos


def test_text_encoder_roundtrip(pkg, pipe):
    g = torch.Generator().manual_seed(3)
    ids, mask = ew.random_token_batch([4, 30, 512], 512, pipe.text_encoder.config.vocab_size, g)
    with torch.no_grad():
        raw = pipe.text_encoder(ids, mask).last_hidden_state
        ref = torch.stack([torch.cat([u[:n], u.new_zeros(512 - n, u.size(1))])
                           for u, n in zip(raw, mask.sum(1))])  # WanPipeline's cut + zero-pad
        out = pkg.text_encoder(ids, mask)
    assert out.shape == (3, 512, 32) and out.dtype == torch.float32
    assert (out - ref).abs().max() <= 1e-5
    # What the runtime does for a padding-invariant encoder: only up to the longest prompt.
    with torch.no_grad():
        short = pkg.text_encoder(ids[:2, :30].contiguous(), mask[:2, :30].contiguous())
    assert (short - ref[:2, :30]).abs().max() <= 1e-5


def test_transformer_roundtrip(pkg, pipe):
    g = torch.Generator().manual_seed(4)
    for b, f, h, w in ((2, 2, 4, 4), (1, 3, 8, 6)):
        x = torch.randn(b, 16, f, h, w, generator=g)
        t = torch.tensor([999.0, 3.0, 500.0][:b])
        ctx = torch.randn(b, 512, 32, generator=g)
        with torch.no_grad():
            ref = pipe.transformer(hidden_states=x, timestep=t, encoder_hidden_states=ctx, return_dict=False)[0]
            out = pkg.transformer(x, t, ctx)
        assert out.shape == x.shape and (out - ref).abs().max() <= 1e-5


def test_transformer_compact_context_matches_zero_padded_512(pkg, pipe):
    """forward_compact over each prompt's rows + one ln(count)-weighted zero row equals diffusers'
    transformer over WanPipeline's zero-padded 512 rows; the same rows without the bias do not."""
    g = torch.Generator().manual_seed(5)
    for lengths in ([1, 40], [512, 3], [7]):
        b = len(lengths)
        x = torch.randn(b, 16, 2, 4, 4, generator=g)
        t = torch.tensor([999.0, 400.0, 3.0][:b])
        ctx = torch.randn(b, 512, 32, generator=g)
        for row, n in enumerate(lengths):
            ctx[row, n:] = 0
        compact, bias = rl.compact_context(ctx, lengths)
        assert compact.size(1) == min(512, max(lengths) + 1)
        with torch.no_grad():
            ref = pipe.transformer(hidden_states=x, timestep=t, encoder_hidden_states=ctx, return_dict=False)[0]
            out = pkg.transformer.forward_compact(x, t, compact, bias)
            unbiased = pkg.transformer.forward_compact(x, t, compact, torch.zeros_like(bias))
        assert (out - ref).abs().max() <= 1e-5, lengths
        if compact.size(1) < 512:  # at 512 rows a zero bias is the full context itself
            assert (unbiased - ref).abs().max() > 1e-4, lengths


def test_vae_decoder_roundtrip_and_streaming(pkg, pipe):
    g = torch.Generator().manual_seed(5)
    for b, f, h, w in ((1, 2, 4, 4), (2, 4, 6, 4)):
        z = torch.randn(b, 16, f, h, w, generator=g)
        with torch.no_grad():
            ref = pipe.vae.decode(z, return_dict=False)[0]
            out = pkg.vae_decoder(z)
            first, caches = pkg.vae_decoder.decode_first(z[:, :, :1])
            chunks = [first]
            for i in range(1, f):
                chunk, caches = pkg.vae_decoder.decode_step(z[:, :, i:i + 1], caches)
                chunks.append(chunk)
        assert out.shape == (b, 3, 4 * (f - 1) + 1, 8 * h, 8 * w)
        assert (out - ref).abs().max() <= 1e-5
        assert torch.equal(torch.cat(chunks, 2), out)
        # the tiled decode's method (stages/exec/tiled_decode.hpp): forward before its clamp
        assert torch.equal(pkg.vae_decoder.decode_unclamped(z).clamp(-1.0, 1.0), out)
        assert first.shape[2] == 1 and all(c.shape[2] == 4 for c in chunks[1:])


def test_vae_rms_norms_are_rewritten_without_vector_norm(exported, pipe):
    """The traced VAE uses the sum-of-squares RMS norm (no aten::linalg_vector_norm, the slow
    strided reduction) and the eager model keeps diffusers' own forward afterwards."""
    from diffusers.models.autoencoders.autoencoder_kl_wan import WanRMS_norm

    report = exported[2]["export_checks"]["vae_decoder"]
    norms = [m for m in pipe.vae.decoder.modules() if isinstance(m, WanRMS_norm)]
    assert report["rms_norms_rewritten"] == len(norms) > 0
    module = torch.jit.load(str(exported[1] / "vae_decoder.pt"))
    kinds = {n.kind() for _, g in ec.method_graphs(module) for n in g.findAllNodes("aten::linalg_vector_norm")}
    assert not kinds
    assert all("forward" not in m.__dict__ for m in norms)


def test_vae_rewrite_that_misses_tolerance_falls_back_to_diffusers_norm(pipe, tmp_path, monkeypatch):
    """A rewrite whose traced graph exceeds the checks' tolerance is not shipped: the exporter
    traces diffusers' own norm instead and records the rejected checks."""
    exact = ev.rms_norm_by_sum_of_squares

    def off_by_1e3(self, x):
        return exact(self, x) + 1e-3

    monkeypatch.setattr(ev, "rms_norm_by_sum_of_squares", off_by_1e3)
    report = ev.export_vae_decoder(pipe.vae, tmp_path / "vae_decoder.pt", torch.Generator().manual_seed(0))
    assert report["rms_norms_rewritten"] == 0
    assert any(c["max_abs_diff"] > c["tolerance"] for c in report["rms_norm_rewrite_rejected"])
    assert all(c["max_abs_diff"] <= c["tolerance"] for c in report["checks"])
    module = torch.jit.load(str(tmp_path / "vae_decoder.pt"))
    assert any(True for _, g in ec.method_graphs(module) for _ in g.findAllNodes("aten::linalg_vector_norm"))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("channel_first", [True, False])
def test_rms_norm_by_sum_of_squares_matches_diffusers(dtype, channel_first):
    from diffusers.models.autoencoders.autoencoder_kl_wan import WanRMS_norm

    g = torch.Generator().manual_seed(3)
    norm = WanRMS_norm(12, channel_first=channel_first, images=False)
    with torch.no_grad():
        norm.gamma.copy_(torch.randn(norm.gamma.shape, generator=g))
    x = torch.randn((2, 12, 3, 5, 7) if channel_first else (2, 3, 12), generator=g).to(dtype)
    x[0].zero_()  # the eps clamp: an all-zero vector stays zero, no NaN
    with torch.no_grad():
        ref, out = norm(x), ev.rms_norm_by_sum_of_squares(norm, x)
    assert out.dtype == ref.dtype and torch.isfinite(out.float()).all()
    tol = 1e-6 if dtype == torch.float32 else 1e-2
    assert (out.float() - ref.float()).abs().max() <= tol


# ----------------------------------------------------------------------------- end to end
def test_end_to_end_matches_wan_pipeline(pkg, pipe, tmp_path):
    seed = 7
    expected = run_pipe(pipe, CASE, seed)
    rec = rl.run_reference(pkg, **CASE, seed=seed, dump_dir=tmp_path / "dump")
    assert rec["frames"].shape == (1, 5, 3, 32, 32)
    assert len(rec["timesteps"]) == CASE["num_inference_steps"]
    assert_matches(rec, expected)
    # The comparison is discriminating: another negative prompt moves the latents by far more.
    other = rl.run_reference(pkg, **{**CASE, "negative_prompt": ""}, seed=seed)
    assert (other["latents_final"] - expected[1][-1]).abs().max() > 20 * E2E_TOL
    # The dump is readable without Python objects: TorchScript buffers + npy + json index.
    index = json.loads((tmp_path / "dump" / "reference.json").read_text())
    assert index["params"]["seed"] == seed and "latents_002" in index["tensors"]
    bag = torch.jit.load(str(tmp_path / "dump" / "reference.pt"))
    assert torch.equal(bag.frames, rec["frames"]) and torch.equal(bag.input_ids, rec["input_ids"])
    assert (tmp_path / "dump" / "prompt_embeds.npy").is_file()


@pytest.mark.parametrize("compact", [False, True], ids=["full_context", "compact_context"])
def test_end_to_end_without_guidance_and_other_shape(pkg, pipe, compact):
    case = {**CASE, "guidance_scale": 1.0, "height": 48, "width": 32, "num_frames": 9,
            "num_inference_steps": 2}
    expected = run_pipe(pipe, case, 11)
    rec = rl.run_reference(pkg, **case, seed=11, compact=compact)
    assert rec["frames"].shape == (1, 9, 3, 48, 32)
    assert rec["prompt_embeds"].shape[0] == 1  # no negative branch
    assert_matches(rec, expected)


def test_end_to_end_compact_context_matches_wan_pipeline(pkg, pipe):
    """The runtime's path for a compact_context package (forward_compact on each prompt's rows
    + one ln(count)-weighted zero row), with guidance: same latents and frames as WanPipeline."""
    assert pkg.manifest["transformer"]["compact_context"]
    expected = run_pipe(pipe, CASE, 7)
    assert_matches(rl.run_reference(pkg, **CASE, seed=7, compact=True), expected)


def test_end_to_end_flow_match_euler(pkg, pipe):
    from diffusers import FlowMatchEulerDiscreteScheduler

    sched = FlowMatchEulerDiscreteScheduler(num_train_timesteps=1000, shift=3.0)
    expected = run_pipe(pipe, CASE, 3, scheduler=sched)
    rec = rl.run_reference(pkg, **CASE, seed=3, scheduler=FlowMatchEulerDiscreteScheduler.from_config(sched.config))
    assert_matches(rec, expected)


def test_reference_rejects_invalid_request(pkg):
    with pytest.raises(ValueError, match="height"):
        rl.run_reference(pkg, "x", height=40, width=32, num_frames=5)
    with pytest.raises(ValueError, match="frames"):
        rl.run_reference(pkg, "x", height=32, width=32, num_frames=6)


def test_bfloat16_package_matches_bfloat16_pipeline(exported, tmp_path):
    """--dtype bfloat16: text encoder and transformer in bf16, VAE kept in float32, as in
    diffusers' Wan example (the pipeline loaded with dtype=bf16 and a float32 VAE)."""
    from diffusers import AutoencoderKLWan, WanPipeline

    src = exported[0]
    manifest = ew.export_wan(src, tmp_path / "pkg", dtype="bfloat16", tiny=True)
    assert manifest["dtype"] == "bfloat16" and manifest["components"]["vae_decoder"]["dtype"] == "float32"
    # A bf16 ln(count) bias rounds past float32's tolerance: the runtime keeps all 512 rows.
    assert manifest["transformer"]["compact_context"] is False
    vae = AutoencoderKLWan.from_pretrained(src, subfolder="vae", dtype=torch.float32)
    pipe = WanPipeline.from_pretrained(src, vae=vae, dtype=torch.bfloat16)
    pipe.set_progress_bar_config(disable=True)
    rec = rl.run_reference(tmp_path / "pkg", **CASE, seed=7)
    assert rec["prompt_embeds"].dtype == torch.bfloat16
    assert_matches(rec, run_pipe(pipe, CASE, 7))


def test_defaults_are_clamped_into_a_smaller_models_limits():
    """A non-tiny export of a model whose rope length allows at most 512 px wrote Wan's 832x480
    defaults, which the C++ reader now refuses (the bench's medium package failed to load)."""
    lim = {"multiple_of": 16, "min": 16, "max": 512}
    d = ew.fit_defaults(ew.REAL_DEFAULTS, lim, lim, 33)
    assert (d["width"], d["height"], d["frames"]) == (512, 480, 33)
    assert ew.fit_defaults(ew.REAL_DEFAULTS, {**lim, "max": 2048}, {**lim, "max": 2048}, 257) == ew.REAL_DEFAULTS


def test_compile_aoti_is_refused_by_name_where_it_is_not_supported(exported, tmp_path):
    """--compile aoti covers float text-to-video transformers; with int8 Linears it is refused
    before anything is written (the C++ fixture wan_aoti_parity exercises the compile itself)."""
    with pytest.raises(ValueError, match="compile aoti: only for float Wan text-to-video"):
        ew.export_wan(exported[0], tmp_path / "pkg", tiny=True, quantize="int8", compile="aoti")
    assert not (tmp_path / "pkg").exists()
