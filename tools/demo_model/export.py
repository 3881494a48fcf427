"""Export a vgen-shapes training checkpoint into a vgen model package (docs/MODEL_PACKAGE.md).

    python -m vgen_demo_model.export [--ckpt build/vgen-shapes-train/ckpt.pt] --out models/vgen-shapes

The modules are scripted (``torch.jit.script``, no trace shapes baked in), made device-agnostic
with vgen_export's ``make_device_agnostic`` and checked after ``torch.jit.load`` against eager at
several shapes. Family ``wan2.1-t2v`` names the generation algorithm the runtime runs
(tokenize -> encode -> flow-matching CFG loop -> decode); ``source`` says what the model is.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch

from vgen_export import manifest as mf
from vgen_export.common import save_module
from vgen_export.latent_preview import preview_section, wan_loop_decoder
from vgen_export.reference_loop import check_tokenizer, spm_tokenize
from vgen_export.tiny_wan import make_scheduler, tokenizer_from_spm

from . import clips
from .model import PixelDecoder, build_models

ROOT = Path(__file__).resolve().parents[2]  # the repository: default paths (models/, build/)

# Sampler: FlowMatchEuler at guidance 2, flow shift 2 (vgen_demo_model.set_sampler; the model
# card has the comparisons: UniPC at guidance 4 was the first default, shift 3 the training's).
SAMPLER = "flow_euler"
SAMPLER_SHIFT = 2.0
DEFAULTS = {"steps": 16, "guidance_scale": 2.0, "height": 256, "width": 256, "frames": 16, "fps": 8,
            "negative_prompt": ""}
TOL = 1e-5


def _diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().max())


def _checks(eager, path: Path, inputs: list[tuple]) -> list[dict[str, Any]]:
    loaded = torch.jit.load(str(path))
    out = []
    for args in inputs:
        ref = eager(*args)
        out.append({"shape": list(args[0].shape), "max_abs_diff": _diff(loaded(*args), ref), "tolerance": TOL})
        if not out[-1]["max_abs_diff"] <= TOL:
            raise RuntimeError(f"{path.name}: reloaded TorchScript differs from eager at {out[-1]}")
    return out


def export_package(ckpt_path: Path, out_dir: Path, command: str | None = None, weights: str = "ema") -> dict[str, Any]:
    import diffusers

    ck = torch.load(ckpt_path, weights_only=False)
    cfg, vocab = ck["config"], ck["vocab"]
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    spm_file = out_dir / "tokenizer.model"
    spm_file.write_bytes(ck["tokenizer"])
    te, den = build_models(cfg, vocab)
    prefix = "ema_" if weights == "ema" else ""
    te.load_state_dict(ck[prefix + "te"])
    den.load_state_dict(ck[prefix + "den"])
    te, den = te.eval(), den.eval()
    dec = PixelDecoder(cfg["spatial_scale"]).eval()
    gen = torch.Generator().manual_seed(1234)
    length, dim = cfg["max_length"], cfg["text_dim"]
    checks: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="vgen_shapes_tok_") as tmp:
        tokenizer_from_spm(spm_file).save_pretrained(tmp)
        prompts = [sp.prompt for sp in clips.held_out_specs()] + clips.corpus(seed=99, n=50)
        checks["tokenizer"] = check_tokenizer(tmp, spm_file, length, prompts)
    if checks["tokenizer"]["mismatches"]:
        raise RuntimeError(f"SentencePiece disagrees with the transformers tokenizer: {checks['tokenizer']}")
    ids, mask = spm_tokenize(spm_file, [sp.prompt for sp in clips.held_out_specs()], length)
    longest = int(mask.sum(1).max())
    with torch.no_grad():
        path = out_dir / "text_encoder.pt"
        saved = save_module(torch.jit.script(te), path)
        def text_in(lengths, n):
            i = torch.randint(3, vocab, (len(lengths), n), generator=gen)
            m = torch.zeros(len(lengths), n, dtype=torch.long)
            for r, k in enumerate(lengths):
                m[r, :k] = 1
            return i * m, m
        checks["text_encoder"] = {"trace_shape": None, "scripted": True, **saved, "checks": _checks(
            te, path, [text_in([1, 7, length], length), text_in([length], length), text_in([3, 9], 12),
                       (ids[:4], mask[:4])])}
        path = out_dir / "transformer.pt"
        saved = save_module(torch.jit.script(den), path)
        def den_in(b, f, h, w):
            e = torch.randn(b, length, dim, generator=gen)
            e[:, 9:] = 0
            return (torch.randn(b, 3, f, h, w, generator=gen), torch.rand(b, generator=gen) * 1000, e)
        checks["transformer"] = {"trace_shape": None, "scripted": True, **saved, "checks": _checks(
            den, path, [den_in(2, 16, 32, 32), den_in(1, 9, 24, 40), den_in(3, 17, 32, 32)])}
        path = out_dir / "vae_decoder.pt"
        saved = save_module(torch.jit.script(dec), path)
        checks["vae_decoder"] = {"trace_shape": None, "scripted": True, **saved, "checks": _checks(
            dec, path, [(torch.randn(1, 3, 16, 32, 32, generator=gen) * 1.5,),
                        (torch.randn(2, 3, 5, 16, 24, generator=gen),)])}
    scheduler = make_scheduler(SAMPLER, SAMPLER_SHIFT)
    spatial, multiple = cfg["spatial_scale"], cfg["spatial_scale"] * 4  # any size works; keep it coarse
    side = {"multiple_of": multiple, "min": 128, "max": 512}
    n_params = sum(p.numel() for p in den.parameters()) + sum(p.numel() for p in te.parameters())
    manifest = {
        "format": mf.FORMAT, "format_version": mf.FORMAT_VERSION, "family": mf.FAMILY_WAN21_T2V,
        "dtype": "float32",
        "source": {"trained": "vgen-shapes", "tiny": False, "seed": ck["seed"],
                   "architecture": (f"pixel-space flow-matching (x0-parameterised) (2+1)D conv UNet, channels "
                                    f"{cfg['chans']}; per-frame conditioning (token embeddings side by side x "
                                    f"frame-position embedding, + timestep) through FiLM, a coarse 4x4 layout "
                                    f"read-out at 1/4 and full resolution and conditioned coordinate input channels; "
                                    f"spatio-temporal self-attention at 1/8 resolution; text encoder: embedding + "
                                    f"positions + {cfg['text_layers']} transformer layers + LayerNorm (D={dim}); "
                                    f"decoder: clamp + bilinear x{spatial}"),
                   "parameters": n_params, "weights": weights, "train_steps": ck["step"], "train_batch": ck["batch"],
                   "train_seconds": round(ck["train_seconds"], 1),
                   "native_size": [cfg["frames"], cfg["size"], cfg["size"]],
                   "held_out_triples": [list(t) for t in clips.HELD_OUT_TRIPLES],
                   "held_out_color_background": [list(t) for t in clips.HELD_OUT_COLOR_BG],
                   "command": command or f"python -m vgen_demo_model.train --out {out_dir} --seed {ck['seed']}",
                   "torch": torch.__version__, "diffusers": diffusers.__version__},
        "components": {
            "tokenizer": mf.component_entry(out_dir, "tokenizer.model", format="sentencepiece"),
            "text_encoder": mf.component_entry(out_dir, "text_encoder.pt", format="torchscript",
                                               dtype="float32", methods=["forward"]),
            "transformer": mf.component_entry(out_dir, "transformer.pt", format="torchscript",
                                              dtype="float32", methods=["forward"]),
            "vae_decoder": mf.component_entry(out_dir, "vae_decoder.pt", format="torchscript",
                                              dtype="float32", methods=["forward"]),
        },
        "tokenizer": {"file": "tokenizer.model", "type": "sentencepiece", "vocab_size": vocab,
                      "max_length": length, "pad_id": 0, "eos_id": 1, "unk_id": 2, "add_eos": True,
                      "padding": "right", "truncation": "pieces[:max_length-1] + [eos]",
                      "prompt_clean": "html-unescape twice, collapse whitespace runs to one space, strip",
                      "longest_prompt_tokens": longest},
        "text_encoder": {"output_dim": dim, "output_masked": True},
        "scheduler": mf.scheduler_section(scheduler),
        "latent": {"channels": 3, "temporal_scale": 1, "spatial_scale": spatial,
                   "latents_mean": [0.0, 0.0, 0.0], "latents_std": [1.0, 1.0, 1.0], "dtype": "float32",
                   "space": "pixels (RGB in [-1, 1]) at 1/spatial_scale of the output size"},
        "transformer": {"patch_size": [1, 1, 1], "in_channels": 3, "out_channels": 3, "text_dim": dim,
                        "rope_max_seq_len": 0, "prediction": "flow", "timestep_dtype": "float32"},
        "resolution": {"height": dict(side), "width": dict(side), "trained": [256, 256]},
        "frames": {"rule": "any", "k_multiple": 1, "min": 8, "max": 32, "trained": cfg["frames"]},
        "defaults": dict(DEFAULTS),
        "export_checks": checks,
    }
    manifest["preview"] = preview_section(manifest, wan_loop_decoder(dec, manifest["latent"]))  # live previews' factors
    mf.write_manifest(out_dir, manifest)
    mf.read_manifest(out_dir)
    print(f"wrote {out_dir} (step {ck['step']}, {n_params / 1e6:.2f}M parameters)", flush=True)
    return manifest


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ckpt", type=Path, default=ROOT / "build" / "vgen-shapes-train" / "ckpt.pt")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--command", default=None, help="training command recorded in the manifest")
    ap.add_argument("--weights", choices=("ema", "raw"), default="ema", help="EMA or raw training weights")
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    export_package(a.ckpt, a.out, a.command, a.weights)
    return 0


if __name__ == "__main__":
    sys.exit(main())
