"""Export a diffusers LTX-2 text-to-video-with-audio checkpoint into a vgen model package.

    python -m vgen_export.ltx2 --diffusers DIR OUT [--dtype float32|float16|bfloat16]
    python -m vgen_export.ltx2 --tiny OUT [--seed N]      # builds the tiny test model first

The package (family "ltx2") holds TorchScript modules, Gemma's SentencePiece model and
``manifest.json``:

- text_encoder.pt  (input_ids int64 [B,L], attention_mask int64 [B,L], Gemma's left padding) ->
  [B,L,Dv+Da+1]: Gemma 3's hidden states of every layer, stacked as LTX2Pipeline stacks them,
  through the text connectors; the video context, then the audio context, then the connectors'
  mask as the last column (all ones when the connectors replace padding with registers). Rows are
  independent, so texts are encoded and cached one by one;
- transformer.pt   (video tokens [B,S,C], audio tokens [B,La,Ca], video timestep float32 [B,S] (one
  per token: 0 on a given first frame's tokens), audio timestep float32 [B], video context
  [B,L,Dv], audio context [B,L,Da], context mask float32 [B,L], video_coords float32 [B,3,S,2],
  audio_coords float32 [B,1,La,2]) -> [B, S*C + La*Ca]: both velocity predictions,
  flattened and concatenated (a module returns one tensor; the runtime steps them as one
  sample, which the elementwise Euler step allows). The coordinates are the rope bounds
  LTX2Pipeline builds (``video_coords``/``audio_coords`` below are the formulas the runtime
  implements); the audio timestep is also the transformer's sigma, use_cross_timestep as recorded;
- transformer_int8.pt / transformer_fp8.pt with --quantize int8 / fp8: the same module with the
  ".transformer_blocks." Linears quantized (vgen_export/quantize.py, as for Wan and LTX-Video),
  chosen per job ("precision"); -only quantizes transformer.pt itself;
- vae_decoder.pt   (z [B,C,F,H,W] un-normalised latents) -> video [B,3,8(F-1)+1,32H,32W];
- vae_encoder.pt   (video [B,3,F,H,W] in [-1,1]) -> the posterior's mode [B,C,F',H',W']: what
  LTX2ImageToVideoPipeline encodes a first frame to ("argmax"), so the package also runs
  image-to-video (manifest inputs.image "optional"; the image is not re-compressed: image_crf 0);
- audio_vae.pt and vocoder.pt: the audio decoder and vocoder (vgen_export.ltx2_audio's
  export_ltx2_audio), with the manifest's "audio" object (its geometry, latents statistics and
  output sample rate).

Guidance: classifier-free guidance with one scale for video and audio (LTX2Pipeline's
audio_guidance_scale=None), in LTX2Pipeline's x0 formulation; STG, modality-isolation guidance
and guidance rescale are not run (the manifest says so), so references call the pipeline with
stg_scale=0, modality_scale=1, guidance_rescale=0.

What cannot be reproduced is refused by name (ExportRefused, exit 2): another pipeline class, a
scheduler other than FlowMatchEulerDiscreteScheduler or with options vgen does not port, patch
sizes other than 1, a timestep-conditioned or noise-injecting video decoder, LTX-2.3's prompt
modulation (per-modality projections).
"""

from __future__ import annotations

import argparse
import gc
import json
import shutil
import sys
import warnings
from pathlib import Path
from typing import Any

import torch

from . import manifest as mf
from .common import (DTYPES, ExportRefused, Handoff, assert_checks, dtype_tolerance, flow_match_euler_config, load_saved,
                     max_diff, pipeline_index, run_export, save_module, trace_quietly)
from .ltx2_audio import audio_geometry, export_ltx2_audio
from .quantize import add_precisions, add_quantize_arguments, check_quantize, only_precision, precision_of, quantization_field
from .quantize import quantize_linears, variant_name, writes_variant

ACCEPTED_PIPELINES = ("LTX2Pipeline", "LTX2ImageToVideoPipeline")
REAL_DEFAULTS = {"steps": 40, "guidance_scale": 4.0, "height": 512, "width": 768, "frames": 121,
                 "fps": 24, "negative_prompt": ""}
