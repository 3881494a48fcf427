"""Quantized weight variants of a denoiser (issues 24 and 30), shared by the Wan, LTX-Video and
LTX-2 exporters (the Linears inside ".blocks." / ".transformer_blocks.").

int8 (issue 24): dynamic int8 quantization (fbgemm: int8 weights, activations quantized per
call, float32 in and out) of the Linear layers inside the transformer blocks. fp8 (issue 30):
the same Linears with e4m3 weights and a float32 scale per output channel (amax / 448), see
Fp8Linear. ``precision_entries`` says in the manifest which precisions a package carries:

    --quantize int8 | fp8            the float transformer(s) plus variants beside them
                                     (components.transformer_int8 / _fp8, precisions.variants.<p>)
    --quantize int8-only | fp8-only  the transformer itself quantized (components.transformer.quantization)
"""

from __future__ import annotations

import argparse
import copy
import warnings
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from . import manifest as mf

QUANTIZE_CHOICES = ("int8", "int8-only", "fp8", "fp8-only")  # --quantize of the Wan, LTX-Video and LTX-2 exporters
QUANTIZATION = "int8-dynamic"  # components.<name>.quantization of an int8 transformer
FP8_QUANTIZATION = "fp8-e4m3"  # ... and of an fp8 one
E4M3_MAX = 448.0  # the largest finite float8_e4m3fn


def precision_of(quantize: str | None) -> str | None:
    """The precision a --quantize choice writes: "int8-only" -> "int8", "fp8" -> "fp8"."""
    return quantize.removesuffix("-only") if quantize else None


def writes_variant(quantize: str | None) -> bool:
    """Whether the choice writes a quantized variant beside the float transformer."""
    return quantize in ("int8", "fp8")


def only_precision(quantize: str | None) -> str | None:
    """The precision of the transformer itself when the choice quantizes it in place."""
    return precision_of(quantize) if quantize and quantize.endswith("-only") else None


def quantization_of(quantize: str | None) -> str:
    """components.<name>.quantization for a choice's quantized transformer."""
    return FP8_QUANTIZATION if precision_of(quantize) == "fp8" else QUANTIZATION


def quantization_field(quantize: str | None) -> dict[str, str]:
    """The float transformer entry's extra field: its quantization when quantized in place."""
    return {"quantization": quantization_of(quantize)} if only_precision(quantize) else {}


def check_quantize(quantize: str | None, dtype: str, default_precision: str | None = None) -> None:
    """ValueError naming `quantize` (or `default_precision`) for what an export cannot do.
    fp8 takes float32 and bf16 exports alike (the activations keep the package dtype);
    int8's fbgemm kernels are float32 only."""
    if quantize not in (None,) + QUANTIZE_CHOICES or (precision_of(quantize) == "int8" and dtype != "float32"):
        raise ValueError(f"quantize: int8 of a float32 export, or fp8 (got {quantize!r} with {dtype})")
    if precision_of(quantize) == "fp8" and dtype not in ("float32", "bfloat16"):
        raise ValueError(f"quantize: fp8 of a float32 or bfloat16 export only (got {dtype})")
    p = precision_of(quantize)
    writes = (p,) if only_precision(quantize) else (dtype, p) if quantize else (dtype,)
    if default_precision is not None and default_precision not in writes:
        raise ValueError(f"default_precision: {default_precision!r} is not a precision this export writes")


def quantize_int8(wrapper: torch.nn.Module, inside: str) -> tuple[torch.nn.Module, int]:
    """Dynamic int8 quantization of every Linear whose qualified name contains
    `inside` (the block list, e.g. ".blocks." for Wan, ".transformer_blocks." for LTX; "" for
    every Linear, as for the bundled conv UNet, tools/demo_model/add_int8.py): the
    attention projections and FFNs, the bulk of the denoiser's work. Embedders, caption
    projections and the output head stay float32 (diffusers reads the time embedder's parameter
    dtype, which a quantized Linear no longer has). Returns the module and how many Linears."""
    names = {n for n, m in wrapper.named_modules() if isinstance(m, torch.nn.Linear) and inside in n}
    if not names:
        raise ValueError(f"quantize: no Linear layer inside {inside!r} to quantize")
    spec = {n: torch.ao.quantization.default_dynamic_qconfig for n in names}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.ao.quantization's deprecation notice
        return torch.ao.quantization.quantize_dynamic(wrapper, spec, dtype=torch.qint8), len(names)


