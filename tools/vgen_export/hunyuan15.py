"""Export a diffusers HunyuanVideo 1.5 text-to-video or image-to-video checkpoint into a vgen model package.

    python -m vgen_export.hunyuan15 --diffusers DIR OUT [--dtype float32|float16|bfloat16]
    python -m vgen_export.hunyuan15 --tiny OUT [--seed N] [--tiny-variant t2v|i2v]  # builds the tiny test model first

The package (docs/MODEL_PACKAGE.md, family "hunyuan-video-1.5") holds TorchScript modules, the
Qwen tokenizer's ``tokenizer.json`` and ``manifest.json``:

- text_encoder.pt   (input_ids int64 [B,L], attention_mask int64 [B,L]) -> [B,L-crop,D]: the Qwen
  2.5-VL text model's hidden state ``num_hidden_layers_to_skip`` layers before the last, with the
  chat-template prefix (``crop_start`` tokens) cut off, as HunyuanVideo15Pipeline takes it; L =
  tokenizer_max_length + crop_start; the runtime renders the template (manifest
  ``text.template``) and tokenizes it (stages/text/bpe_tokenizer.hpp);
- text_encoder_2.pt (input_ids int64 [B,256], attention_mask float32 [B,256]) -> [B,256,D2]: ByT5
  on the prompt's quoted glyph texts (``Text "..."``), bytes + 3 then </s>; a prompt without
  quotes gets zeros and a zero mask, no encoder call;
- transformer.pt    (latents [B,C,F,H,W], timestep float32 [B], text [B,L',D], mask float32 [B,L'],
  text_2 [B,256,D2], mask_2 float32 [B,256]) -> [B,C,F,H,W]: text-to-video, so the condition
  latents, their mask and the image embeddings are zeros made inside the module;
  image-to-video adds (cond [B,C,1,H,W], image [B,N,Di]): the first frame's scaled VAE latents
  (the module pads them with zero frames and builds the mask, 1 on latent frame 0) and SigLIP's
  image tokens, which take part in attention (diffusers' is_t2v test is false for them);
- vae_decoder.pt    (z [B,C,F,H,W] = latents / scaling_factor) -> video [B,3,4F-3,16H,16W] in
  [-1,1]-ish. The VAE's causal attention mask is built by a Python loop in diffusers, which a
  trace would freeze at one size: it is replaced, while tracing, by the same mask built with
  tensor ops (0 where the key's frame is not after the query's, -inf elsewhere);
- image-to-video only (HunyuanVideo15ImageToVideoPipeline, detected from model_index.json):
  image_encoder.pt and vae_encoder.pt, exported by vgen_export.hunyuan15_i2v (described there).

Classifier-free guidance is the guider's (``ClassifierFreeGuidance``: uncond + g (cond - uncond),
the diffusers-native form); a guider with another formulation, a guidance rescale or a start/stop
window is refused by name, as are a scheduler other than FlowMatchEulerDiscreteScheduler, patch
sizes other than 1 and pipelines other than HunyuanVideo15Pipeline and
HunyuanVideo15ImageToVideoPipeline. The I2V pipeline picks the video's size from the picture's
aspect ratio (buckets around transformer target_size); vgen renders the job's height and width
and fits the picture to them as the pipeline does (scale to cover, centre crop), so a job asking
the bucket's size is the pipeline's video.
"""

from __future__ import annotations

import argparse
import gc
import json
import re
import shutil
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Any

import torch

from . import hunyuan15_i2v as hy_i2v
from . import manifest as mf
from .common import (DTYPES, Handoff, assert_checks, dtype_tolerance, load_saved, max_diff, save_module,
                     trace_quietly)
from .hunyuan15_modules import (ByT5Export, ExportRefused, I2VTransformerExport, TextEncoderExport, TransformerExport,
                                VaeDecoderExport, traceable_vae_attention)

