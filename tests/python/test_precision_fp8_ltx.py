"""fp8 (e4m3) weights for the transformer Linears of LTX-Video and LTX-2 (issue 30 item 1), on
CPU, as test_precision_fp8.py shows them for Wan: `vgen_export.ltx` / `vgen_export.ltx2
--quantize fp8` writes components.transformer_fp8 beside the float32 transformer
(precisions.variants.fp8), whose ".transformer_blocks." Linears hold float8_e4m3fn weights with a
float32 scale per output channel; a job's "precision": "fp8" runs its dequantized CPU path, and
its frames stay above a PSNR floor against the float32 frames that a wrong scale falls below.
`--quantize fp8-only` makes the transformer itself fp8 (the package's base precision), and a
package without the variant refuses fp8 with exit 2 naming the field."""
from __future__ import annotations

import json
import math
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch

from vgen_export import ltx as el
from vgen_export import ltx2 as el2
from vgen_export.tiny_ltx import write_tiny_ltx
from vgen_export.tiny_ltx2 import TINY_MAX_LENGTH, write_tiny_ltx2
from test_cli_render import render_and_probe  # the CLI tests' render + ffprobe (same folder)
from test_precision import VGEN, frames, psnr, render  # render: one fixed thread split, PNG frames
from test_precision_fp8 import fp8_weights_with_channel_scales, with_wrong_scales

pytestmark = pytest.mark.skipif(not VGEN.exists(), reason="build/bin/vgen not built")
# fp8 vs float32 frames of the tiny models (64x64, 9 frames, 4 steps, seed 3, one thread), this
# test on the shared 2-core CPU. LTX-Video: measured 53.2 dB (2026-11-28 11:17 UTC, load 2.8);
# every fp8 scale doubled: 23.7 dB, the scales dropped: 20.9 dB. LTX-2: 45.2 dB, doubled 24.0,
# dropped 16.5 (11:26 UTC, load 2.5). Each floor sits between what fp8 gives and what a broken
# scale gives (9-13 dB under the one, 12-16 above the other). Higher than Wan's (41.6 dB,
# test_precision_fp8.py): other tiny random models, nothing more is read into it.
MIN_PSNR_FP8 = {"ltx": 40.0, "ltx2": 36.0}
# The export's reported distance of the fp8 prediction from float32 (max |diff| over its four
# checks): measured 0.010-0.017 (LTX-Video), 0.043-0.105 (LTX-2, 56 Linears against 20); the
# bound only says "near float32, not equal", the frames' PSNR is the accuracy check.
MAX_DIFF_VS_FLOAT = {"ltx": 0.1, "ltx2": 0.25}
FAMILY = {"ltx": ("ltx-video", "LTXVideoTransformer3DModel"), "ltx2": ("ltx2", "LTX2VideoTransformer3DModel")}

torch.set_num_threads(1)


def export(family: str, src: Path, out: Path, quantize: str, dtype: str = "float32") -> None:
    if family == "ltx":
        el.export_ltx(src, out, dtype=dtype, tiny=True, seed=0, quantize=quantize)
    else:
        el2.export_ltx2(src, out, dtype=dtype, tiny=True, seed=0, max_length=TINY_MAX_LENGTH, quantize=quantize)


@pytest.fixture(scope="module", params=sorted(FAMILY))
def packages(request, tmp_path_factory):
    """(family, folder): the family's tiny pipeline as src/, exported with fp8 and fp8-only."""
    family = request.param
    root = tmp_path_factory.mktemp(f"fp8-{family}")
    src = (write_tiny_ltx if family == "ltx" else write_tiny_ltx2)(root / "src", seed=0)
    export(family, src, root / "fp8", "fp8")
    export(family, src, root / "fp8-only", "fp8-only")
    return family, root


def rendered(package: Path, out: Path, *args) -> np.ndarray:
    r = render(package, out, *args)
    assert r.returncode == 0, r.stderr
    return frames(out)


def test_fp8_variant_in_the_manifest_and_the_file(packages):
    family, packages = packages
    m = json.loads((packages / "fp8" / "manifest.json").read_text())
    assert m["family"] == FAMILY[family][0]
    assert m["precisions"] == {"default": "float32", "variants": {"fp8": {"transformer": "transformer_fp8"}}}
    entry = m["components"]["transformer_fp8"]
    assert entry["quantization"] == "fp8-e4m3" and entry["file"] == "transformer_fp8.pt"
    assert entry["methods"] == m["components"]["transformer"]["methods"] and entry["dtype"] == "float32"
    assert "quantization" not in m["components"]["transformer"]
    state = torch.jit.load(str(packages / "fp8" / "transformer_fp8.pt")).state_dict()
    fp8 = fp8_weights_with_channel_scales(state, ".transformer_blocks.")
    # Every Linear of the blocks and nothing else: the caption projection, time embedder and
    # output head stay float32 (as int8's, test_export_int8.py).
    import diffusers

    model = getattr(diffusers, FAMILY[family][1]).from_pretrained(packages / "src", subfolder="transformer")
    linears = [n for n, mod in model.named_modules() if isinstance(mod, torch.nn.Linear)]
    inside = [n for n in linears if n.startswith("transformer_blocks.")]
    report = m["export_checks"]["transformer_fp8"]
    assert report["quantized_linears"] == len(fp8) == len(inside) < len(linears)
    # The exporter's own check: the saved module equals the eager fp8 one; fp8 moves the
    # prediction from float32 a little (reported, not checked, by the export; not zero here).
    for c in report["checks"]:
        assert c["max_abs_diff"] <= c["tolerance"] and 0 < c["max_abs_diff_vs_float"] < MAX_DIFF_VS_FLOAT[family]
    assert "quantized_linears" not in m["export_checks"]["transformer"]