TINY_DEFAULTS = {"steps": 3, "guidance_scale": 3.0, "height": 64, "width": 64, "frames": 9,
                 "fps": 25, "negative_prompt": ""}
REAL_MAX_LENGTH = 1024  # LTX2Pipeline's max_sequence_length


def video_coords(batch: int, frames: int, height: int, width: int, fps: float, scale_factors, causal_offset: int):
    """[B,3,F*H*W,2] float32: LTX2AudioVideoRotaryPosEmbed.prepare_video_coords for patch size 1,
    the same float32 operations in the same order (the runtime's ltx2_video_coords)."""
    grid = torch.stack(torch.meshgrid(torch.arange(frames, dtype=torch.float32),
                                      torch.arange(height, dtype=torch.float32),
                                      torch.arange(width, dtype=torch.float32), indexing="ij"), 0)
    coords = torch.stack([grid, grid + 1], -1).flatten(1, 3)  # [3, S, 2]
    pixel = coords * torch.tensor(list(scale_factors)).view(3, 1, 1)
    pixel[0] = (pixel[0] + causal_offset - scale_factors[0]).clamp(min=0) / fps
    return pixel.unsqueeze(0).repeat(batch, 1, 1, 1)


def audio_coords(batch: int, frames: int, scale: int, causal_offset: int, hop: int, rate: int):
    """[B,1,La,2] float32: prepare_audio_coords (the latent frames' start and end in seconds)."""
    grid = torch.arange(frames, dtype=torch.float32)
    start = (grid * scale + causal_offset - scale).clip(min=0) * hop / rate
    end = ((grid + 1) * scale + causal_offset - scale).clip(min=0) * hop / rate
    return torch.stack([start, end], -1).unsqueeze(0).expand(batch, -1, -1).unsqueeze(1)


def audio_latent_frames(frames: int, fps: float, sample_rate: int, hop: int, ratio: int) -> int:
    """LTX2Pipeline's audio_num_frames: round(duration * latents per second), Python's rounding."""
    return round(frames / fps * (sample_rate / hop / float(ratio)))


class TextEncoderExport(torch.nn.Module):
    """Gemma 3 (every layer's hidden states, stacked and flattened as LTX2Pipeline does) and the
    text connectors, left padding: cat([video, audio, mask], -1)."""

    def __init__(self, encoder: torch.nn.Module, connectors: torch.nn.Module):
        super().__init__()
        self.encoder = encoder
        self.connectors = connectors
        # The connectors' 1-D rope takes (batch, length, device) and no tensor: as a submodule its
        # traced graph would keep a device constant with nothing to take the device from
        # (common.make_device_agnostic). Called as a plain method it is traced into its caller.
        for part in (connectors.video_connector, connectors.audio_connector):
            if isinstance(part._modules.get("rope"), torch.nn.Module):  # noqa: SLF001
                part.rope = part._modules.pop("rope").forward  # noqa: SLF001

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        out = self.encoder(input_ids=input_ids, attention_mask=attention_mask, output_hidden_states=True)
        hidden = torch.stack(out.hidden_states, dim=-1).flatten(2, 3)
        video, audio, mask = self.connectors(hidden, attention_mask, padding_side="left")
        return torch.cat([video, audio, mask.unsqueeze(-1).to(video.dtype)], -1)


class TransformerExport(torch.nn.Module):
    def __init__(self, transformer: torch.nn.Module, cross_timestep: bool):
        super().__init__()
        self.transformer = transformer
        self.cross_timestep = cross_timestep

    def forward(self, video, audio, video_timestep, audio_timestep, video_context, audio_context, mask, vcoords, acoords):
        v, a = self.transformer(hidden_states=video, audio_hidden_states=audio, encoder_hidden_states=video_context,
                                audio_encoder_hidden_states=audio_context, timestep=video_timestep,
                                audio_timestep=audio_timestep, sigma=audio_timestep,
                                encoder_attention_mask=mask, audio_encoder_attention_mask=mask,
                                video_coords=vcoords, audio_coords=acoords, use_cross_timestep=self.cross_timestep,
                                return_dict=False)
        return torch.cat([v.flatten(1), a.flatten(1)], 1)


