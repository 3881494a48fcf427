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
                             dtype, device: str = "cpu", only: list[str] | None = None,
                             export_only: bool = False) -> dict[str, Any]:
    """The transformer's forward and forward_compact as one AOTInductor package (vgen_export/aoti.py)
    with every dimension vgen varies dynamic: batch rows, latent frames, height and width (in
    patches) and text rows; checked against eager at shapes other than the export's. `device`:
    the device type it is compiled for, where `wrapper` must already be; `inputs` may make its
    tensors on the CPU (they are moved). `only`: compile these methods alone (a job calls one of
    the two, forward_compact when the package compacts its text context; the runtime serves a
    method the .pt2 lacks from TorchScript), which halves the compile. `export_only`: stop after
    torch.export and return aoti.check_exports' report (no file, no eager checks); with the
    wrapper and inputs fake (aoti.fake_device) this checks a device's export without the device."""
    from torch.export import Dim

    from .aoti import Method, check_exports, compile_aoti, env_threads

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
    text = Dim("text", min=2, max=max_length + 1)
    video = {0: rows, 2: frames, 3: h * ph if ph > 1 else h, 4: w * pw if pw > 1 else w}
    # The example is the size Inductor tunes for (oneDNN prepacks the frozen Linear weights for its
    # rows): a job-like 3 latent frames of 8x8 patches, not a minimal one (measured, medium bench
    # transformer at 2x16x3x16x16: 0.18 s per call when exported at 2x16x2x6x4, 0.06 s at this size).
    example = inputs(2, 3, min(8, rope), min(8, rope))
    full_checks = []
    for shape in () if export_only else ((1, 3, 2, 4), (3, 1, 1, 1)):
        args = inputs(*shape)
        full_checks.append((args, wrapper(*args)))
    compact_checks = []
    for shape, lengths in () if export_only else (((2, 2, 3, 3), [1, 9]), ((1, 1, 2, 2), [min(30, max_length)])):
        args = padded(inputs(*shape), lengths)
        ctx, bias = compact_context(args[2], lengths)
        compact_checks.append(((args[0], args[1], ctx, bias), wrapper(*args)))
    ex_ctx, ex_bias = compact_context(padded(example, [3, 5])[2], [3, 5])
    methods = {
        "forward": Method(wrapper, example, ({**video}, {0: rows}, {0: rows, 1: text}), full_checks),
        "forward_compact": Method(CompactMethod(wrapper), (*example[:2], ex_ctx, ex_bias),
                                  ({**video}, {0: rows}, {0: rows, 1: text}, {0: rows, 1: text}), compact_checks),
    }
    if only:
        unknown = sorted(set(only) - set(methods))
        if unknown:
            raise ValueError(f"compile: unknown transformer method(s) {unknown} (known: {sorted(methods)})")
        methods = {name: m for name, m in methods.items() if name in only}
    if export_only:
        return check_exports(methods, device)
    # float32's tolerance in every dtype for the compact checks, as check_compact_context does
    return compile_aoti(methods, path, device=device, threads=env_threads(),
                        tolerance=lambda ref: 1e-4 if dtype == torch.float32 else dtype_tolerance(dtype, ref))

