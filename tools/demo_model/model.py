"""vgen-shapes networks: a small text encoder and a pixel-space (2+1)D conv UNet denoiser.

All modules are TorchScript-scriptable (``torch.jit.script``) with the package signatures:

- ``TextEncoder.forward(input_ids int64 [B,L], attention_mask int64 [B,L]) -> [B,L,D]`` (masked)
- ``Denoiser.forward(x [B,3,F,H,W], timestep [B] (= sigma*1000), embeds [B,L,D]) -> flow``
  The network predicts the clean clip x0; the flow is returned as ``(x - x0) / sigma``
  (x_t = (1-s) x0 + s noise, flow = noise - x0), so a flow-matching sampler recovers x0 exactly.
- ``PixelDecoder.forward(z [B,3,F,h,w]) -> [B,3,F,h*s,w*s]``: clamp + per-frame bilinear upsampling.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


class EncoderLayer(nn.Module):
    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads = heads
        self.norm1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.norm2 = nn.LayerNorm(dim)
        self.ff = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))

    def forward(self, x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).reshape(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4).unbind(0)
        att = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(d // self.heads) + bias, dim=-1)
        x = x + self.proj((att @ v).transpose(1, 2).reshape(b, n, d))
        return x + self.ff(self.norm2(x))


class TextEncoder(nn.Module):
    def __init__(self, vocab: int, dim: int = 64, max_len: int = 64, layers: int = 2, heads: int = 4):
        super().__init__()
        self.tok = nn.Embedding(vocab, dim)
        self.pos = nn.Parameter(torch.randn(max_len, dim) * 0.02)
        self.layers = nn.ModuleList([EncoderLayer(dim, heads) for _ in range(layers)])
        self.norm = nn.LayerNorm(dim)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        n = input_ids.shape[1]
        x = self.tok(input_ids) + self.pos[:n].unsqueeze(0)
        m = attention_mask.to(x.dtype)
        bias = ((1.0 - m) * -1e4)[:, None, None, :]
        for layer in self.layers:
            x = layer(x, bias)
        return self.norm(x) * m.unsqueeze(-1)


def timestep_embedding(t: torch.Tensor, dim: int) -> torch.Tensor:
    half = dim // 2
    freqs = torch.exp(-math.log(10000.0) * torch.arange(half, dtype=torch.float32, device=t.device) / half)
    args = t.float()[:, None] * freqs[None]
    return torch.cat([torch.cos(args), torch.sin(args)], dim=-1)


class ResBlock(nn.Module):
    """FiLM-conditioned residual block on [B*F, C, H, W] plus a temporal conv over F."""

    def __init__(self, cin: int, cout: int, cond: int):
        super().__init__()
        self.norm1 = nn.GroupNorm(8, cin)
        self.conv1 = nn.Conv2d(cin, cout, 3, padding=1)
        self.film = nn.Linear(cond, 2 * cout)
        self.norm2 = nn.GroupNorm(8, cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1)
        self.temporal = nn.Conv1d(cout, cout, 3, padding=1)
        self.skip = nn.Conv2d(cin, cout, 1) if cin != cout else nn.Identity()
        nn.init.zeros_(self.temporal.weight)
        nn.init.zeros_(self.temporal.bias)

    def forward(self, x: torch.Tensor, c: torch.Tensor, frames: int) -> torch.Tensor:
        # x [B*F, C, H, W]; c [B, cond]
        h = self.conv1(F.silu(self.norm1(x)))
        scale, shift = self.film(c).repeat_interleave(frames, dim=0)[:, :, None, None].chunk(2, dim=1)
        h = self.norm2(h) * (1.0 + scale) + shift
        h = self.conv2(F.silu(h))
        h = h + self.skip(x)
        bf, ch, hh, ww = h.shape
        t = h.reshape(bf // frames, frames, ch, hh * ww).permute(0, 3, 2, 1).reshape(-1, ch, frames)
        t = self.temporal(F.silu(t))
        t = t.reshape(bf // frames, hh * ww, ch, frames).permute(0, 3, 2, 1).reshape(bf, ch, hh, ww)
        return h + t


class Attention(nn.Module):
    """Full spatio-temporal self-attention at the coarsest level (F*h*w tokens)."""

    def __init__(self, dim: int, heads: int = 4):
        super().__init__()
        self.heads = heads
        self.norm = nn.GroupNorm(8, dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        nn.init.zeros_(self.proj.weight)
        nn.init.zeros_(self.proj.bias)

    def forward(self, x: torch.Tensor, frames: int) -> torch.Tensor:
        bf, ch, hh, ww = x.shape
        b = bf // frames
        tokens = self.norm(x).reshape(b, frames, ch, hh * ww).permute(0, 1, 3, 2).reshape(b, frames * hh * ww, ch)
        n = tokens.shape[1]
        q, k, v = self.qkv(tokens).reshape(b, n, 3, self.heads, ch // self.heads).permute(2, 0, 3, 1, 4).unbind(0)
        att = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(ch // self.heads), dim=-1)
        out = self.proj((att @ v).transpose(1, 2).reshape(b, n, ch))
        out = out.reshape(b, frames, hh * ww, ch).permute(0, 1, 3, 2).reshape(bf, ch, hh, ww)
        return x + out


class Denoiser(nn.Module):
    def __init__(self, text_dim: int = 64, chans: tuple[int, int, int, int] = (16, 32, 64, 128), cond: int = 128,
                 coords: bool = True):
        super().__init__()
        c0, c1, c2, c3 = chans
        # coords: three extra input channels (frame position in the clip, y, x; each in [-1, 1]) so
        # that the network knows where in time and space a voxel is (convs alone barely do).
        self.coords = coords
        self.t_mlp = nn.Sequential(nn.Linear(64, cond), nn.SiLU(), nn.Linear(cond, cond))
        self.txt_mlp = nn.Sequential(nn.Linear(text_dim, cond), nn.SiLU(), nn.Linear(cond, cond))
        self.cond_out = nn.Sequential(nn.SiLU(), nn.Linear(cond, cond))
        self.conv_in = nn.Conv2d(6 if coords else 3, c0, 3, padding=1)
        self.down1 = nn.Conv2d(c0, c1, 3, stride=2, padding=1)
        self.enc1 = ResBlock(c1, c1, cond)
        self.down2 = nn.Conv2d(c1, c2, 3, stride=2, padding=1)
        self.enc2 = ResBlock(c2, c2, cond)
        self.down3 = nn.Conv2d(c2, c3, 3, stride=2, padding=1)
        self.mid1 = ResBlock(c3, c3, cond)
        self.attn = Attention(c3)
        self.mid2 = ResBlock(c3, c3, cond)
        self.dec2 = ResBlock(c3 + c2, c2, cond)
        self.dec1 = ResBlock(c2 + c1, c1, cond)
        self.dec0 = nn.Conv2d(c1 + c0, c0, 3, padding=1)
        self.norm_out = nn.GroupNorm(8, c0)
        self.conv_out = nn.Conv2d(c0, 3, 3, padding=1)

    def predict_x0(self, x: torch.Tensor, timestep: torch.Tensor, embeds: torch.Tensor) -> torch.Tensor:
        b, ch, frames, hh, ww = x.shape
        mask = (embeds.abs().sum(-1, keepdim=True) > 0).to(embeds.dtype)
        pooled = (embeds * mask).sum(1) / mask.sum(1).clamp(min=1.0)
        c = self.cond_out(self.t_mlp(timestep_embedding(timestep, 64)) + self.txt_mlp(pooled))
        inp = x.permute(0, 2, 1, 3, 4).reshape(b * frames, ch, hh, ww)
        if self.coords:
            ft = torch.linspace(-1.0, 1.0, frames, dtype=x.dtype, device=x.device) if frames > 1 else \
                torch.zeros(1, dtype=x.dtype, device=x.device)
            fy = torch.linspace(-1.0, 1.0, hh, dtype=x.dtype, device=x.device)
            fx = torch.linspace(-1.0, 1.0, ww, dtype=x.dtype, device=x.device)
            grid = torch.stack([ft[:, None, None].expand(frames, hh, ww), fy[None, :, None].expand(frames, hh, ww),
                                fx[None, None, :].expand(frames, hh, ww)], dim=1)  # [F, 3, H, W]
            inp = torch.cat([inp, grid.repeat(b, 1, 1, 1)], dim=1)
        h0 = self.conv_in(inp)
        h1 = self.enc1(self.down1(F.silu(h0)), c, frames)
        h2 = self.enc2(self.down2(h1), c, frames)
        h3 = self.mid1(self.down3(h2), c, frames)
        h3 = self.mid2(self.attn(h3, frames), c, frames)
        u = F.interpolate(h3, size=(h2.shape[2], h2.shape[3]), mode="nearest")
        u = self.dec2(torch.cat([u, h2], dim=1), c, frames)
        u = F.interpolate(u, size=(h1.shape[2], h1.shape[3]), mode="nearest")
        u = self.dec1(torch.cat([u, h1], dim=1), c, frames)
        u = F.interpolate(u, size=(hh, ww), mode="nearest")
        u = F.silu(self.dec0(torch.cat([u, h0], dim=1)))
        out = self.conv_out(F.silu(self.norm_out(u)))
        return out.reshape(b, frames, ch, hh, ww).permute(0, 2, 1, 3, 4)

    def forward(self, x: torch.Tensor, timestep: torch.Tensor, embeds: torch.Tensor) -> torch.Tensor:
        sigma = (timestep.float() / 1000.0).clamp(min=1e-3).to(x.dtype)[:, None, None, None, None]
        # c_in keeps the input at unit scale for every sigma (x_t variance ~ (1-s)^2 * var(x0) + s^2).
        c_in = 1.0 / torch.sqrt((1.0 - sigma) ** 2 * 0.5 + sigma ** 2)
        x0 = self.predict_x0(x * c_in, timestep, embeds)
        return (x - x0) / sigma


class PixelDecoder(nn.Module):
    def __init__(self, scale: int = 8):
        super().__init__()
        self.scale = scale

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        b, ch, frames, hh, ww = z.shape
        x = z.clamp(-1.0, 1.0).permute(0, 2, 1, 3, 4).reshape(b * frames, ch, hh, ww)
        x = F.interpolate(x, size=(hh * self.scale, ww * self.scale), mode="bilinear", align_corners=False)
        x = x.clamp(-1.0, 1.0)
        return x.reshape(b, frames, ch, hh * self.scale, ww * self.scale).permute(0, 2, 1, 3, 4)
