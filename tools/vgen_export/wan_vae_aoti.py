"""Wan's VAE decoder compiled ahead of time (``python -m vgen_export.wan --compile aoti``): the
whole-clip decode (``forward``: latents [B,16,F',H',W'] -> video [B,3,4(F'-1)+1,8H',8W'] in
[-1,1]) as an AOTInductor package (vgen_export/aoti.py), batch rows, latent frames, height and
width dynamic.

What torch.export cannot take as diffusers writes it, rewritten here (export only; the eager
model the checks compare against is diffusers' own):
- the per-latent-frame Python loop of the TorchScript decoder (wan_vae.VaeDecoderExport): a
  causal convolution over frames 1..F'-1 in one call, starting from frame 0's caches, gives the
  per-frame loop's values (checked: max diff 0 on the tiny VAE), so forward is two calls of the
  traced chunks, frame 0 then all the others;
- each cached convolution's next cache, ``x[:, :, -2:]`` with a branch on ``shape[2] < 2`` (a
  chunk of one frame prepends the last cache frame): a guard on the frame count, which export
  refuses for a dynamic dim. In the step chunk every incoming cache holds 2 frames
  (common.two_frame_cache), so "the last two frames of cache + x" is the same value without the
  branch (_branchless_caches).
- clips of 1 or 2 latent frames (1-5 video frames): a step of one frame or none. Export either
  refuses the slice (no step for 1 frame: a convolution of no frames) or keeps a guard that
  excludes 2 frames, so the package is compiled for 3 latent frames and more and records that
  range (aoti.INPUT_RANGES_KEY); vgen runs a shorter clip on the TorchScript decoder.
Not compiled: ``decode_unclamped`` (a tiled decode's tiles) and the streaming pair
``decode_first_packed`` / ``decode_step_packed``, whose state vector is parsed with
data-dependent shapes (``.item()``): the component's TorchScript file serves them
(stages/model/model_backend.hpp: a method the .pt2 does not hold).
"""

from __future__ import annotations

import contextlib
import types
from pathlib import Path
from typing import Any

import torch

CACHE_T = 2


class WholeClipDecode(torch.nn.Module):
    """forward(z) = the TorchScript decoder's forward: frame 0 through the first chunk, every
    other frame through one call of the step chunk (wan_vae.VaeFirstChunk / VaeNextChunk)."""

    def __init__(self, first: torch.nn.Module, step: torch.nn.Module):
        super().__init__()
        self.first, self.step = first, step

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        head, caches = self.first(z[:, :, :1])
        tail, _ = self.step(z[:, :, 1:], caches)
        return torch.cat([head, tail], 2).clamp(-1.0, 1.0)


def _next_cache(feat_cache, idx, x):
    prev = feat_cache[idx]
    if isinstance(prev, torch.Tensor):
        return torch.cat([prev[:, :, -CACHE_T:], x], 2)[:, :, -CACHE_T:].clone()
    return x[:, :, -CACHE_T:].clone()


def _cached_conv(conv, x, feat_cache, feat_idx):
    """One causal conv with the cache diffusers keeps per conv (or without one)."""
    if feat_cache is None:
        return conv(x)
    idx = feat_idx[0]
    cache_x = _next_cache(feat_cache, idx, x)
    x = conv(x, feat_cache[idx])
    feat_cache[idx] = cache_x
    feat_idx[0] += 1
    return x


def _residual_forward(self, x, feat_cache=None, feat_idx=[0]):  # noqa: B006 - diffusers' signature
    h = self.conv_shortcut(x)
    x = _cached_conv(self.conv1, self.nonlinearity(self.norm1(x)), feat_cache, feat_idx)
    x = _cached_conv(self.conv2, self.dropout(self.nonlinearity(self.norm2(x))), feat_cache, feat_idx)
    return x + h


