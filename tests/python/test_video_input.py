"""Video input on the command line, in batch files and over HTTP (issue 34, item 1, and its
hostile inputs): a model that takes no video refuses one naming `video`; a video that is
truncated, has no video stream, has 10,000 frames, claims 16384x16384, is not a video at all,
or is larger than the limits is refused before any work, naming the field (exit 2 / HTTP 400;
HTTP 413 for a body over service.max_body_bytes, which is refused before it is parsed), with
no output and no upload or temporary file left behind, and the service keeps serving.

The "v2v" package here is the tiny text-to-video package exported with its VAE encoder
(``export_wan(video_input=True)``: manifest "inputs": {"video": "optional"}), so its jobs render
video-to-video (item 2) through the same validation, admission and upload paths; the last test
renders one end to end and reads the output with ffprobe."""
from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import struct
import subprocess
import time
from pathlib import Path

import pytest

from test_cli_serve import Server
from tiny_packages import tiny_wan

ROOT = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("VGEN_BUILD_DIR", ROOT / "build"))
VGEN = BUILD / "bin" / "vgen"
pytestmark = [pytest.mark.skipif(not VGEN.exists(), reason="build/bin/vgen not built"),
              pytest.mark.skipif(shutil.which("ffmpeg") is None, reason="ffmpeg not installed")]

SMALL = ["--width", "48", "--height", "32", "--frames", "5", "--steps", "2"]
SMALL_SPEC = {"width": 48, "height": 32, "frames": 5, "steps": 2}


def with_inputs(src: Path, dst: Path, inputs: dict) -> Path:
    shutil.copytree(src, dst)
    manifest = json.loads((dst / "manifest.json").read_text())
    manifest["inputs"] = inputs
    (dst / "manifest.json").write_text(json.dumps(manifest))
    return dst


@pytest.fixture(scope="module")
def packages(tmp_path_factory):
    root = tmp_path_factory.mktemp("video")
    return {"t2v": tiny_wan(root / "t2v"), "v2v": tiny_wan(root / "v2v", video_input=True)}


def ffmpeg(*args: str) -> None:
    subprocess.run(["ffmpeg", "-v", "error", "-nostdin", "-y", *args], check=True, timeout=120)


def crafted_huge(dst: Path, small: Path) -> None:
    """An MJPEG AVI whose headers (AVI and JPEG) claim 16384x16384. FFmpeg cannot encode such
    a video itself (av_image_check_size refuses any frame of (w+128)*(h+128) >= 2^28), so a
    40x24 one is made and its size fields rewritten: a few KB that a naive reader would
    allocate 768 MiB for."""
    ffmpeg("-f", "lavfi", "-i", "color=c=gray:s=40x24:r=8", "-frames:v", "2", "-c:v", "mjpeg", str(small))
    b = bytearray(small.read_bytes().replace(struct.pack("<II", 40, 24), struct.pack("<II", 16384, 16384)))
    i = b.find(b"\xff\xc0")
    assert i > 0
    while i > 0:
        assert b[i + 5:i + 9] == struct.pack(">HH", 24, 40)
        b[i + 5:i + 9] = struct.pack(">HH", 16384, 16384)
        i = b.find(b"\xff\xc0", i + 2)
    dst.write_bytes(bytes(b))


