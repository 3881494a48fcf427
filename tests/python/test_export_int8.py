"""`--quantize int8` in both exporters (issue 24): the transformer's block Linears dynamically
quantized to int8, the rest float32; the module runs through TorchScript and stays close to
float32. `int8` adds the variant beside the float32 transformer (components.transformer_int8,
manifest precisions: chosen per job); `int8-only` makes the transformer itself int8 (the
package's base precision). Parity tests keep float32."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from vgen_export import common as ec
from vgen_export import ltx as el
from vgen_export import wan as ew
from vgen_export.tiny_ltx import write_tiny_ltx
from vgen_export.tiny_wan import write_tiny_wan

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def packages(tmp_path_factory):
    root = tmp_path_factory.mktemp("int8")
    src = write_tiny_wan(root / "diffusers", seed=0)
    both = ew.export_wan(src, root / "both", dtype="float32", tiny=True, seed=0, quantize="int8")
    only = ew.export_wan(src, root / "only", dtype="float32", tiny=True, seed=0, quantize="int8-only",
                         default_precision="int8")
    return root, both, only


def ops_of(path: Path) -> set[str]:
    module = torch.jit.load(str(path))
    return {n.kind() for _, g in ec.method_graphs(module) for n in g.nodes()}


def assert_close_to_float(report):
    assert report["quantized_linears"] > 0
    for c in report["checks"]:  # the traced module equals eager int8; int8 is near float32, not equal
        assert c["max_abs_diff"] <= c["tolerance"]
        assert 0 < c["max_abs_diff_vs_float"] < 0.1


def test_int8_variant_beside_float32(packages):
    root, both, _ = packages
    comps = both["components"]
    assert "quantization" not in comps["transformer"]
    assert comps["transformer_int8"]["quantization"] == "int8-dynamic"
    assert comps["transformer_int8"]["file"] == "transformer_int8.pt"
    assert comps["transformer_int8"]["methods"] == comps["transformer"]["methods"]
    assert both["precisions"] == {"default": "float32", "variants": {"int8": {"transformer": "transformer_int8"}}}
    assert "quantized::linear_dynamic" in ops_of(root / "both" / "transformer_int8.pt")
    assert "quantized::linear_dynamic" not in ops_of(root / "both" / "transformer.pt")
    assert_close_to_float(both["export_checks"]["transformer_int8"])
    assert "quantized_linears" not in both["export_checks"]["transformer"]
    assert both["transformer"]["compact_context"]  # both variants measured usable
    assert both["export_checks"]["transformer_int8"]["compact_context"]["usable"]


def test_int8_only_package(packages):
    root, both, only = packages
    assert only["components"]["transformer"]["quantization"] == "int8-dynamic"
    assert "transformer_int8" not in only["components"] and "precisions" not in only
    assert only["dtype"] == "float32"  # activations and every other component stay float32
    assert "quantized::linear_dynamic" in ops_of(root / "only" / "transformer.pt")
    assert_close_to_float(only["export_checks"]["transformer"])
    # The text encoder and the VAE hold the same weights in both (the files differ in bytes:
    # TorchScript archives are not reproducible).
    for name in ("text_encoder", "vae_decoder"):
        a = torch.jit.load(str(root / "both" / f"{name}.pt")).state_dict()
        b = torch.jit.load(str(root / "only" / f"{name}.pt")).state_dict()
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), name
        assert "quantization" not in only["components"][name]
    assert json.loads((root / "only" / "manifest.json").read_text())["components"]["transformer"]["quantization"]


def test_ltx_int8_variant(tmp_path):
    src = write_tiny_ltx(tmp_path / "diffusers", seed=0)
    m = el.export_ltx(src, tmp_path / "pkg", tiny=True, seed=0, quantize="int8", default_precision="int8")
    assert m["precisions"] == {"default": "int8", "variants": {"int8": {"transformer": "transformer_int8"}}}
    assert m["components"]["transformer_int8"]["quantization"] == "int8-dynamic"
    assert "quantized::linear_dynamic" in ops_of(tmp_path / "pkg" / "transformer_int8.pt")
    assert "quantized::linear_dynamic" not in ops_of(tmp_path / "pkg" / "transformer.pt")
    report = m["export_checks"]["transformer_int8"]
    assert_close_to_float(report)
    # Only the blocks' Linears: the caption projection, time embedder and output head stay float.
    from diffusers import LTXVideoTransformer3DModel

    model = LTXVideoTransformer3DModel.from_pretrained(src, subfolder="transformer")
    linears = [n for n, mod in model.named_modules() if isinstance(mod, torch.nn.Linear)]
    inside = [n for n in linears if n.startswith("transformer_blocks.")]
    assert report["quantized_linears"] == len(inside) < len(linears)


def test_ltx2_int8_variant(tmp_path):
    from vgen_export import ltx2 as el2
    from vgen_export.tiny_ltx2 import TINY_MAX_LENGTH, write_tiny_ltx2

    src = write_tiny_ltx2(tmp_path / "diffusers", seed=0)
    m = el2.export_ltx2(src, tmp_path / "pkg", dtype="float32", tiny=True, seed=0, max_length=TINY_MAX_LENGTH,
                        quantize="int8")
    assert m["precisions"] == {"default": "float32", "variants": {"int8": {"transformer": "transformer_int8"}}}
    assert m["components"]["transformer_int8"]["quantization"] == "int8-dynamic"
    assert "quantized::linear_dynamic" in ops_of(tmp_path / "pkg" / "transformer_int8.pt")
    assert "quantized::linear_dynamic" not in ops_of(tmp_path / "pkg" / "transformer.pt")
    report = m["export_checks"]["transformer_int8"]
    assert report["quantized_linears"] > 0
    for c in report["checks"]:  # the traced module equals eager int8; int8 is near float32, not equal
        assert c["max_abs_diff"] <= c["tolerance"]
        assert 0 < c["max_abs_diff_vs_float"] < 0.25  # LTX-2's tiny model moves more (test_precision_fp8_ltx.py)
    from diffusers import LTX2VideoTransformer3DModel

    model = LTX2VideoTransformer3DModel.from_pretrained(src, subfolder="transformer")
    linears = [n for n, mod in model.named_modules() if isinstance(mod, torch.nn.Linear)]
    inside = [n for n in linears if n.startswith("transformer_blocks.")]
    assert report["quantized_linears"] == len(inside) < len(linears)


def test_quantize_is_checked_before_anything_is_written(tmp_path):
    with pytest.raises(ValueError, match="quantize"):
        ew.export_wan(tmp_path / "nowhere", tmp_path / "out", dtype="bfloat16", quantize="int8")
    with pytest.raises(ValueError, match="quantize"):
        ew.export_wan(tmp_path / "nowhere", tmp_path / "out", quantize="int4")
    with pytest.raises(ValueError, match="default_precision"):
        ew.export_wan(tmp_path / "nowhere", tmp_path / "out", default_precision="int8")
    with pytest.raises(ValueError, match="default_precision"):
        el.export_ltx(tmp_path / "nowhere", tmp_path / "out", quantize="int8-only", default_precision="float32")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("variant", ["i2v", "a14b-i2v"])
def test_quantize_of_an_i2v_directory_is_refused_before_anything_is_written(tmp_path, variant):
    src = write_tiny_wan(tmp_path / "diffusers", seed=0, variant=variant)
    with pytest.raises(ValueError, match="quantize: not available for Wan I2V"):
        ew.export_wan(src, tmp_path / "out", dtype="float32", tiny=True, seed=0, quantize="int8")
    assert not (tmp_path / "out").exists()  # before the fix: text_encoder.pt and tokenizer.model were written