class VaeEncoderExport(torch.nn.Module):
    """video [B,3,F,H,W] in [-1,1] -> the posterior's mode (LTX2ImageToVideoPipeline's "argmax"):
    vae.encode without tiling or slicing, holding the encoder only (holding the whole VAE put its
    2.1 GB decoder into vae_encoder.pt as well, found at real size)."""

    def __init__(self, vae: torch.nn.Module):
        super().__init__()
        self.encoder = vae.encoder

    def forward(self, video: torch.Tensor) -> torch.Tensor:
        from diffusers.models.autoencoders.vae import DiagonalGaussianDistribution

        return DiagonalGaussianDistribution(self.encoder(video)).mode()


class VaeDecoderExport(torch.nn.Module):
    def __init__(self, vae: torch.nn.Module):
        super().__init__()
        self.decoder = vae.decoder

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return self.decoder(z, None)


def refuse_unsupported(diffusers_dir: Path) -> dict[str, Any]:
    """The pipeline's model_index.json, after refusing what vgen cannot run (ExportRefused)."""
    index = pipeline_index(diffusers_dir, ACCEPTED_PIPELINES, "LTX-2",
                           ("text_encoder", "tokenizer", "connectors", "transformer", "vae", "audio_vae", "vocoder",
                            "scheduler"))
    flow_match_euler_config(diffusers_dir, "LTX-2")
    tcfg = json.loads((diffusers_dir / "transformer" / "config.json").read_text())
    for key in ("patch_size", "patch_size_t", "audio_patch_size", "audio_patch_size_t"):
        if tcfg.get(key, 1) != 1:
            raise ExportRefused(f"transformer {key}={tcfg.get(key)}: vgen packs LTX-2 latents with patch size 1 only")
    ccfg = json.loads((diffusers_dir / "connectors" / "config.json").read_text())
    if ccfg.get("per_modality_projections"):
        raise ExportRefused("connectors per_modality_projections (LTX-2.3): not supported by vgen's ltx2 family")
    vcfg = json.loads((diffusers_dir / "vae" / "config.json").read_text())
    if vcfg.get("timestep_conditioning"):
        raise ExportRefused("vae timestep_conditioning: vgen's ltx2 family decodes with an unconditioned decoder")
    if any(vcfg.get("decoder_inject_noise") or []):
        raise ExportRefused("vae decoder_inject_noise: the decoder draws unseeded noise, which vgen cannot reproduce")
    return index


def spm_tokenize(spm_file: Path, texts: list[str], max_length: int) -> tuple[torch.Tensor, torch.Tensor]:
    """What the runtime does (stages/families/ltx2): strip, [bos] + pieces, truncated to max_length,
    left-padded with pad."""
    import sentencepiece

    sp = sentencepiece.SentencePieceProcessor(model_file=str(spm_file))
    ids, mask = [], []
    for text in texts:
        row = ([sp.bos_id()] + sp.encode(text.strip()))[:max_length]
        pad = max_length - len(row)
        ids.append([sp.pad_id()] * pad + row)
        mask.append([0] * pad + [1] * len(row))
    return torch.tensor(ids), torch.tensor(mask)


def check_tokenizer(tokenizer_dir: Path, spm_file: Path, max_length: int) -> dict[str, Any]:
    from transformers import AutoTokenizer

    hf = AutoTokenizer.from_pretrained(tokenizer_dir)
    hf.padding_side = "left"  # LTX2Pipeline sets it
    prompts = ["a red circle moving left on a black background", "", "  Hello, World!  x 12 ",
               "A cat and a dog baking a cake together in a kitchen.", "red " * (max_length + 8)]
    mismatched = []
    for p in prompts:
        ref = hf([p.strip()], padding="max_length", max_length=max_length, truncation=True, add_special_tokens=True,
                 return_tensors="pt")
        ids, mask = spm_tokenize(spm_file, [p], max_length)
        if not (torch.equal(ids, ref.input_ids) and torch.equal(mask, ref.attention_mask)):
            mismatched.append(p[:80])
    return {"prompts_checked": len(prompts), "mismatches": len(mismatched), "mismatched": mismatched}


