"""Reference for the C++ RIFE interpolator test (tests/stages/post/test_rife_interpolator.cpp): a
random RIFE v4.25/4.26 checkpoint exported as a post package, a clip of random frames (float32,
and the same clip as 8-bit RGB), and ccvfi's IFNet (the PyPI reference implementation, loading
the same checkpoint strictly) run on each gap at t = k / f for f = 2 and 4 (frames padded to 64
with zeros and cropped back, as Practical-RIFE's inference does): the whole interpolated clip,
as raw float32 [(F - 1) f + 1, 3, H, W] and, for the 8-bit clip, as 8-bit [.., H, W, 3].

Usage: python tools/reference/rife_parity.py OUT_DIR (prints JSON)."""
import json
import pathlib
import sys

import torch
import torch.nn.functional as F
from ccvfi.arch import IFNet

from vgen_export.rife import export_rife, write_random_rife


def interpolate(ref, frames, factor):
    count, _, h, w = frames.shape
    ph, pw = -(-h // 64) * 64, -(-w // 64) * 64
    padded = F.pad(frames, [0, pw - w, 0, ph - h])
    out = [frames[0]]
    with torch.no_grad():
        for g in range(count - 1):
            for k in range(1, factor):
                x = torch.cat([padded[g:g + 1], padded[g + 1:g + 2]], 1)
                t = torch.full((1, 1, ph, pw), k / factor)
                out.append(ref(x, t)[0, :, :h, :w])
            out.append(frames[g + 1])
    return torch.stack(out)


def main():
    out = pathlib.Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    ckpt = write_random_rife(out / "flownet.pkl", seed=7)
    export_rife(ckpt, out / "pkg")
    ref = IFNet().eval()
    ref.load_state_dict({k.removeprefix("module."): v for k, v in torch.load(str(ckpt), weights_only=True).items()}, strict=True)
    torch.manual_seed(2)
    frames = torch.rand(3, 3, 40, 56)  # not a multiple of 64: the module pads and crops
    (out / "input.f32").write_bytes(frames.numpy().tobytes())
    clip = (torch.rand(3, 40, 56, 3) * 255).round().to(torch.uint8)  # [F, H, W, 3] as VideoFrames holds it
    (out / "input.u8").write_bytes(clip.numpy().tobytes())
    cases = []
    for factor in (2, 4):
        y = interpolate(ref, frames, factor)
        (out / f"expected_x{factor}.f32").write_bytes(y.contiguous().numpy().tobytes())
        y8 = interpolate(ref, clip.permute(0, 3, 1, 2).float() / 255.0, factor)
        y8 = (y8.permute(0, 2, 3, 1) * 255.0).round().clamp(0, 255).to(torch.uint8)
        (out / f"expected_x{factor}.u8").write_bytes(y8.contiguous().numpy().tobytes())
        cases.append({"factor": factor, "expected": str(out / f"expected_x{factor}.f32"), "shape": list(y.shape),
                      "expected_u8": str(out / f"expected_x{factor}.u8")})
    print(json.dumps({"package": str(out / "pkg"), "input": str(out / "input.f32"), "input_shape": list(frames.shape),
                      "input_u8": str(out / "input.u8"), "size": [56, 40], "cases": cases}))


if __name__ == "__main__":
    main()
