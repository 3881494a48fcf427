"""`python -m vgen_export.post --realesrgan FILE`: the exported TorchScript RRDBNet against
spandrel's (PyPI) loader of the same checkpoint, on random weights, in float32; `--rife FILE`:
the exported IFNet against ccvfi's (PyPI) IFNet on the same random checkpoint, padding included."""
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


# RIFE: the exported interpolator against ccvfi's IFNet (PyPI) on the same random checkpoint.

def reference_frames(ref, img0, img1, t):
    """ccvfi's IFNet on the frames padded to 64 (zeros, bottom and right, as Practical-RIFE's
    inference does), cropped back: what the package's wrapper must give."""
    n, _, h, w = img0.shape
    ph, pw = -(-h // 64) * 64, -(-w // 64) * 64
    x = torch.cat([torch.nn.functional.pad(img0, [0, pw - w, 0, ph - h]), torch.nn.functional.pad(img1, [0, pw - w, 0, ph - h])], 1)
    with torch.no_grad():
        return ref(x, t.view(n, 1, 1, 1).expand(n, 1, ph, pw))[:, :, :h, :w]


def test_exported_rife_matches_ccvfi(tmp_path):
    ccvfi_arch = pytest.importorskip("ccvfi.arch")
    from vgen_export.rife import IFNet, export_rife, write_random_rife

    ckpt = write_random_rife(tmp_path / "flownet.pkl", seed=5)
    state = torch.load(str(ckpt), weights_only=True)
    ref = ccvfi_arch.IFNet().eval()
    # ccvfi's loader passes strict=False: load strictly here, and check the key sets are ours.
    ref.load_state_dict({k.removeprefix("module."): v for k, v in state.items()}, strict=True)
    assert set(ref.state_dict()) == set(IFNet().state_dict())
    manifest = export_rife(ckpt, tmp_path / "pkg")
    assert manifest["variant"] == "rife" and manifest["architecture"] == "ifnet"
    assert manifest["timesteps"] == "any" and manifest["multiple"] == 64 and manifest["flow_scale"] == 1.0
    ours = torch.jit.load(str(tmp_path / "pkg" / manifest["module"]))
    torch.manual_seed(4)
    # A multiple of 64 (no padding) and sizes that are not (padded and cropped in the wrapper).
    for shape, times in [((1, 3, 64, 128), [0.5]), ((2, 3, 32, 48), [0.25, 0.75]), ((3, 3, 72, 100), [0.5, 0.25, 0.75])]:
        img0, img1, t = torch.rand(*shape), torch.rand(*shape), torch.tensor(times)
        want = reference_frames(ref, img0, img1, t)
        with torch.no_grad():
            got = ours(img0, img1, t)
        assert got.shape == shape
        # The random flows move pixels: not the plain average of the two frames.
        assert (want - (img0 + img1) / 2).abs().mean() > 0.05
        assert (got - want).abs().max().item() <= 1e-4


def test_rife_cli_writes_a_package_and_refuses_other_checkpoints(tmp_path):
    pytest.importorskip("ccvfi.arch")
    from vgen_export.rife import write_random_rife

    ckpt = write_random_rife(tmp_path / "flownet.pkl", seed=6)
    r = subprocess.run([sys.executable, "-m", "vgen_export.post", "--rife", str(ckpt), "-o", str(tmp_path / "pkg")],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    manifest = json.loads((tmp_path / "pkg" / "manifest.json").read_text())
    assert manifest["kind"] == "post" and manifest["variant"] == "rife" and (tmp_path / "pkg" / "interpolator.pt").is_file()
    # A bare state dict (no module. prefix) loads too: ccvfi's loader would drop every key.
    state = torch.load(str(ckpt), weights_only=True)
    torch.save({k.removeprefix("module."): v for k, v in state.items()}, str(tmp_path / "bare.pkl"))
    r = subprocess.run([sys.executable, "-m", "vgen_export.post", "--rife", str(tmp_path / "bare.pkl"), "-o", str(tmp_path / "pkg2")],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    # An older RIFE (another layout) or a partial file is refused, not loaded with holes.
    state.pop("module.block4.lastconv.0.bias")
    torch.save(state, str(tmp_path / "partial.pkl"))
    r = subprocess.run([sys.executable, "-m", "vgen_export.post", "--rife", str(tmp_path / "partial.pkl"), "-o", str(tmp_path / "pkg3")],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 2
    assert "not a RIFE v4.25/v4.26 IFNet checkpoint" in r.stderr and "block4.lastconv.0.bias" in r.stderr
