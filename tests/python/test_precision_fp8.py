"""fp8 (e4m3) weights for the denoiser's Linears (issue 30 item 1), on CPU: `--quantize fp8`
writes components.transformer_fp8 beside the float32 transformer (precisions.variants.fp8),
whose block Linears hold float8_e4m3fn weights with a float32 scale per output channel;
`vgen render --precision fp8` runs its dequantized CPU path, and its frames stay within a
PSNR floor of the float32 frames, a floor a wrong scale falls far below. bf16 against float32
is measured the same way (a bf16 package of the same random weights)."""
from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

ROOT = Path(__file__).resolve().parents[2]
from vgen_export import common as ec
from vgen_export import manifest as mf
from vgen_export import wan as ew
from vgen_export.tiny_wan import write_tiny_wan

BUILD = Path(os.environ.get("VGEN_BUILD_DIR", ROOT / "build"))
VGEN = BUILD / "bin" / "vgen"
pytestmark = pytest.mark.skipif(not VGEN.exists(), reason="build/bin/vgen not built")
SMALL = ["--width", "64", "--height", "64", "--frames", "9", "--steps", "4"]
# fp8 vs float32 frames of the tiny Wan (64x64, 9 frames, 4 steps, seed 3): measured 41.6 dB
# (2026-11-27, this test, CPU); every fp8 scale doubled: 33.8 dB, the scales dropped: 33.1 dB
# (the tiny model's norms absorb much of a scale error). The floor sits between (5.6 dB under
# what fp8 gives, 2.2 above a broken scale). bf16 vs float32 (a bf16 export of the same weights): measured 37.5 dB; its floor
# only catches a broken bf16 path.
MIN_PSNR_FP8 = 36.0
MIN_PSNR_BF16 = 30.0

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def packages(tmp_path_factory):
    root = tmp_path_factory.mktemp("fp8")
    src = write_tiny_wan(root / "wan-src", seed=0)
    ew.export_wan(src, root / "fp8", tiny=True, seed=0, quantize="fp8")
    ew.export_wan(src, root / "bf16", tiny=True, seed=0, dtype="bfloat16")
    return root


def render(package, out, *args):
    cmd = [str(VGEN), "render", "a red circle moving left", "-o", str(out), "--model", str(package), "--seed", "3",
           "--format", "png", *SMALL, *args]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    files = sorted(out.glob("*.png"))  # -o names the frames' folder for --format png
    assert files, f"no frames for {out}"
    return np.stack([np.asarray(Image.open(f), dtype=np.float64) for f in files])


def psnr(a, b) -> float:
    mse = float(((a - b) ** 2).mean())
    return math.inf if mse == 0 else 10 * math.log10(255.0 ** 2 / mse)


def test_fp8_variant_in_the_manifest_and_the_file(packages):
    m = json.loads((packages / "fp8" / "manifest.json").read_text())
    assert m["precisions"] == {"default": "float32", "variants": {"fp8": {"transformer": "transformer_fp8"}}}
    entry = m["components"]["transformer_fp8"]
    assert entry["quantization"] == "fp8-e4m3" and entry["file"] == "transformer_fp8.pt"
    assert entry["methods"] == m["components"]["transformer"]["methods"]
    assert "quantization" not in m["components"]["transformer"]
    module = torch.jit.load(str(packages / "fp8" / "transformer_fp8.pt"))
    state = module.state_dict()
    fp8 = fp8_weights_with_channel_scales(state, ".blocks.")
    assert not any(".blocks." not in k for k in fp8)  # embedders and the head stay float
    # The exporter's own check: the saved module equals the eager fp8 one, and fp8 moves the
    # prediction from float32 a little (not zero: the Linears were replaced in a copy).
    checks = json.loads((packages / "fp8" / "manifest.json").read_text())["export_checks"]["transformer_fp8"]
    assert checks["quantized_linears"] == len(fp8)
    for c in checks["checks"]:
        assert c["max_abs_diff"] <= c["tolerance"] and 0 < c["max_abs_diff_vs_float"] < 0.1


def test_fp8_renders_close_to_float32_and_bf16_is_measured_too(packages, tmp_path):
    f32 = render(packages / "fp8", tmp_path / "f32.png", "--precision", "float32")
    fp8 = render(packages / "fp8", tmp_path / "fp8.png", "--precision", "fp8")
    bf16 = render(packages / "bf16", tmp_path / "bf16.png")
    got = {"fp8": psnr(f32, fp8), "bf16": psnr(f32, bf16)}
    print(f"PSNR against float32 (dB): {got}")
    assert MIN_PSNR_FP8 < got["fp8"] < math.inf, got
    assert MIN_PSNR_BF16 < got["bf16"] < math.inf, got


