"""`vgen extend` (issue 34 item 4, the image-to-video fallback) end to end on the tiny random Wan
2.1 I2V package: a clip is rendered, then extended twice; each result is one video stream of
input + new - 1 frames, its first frames are the input's (the seam frame is the input's last
frame, measured as PSNR after the encode round trip), the new segment is what `render --image`
of that last frame gives, and the output keeps the input's frame rate. The same job runs over
HTTP and from a batch line. Refusals name the field: extend with a package that takes no image,
without a video, with a file that is no video, with one frame, with strength, with a non-boolean
extend (an extend job with an image is refused in stages.job_spec).

The tiny package's weights are random, so what the new frames show says nothing about
continuity of motion; what is checked is the mechanism: the join, and that the conditioning
picture is the clip's last frame (an extension equals `vgen render --image` of that frame up to
the difference between ffmpeg's and vgen's YUV->RGB conversion of it)."""
from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from vgen_reference.wan_i2v_parity import test_image as pattern
from test_cli_serve import Server
from tiny_packages import tiny_wan

ROOT = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("VGEN_BUILD_DIR", ROOT / "build"))
VGEN = BUILD / "bin" / "vgen"
pytestmark = [pytest.mark.skipif(not VGEN.exists(), reason="build/bin/vgen not built"),
              pytest.mark.skipif(shutil.which("ffprobe") is None, reason="ffmpeg not installed")]

W, H, NEW = 48, 32, 9
JOB = ["--width", str(W), "--height", str(H), "--frames", str(NEW), "--steps", "2", "--seed", "3"]
ONE_FRAME = ["--width", str(W), "--height", str(H), "--frames", "1", "--steps", "2", "--seed", "3"]


@pytest.fixture(scope="module")
def packages(tmp_path_factory):
    import PIL.Image

    root = tmp_path_factory.mktemp("extend")
    tiny_wan(root / "i2v", "i2v")
    tiny_wan(root / "t2v")
    PIL.Image.fromarray(pattern(H, W)).save(root / "in.png")
    return root


def vgen(*args, timeout=300):
    return subprocess.run([str(VGEN), *map(str, args)], capture_output=True, text=True, timeout=timeout)


def probe(path) -> dict:
    out = json.loads(subprocess.run(["ffprobe", "-v", "error", "-count_frames", "-show_entries",
                                     "stream=codec_type,width,height,nb_read_frames,r_frame_rate", "-of", "json", str(path)],
                                    capture_output=True, text=True, check=True).stdout)
    return out


def frames_of(path) -> np.ndarray:
    """[N, H, W, 3] uint8, decoded by ffmpeg."""
    s = [x for x in probe(path)["streams"] if x["codec_type"] == "video"][0]
    raw = subprocess.run(["ffmpeg", "-v", "error", "-i", str(path), "-f", "rawvideo", "-pix_fmt", "rgb24", "-"],
                         capture_output=True, check=True).stdout
    return np.frombuffer(raw, np.uint8).reshape(-1, s["height"], s["width"], 3)


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = float(np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2))
    return float("inf") if mse == 0 else 10 * np.log10(255.0 ** 2 / mse)


def one_video_stream(path, frames: int, fps: str = "16/1") -> None:
    streams = probe(path)["streams"]
    assert len(streams) == 1 and streams[0]["codec_type"] == "video", streams
    assert (streams[0]["width"], streams[0]["height"]) == (W, H)
    assert int(streams[0]["nb_read_frames"]) == frames
    assert streams[0]["r_frame_rate"] == fps


@pytest.fixture(scope="module")
def base(packages):
    out = packages / "base.mp4"
    # 16 fps, not the package's 8: the extensions keep the clip's rate without being told.
    r = vgen("render", "a red circle", "-o", out, "--model", packages / "i2v", "--image", packages / "in.png", *JOB, "--fps", "16")
    assert r.returncode == 0, r.stderr
    one_video_stream(out, NEW)
    return out


def test_extend_twice_sums_the_frames_in_one_stream_and_keeps_the_input(packages, base, tmp_path):
    first, second = tmp_path / "first.mp4", tmp_path / "second.mp4"
    r = vgen("extend", base, "the circle rolls on", "-o", first, "--model", packages / "i2v", *JOB)
    assert r.returncode == 0, r.stderr
    one_video_stream(first, NEW + NEW - 1)
    r = vgen("extend", first, "and further", "-o", second, "--model", packages / "i2v", *JOB)
    assert r.returncode == 0, r.stderr
    one_video_stream(second, NEW + 2 * (NEW - 1))

    clip, once, twice = frames_of(base), frames_of(first), frames_of(second)
    # The input's frames come first, one more encode round trip away (x264 at the default crf).
    prefix = [psnr(once[i], clip[i]) for i in range(NEW)]
    seam = psnr(once[NEW - 1], clip[NEW - 1])
    print(f"PSNR of the seam frame vs the input's last frame: {seam:.1f} dB; of the input's frames: min {min(prefix):.1f} dB")
    assert seam > 30 and min(prefix) > 30, prefix
    seam2 = psnr(twice[len(once) - 1], once[-1])
    print(f"second extension: seam frame {seam2:.1f} dB")
    assert seam2 > 30
    # The new frames are new: not a copy of the seam frame.
    assert psnr(once[NEW], once[NEW - 1]) < seam


