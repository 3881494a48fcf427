"""A copy of the vgen-shapes package with a bf16 denoiser and / or AOTInductor-compiled components
(issue 30 item 1, issue 31).

    python -m vgen_demo_model.variants [--model models/vgen-shapes] --out DIR
        [--bf16 [--default bfloat16]] [--compile aoti]

--bf16: the eager Denoiser is rebuilt from the package's scripted weights (no training checkpoint
needed, as add_int8.py does), cast to bfloat16, scripted and checked against eager bf16 after
reloading; the copy lists it as components.transformer_bf16 (dtype bfloat16) under
precisions.variants.bfloat16 (a job's --precision bfloat16; --default makes it what jobs that name
none get). The text encoder and the decoder stay float32: vgen casts the text rows and latents to
the transformer's dtype (stages/families/wan).

--compile aoti: each component's forward (and the bf16 denoiser's, with --bf16) is exported with
torch.export and compiled by AOTInductor for this CPU into <name>.cpu.pt2 beside its TorchScript
file (vgen_export/aoti.py; VGEN_AOTI_THREADS compile threads, default 1), listed as the
component's compiled.cpu entry. A .pt2 is specific to the CPU's ISA and the torch version: it is
for a scratch copy, never for models/ (which stays TorchScript).

The other files are hard-linked (or copied), so the source package is never changed.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import torch

from vgen_export import manifest as mf
from vgen_export.common import dtype_tolerance, max_diff, save_module

from .model import Denoiser, PixelDecoder, TextEncoder, build_models
from .train import CONFIG

ROOT = Path(__file__).resolve().parents[2]  # the repository: default paths (models/, build/)
BF16 = "transformer_bf16"


def _float32_only(manifest: dict) -> None:
    """Drops the variants a package already carries (models/vgen-shapes ships its bf16 denoiser):
    the copy is made from the float32 components alone, and --bf16 adds the variant again."""
    for variant in manifest.pop("precisions", {}).get("variants", {}).values():
        for name in variant.values():
            manifest["components"].pop(name, None)
            manifest["export_checks"].pop(name, None)
    for c in manifest["components"].values():
        c.pop("compiled", None)


def link_components(model: Path, out: Path, manifest: dict) -> None:
    """The package's component files into `out` (hard links, else copies), never over the source."""
    if out.resolve() == model.resolve():
        raise ValueError(f"--out {out} is the source package: write the copy elsewhere")
    out.mkdir(parents=True, exist_ok=True)
    for entry in manifest["components"].values():
        target = out / entry["file"]
        target.unlink(missing_ok=True)
        try:
            os.link(model / entry["file"], target)
        except OSError:
            shutil.copyfile(model / entry["file"], target)


def _eager(model: Path, manifest: dict) -> tuple[TextEncoder, Denoiser, PixelDecoder, dict]:
    cfg = dict(CONFIG, text_dim=manifest["transformer"]["text_dim"], max_length=manifest["tokenizer"]["max_length"],
               spatial_scale=manifest["latent"]["spatial_scale"], vocab_size=manifest["tokenizer"]["vocab_size"])
    te, den = build_models(cfg, cfg["vocab_size"])
    te.load_state_dict(torch.jit.load(str(model / "text_encoder.pt")).state_dict())
    den.load_state_dict(torch.jit.load(str(model / "transformer.pt")).state_dict())
    return te.eval(), den.eval(), PixelDecoder(cfg["spatial_scale"]).eval(), cfg


def _denoiser_inputs(cfg: dict, dtype: torch.dtype, gen: torch.Generator, b: int, f: int, h: int, w: int) -> tuple:
    e = torch.randn(b, cfg["max_length"], cfg["text_dim"], generator=gen)
    e[:, 9:] = 0  # padding rows are zero (the text encoder's output is masked)
    x = torch.randn(b, 3, f, h, w, generator=gen)
    return x.to(dtype), torch.rand(b, generator=gen) * 1000, e.to(dtype)  # the timestep stays float32


def add_bf16(out: Path, manifest: dict, den: Denoiser, cfg: dict, default: str | None) -> None:
    bf = Denoiser(cfg["text_dim"], tuple(cfg["chans"]), cfg["cond"], cfg["max_length"])
    bf.load_state_dict(den.state_dict())
    bf = bf.to(torch.bfloat16).eval()
    path = out / "transformer_bf16.pt"
    path.unlink(missing_ok=True)  # never write through a hard link into another package
    gen = torch.Generator().manual_seed(1234)
    with torch.no_grad():
        saved = save_module(torch.jit.script(bf), path)
        loaded = torch.jit.load(str(path))
        checks = []
        for shape in ((2, 16, 32, 32), (1, 9, 24, 40)):
            args = _denoiser_inputs(cfg, torch.bfloat16, gen, *shape)
            ref = bf(*args)
            f32 = den(*(a.float() for a in args))
            checks.append({"shape": list(args[0].shape), "max_abs_diff": max_diff(loaded(*args), ref),
                           "tolerance": 1e-5, "max_abs_diff_vs_float32": max_diff(ref, f32)})
            if not checks[-1]["max_abs_diff"] <= 1e-5:
                raise RuntimeError(f"{BF16}: reloaded TorchScript differs from eager bf16: {checks[-1]}")
    manifest["components"][BF16] = mf.component_entry(out, path.name, format="torchscript", dtype="bfloat16",
                                                      methods=["forward"])
    manifest["precisions"] = {"default": default or manifest["dtype"], "variants": {"bfloat16": {"transformer": BF16}}}
    manifest["export_checks"][BF16] = {"scripted": True, **saved, "checks": checks}


