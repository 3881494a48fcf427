"""Export a diffusers LTX-Video text-to-video checkpoint into a vgen model package.

    python -m vgen_export.ltx --diffusers DIR --out PKG [--dtype float32|float16|bfloat16]
    python -m vgen_export.ltx --tiny [--seed N] --out PKG        # builds the tiny test model

The package (docs/MODEL_PACKAGE.md, family "ltx-video") holds TorchScript modules, the
SentencePiece tokenizer model and ``manifest.json``:

- text_encoder.pt  (input_ids int64 [B,L]) -> [B,L,D]: T5 run without an attention mask, as
  LTXPipeline runs it, so every one of the L = 128 positions is kept (the mask goes to the
  transformer instead);
- transformer.pt   (hidden_states [B,S,C] packed tokens, timestep float32 [B] or per token [B,S],
  encoder_hidden_states [B,L,D], encoder_attention_mask float32 [B,L], video_coords float32
  [B,3,S]) -> [B,S,C]. video_coords are the rope coordinates LTXPipeline builds from the
  latent grid and ``rope_interpolation_scale = (temporal_ratio / frame_rate, spatial_ratio,
  spatial_ratio)``: ``video_coords(...)`` below is the formula the runtime implements, and the
  export checks compare it with diffusers called the pipeline's way;
- vae_decoder.pt   (z [B,C,F,H,W] un-normalised latents, timestep float32 [B]) -> video in
  [-1,1]-ish [B,3,F*8-7,H*32,W*32] (timestep ignored unless the decoder is conditioned);
- vae_encoder.pt   (video [B,3,F,H,W] in [-1,1]) -> [B,2C,F',H',W']: the posterior's mean, then
  its std (LTXImageToVideoPipeline samples mean + std * noise from the job's generator), so the
  package also runs image-to-video (manifest inputs.image "optional"): the image's sampled,
  normalised latents as latent frame 0, that frame's tokens at timestep 0 and not stepped.

What cannot be reproduced is refused by name: a decoder that injects noise (unseeded
``torch.randn`` inside the VAE), transformer patch sizes other than 1, a scheduler other than
FlowMatchEulerDiscreteScheduler or with sigma conversions vgen does not port, a pipeline
class other than LTXPipeline / LTXImageToVideoPipeline.
"""

from __future__ import annotations

import argparse
import inspect
import json
import shutil
import sys
import warnings
from pathlib import Path
from typing import Any

import torch

from . import manifest as mf
from .common import (DTYPES, ExportRefused, assert_checks, dtype_tolerance, find_spm_file, flow_match_euler_config,
                     load_saved, max_diff, pipeline_index, run_export, save_module, trace_quietly)
from .latent_preview import preview_section, torchscript_decoder
from .quantize import add_precisions, add_quantize_arguments, check_quantize, only_precision, precision_of, quantization_field
from .quantize import quantize_linears, variant_name, writes_variant
from .reference_loop import check_tokenizer

ACCEPTED_PIPELINES = ("LTXPipeline", "LTXImageToVideoPipeline")
REAL_DEFAULTS = {"steps": 50, "guidance_scale": 3.0, "height": 512, "width": 704, "frames": 161,
                 "fps": 25, "negative_prompt": ""}
TINY_DEFAULTS = {"steps": 3, "guidance_scale": 3.0, "height": 64, "width": 64, "frames": 9,
                 "fps": 25, "negative_prompt": ""}


def video_coords(batch: int, frames: int, height: int, width: int, frame_rate: float, temporal_ratio: int,
                 spatial_ratio: int, patch_size: int = 1, patch_size_t: int = 1) -> torch.Tensor:
    """[B,3,F*H*W] float32: the latent grid (frame, row, column) scaled by LTXPipeline's
    rope_interpolation_scale and the patch sizes, before the division by the rope's base sizes
    (which the transformer does). The same float32 operations in the same order as diffusers'
    LTXVideoRotaryPosEmbed._prepare_video_coords, so the rope is bit-identical."""
    grid = torch.stack(torch.meshgrid(torch.arange(frames, dtype=torch.float32),
                                      torch.arange(height, dtype=torch.float32),
                                      torch.arange(width, dtype=torch.float32), indexing="ij"), 0)
    scale = (temporal_ratio / frame_rate, spatial_ratio, spatial_ratio)
    rows = [grid[0] * scale[0] * patch_size_t, grid[1] * scale[1] * patch_size, grid[2] * scale[2] * patch_size]
    return torch.stack(rows, 0).flatten(1).unsqueeze(0).repeat(batch, 1, 1)


