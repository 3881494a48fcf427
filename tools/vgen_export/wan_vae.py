"""Wan's VAE decoder as vgen runs it: two traced chunks (the first latent frame, then one frame at a
time with its causal-convolution caches) in one scripted module, checked against diffusers'
``AutoencoderKLWan.decode`` at shapes other than the trace shapes. Part of ``vgen_export.wan``
(``export_wan`` calls ``export_vae_decoder``); the TI2V and I2V exporters reuse it through there.
"""

from __future__ import annotations

import contextlib
import types
from pathlib import Path
from typing import Any, List, Tuple

import torch

from .common import failed_checks, load_saved, max_diff, save_module, trace_quietly, two_frame_cache, unpatchify_video


class VaeFirstChunk(torch.nn.Module):
    """Latent frame 0 -> (video frames [B,3,1,H,W], not clamped, caches)."""

    def __init__(self, vae, used: list[int]):
        super().__init__()
        self.post_quant_conv, self.decoder = vae.post_quant_conv, vae.decoder
        self.num_convs, self.used = vae._cached_conv_counts["decoder"], list(used)  # noqa: SLF001
        self.patch = vae.config.get("patch_size")

    def forward(self, z):
        from diffusers.models.autoencoders.autoencoder_kl_wan import WanResample

        captured: dict[int, torch.Tensor] = {}

        def hook(_module, args, kwargs):
            captured[kwargs["feat_idx"][0]] = args[0]

        hooks = [m.register_forward_pre_hook(hook, with_kwargs=True) for m in self.decoder.modules()
                 if isinstance(m, WanResample) and m.mode == "upsample3d"]
        try:
            feat: list[Any] = [None] * self.num_convs
            out = self.decoder(self.post_quant_conv(z), feat_cache=feat, feat_idx=[0], first_chunk=True)
        finally:
            for h in hooks:
                h.remove()
        caches = []
        for i in self.used:
            cache = feat[i]
            if isinstance(cache, str):  # "Rep": the upsampler's time conv starts from zeros
                cache = torch.zeros_like(captured[i][:, :, :1])
            caches.append(two_frame_cache(cache))
        return unpatchify_video(out, self.patch), caches


class VaeNextChunk(torch.nn.Module):
    """(latent frame i >= 1, caches) -> (4 video frames, not clamped, new caches)."""

    def __init__(self, vae, used: list[int]):
        super().__init__()
        self.post_quant_conv, self.decoder = vae.post_quant_conv, vae.decoder
        self.num_convs, self.used = vae._cached_conv_counts["decoder"], list(used)  # noqa: SLF001
        self.patch = vae.config.get("patch_size")

    def forward(self, z, caches: List[torch.Tensor]):
        feat: list[Any] = [None] * self.num_convs
        for i, cache in zip(self.used, caches):
            feat[i] = cache
        out = self.decoder(self.post_quant_conv(z), feat_cache=feat, feat_idx=[0])
        return unpatchify_video(out, self.patch), [two_frame_cache(feat[i]) for i in self.used]


def rms_norm_by_sum_of_squares(self, x: torch.Tensor) -> torch.Tensor:
    """diffusers' WanRMS_norm.forward with F.normalize written out: x / max(||x||_2, 1e-12) over
    the channel dim. Same value (max diff ~1e-7 in float32); on CPU the sum of squares reduces
    over the (strided) channel dim 15-30x faster than linalg_vector_norm, which was half of the
    tiny test VAE's decode and ~5% of the real Wan 2.1 VAE's (docs/PERFORMANCE.md)."""
    low = x.dtype in (torch.float16, torch.bfloat16)
    xf = x.float() if low else x
    norm = (xf * xf).sum(dim=1 if self.channel_first else -1, keepdim=True).sqrt().clamp_min(1e-12)
    return (xf / norm).to(x.dtype) * self.scale * self.gamma + self.bias


@contextlib.contextmanager
def _fast_rms_norms(module: torch.nn.Module):
    """While tracing, every WanRMS_norm in ``module`` runs ``rms_norm_by_sum_of_squares``;
    the eager model is restored afterwards, so the export checks compare against diffusers."""
    from diffusers.models.autoencoders.autoencoder_kl_wan import WanRMS_norm

    norms = [m for m in module.modules() if isinstance(m, WanRMS_norm)]
    for m in norms:
        m.forward = types.MethodType(rms_norm_by_sum_of_squares, m)
    try:
        yield len(norms)
    finally:
        for m in norms:
            del m.forward