def _aoti_methods(te: TextEncoder, den: Denoiser, dec: PixelDecoder, cfg: dict, bf16: bool) -> dict[str, tuple]:
    """component -> (module, example args, dynamic shapes, checks, dtype): every dim vgen varies
    for this package is dynamic (rows; frames, height and width within the manifest's limits);
    the text rows stay at max_length, as vgen passes them (the package is not padding-invariant)."""
    from torch.export import Dim

    gen = torch.Generator().manual_seed(4321)
    length = cfg["max_length"]
    rows, frames = Dim("rows", min=1, max=64), Dim("frames", min=2, max=64)  # (the denoiser branches on 1 frame)
    # latent sides: multiples of 4 (the package's multiple_of 32 / spatial_scale 8), from 8 to 64
    hk, wk = Dim("hk", min=2, max=16), Dim("wk", min=2, max=16)
    video = {0: rows, 2: frames, 3: 4 * hk, 4: 4 * wk}
    out: dict[str, tuple] = {}
    for name, model, dtype in (("transformer", den, torch.float32), (BF16, None, torch.bfloat16)):
        if name == BF16 and not bf16:
            continue
        if model is None:
            model = Denoiser(cfg["text_dim"], tuple(cfg["chans"]), cfg["cond"], cfg["max_length"])
            model.load_state_dict(den.state_dict())
            model = model.to(dtype).eval()
        example = _denoiser_inputs(cfg, dtype, gen, 2, 16, 32, 32)  # the demo's job: cond and uncond rows
        with torch.no_grad():
            checks = [(args, model(*args)) for args in (_denoiser_inputs(cfg, dtype, gen, 1, 9, 24, 40),
                                                        _denoiser_inputs(cfg, dtype, gen, 4, 8, 16, 16))]
        out[name] = (model, example, (video, {0: rows}, {0: rows}), checks, dtype)
    text = Dim("text", min=1, max=length)

    def tokens(lengths: list[int], n: int) -> tuple:
        ids = torch.randint(3, cfg["vocab_size"], (len(lengths), n), generator=gen)
        mask = torch.zeros(len(lengths), n, dtype=torch.long)
        for r, k in enumerate(lengths):
            mask[r, :k] = 1
        return ids * mask, mask

    with torch.no_grad():
        te_checks = [(args, te(*args)) for args in (tokens([1, 7, length], length), tokens([3], 5))]
        dec_checks = [(args, dec(*args)) for args in ((torch.randn(1, 3, 9, 24, 40, generator=gen) * 1.5,),
                                                      (torch.randn(3, 3, 8, 16, 16, generator=gen),))]
    out["text_encoder"] = (te, tokens([5, 9], length), ({0: rows, 1: text}, {0: rows, 1: text}), te_checks,
                           torch.float32)
    out["vae_decoder"] = (dec, (torch.randn(2, 3, 16, 32, 32, generator=gen),), (video,), dec_checks, torch.float32)
    return out


def compile_components(out: Path, manifest: dict, te, den, dec, cfg: dict, bf16: bool) -> None:
    from vgen_export.aoti import Method, compile_aoti, compiled_entry, env_threads

    for name, (module, example, dynamic, checks, dtype) in _aoti_methods(te, den, dec, cfg, bf16).items():
        file = f"{name}.cpu.pt2"
        (out / file).unlink(missing_ok=True)
        tol = (lambda ref: 1e-4) if dtype == torch.float32 else (lambda ref, d=dtype: dtype_tolerance(d, ref))
        report = compile_aoti({"forward": Method(module, example, dynamic, checks)}, out / file,
                              threads=env_threads(), tolerance=tol)
        for c in report["checks"]:
            if not c["max_abs_diff"] <= c["tolerance"]:
                raise RuntimeError(f"{name} (aoti): compiled differs from eager at {c['shape']}: "
                                   f"{c['max_abs_diff']} > {c['tolerance']}")
        manifest["export_checks"].setdefault(name, {})["aoti"] = report
        manifest["components"][name]["compiled"] = {"cpu": compiled_entry(out, file, report, ["forward"])}
        print(f"{file}: {report['compile_seconds']} s, {report['bytes'] / 1e6:.1f} MB, {report['kernels']}", flush=True)


def make_variants(model: Path, out: Path, bf16: bool, default: str | None, compile: str | None) -> dict[str, Any]:
    if default and not bf16:
        raise ValueError("--default bfloat16 needs --bf16 (the variant it names)")
    manifest = mf.read_manifest(model)
    if manifest["source"].get("trained") != "vgen-shapes":
        raise ValueError(f"{model}: not a vgen-shapes package (source.trained is {manifest['source'].get('trained')!r})")
    te, den, dec, cfg = _eager(model, manifest)
    _float32_only(manifest)
    link_components(model, out, manifest)
    if bf16:
        add_bf16(out, manifest, den, cfg, default)
    if compile == "aoti":
        compile_components(out, manifest, te, den, dec, cfg, bf16)
    mf.write_manifest(out, manifest)
    mf.read_manifest(out)
    return manifest


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", type=Path, default=ROOT / "models" / "vgen-shapes")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--bf16", action="store_true", help="add a bfloat16 denoiser variant")
    ap.add_argument("--default", choices=["bfloat16"], default=None, help="make the bf16 variant the default precision")
    ap.add_argument("--compile", choices=["aoti"], default=None, help="also compile each component with AOTInductor")
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    m = make_variants(a.model, a.out, a.bf16, a.default, a.compile)
    print(json.dumps({k: v for k, v in m["export_checks"].items() if k == BF16 or "aoti" in v}, default=str)[:2000])
    return 0


if __name__ == "__main__":
    sys.exit(main())