T2V_PIPELINE, I2V_PIPELINE = "HunyuanVideo15Pipeline", "HunyuanVideo15ImageToVideoPipeline"
ACCEPTED_PIPELINES = (T2V_PIPELINE, I2V_PIPELINE)
REAL_DEFAULTS = {"steps": 50, "guidance_scale": 6.0, "height": 480, "width": 848, "frames": 121, "fps": 24,
                 "negative_prompt": ""}
TINY_DEFAULTS = {"steps": 3, "guidance_scale": 6.0, "height": 32, "width": 48, "frames": 5, "fps": 24,
                 "negative_prompt": ""}
TINY_I2V_DEFAULTS = {**TINY_DEFAULTS, "width": 32}  # the tiny SigLIP's size: its resize is exact
GLYPH_PATTERN = r"\"(.*?)\"|“(.*?)”"  # the pipeline's extract_glyph_texts


def pipeline_constants(pipeline: str = T2V_PIPELINE) -> dict[str, Any]:
    """What the pipeline class fixes in its __init__ and signatures (read, not copied)."""
    import inspect

    import diffusers

    from types import SimpleNamespace

    cls = getattr(diffusers, pipeline)

    class Probe(cls):  # runs __init__ on stand-ins: the constants it sets
        def register_modules(self, **kwargs):
            for name, value in kwargs.items():
                object.__setattr__(self, name, value)

    vae = SimpleNamespace(temporal_compression_ratio=4, spatial_compression_ratio=16,
                          config=SimpleNamespace(latent_channels=32))
    transformer = SimpleNamespace(config=SimpleNamespace(target_size=640, image_embed_dim=1152))
    extra = dict(image_encoder=None, feature_extractor=None) if pipeline == I2V_PIPELINE else {}
    probe = Probe(text_encoder=None, tokenizer=None, transformer=transformer, vae=vae, scheduler=None,
                  text_encoder_2=None, tokenizer_2=None, guider=None, **extra)
    mllm = inspect.signature(cls._get_mllm_prompt_embeds).parameters  # noqa: SLF001
    return {"system_message": probe.system_message, "crop_start": int(probe.prompt_template_encode_start_idx),
            "max_length": int(probe.tokenizer_max_length), "max_length_2": int(probe.tokenizer_2_max_length),
            "image_tokens": int(probe.vision_num_semantic_tokens),
            "skip_layers": int(mllm["num_hidden_layers_to_skip"].default)}


def glyph_text(prompt: str) -> str | None:
    """extract_glyph_texts as the pipeline runs it (checked against it in the exporter)."""
    result = [a or b for a, b in re.findall(GLYPH_PATTERN, prompt)]
    result = list(dict.fromkeys(result)) if len(result) > 1 else result
    return ". ".join(f'Text "{t}"' for t in result) + ". " if result else None


def byt5_ids(text: str, length: int, offset: int = 3, eos: int = 1, pad: int = 0) -> tuple[list[int], list[float]]:
    """ByT5Tokenizer's ids as the runtime computes them (stages/families/hunyuan15: byt5_ids): UTF-8
    bytes + offset, its added tokens cut out first (<pad>, </s>, <unk> strip the whitespace around
    them; <extra_id_N> = offset + 256 + N), cut to length - 1, </s>, right-padded."""
    special = re.compile(r"(\s*)(<pad>|</s>|<unk>)(\s*)|<extra_id_(0|[1-9][0-9]{0,2})>")
    named = {"<pad>": pad, "</s>": eos, "<unk>": offset - 1}
    out: list[int] = []
    pos = 0
    for m in special.finditer(text):
        if m.group(4) is not None and int(m.group(4)) >= 125:
            continue
        out += [b + offset for b in text[pos:m.start()].encode()]
        out.append(named[m.group(2)] if m.group(2) else offset + 256 + int(m.group(4)))
        pos = m.end()
    out += [b + offset for b in text[pos:].encode()]
    out = out[: length - 1] + [eos]
    return out + [pad] * (length - len(out)), [1.0] * len(out) + [0.0] * (length - len(out))