def export_text_encoder(encoder, connectors, path: Path, spm_file: Path, max_length: int, dtype, gen) -> dict[str, Any]:
    wrapper = TextEncoderExport(encoder, connectors).eval()
    prompts = ["a red circle moving left", "", "a dog barks at a passing car " * 3]
    ids, mask = spm_tokenize(spm_file, prompts[:2], max_length)
    traced = trace_quietly(wrapper, (ids, mask))
    saved = save_module(traced, path)
    loaded = load_saved(path)
    checks = []
    for batch in (prompts[:1], prompts, prompts[1:]):
        ids, mask = spm_tokenize(spm_file, batch, max_length)
        ref = wrapper(ids, mask)
        checks.append({"shape": list(ids.shape), "max_abs_diff": max_diff(loaded(ids, mask), ref),
                       "tolerance": dtype_tolerance(dtype, ref)})
    return {"trace_shape": [2, max_length], **saved, "checks": checks}


def rope_of(transformer) -> dict[str, Any]:
    """The rope constants the runtime rebuilds the coordinates from (manifest transformer.rope)."""
    return {"scale_factors": [int(v) for v in transformer.rope.scale_factors],
            "causal_offset": int(transformer.rope.causal_offset),
            "audio_scale": int(transformer.audio_rope.scale_factors[0]),
            "audio_causal_offset": int(transformer.audio_rope.causal_offset),
            "hop_length": int(transformer.audio_rope.hop_length),
            "sampling_rate": int(transformer.audio_rope.sampling_rate)}


