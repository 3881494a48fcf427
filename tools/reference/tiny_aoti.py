"""Writes a tiny module twice, as TorchScript (tiny.pt) and compiled by AOTInductor for the CPU
(tiny.cpu.pt2, methods forward and shifted, batch rows dynamic), plus the .pt2s the loader must
refuse: one whose metadata says CUDA, one built by "another torch version" (its metadata says
so), and a damaged one; one that lists forward only; one whose "shifted" library does not load
(its metadata intact: found only when that method is first called); and an input with the eager outputs. Reference for the C++ backend test
(tests/stages/model/test_component_backends.cpp).

Usage: python -m vgen_reference.tiny_aoti OUT_DIR (prints JSON)."""
import json
import pathlib
import shutil
import sys
import zipfile

import torch

from vgen_export.aoti import DEVICE_KEY, METHODS_KEY, TORCH_KEY, Method, compile_aoti


class Tiny(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(4, 3)

    def forward(self, x, scale):
        return torch.tanh(self.proj(x)) * scale

    def shifted(self, x, scale):
        return self.forward(x, scale) + scale


class Shifted(torch.nn.Module):
    def __init__(self, tiny):
        super().__init__()
        self.tiny = tiny

    def forward(self, x, scale):
        return self.tiny.shifted(x, scale)


def rewrite_metadata(src: pathlib.Path, dst: pathlib.Path, changes: dict) -> None:
    """A copy of the .pt2 with each model's recorded metadata changed (what another build
    would have written); the compiled code is left as it is."""
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w", zipfile.ZIP_STORED) as zout:
        for item in zin.infolist():
            data = zin.read(item.filename)
            if item.filename.endswith("_metadata.json"):
                meta = json.loads(data)
                meta.update(changes)
                data = json.dumps(meta).encode()
            zout.writestr(item, data)


def break_library(src: pathlib.Path, dst: pathlib.Path, model: str) -> None:
    """A copy of the .pt2 whose `model`'s shared library is junk; its metadata and the other
    models are left as they are."""
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w", zipfile.ZIP_STORED) as zout:
        for item in zin.infolist():
            data = zin.read(item.filename)
            if f"/{model}/" in item.filename and item.filename.endswith(".so"):
                data = b"not an ELF library" * 64
            zout.writestr(item, data)


def main():
    out = pathlib.Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    m = Tiny().eval()
    x = torch.randn(3, 4)
    scale = torch.tensor([1.5])
    torch.jit.trace_module(m, {"forward": (x, scale), "shifted": (x, scale)}).save(str(out / "tiny.pt"))
    rows = torch.export.Dim("rows", min=1, max=64)
    shapes = ({0: rows}, None)
    with torch.no_grad():
        y, shifted = m(x, scale), m.shifted(x, scale)
        report = compile_aoti({"forward": Method(m, (x, scale), shapes, [((x, scale), y)]),
                               "shifted": Method(Shifted(m), (x, scale), shapes, [((x, scale), shifted)])},
                              out / "tiny.cpu.pt2")
    rewrite_metadata(out / "tiny.cpu.pt2", out / "tiny.cuda.pt2", {DEVICE_KEY: "cuda", "AOTI_DEVICE_KEY": "cuda"})
    rewrite_metadata(out / "tiny.cpu.pt2", out / "tiny.old.pt2", {TORCH_KEY: "2.9.1+cu128"})
    # a package that holds forward only (its list says so): "shifted" is the TorchScript file's
    rewrite_metadata(out / "tiny.cpu.pt2", out / "tiny.forward_only.pt2", {METHODS_KEY: "forward"})
    break_library(out / "tiny.cpu.pt2", out / "tiny.noload.pt2", "shifted-model")
    data = (out / "tiny.cpu.pt2").read_bytes()
    (out / "tiny.bad.pt2").write_bytes(data[: len(data) // 2] + b"\0" * (len(data) - len(data) // 2))
    shutil.copyfile(out / "tiny.pt", out / "tiny.copy.pt")
    print(json.dumps({"dir": str(out), "x": x.tolist(), "scale": scale.tolist(), "y": y.tolist(),
                      "shifted": shifted.tolist(), "report": report}))


if __name__ == "__main__":
    main()
