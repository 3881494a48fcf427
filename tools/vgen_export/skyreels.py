"""Export a diffusers SkyReels-V2 diffusion-forcing checkpoint into a vgen model package.

    python -m vgen_export.skyreels --diffusers DIR --out PKG [--dtype float32|float16|bfloat16]
    python -m vgen_export.skyreels --tiny [--seed N] --out PKG   # builds the tiny test model

SkyReels-V2 DF (``SkyReelsV2DiffusionForcingPipeline`` and its video-to-video sibling) is Wan
2.1's architecture with ``SkyReelsV2Transformer3DModel``: one timestep per latent frame
(diffusion forcing) and an fps embedding. The text encoder, tokenizer, VAE and scheduler are
Wan's and are exported by the Wan exporter's functions; the transformer here as

    forward(hidden_states [B,C,F',H',W'], timestep float32 [B,F'], context [B,L,D], fps float32 [B])

where fps is diffusers' fps flag (0 for 16 fps, else 1). diffusers' own forward adds the fps
projection by repeating it over frames, which is right only for one row (the pipeline calls the
transformer once per prompt); the wrapper adds it per row instead, the same values for B = 1
and row-independent for B > 1 (checked against one-row eager calls).

The package's family is ``skyreels-v2-df``; it ships the VAE encoder too and takes an optional
video (manifest ``inputs.video``): a job with a video extends it (the V2V DF pipeline: the
video's last ``overlap_history`` frames' latents condition the new segment).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import warnings
from pathlib import Path
from typing import Any

import torch

from . import manifest as mf
from .common import DTYPES, assert_checks, dtype_tolerance, find_spm_file, load_saved, max_diff, run_export, save_module
from .latent_preview import preview_section, torchscript_decoder
from .reference_loop import check_tokenizer
from .wan import export_text_encoder, fit_defaults, load_scheduler
from .wan_i2v import export_vae_encoder
from .wan_vae import export_vae_decoder

FAMILY = mf.FAMILY_SKYREELS_V2_DF
PIPELINES = ("SkyReelsV2DiffusionForcingPipeline", "SkyReelsV2DiffusionForcingVideoToVideoPipeline")
TRANSFORMER_CLASS = "SkyReelsV2Transformer3DModel"
# SkyReels-V2-DF-1.3B-540P's model card: 97 frames at 544x960, 24 fps, guidance 6, shift 8,
# 30 steps; extension with overlap_history 17 (the pipeline's recommendation, 17 or 37).
REAL_DEFAULTS = {"steps": 30, "guidance_scale": 6.0, "height": 544, "width": 960, "frames": 97, "fps": 24,
                 "negative_prompt": "Bright tones, overexposed, static, blurred details, subtitles, style, works, "
                                    "paintings, images, static, overall gray, worst quality, low quality"}
TINY_DEFAULTS = {"steps": 3, "guidance_scale": 5.0, "height": 32, "width": 32, "frames": 9, "fps": 24,
                 "negative_prompt": "low quality, blurry"}
REAL_OVERLAP, TINY_OVERLAP = 17, 5


class UnsupportedSkyReels(ValueError):
    """A directory that is not a SkyReels-V2 diffusion-forcing checkpoint vgen can export."""


def detect_skyreels_df(diffusers_dir: Path | str) -> dict[str, Any]:
    """The transformer config of a SkyReels-V2 DF directory (model_index.json's pipeline class and
    the transformer's class); UnsupportedSkyReels naming what differs otherwise."""
    root = Path(diffusers_dir)
    index_file = root / "model_index.json"
    if not index_file.is_file():
        raise UnsupportedSkyReels(f"model_index.json is missing in {root}")
    index = json.loads(index_file.read_text())
    pipeline = str(index.get("_class_name", ""))
    if pipeline not in PIPELINES:
        raise UnsupportedSkyReels(f"pipeline {pipeline!r} is not a SkyReels-V2 diffusion-forcing pipeline "
                                  f"({' | '.join(PIPELINES)}; SkyReels-V2 I2V/T2V without DF are not exported)")
    if index.get("image_encoder") not in (None, [None, None]):
        raise UnsupportedSkyReels(f"{pipeline} with an image_encoder (the DF I2V checkpoint) is not exported")
    cfg = json.loads((root / "transformer" / "config.json").read_text())
    if cfg.get("_class_name") != TRANSFORMER_CLASS:
        raise UnsupportedSkyReels(f"transformer class {cfg.get('_class_name')!r} is not {TRANSFORMER_CLASS}")
    if cfg.get("in_channels") != cfg.get("out_channels"):
        raise UnsupportedSkyReels(f"transformer in_channels {cfg.get('in_channels')} != out_channels "
                                  f"{cfg.get('out_channels')} (an image-conditioned DF model)")
    return cfg


def pipeline_max_sequence_length() -> int:
    import inspect

    from diffusers import SkyReelsV2DiffusionForcingPipeline

    return int(inspect.signature(SkyReelsV2DiffusionForcingPipeline.__call__).parameters["max_sequence_length"].default)


class _RowFps(torch.nn.Module):
    """The condition embedder followed by each row's fps projection added to its timestep
    projection ([B, F', 6 D] + [B, 1, 6 D]), as diffusers adds the repeated projection for one row."""

    def __init__(self, inner, fps_embedding, fps_projection):
        super().__init__()
        self.inner, self.fps_embedding, self.fps_projection = inner, fps_embedding, fps_projection
        self.fps: torch.Tensor | None = None

    def forward(self, timestep, encoder_hidden_states, encoder_hidden_states_image=None):
        temb, proj, text, image = self.inner(timestep, encoder_hidden_states, encoder_hidden_states_image)
        if self.fps is not None:
            proj = proj + self.fps_projection(self.fps_embedding(self.fps)).unsqueeze(1)
        return temb, proj, text, image


class SkyReelsTransformerExport(torch.nn.Module):
    """forward(x [B,C,F',H',W'], timestep float32 [B,F'], context [B,L,D], fps float32 [B]) -> flow
    prediction [B,C,F',H',W'], each row as diffusers' one-row DF call (enable_diffusion_forcing)."""

    def __init__(self, transformer):
        super().__init__()
        self.transformer = transformer
        self.sample_info = bool(transformer.config.inject_sample_info)
        if self.sample_info:
            self.row_fps = _RowFps(transformer.condition_embedder, transformer.fps_embedding, transformer.fps_projection)
            transformer.condition_embedder = self.row_fps
            transformer.register_to_config(inject_sample_info=False)  # the wrapper adds it, per row

    def forward(self, hidden_states, timestep, encoder_hidden_states, fps):
        if self.sample_info:
            self.row_fps.fps = fps.long()
        try:
            return self.transformer(hidden_states=hidden_states, timestep=timestep,
                                    encoder_hidden_states=encoder_hidden_states, enable_diffusion_forcing=True,
                                    fps=None, return_dict=False)[0]
        finally:
            if self.sample_info:
                self.row_fps.fps = None


def export_df_transformer(transformer, path: Path, max_length: int, dtype, gen) -> dict[str, Any]:
    """Traces the wrapper and checks the saved module, row by row, against diffusers' own eager
    one-row DF call (its fps repeat), at shapes other than the trace shape, with per-frame
    timesteps that differ (0 on a clean prefix, as extension has)."""
    from .common import trace_quietly

    cfg = transformer.config
    _, ph, pw = cfg.patch_size

    def inputs(b, f, h, w):
        x = torch.randn(b, cfg.in_channels, f, h * ph, w * pw, generator=gen).to(dtype)
        t = (torch.rand(b, f, generator=gen) * 1000.0)
        t[::2, : max(1, f // 2)] = 0  # a clean prefix in half the rows
        ctx = torch.randn(b, max_length, cfg.text_dim, generator=gen).to(dtype)
        fps = torch.tensor([float(i % 2) for i in range(b)])
        return x, t, ctx, fps

    # diffusers' reference: one row at a time, its own forward (before the wrapper patches it).
    cases = [inputs(*s) for s in ((1, 3, 3, 4), (3, 2, 2, 2), (2, 4, 1, 3))]
    refs = []
    with torch.no_grad():
        for x, t, ctx, fps in cases:
            rows = [transformer(hidden_states=x[r:r + 1], timestep=t[r:r + 1], encoder_hidden_states=ctx[r:r + 1],
                                enable_diffusion_forcing=True, fps=[int(fps[r])] if cfg.inject_sample_info else None,
                                return_dict=False)[0] for r in range(x.size(0))]
            refs.append(torch.cat(rows, 0))
    wrapper = SkyReelsTransformerExport(transformer).eval()
    trace_shape = (2, 2, 2, 2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traced = trace_quietly(wrapper, inputs(*trace_shape))
    saved = save_module(traced, path)
    loaded = load_saved(path)
    checks = [{"shape": list(c[0].shape), "max_abs_diff": max_diff(loaded(*c), ref), "tolerance": dtype_tolerance(dtype, ref)}
              for c, ref in zip(cases, refs)]
    b, f, h, w = trace_shape
    return {"trace_shape": [b, cfg.in_channels, f, h * ph, w * pw], **saved, "checks": checks,
            "reference": "diffusers' one-row enable_diffusion_forcing call per row"}


def export_skyreels(diffusers_dir: Path | str, out_dir: Path | str, dtype: str = "float32", tiny: bool = False,
                    flow_shift: float | None = None, max_side: int = 1280, max_frames: int = 121, seed: int = 0,
                    overlap_history: int | None = None) -> dict[str, Any]:
    """Export a SkyReels-V2 DF directory; returns the manifest. Refused (UnsupportedSkyReels)
    before anything is written when it is not one."""
    import sentencepiece
    from diffusers import AutoencoderKLWan, SkyReelsV2Transformer3DModel
    from transformers import UMT5EncoderModel

    diffusers_dir, out_dir = Path(diffusers_dir), Path(out_dir)
    tcfg = dict(detect_skyreels_df(diffusers_dir))
    out_dir.mkdir(parents=True, exist_ok=True)
    tdtype = DTYPES[dtype]
    gen = torch.Generator().manual_seed(1234)
    max_length = pipeline_max_sequence_length()
    spm_file = find_spm_file(diffusers_dir)
    shutil.copyfile(spm_file, out_dir / "tokenizer.model")
    sp = sentencepiece.SentencePieceProcessor(model_file=str(spm_file))
    defaults = TINY_DEFAULTS if tiny else REAL_DEFAULTS
    checks: dict[str, Any] = {"tokenizer": check_tokenizer(diffusers_dir / "tokenizer", spm_file, max_length,
                                                           [defaults["negative_prompt"]])}
    if checks["tokenizer"]["mismatches"]:
        raise RuntimeError(f"SentencePiece disagrees with the pipeline tokenizer: {checks['tokenizer']}")
    with torch.no_grad():
        encoder = UMT5EncoderModel.from_pretrained(diffusers_dir / "text_encoder", dtype=tdtype).eval()
        checks["text_encoder"] = export_text_encoder(encoder, out_dir / "text_encoder.pt", max_length, tdtype, gen)
        text_dim = int(encoder.config.d_model)
        del encoder
        transformer = SkyReelsV2Transformer3DModel.from_pretrained(diffusers_dir, subfolder="transformer",
                                                                   dtype=tdtype).eval()
        checks["transformer"] = export_df_transformer(transformer, out_dir / "transformer.pt", max_length, tdtype, gen)
        del transformer
        vae = AutoencoderKLWan.from_pretrained(diffusers_dir, subfolder="vae", dtype=torch.float32).eval()
        vcfg = dict(vae.config)
        checks["vae_decoder"] = export_vae_decoder(vae, out_dir / "vae_decoder.pt", gen)
        checks["vae_encoder"] = export_vae_encoder(vae, out_dir / "vae_encoder.pt", gen)
        del vae
    for name in ("text_encoder", "transformer", "vae_decoder", "vae_encoder"):
        assert_checks(name, checks[name])

    scheduler = load_scheduler(diffusers_dir, flow_shift)
    spatial, temporal = int(vcfg.get("scale_factor_spatial", 8)), int(vcfg.get("scale_factor_temporal", 4))
    patch = [int(p) for p in tcfg["patch_size"]]
    rope = int(tcfg["rope_max_seq_len"])

    def side(p: int) -> dict[str, int]:
        multiple = spatial * p
        return {"multiple_of": multiple, "min": multiple, "max": min(max_side, rope * multiple) // multiple * multiple}

    frames_max = (min(max_frames, temporal * (rope * patch[0] - 1) + 1) - 1) // temporal * temporal + 1
    overlap = overlap_history or (TINY_OVERLAP if tiny else REAL_OVERLAP)
    if overlap % temporal != 1 or overlap >= frames_max:
        raise ValueError(f"overlap_history {overlap}: must be {temporal}k+1 and below the package's {frames_max} frames")
    block = int(tcfg.get("num_frame_per_block") or 1)
    manifest = {
        **mf.package_head(FAMILY, dtype, diffusers_dir, tiny, seed),
        "components": mf.torchscript_components(
            out_dir, dtype, vae_decoder_methods=("forward", "decode_first", "decode_step", "decode_unclamped"),
            vae_encoder_methods=("forward", "encode_first")),
        "tokenizer": mf.t5_tokenizer_section(
            sp, max_length, prompt_clean="html-unescape twice, collapse whitespace runs to one space, strip"),
        "text_encoder": {"output_dim": text_dim, "output_masked": True,
                         "padding_invariant": checks["text_encoder"]["padding_invariance"]["invariant"]},
        "scheduler": mf.scheduler_section(scheduler),
        "latent": {"channels": int(vcfg["z_dim"]), "temporal_scale": temporal, "spatial_scale": spatial,
                   "latents_mean": [float(v) for v in vcfg["latents_mean"]],
                   "latents_std": [float(v) for v in vcfg["latents_std"]], "dtype": "float32"},
        "transformer": {"patch_size": patch, "in_channels": int(tcfg["in_channels"]),
                        "out_channels": int(tcfg["out_channels"]), "text_dim": int(tcfg["text_dim"]),
                        "rope_max_seq_len": rope, "prediction": "flow", "timestep_dtype": "float32",
                        "timestep": "per_frame", "compact_context": False,
                        "fps_embedding": bool(tcfg.get("inject_sample_info", False))},
        # What the family runs (docs/MODEL_PACKAGE.md): synchronous diffusion forcing (ar_step 0),
        # and extension conditioned on the input's last overlap frames' latents (diffusers'
        # overlap_history = extension.overlap_frames).
        "diffusion_forcing": {"ar_step": 0, "causal_block_size": block, "addnoise_condition": 0,
                              "fps_flag": "0 when the job's fps is 16, else 1"},
        "extension": {"overlap_frames": overlap},
        "video_conditioning": {"vae_encoder_input": "float32 [B,3,F,H,W] in [-1,1]; output: the posterior mean"},
        "inputs": {"video": "optional"},
        "resolution": {"height": side(patch[1]), "width": side(patch[2])},
        "frames": {"rule": "4k+1", "k_multiple": temporal, "min": 1, "max": frames_max},
        "defaults": fit_defaults(defaults, side(patch[1]), side(patch[2]), frames_max),
        "export_checks": checks,
    }
    manifest["preview"] = preview_section(manifest, torchscript_decoder(out_dir, manifest))
    mf.write_manifest(out_dir, manifest)
    return manifest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m vgen_export.skyreels",
                                     description="Export a diffusers SkyReels-V2 diffusion-forcing directory to a vgen package")
    parser.add_argument("--diffusers", type=Path, help="diffusers checkpoint directory")
    parser.add_argument("--out", type=Path, required=True, help="package directory to write")
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="float32")
    parser.add_argument("--tiny", action="store_true", help="build the tiny random test model first")
    parser.add_argument("--seed", type=int, default=0, help="seed for --tiny")
    parser.add_argument("--flow-shift", type=float, default=None, help="override the scheduler shift")
    parser.add_argument("--overlap-history", type=int, default=None,
                        help="frames of the input that condition an extension (4k+1; default 17, tiny 5)")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    args = parser.parse_args(argv)
    if args.tiny == (args.diffusers is not None):
        parser.error("give exactly one of --diffusers DIR or --tiny")
    torch.set_num_threads(args.threads)
    return run_export("export_skyreels", "skyreels", export_skyreels, args.out, args.diffusers, args.seed,
                      UnsupportedSkyReels, ("text_encoder", "transformer", "vae_decoder", "vae_encoder"),
                      dtype=args.dtype, flow_shift=args.flow_shift, overlap_history=args.overlap_history)


if __name__ == "__main__":
    sys.exit(main())
