"""Export a diffusers Wan 2.1 text-to-video checkpoint into a vgen model package.

    python -m vgen_export.wan --diffusers DIR --out PKG [--dtype float32|float16|bfloat16]
    python -m vgen_export.wan --tiny [--seed N] --out PKG        # builds the tiny test model

The package (docs/MODEL_PACKAGE.md) holds TorchScript modules that LibTorch loads, the
SentencePiece tokenizer model and ``manifest.json``. Each traced module is reloaded with
``torch.jit.load`` and compared with eager diffusers/transformers at shapes other than the
trace shapes; the differences are recorded in ``manifest["export_checks"]``.
"""

from __future__ import annotations

import argparse
import gc
import inspect
import json
import shutil
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Any

import torch

from . import manifest as mf
from .latent_preview import preview_section, torchscript_decoder
from .detect_wan import UnsupportedWanPipeline, check_exportable, detect_wan
from .wan_vace import add_vace_sections, export_transformer_vace
from .wan_i2v import a14b_image_conditioning, add_i2v_sections, export_i2v_parts, export_vae_encoder
from .wan_ti2v import add_ti2v_sections, export_ti2v_encoder
from .wan_aoti import compile_transformer_aoti
from .wan_vae import export_vae_decoder
from .common import (DTYPES, Handoff, assert_checks, dtype_tolerance, failed_checks, find_spm_file, load_saved,
                     max_diff, save_module, trace_quietly)
from .quantize import add_precisions, add_quantize_arguments, check_quantize, only_precision, precision_of, quantization_field
from .quantize import quantize_linears, variant_name, writes_variant
from .reference_loop import check_tokenizer, compact_context

WAN_NEGATIVE_PROMPT = (
    "Bright tones, overexposed, static, blurred details, subtitles, style, works, paintings, images, "
    "static, overall gray, worst quality, low quality, JPEG compression residue, ugly, incomplete, "
    "extra fingers, poorly drawn hands, poorly drawn faces, deformed, disfigured, misshapen limbs, "
    "fused fingers, still picture, messy background, three legs, many people in the background, "
    "walking backwards"
)
REAL_DEFAULTS = {"steps": 50, "guidance_scale": 5.0, "height": 480, "width": 832, "frames": 81,
                 "fps": 16, "negative_prompt": WAN_NEGATIVE_PROMPT}
TINY_DEFAULTS = {"steps": 3, "guidance_scale": 5.0, "height": 32, "width": 32, "frames": 5,
                 "fps": 8, "negative_prompt": "low quality, blurry"}


