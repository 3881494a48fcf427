"""RIFE frame interpolation for vgen's post-stages: the IFNet of Practical-RIFE v4.25/v4.26
(five IFBlocks, a feature Head; the layout PyPI ``ccvfi`` 0.0.3 ships as ``ccvfi.arch.IFNet``)
exported from a user's checkpoint into a post package.

    python -m vgen_export.post --rife train_log/flownet.pkl -o models/rife

reads the checkpoint (``flownet.pkl`` as Practical-RIFE saves it: a state dict whose keys carry
DataParallel's ``module.`` prefix, or the bare state dict, or a ``.safetensors``), loads it
strictly (every tensor of the net present, nothing left over: ccvfi's own loader passes
``strict=False`` after dropping every key without ``module.``, so a bare state dict would load
nothing there and run on random weights without a word), scripts the net in a wrapper and writes
``interpolator.pt`` and ``manifest.json``. The runtime loads it with ``post.interpolate_model``.

The wrapper maps ``(img0, img1, timestep)``, ``[N, 3, H, W]`` float32 RGB in [0, 1] and ``[N]``
times in (0, 1), to the frame at each time ``[N, 3, H, W]``. It pads H and W with zeros on the
bottom and right to a multiple of 64 (IFNet's coarsest block sees the frame at 1/16 and halves
it twice more) and crops the result, as Practical-RIFE's inference does. IFNet v4 takes any
timestep, so a 4x interpolation is one pass at t = 1/4, 1/2, 3/4 (no recursion). The flow
scale (Practical-RIFE's ``--scale``, 0.5 for 4K) is fixed at 1.0 in the export.

The network here is our own (scriptable: the warp grid is made per call instead of ccvfi's
global cache by size, so any H, W works in one TorchScript module); tests/python/
test_export_post.py checks it against ccvfi's IFNet on random weights.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

MODULE_NAME = "interpolator.pt"
MULTIPLE = 64  # H and W are padded to this (IFNet's coarsest level is 1/64 of the frame)
SCALES = (16.0, 8.0, 4.0, 2.0, 1.0)  # each block's downscale at flow scale 1.0


def warp(img: torch.Tensor, flow: torch.Tensor) -> torch.Tensor:
    """``img`` sampled at each pixel plus ``flow`` (pixels), borders repeated (RIFE's backwarp)."""
    n, h, w = flow.shape[0], flow.shape[2], flow.shape[3]
    gx = torch.linspace(-1.0, 1.0, w, device=flow.device).view(1, 1, 1, w).expand(n, 1, h, w)
    gy = torch.linspace(-1.0, 1.0, h, device=flow.device).view(1, 1, h, 1).expand(n, 1, h, w)
    grid = torch.cat([gx, gy], 1)
    f = torch.cat([flow[:, 0:1] / ((img.shape[3] - 1.0) / 2.0), flow[:, 1:2] / ((img.shape[2] - 1.0) / 2.0)], 1)
    g = (grid + f).permute(0, 2, 3, 1).to(img.dtype)
    return F.grid_sample(img, g, mode="bilinear", padding_mode="border", align_corners=True)


def conv(cin: int, cout: int, k: int = 3, stride: int = 1, pad: int = 1) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, k, stride, pad, bias=True), nn.LeakyReLU(0.2, True))


class Head(nn.Module):
    def __init__(self):
        super().__init__()
        self.cnn0 = nn.Conv2d(3, 16, 3, 2, 1)
        self.cnn1 = nn.Conv2d(16, 16, 3, 1, 1)
        self.cnn2 = nn.Conv2d(16, 16, 3, 1, 1)
        self.cnn3 = nn.ConvTranspose2d(16, 16, 4, 2, 1)
        self.relu = nn.LeakyReLU(0.2, True)

    def forward(self, x):
        x = self.relu(self.cnn0(x))
        x = self.relu(self.cnn1(x))
        x = self.relu(self.cnn2(x))
        return self.cnn3(x)


