"""Give a copy of the vgen-shapes package an int8 variant of its denoiser (issue 24).

    python -m vgen_demo_model.add_int8 [--model models/vgen-shapes] --out build/vgen-shapes-int8

The eager Denoiser is rebuilt from the package's scripted weights (no training checkpoint
needed), every Linear is dynamically quantized to int8 with the exporters' shared helper
(vgen_export/quantize.py: the UNet has no block list, and its convolutions stay float32), the
result is scripted and checked against eager int8 after reloading, and the copy's manifest lists
it as components.transformer_int8 under precisions.variants.int8 (default: float32). The
other files are hard-linked (or copied), so the source package is never changed.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

from vgen_export import manifest as mf
from vgen_export.common import max_diff, save_module
from vgen_export.quantize import QUANTIZATION, precision_entries, quantize_int8

from .model import build_models
from .train import CONFIG
from .variants import link_components

ROOT = Path(__file__).resolve().parents[2]  # the repository: default paths (models/, build/)


def add_int8(model: Path, out: Path) -> dict:
    manifest = mf.read_manifest(model)
    cfg = dict(CONFIG, text_dim=manifest["transformer"]["text_dim"], max_length=manifest["tokenizer"]["max_length"])
    _, den = build_models(cfg, manifest["tokenizer"]["vocab_size"])
    den.load_state_dict(torch.jit.load(str(model / "transformer.pt")).state_dict())
    den = den.eval()
    quantized, count = quantize_int8(den, "")
    link_components(model, out, manifest)
    path = out / "transformer_int8.pt"
    with torch.no_grad():
        saved = save_module(torch.jit.script(quantized), path)
        loaded = torch.jit.load(str(path))
        gen = torch.Generator().manual_seed(1234)
        checks = []
        for b, f, h, w in ((2, 16, 32, 32), (1, 9, 24, 40)):
            e = torch.randn(b, cfg["max_length"], cfg["text_dim"], generator=gen)
            e[:, 9:] = 0
            args = (torch.randn(b, 3, f, h, w, generator=gen), torch.rand(b, generator=gen) * 1000, e)
            checks.append({"shape": list(args[0].shape), "max_abs_diff": max_diff(loaded(*args), quantized(*args)),
                           "tolerance": 1e-5, "max_abs_diff_vs_float": max_diff(loaded(*args), den(*args))})
            if not checks[-1]["max_abs_diff"] <= 1e-5:
                raise RuntimeError(f"transformer_int8: reloaded TorchScript differs from eager int8: {checks[-1]}")
    manifest["components"]["transformer_int8"] = mf.component_entry(
        out, "transformer_int8.pt", format="torchscript", dtype="float32", methods=["forward"], quantization=QUANTIZATION)
    manifest["precisions"] = precision_entries("int8", ["transformer"], None, "float32")
    manifest["export_checks"]["transformer_int8"] = {"scripted": True, **saved, "quantized_linears": count,
                                                     "checks": checks}
    mf.write_manifest(out, manifest)
    return manifest


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", type=Path, default=ROOT / "models" / "vgen-shapes")
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    m = add_int8(a.model, a.out)
    print(json.dumps(m["export_checks"]["transformer_int8"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
