#!/usr/bin/env python3
"""Benchmark models (run with the tooling venv): a diffusers directory AND the vgen package
exported from it, so that both sides of the end-to-end bench load identical weights.

    python bench/python/models.py --preset tiny|medium --out DIR [--seed 0]

writes DIR/diffusers (WanPipeline.save_pretrained + tokenizer/spiece.model) and DIR/pkg
(vgen_export.wan.export_wan of that directory). Skips the work when DIR/pkg/manifest.json
exists and DIR/preset.json matches.

Presets (random weights, seeded; everything built offline):
  tiny    tools/vgen_export/tiny_wan.py exactly (what `python -m vgen_export.wan --tiny` builds)
  medium  the tiny tokenizer, text encoder and VAE with a larger WanTransformer3DModel
          (hidden 256 = 4 heads x 64, 6 layers, FFN 1024): the denoiser dominates a job
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import torch

from vgen_export import tiny_wan
from vgen_export.wan import export_wan

MEDIUM_TRANSFORMER = dict(patch_size=(1, 2, 2), num_attention_heads=4, attention_head_dim=64, in_channels=16,
                          out_channels=16, freq_dim=256, ffn_dim=1024, num_layers=6, cross_attn_norm=True,
                          qk_norm="rms_norm_across_heads", rope_max_seq_len=32)
# issue 24's "larger transformer" (>= 20M parameters, >= 8 layers): hidden 512 = 8 heads x 64, FFN 2048.
LARGE_TRANSFORMER = {**MEDIUM_TRANSFORMER, "num_attention_heads": 8, "ffn_dim": 2048, "num_layers": 8}
TRANSFORMERS = {"medium": MEDIUM_TRANSFORMER, "large": LARGE_TRANSFORMER}


def build(preset: str, seed: int, workdir: Path):
    pipe = tiny_wan.build_tiny_wan_pipeline(seed=seed, workdir=workdir)
    if preset in TRANSFORMERS:
        from diffusers import WanPipeline, WanTransformer3DModel

        torch.manual_seed(seed + 1)
        transformer = WanTransformer3DModel(text_dim=pipe.text_encoder.config.d_model, **TRANSFORMERS[preset]).eval()
        spm = pipe._vgen_spm_file  # noqa: SLF001
        pipe = WanPipeline(**{**pipe.components, "transformer": transformer})
        pipe.set_progress_bar_config(disable=True)
        pipe._vgen_spm_file = spm  # noqa: SLF001
    elif preset != "tiny":
        raise SystemExit(f"unknown preset {preset!r} (tiny | medium | large)")
    return pipe


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", default="tiny")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    key = {"preset": a.preset, "seed": a.seed,
           "transformer": TRANSFORMERS.get(a.preset, "tiny_wan.tiny_transformer"),
           "package": "transformer.compact_context"}  # bump to re-export after a manifest change
    key = json.loads(json.dumps(key))
    marker = a.out / "preset.json"
    if (a.out / "pkg" / "manifest.json").exists() and marker.exists() and json.loads(marker.read_text()) == key:
        print(f"{a.out}: up to date")
        return
    torch.set_num_threads(max(1, torch.get_num_threads()))
    a.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="vgen_bench_spm_") as tmp:
        pipe = build(a.preset, a.seed, Path(tmp))
        tiny_wan.save_tiny_wan(pipe, a.out / "diffusers")
    n = sum(p.numel() for p in pipe.transformer.parameters())
    export_wan(a.out / "diffusers", a.out / "pkg", tiny=a.preset == "tiny", seed=a.seed,
               source={"bench_preset": a.preset})
    marker.write_text(json.dumps(key) + "\n")
    print(f"{a.out}: {a.preset} (transformer parameters: {n:,})")


if __name__ == "__main__":
    main()