class TextEncoderExport(torch.nn.Module):
    def __init__(self, encoder: torch.nn.Module):
        super().__init__()
        self.encoder = encoder

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.encoder(input_ids)[0]


class TransformerExport(torch.nn.Module):
    def __init__(self, transformer: torch.nn.Module):
        super().__init__()
        self.transformer = transformer

    def forward(self, hidden_states, timestep, encoder_hidden_states, encoder_attention_mask, coords):
        return self.transformer(hidden_states=hidden_states, encoder_hidden_states=encoder_hidden_states,
                                timestep=timestep, encoder_attention_mask=encoder_attention_mask,
                                video_coords=coords, return_dict=False)[0]


class VaeEncoderExport(torch.nn.Module):
    """video [B,3,F,H,W] in [-1,1] -> cat([mean, std], 1): the posterior AutoencoderKLLTXVideo.encode
    returns, as DiagonalGaussianDistribution computes its std (logvar clamped to [-30, 20])."""

    def __init__(self, vae: torch.nn.Module):
        super().__init__()
        self.vae = vae

    def forward(self, video: torch.Tensor) -> torch.Tensor:
        mean, logvar = torch.chunk(self.vae._encode(video), 2, dim=1)  # noqa: SLF001
        return torch.cat([mean, torch.exp(0.5 * torch.clamp(logvar, -30.0, 20.0))], 1)


class VaeDecoderExport(torch.nn.Module):
    def __init__(self, vae: torch.nn.Module):
        super().__init__()
        self.decoder = vae.decoder
        self.conditioned = bool(vae.config.timestep_conditioning)

    def forward(self, z: torch.Tensor, timestep: torch.Tensor) -> torch.Tensor:
        return self.decoder(z, timestep if self.conditioned else None)


def refuse_unsupported(diffusers_dir: Path) -> dict[str, Any]:
    """The pipeline's model_index.json, after refusing what vgen cannot run (ExportRefused)."""
    index = pipeline_index(diffusers_dir, ACCEPTED_PIPELINES, "LTX-Video text-to-video",
                           ("text_encoder", "transformer", "vae", "scheduler", "tokenizer"))
    sched = flow_match_euler_config(diffusers_dir, "LTX")
    if sched.get("time_shift_type", "exponential") not in ("exponential", "linear"):
        raise ExportRefused(f"scheduler time_shift_type {sched['time_shift_type']!r} is not supported")
    tcfg = json.loads((diffusers_dir / "transformer" / "config.json").read_text())
    if tcfg.get("patch_size", 1) != 1 or tcfg.get("patch_size_t", 1) != 1:
        raise ExportRefused(f"transformer patch_size {tcfg.get('patch_size')}/patch_size_t "
                            f"{tcfg.get('patch_size_t')}: vgen packs latents with patch size 1 only")
    vcfg = json.loads((diffusers_dir / "vae" / "config.json").read_text())
    if any(vcfg.get("decoder_inject_noise") or []):
        raise ExportRefused("vae decoder_inject_noise: the decoder draws unseeded noise, which vgen cannot reproduce")
    return index


def pipeline_max_sequence_length() -> int:
    from diffusers import LTXPipeline

    return int(inspect.signature(LTXPipeline.__call__).parameters["max_sequence_length"].default)


def export_text_encoder(encoder, path: Path, max_length: int, dtype, gen) -> dict[str, Any]:
    wrapper = TextEncoderExport(encoder).eval()
    vocab = encoder.config.vocab_size
    traced = trace_quietly(wrapper, (torch.randint(0, vocab, (2, max_length), generator=gen),))
    saved = save_module(traced, path)
    loaded = load_saved(path)
    checks = []
    for batch in (1, 3):
        ids = torch.randint(0, vocab, (batch, max_length), generator=gen)
        ref = wrapper(ids)
        checks.append({"shape": list(ids.shape), "max_abs_diff": max_diff(loaded(ids), ref),
                       "tolerance": dtype_tolerance(dtype, ref)})
    return {"trace_shape": [2, max_length], **saved, "checks": checks}


