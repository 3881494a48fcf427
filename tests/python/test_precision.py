"""A job's "precision" (issue 24): one package carries float32 and int8 denoisers
(`--quantize int8`), each job picks one (CLI --precision, JSONL/HTTP "precision"; default: the
package's precisions.default). int8 renders close to float32 but not equal to it, for Wan and
LTX; a precision the package lacks is exit 2 naming the field; int8 is part of the content key
(no result-cache hit across precisions) and jobs of different precisions never share a
denoiser call."""
from __future__ import annotations

import json
import math
import os
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

ROOT = Path(__file__).resolve().parents[2]
from vgen_export import ltx as el
from vgen_export import wan as ew
from vgen_export.tiny_ltx import write_tiny_ltx
from vgen_export.tiny_wan import write_tiny_wan

BUILD = Path(os.environ.get("VGEN_BUILD_DIR", ROOT / "build"))
VGEN = BUILD / "bin" / "vgen"
pytestmark = pytest.mark.skipif(not VGEN.exists(), reason="build/bin/vgen not built")
SMALL = ["--width", "64", "--height", "64", "--frames", "9", "--steps", "4"]
# int8 vs float32 frames, tiny random models: measured 30-45 dB (bench/int8.py); a frame with
# no int8 effect at all (inf) or one that int8 wrecks (< 20 dB) fails.
MIN_PSNR = 20.0


@pytest.fixture(scope="module")
def packages(tmp_path_factory):
    root = tmp_path_factory.mktemp("precision")
    ew.export_wan(write_tiny_wan(root / "wan-src", seed=0), root / "wan", tiny=True, seed=0, quantize="int8")
    el.export_ltx(write_tiny_ltx(root / "ltx-src", seed=0), root / "ltx", tiny=True, seed=0, quantize="int8")
    return {"wan": root / "wan", "ltx": root / "ltx"}


def render(package, out, *args, size=SMALL):
    # One fixed thread split: a float32 render's last bits follow the intra-op thread count (measured
    # on an Intel Xeon with AMX: a fresh tune cache's first split differs from the tuned one by 1/255
    # in 3 values), and the renders compared here must differ only in their weights.
    fixed = Path(tempfile.gettempdir()) / f"vgen-test-precision-threads-{os.getpid()}.json"  # not in out's folder: tests look there
    fixed.write_text(json.dumps({"threads": {"per_device": 1, "intra_op": 1}}))
    cmd = [str(VGEN), "render", "a red circle moving left", "-o", str(out), "--model", str(package), "--seed", "3",
           "--format", "png", "--config", str(fixed), *size, *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300)


def frames(directory: Path) -> np.ndarray:
    files = sorted(directory.glob("*.png"))
    assert files, f"no frames in {directory}"
    return np.stack([np.asarray(Image.open(f), dtype=np.float64) for f in files])


def psnr(a, b) -> float:
    mse = float(((a - b) ** 2).mean())
    return math.inf if mse == 0 else 10 * math.log10(255.0 ** 2 / mse)


@pytest.mark.parametrize("family", ["wan", "ltx"])
def test_int8_renders_close_to_float32_but_not_equal(packages, tmp_path, family):
    got = {}
    for name, args in (("default", ()), ("float32", ("--precision", "float32")), ("int8", ("--precision", "int8"))):
        r = render(packages[family], tmp_path / f"{name}.png", *args)
        assert r.returncode == 0, r.stderr
        got[name] = frames(tmp_path / f"{name}.png")
    assert np.array_equal(got["default"], got["float32"])  # the package's default is float32
    quality = psnr(got["float32"], got["int8"])
    assert MIN_PSNR < quality < math.inf, quality


def test_a_precision_the_package_lacks_is_exit_2_naming_the_field(tmp_path):
    bundled = ROOT / "models" / "vgen-shapes"  # float32 and its bf16 denoiser (the default), no int8
    size = ["--width", "128", "--height", "128", "--frames", "8", "--steps", "2"]
    r = render(bundled, tmp_path / "x.png", "--precision", "int8", size=size)
    assert r.returncode == 2
    assert "precision: model 'vgen-shapes' has no int8 variant (it has: float32, bfloat16; export one with --quantize int8)" in r.stderr
    r = render(bundled, tmp_path / "y.png", "--precision", "int4", size=size)
    assert r.returncode == 2 and "precision: unknown 'int4'" in r.stderr
    assert not any(tmp_path.iterdir())


def batch(package, tmp_path, name, jobs):
    lines = tmp_path / f"{name}.jsonl"
    lines.write_text("".join(json.dumps({"prompt": "a red circle moving left", **j}) + "\n" for j in jobs))
    config = tmp_path / "config.json"  # a long batching wait: the four jobs are all queued before any group runs
    config.write_text(json.dumps({"batching": {"max_batch": 4, "wait_ms": 3000}}))
    trace = tmp_path / f"{name}.trace.json"
    r = subprocess.run([str(VGEN), "batch", str(lines), "--out", str(tmp_path / name), "--model", str(package),
                        "--config", str(config), "--trace", str(trace), "--json", "--width", "32", "--height", "32",
                        "--frames", "5", "--steps", "3"], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    steps = [e["args"]["batch"] for e in json.loads(trace.read_text())["traceEvents"]
             if e.get("ph") == "X" and e["name"] == "denoise step"]
    return json.loads(r.stdout), steps


def test_precisions_never_share_a_call_nor_a_content_key(packages, tmp_path):
    jobs = [{"seed": 1}, {"seed": 1, "precision": "int8"}, {"seed": 2, "precision": "float32"},
            {"seed": 2, "precision": "int8"}]
    summary, steps = batch(packages["wan"], tmp_path, "mixed", jobs)
    assert [j["status"] for j in summary["jobs"]] == ["done"] * 4
    # Same prompt and seed at another precision is another video: no result-cache hit; seed 1
    # with the default precision and seed 2 with an explicit float32 are not hits either.
    assert not any(j["cache_hit"] for j in summary["jobs"])
    assert sum(steps) == 4 * 3 and max(steps) <= 2  # two groups of two, never one of four
    # The control: four jobs of one precision do share a call.
    _, same = batch(packages["wan"], tmp_path, "same", [{"seed": s, "precision": "int8"} for s in range(4)])
    assert sum(same) == 4 * 3 and max(same) == 4