class ResConv(nn.Module):
    def __init__(self, c: int):
        super().__init__()
        self.conv = nn.Conv2d(c, c, 3, 1, 1)
        self.beta = nn.Parameter(torch.ones((1, c, 1, 1)))
        self.relu = nn.LeakyReLU(0.2, True)

    def forward(self, x):
        return self.relu(self.conv(x) * self.beta + x)


class IFBlock(nn.Module):
    def __init__(self, in_planes: int, c: int):
        super().__init__()
        self.conv0 = nn.Sequential(conv(in_planes, c // 2, 3, 2, 1), conv(c // 2, c, 3, 2, 1))
        self.convblock = nn.Sequential(*[ResConv(c) for _ in range(8)])
        self.lastconv = nn.Sequential(nn.ConvTranspose2d(c, 4 * 13, 4, 2, 1), nn.PixelShuffle(2))

    def forward(self, x: torch.Tensor, scale: float):
        """x already holds the flow (when there is one); returns (flow, mask, features)."""
        x = F.interpolate(x, scale_factor=1.0 / scale, mode="bilinear", align_corners=False)
        tmp = self.lastconv(self.convblock(self.conv0(x)))
        tmp = F.interpolate(tmp, scale_factor=scale, mode="bilinear", align_corners=False)
        return tmp[:, :4] * scale, tmp[:, 4:5], tmp[:, 5:]

    def refine(self, x: torch.Tensor, flow: torch.Tensor, scale: float):
        small = F.interpolate(flow, scale_factor=1.0 / scale, mode="bilinear", align_corners=False) * (1.0 / scale)
        x = F.interpolate(x, scale_factor=1.0 / scale, mode="bilinear", align_corners=False)
        tmp = self.lastconv(self.convblock(self.conv0(torch.cat((x, small), 1))))
        tmp = F.interpolate(tmp, scale_factor=scale, mode="bilinear", align_corners=False)
        return tmp[:, :4] * scale, tmp[:, 4:5], tmp[:, 5:]


class IFNet(nn.Module):
    """RIFE v4.25/4.26's IFNet (state-dict keys as Practical-RIFE's, less ``module.``)."""

    def __init__(self):
        super().__init__()
        self.block0 = IFBlock(7 + 32, c=192)
        self.block1 = IFBlock(8 + 4 + 8 + 32, c=128)
        self.block2 = IFBlock(8 + 4 + 8 + 32, c=96)
        self.block3 = IFBlock(8 + 4 + 8 + 32, c=64)
        self.block4 = IFBlock(8 + 4 + 8 + 32, c=32)
        self.encode = Head()

    def step(self, i: int, x: torch.Tensor, flow: torch.Tensor, scale: float):
        # Explicit blocks: TorchScript indexes no ModuleList by a loop variable.
        if i == 1:
            return self.block1.refine(x, flow, scale)
        if i == 2:
            return self.block2.refine(x, flow, scale)
        if i == 3:
            return self.block3.refine(x, flow, scale)
        return self.block4.refine(x, flow, scale)

    def forward(self, img0: torch.Tensor, img1: torch.Tensor, timestep: torch.Tensor):
        """img0, img1 [N, 3, H, W] (H, W multiples of 64), timestep [N, 1, H, W] -> [N, 3, H, W]."""
        f0, f1 = self.encode(img0), self.encode(img1)
        scale = 16.0  # SCALES, halved per block (TorchScript reads no global tuple)
        flow, mask, feat = self.block0(torch.cat((img0, img1, f0, f1, timestep), 1), scale)
        w0, w1 = warp(img0, flow[:, :2]), warp(img1, flow[:, 2:4])
        for i in range(1, 5):
            scale = scale / 2.0
            x = torch.cat((w0, w1, warp(f0, flow[:, :2]), warp(f1, flow[:, 2:4]), timestep, mask, feat), 1)
            fd, mask, feat = self.step(i, x, flow, scale)
            flow = flow + fd
            w0, w1 = warp(img0, flow[:, :2]), warp(img1, flow[:, 2:4])
        m = torch.sigmoid(mask)
        return w0 * m + w1 * (1 - m)


class Interpolator(nn.Module):
    """What the package's module does: pads to 64, runs IFNet at each pair's time, crops."""

    def __init__(self, net: IFNet):
        super().__init__()
        self.net = net

    def forward(self, img0: torch.Tensor, img1: torch.Tensor, timestep: torch.Tensor) -> torch.Tensor:
        n, h, w = img0.shape[0], img0.shape[2], img0.shape[3]
        m = 64  # MULTIPLE
        ph, pw = (h + m - 1) // m * m, (w + m - 1) // m * m
        x0 = F.pad(img0, [0, pw - w, 0, ph - h])
        x1 = F.pad(img1, [0, pw - w, 0, ph - h])
        t = timestep.to(img0.dtype).view(n, 1, 1, 1).expand(n, 1, ph, pw).contiguous()
        return self.net(x0, x1, t)[:, :, :h, :w]


def load_state_dict(path: Path) -> dict[str, torch.Tensor]:
    """The checkpoint's tensors, DataParallel's ``module.`` prefix removed."""
    if path.suffix == ".safetensors":
        from safetensors.torch import load_file
        state = load_file(str(path))
    else:
        state = torch.load(str(path), map_location="cpu", weights_only=True)
    if isinstance(state, dict) and "state_dict" in state and isinstance(state["state_dict"], dict):
        state = state["state_dict"]
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise ValueError(f"{path}: not a RIFE checkpoint (not a state dict of tensors)")
    return {k[len("module."):] if k.startswith("module.") else k: v for k, v in state.items()}


def build(state: dict[str, torch.Tensor], source: str = "checkpoint") -> IFNet:
    net = IFNet()
    want = set(net.state_dict())
    missing, extra = sorted(want - set(state)), sorted(set(state) - want)
    if missing or extra:
        raise ValueError(f"{source}: not a RIFE v4.25/v4.26 IFNet checkpoint ({len(missing)} tensors missing, e.g. "
                         f"{missing[:3]}; {len(extra)} unknown, e.g. {extra[:3]}); other RIFE versions are not supported")
    net.load_state_dict(state, strict=True)  # shapes checked too
    return net.eval()


def export_rife(checkpoint: Path | str, out_dir: Path | str) -> dict:
    checkpoint, out_dir = Path(checkpoint), Path(out_dir)
    net = build(load_state_dict(checkpoint), str(checkpoint))
    out_dir.mkdir(parents=True, exist_ok=True)
    scripted = torch.jit.script(Interpolator(net))  # scripted, not traced: sizes and padding stay dynamic
    scripted.save(str(out_dir / MODULE_NAME))
    manifest = {"kind": "post", "variant": "rife", "architecture": "ifnet", "version": "4.25",
                "module": MODULE_NAME, "inputs": ["img0", "img1", "timestep"],
                "timesteps": "any", "multiple": MULTIPLE, "flow_scale": 1.0, "dtype": "float32",
                "source": checkpoint.name, "source_sha256": hashlib.sha256(checkpoint.read_bytes()).hexdigest(),
                "module_sha256": hashlib.sha256((out_dir / MODULE_NAME).read_bytes()).hexdigest()}
    (out_dir / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def write_random_rife(path: Path | str, seed: int = 0, spread: float = 1.5) -> Path:
    """A checkpoint with random weights built from the reference class (ccvfi's IFNet), saved as
    Practical-RIFE saves flownet.pkl (``module.`` keys); for tests, nothing is downloaded.
    ``spread`` multiplies the default init so that flows are not ~0 (a near-zero flow would make
    every frame the plain average and hide a wrong warp)."""
    from ccvfi.arch import IFNet as ReferenceIFNet

    torch.manual_seed(seed)
    net = ReferenceIFNet()
    with torch.no_grad():
        for name, p in net.named_parameters():
            if not name.endswith("beta"):
                p.mul_(spread)
    path = Path(path)
    torch.save({"module." + k: v for k, v in net.state_dict().items()}, str(path))
    return path
