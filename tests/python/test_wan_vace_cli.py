"""Wan VACE end to end (issue 34 item 3): `vgen render --video control.mp4 --mask-video m.mp4
--reference-image r.png` on the tiny VACE package gives an mp4 (ffprobe: codec, size, frame
count); the mask, the reference and the conditioning scale change the result; batch lines and
HTTP (JSON base64 and multipart) take the same fields; hostile inputs for the new fields (a
mask of another length or size than the control video, a non-image reference, a package
without them) are refused naming the field (exit 2 / HTTP 400) with nothing left behind."""
from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from test_cli_serve import Server
from test_video_input import leftovers, multipart, probe_frames
from tiny_packages import tiny_wan

ROOT = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("VGEN_BUILD_DIR", ROOT / "build"))
VGEN = BUILD / "bin" / "vgen"
pytestmark = [pytest.mark.skipif(not VGEN.exists(), reason="build/bin/vgen not built"),
              pytest.mark.skipif(shutil.which("ffmpeg") is None, reason="ffmpeg not installed")]

SIZE = ["--width", "48", "--height", "32", "--frames", "9", "--steps", "3", "--seed", "3"]
SPEC = {"width": 48, "height": 32, "frames": 9, "steps": 3, "seed": 3}


def ffmpeg(*args: str) -> None:
    subprocess.run(["ffmpeg", "-v", "error", "-nostdin", "-y", *args], check=True, timeout=120)


