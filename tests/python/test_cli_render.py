"""`vgen render` end to end on the tiny random Wan package: outputs probed with ffprobe,
and bad input rejected with exit code 2, a message naming the problem, and no file left."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tiny_packages import tiny_wan

BUILD = Path(os.environ.get("VGEN_BUILD_DIR", Path(__file__).resolve().parents[2] / "build"))
VGEN = BUILD / "bin" / "vgen"
pytestmark = pytest.mark.skipif(not VGEN.exists(), reason="build/bin/vgen not built")


@pytest.fixture(scope="module")
def package(tmp_path_factory):
    root = tmp_path_factory.mktemp("render")
    return tiny_wan(root / "pkg")


def render(package, out, *args):
    cmd = [str(VGEN), "render", "a red circle moving left", "-o", str(out), "--model", str(package), *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300)


def probe(path):
    out = subprocess.run(["ffprobe", "-v", "error", "-count_frames", "-show_entries",
                          "stream=codec_name,width,height,r_frame_rate,nb_read_frames", "-of", "json", str(path)],
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out)["streams"][0]


def render_and_probe(package, prompt: str, out: Path, *args) -> tuple[subprocess.CompletedProcess, list[dict]]:
    """`vgen render PROMPT -o OUT --model PACKAGE ARGS`, which must succeed, and the file's streams
    as ffprobe reads them, every frame counted (codec_type, codec_name, width, height,
    nb_read_frames). For the family exporters' tests, which render with the package they export."""
    r = subprocess.run([str(VGEN), "render", prompt, "-o", str(out), "--model", str(package), *args],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    streams = json.loads(subprocess.run(
        ["ffprobe", "-v", "error", "-count_frames", "-show_entries", "stream=codec_type,codec_name,width,height,nb_read_frames",
         "-of", "json", str(out)], capture_output=True, text=True, check=True).stdout)["streams"]
    return r, streams


@pytest.mark.parametrize("ext,codec", [("mp4", "h264"), ("webm", "vp9"), ("gif", "gif")])
def test_render_writes_probed_video(package, tmp_path, ext, codec):
    out = tmp_path / f"clip.{ext}"
    r = render(package, out, "--width", "48", "--height", "32", "--frames", "9", "--steps", "2", "--fps", "12")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == str(out)
    s = probe(out)
    assert s["codec_name"] == codec
    assert (s["width"], s["height"]) == (48, 32)
    num, den = map(int, s["r_frame_rate"].split("/"))
    if codec == "gif":  # GIF delays are whole centiseconds: 12 fps cannot be exact
        assert abs(num / den - 12) < 0.25
    else:
        assert s["r_frame_rate"] == "12/1"
    assert int(s["nb_read_frames"]) == 9
    assert sorted(p.name for p in tmp_path.iterdir()) == [out.name]  # no temp files left


def test_render_png_frames(package, tmp_path):
    out = tmp_path / "frames"
    r = render(package, out, "--format", "png", "--frames", "5", "--steps", "2")
    assert r.returncode == 0, r.stderr
    frames = sorted(out.iterdir())
    assert len(frames) == 5 and all(f.suffix == ".png" for f in frames)
    assert probe(frames[0])["codec_name"] == "png"


def corrupt_copy(package, tmp_path, how):
    pkg = tmp_path / "pkg"
    shutil.copytree(package, pkg)
    if how == "truncated":
        data = (pkg / "transformer.pt").read_bytes()
        (pkg / "transformer.pt").write_bytes(data[: len(data) // 2])
    elif how == "flipped":
        data = bytearray((pkg / "transformer.pt").read_bytes())
        data[len(data) // 2] ^= 0xFF
        (pkg / "transformer.pt").write_bytes(bytes(data))
    elif how == "version":
        m = json.loads((pkg / "manifest.json").read_text())
        m["format_version"] = 99
        (pkg / "manifest.json").write_text(json.dumps(m))
    elif how == "no_manifest":
        (pkg / "manifest.json").unlink()
    return pkg


@pytest.mark.parametrize("how,needle", [("truncated", "truncated"), ("flipped", "corrupt"),
                                        ("version", "format_version 99"), ("no_manifest", "manifest.json")])
def test_bad_package_exits_2(package, tmp_path, how, needle):
    pkg = corrupt_copy(package, tmp_path, how)
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    r = render(pkg, out_dir / "clip.mp4")
    assert r.returncode == 2, r.stderr
    assert needle in r.stderr
    assert list(out_dir.iterdir()) == []


@pytest.mark.parametrize("args,needle", [
    (["--width", "250"], "width: must be a multiple of 16"),
    (["--frames", "16"], "frames: must be 4k+1"),
    (["--steps", "0"], "steps:"),
    (["--height", "100000"], "height:"),
    (["--scheduler", "NoSuchScheduler"], "scheduler:"),
    (["--seed", "9223372036854775808"], "seed:"),          # above the documented 2^63 - 1
    (["--guidance", "1e9"], "guidance:"),
    (["--fps", "0"], "fps:"),
    (["--negative-prompt", "x" * 5000], "negative_prompt:"),  # longer than 4096 bytes
    (["--priority", "101"], "priority: must be an integer between -100 and 100"),
])
def test_bad_job_exits_2(package, tmp_path, args, needle):
    r = render(package, tmp_path / "clip.mp4", *args)
    assert r.returncode == 2, r.stderr
    assert needle in r.stderr
    assert list(tmp_path.iterdir()) == []


def test_very_long_and_invalid_utf8_prompts_exit_2(package, tmp_path):
    for prompt, needle in [("a" * 10000, "prompt:"), (b"bad \xff utf8".decode("latin-1"), "")]:
        r = subprocess.run([str(VGEN).encode(), b"render", prompt.encode("latin-1"), b"-o", str(tmp_path / "a.mp4").encode(),
                            b"--model", str(package).encode()], capture_output=True, timeout=120)
        assert r.returncode == 2, r.stderr
        assert needle.encode() in r.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("config,needle", [
    ('{"stages": {"denoise": {"workers": 0}}}', "stages.denoise.workers"),
    ('{"devices": "tpu:0"}', "tpu"),
    ('{"retry": {"attempts": "many"}}', "retry.attempts"),
    ('{"faults": {"stages": {"denoise": {"transient_rate": 3}}}}', "faults.stages.denoise.transient_rate"),
    ('{"model": ', "not valid JSON"),
])
def test_bad_config_exits_2(package, tmp_path, config, needle):
    cfg = tmp_path / "c.json"
    cfg.write_text(config)
    out = tmp_path / "out"
    out.mkdir()
    r = render(package, out / "a.mp4", "--config", str(cfg))
    assert r.returncode == 2, r.stderr
    assert needle in r.stderr
    assert list(out.iterdir()) == []


def test_empty_prompt_and_missing_model_exit_2(package, tmp_path):
    r = subprocess.run([str(VGEN), "render", "", "-o", str(tmp_path / "a.mp4"), "--model", str(package)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "prompt" in r.stderr
    r = render(tmp_path / "nope", tmp_path / "a.mp4")
    assert r.returncode == 2 and "nope" in r.stderr
    r = render(package, tmp_path / "a.avi")
    assert r.returncode == 2 and "output" in r.stderr
    assert list(tmp_path.iterdir()) == []


def test_render_json_result(package, tmp_path):
    out = tmp_path / "clip.mp4"
    r = render(package, out, "--json", "--steps", "2", "--seed", "5")
    assert r.returncode == 0, r.stderr
    result = json.loads(r.stdout)
    assert result["status"] == "done" and result["output"] == str(out)
    assert result["spec"]["seed"] == 5 and result["spec"]["steps"] == 2
    assert set(result["stage_seconds"]) == {"preprocess", "denoise", "decode", "encode"}
    assert result["device"] == "cpu:0"


@pytest.mark.parametrize("case", ["existing_directory", "png_onto_a_file", "parent_is_a_file", "missing_parent", "read_only_parent"])
def test_unusable_output_path_exits_2_before_rendering(package, tmp_path, case):
    """The output path is checked before the model loads: before the fix an existing directory
    named like the video (or a file where png frames go) failed with exit 1 after the render."""
    args = []
    if case == "existing_directory":
        out = tmp_path / "clip.mp4"
        out.mkdir()
        needle = f"output: '{out}' is a directory"
    elif case == "png_onto_a_file":
        out = tmp_path / "frames"
        out.write_bytes(b"not a directory")
        args = ["--format", "png"]
        needle = f"output: '{out}' is a file"
    elif case == "parent_is_a_file":
        (tmp_path / "file").write_bytes(b"")
        out = tmp_path / "file" / "clip.mp4"
        needle = "is not a directory"
    elif case == "missing_parent":
        out = tmp_path / "missing" / "clip.mp4"
        needle = "does not exist"
    else:
        if os.geteuid() == 0:
            pytest.skip("root writes to read-only directories")
        (tmp_path / "ro").mkdir(mode=0o555)
        out = tmp_path / "ro" / "clip.mp4"
        needle = "is not writable"
    r = render(package, out, "--steps", "40", *args)
    assert r.returncode == 2, r.stderr
    assert needle in r.stderr
    assert "denoise" not in r.stderr  # nothing ran (what a wall-clock bound here could only guess)
