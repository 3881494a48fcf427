"""Wan's transformer compiled ahead of time (``python -m vgen_export.wan --compile aoti``): its
forward and forward_compact as one AOTInductor package (vgen_export/aoti.py), every dimension
vgen varies declared dynamic. Wan 2.1's RoPE (diffusers >= 0.35) is real cos/sin arithmetic, so
no complex-number op reaches Inductor; the key-bias processor of wan.TransformerExport is plain
tensor code and exports as is."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from .common import dtype_tolerance
from .reference_loop import compact_context as reference_compact_context


class CompactMethod(torch.nn.Module):
    """wan.TransformerExport.forward_compact as a module's forward (torch.export exports forward)."""

    def __init__(self, wrapper: torch.nn.Module):
        super().__init__()
        self.wrapper = wrapper

    def forward(self, hidden_states, timestep, encoder_hidden_states, context_bias):
        return self.wrapper.forward_compact(hidden_states, timestep, encoder_hidden_states, context_bias)


def compile_transformer_aoti(wrapper: torch.nn.Module, path: Path, cfg, inputs, padded, max_length: int,
                             dtype, device: str = "cpu") -> dict[str, Any]:
    """The transformer's forward and forward_compact as one AOTInductor package (vgen_export/aoti.py)
    with every dimension vgen varies dynamic: batch rows, latent frames, height and width (in
    patches) and text rows; checked against eager at shapes other than the export's. `device`:
    the device type it is compiled for, where `wrapper` must already be; `inputs` may make its
    tensors on the CPU (they are moved)."""
    from torch.export import Dim

    from .aoti import Method, compile_aoti, env_threads

    def on_device(*tensors):
        return tuple(t.to(device) for t in tensors)

    def compact_context(embeds, lengths):
        return on_device(*reference_compact_context(embeds, lengths))

    cpu_inputs = inputs

    def inputs(*shape):  # noqa: F811 - the caller's, on the device
        return on_device(*cpu_inputs(*shape))

    _, ph, pw = cfg.patch_size
    rope = int(cfg.rope_max_seq_len)  # RoPE's table bounds the patches along each axis
    rows, frames = Dim("rows", min=1, max=256), Dim("frames", min=1, max=rope)
    h, w = Dim("h", min=1, max=rope), Dim("w", min=1, max=rope)
    text = Dim("text", min=1, max=max_length + 1)
    video = {0: rows, 2: frames, 3: h * ph if ph > 1 else h, 4: w * pw if pw > 1 else w}
    # The example is the size Inductor tunes for (oneDNN prepacks the frozen Linear weights for its
    # rows): a job-like 3 latent frames of 8x8 patches, not a minimal one (measured, medium bench
    # transformer at 2x16x3x16x16: 0.18 s per call when exported at 2x16x2x6x4, 0.06 s at this size).
    example = inputs(2, 3, min(8, rope), min(8, rope))
    full_checks = []
    for shape in ((1, 3, 2, 4), (3, 1, 1, 1)):
        args = inputs(*shape)
        full_checks.append((args, wrapper(*args)))
    compact_checks = []
    for shape, lengths in (((2, 2, 3, 3), [1, 9]), ((1, 1, 2, 2), [min(30, max_length)])):
        args = padded(inputs(*shape), lengths)
        ctx, bias = compact_context(args[2], lengths)
        compact_checks.append(((args[0], args[1], ctx, bias), wrapper(*args)))
    ex_ctx, ex_bias = compact_context(padded(example, [3, 5])[2], [3, 5])
    methods = {
        "forward": Method(wrapper, example, ({**video}, {0: rows}, {0: rows, 1: text}), full_checks),
        "forward_compact": Method(CompactMethod(wrapper), (*example[:2], ex_ctx, ex_bias),
                                  ({**video}, {0: rows}, {0: rows, 1: text}, {0: rows, 1: text}), compact_checks),
    }
    # float32's tolerance in every dtype for the compact checks, as check_compact_context does
    return compile_aoti(methods, path, device=device, threads=env_threads(),
                        tolerance=lambda ref: 1e-4 if dtype == torch.float32 else dtype_tolerance(dtype, ref))