def run(*args, timeout=300):
    return subprocess.run([str(VGEN), *map(str, args)], capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def packages(tmp_path_factory):
    root = tmp_path_factory.mktemp("vace")
    return {"vace": tiny_wan(root / "vace", "vace"), "t2v": tiny_wan(root / "t2v")}


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    d = tmp_path_factory.mktemp("inputs")
    ffmpeg("-f", "lavfi", "-i", "testsrc=s=48x32:r=8", "-frames:v", "9", "-c:v", "libx264", "-pix_fmt", "yuv420p",
           str(d / "control.mp4"))
    # White box in the middle (regenerate), black around it; lossless so the threshold is exact.
    ffmpeg("-f", "lavfi", "-i", "color=c=black:s=48x32:r=8", "-vf", "drawbox=x=12:y=8:w=24:h=16:color=white:t=fill",
           "-frames:v", "9", "-c:v", "ffv1", str(d / "mask.mkv"))
    ffmpeg("-f", "lavfi", "-i", "color=c=black:s=48x32:r=8", "-frames:v", "5", "-c:v", "ffv1", str(d / "short_mask.mkv"))
    ffmpeg("-f", "lavfi", "-i", "color=c=black:s=64x32:r=8", "-frames:v", "9", "-c:v", "ffv1", str(d / "wide_mask.mkv"))
    ffmpeg("-f", "lavfi", "-i", "testsrc2=s=40x24", "-frames:v", "1", str(d / "ref.png"))
    (d / "text.png").write_text("not an image at all\n")
    return d


def test_render_vace_end_to_end_mp4_and_the_inputs_matter(packages, inputs, tmp_path):
    outs = {}
    variants = {"all": ["--mask-video", inputs / "mask.mkv", "--reference-image", inputs / "ref.png"],
                "no_mask": ["--reference-image", inputs / "ref.png"],
                "no_ref": ["--mask-video", inputs / "mask.mkv"],
                "scaled": ["--mask-video", inputs / "mask.mkv", "--reference-image", inputs / "ref.png",
                           "--conditioning-scale", "0.3"]}
    for name, extra in variants.items():
        out = tmp_path / f"{name}.mp4"
        r = run("render", "a cat", "-o", out, "--model", packages["vace"], *SIZE, "--video", inputs / "control.mp4",
                *extra, "--json")
        assert r.returncode == 0, r.stderr[-3000:]
        outs[name] = (out, json.loads(r.stdout)["spec"])
    out, spec = outs["all"]
    probe = subprocess.run(["ffprobe", "-v", "error", "-select_streams", "v:0", "-show_entries", "stream=codec_name",
                            "-of", "default=nw=1:nk=1", str(out)], capture_output=True, text=True, check=True)
    assert probe.stdout.strip() == "h264"
    assert probe_frames(out) == (9, 48, 32)  # the reference frame is not in the output
    assert spec["mask_video_sha256"] == hashlib.sha256((inputs / "mask.mkv").read_bytes()).hexdigest()
    assert spec["reference_images_sha256"] == [hashlib.sha256((inputs / "ref.png").read_bytes()).hexdigest()]
    assert outs["scaled"][1]["conditioning_scale"] == 0.3
    videos = {name: o.read_bytes() for name, (o, _) in outs.items()}
    assert len(set(videos.values())) == len(videos)  # each input changes the video


@pytest.mark.parametrize("extra, field, says", [
    (["--mask-video", "short_mask.mkv"], "mask_video", "5 frames of 48x32; it must match the control video's 9 frames"),
    (["--mask-video", "wide_mask.mkv"], "mask_video", "9 frames of 64x32"),
    (["--reference-image", "text.png"], "reference_images[0]", ""),
    (["--reference-image", "ref.png", "--reference-image", "missing.png"], "reference_images[1]", ""),
    (["--conditioning-scale", "11"], "conditioning_scale", "between 0 and 10"),
    (["--strength", "0.5"], "strength", "control video"),
])
def test_render_refuses_bad_vace_inputs_naming_the_field(packages, inputs, tmp_path, extra, field, says):
    out = tmp_path / "x.mp4"
    extra = [inputs / e if e.endswith((".mkv", ".png")) else e for e in extra]
    r = run("render", "a cat", "-o", out, "--model", packages["vace"], *SIZE, "--video", inputs / "control.mp4", *extra)
    assert r.returncode == 2, r.stderr[-2000:]
    assert f"{field}: " in r.stderr and says in r.stderr, r.stderr[-2000:]
    assert not out.exists()
    leftover = [p.name for p in tmp_path.rglob("*") if p.suffix in (".mp4", ".part", ".tmp") or ".tmp" in p.name]
    assert leftover == []  # no output, no temporary


def test_a_package_without_vace_refuses_the_fields_by_name(packages, inputs, tmp_path):
    for extra, field in ((["--reference-image", inputs / "ref.png"], "reference_images"),
                         (["--conditioning-scale", "0.5"], "conditioning_scale"),
                         (["--video", inputs / "control.mp4", "--mask-video", inputs / "mask.mkv"], "video")):
        r = run("render", "a cat", "-o", tmp_path / "x.mp4", "--model", packages["t2v"], *SIZE, *extra)
        assert r.returncode == 2 and f"{field}: model 't2v'" in r.stderr, (field, r.stderr[-2000:])


def test_batch_lines_take_the_fields_with_paths_beside_the_file(packages, inputs, tmp_path):
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    for name in ("control.mp4", "mask.mkv", "ref.png", "short_mask.mkv"):
        shutil.copy(inputs / name, jobs / name)
    lines = [{"prompt": "a cat", "name": "ok", "video": "control.mp4", "mask_video": "mask.mkv",
              "reference_images": ["ref.png"], "conditioning_scale": 0.8, **SPEC},
             {"prompt": "a dog", "name": "bad", "video": "control.mp4", "mask_video": "short_mask.mkv", **SPEC}]
    prompts = jobs / "prompts.jsonl"
    prompts.write_text("".join(json.dumps(line) + "\n" for line in lines))
    out = tmp_path / "out"
    r = run("batch", prompts, "--out", out, "--model", packages["vace"], "--json")
    summary = {j["name"]: j for j in json.loads(r.stdout)["jobs"]}
    assert summary["ok"]["status"] == "done", r.stdout
    assert summary["bad"]["status"] == "invalid" and "mask_video: 5 frames" in summary["bad"]["error"], summary["bad"]
    assert sorted(p.name for p in out.iterdir() if p.suffix == ".mp4") == ["ok.mp4"]


def test_serve_takes_vace_uploads_and_refuses_bad_ones_keeping_nothing(packages, inputs, tmp_path):
    out = tmp_path / "out"
    server = Server(packages["vace"], out)
    try:
        b64 = lambda name: base64.b64encode((inputs / name).read_bytes()).decode()  # noqa: E731
        body = {"prompt": "a cat", **SPEC, "video": b64("control.mp4"), "mask_video": b64("mask.mkv"),
                "reference_images": [b64("ref.png")]}
        status, _, job = server.json("POST", "/v1/jobs", body)
        assert status == 202, job
        data, ctype = multipart({"spec": json.dumps({"prompt": "a cat", **SPEC}),
                                 "video": ("c.mp4", (inputs / "control.mp4").read_bytes(), "video/mp4"),
                                 "mask_video": ("m.mkv", (inputs / "mask.mkv").read_bytes(), "video/x-matroska"),
                                 "reference_images": ("r.png", (inputs / "ref.png").read_bytes(), "image/png")})
        status, _, raw = server.request("POST", "/v1/jobs", data, {"Content-Type": ctype})
        assert status == 202, raw
        second = json.loads(raw)
        for j in (job["id"], second["id"]):
            done = server.wait_status(j, {"done", "failed"})
            assert done["status"] == "done", done
        # A remix of a VACE video re-renders with its inputs (its video is a control input, not a
        # video-to-video start): strength is refused by name, and once the finished job's uploads
        # are released it says so (409 input_gone) instead of asking for a strength it never sent.
        status, _, err = server.json("POST", f"/v1/videos/{job['id']}/remix", {"prompt": "a dog", "strength": 0.5})
        assert status == 400 and err["error"]["param"] == "strength" and "control input" in err["error"]["message"], err
        status, _, err = server.json("POST", f"/v1/videos/{job['id']}/remix", {"prompt": "a dog"})
        assert status == 409 and err["error"]["code"] == "input_gone", (status, err)
        for bad, field in (({**body, "mask_video": b64("short_mask.mkv")}, "mask_video"),
                           ({**body, "reference_images": [b64("ref.png"), b64("text.png")]}, "reference_images[1]")):
            status, _, err = server.json("POST", "/v1/jobs", bad)
            assert status == 400 and err["error"]["message"].startswith(field + ": "), (status, err)
        status, _, _ = server.json("GET", "/healthz")  # still serving
        assert status == 200
    finally:
        server.stop()
    assert leftovers(out) == []  # the finished jobs' uploads released, the refused ones never kept
