"""The image-to-video parts of a Wan 2.1 I2V package (diffusers' WanImageToVideoPipeline):

- ``image_encoder.pt``: image [B,3,H,W] float32 in [0,1] (the job's image at the video size)
  -> CLIP vision's penultimate hidden states [B,N,D], with CLIPImageProcessor's resize
  (shortest edge), centre crop and normalisation inside the module. For an image whose
  shortest edge already is the processor's size the resize is the identity and the result is
  exactly diffusers'; otherwise torch's antialiased resize stands in for PIL's on uint8.
- ``vae_encoder.pt``: video [B,3,F,H,W] in [-1,1] -> the posterior mean [B,16,F',H',W']
  (``retrieve_latents(..., "argmax")``), run chunk by chunk as AutoencoderKLWan._encode does
  (frame 0, then 4 frames at a time, causal caches carried between chunks).
- ``transformer.pt`` with ``forward(x [B,36,...], t, context [B,512,D], image [B,N,Dimg])``.
  diffusers splits the image rows off the context by its length minus 512, so the text
  context is always the full 512 rows here (no forward_compact).

Every module is reloaded and compared with eager diffusers/transformers at shapes other than
the trace shapes (``export_checks``), as the text-to-video exporter does.

Wan 2.2 I2V-A14B has no image encoder: its two experts are 36-channel transformers without
image cross-attention, exported as text-to-video ones (``forward(x, t, context)`` and
``forward_compact``); the package has ``vae_encoder.pt`` and ``image_conditioning.image_encoder``
false (``add_i2v_sections``).
"""

from __future__ import annotations

import warnings
from typing import Any, List, Tuple

import torch

from .common import (assert_checks, dtype_tolerance, load_saved, max_diff, patchify_video, save_module, trace_quietly,
                     two_frame_cache)


# --------------------------------------------------------------------------- image encoder
class ClipHidden(torch.nn.Module):
    """pixel_values [B,3,S,S] (normalised) -> the penultimate hidden states, as encode_image."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, pixel_values):
        return self.model(pixel_values=pixel_values, output_hidden_states=True).hidden_states[-2]


class ImageEncoderExport(torch.nn.Module):
    """Scripted: CLIPImageProcessor's resize/crop/normalise on a [0,1] tensor, then CLIP."""

    def __init__(self, clip: torch.nn.Module, shortest_edge: int, crop_h: int, crop_w: int, mean, std, mode: str):
        super().__init__()
        self.clip = clip
        self.shortest_edge, self.crop_h, self.crop_w, self.mode = shortest_edge, crop_h, crop_w, mode
        self.register_buffer("mean", torch.tensor(mean, dtype=torch.float32).view(1, 3, 1, 1))
        self.register_buffer("std", torch.tensor(std, dtype=torch.float32).view(1, 3, 1, 1))

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        h, w = image.size(2), image.size(3)
        s = self.shortest_edge
        nh, nw = (s, int(s * w / h)) if h <= w else (int(s * h / w), s)  # transformers' shortest_edge rule
        x = image.float()
        if nh != h or nw != w:
            x = torch.nn.functional.interpolate(x, size=[nh, nw], mode=self.mode, align_corners=False, antialias=True)
            x = x.clamp(0.0, 1.0)
        top, left = (nh - self.crop_h) // 2, (nw - self.crop_w) // 2
        x = x[:, :, top:top + self.crop_h, left:left + self.crop_w]
        return self.clip((x - self.mean) / self.std)


