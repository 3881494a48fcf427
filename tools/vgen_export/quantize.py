"""int8 weight variants of a denoiser (issue 24), shared by the Wan and LTX exporters.

``quantize_int8`` applies dynamic int8 quantization (fbgemm: int8 weights, activations
quantized per call, float32 in and out) to the Linear layers inside the transformer blocks;
``precision_entries`` says in the manifest which precisions a package carries:

    --quantize int8        float32 transformer(s) plus int8 variants beside them
                           (components.transformer_int8, precisions.variants.int8)
    --quantize int8-only   the transformer itself int8 (components.transformer.quantization)
"""

from __future__ import annotations

import warnings
from typing import Any

import torch

QUANTIZE_CHOICES = ("int8", "int8-only")
QUANTIZATION = "int8-dynamic"  # components.<name>.quantization


def check_quantize(quantize: str | None, dtype: str, default_precision: str | None = None) -> None:
    """ValueError naming `quantize` (or `default_precision`) for what an export cannot do."""
    if quantize not in (None,) + QUANTIZE_CHOICES or (quantize and dtype != "float32"):
        raise ValueError(f"quantize: int8 of a float32 export only (got {quantize!r} with {dtype})")
    writes = {"int8-only": ("int8",), "int8": (dtype, "int8")}.get(quantize or "", (dtype,))
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


def variant_name(component: str) -> str:
    """The int8 variant's component name beside a float one: transformer -> transformer_int8."""
    return f"{component}_int8"


def precision_entries(quantize: str | None, components: list[str], default_precision: str | None,
                      dtype: str) -> dict[str, Any] | None:
    """The manifest's "precisions" section for a package with int8 variants of `components`
    (None for a package with one precision: its base, which readers derive)."""
    if quantize != "int8":
        return None
    return {"default": default_precision or dtype,
            "variants": {"int8": {c: variant_name(c) for c in components}}}
