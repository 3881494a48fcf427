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


def ramp(n: int, like: torch.Tensor) -> torch.Tensor:
    """torch.linspace(-1, 1, n) (n >= 2) in `like`'s dtype and device, written with arange so that
    torch.export keeps n dynamic (linspace's step count specialises it: the AOTInductor export of
    vgen_demo_model.variants). Values computed in float32 as linspace does: within 1 ulp of it."""
    i = torch.arange(n, dtype=torch.float32, device=like.device)
    return (i * (2.0 / (n - 1)) - 1.0).to(like.dtype)


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
        # x [B*F, C, H, W]; c [B*F, cond] (per frame: text, timestep and the frame's position)
        h = self.conv1(F.silu(self.norm1(x)))
        scale, shift = self.film(c)[:, :, None, None].chunk(2, dim=1)
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
                 text_len: int = 16):
        super().__init__()
        c0, c1, c2, c3 = chans
        # Coordinate input channels (frame position in the clip, y, x; each in [-1, 1]) so that
        # the network knows where in space a voxel is (convs alone barely do).
        self.t_mlp = nn.Sequential(nn.Linear(64, cond), nn.SiLU(), nn.Linear(cond, cond))
        # The prompt enters as its token embeddings side by side (first `text_len` positions),
        # not as their mean: in a mean the one word that differs between two prompts (the
        # direction, say) is diluted by every shared word, and the denoiser learned to ignore it.
        self.text_len = text_len
        self.txt_mlp = nn.Sequential(nn.Linear(text_dim * text_len, cond), nn.SiLU(), nn.Linear(cond, cond))
        # Per-frame conditioning: GroupNorm works per frame (frames are the batch of the 2D convs)
        # and removes any per-frame constant, so a frame-position *input* channel is erased; the
        # frame position enters through FiLM instead. Text and frame embeddings also meet in an
        # elementwise product ("moving right" x "late in the clip" -> "further right"), and a
        # LayerNorm keeps the prompt-dependent part of the vector at the scale of the rest (an
        # MLP stack alone shrank the differences between prompts ~20x at initialisation).
        self.frame_mlp = nn.Sequential(nn.Linear(16, cond), nn.SiLU(), nn.Linear(cond, cond))
        self.cond_norm = nn.LayerNorm(cond)
        self.cond_out = nn.Sequential(nn.Linear(cond, cond), nn.SiLU(), nn.Linear(cond, cond))
        # Conditioned coordinate channels: per frame, K affine functions of (y, x) whose
        # coefficients come from the conditioning (a_k y + b_k x + d_k), so "where should the
        # object be in this frame" (a text x time question) becomes an input feature before
        # any normalisation, e.g. x - x0(direction, frame).
        self.coord_k = 8
        self.coord_film = nn.Linear(cond, 3 * self.coord_k)
        nn.init.normal_(self.coord_film.weight, std=0.05)
        nn.init.zeros_(self.coord_film.bias)
        self.conv_in = nn.Conv2d(6 + self.coord_k, c0, 3, padding=1)
        self.down1 = nn.Conv2d(c0, c1, 3, stride=2, padding=1)
        self.enc1 = ResBlock(c1, c1, cond)
        self.down2 = nn.Conv2d(c1, c2, 3, stride=2, padding=1)
        self.enc2 = ResBlock(c2, c2, cond)
        # Layout path (as a DCGAN generator's first layer): a linear map from each frame's
        # conditioning vector to a coarse 4x4 feature map added at the 1/4-resolution level, so
        # "where the object is in this frame" is one linear read-out of (text, time) away.
        self.layout = nn.Linear(cond, c2 * 16)
        nn.init.zeros_(self.layout.weight)
        nn.init.zeros_(self.layout.bias)
        # ... and the same read-out next to the output layers, so the coarse layout reaches the
        # prediction without passing through the whole UNet first (it is learned much sooner).
        self.layout_out = nn.Linear(cond, c0 * 16)
        nn.init.zeros_(self.layout_out.weight)
        nn.init.zeros_(self.layout_out.bias)
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
        n = embeds.shape[1]
        if n < self.text_len:
            embeds = F.pad(embeds, (0, 0, 0, self.text_len - n))
        flat = embeds[:, : self.text_len].reshape(b, -1)
        ft = ramp(frames, x) if frames > 1 else torch.zeros(1, dtype=x.dtype, device=x.device)
        fe = self.frame_mlp(timestep_embedding((ft + 1.0) * 8.0, 16).to(x.dtype))  # [F, cond]
        tx = self.txt_mlp(flat)[:, None, :]  # [B, 1, cond]
        c = self.cond_norm((tx * fe[None] + tx + fe[None]).reshape(b * frames, -1))
        # (the embedding is float32 whatever the timestep's dtype: cast to the weights' for a bf16 denoiser)
        c = c + self.t_mlp(timestep_embedding(timestep, 64).to(x.dtype)).repeat_interleave(frames, dim=0)
        c = c + self.cond_out(c)  # [B*F, cond]
        inp = x.permute(0, 2, 1, 3, 4).reshape(b * frames, ch, hh, ww)
        fy, fx = ramp(hh, x), ramp(ww, x)
        grid = torch.stack([ft[:, None, None].expand(frames, hh, ww), fy[None, :, None].expand(frames, hh, ww),
                            fx[None, None, :].expand(frames, hh, ww)], dim=1)  # [F, 3, H, W]
        grid = grid.repeat(b, 1, 1, 1)  # [B*F, 3, H, W]
        ab = self.coord_film(c).reshape(b * frames, 3, self.coord_k)  # [B*F, 3, K]
        cc = ab[:, 0, :, None, None] * grid[:, 1:2] + ab[:, 1, :, None, None] * grid[:, 2:3] + ab[:, 2, :, None, None]
        inp = torch.cat([inp, grid, cc], dim=1)
        h0 = self.conv_in(inp)
        h1 = self.enc1(self.down1(F.silu(h0)), c, frames)
        h2 = self.down2(h1)
        lay = self.layout(c).reshape(b * frames, h2.shape[1], 4, 4)
        h2 = self.enc2(h2 + F.interpolate(lay, size=(h2.shape[2], h2.shape[3]), mode="bilinear", align_corners=False),
                       c, frames)
        h3 = self.mid1(self.down3(h2), c, frames)
        h3 = self.mid2(self.attn(h3, frames), c, frames)
        u = F.interpolate(h3, size=(h2.shape[2], h2.shape[3]), mode="nearest")
        u = self.dec2(torch.cat([u, h2], dim=1), c, frames)
        u = F.interpolate(u, size=(h1.shape[2], h1.shape[3]), mode="nearest")
        u = self.dec1(torch.cat([u, h1], dim=1), c, frames)
        u = F.interpolate(u, size=(hh, ww), mode="nearest")
        u = F.silu(self.dec0(torch.cat([u, h0], dim=1)))
        lay = self.layout_out(c).reshape(b * frames, u.shape[1], 4, 4)
        u = u + F.interpolate(lay, size=(hh, ww), mode="bilinear", align_corners=False)
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


def build_models(cfg: dict, vocab: int) -> tuple[TextEncoder, Denoiser]:
    te = TextEncoder(vocab, cfg["text_dim"], max_len=cfg["max_length"], layers=cfg["text_layers"])
    den = Denoiser(cfg["text_dim"], tuple(cfg["chans"]), cfg["cond"], cfg["max_length"])
    return te, den
