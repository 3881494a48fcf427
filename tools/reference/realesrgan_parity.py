"""Reference for the C++ RRDBNet upscaler test (tests/stages/post/test_rrdb_upscaler.cpp): random
Real-ESRGAN checkpoints (scale 4 and 2) exported as post packages, a random input, and spandrel's
output for it (the PyPI reference implementation, loading the same checkpoint), as raw float32.

Usage: python tools/reference/realesrgan_parity.py OUT_DIR (prints JSON)."""
import json
import pathlib
import sys

import torch
from spandrel import ModelLoader

from vgen_export.post import export_realesrgan, write_random_realesrgan


def main():
    out = pathlib.Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(1)
    x = torch.rand(1, 3, 48, 64)
    (out / "input.f32").write_bytes(x.numpy().tobytes())
    cases = []
    for scale in (4, 2):
        ckpt = write_random_realesrgan(out / f"x{scale}.pth", scale=scale, seed=scale)
        export_realesrgan(ckpt, out / f"pkg_x{scale}")
        model = ModelLoader().load_from_file(str(ckpt)).model.eval()
        with torch.no_grad():
            y = model(x)
        (out / f"expected_x{scale}.f32").write_bytes(y.contiguous().numpy().tobytes())
        cases.append({"scale": scale, "package": str(out / f"pkg_x{scale}"), "expected": str(out / f"expected_x{scale}.f32"),
                      "shape": list(y.shape)})
    print(json.dumps({"input": str(out / "input.f32"), "input_shape": list(x.shape), "cases": cases}))


if __name__ == "__main__":
    main()