BYT5_PROBES = ['Text "OPEN". ', 'Text "' + "é" * 300 + '". ', 'Text "a</s>b<pad>c<unk>d". ', 'x <pad> y',
               'Text "<extra_id_3>e<extra_id_0><extra_id_124><extra_id_125>". ', 'x<extra_id_3 y', 'Text "東京 🐶". ']


def check_byt5(tokenizer_2, length: int) -> dict[str, Any]:
    """The runtime's ByT5 ids against the pipeline's tokenizer_2 called the pipeline's way."""
    mismatches = [p for p in BYT5_PROBES if byt5_ids(p, length)[0] != tokenizer_2(
        p, padding="max_length", max_length=length, truncation=True, add_special_tokens=True)["input_ids"]]
    return {"probes": len(BYT5_PROBES), "mismatches": mismatches}


# ---- export steps -----------------------------------------------------------------------------

def refuse_unsupported(src: Path) -> dict[str, Any]:
    index_file = src / "model_index.json"
    if not index_file.is_file():
        raise ExportRefused(f"{src}: no model_index.json (not a diffusers pipeline directory)")
    index = json.loads(index_file.read_text())
    if index.get("_class_name") not in ACCEPTED_PIPELINES:
        raise ExportRefused(f"{src}: pipeline {index.get('_class_name')!r} is not HunyuanVideo 1.5 text- or "
                            f"image-to-video (accepted: {', '.join(ACCEPTED_PIPELINES)})")
    parts = ["text_encoder", "text_encoder_2", "tokenizer", "tokenizer_2", "transformer", "vae", "scheduler", "guider"]
    if index["_class_name"] == I2V_PIPELINE:
        parts += ["image_encoder", "feature_extractor"]
    for part in parts:
        if not (src / part).is_dir():
            raise ExportRefused(f"{src}: component {part!r} is missing")
    sched = json.loads((src / "scheduler" / "scheduler_config.json").read_text())
    if sched.get("_class_name") != "FlowMatchEulerDiscreteScheduler":
        raise ExportRefused(f"scheduler {sched.get('_class_name')!r}: vgen runs FlowMatchEulerDiscreteScheduler only")
    for key in ("use_dynamic_shifting", "use_karras_sigmas", "use_exponential_sigmas", "use_beta_sigmas",
                "invert_sigmas", "stochastic_sampling"):
        if sched.get(key):
            raise ExportRefused(f"scheduler option {key}=true is not supported by vgen's HunyuanVideo 1.5 family")
    if sched.get("shift_terminal"):
        raise ExportRefused("scheduler option shift_terminal is not supported by vgen's HunyuanVideo 1.5 family")
    guider = json.loads(next((src / "guider").glob("*.json")).read_text())
    if guider.get("_class_name") != "ClassifierFreeGuidance":
        raise ExportRefused(f"guider {guider.get('_class_name')!r}: vgen runs ClassifierFreeGuidance only")
    if guider.get("use_original_formulation") or guider.get("guidance_rescale", 0.0) or \
            guider.get("start", 0.0) != 0.0 or guider.get("stop", 1.0) != 1.0 or guider.get("enabled") is False:
        raise ExportRefused("guider: use_original_formulation, guidance_rescale, start/stop windows and a disabled "
                            "guider are not supported (vgen applies uncond + g * (cond - uncond) at every step)")
    tcfg = json.loads((src / "transformer" / "config.json").read_text())
    if tcfg.get("patch_size", 1) != 1 or tcfg.get("patch_size_t", 1) != 1:
        raise ExportRefused(f"transformer patch_size {tcfg.get('patch_size')}/{tcfg.get('patch_size_t')}: vgen "
                            "exports patch size 1 only")
    if tcfg.get("use_meanflow"):
        raise ExportRefused("transformer use_meanflow (the super-resolution model) is not supported")
    return {"index": index, "guider": guider, "i2v": index["_class_name"] == I2V_PIPELINE}