def test_the_new_segment_is_what_render_image_of_the_last_frame_gives(packages, base, tmp_path):
    """extend(clip) renders what `render --image <the clip's last frame>` renders with the same job,
    frame for frame after the seam (an offset or a dropped frame would show: the segment's frames
    differ from each other). Not bit-identical: vgen decodes the clip's last frame with its own
    YUV->RGB conversion, the PNG here comes from ffmpeg's, and the joined stream is encoded with
    the clip before it. The tiny random model barely depends on its image (the same job extending
    the clip flipped left to right differed from it by about as much), so this checks the wiring,
    not what a real model makes of the frame."""
    import PIL.Image

    extended = tmp_path / "ext.mp4"
    assert vgen("extend", base, "next", "-o", extended, "--model", packages / "i2v", *JOB).returncode == 0
    last = tmp_path / "last.png"
    PIL.Image.fromarray(frames_of(base)[-1]).save(last)
    direct = tmp_path / "direct.mp4"
    r = vgen("render", "next", "-o", direct, "--model", packages / "i2v", "--image", last, *JOB, "--fps", "16")
    assert r.returncode == 0, r.stderr
    new, same = frames_of(extended)[NEW:], frames_of(direct)
    agree = psnr(new, same[1:])
    shifted = psnr(new[1:], same[1:-1])
    print(f"new frames vs render --image of the last frame: {agree:.1f} dB; shifted by one frame: {shifted:.1f} dB")
    assert agree > 35 and agree > shifted + 5, (agree, shifted)


def test_extend_keeps_the_input_s_frame_rate_and_fits_its_size(packages, tmp_path):
    clip = tmp_path / "testsrc.mp4"
    subprocess.run(["ffmpeg", "-v", "error", "-y", "-f", "lavfi", "-i", "testsrc=s=64x48:r=12:d=1", "-c:v", "libx264",
                    "-pix_fmt", "yuv420p", str(clip)], check=True)
    out = tmp_path / "out.mp4"
    r = vgen("extend", clip, "next", "-o", out, "--model", packages / "i2v", *JOB)
    assert r.returncode == 0, r.stderr
    one_video_stream(out, 12 + NEW - 1, fps="12/1")  # the clip's rate, not the package's 8
    out24 = tmp_path / "out24.mp4"
    r = vgen("extend", clip, "next", "-o", out24, "--model", packages / "i2v", *JOB, "--fps", "24")
    assert r.returncode == 0, r.stderr
    one_video_stream(out24, 12 + NEW - 1, fps="24/1")


def test_extend_refusals_name_the_field_and_leave_no_output(packages, base, tmp_path):
    out = tmp_path / "o.mp4"
    cases = [
        (["extend", base, "next", "-o", out, "--model", packages / "t2v", *JOB], "extend: model "),
        (["extend", tmp_path / "none.mp4", "next", "-o", out, "--model", packages / "i2v", *JOB], "video: "),
        (["extend", packages / "in.png", "next", "-o", out, "--model", packages / "i2v", *JOB], "video: "),
        (["extend", base, "next", "-o", out, "--model", packages / "i2v", *ONE_FRAME], "frames: "),
    ]
    for args, says in cases:
        r = vgen(*args)
        assert r.returncode == 2 and f"error: {says}" in r.stderr, (args, r.returncode, r.stderr)
        assert not out.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_extend_over_http_is_the_same_job(packages, base, tmp_path):
    out = tmp_path / "out"
    server = Server(packages / "i2v", out)
    try:
        b64 = base64.b64encode(base.read_bytes()).decode()
        spec = {"prompt": "the circle rolls on", "width": W, "height": H, "frames": NEW, "steps": 2, "seed": 3}
        status, _, body = server.json("POST", "/v1/jobs", {**spec, "video": b64, "extend": True})
        assert status == 202, body
        done = server.wait_status(body["id"], {"done", "failed"})
        assert done["status"] == "done", done
        status, _, video = server.request("GET", f"/v1/jobs/{body['id']}/video")
        assert status == 200
        (tmp_path / "http.mp4").write_bytes(video)
        one_video_stream(tmp_path / "http.mp4", NEW + NEW - 1)
        for bad, says in [({"extend": True}, "extend: needs video"),
                          ({"extend": True, "video": b64, "strength": 0.5}, "strength: "),
                          ({"extend": 1, "video": b64}, "extend: must be true or false")]:
            status, _, body = server.json("POST", "/v1/jobs", {**spec, **bad})
            assert status == 400 and body["error"]["message"].startswith(says), (bad, status, body)
    finally:
        server.stop()


def test_a_batch_line_extends_a_clip_beside_the_file(packages, base, tmp_path):
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    shutil.copy(base, jobs / "clip.mp4")
    spec = {"width": W, "height": H, "frames": NEW, "steps": 2, "seed": 3}
    lines = [{"prompt": "next", "name": "longer", "video": "clip.mp4", "extend": True, **spec},
             {"prompt": "next", "name": "bad", "extend": True, **spec}]
    prompts = jobs / "prompts.jsonl"
    prompts.write_text("".join(json.dumps(line) + "\n" for line in lines))
    out = tmp_path / "out"
    r = vgen("batch", prompts, "--out", out, "--model", packages / "i2v", "--json")
    summary = {j["name"]: j for j in json.loads(r.stdout)["jobs"]}
    assert summary["longer"]["status"] == "done", r.stdout
    assert summary["bad"]["status"] == "invalid" and "extend: needs video" in summary["bad"]["error"], summary["bad"]
    one_video_stream(out / "longer.mp4", NEW + NEW - 1)