@pytest.fixture(scope="module")
def videos(tmp_path_factory):
    d = tmp_path_factory.mktemp("videos")
    ffmpeg("-f", "lavfi", "-i", "testsrc=s=64x48:r=8:d=2", "-c:v", "libx264", "-pix_fmt", "yuv420p", str(d / "good.mp4"))
    ffmpeg("-f", "lavfi", "-i", "testsrc=s=64x48:r=8:d=2", "-c:v", "libvpx-vp9", "-b:v", "200k", str(d / "good.webm"))
    good = (d / "good.mp4").read_bytes()
    (d / "truncated.mp4").write_bytes(good[: len(good) // 2])  # the index (moov) is at the end
    # Index first, media cut: the container lists frames that are not there.
    ffmpeg("-f", "lavfi", "-i", "testsrc=s=64x48:r=8:d=4", "-c:v", "libx264", "-pix_fmt", "yuv420p",
           "-movflags", "+faststart", str(d / "faststart.mp4"))
    fast = (d / "faststart.mp4").read_bytes()
    (d / "cut_media.mp4").write_bytes(fast[: len(fast) * 2 // 3])
    ffmpeg("-f", "lavfi", "-i", "sine=frequency=440:duration=1", "-c:a", "aac", str(d / "audio_only.mp4"))
    # 10,000 frames of 16x16 at 100 fps: 100 s, about 100 KB.
    ffmpeg("-f", "lavfi", "-i", "color=c=blue:s=16x16:r=100:d=100", "-c:v", "libx264", "-preset", "ultrafast",
           "-pix_fmt", "yuv420p", str(d / "frames_10000.mp4"))
    crafted_huge(d / "huge_16k.avi", d / "small.avi")
    (d / "text.mp4").write_text("this is a text file, not a video\n" * 20)
    ffmpeg("-f", "lavfi", "-i", "color=c=red:s=16x16", "-frames:v", "1", str(d / "picture.png"))
    shutil.copy(d / "picture.png", d / "image.mp4")  # a PNG picture named .mp4
    # Larger than videos.max_bytes of the servers below (1 MiB), and valid: noise does not compress.
    ffmpeg("-f", "lavfi", "-i", "testsrc=s=64x48:r=8:d=16", "-f", "lavfi", "-i", "anoisesrc=d=16:r=48000",
           "-c:v", "libx264", "-c:a", "pcm_s16le", "-t", "16", str(d / "large.mov"))
    assert (d / "large.mov").stat().st_size > (1 << 20)
    return d


HOSTILE = {  # file: what the message says after "video: "
    "truncated.mp4": "is not a video file we read",
    "cut_media.mp4": "truncated",
    "audio_only.mp4": "has no video stream",
    "frames_10000.mp4": "more than 1025 frames",
    "huge_16k.avi": "16384x16384 is larger than the limit",
    "text.mp4": "is not a video file we read",
    "image.mp4": "is not a video file we read",
}


def run(*args, timeout=300):
    return subprocess.run([str(VGEN), *map(str, args)], capture_output=True, text=True, timeout=timeout)


def test_render_refuses_each_hostile_video_with_exit_2_naming_the_field(packages, videos, tmp_path):
    for name, says in HOSTILE.items():
        out = tmp_path / f"{name}.out.mp4"
        r = run("render", "a cat", "-o", out, "--model", packages["v2v"], *SMALL, "--video", videos / name)
        assert r.returncode == 2, (name, r.returncode, r.stderr[-2000:])
        assert "video: " in r.stderr and says in r.stderr, (name, r.stderr[-2000:])
        assert not out.exists()
        leftover = [p.name for p in tmp_path.rglob("*") if p.suffix in (".mp4", ".part", ".tmp") or ".tmp" in p.name]
        assert leftover == [], (name, leftover)  # no output, no temporary


def test_render_takes_a_good_video_and_a_text_model_refuses_one(packages, videos, tmp_path):
    r = run("render", "a cat", "-o", tmp_path / "t2v.mp4", "--model", packages["t2v"], *SMALL, "--video", videos / "good.mp4")
    assert r.returncode == 2 and "video: model 't2v' does not take a video" in r.stderr, r.stderr[-2000:]
    r = run("render", "a cat", "-o", tmp_path / "x.mp4", "--model", packages["v2v"], *SMALL, "--strength", "0.5")
    assert r.returncode == 2 and "strength: needs video" in r.stderr, r.stderr[-2000:]
    r = run("render", "a cat", "-o", tmp_path / "x.mp4", "--model", packages["v2v"], *SMALL, "--video", tmp_path / "none.mp4")
    assert r.returncode == 2 and "video: cannot read" in r.stderr, r.stderr[-2000:]
    for name in ("good.mp4", "good.webm"):
        out = tmp_path / f"from-{name}.mp4"
        r = run("render", "a cat", "-o", out, "--model", packages["v2v"], *SMALL, "--video", videos / name, "--json")
        assert r.returncode == 0, r.stderr[-2000:]
        result = json.loads(r.stdout)
        assert result["spec"]["video_sha256"] == hashlib.sha256((videos / name).read_bytes()).hexdigest()


def test_batch_resolves_video_paths_beside_the_file_and_fails_only_the_bad_line(packages, videos, tmp_path):
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    shutil.copy(videos / "good.mp4", jobs / "in.mp4")
    shutil.copy(videos / "audio_only.mp4", jobs / "sound.mp4")
    lines = [{"prompt": "a cat", "name": "ok", "video": "in.mp4", **SMALL_SPEC},
             {"prompt": "a dog", "name": "bad", "video": "sound.mp4", **SMALL_SPEC}]
    prompts = jobs / "prompts.jsonl"
    prompts.write_text("".join(json.dumps(line) + "\n" for line in lines))
    out = tmp_path / "out"
    r = run("batch", prompts, "--out", out, "--model", packages["v2v"], "--json")
    summary = {j["name"]: j for j in json.loads(r.stdout)["jobs"]}
    assert summary["ok"]["status"] == "done", r.stdout
    assert summary["bad"]["status"] == "invalid" and "video: " in summary["bad"]["error"], summary["bad"]
    assert "has no video stream" in summary["bad"]["error"]
    assert sorted(p.name for p in out.iterdir() if p.suffix == ".mp4") == ["ok.mp4"]


def multipart(fields: dict) -> tuple[bytes, str]:
    boundary = "vgen-test-boundary-91c2"
    body = b""
    for name, value in fields.items():
        if isinstance(value, tuple):
            filename, data, ctype = value
            head = f'Content-Disposition: form-data; name="{name}"; filename="{filename}"\r\nContent-Type: {ctype}\r\n'
        else:
            data = value.encode() if isinstance(value, str) else value
            head = f'Content-Disposition: form-data; name="{name}"\r\n'
        body += f"--{boundary}\r\n".encode() + head.encode() + b"\r\n" + data + b"\r\n"
    body += f"--{boundary}--\r\n".encode()
    return body, f"multipart/form-data; boundary={boundary}"


def leftovers(out: Path) -> list[str]:
    d = out / "uploads"
    return sorted(p.name for p in d.iterdir()) if d.exists() else []


def serve_config(tmp_path: Path) -> list[str]:
    config = tmp_path / "serve.json"
    config.write_text(json.dumps({"service": {"max_body_bytes": 4 << 20}, "videos": {"max_bytes": 1 << 20}}))
    return ["--config", str(config)]


def test_serve_refuses_hostile_uploads_naming_the_field_keeps_nothing_and_keeps_serving(packages, videos, tmp_path):
    out = tmp_path / "out"
    server = Server(packages["v2v"], out, *serve_config(tmp_path))
    try:
        spec = json.dumps({"prompt": "a cat", **SMALL_SPEC})
        for name, says in HOSTILE.items():
            data, ctype = multipart({"spec": spec, "video": (name, (videos / name).read_bytes(), "video/mp4")})
            status, _, raw = server.request("POST", "/v1/jobs", data, {"Content-Type": ctype})
            message = json.loads(raw)["error"]["message"]
            assert status == 400 and message.startswith("video: ") and says in message, (name, status, message)
            assert str(out) not in message, message  # the temporary's path is not shown
            b64 = base64.b64encode((videos / name).read_bytes()).decode()
            status, _, body = server.json("POST", "/v1/jobs", {"prompt": "a cat", **SMALL_SPEC, "video": b64})
            assert status == 400 and body["error"]["message"].startswith("video: "), (name, body)
            assert leftovers(out) == [], name
        # Over videos.max_bytes (1 MiB) but within the body limit: named.
        large = (videos / "large.mov").read_bytes()
        data, ctype = multipart({"spec": spec, "video": ("large.mov", large, "video/quicktime")})
        status, _, raw = server.request("POST", "/v1/jobs", data, {"Content-Type": ctype})
        assert status == 400 and json.loads(raw)["error"]["message"].startswith("video: larger than 1048576 bytes")
        status, _, body = server.json("POST", "/v1/jobs", {"prompt": "a cat", **SMALL_SPEC,
                                                           "video": base64.b64encode(large).decode()})
        assert status == 400 and body["error"]["message"].startswith("video: larger than 1048576 bytes"), body
        # Over the body limit (4 MiB): refused before the body is read into a request at all.
        # The server answers from Content-Length and closes: the client sends only the start (a
        # client writing all 7 MiB would meet a closed socket).
        data, ctype = multipart({"spec": spec, "video": ("big.mov", large * 5, "video/quicktime")})
        c = server.conn()
        try:
            c.putrequest("POST", "/v1/jobs")
            c.putheader("Content-Type", ctype)
            c.putheader("Content-Length", str(len(data)))
            c.endheaders(data[:4096])
            r = c.getresponse()
            assert r.status == 413, (r.status, r.read())
            assert b"exceeds" in r.read()
        finally:
            c.close()
        status, _, body = server.json("POST", "/v1/jobs", {"prompt": "a cat", **SMALL_SPEC, "video": "/etc/passwd"})
        assert status == 400 and "not a path" in body["error"]["message"], body
        assert leftovers(out) == []
        assert [p.name for p in out.iterdir() if p.suffix == ".mp4"] == []

        # Still serving: a good upload is accepted, kept while its job runs, removed after.
        good = (videos / "good.mp4").read_bytes()
        data, ctype = multipart({"spec": spec, "video": ("good.mp4", good, "video/mp4")})
        status, _, raw = server.request("POST", "/v1/jobs", data, {"Content-Type": ctype})
        assert status == 202, raw
        job = json.loads(raw)["id"]
        assert leftovers(out) in ([hashlib.sha256(good).hexdigest() + ".mp4"], [])
        done = server.wait_status(job, {"done", "failed"})
        assert done["status"] == "done", done
        assert done["spec"]["video_sha256"] == hashlib.sha256(good).hexdigest()
        deadline = time.monotonic() + 120  # bounds a hang: removal follows the job's end
        while leftovers(out) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert leftovers(out) == []
        # A text-to-video model refuses the field before anything is written.
    finally:
        server.stop()
    out2 = tmp_path / "out2"
    server = Server(packages["t2v"], out2, *serve_config(tmp_path))
    try:
        data, ctype = multipart({"spec": spec, "video": ("good.mp4", (videos / "good.mp4").read_bytes(), "video/mp4")})
        status, _, raw = server.request("POST", "/v1/jobs", data, {"Content-Type": ctype})
        assert status == 400 and json.loads(raw)["error"]["message"] == "video: model 't2v' does not take a video"
        assert leftovers(out2) == []
    finally:
        server.stop()


def test_two_jobs_with_different_videos_never_share_a_result(packages, videos, tmp_path):
    out = tmp_path / "out"
    server = Server(packages["v2v"], out, *serve_config(tmp_path))
    try:
        spec = {"prompt": "a cat", **SMALL_SPEC}
        ids = []
        for name in ("good.mp4", "good.mp4", "good.webm"):
            b64 = base64.b64encode((videos / name).read_bytes()).decode()
            status, _, body = server.json("POST", "/v1/jobs", {**spec, "video": b64})
            assert status == 202, body
            ids.append(body["id"])
        keys = []
        for i, job in enumerate(ids):
            done = server.wait_status(job, {"done", "failed"})
            assert done["status"] == "done", done
            status, _, video = server.request("GET", f"/v1/jobs/{job}/video")
            assert status == 200
            (tmp_path / f"{i}.mp4").write_bytes(video)
            keys.append(subprocess.run(["ffprobe", "-v", "error", "-show_entries", "format_tags=comment", "-of",
                                        "default=nw=1:nk=1", str(tmp_path / f"{i}.mp4")],
                                       capture_output=True, text=True, check=True).stdout.strip())
            assert keys[-1].startswith("vgen:"), keys[-1]
        assert keys[0] == keys[1]  # the same bytes: one content key (the result cache may serve it)
        assert keys[2] != keys[0]  # another input video: another key, never the cached result
    finally:
        server.stop()


def probe_frames(path: Path) -> tuple[int, int, int]:
    """(frames, width, height) of the first video stream, counted by decoding."""
    r = subprocess.run(["ffprobe", "-v", "error", "-count_frames", "-select_streams", "v:0", "-show_entries",
                        "stream=nb_read_frames,width,height", "-of", "json", str(path)],
                       capture_output=True, text=True, check=True)
    s = json.loads(r.stdout)["streams"][0]
    return int(s["nb_read_frames"]), int(s["width"]), int(s["height"])


def test_render_video_to_video_end_to_end(packages, videos, tmp_path):
    """`vgen render --video in.mp4 --strength 0.6` on the tiny package with the VAE encoder: the
    output has the job's size and the video's frames (its first `frames`, or all of a shorter
    one, 4k+1), and the strength changes the result."""
    src = tmp_path / "in.mp4"
    ffmpeg("-f", "lavfi", "-i", "testsrc=s=96x64:r=8", "-frames:v", "13", "-c:v", "libx264", "-pix_fmt", "yuv420p", str(src))
    size = ["--width", "48", "--height", "32", "--steps", "5"]
    outs = {}
    for strength, frames in (("0.6", "9"), ("1.0", "9"), ("0.6", "17")):
        out = tmp_path / f"s{strength}-f{frames}.mp4"
        r = run("render", "a cat", "-o", out, "--model", packages["v2v"], *size, "--frames", frames,
                "--video", src, "--strength", strength, "--seed", "3", "--json")
        assert r.returncode == 0, r.stderr[-2000:]
        assert json.loads(r.stdout)["spec"]["strength"] == float(strength)
        outs[(strength, frames)] = out
    assert probe_frames(outs[("0.6", "9")]) == (9, 48, 32)  # the job's 9 of the video's 13
    assert probe_frames(outs[("0.6", "17")]) == (13, 48, 32)  # a 13-frame video gives 13 (4*3+1)
    assert outs[("0.6", "9")].read_bytes() != outs[("1.0", "9")].read_bytes()