def export_image_encoder(model, processor, path, gen) -> dict[str, Any]:
    import numpy as np
    import PIL.Image

    size = processor.size.get("shortest_edge")
    crop = processor.crop_size
    modes = {2: "bilinear", 3: "bicubic"}
    if size is None or not processor.do_center_crop or int(processor.resample) not in modes:
        raise RuntimeError(f"image_processor: only shortest_edge resize, centre crop and bilinear/bicubic "
                           f"are exported (got size={processor.size}, resample={processor.resample})")
    clip = ClipHidden(model).eval()
    traced = trace_quietly(clip, (torch.randn(1, 3, crop["height"], crop["width"], generator=gen),))
    driver = ImageEncoderExport(traced, int(size), int(crop["height"]), int(crop["width"]),
                                processor.image_mean, processor.image_std, modes[int(processor.resample)])
    saved = save_module(torch.jit.script(driver), path)
    loaded = load_saved(path)
    checks = []
    # Images whose shortest edge is the processor's size: exact. A larger one: PIL's uint8
    # resize against torch's antialiased float resize (recorded, looser).
    for h, w, tol in ((size, size + 16, 1e-5), (size + 8, size, 1e-5), (2 * size, 3 * size, 5e-2)):
        pixels = (torch.rand(h, w, 3, generator=gen) * 255).to(torch.uint8)
        ref_in = processor(images=PIL.Image.fromarray(pixels.numpy()), return_tensors="pt")["pixel_values"]
        ref = clip(ref_in)
        got = loaded(pixels.permute(2, 0, 1).unsqueeze(0).float() / 255.0)
        checks.append({"shape": [1, 3, h, w], "max_abs_diff": max_diff(got, ref), "tolerance": tol})
    del np
    return {"trace_shape": [1, 3, crop["height"], crop["width"]], **saved, "checks": checks,
            "tokens": int(ref.shape[1]), "dim": int(ref.shape[2])}


# --------------------------------------------------------------------------- VAE encoder
class VaeEncodeFirst(torch.nn.Module):
    """Frame 0 [B,3,1,H,W] -> (posterior mean [B,z,1,H/8,W/8], caches)."""

    def __init__(self, vae, used: list[int]):
        super().__init__()
        self.encoder, self.quant_conv = vae.encoder, vae.quant_conv
        self.num_convs, self.used, self.z_dim = vae._cached_conv_counts["encoder"], list(used), vae.config.z_dim  # noqa: SLF001
        self.patch = vae.config.get("patch_size")

    def forward(self, x):
        feat: list[Any] = [None] * self.num_convs
        x = patchify_video(x, self.patch)
        out = self.quant_conv(self.encoder(x, feat_cache=feat, feat_idx=[0]))
        return out[:, :self.z_dim], [two_frame_cache(feat[i]) for i in self.used]


class VaeEncodeNext(torch.nn.Module):
    """(4 frames [B,3,4,H,W], caches) -> (posterior mean [B,z,1,...], new caches)."""

    def __init__(self, vae, used: list[int]):
        super().__init__()
        self.encoder, self.quant_conv = vae.encoder, vae.quant_conv
        self.num_convs, self.used, self.z_dim = vae._cached_conv_counts["encoder"], list(used), vae.config.z_dim  # noqa: SLF001
        self.patch = vae.config.get("patch_size")

    def forward(self, x, caches: List[torch.Tensor]):
        feat: list[Any] = [None] * self.num_convs
        for i, cache in zip(self.used, caches):
            feat[i] = cache
        x = patchify_video(x, self.patch)
        out = self.quant_conv(self.encoder(x, feat_cache=feat, feat_idx=[0]))
        return out[:, :self.z_dim], [two_frame_cache(feat[i]) for i in self.used]