def _resample_forward(self, x, feat_cache=None, feat_idx=[0]):  # noqa: B006
    if self.mode != "upsample3d" or feat_cache is None or not isinstance(feat_cache[feat_idx[0]], torch.Tensor):
        return self._vgen_forward(x, feat_cache=feat_cache, feat_idx=feat_idx)
    b, c, t, h, w = x.size()
    x = _cached_conv(self.time_conv, x, feat_cache, feat_idx)
    x = x.reshape(b, 2, c, t, h, w)
    x = torch.stack((x[:, 0], x[:, 1]), 3).reshape(b, c, t * 2, h, w)
    t = x.shape[2]
    x = self.resample(x.permute(0, 2, 1, 3, 4).reshape(b * t, c, h, w))
    return x.view(b, t, x.size(1), x.size(2), x.size(3)).permute(0, 2, 1, 3, 4)


def _decoder_forward(self, x, feat_cache=None, feat_idx=[0], first_chunk=False):  # noqa: B006
    if feat_cache is None:
        return self._vgen_forward(x, feat_cache=feat_cache, feat_idx=feat_idx, first_chunk=first_chunk)
    x = _cached_conv(self.conv_in, x, feat_cache, feat_idx)
    x = self.mid_block(x, feat_cache=feat_cache, feat_idx=feat_idx)
    for up_block in self.up_blocks:
        x = up_block(x, feat_cache=feat_cache, feat_idx=feat_idx, first_chunk=first_chunk)
    return _cached_conv(self.conv_out, self.nonlinearity(self.norm_out(x)), feat_cache, feat_idx)


@contextlib.contextmanager
def _branchless_caches(decoder: torch.nn.Module):
    """While exporting, the decoder's cached convolutions keep their next cache without the
    frame-count branch (the module docstring); restored afterwards."""
    from diffusers.models.autoencoders.autoencoder_kl_wan import WanDecoder3d, WanResample, WanResidualBlock

    patched = []
    for m in decoder.modules():
        fn = {WanResidualBlock: _residual_forward, WanResample: _resample_forward, WanDecoder3d: _decoder_forward}.get(type(m))
        if fn is None:
            continue
        m._vgen_forward = m.forward  # noqa: SLF001 - the original, for the cases the rewrite leaves alone
        m.forward = types.MethodType(fn, m)
        patched.append(m)
    try:
        yield len(patched)
    finally:
        for m in patched:
            del m.forward
            del m._vgen_forward


def compile_vae_decoder_aoti(vae, first: torch.nn.Module, step: torch.nn.Module, path: Path, gen,
                             max_latent_frames: int = 64, max_latent_side: int = 512) -> dict[str, Any]:
    """The whole-clip decode as a one-method .pt2 (vgen_export/aoti.py), checked against
    diffusers' AutoencoderKLWan.decode (clamped, as vgen's frames are) at shapes other than the
    export's. Raises naming the method when it cannot compile."""
    from torch.export import Dim

    from .aoti import Method, compile_aoti, env_threads

    z_dim = vae.config.z_dim
    rows, frames = Dim("rows", min=1, max=64), Dim("frames", min=3, max=max_latent_frames)
    h, w = Dim("h", min=1, max=max_latent_side), Dim("w", min=1, max=max_latent_side)
    # The example: a job-like clip (3 latent frames of 16x16, the bench's 9 frames at 128x128),
    # two rows (with one, export specialises the batch to 1)
    example = (torch.randn(2, z_dim, 3, 16, 16, generator=gen),)
    checks = []
    with torch.no_grad():
        for b, f, hh, ww in ((2, 4, 6, 8), (1, 3, 4, 6), (3, 5, 2, 2)):
            z = torch.randn(b, z_dim, f, hh, ww, generator=gen)
            checks.append(((z,), vae.decode(z, return_dict=False)[0].clamp(-1.0, 1.0)))
    whole = WholeClipDecode(first, step).eval()
    with _branchless_caches(vae.decoder) as rewritten:
        report = compile_aoti({"forward": Method(whole, example, ({0: rows, 2: frames, 3: h, 4: w},), checks)},
                              path, threads=env_threads(), tolerance=lambda ref: 1e-4)
    return {**report, "rewritten_cache_branches": rewritten}