def export_text_model(wrapper, path: Path, length: int, ids: tuple[int, int], mask_dtype, trace_lengths: list[int],
                      check_lengths: list[list[int]], dtype, gen) -> dict[str, Any]:
    """Traces an encoder wrapper (input_ids [B,length] drawn from range `ids`, a right-padded
    mask) and checks the saved file against the wrapper on rows of `check_lengths`."""

    def inputs(lengths):
        rows = torch.randint(*ids, (len(lengths), length), generator=gen)
        mask = torch.zeros(len(lengths), length, dtype=mask_dtype)
        for row, n in enumerate(lengths):
            mask[row, :n] = 1
        return rows, mask

    traced = trace_quietly(wrapper, inputs(trace_lengths))
    saved = save_module(traced, path)
    loaded = load_saved(path)
    checks = []
    for lengths in check_lengths:
        rows, mask = inputs(lengths)
        ref = wrapper(rows, mask)
        checks.append({"shape": list(rows.shape), "max_abs_diff": max_diff(loaded(rows, mask), ref),
                       "tolerance": dtype_tolerance(dtype, ref)})
    return {"trace_shape": [2, length], **saved, "checks": checks}


def export_text_encoder(encoder, path: Path, consts: dict[str, Any], dtype, gen) -> dict[str, Any]:
    wrapper = TextEncoderExport(encoder, consts["skip_layers"], consts["crop_start"]).eval()
    length = consts["max_length"] + consts["crop_start"]
    return export_text_model(wrapper, path, length, (0, encoder.config.vocab_size), torch.long, [length, 120],
                             [[130], [length, 109, 200]], dtype, gen)


def export_byt5(encoder, path: Path, length: int, dtype, gen) -> dict[str, Any]:
    return export_text_model(ByT5Export(encoder).eval(), path, length, (3, 259), torch.float32, [length, 12],
                             [[20], [5, 40, length]], dtype, gen)


def export_transformer(transformer, path: Path, consts: dict[str, Any], text_dim: int, text_2_dim: int, dtype,
                       gen, image_tokens: int | None = None) -> dict[str, Any]:
    """Checked against diffusers called as the pipeline calls it: text-to-video with a zero
    condition and zero image; image-to-video (``image_tokens`` set) with random first-frame
    latents, the frame-0 mask and random image tokens. A Handoff as `transformer` gives this
    function the only reference: the eager model is freed once every reference is computed and
    the file written, before the saved copy is loaded for the checks (one copy of the weights at
    a time)."""
    transformer = transformer.take() if isinstance(transformer, Handoff) else transformer
    i2v = image_tokens is not None
    wrapper = (I2VTransformerExport if i2v else TransformerExport)(transformer, consts["image_tokens"]).eval()
    c = int(transformer.config.out_channels)
    length, length_2 = consts["max_length"], consts["max_length_2"]

    def inputs(b, f, h, w, lengths, lengths_2):
        x = torch.randn(b, c, f, h, w, generator=gen).to(dtype)
        t = (torch.rand(b, generator=gen) * 1000.0).to(dtype)
        text = torch.randn(b, length, text_dim, generator=gen).to(dtype)
        text_2 = torch.randn(b, length_2, text_2_dim, generator=gen).to(dtype)
        mask, mask_2 = torch.zeros(b, length), torch.zeros(b, length_2)
        for row, (n, n2) in enumerate(zip(lengths, lengths_2)):
            mask[row, :n] = 1
            mask_2[row, :n2] = 1
        extra = ()
        if i2v:
            extra = (torch.randn(b, c, 1, h, w, generator=gen).to(dtype),
                     torch.randn(b, image_tokens, wrapper.image_dim, generator=gen).to(dtype))
        return (x, t, text, mask.to(dtype), text_2, mask_2.to(dtype)) + extra

    trace = inputs(2, 2, 2, 3, [7, length], [0, 9])
    traced = trace_quietly(wrapper, trace)
    refs = []  # eager references first (the same draws of `gen`, in the same order, as before)
    for b, f, h, w, lengths, lengths_2 in ((1, 1, 2, 2, [5], [0]), (2, 3, 2, 3, [3, 40], [12, 0]),
                                           (3, 2, 1, 1, [length, 1, 9], [length_2, 3, 0])):
        args = inputs(b, f, h, w, lengths, lengths_2)
        x, t, text, mask, text_2, mask_2 = args[:6]
        if i2v:  # prepare_cond_latents_and_mask: the image latents on frame 0, zeros after; mask 1 on frame 0
            latent_condition = args[6].repeat(1, 1, f, 1, 1)
            latent_condition[:, :, 1:] = 0
            latent_mask = torch.zeros_like(x[:, :1])
            latent_mask[:, :, 0] = 1.0
            cond, image = torch.cat([x, latent_condition, latent_mask], 1), args[7]
        else:
            cond = torch.cat([x, torch.zeros_like(x), torch.zeros_like(x[:, :1])], 1)
            image = torch.zeros(b, consts["image_tokens"], wrapper.image_dim, dtype=dtype)
        ref = transformer(hidden_states=cond, timestep=t, encoder_hidden_states=text, encoder_attention_mask=mask,
                          encoder_hidden_states_2=text_2, encoder_attention_mask_2=mask_2, image_embeds=image,
                          return_dict=False)[0]
        refs.append((args, ref, {"shape": list(x.shape), "text": lengths, "text_2": lengths_2}))
    saved = save_module(traced, path)
    del traced, wrapper, transformer  # with a Handoff the last references: the weights go before the reload
    gc.collect()
    loaded = load_saved(path)
    checks = [{**check, "max_abs_diff": max_diff(loaded(*args), ref), "tolerance": dtype_tolerance(dtype, ref)}
              for args, ref, check in refs]
    return {"trace_shape": list(trace[0].shape), **saved, "checks": checks}