def fit_defaults(defaults: dict, height: dict, width: dict, frames_max: int) -> dict:
    """Wan's defaults (832x480, 81 frames) clamped into a smaller model's limits: the reader
    refuses a package whose defaults break its own limits."""
    d = dict(defaults)
    for key, lim in (("height", height), ("width", width)):
        d[key] = max(lim["min"], min(d[key], lim["max"]) // lim["multiple_of"] * lim["multiple_of"])
    d["frames"] = min(d["frames"], frames_max)
    return d


# --------------------------------------------------------------------------- wrappers
class TextEncoderExport(torch.nn.Module):
    """(input_ids int64 [B,L], attention_mask int64 [B,L]) -> [B,L,D] in the package dtype.

    Rows where attention_mask == 0 are exactly zero, which equals WanPipeline's
    "cut to the true length, zero-pad back to L" for right-padded input."""

    def __init__(self, encoder: torch.nn.Module):
        super().__init__()
        self.encoder = encoder

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        hidden = self.encoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        return hidden * attention_mask.unsqueeze(-1).to(hidden.dtype)


class _KeyBias:
    """The additive cross-attention key bias of the call being traced (None: no bias)."""

    bias: torch.Tensor | None = None


class _KeyBiasProcessor:
    """Wraps a block's cross-attention (attn2) processor: passes the current key bias, shaped
    [B,1,1,L] for every head and query, as the attention mask diffusers' processor forwards
    to scaled_dot_product_attention. With no bias it is the wrapped processor unchanged."""

    def __init__(self, inner, holder: _KeyBias):
        self.inner, self.holder = inner, holder

    def __call__(self, attn, hidden_states, encoder_hidden_states=None, attention_mask=None, rotary_emb=None):
        bias = self.holder.bias
        if bias is not None:
            attention_mask = bias[:, None, None, :].to(hidden_states.dtype)
        return self.inner(attn, hidden_states, encoder_hidden_states, attention_mask, rotary_emb)


class TransformerExport(torch.nn.Module):
    """forward(hidden_states [B,C,F',H',W'], timestep float32 [B], encoder_hidden_states [B,L,D])
    -> flow prediction [B,C,F',H',W'] (latent tensors in the package dtype).

    forward_compact(..., encoder_hidden_states [B,T,D], context_bias float32 [B,T]): the same
    prediction from a compacted text context. WanPipeline zero-pads every prompt to L rows and
    the cross-attention attends to all of them; n identical zero rows give n identical keys
    and values, which weigh exactly like one of them with ln(n) added to its logit. So the
    runtime passes each prompt's own rows, one zero row with bias ln(L - length), and -inf on
    any further padding: T is the longest prompt + 1 instead of L (512)."""

    def __init__(self, transformer: torch.nn.Module):
        super().__init__()
        self.transformer = transformer
        self._key_bias = _KeyBias()
        for block in transformer.blocks:
            block.attn2.set_processor(_KeyBiasProcessor(block.attn2.processor, self._key_bias))

    def _predict(self, hidden_states, timestep, encoder_hidden_states):
        return self.transformer(hidden_states=hidden_states, timestep=timestep,
                                encoder_hidden_states=encoder_hidden_states, return_dict=False)[0]

    def forward(self, hidden_states, timestep, encoder_hidden_states):
        return self._predict(hidden_states, timestep, encoder_hidden_states)

    def forward_compact(self, hidden_states, timestep, encoder_hidden_states, context_bias):
        self._key_bias.bias = context_bias
        try:
            return self._predict(hidden_states, timestep, encoder_hidden_states)
        finally:
            self._key_bias.bias = None


def random_token_batch(lengths: list[int], length: int, vocab: int, gen: torch.Generator):
    ids = torch.randint(3, vocab, (len(lengths), length), generator=gen)
    mask = torch.zeros(len(lengths), length, dtype=torch.long)
    for row, n in enumerate(lengths):
        mask[row, :n] = 1
    return ids * mask, mask  # pad id 0 after the true length, as the tokenizer pads


def pipeline_max_sequence_length() -> int:
    from diffusers import WanPipeline

    return int(inspect.signature(WanPipeline.__call__).parameters["max_sequence_length"].default)


def load_scheduler(diffusers_dir: Path, flow_shift: float | None = None):
    import diffusers

    cfg = json.loads((Path(diffusers_dir) / "scheduler" / "scheduler_config.json").read_text())
    cls = getattr(diffusers, cfg["_class_name"])
    sched = cls.from_pretrained(diffusers_dir, subfolder="scheduler")
    if flow_shift is not None:
        key = "flow_shift" if "flow_shift" in sched.config else "shift"
        sched = cls.from_config(sched.config, **{key: flow_shift})
    return sched


# --------------------------------------------------------------------------- export
def compile_text_encoder_aoti(wrapper, path: Path, max_length: int, vocab: int, dtype, gen) -> dict[str, Any]:
    """The text encoder's forward (ids, mask -> masked rows) as a .pt2 (vgen_export/aoti.py), prompt
    rows and token positions dynamic (vgen runs it up to the batch's longest prompt), checked
    against eager at other shapes."""
    from torch.export import Dim

    from .aoti import Method, compile_aoti, env_threads

    rows, text = Dim("rows", min=1, max=64), Dim("text", min=1, max=max_length)
    example = random_token_batch([min(5, max_length), max(1, max_length // 3)], max(2, min(max_length, 32)), vocab, gen)
    checks = []
    with torch.no_grad():
        for lengths, length in (([1, min(7, max_length), max_length], max_length), ([3], min(16, max_length)),
                                ([1], 1)):
            args = random_token_batch(lengths, length, vocab, gen)
            checks.append((args, wrapper(*args)))
    return compile_aoti({"forward": Method(wrapper, example, ({0: rows, 1: text}, {0: rows, 1: text}), checks)},
                        path, threads=env_threads(), tolerance=lambda ref: dtype_tolerance(dtype, ref))


def export_text_encoder(encoder, path: Path, max_length: int, dtype, gen, compile: str | None = None) -> dict[str, Any]:
    wrapper = TextEncoderExport(encoder).eval()
    vocab = encoder.config.vocab_size
    trace_lens = [min(5, max_length), max(1, max_length // 3)]
    traced = trace_quietly(wrapper, random_token_batch(trace_lens, max_length, vocab, gen))
    saved = save_module(traced, path)
    loaded = load_saved(path)
    checks = []
    for lengths, length in (([1, min(7, max_length), max_length], max_length),
                            ([max_length], max_length), ([3, 16], min(16, max_length))):
        ids, mask = random_token_batch(lengths, length, vocab, gen)
        ref = wrapper(ids, mask)
        checks.append({"shape": list(ids.shape), "max_abs_diff": max_diff(loaded(ids, mask), ref),
                       "tolerance": dtype_tolerance(dtype, ref)})
    report = {"trace_shape": [len(trace_lens), max_length], **saved, "checks": checks,
              "padding_invariance": check_padding_invariance(loaded, max_length, vocab, gen)}
    if compile == "aoti":
        # exported with grad mode on: under no_grad, transformers' UMT5 takes a path whose graph
        # guards on rows != 1 (export refuses rows from 1; measured, transformers of the pinned venv)
        with torch.enable_grad():
            report["aoti"] = compile_text_encoder_aoti(wrapper, path.with_suffix(".cpu.pt2"), max_length, vocab, dtype, gen)
    return report


def check_padding_invariance(encoder, max_length: int, vocab: int, gen) -> dict[str, Any]:
    """Whether encoding only up to the batch's longest prompt gives the same rows as encoding the
    whole max_length (UMT5: masked keys and relative positions make padding irrelevant), so the
    runtime may trim the padding (manifest text_encoder.padding_invariant)."""
    lengths = [1, min(7, max_length), min(12, max_length)]
    ids, mask = random_token_batch(lengths, max_length, vocab, gen)
    full = encoder(ids, mask)
    n = max(lengths)
    short = encoder(ids[:, :n].contiguous(), mask[:, :n].contiguous())
    diff = max_diff(short, full[:, :n])
    # float32's tolerance in every dtype: a bf16 encoder run on fewer positions rounds
    # differently (measured: latents 0.05 off diffusers' bf16 loop), so it keeps all L.
    tol = dtype_tolerance(torch.float32, full)
    tail_zero = bool((full[:, n:] == 0).all())
    return {"lengths": lengths, "max_abs_diff": diff, "tolerance": tol, "padded_rows_zero": tail_zero,
            "invariant": diff <= tol and tail_zero}


def export_transformer_variants(name: str, transformer, out_dir: Path, max_length: int, dtype, gen,
                                quantize: str | None, per_token_timesteps: bool = False,
                                compile: str | None = None) -> dict[str, Any]:
    """The checks of `name` (and of its variant, name_int8.pt / name_fp8.pt when quantize is "int8" / "fp8"; "-only": name.pt quantized).
    A Handoff as `transformer` goes to the last export, which frees the eager model."""
    both = writes_variant(quantize)
    first = (transformer.module if isinstance(transformer, Handoff) else transformer) if both else transformer
    checks = {name: export_transformer(first, out_dir / f"{name}.pt", max_length, dtype, gen,
                                       only_precision(quantize), per_token_timesteps, compile)}
    del first
    if both:
        checks[variant_name(name, quantize)] = export_transformer(transformer, out_dir / f"{variant_name(name, quantize)}.pt",
                                                                  max_length, dtype, gen, precision_of(quantize), per_token_timesteps)
    return checks


def export_transformer(transformer, path: Path, max_length: int, dtype, gen, quantize: str | None = None,
                       per_token_timesteps: bool = False, compile: str | None = None) -> dict[str, Any]:
    """per_token_timesteps (Wan 2.2 TI2V, expand_timesteps): the module takes timestep float32
    [B, tokens], one per patch (F' * H'/2 * W'/2), as diffusers passes it; the checks zero the
    first latent frame's tokens in half the rows, as image-to-video does.

    A Handoff as `transformer` gives this function the only reference: the eager module is
    then freed once the references are computed and the file written, before the saved copy
    is loaded for the checks, so the export never holds two copies of the weights."""
    owned = isinstance(transformer, Handoff)
    transformer = transformer.take() if owned else transformer
    cfg = transformer.config
    wrapper = TransformerExport(transformer).eval()
    del transformer  # the wrapper holds it
    float_wrapper, quantized = wrapper, 0
    if quantize:
        wrapper, quantized = quantize_linears(wrapper, ".blocks.", quantize, dtype)
    _, ph, pw = cfg.patch_size

    def inputs(b, f, h, w):
        x = torch.randn(b, cfg.in_channels, f, h * ph, w * pw, generator=gen).to(dtype)
        t = torch.rand(b, generator=gen) * 1000.0
        if per_token_timesteps:
            t = t[:, None].repeat(1, f * h * w)
            t[::2, :h * w] = 0  # the clean first frame of an image-to-video row
        ctx = torch.randn(b, max_length, cfg.text_dim, generator=gen).to(dtype)
        return x, t, ctx

    def padded(args, lengths):  # WanPipeline's context: each prompt's rows, then zeros
        ctx = args[2].clone()
        for row, n in enumerate(lengths):
            ctx[row, n:] = 0
        return args[0], args[1], ctx

    trace_shape = (2, 2, 2, 2)
    trace_full = inputs(*trace_shape)
    trace_ctx, trace_bias = compact_context(padded(trace_full, [3, 4])[2], [3, 4])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # as in trace_quietly
        traced = torch.jit.trace_module(wrapper, {"forward": trace_full,
                                                  "forward_compact": (*trace_full[:2], trace_ctx, trace_bias)},
                                        check_trace=False)
    # Eager references first (the same draws of `gen`, in the same order, as the checks use).
    refs = []
    for shape in ((1, 3, 3, 4), (3, 1, 1, 1), trace_shape):
        args = inputs(*shape)
        refs.append((args, wrapper(*args), float_wrapper(*args) if quantized else None))
    compact_refs = compact_context_refs(float_wrapper, inputs, padded, max_length)
    aoti = compile_transformer_aoti(wrapper, path.with_suffix(".cpu.pt2"), cfg, inputs, padded, max_length,  # --compile aoti:
                                    dtype) if compile == "aoti" else None  # the .pt2 beside the TorchScript file, same wrapper
    saved = save_module(traced, path)
    if owned:  # the traced module shares the eager weights: both go before the reload
        del traced, wrapper, float_wrapper
        gc.collect()
    loaded = load_saved(path)
    checks = []
    for args, ref, float_ref in refs:
        checks.append({"shape": list(args[0].shape), "max_abs_diff": max_diff(loaded(*args), ref),
                       "tolerance": dtype_tolerance(dtype, ref)})
        if quantized:  # how far int8 moves the prediction from float (reported, not a check)
            checks[-1]["max_abs_diff_vs_float"] = max_diff(loaded(*args), float_ref)
    b, f, h, w = trace_shape
    return {"trace_shape": [b, cfg.in_channels, f, h * ph, w * pw], **saved, "checks": checks,
            **({"quantized_linears": quantized} if quantized else {}), **({"aoti": aoti} if aoti else {}),
            "compact_context": check_compact_context(loaded, compact_refs,
                                                     int8_slack=max((c.get("max_abs_diff_vs_float", 0.0) for c in checks),
                                                                    default=0.0))}


def compact_context_refs(wrapper, inputs, padded, max_length: int) -> list[tuple[Any, list[int], torch.Tensor]]:
    """Eager predictions on zero-padded contexts, for check_compact_context: (args, lengths, ref)."""
    refs = []
    for shape, lengths in (((2, 2, 3, 3), [1, 9]), ((3, 1, 2, 2), [max_length, 2, min(30, max_length)]),
                           ((1, 3, 2, 4), [min(7, max_length)])):
        args = padded(inputs(*shape), lengths)
        refs.append((args, lengths, wrapper(*args)))
    return refs


def check_compact_context(loaded, refs, int8_slack: float = 0.0) -> dict[str, Any]:
    """Whether forward_compact on the compacted context gives eager diffusers' prediction on the
    zero-padded one (manifest transformer.compact_context). float32's tolerance in every dtype,
    as for the text encoder's padding: a half-precision ln(n) bias rounds. An int8 module is
    held to twice its own distance from float32 (int8_slack) against the float32 prediction."""
    checks = []
    for args, lengths, ref in refs:
        ctx, bias = compact_context(args[2], lengths)
        out = loaded.forward_compact(args[0], args[1], ctx, bias)
        checks.append({"shape": list(args[0].shape), "lengths": lengths, "context_rows": int(ctx.size(1)),
                       "max_abs_diff": max_diff(out, ref),
                       "tolerance": dtype_tolerance(torch.float32, ref) + 2 * int8_slack})
    return {"checks": checks, "usable": not failed_checks({"checks": checks})}


def export_wan(diffusers_dir: Path | str, out_dir: Path | str, dtype: str = "float32",
               tiny: bool = False, flow_shift: float | None = None, max_side: int = 1280,
               max_frames: int = 81, seed: int = 0, source: dict | None = None,
               quantize: str | None = None, default_precision: str | None = None,
               compile: str | None = None, video_input: bool = False) -> dict[str, Any]:
    """Export a diffusers Wan directory into a package directory; returns the manifest. Which
    pipeline it is comes from detect_wan (Wan 2.1 T2V or I2V); any other is refused, naming it,
    before anything is written. quantize (vgen_export/quantize.py; text-to-video packages,
    float32 exports): "int8" adds an int8 variant beside each float32 transformer, "int8-only"
    quantizes the transformers themselves. default_precision: the precision jobs get when they
    name none (precisions.default; the base one if None). video_input (Wan 2.1 text-to-video
    only): ship the VAE encoder as well (wan_i2v.export_vae_encoder, the posterior mean) and
    write ``inputs.video`` "optional", so that the package takes video-to-video jobs; off by
    default because the encoder adds about a third of the VAE's size and export time to every
    package, and a package without it refuses a job's video by name."""
    check_quantize(quantize, dtype, default_precision)
    import diffusers
    import sentencepiece
    import transformers
    from diffusers import AutoencoderKLWan, WanTransformer3DModel
    from transformers import UMT5EncoderModel

    diffusers_dir, out_dir = Path(diffusers_dir), Path(out_dir)
    variant = detect_wan(diffusers_dir)
    check_exportable(variant)
    i2v = variant.name in (mf.FAMILY_WAN21_I2V, mf.FAMILY_WAN21_FLF2V)  # FLF2V: and a last frame
    # transformer (high noise) + transformer_2; A14B I2V: 36-channel experts, no image encoder
    experts = variant.name in (mf.FAMILY_WAN22_A14B_T2V, mf.FAMILY_WAN22_A14B_I2V)
    a14b_i2v = variant.name == mf.FAMILY_WAN22_A14B_I2V
    ti2v = variant.name == mf.FAMILY_WAN22_TI2V  # z_dim-48 VAE, per-token timesteps, optional image
    vace = variant.name == mf.FAMILY_WAN21_VACE  # control video, mask, reference images (wan_vace.py)
    if quantize and (i2v or a14b_i2v or vace):  # refused before anything is written
        raise ValueError("quantize: not available for Wan I2V packages yet")
    if video_input and variant.name != mf.FAMILY_WAN21_T2V:  # WanVideoToVideoPipeline: one 16-channel transformer
        raise ValueError(f"video_input: only for Wan 2.1 text-to-video packages (not {variant.name})")
    if compile and (quantize or i2v or a14b_i2v or ti2v or vace):  # (int8 Linears, image inputs, per-token timesteps)
        raise ValueError(f"compile {compile}: only for float Wan text-to-video packages yet (not {variant.name}"
                         f"{', quantize ' + quantize if quantize else ''})")
    out_dir.mkdir(parents=True, exist_ok=True)
    tdtype = DTYPES[dtype]
    gen = torch.Generator().manual_seed(1234)
    max_length = pipeline_max_sequence_length()

    spm_file = find_spm_file(diffusers_dir)
    shutil.copyfile(spm_file, out_dir / "tokenizer.model")
    sp = sentencepiece.SentencePieceProcessor(model_file=str(spm_file))
    checks: dict[str, Any] = {"tokenizer": check_tokenizer(diffusers_dir / "tokenizer", spm_file, max_length,
                                                           [WAN_NEGATIVE_PROMPT])}
    if checks["tokenizer"]["mismatches"]:
        raise RuntimeError(f"SentencePiece disagrees with the pipeline tokenizer: {checks['tokenizer']}")

    with torch.no_grad():
        encoder = UMT5EncoderModel.from_pretrained(diffusers_dir / "text_encoder", dtype=tdtype).eval()
        checks["text_encoder"] = export_text_encoder(encoder, out_dir / "text_encoder.pt", max_length, tdtype, gen,
                                                     compile)
        text_dim = int(encoder.config.d_model)
        del encoder
        if i2v:  # image encoder, VAE encoder and the 36-channel transformer
            parts = export_i2v_parts(diffusers_dir, out_dir, max_length, tdtype, gen)
            checks.update(parts["checks"])
            tcfg = parts["transformer_config"]
        elif vace:  # the transformer with its control inputs (wan_vace.TransformerVaceExport)
            from diffusers import WanVACETransformer3DModel

            transformer = WanVACETransformer3DModel.from_pretrained(diffusers_dir, subfolder="transformer",
                                                                    dtype=tdtype).eval()
            tcfg = dict(transformer.config)
            checks["transformer"] = export_transformer_vace(transformer, out_dir / "transformer.pt", max_length,
                                                            tdtype, gen)
            del transformer
        else:
            transformer = Handoff(WanTransformer3DModel.from_pretrained(diffusers_dir, subfolder="transformer",
                                                                        dtype=tdtype).eval())
            tcfg = dict(transformer.module.config)
            checks.update(export_transformer_variants("transformer", transformer, out_dir, max_length, tdtype, gen,
                                                      quantize, per_token_timesteps=ti2v, compile=compile))
            del transformer
        if experts:
            transformer = Handoff(WanTransformer3DModel.from_pretrained(diffusers_dir, subfolder="transformer_2",
                                                                        dtype=tdtype).eval())
            checks.update(export_transformer_variants("transformer_2", transformer, out_dir, max_length, tdtype, gen,
                                                      quantize, compile=compile))
            del transformer
        vae = AutoencoderKLWan.from_pretrained(diffusers_dir, subfolder="vae", dtype=torch.float32).eval()
        vcfg = dict(vae.config)
        checks["vae_decoder"] = export_vae_decoder(vae, out_dir / "vae_decoder.pt", gen, compile)
        if ti2v:
            checks["vae_encoder"] = export_ti2v_encoder(vae, out_dir, gen)
        elif a14b_i2v or video_input or vace:
            checks["vae_encoder"] = export_vae_encoder(vae, out_dir / "vae_encoder.pt", gen)
        del vae
    denoisers = ["transformer"] + (["transformer_2"] if experts else [])  # ("transformers" is the library)
    for name in ["text_encoder", "vae_decoder"] + denoisers + (["vae_encoder"] if ti2v or a14b_i2v or video_input or vace else []) + \
            ([variant_name(t, quantize) for t in denoisers] if writes_variant(quantize) else []):
        assert_checks(name, checks[name])

    scheduler = load_scheduler(diffusers_dir, flow_shift)
    spatial, temporal = int(vcfg.get("scale_factor_spatial", 8)), int(vcfg.get("scale_factor_temporal", 4))
    patch = [int(p) for p in tcfg["patch_size"]]
    rope = int(tcfg["rope_max_seq_len"])

    def side(p: int) -> dict[str, int]:
        multiple = spatial * p
        return {"multiple_of": multiple, "min": multiple,
                "max": min(max_side, rope * multiple) // multiple * multiple}

    frames_max = min(max_frames, temporal * (rope * patch[0] - 1) + 1)
    manifest = {
        "format": mf.FORMAT,
        "format_version": mf.FORMAT_VERSION,
        "family": variant.name,
        "dtype": dtype,
        "source": {"diffusers_dir": str(diffusers_dir), "tiny": tiny, "seed": seed if tiny else None,
                   "torch": torch.__version__, "diffusers": diffusers.__version__,
                   "transformers": transformers.__version__, **(source or {})},
        "components": {
            "tokenizer": mf.component_entry(out_dir, "tokenizer.model", format="sentencepiece"),
            "text_encoder": mf.component_entry(out_dir, "text_encoder.pt", format="torchscript",
                                               dtype=dtype, methods=["forward"]),
            "transformer": mf.component_entry(out_dir, "transformer.pt", format="torchscript", dtype=dtype,
                                              methods=["forward"] if i2v or vace else ["forward", "forward_compact"],
                                              **quantization_field(quantize)),
            "vae_decoder": mf.component_entry(out_dir, "vae_decoder.pt", format="torchscript",
                                              dtype="float32",
                                              methods=["forward", "decode_first", "decode_step", "decode_unclamped",
                                                       "decode_first_packed", "decode_step_packed"]),
        },
        "tokenizer": {"file": "tokenizer.model", "type": "sentencepiece", "vocab_size": sp.vocab_size(),
                      "max_length": max_length, "pad_id": sp.pad_id(), "eos_id": sp.eos_id(),
                      "unk_id": sp.unk_id(), "add_eos": True, "padding": "right",
                      "truncation": "pieces[:max_length-1] + [eos]",
                      "prompt_clean": "html-unescape twice, collapse whitespace runs to one space, strip"},
        "text_encoder": {"output_dim": text_dim, "output_masked": True,
                         "padding_invariant": checks["text_encoder"]["padding_invariance"]["invariant"]},
        "scheduler": mf.scheduler_section(scheduler),
        "latent": {"channels": int(vcfg["z_dim"]), "temporal_scale": temporal, "spatial_scale": spatial,
                   "latents_mean": [float(v) for v in vcfg["latents_mean"]],
                   "latents_std": [float(v) for v in vcfg["latents_std"]],
                   "dtype": "float32"},
        "transformer": {"patch_size": patch, "in_channels": int(tcfg["in_channels"]),
                        "out_channels": int(tcfg["out_channels"]), "text_dim": int(tcfg["text_dim"]),
                        "rope_max_seq_len": rope, "prediction": "flow", "timestep_dtype": "float32",
                        "compact_context": all(checks[t]["compact_context"]["usable"] for t in
                                               ("transformer", "transformer_2") + tuple(variant_name(d, quantize) for d in ("transformer", "transformer_2")
                                               if writes_variant(quantize)) if t in checks)},
        "resolution": {"height": side(patch[1]), "width": side(patch[2])},
        "frames": {"rule": "4k+1", "k_multiple": temporal, "min": 1,
                   "max": (frames_max - 1) // temporal * temporal + 1},
        "defaults": fit_defaults(TINY_DEFAULTS if tiny else REAL_DEFAULTS, side(patch[1]), side(patch[2]),
                                 (frames_max - 1) // temporal * temporal + 1),
        "export_checks": checks,
    }
    # Live previews: the latent -> RGB factors, fitted against the decoder just written.
    manifest["preview"] = preview_section(manifest, torchscript_decoder(out_dir, manifest))
    if i2v or a14b_i2v:
        add_i2v_sections(manifest, out_dir, parts["image_conditioning"] if i2v else a14b_image_conditioning(tcfg),
                         last_image=variant.name == mf.FAMILY_WAN21_FLF2V)
    if experts:  # WanPipeline: transformer while t >= boundary_ratio * num_train_timesteps, then transformer_2
        manifest["components"]["transformer_2"] = mf.component_entry(
            out_dir, "transformer_2.pt", format="torchscript", dtype=dtype, methods=["forward", "forward_compact"],
            **quantization_field(quantize))
        manifest["experts"] = {"boundary_ratio": float(variant.boundary_ratio), "high_noise": "transformer",
                               "low_noise": "transformer_2", "guidance_scale_2": "the job's guidance"}
    if ti2v:
        add_ti2v_sections(manifest, out_dir)
    if vace:
        add_vace_sections(manifest, out_dir, tcfg)
    if video_input:  # video-to-video (WanVideoToVideoPipeline): the input video's posterior mean
        manifest["components"]["vae_encoder"] = mf.component_entry(
            out_dir, "vae_encoder.pt", format="torchscript", dtype="float32", methods=["forward", "encode_first"])
        manifest["video_conditioning"] = {"vae_encoder_input": "float32 [B,3,F,H,W] in [-1,1]; output: the posterior mean"}
        manifest["inputs"] = {"video": "optional"}
    add_precisions(manifest, out_dir, quantize, denoisers, default_precision, dtype)
    if compile == "aoti":  # components.<name>.compiled.cpu: the .pt2 beside the TorchScript file
        from .aoti import compiled_entry

        for name in denoisers:
            assert_checks(f"{name} (aoti)", checks[name]["aoti"])
            manifest["components"][name]["compiled"] = {"cpu": compiled_entry(
                out_dir, f"{name}.cpu.pt2", checks[name]["aoti"], manifest["components"][name]["methods"])}
        assert_checks("text_encoder (aoti)", checks["text_encoder"]["aoti"])
        manifest["components"]["text_encoder"]["compiled"] = {"cpu": compiled_entry(
            out_dir, "text_encoder.cpu.pt2", checks["text_encoder"]["aoti"], ["forward"])}
        # the VAE's whole-clip decode only: its other methods run on vae_decoder.pt (wan_vae_aoti.py)
        assert_checks("vae_decoder (aoti)", checks["vae_decoder"]["aoti"])
        manifest["components"]["vae_decoder"]["compiled"] = {"cpu": compiled_entry(
            out_dir, "vae_decoder.cpu.pt2", checks["vae_decoder"]["aoti"], ["forward"])}
    mf.write_manifest(out_dir, manifest)
    return manifest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m vgen_export.wan",
                                     description="Export a diffusers Wan directory (2.1 T2V or I2V, 2.2 A14B or "
                                                 "TI2V) to a vgen model package")
    parser.add_argument("--diffusers", type=Path, help="diffusers checkpoint directory")
    parser.add_argument("--out", type=Path, required=True, help="package directory to write")
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="float32")
    parser.add_argument("--tiny", action="store_true", help="build the tiny random test model first")
    parser.add_argument("--seed", type=int, default=0, help="seed for --tiny")
    parser.add_argument("--tiny-variant", choices=["t2v", "i2v", "a14b-t2v", "a14b-i2v", "ti2v", "flf2v", "vace"], default="t2v",
                        help="which tiny pipeline")
    parser.add_argument("--flow-shift", type=float, default=None, help="override the scheduler shift")
    parser.add_argument("--max-side", type=int, default=1280)
    parser.add_argument("--max-frames", type=int, default=81)
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    add_quantize_arguments(parser)
    parser.add_argument("--compile", choices=["aoti"], default=None,
                        help="aoti: also compile the transformer(s), the text encoder and the VAE's whole-clip decode ahead of time with torch.export + AOTInductor "
                             "for this machine's CPU (<name>.cpu.pt2 beside the TorchScript file; "
                             "VGEN_AOTI_THREADS compile threads, default 1)")
    parser.add_argument("--video-input", action="store_true",
                        help="Wan 2.1 text-to-video: ship the VAE encoder too, so jobs may give a video "
                             "(video-to-video, manifest inputs.video)")
    args = parser.parse_args(argv)
    if args.tiny == (args.diffusers is not None):
        parser.error("give exactly one of --diffusers DIR or --tiny")
    torch.set_num_threads(args.threads)
    common = dict(dtype=args.dtype, flow_shift=args.flow_shift, max_side=args.max_side,
                  max_frames=args.max_frames, quantize=args.quantize, default_precision=args.default_precision,
                  compile=args.compile, video_input=args.video_input)
    if args.tiny:
        from .tiny_wan import write_tiny_wan

        with tempfile.TemporaryDirectory(prefix="vgen_tiny_wan_") as tmp:
            src = write_tiny_wan(Path(tmp) / "diffusers", seed=args.seed, variant=args.tiny_variant)
            manifest = export_wan(src, args.out, tiny=True, seed=args.seed, **common)
    else:
        try:
            manifest = export_wan(args.diffusers, args.out, **common)
        except UnsupportedWanPipeline as e:
            print(f"export_wan: refused: {e}", file=sys.stderr)
            return 2
    worst = max(c["max_abs_diff"] for n in ("text_encoder", "transformer", "transformer_2", "vae_decoder",
                                            "image_encoder", "vae_encoder") if n in manifest["export_checks"]
                for c in manifest["export_checks"][n]["checks"])
    print(f"wrote {args.out} ({manifest['family']}, {manifest['dtype']}); max |jit - eager| = {worst:.3g}")
    for name, c in manifest["components"].items():
        for device, entry in c.get("compiled", {}).items():
            report = manifest["export_checks"][name]["aoti"]
            worst = max(x["max_abs_diff"] for x in report["checks"])
            print(f"  {entry['file']}: aoti for {device}, {entry['bytes'] / 1e6:.1f} MB, compiled in "
                  f"{report['compile_seconds']:.1f} s, kernels {report['kernels']}; max |aoti - eager| = {worst:.3g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