def test_fp8_renders_close_to_float32_and_an_mp4_probes(packages, tmp_path):
    family, packages = packages
    pkg = packages / "fp8"
    default = rendered(pkg, tmp_path / "default.png")
    f32 = rendered(pkg, tmp_path / "f32.png", "--precision", "float32")
    fp8 = rendered(pkg, tmp_path / "fp8.png", "--precision", "fp8")
    assert np.array_equal(default, f32)  # the package's default is float32
    quality = psnr(f32, fp8)
    print(f"{family} fp8 vs float32 PSNR (dB): {quality:.1f}")
    assert MIN_PSNR_FP8[family] < quality < math.inf, quality
    _, streams = render_and_probe(pkg, "a red circle moving left", tmp_path / "fp8.mp4", "--precision", "fp8",
                                  "--width", "64", "--height", "64", "--frames", "9", "--steps", "2")
    video = [s for s in streams if s["codec_type"] == "video"]
    assert [(s["codec_name"], s["width"], s["height"], int(s["nb_read_frames"])) for s in video] == [("h264", 64, 64, 9)]


@pytest.mark.parametrize("wrong", ["doubled", "dropped"])
def test_a_wrong_scale_falls_below_the_floor(packages, tmp_path, wrong):
    """The floor can fail: every fp8 scale doubled, or left out (the e4m3 values used as they are)."""
    family, packages = packages
    broken = with_wrong_scales(packages / "fp8", tmp_path / "broken", wrong)
    f32 = rendered(packages / "fp8", tmp_path / "f32.png", "--precision", "float32")
    bad = rendered(broken, tmp_path / "bad.png", "--precision", "fp8")
    quality = psnr(f32, bad)
    print(f"{family} fp8 with a {wrong} scale vs float32 PSNR (dB): {quality:.1f}")
    assert quality < MIN_PSNR_FP8[family], quality


def test_fp8_only_is_the_base_precision_and_renders_as_the_variant(packages, tmp_path):
    _, packages = packages
    m = json.loads((packages / "fp8-only" / "manifest.json").read_text())
    assert m["components"]["transformer"]["quantization"] == "fp8-e4m3" and m["dtype"] == "float32"
    assert "precisions" not in m and "transformer_fp8" not in m["components"]
    # The same weights quantized the same way: the same frames as the fp8 variant's.
    only = rendered(packages / "fp8-only", tmp_path / "only.png")
    variant = rendered(packages / "fp8", tmp_path / "variant.png", "--precision", "fp8")
    assert np.array_equal(only, variant)


def test_fp8_on_a_package_without_it_is_exit_2_naming_the_field(packages, tmp_path):
    _, packages = packages
    plain = tmp_path / "plain"  # what an export without --quantize writes: no variant, no precisions
    shutil.copytree(packages / "fp8", plain)
    (plain / "transformer_fp8.pt").unlink()
    m = json.loads((plain / "manifest.json").read_text())
    del m["precisions"], m["components"]["transformer_fp8"], m["export_checks"]["transformer_fp8"]
    (plain / "manifest.json").write_text(json.dumps(m))
    out = tmp_path / "out"
    out.mkdir()
    r = render(plain, out / "x.png", "--precision", "fp8")
    assert r.returncode == 2, r.stderr
    assert ("precision: model 'plain' has no fp8 variant (it has: float32; export one with --quantize fp8)"
            in r.stderr), r.stderr
    assert not any(out.iterdir())
    assert render(plain, out / "y.png").returncode == 0  # the package itself is fine


@pytest.mark.parametrize("family", sorted(FAMILY))
@pytest.mark.parametrize("dtype,quantize,named", [("float16", "fp8", "quantize: fp8 of a float32 or bfloat16"),
                                                  ("bfloat16", "int8", "quantize: int8 of a float32 export"),
                                                  ("float32", "int4", "quantize:")])
def test_what_fp8_and_int8_cannot_quantize_is_refused_before_anything_is_written(tmp_path, family, dtype, quantize,
                                                                                   named):
    with pytest.raises(ValueError, match=named):
        export(family, tmp_path / "nowhere", tmp_path / "out", quantize, dtype=dtype)
    assert not (tmp_path / "out").exists()