def export_transformer(transformer, path: Path, max_length: int, dtype, gen, temporal: int,
                       spatial: int, quantize: str | None = None) -> dict[str, Any]:
    """quantize ("int8" or "fp8", vgen_export/quantize.py): the transformer blocks' Linears
    dynamically int8, or e4m3 with a float32 scale per output channel; the checks then compare
    the TorchScript module with the eager quantized one, and report (not check) how far it is
    from the float transformer called the pipeline's way."""
    cfg = transformer.config
    wrapper = TransformerExport(transformer).eval()
    quantized = 0
    if quantize:
        wrapper, quantized = quantize_linears(wrapper, ".transformer_blocks.", quantize, dtype)

    def inputs(b, f, h, w, fps, lengths, per_token=False):
        x = torch.randn(b, f * h * w, cfg.in_channels, generator=gen).to(dtype)
        t = torch.rand(b, generator=gen) * 1000.0
        if per_token:  # image-to-video rows: the first latent frame's tokens at 0
            t = t[:, None].repeat(1, f * h * w)
            t[::2, :h * w] = 0
        ctx = torch.randn(b, max_length, cfg.caption_channels, generator=gen).to(dtype)
        mask = torch.zeros(b, max_length)
        for row, n in enumerate(lengths):
            mask[row, :n] = 1
        return x, t, ctx, mask, video_coords(b, f, h, w, fps, temporal, spatial)

    trace = inputs(2, 2, 2, 3, 25.0, [3, max_length], per_token=True)
    traced = trace_quietly(wrapper, trace)
    saved = save_module(traced, path)
    loaded = load_saved(path)
    checks = []
    for b, f, h, w, fps, lengths, per_token in ((1, 3, 2, 2, 24.0, [5], False), (3, 1, 1, 1, 25.0, [1, 7, max_length], False),
                                                (2, 2, 2, 3, 30.0, [3, 4], False), (3, 3, 2, 2, 24.0, [5, 2, 9], True)):
        x, t, ctx, mask, coords = inputs(b, f, h, w, fps, lengths, per_token)
        # diffusers called as LTXPipeline calls it: the rope built from the grid and the scale.
        ref = transformer(hidden_states=x, encoder_hidden_states=ctx, timestep=t, encoder_attention_mask=mask.bool(),
                          num_frames=f, height=h, width=w, rope_interpolation_scale=(temporal / fps, spatial, spatial),
                          return_dict=False)[0]
        got = loaded(x, t, ctx, mask, coords)
        check = {"shape": list(x.shape), "fps": fps, "timestep": list(t.shape),
                 "max_abs_diff": max_diff(got, wrapper(x, t, ctx, mask, coords) if quantized else ref),
                 "tolerance": dtype_tolerance(dtype, ref)}
        if quantized:  # how far int8 / fp8 moves the prediction from float (reported, not a check)
            check["max_abs_diff_vs_float"] = max_diff(got, ref)
        checks.append(check)
    return {"trace_shape": list(trace[0].shape), **saved, "checks": checks,
            **({"quantized_linears": quantized} if quantized else {})}


def export_vae_decoder(vae, path: Path, gen) -> dict[str, Any]:
    wrapper = VaeDecoderExport(vae).eval()
    c = vae.config.latent_channels
    traced = trace_quietly(wrapper, (torch.randn(1, c, 2, 2, 2, generator=gen), torch.tensor([0.05])))
    saved = save_module(traced, path)
    loaded = load_saved(path)
    checks = []
    for b, f, h, w in ((1, 1, 1, 1), (2, 3, 2, 3), (1, 2, 2, 2)):
        z = torch.randn(b, c, f, h, w, generator=gen)
        t = torch.rand(b, generator=gen) * 0.1
        ref = vae.decode(z, t if vae.config.timestep_conditioning else None, return_dict=False)[0]
        checks.append({"shape": list(z.shape), "max_abs_diff": max_diff(loaded(z, t), ref), "tolerance": 1e-5})
    return {"trace_shape": [1, c, 2, 2, 2], **saved, "checks": checks}


def export_vae_encoder(vae, path: Path, gen) -> dict[str, Any]:
    wrapper = VaeEncoderExport(vae).eval()
    t, s = int(vae.temporal_compression_ratio), int(vae.spatial_compression_ratio)
    traced = trace_quietly(wrapper, (torch.rand(1, 3, 1, 2 * s, 2 * s, generator=gen) * 2 - 1,))
    saved = save_module(traced, path)
    loaded = load_saved(path)
    checks = []
    for b, f, h, w in ((1, 1, 2, 3), (2, 1, 1, 1), (1, t + 1, 2, 2)):
        x = torch.rand(b, 3, f, h * s, w * s, generator=gen) * 2 - 1
        dist = vae.encode(x).latent_dist
        checks.append({"shape": list(x.shape), "max_abs_diff": max_diff(loaded(x), torch.cat([dist.mean, dist.std], 1)),
                       "tolerance": 1e-5})
    return {"trace_shape": [1, 3, 1, 2 * s, 2 * s], **saved, "checks": checks}