def export_transformer(transformer, path: Path, max_length: int, dtype, gen, rope: dict[str, Any],
                       cross_timestep: bool, quantize: str | None = None) -> dict[str, Any]:
    """A Handoff as `transformer` gives this function the only reference: the eager model is
    freed once every reference is computed and the file written, before the saved copy is loaded
    for the checks, so the export never holds two copies of the weights (LTX-2's 19 B would
    otherwise need twice their size; a quantized export holds the float model and its quantized
    copy until then). quantize ("int8" / "fp8"): the blocks' Linears quantized; the file is then
    checked against the eager quantized module, and its distance from diffusers' float
    prediction reported, not checked (max_abs_diff_vs_float)."""
    owned = isinstance(transformer, Handoff)
    transformer = transformer.take() if owned else transformer
    cfg = transformer.config
    wrapper = TransformerExport(transformer, cross_timestep).eval()
    quantized = 0
    if quantize:
        wrapper, quantized = quantize_linears(wrapper, ".transformer_blocks.", quantize, dtype)

    def inputs(b, f, h, w, la, fps, lengths, image=False):
        x = torch.randn(b, f * h * w, cfg.in_channels, generator=gen).to(dtype)
        a = torch.randn(b, la, cfg.audio_in_channels, generator=gen).to(dtype)
        t = torch.rand(b, generator=gen) * 1000.0
        vt = t[:, None].repeat(1, f * h * w)
        if image:  # image-to-video rows: the first latent frame's tokens at 0 (t * (1 - conditioning_mask))
            vt[::2, :h * w] = 0
        vctx = torch.randn(b, max_length, cfg.caption_channels, generator=gen).to(dtype)
        actx = torch.randn(b, max_length, cfg.caption_channels, generator=gen).to(dtype)
        mask = torch.zeros(b, max_length)
        for row, n in enumerate(lengths):
            mask[row, max_length - n:] = 1
        vc = video_coords(b, f, h, w, fps, rope["scale_factors"], rope["causal_offset"])
        ac = audio_coords(b, la, rope["audio_scale"], rope["audio_causal_offset"], rope["hop_length"],
                          rope["sampling_rate"])
        return x, a, vt, t, vctx, actx, mask, vc, ac

    trace = inputs(2, 2, 2, 3, 5, 25.0, [3, max_length], image=True)
    traced = trace_quietly(wrapper, trace)
    refs = []  # eager references first (the same draws of `gen`, in the same order, as before)
    for b, f, h, w, la, fps, lengths, image in ((1, 3, 2, 2, 7, 24.0, [5], False),
                                                (3, 1, 1, 1, 1, 25.0, [1, 7, max_length], False),
                                                (2, 2, 2, 3, 9, 30.0, [3, 4], False), (3, 3, 2, 2, 4, 24.0, [5, 2, 9], True)):
        x, a, vt, t, vctx, actx, mask, vc, ac = inputs(b, f, h, w, la, fps, lengths, image)
        # diffusers called as the pipelines call it: the coordinates from its own rope helpers; text
        # rows with one timestep per row (LTX2Pipeline), image rows one per token
        # (LTX2ImageToVideoPipeline: timestep=video_timestep, audio_timestep=sigma=t).
        ref_vc = transformer.rope.prepare_video_coords(b, f, h, w, x.device, fps=fps)
        ref_ac = transformer.audio_rope.prepare_audio_coords(b, la, x.device)
        v, au = transformer(hidden_states=x, audio_hidden_states=a, encoder_hidden_states=vctx,
                            audio_encoder_hidden_states=actx, timestep=vt if image else t, audio_timestep=t, sigma=t,
                            encoder_attention_mask=mask,
                            audio_encoder_attention_mask=mask, num_frames=f, height=h, width=w, fps=fps,
                            audio_num_frames=la, video_coords=ref_vc, audio_coords=ref_ac,
                            use_cross_timestep=cross_timestep, return_dict=False)
        ref = torch.cat([v.flatten(1), au.flatten(1)], 1)
        check = {"shape": list(x.shape), "audio_shape": list(a.shape), "fps": fps, "per_token": image,
                 "coords_diff": max(max_diff(vc, ref_vc), max_diff(ac, ref_ac)), "tolerance": dtype_tolerance(dtype, ref)}
        if check["coords_diff"] != 0:
            raise RuntimeError(f"transformer: vgen's rope coordinates differ from diffusers' ({check})")
        args = (x, a, vt, t, vctx, actx, mask, vc, ac)
        refs.append((args, wrapper(*args) if quantized else ref, ref, check))
    saved = save_module(traced, path)
    del traced, wrapper, transformer  # with a Handoff the last references: the weights go before the reload
    gc.collect()
    loaded = load_saved(path)
    checks = []
    for args, target, ref, check in refs:
        got = loaded(*args)
        checks.append({**check, "max_abs_diff": max_diff(got, target),
                       **({"max_abs_diff_vs_float": max_diff(got, ref)} if quantized else {})})
    return {"trace_shape": list(trace[0].shape), **saved, "checks": checks,
            **({"quantized_linears": quantized} if quantized else {})}