class VaeEncoderExport(torch.nn.Module):
    """Scripted driver: forward(video [B,3,4k+1,H,W]) -> posterior mean [B,z,k+1,H/8,W/8]."""

    def __init__(self, first: torch.nn.Module, step: torch.nn.Module):
        super().__init__()
        self.first, self.step = first, step

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, caches = self.first(x[:, :, 0:1])
        outs = [out]
        for i in range(1, 1 + (x.size(2) - 1) // 4):
            chunk, caches = self.step(x[:, :, 1 + 4 * (i - 1):1 + 4 * i], caches)
            outs.append(chunk)
        return torch.cat(outs, 2)

    @torch.jit.export
    def encode_first(self, x: torch.Tensor) -> Tuple[torch.Tensor, List[torch.Tensor]]:
        return self.first(x)


def export_vae_encoder(vae, path, gen) -> dict[str, Any]:
    """The Wan 2.1 VAE's encoder, or the Wan 2.2 one (patchified input: sizes in multiples of
    8 * patch_size pixels)."""
    num_convs = vae._cached_conv_counts["encoder"]  # noqa: SLF001
    patch = vae.config.get("patch_size") or 1
    feat: list[Any] = [None] * num_convs
    vae.encoder(patchify_video(torch.zeros(1, 3, 1, 16 * patch, 16 * patch), vae.config.get("patch_size")),
                feat_cache=feat, feat_idx=[0])
    used = [i for i, c in enumerate(feat) if c is not None]
    first, step = VaeEncodeFirst(vae, used).eval(), VaeEncodeNext(vae, used).eval()
    u = 8 * patch  # one latent pixel
    x0 = torch.rand(1, 3, 5, 4 * u, 4 * u, generator=gen) * 2 - 1
    traced_first = trace_quietly(first, (x0[:, :, :1],))
    _, caches = first(x0[:, :, :1])
    traced_step = trace_quietly(step, (x0[:, :, 1:5], caches))
    saved = save_module(torch.jit.script(VaeEncoderExport(traced_first, traced_step)), path)
    loaded = load_saved(path)
    checks = []
    for b, f, h, w in ((1, 9, 4 * u, 6 * u), (2, 1, 2 * u, 2 * u), (1, 5, 3 * u, 5 * u)):
        x = torch.rand(b, 3, f, h, w, generator=gen) * 2 - 1
        x[:, :, 1:] = 0 if b == 1 and f == 9 else x[:, :, 1:]  # the I2V condition: an image, then zeros
        ref = vae.encode(x).latent_dist.mode()
        checks.append({"shape": [b, 3, f, h, w], "max_abs_diff": max_diff(loaded(x), ref), "tolerance": 1e-5})
    return {"trace_shape": list(x0.shape), "cache_tensors": len(used), **saved, "checks": checks}


# --------------------------------------------------------------------------- transformer
class TransformerI2VExport(torch.nn.Module):
    """forward(x [B,36,F',H',W'], t float32 [B], context [B,512,D], image [B,N,Dimg]) -> flow."""

    def __init__(self, transformer, tokens_per_image: int | None = None):
        super().__init__()
        self.transformer = transformer
        self.tokens_per_image = tokens_per_image

    def forward(self, hidden_states, timestep, encoder_hidden_states, encoder_hidden_states_image):
        if self.tokens_per_image:  # FLF2V: a job's [first; last] tokens [B,2N,D] as diffusers stacks them, [2B,N,D]
            encoder_hidden_states_image = encoder_hidden_states_image.reshape(
                -1, self.tokens_per_image, encoder_hidden_states_image.size(2))
        return self.transformer(hidden_states=hidden_states, timestep=timestep,
                                encoder_hidden_states=encoder_hidden_states,
                                encoder_hidden_states_image=encoder_hidden_states_image, return_dict=False)[0]


def export_transformer_i2v(transformer, path, max_length: int, image_tokens: int, dtype, gen) -> dict[str, Any]:
    """image_tokens: per image; a first-last-frame transformer (pos_embed_seq_len) takes twice as many."""
    cfg = transformer.config
    first_last = cfg.get("pos_embed_seq_len") is not None
    wrapper = TransformerI2VExport(transformer, image_tokens if first_last else None).eval()
    image_tokens = 2 * image_tokens if first_last else image_tokens
    _, ph, pw = cfg.patch_size

    def inputs(b, f, h, w):
        x = torch.randn(b, cfg.in_channels, f, h * ph, w * pw, generator=gen).to(dtype)
        t = torch.rand(b, generator=gen) * 1000.0
        ctx = torch.randn(b, max_length, cfg.text_dim, generator=gen).to(dtype)
        img = torch.randn(b, image_tokens, cfg.image_dim, generator=gen).to(dtype)
        return x, t, ctx, img

    trace_shape = (2, 2, 2, 2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traced = torch.jit.trace(wrapper, inputs(*trace_shape), check_trace=False)
    saved = save_module(traced, path)
    loaded = load_saved(path)
    checks = []
    for shape in ((1, 3, 3, 4), (3, 1, 1, 1), trace_shape):
        args = inputs(*shape)
        ref = wrapper(*args)
        checks.append({"shape": list(args[0].shape), "max_abs_diff": max_diff(loaded(*args), ref),
                       "tolerance": dtype_tolerance(dtype, ref)})
    b, f, h, w = trace_shape
    return {"trace_shape": [b, cfg.in_channels, f, h * ph, w * pw], **saved, "checks": checks,
            "compact_context": {"checks": [], "usable": False,
                                "why": "diffusers splits image rows off the context at length - 512"}}


def export_i2v_parts(diffusers_dir, out_dir, max_length: int, tdtype, gen) -> dict[str, Any]:
    """Writes image_encoder.pt, vae_encoder.pt and the I2V transformer.pt; returns their checks
    and the manifest's ``image_conditioning`` section."""
    from diffusers import AutoencoderKLWan, WanTransformer3DModel
    from transformers import AutoImageProcessor, CLIPVisionModel

    checks: dict[str, Any] = {}
    with torch.no_grad():
        model = CLIPVisionModel.from_pretrained(diffusers_dir / "image_encoder", dtype=torch.float32).eval()
        processor = AutoImageProcessor.from_pretrained(diffusers_dir / "image_processor")
        checks["image_encoder"] = export_image_encoder(model, processor, out_dir / "image_encoder.pt", gen)
        del model
        vae = AutoencoderKLWan.from_pretrained(diffusers_dir, subfolder="vae", dtype=torch.float32).eval()
        checks["vae_encoder"] = export_vae_encoder(vae, out_dir / "vae_encoder.pt", gen)
        del vae
        transformer = WanTransformer3DModel.from_pretrained(diffusers_dir, subfolder="transformer", dtype=tdtype).eval()
        tcfg = dict(transformer.config)
        checks["transformer"] = export_transformer_i2v(transformer, out_dir / "transformer.pt", max_length,
                                                       checks["image_encoder"]["tokens"], tdtype, gen)
        del transformer
    for name in ("image_encoder", "vae_encoder", "transformer"):
        assert_checks(name, checks[name])
    section = {"image_tokens": checks["image_encoder"]["tokens"], "image_dim": int(tcfg["image_dim"]),
               "mask_channels": int(tcfg["in_channels"]) - 2 * int(tcfg["out_channels"]),
               "last_image": tcfg.get("pos_embed_seq_len") is not None,
               "image_encoder_input": "float32 [B,3,H,W] in [0,1]",
               "vae_encoder_input": "float32 [B,3,F,H,W] in [-1,1]; output: the posterior mean"}
    return {"checks": checks, "image_conditioning": section, "transformer_config": tcfg}


def a14b_image_conditioning(tcfg: dict[str, Any]) -> dict[str, Any]:
    """The ``image_conditioning`` section of a two-expert image-to-video package (no image tokens)."""
    return {"image_encoder": False, "mask_channels": int(tcfg["in_channels"]) - 2 * int(tcfg["out_channels"]),
            "last_image": False, "vae_encoder_input": "float32 [B,3,F,H,W] in [-1,1]; output: the posterior mean"}


def add_i2v_sections(manifest: dict[str, Any], out_dir, image_conditioning: dict[str, Any], last_image: bool) -> None:
    """The manifest entries of an image-to-video package (Wan 2.1 I2V / FLF2V, Wan 2.2 A14B I2V)
    besides a text-to-video one's; what a job must give in ``inputs`` (FLF2V's family requires
    last_image too: a manifest cannot say so)."""
    from pathlib import Path

    from . import manifest as mf

    encoder = image_conditioning.setdefault("image_encoder", True)
    if encoder:
        manifest["components"]["image_encoder"] = mf.component_entry(
            Path(out_dir), "image_encoder.pt", format="torchscript", dtype="float32", methods=["forward"])
    manifest["components"]["vae_encoder"] = mf.component_entry(
        Path(out_dir), "vae_encoder.pt", format="torchscript", dtype="float32", methods=["forward", "encode_first"])
    manifest["image_conditioning"] = image_conditioning
    manifest["inputs"] = {"image": "required", "last_image": "optional" if last_image else "none"}


__all__ = ["a14b_image_conditioning", "add_i2v_sections", "export_i2v_parts", "export_vae_encoder"]
