"""Writes a tiny traced TorchScript module (two methods, forward and shifted) plus an input and
the eager outputs, as reference for the C++ model-backend test.

Usage: python -m vgen_reference.tiny_module OUT_DIR (prints JSON)."""
import json
import pathlib
import sys

import torch


class Tiny(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(4, 3)

    def forward(self, x, scale):
        return torch.tanh(self.proj(x)) * scale

    def shifted(self, x, scale):
        return self.forward(x, scale) + scale


def main():
    out = pathlib.Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    m = Tiny().eval()
    x = torch.randn(2, 4)
    scale = torch.tensor([1.5])
    traced = torch.jit.trace_module(m, {"forward": (x, scale), "shifted": (x, scale)})
    traced.save(str(out / "tiny.pt"))
    with torch.no_grad():
        y, shifted = m(x, scale), m.shifted(x, scale)
    print(json.dumps({"module": str(out / "tiny.pt"), "x": x.tolist(), "scale": scale.tolist(), "y": y.tolist(),
                      "shifted": shifted.tolist()}))


if __name__ == "__main__":
    main()