def export_vae(vae, out_dir: Path, gen) -> dict[str, dict[str, Any]]:
    """vae_decoder.pt and vae_encoder.pt. Every eager reference is computed and both files written
    before the VAE is dropped, and only then are the saved copies loaded for the checks: with a
    Handoff as `vae` the export holds one copy of the VAE's weights at a time (holding the eager
    VAE beside the reloaded encoder took LTX-2's export to 8.7 GB, found at real size)."""
    vae = vae.take() if isinstance(vae, Handoff) else vae
    c = vae.config.latent_channels
    t, s = int(vae.temporal_compression_ratio), int(vae.spatial_compression_ratio)
    parts = {}
    decoder = VaeDecoderExport(vae).eval()
    trace = (torch.randn(1, c, 2, 2, 2, generator=gen),)
    traced = trace_quietly(decoder, trace)
    refs = []
    for b, f, h, w in ((1, 1, 2, 2), (2, 3, 2, 3), (1, 2, 3, 2)):  # >= 2: the decoder pads by reflection
        z = torch.randn(b, c, f, h, w, generator=gen)
        refs.append(((z,), vae.decode(z, None, return_dict=False)[0]))
    parts["vae_decoder"] = (save_module(traced, out_dir / "vae_decoder.pt"), refs, list(trace[0].shape))
    encoder = VaeEncoderExport(vae).eval()
    trace = (torch.rand(1, 3, 1, 2 * s, 2 * s, generator=gen) * 2 - 1,)
    traced = trace_quietly(encoder, trace)
    refs = []
    for b, f, h, w in ((1, 1, 2, 3), (2, 1, 2, 2), (1, t + 1, 2, 2)):
        x = torch.rand(b, 3, f, h * s, w * s, generator=gen) * 2 - 1
        refs.append(((x,), vae.encode(x).latent_dist.mode()))
    parts["vae_encoder"] = (save_module(traced, out_dir / "vae_encoder.pt"), refs, list(trace[0].shape))
    del vae, decoder, encoder, traced  # with a Handoff the last references
    gc.collect()
    checks = {}
    for name, (saved, refs, trace_shape) in parts.items():
        loaded = load_saved(out_dir / f"{name}.pt")
        checks[name] = {"trace_shape": trace_shape, **saved,
                        "checks": [{"shape": list(args[0].shape), "max_abs_diff": max_diff(loaded(*args), ref),
                                    "tolerance": 1e-5} for args, ref in refs]}
        del loaded
    return checks


