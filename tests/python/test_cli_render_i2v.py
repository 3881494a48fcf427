"""`vgen render --image` end to end on each tiny random image-to-video package (Wan 2.1 I2V,
Wan 2.2 I2V-A14B's two experts, LTX-Video's image-to-video): the video is written and probed, a different first frame
gives a different video, and a missing or undecodable image exits 2 naming `image`, leaving
no file."""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from vgen_export import ltx as el
from vgen_export.tiny_ltx import write_tiny_ltx
from vgen_reference.wan_i2v_parity import test_image as pattern
from tiny_packages import tiny_wan

BUILD = Path(os.environ.get("VGEN_BUILD_DIR", Path(__file__).resolve().parents[2] / "build"))
VGEN = BUILD / "bin" / "vgen"
pytestmark = pytest.mark.skipif(not VGEN.exists(), reason="build/bin/vgen not built")


# Per package: (width, height, frames) of the clip rendered.
SIZES = {"i2v": (48, 32, 9), "a14b-i2v": (48, 32, 9), "ltx": (96, 64, 9)}


@pytest.fixture(scope="module", params=sorted(SIZES))
def package(tmp_path_factory, request):
    import PIL.Image

    root = tmp_path_factory.mktemp("render_" + request.param)
    if request.param == "ltx":
        el.export_ltx(write_tiny_ltx(root / "diffusers", seed=0), root / "pkg", dtype="float32", tiny=True, seed=0)
    else:
        tiny_wan(root / "pkg", request.param)
    w, h, _ = SIZES[request.param]
    pixels = pattern(h, w)
    PIL.Image.fromarray(pixels).save(root / "in.png")
    PIL.Image.fromarray(pixels[:, ::-1].copy()).resize((2 * w, 2 * h)).save(root / "other.jpg")  # another size too
    (root / "size").write_text(" ".join(map(str, SIZES[request.param])))
    return root


def render(root, out, *args):
    w, h, f = (root / "size").read_text().split()
    cmd = [str(VGEN), "render", "a red circle moving left", "-o", str(out), "--model", str(root / "pkg"),
           "--width", w, "--height", h, "--frames", f, "--steps", "2", "--seed", "3", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300)


def frames_of(path):
    return subprocess.run(["ffmpeg", "-v", "error", "-i", str(path), "-f", "rawvideo", "-pix_fmt", "rgb24", "-"],
                          capture_output=True, check=True).stdout


def test_render_with_an_image_writes_the_video(package, tmp_path):
    out = tmp_path / "clip.mp4"
    r = render(package, out, "--image", str(package / "in.png"))
    assert r.returncode == 0, r.stderr
    s = json.loads(subprocess.run(["ffprobe", "-v", "error", "-count_frames", "-show_entries",
                                   "stream=width,height,nb_read_frames", "-of", "json", str(out)],
                                  capture_output=True, text=True, check=True).stdout)["streams"][0]
    assert (s["width"], s["height"], int(s["nb_read_frames"])) == tuple(int(v) for v in (package / "size").read_text().split())
    # A JPEG of another size is resized to the video's: it runs, and its video differs.
    other = tmp_path / "other.mp4"
    r = render(package, other, "--image", str(package / "other.jpg"))
    assert r.returncode == 0, r.stderr
    assert frames_of(out) != frames_of(other)


@pytest.mark.parametrize("args", [[], ["--image", "/nonexistent/in.png"], ["--image", "NOTPNG"]])
def test_render_without_a_usable_image_exits_2_naming_it(package, tmp_path, args):
    if args and args[1] == "NOTPNG":
        bad = tmp_path / "bad.png"
        bad.write_text("not an image")
        args = ["--image", str(bad)]
    out = tmp_path / "o" / "clip.mp4"
    out.parent.mkdir()
    r = render(package, out, *args)
    if not args and package.name.startswith("render_ltx"):  # LTX's image is optional: text-to-video
        assert r.returncode == 0, r.stderr
        return
    assert r.returncode == 2, r.stderr
    assert "image" in r.stderr
    assert list(out.parent.iterdir()) == []
