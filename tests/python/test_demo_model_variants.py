"""vgen_demo_model.variants: a copy of the bundled model with a bf16 denoiser (issue 30 item 1;
models/vgen-shapes ships one, its default, made by `--bf16 --default bfloat16`).

The copy is made from the source's float32 components (a variant the source carries is dropped,
and its files are never written through the hard links), the variant is listed under precisions.variants.bfloat16 and picked by a job's precision; it
renders close to float32 but not equal to it; --default bfloat16 makes it what jobs that name no
precision get (the same frames as asking for it); and bf16 and float32 jobs never share a content
key (a float variant other than the package's own weights is part of the key's model id). The
AOTInductor half (--compile aoti) takes minutes to compile the denoiser (230 s measured, 1
thread): it is checked by bench/aoti.py --model bundled, not here."""
from __future__ import annotations

import json
import math
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from vgen_demo_model import variants

ROOT = Path(__file__).resolve().parents[2]
MODEL = ROOT / "models" / "vgen-shapes"
VGEN = Path(os.environ.get("VGEN_BUILD_DIR", ROOT / "build")) / "bin" / "vgen"
needs_vgen = pytest.mark.skipif(not VGEN.exists(), reason="build/bin/vgen not built")
SMALL = ["--width", "128", "--height", "128", "--frames", "8", "--steps", "4", "--seed", "2"]
# bf16 vs float32 frames of the bundled model, the six demo clips at the demo's size: measured
# 43.2-55.5 dB (docs/PERFORMANCE.md, "bf16 on CPU: the bundled model"); a render that ignored the
# variant (inf) or one bf16 wrecks (< 25 dB) fails.
MIN_PSNR = 25.0


def source_files() -> dict[str, bytes]:
    return {f.name: f.read_bytes() for f in MODEL.iterdir() if f.is_file()}


@pytest.fixture(scope="module")
def packages(tmp_path_factory):
    root = tmp_path_factory.mktemp("variants")
    torch.set_num_threads(1)
    before = source_files()
    variants.make_variants(MODEL, root / "both", bf16=True, default=None, compile=None)
    variants.make_variants(MODEL, root / "bf16_default", bf16=True, default="bfloat16", compile=None)
    variants.make_variants(MODEL, root / "float32", bf16=False, default=None, compile=None)
    assert source_files() == before  # the shipped package is untouched (its bf16 file is hard-linked, not written)
    return root


def test_the_variant_is_a_bf16_denoiser_listed_under_precisions(packages):
    m = json.loads((packages / "both" / "manifest.json").read_text())
    assert m["precisions"] == {"default": "float32", "variants": {"bfloat16": {"transformer": "transformer_bf16"}}}
    entry = m["components"]["transformer_bf16"]
    assert entry["dtype"] == "bfloat16" and entry["format"] == "torchscript"
    weights = torch.jit.load(str(packages / "both" / entry["file"])).state_dict().values()
    assert all(t.dtype == torch.bfloat16 for t in weights if t.is_floating_point())
    checks = m["export_checks"]["transformer_bf16"]["checks"]
    assert all(c["max_abs_diff"] <= c["tolerance"] for c in checks)  # the file is the eager bf16 module
    assert all(c["max_abs_diff_vs_float32"] > 0 for c in checks)  # and it is not float32
    d = json.loads((packages / "bf16_default" / "manifest.json").read_text())
    assert d["precisions"]["default"] == "bfloat16"
    # the shipped package is what --bf16 --default bfloat16 makes (same weights, same manifest sections)
    shipped = json.loads((MODEL / "manifest.json").read_text())
    assert shipped["precisions"] == d["precisions"]
    assert shipped["components"]["transformer_bf16"]["dtype"] == "bfloat16"
    ours = torch.jit.load(str(packages / "bf16_default" / "transformer_bf16.pt")).state_dict()
    theirs = torch.jit.load(str(MODEL / "transformer_bf16.pt")).state_dict()
    assert ours.keys() == theirs.keys() and all(torch.equal(ours[k], theirs[k]) for k in ours)
    f32 = json.loads((packages / "float32" / "manifest.json").read_text())
    assert "precisions" not in f32 and "transformer_bf16" not in f32["components"]
    assert not (packages / "float32" / "transformer_bf16.pt").exists()


def test_refusals_name_what_is_wrong(tmp_path):
    with pytest.raises(ValueError, match="--default bfloat16 needs --bf16"):
        variants.make_variants(MODEL, tmp_path / "x", bf16=False, default="bfloat16", compile=None)
    assert not (tmp_path / "x").exists()
    with pytest.raises(ValueError, match="is the source package"):
        variants.make_variants(MODEL, MODEL, bf16=True, default=None, compile=None)


def render(package: Path, out: Path, *args: str) -> dict:
    fmt = ["--format", "png"] if not out.suffix else []
    r = subprocess.run([str(VGEN), "render", "a blue triangle moving left", "--model", str(package), *SMALL, *fmt,
                        "--json", "-o", str(out), *args], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


def content_key(video: Path) -> str:
    """The "vgen:<hex>" comment vgen writes into each output: the job's content key."""
    tags = subprocess.run(["ffprobe", "-v", "error", "-show_entries", "format_tags=comment", "-of", "json", str(video)],
                          capture_output=True, text=True, check=True).stdout
    comment = json.loads(tags)["format"]["tags"]["comment"]
    assert comment.startswith("vgen:"), comment
    return comment


def frames(directory: Path) -> np.ndarray:
    files = sorted(directory.glob("*.png"))
    assert files, f"no frames in {directory}"
    return np.stack([np.asarray(Image.open(f), dtype=np.float64) for f in files])


@needs_vgen
def test_bf16_renders_close_to_float32_and_the_default_picks_it(packages, tmp_path):
    f32 = render(packages / "both", tmp_path / "f32")
    bf16 = render(packages / "both", tmp_path / "bf16", "--precision", "bfloat16")
    default = render(packages / "bf16_default", tmp_path / "default")
    a, b = frames(tmp_path / "f32"), frames(tmp_path / "bf16")
    mse = float(((a - b) ** 2).mean())
    quality = math.inf if mse == 0 else 10 * math.log10(255.0 ** 2 / mse)
    assert MIN_PSNR < quality < math.inf, quality
    assert np.array_equal(frames(tmp_path / "default"), b)  # the default is the variant, same weights
    assert default["spec"]["precision"] == "bfloat16" and f32["spec"]["precision"] == "float32"
    # one package, two videos: two keys
    render(packages / "both", tmp_path / "f32.mp4")
    render(packages / "both", tmp_path / "bf16.mp4", "--precision", "bfloat16")
    assert content_key(tmp_path / "f32.mp4") != content_key(tmp_path / "bf16.mp4")
