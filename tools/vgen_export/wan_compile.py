"""A float Wan text-to-video package copied with its transformer compiled ahead of time for a
device type (``python -m vgen_export.wan_compile --diffusers DIR --package PKG --out DIR --device
cuda``): the GPU check's compiled phase (tools/vgen_gpu/compiled.py) and anyone who wants a
package's AOTInductor transformer for a GPU without re-exporting it (``vgen_export.wan
--compile aoti`` compiles for the CPU, every component, at export). The compile itself is
wan_aoti.compile_transformer_aoti, on the device."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import torch

from .aoti import fake_device
from .wan_aoti import compile_transformer_aoti


def add_compiled_transformer(diffusers_dir: Path, package_dir: Path, out_dir: Path | None, device: str = "cpu",
                             methods: list[str] | None = None, export_only: bool = False) -> dict[str, Any]:
    """A copy of a float Wan text-to-video package in `out_dir` (its files hard-linked where the
    file system allows, else copied) whose transformer is also compiled for `device` ("cpu" or
    "cuda"; the compile runs there): transformer.<device>.pt2 and the manifest's
    components.transformer.compiled.<device>, which vgen uses on a device of that type. Compiled
    from the diffusers transformer the package was exported from, in the package's dtype; the
    package itself is not touched. `methods`: compile only these of the transformer's methods
    (default: all; the manifest's compiled entry lists the ones compiled). Returns compile_aoti's report. Raises naming what is wrong for
    a quantized transformer or a package of another family. `export_only`: write nothing (`out_dir`
    unused) and only run torch.export for `device` on fake tensors (aoti.fake_device), which needs
    no such device: returns aoti.check_exports' report, raises naming the method export refuses."""
    from diffusers import WanTransformer3DModel

    from . import manifest as mf
    from .aoti import compiled_entry
    from .common import DTYPES, assert_checks

    diffusers_dir, package_dir = Path(diffusers_dir), Path(package_dir)
    out_dir = None if out_dir is None else Path(out_dir)
    manifest = mf.read_manifest(package_dir, verify_files=False)
    entry = manifest["components"].get("transformer")
    if entry is None or entry.get("quantization") or entry.get("dtype") not in DTYPES:
        raise ValueError(f"{package_dir}: compile: needs a float transformer component (found {entry and entry.get('dtype')}"
                         f"{', quantized' if entry and entry.get('quantization') else ''})")
    if "forward_compact" not in entry.get("methods", []):
        raise ValueError(f"{package_dir}: compile: only Wan text-to-video transformers (forward, forward_compact)")
    dtype = DTYPES[entry["dtype"]]
    if not export_only:
        mf.link_package(package_dir, out_dir)  # its manifest is written below
    with torch.no_grad():
        transformer = WanTransformer3DModel.from_pretrained(diffusers_dir, subfolder="transformer", dtype=dtype).eval()
    file_name = f"transformer.{device}.pt2"
    report = compile_wan_transformer(transformer, (out_dir or package_dir) / file_name, dtype, device, methods,
                                     export_only)
    if export_only:
        return report
    assert_checks(f"transformer (aoti, {device})", report)
    compiled = [m for m in entry["methods"] if not methods or m in methods]
    manifest["components"]["transformer"]["compiled"] = {
        **entry.get("compiled", {}), device: compiled_entry(out_dir, file_name, report, compiled)}
    mf.write_manifest(out_dir, manifest)
    return report


def compile_wan_transformer(transformer, path: Path, dtype, device: str, methods: list[str] | None = None,
                            export_only: bool = False) -> dict[str, Any]:
    """A loaded diffusers WanTransformer3DModel's forward and forward_compact compiled for `device`
    into `path` (wan_aoti.compile_transformer_aoti, with WanPipeline's padded text context as the
    reference for the compact method). `export_only`: nothing is written; the transformer's weights
    become fake tensors on `device` (so it is not usable afterwards) and only torch.export runs."""
    from .wan import TransformerExport, pipeline_max_sequence_length

    gen = torch.Generator().manual_seed(1234)
    with torch.no_grad(), fake_device(device) if export_only else contextlib.nullcontext():
        cfg = transformer.config
        wrapper = TransformerExport(transformer).eval().to(device)
        _, ph, pw = cfg.patch_size
        max_length = pipeline_max_sequence_length()

        def inputs(b, f, h, w):
            x = torch.randn(b, cfg.in_channels, f, h * ph, w * pw, generator=gen).to(dtype)
            t = torch.rand(b, generator=gen) * 1000.0
            return x, t, torch.randn(b, max_length, cfg.text_dim, generator=gen).to(dtype)

        def padded(args, lengths):  # WanPipeline's context: each prompt's rows, then zeros
            ctx = args[2].clone()
            for row, n in enumerate(lengths):
                ctx[row, n:] = 0
            return args[0], args[1], ctx

        return compile_transformer_aoti(wrapper, path, cfg, inputs, padded, max_length, dtype, device, only=methods,
                                        export_only=export_only)


def main(argv: list[str] | None = None) -> int:
    import argparse
    import json

    ap = argparse.ArgumentParser(prog="python -m vgen_export.wan_compile",
                                 description="Copy a float Wan T2V package with its transformer compiled ahead of time "
                                             "(AOTInductor) for a device type (VGEN_AOTI_THREADS: compile threads, default 1)")
    ap.add_argument("--diffusers", type=Path, required=True, help="the diffusers directory the package was exported from")
    ap.add_argument("--package", type=Path, required=True, help="the package (not modified)")
    ap.add_argument("--out", type=Path, help="the new package directory (replaced); not with --export-only")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu", help="compile for (and on) this device type")
    ap.add_argument("--methods", default="", help="comma-separated transformer methods to compile (default: all; "
                                                  "a job calls forward_compact when the package compacts its text, else forward)")
    ap.add_argument("--export-only", action="store_true",
                    help="only check that torch.export accepts the methods for --device, on fake tensors (no such "
                         "device needed, nothing written); prints each method's dynamic ranges")
    args = ap.parse_args(argv)
    if (args.out is None) != args.export_only:
        ap.error("--out is required, except with --export-only (which writes nothing)")
    only = [m for m in args.methods.split(",") if m] or None
    report = add_compiled_transformer(args.diffusers, args.package, args.out, args.device, only, args.export_only)
    if args.export_only:
        print(json.dumps(report))
        return 0
    print(json.dumps({**{k: report[k] for k in ("compile_seconds", "bytes", "device", "torch")},
                      "max_abs_diff": {m: max(c["max_abs_diff"] for c in report["checks"] if c["method"] == m)
                                       for m in {c["method"] for c in report["checks"]}}}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