def export_ltx(diffusers_dir: Path | str, out_dir: Path | str, dtype: str = "float32", tiny: bool = False,
               max_side: int = 1280, max_frames: int = 257, seed: int = 0, decode_timestep: float = 0.0,
               decode_noise_scale: float | None = None, quantize: str | None = None,
               default_precision: str | None = None) -> dict[str, Any]:
    """Export the diffusers LTX-Video directory into a package directory; returns the manifest.
    quantize / default_precision: as export_wan's (vgen_export/quantize.py), for the LTX
    transformer's block Linears: "int8" / "fp8" write transformer_int8.pt / transformer_fp8.pt
    beside the float transformer (precisions.variants), "-only" quantizes transformer.pt itself."""
    check_quantize(quantize, dtype, default_precision)
    import sentencepiece
    from diffusers import AutoencoderKLLTXVideo, FlowMatchEulerDiscreteScheduler, LTXVideoTransformer3DModel
    from transformers import T5EncoderModel

    diffusers_dir, out_dir = Path(diffusers_dir), Path(out_dir)
    index = refuse_unsupported(diffusers_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    tdtype = DTYPES[dtype]
    gen = torch.Generator().manual_seed(1234)
    max_length = pipeline_max_sequence_length()

    spm_file = find_spm_file(diffusers_dir)
    shutil.copyfile(spm_file, out_dir / "tokenizer.model")
    sp = sentencepiece.SentencePieceProcessor(model_file=str(spm_file))
    checks: dict[str, Any] = {"tokenizer": check_tokenizer(diffusers_dir / "tokenizer", spm_file, max_length)}
    if checks["tokenizer"]["mismatches"]:
        raise ExportRefused(f"SentencePiece disagrees with the pipeline tokenizer: {checks['tokenizer']}")

    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        vae = AutoencoderKLLTXVideo.from_pretrained(diffusers_dir, subfolder="vae", dtype=torch.float32).eval()
        vcfg = dict(vae.config)
        spatial, temporal = int(vae.spatial_compression_ratio), int(vae.temporal_compression_ratio)
        latents_mean = [float(v) for v in vae.latents_mean]
        latents_std = [float(v) for v in vae.latents_std]
        checks["vae_decoder"] = export_vae_decoder(vae, out_dir / "vae_decoder.pt", gen)
        checks["vae_encoder"] = export_vae_encoder(vae, out_dir / "vae_encoder.pt", gen)
        del vae
        encoder = T5EncoderModel.from_pretrained(diffusers_dir / "text_encoder", dtype=tdtype).eval()
        checks["text_encoder"] = export_text_encoder(encoder, out_dir / "text_encoder.pt", max_length, tdtype, gen)
        text_dim = int(encoder.config.d_model)
        del encoder
        transformer = LTXVideoTransformer3DModel.from_pretrained(diffusers_dir, subfolder="transformer",
                                                                 dtype=tdtype).eval()
        tcfg = dict(transformer.config)
        rope = transformer.rope
        rope_base = {"frames": int(rope.base_num_frames), "height": int(rope.base_height), "width": int(rope.base_width)}
        checks["transformer"] = export_transformer(transformer, out_dir / "transformer.pt", max_length, tdtype, gen,
                                                   temporal, spatial, only_precision(quantize))
        variants = [variant_name("transformer", quantize)] if writes_variant(quantize) else []
        for name in variants:  # transformer_int8 / transformer_fp8 beside the float one
            checks[name] = export_transformer(transformer, out_dir / f"{name}.pt", max_length, tdtype, gen,
                                              temporal, spatial, precision_of(quantize))
        del transformer
    for name in ["text_encoder", "transformer", "vae_decoder", "vae_encoder"] + variants:
        assert_checks(name, checks[name])

    scheduler = FlowMatchEulerDiscreteScheduler.from_pretrained(diffusers_dir, subfolder="scheduler")
    side = {"multiple_of": spatial, "min": spatial, "max": max(spatial, max_side // spatial * spatial)}
    frames_max = max(1, (max_frames - 1) // temporal * temporal + 1)
    defaults = dict(TINY_DEFAULTS if tiny else REAL_DEFAULTS)
    for key in ("height", "width"):
        defaults[key] = max(side["min"], min(defaults[key], side["max"]) // spatial * spatial)
    defaults["frames"] = min(defaults["frames"], frames_max)
    conditioned = bool(vcfg.get("timestep_conditioning", False))
    manifest = {
        **mf.package_head(mf.FAMILY_LTX_VIDEO, dtype, diffusers_dir, tiny, seed, pipeline=index.get("_class_name")),
        "components": mf.torchscript_components(out_dir, dtype, transformer=quantization_field(quantize)),
        "tokenizer": mf.t5_tokenizer_section(sp, max_length),
        # Unmasked T5 output: all max_length rows, the mask goes to the transformer.
        "text_encoder": {"output_dim": text_dim, "output_masked": False, "padding_invariant": False},
        "scheduler": mf.scheduler_section(scheduler),
        "latent": {"channels": int(vcfg["latent_channels"]), "temporal_scale": temporal, "spatial_scale": spatial,
                   "latents_mean": latents_mean, "latents_std": latents_std, "dtype": "float32"},
        "transformer": {"patch_size": 1, "patch_size_t": 1, "in_channels": int(tcfg["in_channels"]),
                        "out_channels": int(tcfg["out_channels"]), "caption_channels": int(tcfg["caption_channels"]),
                        "rope_base": rope_base, "prediction": "flow", "timestep_dtype": "float32", "timestep": "per_token",
                        "inputs": "packed tokens [B,S,C], timestep [B] or [B,S], text [B,L,D], text mask [B,L], "
                                  "video_coords [B,3,S]"},
        "vae": {"scaling_factor": float(vcfg.get("scaling_factor", 1.0)), "timestep_conditioning": conditioned,
                "decode_timestep": float(decode_timestep),
                "decode_noise_scale": float(decode_timestep if decode_noise_scale is None else decode_noise_scale)},
        "resolution": {"height": side, "width": side},
        "frames": {"rule": f"{temporal}k+1", "k_multiple": temporal, "min": 1, "max": frames_max},
        "defaults": defaults,
        "export_checks": checks,
        # LTXImageToVideoPipeline with the same components: a job may give a first frame.
        "inputs": {"image": "optional", "last_image": "none"},
        "image_conditioning": {"mode": "first_latent_frame", "vae_encoder_output": "cat([mean, std], 1)",
                               "condition": "(mean + std * noise - latents_mean) * scaling_factor / latents_std, "
                                            "noise drawn before the initial noise; latent frame 0, timestep 0 "
                                            "on its tokens, not stepped", "last_image": False},
    }
    # Live previews: the latent -> RGB factors, fitted against the decoder just written (the same
    # least-squares fit as the Wan exporter's, over LTX's own un-normalisation).
    manifest["preview"] = preview_section(manifest, torchscript_decoder(out_dir, manifest))
    add_precisions(manifest, out_dir, quantize, ["transformer"], default_precision, dtype)
    mf.write_manifest(out_dir, manifest)
    return manifest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m vgen_export.ltx",
                                     description="Export diffusers LTX-Video (text-to-video) to a vgen model package")
    parser.add_argument("--diffusers", type=Path, help="diffusers checkpoint directory")
    parser.add_argument("--out", type=Path, required=True, help="package directory to write")
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="float32")
    parser.add_argument("--tiny", action="store_true", help="build the tiny random test model first")
    parser.add_argument("--seed", type=int, default=0, help="seed for --tiny")
    parser.add_argument("--max-side", type=int, default=1280)
    parser.add_argument("--max-frames", type=int, default=257)
    parser.add_argument("--decode-timestep", type=float, default=0.0,
                        help="LTXPipeline's decode_timestep for a timestep-conditioned VAE (0.05 for LTX-Video 0.9.1+)")
    parser.add_argument("--decode-noise-scale", type=float, default=None,
                        help="LTXPipeline's decode_noise_scale (default: the decode timestep)")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    add_quantize_arguments(parser)
    args = parser.parse_args(argv)
    if args.tiny == (args.diffusers is not None):
        parser.error("give exactly one of --diffusers DIR or --tiny")
    torch.set_num_threads(args.threads)
    common = dict(dtype=args.dtype, max_side=args.max_side, max_frames=args.max_frames,
                  decode_timestep=args.decode_timestep, decode_noise_scale=args.decode_noise_scale,
                  quantize=args.quantize, default_precision=args.default_precision)
    return run_export("export_ltx", "ltx", export_ltx, args.out, args.diffusers, args.seed, ExportRefused,
                      ("text_encoder", "transformer", "vae_decoder"), **common)


if __name__ == "__main__":
    sys.exit(main())