def trace_vae_decoder(vae, path: Path, gen) -> tuple[dict[str, Any], list, list[int]]:
    """Writes vae_decoder.pt; returns what export_vae checks it with once the eager VAE is gone:
    (the saved file's entry, [(z, vae.decode(z))], the trace shape)."""
    wrapper = VaeDecoderExport(vae).eval()
    c = int(vae.config.latent_channels)
    with traceable_vae_attention():
        traced = trace_quietly(wrapper, (torch.randn(1, c, 2, 2, 2, generator=gen),))
    refs = []
    for b, f, h, w in ((1, 1, 1, 1), (2, 3, 2, 3), (1, 2, 3, 2)):
        z = torch.randn(b, c, f, h, w, generator=gen)
        # diffusers' own loop-built mask, one row at a time: its [B,S,S] mask does not broadcast
        # against the [B,1,S,C] query for B > 1 (diffusers 0.42.1 decodes batches only sliced).
        refs.append((z, torch.cat([vae.decode(row, return_dict=False)[0] for row in z.split(1)])))
    return save_module(traced, path), refs, [1, c, 2, 2, 2]


def export_vae(vae, out_dir: Path, gen, i2v: bool) -> dict[str, dict[str, Any]]:
    """vae_decoder.pt, and vae_encoder.pt for image-to-video. Every eager reference is computed
    and the files written before the VAE is dropped, and only then are the saved copies loaded
    for their checks: with a Handoff as `vae` the export holds one copy of the VAE's weights at a
    time (as LTX-2's and Wan's exporters do; the eager VAE beside a reloaded copy is what took
    those past their memory at real size)."""
    vae = vae.take() if isinstance(vae, Handoff) else vae
    parts = {"vae_decoder": trace_vae_decoder(vae, out_dir / "vae_decoder.pt", gen)}
    if i2v:
        parts["vae_encoder"] = hy_i2v.trace_vae_encoder(vae, out_dir / "vae_encoder.pt", gen)
    del vae  # with a Handoff the last reference: the weights go before the reloads
    gc.collect()
    checks = {}
    for name, (saved, refs, trace_shape) in parts.items():
        loaded = load_saved(out_dir / f"{name}.pt")
        checks[name] = {"trace_shape": trace_shape, **saved,
                        "checks": [{"shape": list(x.shape), "max_abs_diff": max_diff(loaded(x), ref), "tolerance": 1e-5}
                                   for x, ref in refs]}
        del loaded
    return checks