class VaeDecoderExport(torch.nn.Module):
    """Scripted driver: forward(z [B,16,F',H',W']) -> video [B,3,4(F'-1)+1,8H',8W'] in [-1,1].
    ``decode_first`` / ``decode_step`` expose the per-latent-frame chunks for streaming.
    ``decode_unclamped`` is forward before its clamp: a spatially tiled decode
    (stages/exec/tiled_decode.hpp) blends the tiles' overlaps before clamping, as diffusers'
    ``AutoencoderKLWan.tiled_decode`` does, and a clamp per tile would change the blend."""

    def __init__(self, first: torch.nn.Module, step: torch.nn.Module):
        super().__init__()
        self.first, self.step = first, step

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return self.decode_unclamped(z).clamp(-1.0, 1.0)

    @torch.jit.export
    def decode_unclamped(self, z: torch.Tensor) -> torch.Tensor:
        out, caches = self.first(z[:, :, 0:1])
        outs = [out]
        for i in range(1, z.size(2)):
            chunk, caches = self.step(z[:, :, i:i + 1], caches)
            outs.append(chunk)
        return torch.cat(outs, 2)

    @torch.jit.export
    def decode_first(self, z: torch.Tensor) -> Tuple[torch.Tensor, List[torch.Tensor]]:
        out, caches = self.first(z)
        return out.clamp(-1.0, 1.0), caches

    @torch.jit.export
    def decode_step(self, z: torch.Tensor, caches: List[torch.Tensor]) -> Tuple[torch.Tensor, List[torch.Tensor]]:
        out, caches = self.step(z, caches)
        return out.clamp(-1.0, 1.0), caches

    # The streaming methods for vgen's runtime, whose module interface passes tensors, not tuples
    # or lists (stages/exec/chunked_decode.hpp): one float32 vector [5, B, C, T, H, W, video...,
    # state...], where the state (the causal caches with their shapes: [n, (ndim, dims...) x n,
    # data...]) is opaque to the caller, who passes it back to the next step. Each chunk is
    # decode_first / decode_step's output, so the chunks are forward's frames exactly.
    @torch.jit.export
    def decode_first_packed(self, z: torch.Tensor) -> torch.Tensor:
        out, caches = self.first(z)
        return self._pack(out.clamp(-1.0, 1.0), caches)

    @torch.jit.export
    def decode_step_packed(self, z: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
        n = int(state[0].item())
        at = 1
        shapes: List[List[int]] = []
        for _ in range(n):
            ndim = int(state[at].item())
            shapes.append([int(state[at + 1 + k].item()) for k in range(ndim)])
            at += 1 + ndim
        caches: List[torch.Tensor] = []
        for shape in shapes:
            numel = 1
            for d in shape:
                numel *= d
            caches.append(state[at:at + numel].view(shape).to(z.dtype))
            at += numel
        out, caches = self.step(z, caches)
        return self._pack(out.clamp(-1.0, 1.0), caches)

    def _pack(self, video: torch.Tensor, caches: List[torch.Tensor]) -> torch.Tensor:
        head: List[float] = [float(video.dim())] + [float(d) for d in video.shape]
        state_head: List[float] = [float(len(caches))]
        for c in caches:
            state_head.append(float(c.dim()))
            state_head.extend([float(d) for d in c.shape])
        parts = [torch.tensor(head, dtype=torch.float32, device=video.device), video.reshape(-1).float(),
                 torch.tensor(state_head, dtype=torch.float32, device=video.device)]
        parts.extend([c.reshape(-1).float() for c in caches])
        return torch.cat(parts)


def unpack_chunks(module, z: torch.Tensor) -> torch.Tensor:
    """forward(z) as the runtime computes it: decode_first_packed, then decode_step_packed per
    latent frame, each chunk's video read from its packed vector and the state passed on."""
    outs, state = [], None
    for i in range(z.size(2)):
        packed = module.decode_first_packed(z[:, :, :1]) if i == 0 else module.decode_step_packed(z[:, :, i:i + 1], state)
        shape = [int(v) for v in packed[1:6].tolist()]
        numel = shape[0] * shape[1] * shape[2] * shape[3] * shape[4]
        outs.append(packed[6:6 + numel].view(shape))
        state = packed[6 + numel:]
    return torch.cat(outs, 2)


def export_vae_decoder(vae, path: Path, gen, compile: str | None = None) -> dict[str, Any]:
    """The TorchScript decoder at `path`; with compile="aoti" also its whole-clip decode as
    <stem>.cpu.pt2 (wan_vae_aoti.py), reported under "aoti"."""
    num_convs = vae._cached_conv_counts["decoder"]  # noqa: SLF001
    z_dim = vae.config.z_dim
    feat: list[Any] = [None] * num_convs
    vae.decoder(vae.post_quant_conv(torch.zeros(1, z_dim, 1, 2, 2)), feat_cache=feat, feat_idx=[0],
                first_chunk=True)
    used = [i for i, c in enumerate(feat) if c is not None]
    first, step = VaeFirstChunk(vae, used).eval(), VaeNextChunk(vae, used).eval()
    z0 = torch.randn(1, z_dim, 2, 4, 4, generator=gen)
    zs = [torch.randn(b, z_dim, f, h, w, generator=gen) for b, f, h, w in ((2, 3, 3, 4), (1, 1, 4, 4), (1, 2, 4, 4))]
    refs = [vae.decode(z, return_dict=False)[0] for z in zs]

    def export(rewrite: bool) -> dict[str, Any]:
        with _fast_rms_norms(vae.decoder) if rewrite else contextlib.nullcontext(0) as rewritten:
            traced_first = trace_quietly(first, (z0[:, :, :1],))
            _, caches = first(z0[:, :, :1])
            traced_step = trace_quietly(step, (z0[:, :, 1:2], caches))
        saved = save_module(torch.jit.script(VaeDecoderExport(traced_first, traced_step)), path)
        loaded = load_saved(path)
        checks = [{"shape": list(z.shape), "max_abs_diff": max_diff(loaded(z), ref), "tolerance": 1e-5}
                  for z, ref in zip(zs, refs)]
        if not all(torch.equal(unpack_chunks(loaded, z), loaded(z)) for z in zs):
            raise RuntimeError("vae_decoder: the packed streaming chunks differ from forward")
        return {"trace_shape": [1, z_dim, 1, 4, 4], "cache_tensors": len(used), "rms_norms_rewritten": rewritten,
                "packed_chunks_equal_forward": True, **saved, "checks": checks}

    report = export(rewrite=True)
    if failed_checks(report):
        # The rewrite rounds differently; if a model amplifies that past the tolerance, ship
        # diffusers' own norm (slower on CPU, same graph as before the rewrite existed).
        report = {**export(rewrite=False), "rms_norm_rewrite_rejected": report["checks"]}
    if compile == "aoti":
        from .wan_vae_aoti import compile_vae_decoder_aoti

        report["aoti"] = compile_vae_decoder_aoti(vae, first, step, path.with_suffix(".cpu.pt2"), gen)
    return report