def fp8_weights_with_channel_scales(state: dict, inside: str) -> list[str]:
    """The e4m3 weights of a saved fp8 transformer's state dict, checked: there are some, each a
    Linear's weight under `inside`, with one float32 scale per output channel that puts the row's
    largest weight at e4m3's max (448). Returns their keys."""
    fp8 = [k for k, v in state.items() if v.dtype == torch.float8_e4m3fn]
    assert fp8 and all(k.endswith(".weight") and inside in k for k in fp8)
    for k in fp8:
        scale = state[k.removesuffix("weight") + "scale"]
        assert scale.dtype == torch.float32 and scale.shape == (state[k].shape[0],)
        assert torch.allclose(state[k].float().abs().amax(dim=1), torch.full_like(scale, 448.0))
    return fp8


def with_wrong_scales(package: Path, broken: Path, wrong: str) -> Path:
    """A copy of `package` at `broken` whose transformer_fp8.pt has every fp8 scale doubled
    ("doubled") or left out ("dropped": the e4m3 values used as they are), its manifest entry
    rehashed. For the tests that show a PSNR floor can fail (this file's and LTX-Video's)."""
    shutil.copytree(package, broken)  # (a package's files may not be symlinks out of it)
    module = torch.jit.load(str(package / "transformer_fp8.pt"))
    with torch.no_grad():
        for k, v in module.state_dict().items():
            if k.endswith(".scale"):
                v.mul_(2.0) if wrong == "doubled" else v.fill_(1.0)
    torch.jit.save(module, str(broken / "transformer_fp8.pt"))
    m = json.loads((package / "manifest.json").read_text())
    old = m["components"]["transformer_fp8"]
    m["components"]["transformer_fp8"] = mf.component_entry(broken, "transformer_fp8.pt", **{
        k: v for k, v in old.items() if k not in ("file", "sha256", "bytes")})
    (broken / "manifest.json").write_text(json.dumps(m))
    return broken


@pytest.mark.parametrize("wrong", ["doubled", "dropped"])
def test_a_wrong_scale_falls_below_the_floor(packages, tmp_path, wrong):
    """The floor can fail: the same package with every fp8 scale doubled (or left out: the
    e4m3 values used as they are) renders below it."""
    broken = with_wrong_scales(packages / "fp8", tmp_path / "broken", wrong)
    f32 = render(packages / "fp8", tmp_path / "f32.png", "--precision", "float32")
    bad = render(broken, tmp_path / "bad.png", "--precision", "fp8")
    quality = psnr(f32, bad)
    print(f"PSNR of a {wrong} scale against float32 (dB): {quality:.1f}")
    assert quality < MIN_PSNR_FP8, quality


def test_fp8_on_a_package_without_it_is_exit_2_naming_the_field(packages, tmp_path):
    r = subprocess.run([str(VGEN), "render", "x", "-o", str(tmp_path / "x.png"), "--model", str(packages / "bf16"),
                        "--format", "png", *SMALL, "--precision", "fp8"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 2
    assert "precision: model" in r.stderr and "has no fp8 variant" in r.stderr and "--quantize fp8" in r.stderr


def test_fp8_weights_split_into_safetensors_render_the_same(packages, tmp_path, monkeypatch):
    """A real-size transformer's weights go to <name>.safetensors beside the TorchScript file
    (common.save_module, above 256 MiB: the 1.3B fp8 variant is about 1.4 GB), mapped at load
    (stages/model/mapped_weights.cpp): e4m3 is stored as F8_E4M3 and read back as it was."""
    monkeypatch.setattr(ec, "SPLIT_ABOVE", 0)  # every component split, as a real-size export's
    m = ew.export_wan(packages / "wan-src", tmp_path / "split", tiny=True, seed=0, quantize="fp8")
    assert m["export_checks"]["transformer_fp8"]["weights_file"] == "transformer_fp8.safetensors"
    raw = (tmp_path / "split" / "transformer_fp8.safetensors").read_bytes()
    header = json.loads(raw[8:8 + int.from_bytes(raw[:8], "little")])
    assert {v["dtype"] for k, v in header.items() if k.endswith(".weight") and ".blocks." in k} >= {"F8_E4M3"}
    whole = render(packages / "fp8", tmp_path / "whole.png", "--precision", "fp8")
    split = render(tmp_path / "split", tmp_path / "split.png", "--precision", "fp8")
    # The same weights: equal frames when this test ran alone; after the other tests of this
    # file a few values differed by rounding (cause not pinned down: BLAS blocking on mapped vs
    # loaded memory is a guess). A wrong dtype or a misread F8_E4M3 would be far off.
    print(f"split vs whole: max abs diff {np.abs(whole - split).max()}, PSNR {psnr(whole, split):.1f} dB")
    assert np.abs(whole - split).max() <= 2 and psnr(whole, split) > 60  # measured: 1, 98.6 dB
