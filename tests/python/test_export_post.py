"""`python -m vgen_export.post --realesrgan FILE`: the exported TorchScript RRDBNet against
spandrel's (PyPI) loader of the same checkpoint, on random weights, in float32."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

spandrel = pytest.importorskip("spandrel")

from vgen_export.post import export_realesrgan, write_random_realesrgan


@pytest.mark.parametrize("scale", [4, 2])
def test_exported_rrdbnet_matches_spandrel(tmp_path, scale):
    ckpt = write_random_realesrgan(tmp_path / "x.pth", scale=scale, seed=10 + scale)
    manifest = export_realesrgan(ckpt, tmp_path / "pkg")
    assert manifest["scale"] == scale and manifest["num_block"] == 2 and manifest["num_feat"] == 16
    ours = torch.jit.load(str(tmp_path / "pkg" / manifest["module"]))
    ref = spandrel.ModelLoader().load_from_file(str(ckpt))
    assert ref.scale == scale
    torch.manual_seed(3)
    for shape in [(1, 3, 32, 48), (2, 3, 64, 32)]:  # not the traced size: shapes are not baked in
        x = torch.rand(*shape)
        with torch.no_grad():
            want = ref.model.eval()(x)
            got = ours(x)
        assert got.shape == (shape[0], 3, shape[2] * scale, shape[3] * scale)
        assert want.abs().mean() > 0.05  # the weights are spread: a wrong layer would show
        assert (got - want).abs().max().item() <= 1e-4


def test_cli_writes_a_package_and_refuses_other_checkpoints(tmp_path):
    ckpt = write_random_realesrgan(tmp_path / "x.pth", scale=4)
    r = subprocess.run([sys.executable, "-m", "vgen_export.post", "--realesrgan", str(ckpt), "-o", str(tmp_path / "pkg")],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    manifest = json.loads((tmp_path / "pkg" / "manifest.json").read_text())
    assert manifest["kind"] == "post" and manifest["variant"] == "realesrgan" and manifest["architecture"] == "rrdbnet"
    torch.save({"params_ema": {"model.0.weight": torch.zeros(1)}}, str(tmp_path / "old.pth"))
    r = subprocess.run([sys.executable, "-m", "vgen_export.post", "--realesrgan", str(tmp_path / "old.pth"), "-o",
                        str(tmp_path / "pkg2")], capture_output=True, text=True, timeout=300)
    assert r.returncode == 2
    assert "not a Real-ESRGAN RRDBNet checkpoint" in r.stderr