def export_ltx2(diffusers_dir: Path | str, out_dir: Path | str, dtype: str = "float32", tiny: bool = False,
                max_side: int = 1536, max_frames: int = 257, seed: int = 0, max_length: int | None = None,
                cross_timestep: bool = True, quantize: str | None = None,
                default_precision: str | None = None) -> dict[str, Any]:
    """Export the diffusers LTX-2 directory into a package directory; returns the manifest.
    max_length: the text length (LTX2Pipeline's max_sequence_length; 1024, the tiny one 32).
    quantize / default_precision: as export_wan's (vgen_export/quantize.py), for the transformer's
    block Linears (video and audio blocks alike)."""
    check_quantize(quantize, dtype, default_precision)
    import sentencepiece
    from diffusers import (AutoencoderKLLTX2Audio, AutoencoderKLLTX2Video, FlowMatchEulerDiscreteScheduler,
                           LTX2VideoTransformer3DModel)
    from diffusers.pipelines.ltx2 import LTX2TextConnectors
    from diffusers.pipelines.ltx2.vocoder import LTX2Vocoder
    from transformers import Gemma3ForConditionalGeneration

    diffusers_dir, out_dir = Path(diffusers_dir), Path(out_dir)
    index = refuse_unsupported(diffusers_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    tdtype = DTYPES[dtype]
    gen = torch.Generator().manual_seed(1234)
    max_length = max_length or REAL_MAX_LENGTH

    tok_dir = diffusers_dir / "tokenizer"
    spm_file = tok_dir / "tokenizer.model"
    if not spm_file.is_file():
        raise ExportRefused(f"{tok_dir}: no tokenizer.model (Gemma's SentencePiece model)")
    shutil.copyfile(spm_file, out_dir / "tokenizer.model")
    sp = sentencepiece.SentencePieceProcessor(model_file=str(spm_file))
    checks: dict[str, Any] = {"tokenizer": check_tokenizer(tok_dir, spm_file, max_length)}
    if checks["tokenizer"]["mismatches"]:
        raise ExportRefused(f"SentencePiece disagrees with the pipeline tokenizer: {checks['tokenizer']}")

    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        vae = AutoencoderKLLTX2Video.from_pretrained(diffusers_dir, subfolder="vae", dtype=torch.float32).eval()
        vcfg = dict(vae.config)
        spatial, temporal = int(vae.spatial_compression_ratio), int(vae.temporal_compression_ratio)
        latents_mean = [float(v) for v in vae.latents_mean]
        latents_std = [float(v) for v in vae.latents_std]
        handoff = Handoff(vae)
        del vae  # the Handoff holds the only reference
        checks.update(export_vae(handoff, out_dir, gen))
        audio_vae = AutoencoderKLLTX2Audio.from_pretrained(diffusers_dir, subfolder="audio_vae",
                                                           dtype=torch.float32).eval()
        vocoder = LTX2Vocoder.from_pretrained(diffusers_dir, subfolder="vocoder", dtype=torch.float32).eval()
        audio_entries = export_ltx2_audio(audio_vae, vocoder, out_dir, dtype)
        audio = {**audio_geometry(audio_vae), **audio_entries["audio"]}
        checks.update(audio_entries["checks"])
        del audio_vae, vocoder
        encoder = Gemma3ForConditionalGeneration.from_pretrained(diffusers_dir / "text_encoder", dtype=tdtype).eval()
        connectors = LTX2TextConnectors.from_pretrained(diffusers_dir, subfolder="connectors", dtype=tdtype).eval()
        checks["text_encoder"] = export_text_encoder(encoder, connectors, out_dir / "text_encoder.pt", spm_file,
                                                     max_length, tdtype, gen)
        del encoder, connectors
        transformer = LTX2VideoTransformer3DModel.from_pretrained(diffusers_dir, subfolder="transformer",
                                                                  dtype=tdtype).eval()
        tcfg, rope = dict(transformer.config), rope_of(transformer)
        handoff = Handoff(transformer)
        del transformer  # the Handoff holds the only reference
        variants = [variant_name("transformer", quantize)] if writes_variant(quantize) else []
        # With a variant to write, the float export borrows the model and the variant's frees it.
        checks["transformer"] = export_transformer(handoff.module if variants else handoff, out_dir / "transformer.pt",
                                                   max_length, tdtype, gen, rope, cross_timestep, only_precision(quantize))
        for name in variants:
            checks[name] = export_transformer(handoff, out_dir / f"{name}.pt", max_length, tdtype, gen, rope,
                                              cross_timestep, precision_of(quantize))
    for name in ["text_encoder", "transformer", "vae_decoder", "vae_encoder"] + variants:  # audio: checked themselves
        assert_checks(name, checks[name])
    if audio["latent_channels"] * audio["latent_mel_bins"] != int(tcfg["audio_in_channels"]):
        raise ExportRefused(f"audio latents ({audio['latent_channels']} x {audio['latent_mel_bins']}) do not pack "
                            f"into the transformer's audio_in_channels {tcfg['audio_in_channels']}")

    scheduler = FlowMatchEulerDiscreteScheduler.from_pretrained(diffusers_dir, subfolder="scheduler")
    # At least two latent rows and columns: the decoder pads by reflection.
    side = {"multiple_of": spatial, "min": 2 * spatial, "max": max(2 * spatial, max_side // spatial * spatial)}
    frames_max = max(1, (max_frames - 1) // temporal * temporal + 1)
    defaults = dict(TINY_DEFAULTS if tiny else REAL_DEFAULTS)
    for key in ("height", "width"):
        defaults[key] = max(side["min"], min(defaults[key], side["max"]) // spatial * spatial)
    defaults["frames"] = min(defaults["frames"], frames_max)
    manifest = {
        **mf.package_head(mf.FAMILY_LTX2, dtype, diffusers_dir, tiny, seed, pipeline=index.get("_class_name")),
        "components": {**mf.torchscript_components(out_dir, dtype, transformer=quantization_field(quantize)),
                       **audio_entries["components"]},
        "tokenizer": {"file": "tokenizer.model", "type": "sentencepiece", "vocab_size": sp.vocab_size(),
                      "max_length": max_length, "pad_id": sp.pad_id(), "eos_id": sp.eos_id(), "bos_id": sp.bos_id(),
                      "unk_id": sp.unk_id(), "add_eos": False, "add_bos": True, "padding": "left",
                      "truncation": "([bos] + pieces)[:max_length]", "strip": True},
        "text_encoder": {"output_dim": 2 * int(tcfg["caption_channels"]) + 1,
                         "video_dim": int(tcfg["caption_channels"]), "audio_dim": int(tcfg["caption_channels"]),
                         "output": "cat([video context, audio context, connectors' mask], -1)",
                         "output_masked": False, "padding_invariant": False},
        "scheduler": mf.scheduler_section(scheduler),
        "latent": {"channels": int(vcfg["latent_channels"]), "temporal_scale": temporal, "spatial_scale": spatial,
                   "latents_mean": latents_mean, "latents_std": latents_std, "dtype": "float32"},
        "audio": audio,
        "transformer": {"patch_size": 1, "patch_size_t": 1, "in_channels": int(tcfg["in_channels"]),
                        "audio_in_channels": int(tcfg["audio_in_channels"]), "rope": rope,
                        "use_cross_timestep": bool(cross_timestep), "prediction": "flow", "timestep_dtype": "float32",
                        "timestep": "per_token",
                        "inputs": "video tokens [B,S,C], audio tokens [B,La,Ca], video timestep [B,S], audio timestep "
                                  "[B], video context [B,L,Dv], "
                                  "audio context [B,L,Da], mask [B,L], video_coords [B,3,S,2], audio_coords [B,1,La,2]",
                        "output": "cat([video.flatten(1), audio.flatten(1)], 1)"},
        "guidance": {"cfg": "x0 formulation, one scale for video and audio", "stg": False, "modality": False,
                     "rescale": False},
        "vae": {"scaling_factor": float(vcfg.get("scaling_factor", 1.0)), "timestep_conditioning": False},
        "resolution": {"height": side, "width": side},
        "frames": {"rule": f"{temporal}k+1", "k_multiple": temporal, "min": 1, "max": frames_max},
        "defaults": defaults,
        "export_checks": checks,
        # LTX2ImageToVideoPipeline with the same components: a job may give a first frame.
        "inputs": {"image": "optional", "last_image": "none"},
        "image_conditioning": {"mode": "first_latent_frame", "vae_encoder_output": "posterior mode",
                               "condition": "(mode - latents_mean) / latents_std as latent frame 0 (no draw), video "
                                            "timestep 0 on its tokens, not stepped", "image_crf": 0},
    }
    add_precisions(manifest, out_dir, quantize, ["transformer"], default_precision, dtype)
    mf.write_manifest(out_dir, manifest)
    return manifest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m vgen_export.ltx2",
                                     description="Export diffusers LTX-2 (text-to-video with audio) to a vgen package")
    parser.add_argument("out", type=Path, help="package directory to write")
    parser.add_argument("--diffusers", type=Path, help="diffusers checkpoint directory")
    parser.add_argument("--tiny", action="store_true", help="build the tiny random test model first")
    parser.add_argument("--seed", type=int, default=0, help="seed for --tiny")
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="float32")
    parser.add_argument("--max-side", type=int, default=1536)
    parser.add_argument("--max-frames", type=int, default=257)
    parser.add_argument("--max-length", type=int, default=None,
                        help="text length (LTX2Pipeline's max_sequence_length; default 1024, --tiny 32)")
    parser.add_argument("--legacy-cross-timestep", action="store_true",
                        help="use_cross_timestep=False (LTX-2.0's original cross-attention modulation)")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    add_quantize_arguments(parser)
    args = parser.parse_args(argv)
    if args.tiny == (args.diffusers is not None):
        parser.error("give exactly one of --diffusers DIR or --tiny")
    torch.set_num_threads(args.threads)
    max_length = args.max_length
    if args.tiny and not max_length:
        from .tiny_ltx2 import TINY_MAX_LENGTH

        max_length = TINY_MAX_LENGTH
    return run_export("export_ltx2", "ltx2", export_ltx2, args.out, args.diffusers, args.seed, ExportRefused,
                      ("text_encoder", "transformer", "vae_decoder"), dtype=args.dtype, max_side=args.max_side,
                      max_frames=args.max_frames, max_length=max_length, cross_timestep=not args.legacy_cross_timestep,
                      quantize=args.quantize, default_precision=args.default_precision)


if __name__ == "__main__":
    sys.exit(main())