def quantize_rows_e4m3(rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """[N, K] activations (any float dtype) -> (float8_e4m3fn [N, K], float32 scale [N, 1]) with
    rows ~ q * scale: one scale per row, amax / 448. Written for the bytes it moves, since at a
    GPU's sizes this pass, not the fp8 GEMM, set the Linear's time (H200, Wan 1.3B at 832x480x81:
    fp8 1.68 s a step against bf16's 1.24 with the earlier float32 form). Per input element in
    bf16: the row maximum of |x| by an inf-norm reduction (reads 2 bytes, no |x| tensor), one
    multiply by the reciprocal (2 + 2), the cast (2 + 1): 9 bytes, against 39 for cast-to-float32,
    abs, amax, divide, clamp, cast. The multiply stays in the activation dtype: bf16 keeps 8
    significant bits, e4m3 4, so rounding x / scale to bf16 first moves the e4m3 result by at most
    one e4m3 step in rare ties (float16, whose range cannot hold 448 / a small row's maximum,
    works in float32). No clamp is needed: with the reciprocal and the product each rounded once
    (relative 2^-8 in bf16), |x| / scale stays under 448 * (1 + 2^-8)^2 < 452, and the e4m3fn cast
    rounds everything under 464 to at most 448 (NaN only from 464 up); tests/python/
    test_fp8_quantize.py checks every bf16 magnitude in 2^-12..2^12."""
    if rows.dtype == torch.float16:  # its range: 448 / a small row's amax overflows float16
        rows = rows.float()
    amax = torch.linalg.vector_norm(rows, ord=float("inf"), dim=-1, keepdim=True).float()
    scale = (amax / 448.0).clamp(min=1e-12)
    q = (rows * (1.0 / scale).to(rows.dtype)).to(torch.float8_e4m3fn)
    return q, scale


class Fp8Linear(torch.nn.Module):
    """A Linear with float8_e4m3fn weights [out, in] and a float32 scale per output channel
    (weight ~ weight_fp8 * scale[:, None]); bias in the activation dtype.

    One exported file runs on both devices, so the device test must survive export. The
    exporters trace; a traced `if x.is_cuda` is frozen at trace time (CPU), so this module is
    scripted (torch.jit.script) before the wrapper is traced: the trace records a call to its
    scripted forward and keeps the branch. Measured with torch 2.11: CPU has torch._scaled_mm
    for per-tensor scales only (per-row scales fail an internal assert), and a per-tensor
    weight scale loses the small channels, so CPU dequantizes to the activation dtype and calls
    F.linear. CUDA calls _scaled_mm with a per-row activation scale (quantized on the fly) and
    the per-channel weight scale ("rowwise": bf16 out, float32 scales, weight column-major,
    which weight.t() of a contiguous [out, in] is; both weight dims multiples of 16, else the
    dequantized path). The runtime refuses fp8 on CUDA devices below capability 8.9
    (stages/job_spec.cpp), so is_cuda stands for "has fp8 tensor cores" here."""

    def __init__(self, linear: torch.nn.Linear, act_dtype: torch.dtype):
        super().__init__()
        w = linear.weight.detach().float()
        scale = (w.abs().amax(dim=1) / E4M3_MAX).clamp(min=1e-12)
        self.register_buffer("weight", (w / scale[:, None]).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn))
        self.register_buffer("scale", scale)
        bias = linear.bias.detach() if linear.bias is not None else torch.zeros(w.shape[0])
        self.register_buffer("bias", bias.to(act_dtype))
        self.out_features = int(w.shape[0])
        self.tensor_cores = w.shape[0] % 16 == 0 and w.shape[1] % 16 == 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.is_cuda and self.tensor_cores:
            xq, row_scale = quantize_rows_e4m3(x.reshape(-1, x.size(-1)))
            y = torch._scaled_mm(xq, self.weight.t(), scale_a=row_scale, scale_b=self.scale.unsqueeze(0),
                                 out_dtype=torch.bfloat16)
            shape = list(x.shape[:-1]) + [self.out_features]
            # in place: the GEMM's output is ours (a bias through _scaled_mm's own argument would
            # save this pass; its support with row-wise scales is not checked on a GPU yet)
            return y.to(x.dtype).add_(self.bias).reshape(shape)
        w = self.weight.to(x.dtype) * self.scale.unsqueeze(1).to(x.dtype)
        return F.linear(x, w, self.bias)