TOKENIZER_PROBES = ["a dog barks at a passing car", "", " ", "Une fête à Paris, café crème", "東京の夜景 🐶🎉",
                    "tabs\tand\nnewlines\r\n  spaces   ", 'a sign that says "OPEN" and “CLOSED”']


def check_template(tokenizer, consts: dict[str, Any], template: str) -> dict[str, Any]:
    """The runtime renders ``template`` with {system} and {prompt}: the same text as the
    tokenizer's chat template applied the pipeline's way, on probe prompts."""
    from diffusers.pipelines.hunyuan_video1_5.pipeline_hunyuan_video1_5 import extract_glyph_texts, format_text_input

    mismatches = []
    for p in TOKENIZER_PROBES:
        want = tokenizer.apply_chat_template(format_text_input([p], consts["system_message"]), add_generation_prompt=True,
                                             tokenize=False)[0]
        got = template.replace("{system}", consts["system_message"]).replace("{prompt}", p if p else " ")
        if want != got:
            mismatches.append(p)
        if glyph_text(p) != extract_glyph_texts(p):
            mismatches.append("glyph:" + p)
    return {"probes": len(TOKENIZER_PROBES), "mismatches": mismatches}


def export_hunyuan15(src: Path | str, out_dir: Path | str, dtype: str = "float32", tiny: bool = False,
                     max_side: int = 1280, max_frames: int = 241, seed: int = 0) -> dict[str, Any]:
    import diffusers
    import transformers
    from diffusers import AutoencoderKLHunyuanVideo15, FlowMatchEulerDiscreteScheduler, HunyuanVideo15Transformer3DModel
    from transformers import AutoTokenizer, Qwen2_5_VLTextModel, T5EncoderModel

    src, out_dir = Path(src), Path(out_dir)
    info = refuse_unsupported(src)
    out_dir.mkdir(parents=True, exist_ok=True)
    tdtype = DTYPES[dtype]
    gen = torch.Generator().manual_seed(1234)
    i2v = info["i2v"]
    consts = pipeline_constants(I2V_PIPELINE if i2v else T2V_PIPELINE)
    tokenizer = AutoTokenizer.from_pretrained(src / "tokenizer")
    if tokenizer.padding_side != "right":
        raise ExportRefused(f"tokenizer padding_side {tokenizer.padding_side!r}: vgen pads on the right only")
    template = "<|im_start|>system\n{system}<|im_end|>\n<|im_start|>user\n{prompt}<|im_end|>\n<|im_start|>assistant\n"
    checks: dict[str, Any] = {"template": check_template(tokenizer, consts, template)}
    if checks["template"]["mismatches"]:
        raise ExportRefused(f"the tokenizer's chat template renders differently from Qwen's: {checks['template']}")
    checks["tokenizer_2"] = check_byt5(AutoTokenizer.from_pretrained(src / "tokenizer_2"), consts["max_length_2"])
    if checks["tokenizer_2"]["mismatches"]:
        raise ExportRefused(f"tokenizer_2 is not ByT5's byte layout (offset 3, </s> = 1, <pad> = 0): {checks['tokenizer_2']}")
    shutil.copyfile(src / "tokenizer" / "tokenizer.json", out_dir / "tokenizer.json")

    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        vae = AutoencoderKLHunyuanVideo15.from_pretrained(src, subfolder="vae", torch_dtype=torch.float32).eval()
        vcfg = dict(vae.config)
        spatial, temporal = int(vae.spatial_compression_ratio), int(vae.temporal_compression_ratio)
        handoff = Handoff(vae)
        del vae  # the Handoff holds the only reference
        checks.update(export_vae(handoff, out_dir, gen, i2v))
        image_tokens = None
        if i2v:
            checks["image_encoder"] = hy_i2v.export_siglip(src, out_dir, tdtype, gen)
            image_tokens = checks["image_encoder"]["tokens"]
        encoder = Qwen2_5_VLTextModel.from_pretrained(src / "text_encoder", torch_dtype=tdtype).eval()
        checks["text_encoder"] = export_text_encoder(encoder, out_dir / "text_encoder.pt", consts, tdtype, gen)
        text_dim = int(encoder.config.hidden_size)
        del encoder
        byt5 = T5EncoderModel.from_pretrained(src / "text_encoder_2", torch_dtype=tdtype).eval()
        checks["text_encoder_2"] = export_byt5(byt5, out_dir / "text_encoder_2.pt", consts["max_length_2"], tdtype, gen)
        text_2_dim = int(byt5.config.d_model)
        del byt5
        transformer = HunyuanVideo15Transformer3DModel.from_pretrained(src, subfolder="transformer",
                                                                       torch_dtype=tdtype).eval()
        tcfg = dict(transformer.config)
        handoff = Handoff(transformer)
        del transformer  # the Handoff holds the only reference
        checks["transformer"] = export_transformer(handoff, out_dir / "transformer.pt", consts, text_dim, text_2_dim,
                                                   tdtype, gen, image_tokens)
    modules = ["text_encoder", "text_encoder_2", "transformer", "vae_decoder"] + (
        ["vae_encoder", "image_encoder"] if i2v else [])
    for name in modules:
        assert_checks(name, checks[name])
    if i2v:
        hy_i2v.check_image_width(checks, tcfg)

    scheduler = FlowMatchEulerDiscreteScheduler.from_pretrained(src, subfolder="scheduler")
    multiple = spatial * int(tcfg["patch_size"])
    side = {"multiple_of": multiple, "min": multiple, "max": max(multiple, max_side // multiple * multiple)}
    frames_max = max(1, (max_frames - 1) // temporal * temporal + 1)
    defaults = dict((TINY_I2V_DEFAULTS if i2v else TINY_DEFAULTS) if tiny else REAL_DEFAULTS)
    defaults["guidance_scale"] = float(info["guider"].get("guidance_scale", defaults["guidance_scale"]))
    for key in ("height", "width"):
        defaults[key] = max(side["min"], min(defaults[key], side["max"]) // multiple * multiple)
    defaults["frames"] = min(defaults["frames"], frames_max)
    pad_id = int(tokenizer.pad_token_id)
    c = int(vcfg["latent_channels"])
    components = {"tokenizer": mf.component_entry(out_dir, "tokenizer.json", format="hf-tokenizer-json")}
    for name in modules:  # the VAE's halves run in float32 whatever the package's dtype
        components[name] = mf.component_entry(out_dir, f"{name}.pt", format="torchscript", methods=["forward"],
                                              dtype="float32" if name.startswith("vae_") else dtype)
    inputs = "latents [B,C,F,H,W], timestep [B], text [B,L,D], mask [B,L], text_2 [B,256,D2], mask_2 [B,256]"
    if i2v:
        inputs += ", cond [B,C,1,H,W] (first frame's latents x scaling_factor), image [B,N,Di] (image tokens)"
    manifest = {
        "format": mf.FORMAT,
        "format_version": mf.FORMAT_VERSION,
        "family": mf.FAMILY_HUNYUAN15,
        "dtype": dtype,
        "source": {"diffusers_dir": str(src), "pipeline": info["index"].get("_class_name"), "tiny": tiny,
                   "seed": seed if tiny else None, "torch": torch.__version__, "diffusers": diffusers.__version__,
                   "transformers": transformers.__version__},
        "components": components,
        # The generic reader's fields (max_length: the Qwen text after the crop); the family reads "text".
        "tokenizer": {"file": "tokenizer.json", "type": "byte-level-bpe", "vocab_size": len(tokenizer),
                      "max_length": consts["max_length"], "pad_id": pad_id, "eos_id": pad_id, "add_eos": False,
                      "padding": "right"},
        "text_encoder": {"output_dim": text_dim, "output_masked": False, "padding_invariant": False},
        "text": {"template": template, "system_message": consts["system_message"], "crop_start": consts["crop_start"],
                 "max_length": consts["max_length"], "skip_layers": consts["skip_layers"],
                 "byt5": {"max_length": consts["max_length_2"], "output_dim": text_2_dim, "offset": 3, "eos_id": 1,
                          "pad_id": 0, "glyph_pattern": GLYPH_PATTERN}},
        "scheduler": mf.scheduler_section(scheduler),
        "latent": {"channels": c, "temporal_scale": temporal, "spatial_scale": spatial,
                   "latents_mean": [0.0] * c, "latents_std": [1.0] * c, "dtype": "float32"},
        "transformer": {"patch_size": 1, "patch_size_t": 1, "in_channels": int(tcfg["in_channels"]),
                        "out_channels": int(tcfg["out_channels"]), "image_tokens": consts["image_tokens"],
                        "prediction": "flow", "timestep_dtype": "float32", "target_size": int(tcfg["target_size"]),
                        "task": "i2v" if i2v else "t2v", "inputs": inputs},
        "vae": {"scaling_factor": float(vcfg["scaling_factor"])},
        "guidance": {"type": "ClassifierFreeGuidance", "formula": "uncond + g * (cond - uncond)"},
        "resolution": {"height": side, "width": side},
        "frames": {"rule": f"{temporal}k+1", "k_multiple": temporal, "min": 1, "max": frames_max},
        "defaults": defaults,
        "export_checks": checks,
        "inputs": {"image": "required" if i2v else "none", "last_image": "none"},
    }
    if i2v:  # for readers: what image_encoder.pt resizes to and gives (its width checked above)
        ie = checks["image_encoder"]
        manifest["image_encoder"] = {"size": ie["size"], "tokens": ie["tokens"], "dim": ie["dim"]}
    mf.write_manifest(out_dir, manifest)
    return manifest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m vgen_export.hunyuan15",
                                     description="Export diffusers HunyuanVideo 1.5 (text- or image-to-video) to a vgen "
                                                 "model package")
    parser.add_argument("--diffusers", type=Path, help="diffusers checkpoint directory")
    parser.add_argument("--tiny", action="store_true", help="build the tiny random test model first")
    parser.add_argument("--tiny-variant", choices=("t2v", "i2v"), default="t2v",
                        help="with --tiny: the text-to-video or the image-to-video pipeline")
    parser.add_argument("out", type=Path, nargs="?", help="package directory to write")
    parser.add_argument("--out", dest="out_flag", type=Path, help="package directory to write (as the other exporters)")
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="float32")
    parser.add_argument("--seed", type=int, default=0, help="seed for --tiny")
    parser.add_argument("--max-side", type=int, default=1280)
    parser.add_argument("--max-frames", type=int, default=241)
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    args = parser.parse_args(argv)
    out = args.out or args.out_flag
    if out is None:
        parser.error("give the package directory to write (OUT or --out OUT)")
    if args.tiny == (args.diffusers is not None):
        parser.error("give exactly one of --diffusers DIR or --tiny")
    torch.set_num_threads(args.threads)
    common = dict(dtype=args.dtype, max_side=args.max_side, max_frames=args.max_frames)
    try:
        if args.tiny:
            from .tiny_hunyuan15 import write_tiny_hunyuan15

            with tempfile.TemporaryDirectory(prefix="vgen_tiny_hy15_") as tmp:
                src = write_tiny_hunyuan15(Path(tmp) / "diffusers", seed=args.seed, variant=args.tiny_variant)
                manifest = export_hunyuan15(src, out, tiny=True, seed=args.seed, **common)
        else:
            manifest = export_hunyuan15(args.diffusers, out, **common)
    except ExportRefused as e:
        print(f"export_hunyuan15: refused: {e}", file=sys.stderr)
        return 2
    worst = max(c["max_abs_diff"] for n in ("text_encoder", "text_encoder_2", "transformer", "vae_decoder",
                                            "vae_encoder") if n in manifest["export_checks"]
                for c in manifest["export_checks"][n]["checks"])
    print(f"wrote {out} ({manifest['family']}, {manifest['dtype']}); max |jit - eager| = {worst:.3g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
