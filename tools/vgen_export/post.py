"""Post packages for vgen's post-stages (stages/post/): a Real-ESRGAN-style RRDBNet upscaler
or a RIFE interpolator (vgen_export.rife) exported from a user's checkpoint.

    python -m vgen_export.post --realesrgan RealESRGAN_x4plus.pth -o models/upscale-x4
    python -m vgen_export.post --rife train_log/flownet.pkl -o models/rife

reads the checkpoint (a ``.pth`` as Real-ESRGAN ships it, ``{"params_ema": state_dict}`` or
``{"params": ...}`` or the bare state dict, or a ``.safetensors``), builds the RRDBNet its
tensors describe (features, blocks, growth channels and scale 4 or 2 are read from the shapes),
traces it to TorchScript and writes ``upscaler.pt`` and ``manifest.json``. The runtime loads
it with ``post.upscale_model`` in its config.

The network here is our own (the new-arch layout of Real-ESRGAN / basicsr: conv_first, body.N
.rdbK.convJ, conv_body, conv_up1, conv_up2, conv_hr, conv_last); tests/python/test_export_post.py
checks it against spandrel's loader of the same checkpoint on random weights. Nothing is
downloaded. RIFE: see vgen_export/rife.py.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

MODULE_NAME = "upscaler.pt"


class ResidualDenseBlock(nn.Module):
    def __init__(self, num_feat: int, num_grow_ch: int):
        super().__init__()
        self.conv1 = nn.Conv2d(num_feat, num_grow_ch, 3, 1, 1)
        self.conv2 = nn.Conv2d(num_feat + num_grow_ch, num_grow_ch, 3, 1, 1)
        self.conv3 = nn.Conv2d(num_feat + 2 * num_grow_ch, num_grow_ch, 3, 1, 1)
        self.conv4 = nn.Conv2d(num_feat + 3 * num_grow_ch, num_grow_ch, 3, 1, 1)
        self.conv5 = nn.Conv2d(num_feat + 4 * num_grow_ch, num_feat, 3, 1, 1)

    def forward(self, x):
        x1 = F.leaky_relu(self.conv1(x), 0.2)
        x2 = F.leaky_relu(self.conv2(torch.cat((x, x1), 1)), 0.2)
        x3 = F.leaky_relu(self.conv3(torch.cat((x, x1, x2), 1)), 0.2)
        x4 = F.leaky_relu(self.conv4(torch.cat((x, x1, x2, x3), 1)), 0.2)
        x5 = self.conv5(torch.cat((x, x1, x2, x3, x4), 1))
        return x5 * 0.2 + x


class RRDB(nn.Module):
    def __init__(self, num_feat: int, num_grow_ch: int):
        super().__init__()
        self.rdb1 = ResidualDenseBlock(num_feat, num_grow_ch)
        self.rdb2 = ResidualDenseBlock(num_feat, num_grow_ch)
        self.rdb3 = ResidualDenseBlock(num_feat, num_grow_ch)

    def forward(self, x):
        return self.rdb3(self.rdb2(self.rdb1(x))) * 0.2 + x


class RRDBNet(nn.Module):
    """[N, 3, H, W] RGB in [0, 1] -> [N, 3, H*scale, W*scale] (scale 4, or 2 with an unshuffled input)."""

    def __init__(self, scale: int = 4, num_feat: int = 64, num_block: int = 23, num_grow_ch: int = 32):
        super().__init__()
        if scale not in (2, 4):
            raise ValueError(f"scale must be 2 or 4 (got {scale})")
        self.scale = scale
        in_ch = 3 * (4 if scale == 2 else 1)
        self.conv_first = nn.Conv2d(in_ch, num_feat, 3, 1, 1)
        self.body = nn.Sequential(*[RRDB(num_feat, num_grow_ch) for _ in range(num_block)])
        self.conv_body = nn.Conv2d(num_feat, num_feat, 3, 1, 1)
        self.conv_up1 = nn.Conv2d(num_feat, num_feat, 3, 1, 1)
        self.conv_up2 = nn.Conv2d(num_feat, num_feat, 3, 1, 1)
        self.conv_hr = nn.Conv2d(num_feat, num_feat, 3, 1, 1)
        self.conv_last = nn.Conv2d(num_feat, 3, 3, 1, 1)

    def forward(self, x):
        feat = F.pixel_unshuffle(x, 2) if self.scale == 2 else x
        feat = self.conv_first(feat)
        feat = feat + self.conv_body(self.body(feat))
        feat = F.leaky_relu(self.conv_up1(F.interpolate(feat, scale_factor=2.0, mode="nearest")), 0.2)
        feat = F.leaky_relu(self.conv_up2(F.interpolate(feat, scale_factor=2.0, mode="nearest")), 0.2)
        return self.conv_last(F.leaky_relu(self.conv_hr(feat), 0.2))


def load_state_dict(path: Path) -> dict[str, torch.Tensor]:
    """The checkpoint's tensors (params_ema preferred, as Real-ESRGAN's own inference does)."""
    if path.suffix == ".safetensors":
        from safetensors.torch import load_file
        state = load_file(str(path))
    else:
        state = torch.load(str(path), map_location="cpu", weights_only=True)
    for key in ("params_ema", "params"):
        if isinstance(state, dict) and key in state:
            state = state[key]
            break
    if not isinstance(state, dict) or "conv_first.weight" not in state:
        raise ValueError(f"{path}: not a Real-ESRGAN RRDBNet checkpoint (no conv_first.weight; old-arch ESRGAN "
                         "files with model.0.weight keys are not supported)")
    return state


def describe(state: dict[str, torch.Tensor]) -> dict[str, int]:
    """RRDBNet's hyper-parameters, read from the tensors' shapes."""
    in_ch = state["conv_first.weight"].shape[1]
    scale = {3: 4, 12: 2}.get(in_ch)
    if scale is None:
        raise ValueError(f"conv_first takes {in_ch} channels: only scale 4 (3) and scale 2 (12) are supported")
    blocks = {int(m.group(1)) for k in state if (m := re.match(r"body\.(\d+)\.", k))}
    return {"scale": scale, "num_feat": int(state["conv_first.weight"].shape[0]), "num_block": len(blocks),
            "num_grow_ch": int(state["body.0.rdb1.conv1.weight"].shape[0])}


def build(state: dict[str, torch.Tensor]) -> RRDBNet:
    net = RRDBNet(**describe(state))
    net.load_state_dict(state, strict=True)
    return net.eval()


def export_realesrgan(checkpoint: Path | str, out_dir: Path | str) -> dict:
    checkpoint, out_dir = Path(checkpoint), Path(out_dir)
    state = load_state_dict(checkpoint)
    hp = describe(state)
    net = build(state)
    out_dir.mkdir(parents=True, exist_ok=True)
    with torch.no_grad():
        # Sizes are traced as operations (pixel_unshuffle, interpolate by factor): any H, W works.
        traced = torch.jit.trace(net, torch.rand(1, 3, 32, 48), check_trace=False)
    traced.save(str(out_dir / MODULE_NAME))
    manifest = {"kind": "post", "variant": "realesrgan", "architecture": "rrdbnet", "scale": hp["scale"],
                "module": MODULE_NAME, "num_feat": hp["num_feat"], "num_block": hp["num_block"],
                "num_grow_ch": hp["num_grow_ch"], "dtype": "float32",
                "source": checkpoint.name, "source_sha256": hashlib.sha256(checkpoint.read_bytes()).hexdigest(),
                "module_sha256": hashlib.sha256((out_dir / MODULE_NAME).read_bytes()).hexdigest()}
    (out_dir / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def write_random_realesrgan(path: Path | str, scale: int = 4, num_feat: int = 16, num_block: int = 2,
                            num_grow_ch: int = 32, seed: int = 0) -> Path:
    """A checkpoint with random weights in Real-ESRGAN's file layout (tests; no download). spandrel
    reads every RRDBNet with 32 growth channels, as all released ones have: keep num_grow_ch 32."""
    torch.manual_seed(seed)
    net = RRDBNet(scale, num_feat, num_block, num_grow_ch)
    with torch.no_grad():  # default init is too small to show errors: spread the weights
        for p in net.parameters():
            p.normal_(0.0, 0.1)
    path = Path(path)
    torch.save({"params_ema": net.state_dict()}, str(path))
    return path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m vgen_export.post", description=__doc__.split("\n\n")[0])
    which = ap.add_mutually_exclusive_group(required=True)
    which.add_argument("--realesrgan", type=Path, help="an RRDBNet checkpoint (.pth or .safetensors)")
    which.add_argument("--rife", type=Path, help="a RIFE v4.25/v4.26 IFNet checkpoint (Practical-RIFE's flownet.pkl)")
    ap.add_argument("-o", "--out", type=Path, required=True, help="the post package folder to write")
    args = ap.parse_args(argv)
    try:
        if args.rife:
            from vgen_export.rife import export_rife
            manifest = export_rife(args.rife, args.out)
        else:
            manifest = export_realesrgan(args.realesrgan, args.out)
    except (ValueError, FileNotFoundError, RuntimeError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(json.dumps(manifest))
    return 0


if __name__ == "__main__":
    sys.exit(main())