def quantize_fp8(wrapper: torch.nn.Module, inside: str, act_dtype: torch.dtype) -> tuple[torch.nn.Module, int]:
    """A copy of `wrapper` (as quantize_dynamic makes: the exporter compares against the
    float one) with every Linear whose qualified name contains `inside` replaced by a scripted
    Fp8Linear (the same layers as quantize_int8). Returns the module and how many Linears."""
    wrapper = copy.deepcopy(wrapper)
    names = [n for n, m in wrapper.named_modules() if isinstance(m, torch.nn.Linear) and inside in n]
    if not names:
        raise ValueError(f"quantize: no Linear layer inside {inside!r} to quantize")
    for name in names:
        parent_name, _, leaf = name.rpartition(".")
        parent = wrapper.get_submodule(parent_name)
        setattr(parent, leaf, torch.jit.script(Fp8Linear(getattr(parent, leaf), act_dtype)))
    return wrapper, len(names)


def quantize_linears(wrapper: torch.nn.Module, inside: str, quantize: str | None,
                     act_dtype: torch.dtype) -> tuple[torch.nn.Module, int]:
    """The quantization a --quantize choice asks for (int8 or fp8)."""
    if precision_of(quantize) == "fp8":
        return quantize_fp8(wrapper, inside, act_dtype)
    return quantize_int8(wrapper, inside)


def variant_name(component: str, quantize: str | None = "int8") -> str:
    """The variant's component name beside a float one: transformer -> transformer_int8 / _fp8."""
    return f"{component}_{precision_of(quantize)}"


def precision_entries(quantize: str | None, components: list[str], default_precision: str | None,
                      dtype: str) -> dict[str, Any] | None:
    """The manifest's "precisions" section for a package with int8 or fp8 variants of
    `components` (None for a package with one precision: its base, which readers derive)."""
    if not writes_variant(quantize):
        return None
    p = precision_of(quantize)
    return {"default": default_precision or dtype,
            "variants": {p: {c: variant_name(c, quantize) for c in components}}}


def add_precisions(manifest: dict[str, Any], out_dir: Path, quantize: str | None, transformers: list[str],
                   default_precision: str | None, dtype: str) -> None:
    """The int8 / fp8 variants' component entries (a copy of each float entry's fields, the
    variant's file <name>_<precision>.pt) and the manifest's "precisions" section; or, for an
    -only package, nothing more (its base precision is the quantized one, said by the float
    entry's quantization field). The Wan and LTX-Video exporters' shared last step."""
    section = precision_entries(quantize, transformers, default_precision, dtype)
    if section is None:
        return
    for name in transformers:
        float_entry = manifest["components"][name]
        manifest["components"][variant_name(name, quantize)] = mf.component_entry(
            out_dir, f"{variant_name(name, quantize)}.pt", format=float_entry["format"], dtype=float_entry["dtype"],
            methods=float_entry["methods"], quantization=quantization_of(quantize))
    manifest["precisions"] = section


def add_quantize_arguments(parser: argparse.ArgumentParser) -> None:
    """--quantize and --default-precision, the same for every exporter that takes them."""
    parser.add_argument("--quantize", choices=QUANTIZE_CHOICES, default=None,
                        help="int8 / fp8: add an int8 (dynamic, fbgemm; float32 exports) or fp8 e4m3 (per-channel scales; "
                             "float32 or bfloat16 exports) variant of the transformer blocks' Linear layers beside the float "
                             "one, chosen per job (precision); -only: the transformer itself")
    parser.add_argument("--default-precision", choices=["float32", "bfloat16", "int8", "fp8"], default=None,
                        help="the precision jobs get when they name none (default: the dtype, or the -only precision)")