def add_compiled_transformer(diffusers_dir: Path, package_dir: Path, out_dir: Path, device: str = "cpu") -> dict[str, Any]:
    """A copy of a float Wan text-to-video package in `out_dir` (its files hard-linked where the
    file system allows, else copied) whose transformer is also compiled for `device` ("cpu" or
    "cuda"; the compile runs there): transformer.<device>.pt2 and the manifest's
    components.transformer.compiled.<device>, which vgen uses on a device of that type. Compiled
    from the diffusers transformer the package was exported from, in the package's dtype; the
    package itself is not touched. Returns compile_aoti's report. Raises naming what is wrong for
    a quantized transformer or a package of another family."""
    import os
    import shutil

    from diffusers import WanTransformer3DModel

    from . import manifest as mf
    from .aoti import compiled_entry
    from .common import DTYPES, assert_checks
    from .wan import TransformerExport, pipeline_max_sequence_length

    diffusers_dir, package_dir, out_dir = Path(diffusers_dir), Path(package_dir), Path(out_dir)
    manifest = mf.read_manifest(package_dir, verify_files=False)
    entry = manifest["components"].get("transformer")
    if entry is None or entry.get("quantization") or entry.get("dtype") not in DTYPES:
        raise ValueError(f"{package_dir}: compile: needs a float transformer component (found {entry and entry.get('dtype')}"
                         f"{', quantized' if entry and entry.get('quantization') else ''})")
    if "forward_compact" not in entry.get("methods", []):
        raise ValueError(f"{package_dir}: compile: only Wan text-to-video transformers (forward, forward_compact)")
    dtype = DTYPES[entry["dtype"]]
    shutil.rmtree(out_dir, ignore_errors=True)

    def link_or_copy(src, dst):
        try:
            os.link(src, dst)
        except OSError:
            shutil.copy2(src, dst)

    shutil.copytree(package_dir, out_dir, copy_function=link_or_copy)
    (out_dir / mf.MANIFEST_NAME).unlink()  # rewritten below (never through a link to the source's)
    gen = torch.Generator().manual_seed(1234)
    with torch.no_grad():
        transformer = WanTransformer3DModel.from_pretrained(diffusers_dir, subfolder="transformer", dtype=dtype).eval()
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

        file_name = f"transformer.{device}.pt2"
        report = compile_transformer_aoti(wrapper, out_dir / file_name, cfg, inputs, padded, max_length, dtype, device)
    assert_checks(f"transformer (aoti, {device})", report)
    manifest["components"]["transformer"]["compiled"] = {
        **entry.get("compiled", {}), device: compiled_entry(out_dir, file_name, report, entry["methods"])}
    mf.write_manifest(out_dir, manifest)
    return report


def main(argv: list[str] | None = None) -> int:
    import argparse
    import json

    ap = argparse.ArgumentParser(prog="python -m vgen_export.wan_aoti",
                                 description="Copy a float Wan T2V package with its transformer compiled ahead of time "
                                             "(AOTInductor) for a device type (VGEN_AOTI_THREADS: compile threads, default 1)")
    ap.add_argument("--diffusers", type=Path, required=True, help="the diffusers directory the package was exported from")
    ap.add_argument("--package", type=Path, required=True, help="the package (not modified)")
    ap.add_argument("--out", type=Path, required=True, help="the new package directory (replaced)")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu", help="compile for (and on) this device type")
    args = ap.parse_args(argv)
    report = add_compiled_transformer(args.diffusers, args.package, args.out, args.device)
    print(json.dumps({**{k: report[k] for k in ("compile_seconds", "bytes", "device", "torch")},
                      "max_abs_diff": {m: max(c["max_abs_diff"] for c in report["checks"] if c["method"] == m)
                                       for m in {c["method"] for c in report["checks"]}}}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
