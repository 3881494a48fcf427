"""`export_wan.py --quantize int8` (issue 24): the transformer's block Linears dynamically
quantized to int8, the rest float32; the module runs through TorchScript and stays close to
float32; the manifest says which variant the package holds. Parity tests keep float32."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
from vgen_export import export_wan as ew  # noqa: E402
from vgen_export.tiny_wan import write_tiny_wan  # noqa: E402

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def packages(tmp_path_factory):
    root = tmp_path_factory.mktemp("int8")
    src = write_tiny_wan(root / "diffusers", seed=0)
    plain = ew.export_wan(src, root / "f32", dtype="float32", tiny=True, seed=0)
    int8 = ew.export_wan(src, root / "int8", dtype="float32", tiny=True, seed=0, quantize="int8")
    return root, plain, int8


def ops_of(path: Path) -> set[str]:
    module = torch.jit.load(str(path))
    return {n.kind() for _, g in ew._graphs(module) for n in g.nodes()}  # noqa: SLF001


def test_int8_package_quantizes_the_block_linears_only(packages):
    root, plain, int8 = packages
    assert int8["components"]["transformer"]["quantization"] == "int8-dynamic"
    assert "quantization" not in plain["components"]["transformer"]
    assert int8["dtype"] == "float32"  # activations and every other component stay float32
    report = int8["export_checks"]["transformer"]
    assert report["quantized_linears"] > 0
    assert "quantized::linear_dynamic" in ops_of(root / "int8" / "transformer.pt")
    assert "quantized::linear_dynamic" not in ops_of(root / "f32" / "transformer.pt")
    # The traced module equals eager int8; int8 is near float32 but not equal to it.
    for c in report["checks"]:
        assert c["max_abs_diff"] <= c["tolerance"]
        assert 0 < c["max_abs_diff_vs_float"] < 0.1
    assert report["compact_context"]["usable"]
    # The text encoder and the VAE hold the float32 package's weights (the files differ in bytes:
    # TorchScript archives are not reproducible).
    for name in ("text_encoder", "vae_decoder"):
        a = torch.jit.load(str(root / "f32" / f"{name}.pt")).state_dict()
        b = torch.jit.load(str(root / "int8" / f"{name}.pt")).state_dict()
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), name
        assert "quantization" not in int8["components"][name]
    assert json.loads((root / "int8" / "manifest.json").read_text())["components"]["transformer"]["quantization"]


def test_int8_only_from_float32(tmp_path):
    with pytest.raises(ValueError, match="quantize"):
        ew.export_wan(tmp_path / "nowhere", tmp_path / "out", dtype="bfloat16", quantize="int8")
    with pytest.raises(ValueError, match="quantize"):
        ew.export_wan(tmp_path / "nowhere", tmp_path / "out", quantize="int4")
