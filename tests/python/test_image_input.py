"""Image input on the command line, in batch files and over HTTP (issue 18, items 1 and 7):
a model that takes no image refuses one, an image-to-video model requires one, and an image
that does not decode, is truncated, empty or too large is refused before any work, naming the
field (exit 2 / HTTP 400), with nothing written. Over HTTP: base64 / data URLs in the JSON body
and multipart uploads; an accepted upload is kept under <output_dir>/uploads/<sha256>.<ext>
while its job is unfinished and removed when it ends.

Until an image-to-video family exists, the "image" packages here are the tiny text-to-video
package with manifest "inputs" edited (the family ignores the image): enough to drive the
generic validation, admission and upload paths end to end."""
from __future__ import annotations

import base64
import io
import json
import os
import shutil
import struct
import subprocess
import time
import zlib
from pathlib import Path

import pytest
from PIL import Image

from test_cli_serve import Server
from tiny_packages import tiny_wan

ROOT = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("VGEN_BUILD_DIR", ROOT / "build"))
VGEN = BUILD / "bin" / "vgen"
pytestmark = pytest.mark.skipif(not VGEN.exists(), reason="build/bin/vgen not built")

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
    root = tmp_path_factory.mktemp("image")
    tiny_wan(root / "t2v")
    return {
        "t2v": root / "t2v",
        "i2v": with_inputs(root / "t2v", root / "i2v", {"image": "required", "last_image": "optional"}),
        "opt": with_inputs(root / "t2v", root / "opt", {"image": "optional"}),
    }


def png_bytes(w=40, h=24, colour=(200, 30, 90)) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (w, h), colour).save(buf, "PNG")
    return buf.getvalue()


def with_ihdr_size(png: bytes, w: int, h: int) -> bytes:
    """The PNG with its IHDR width/height replaced (and the chunk's CRC fixed)."""
    ihdr = b"IHDR" + struct.pack(">II", w, h) + png[24:29]
    return png[:12] + ihdr + struct.pack(">I", zlib.crc32(ihdr)) + png[33:]


@pytest.fixture()
def images(tmp_path):
    d = tmp_path / "img"
    d.mkdir()
    good = png_bytes()
    files = {
        "good.png": good,
        "good.jpg": None,
        "good.webp": None,
        "truncated.png": good[: len(good) // 2],
        "empty.png": b"",
        "text.png": b"just some text, not an image\n",
        "zero.png": with_ihdr_size(good, 0, 24),
        "huge.png": with_ihdr_size(good, 100000, 100000),
    }
    for name, data in files.items():
        if data is None:
            Image.new("RGB", (40, 24), (10, 200, 30)).save(d / name)
        else:
            (d / name).write_bytes(data)
    return d


def render(package, out, *args):
    cmd = [str(VGEN), "render", "a red circle moving left", "-o", str(out), "--model", str(package), *SMALL, *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300)


def test_render_refuses_an_image_the_model_does_not_take(packages, images, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    r = render(packages["t2v"], out / "clip.mp4", "--image", str(images / "good.png"))
    assert r.returncode == 2, r.stderr
    assert "image: model 't2v' does not take an image" in r.stderr
    assert list(out.iterdir()) == []


def test_render_requires_the_image_of_an_image_to_video_model(packages, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    r = render(packages["i2v"], out / "clip.mp4")
    assert r.returncode == 2, r.stderr
    assert "image: required by model 'i2v'" in r.stderr
    assert list(out.iterdir()) == []


@pytest.mark.parametrize("name,expect", [
    ("truncated.png", "image: cannot decode the png data"),
    ("empty.png", "image: empty (0 bytes)"),
    ("text.png", "image: not a PNG, JPEG or WebP image"),
    ("zero.png", "image: zero size (0x24)"),
    ("huge.png", "image: 100000x100000 is larger than the limit"),
    ("missing.png", "image: cannot read"),
])
def test_render_refuses_a_bad_image_naming_the_field_and_writes_nothing(packages, images, tmp_path, name, expect):
    out = tmp_path / "out"
    out.mkdir()
    r = render(packages["i2v"], out / "clip.mp4", "--image", str(images / name))
    assert r.returncode == 2, r.stderr
    assert expect in r.stderr
    assert list(out.iterdir()) == []


def test_render_checks_the_last_image_too(packages, images, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    r = render(packages["i2v"], out / "clip.mp4", "--image", str(images / "good.png"), "--last-image",
               str(images / "text.png"))
    assert r.returncode == 2, r.stderr
    assert "last_image: not a PNG, JPEG or WebP image" in r.stderr
    r = render(packages["opt"], out / "clip.mp4", "--image", str(images / "good.png"), "--last-image",
               str(images / "good.jpg"))
    assert r.returncode == 2 and "last_image: model 'opt' does not take a last image" in r.stderr
    assert list(out.iterdir()) == []


def test_render_takes_png_jpeg_and_webp_and_tags_the_video_with_the_image_bytes(packages, images, tmp_path):
    """The content key (the output's "vgen:" comment) follows the image bytes: the same file
    under another name renders the same key; another picture a different one."""
    keys = {}
    for name in ("good.png", "good.jpg", "good.webp"):
        out = tmp_path / f"{name}.mp4"
        r = render(packages["opt"], out, "--image", str(images / name), "--json")
        assert r.returncode == 0, r.stderr
        keys[name] = comment_of(out)
    copy = tmp_path / "elsewhere.png"
    shutil.copy(images / "good.png", copy)
    out = tmp_path / "copy.mp4"
    assert render(packages["opt"], out, "--image", str(copy)).returncode == 0
    assert comment_of(out) == keys["good.png"]
    assert len(set(keys.values())) == 3


def comment_of(path):
    out = subprocess.run(["ffprobe", "-v", "error", "-show_entries", "format_tags=comment", "-of", "json", str(path)],
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out)["format"]["tags"]["comment"]


def test_batch_resolves_image_paths_beside_the_file_and_reports_bad_images_by_line(packages, images, tmp_path):
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    shutil.copy(images / "good.png", jobs / "in.png")
    shutil.copy(images / "truncated.png", jobs / "cut.png")
    lines = [
        {"prompt": "a red circle", "name": "ok", "image": "in.png", **SMALL_SPEC},
        {"prompt": "a red circle", "name": "cut", "image": "cut.png", **SMALL_SPEC},
        {"prompt": "a red circle", "name": "none", **SMALL_SPEC},
        {"prompt": "a red circle", "name": "gone", "image": "missing.png", **SMALL_SPEC},
    ]
    prompts = jobs / "b.jsonl"
    prompts.write_text("".join(json.dumps(line) + "\n" for line in lines))
    out = tmp_path / "out"
    r = subprocess.run([str(VGEN), "batch", str(prompts), "--out", str(out), "--model", str(packages["i2v"]), "--json"],
                       capture_output=True, text=True, timeout=300, cwd="/")
    assert r.returncode == 2, r.stderr
    by_name = {j["name"]: j for j in json.loads(r.stdout)["jobs"]}
    assert by_name["ok"]["status"] == "done"
    assert by_name["cut"]["status"] == "invalid" and "image: cannot decode" in by_name["cut"]["error"]
    assert by_name["none"]["status"] == "invalid" and "image: required by model 'i2v'" in by_name["none"]["error"]
    assert by_name["gone"]["status"] == "invalid" and "image: cannot read" in by_name["gone"]["error"]
    assert sorted(p.name for p in out.iterdir() if p.suffix == ".mp4") == ["ok.mp4"]
    # A rerun skips the finished image job (its key follows the image's bytes, as recorded) ...
    r = subprocess.run([str(VGEN), "batch", str(prompts), "--out", str(out), "--model", str(packages["i2v"]), "--json"],
                       capture_output=True, text=True, timeout=300)
    assert {j["name"]: j["status"] for j in json.loads(r.stdout)["jobs"]}["ok"] == "skipped", r.stdout
    # ... until the picture changes under the same path.
    (jobs / "in.png").write_bytes(png_bytes(colour=(0, 0, 255)))
    r = subprocess.run([str(VGEN), "batch", str(prompts), "--out", str(out), "--model", str(packages["i2v"]), "--json"],
                       capture_output=True, text=True, timeout=300)
    assert {j["name"]: j["status"] for j in json.loads(r.stdout)["jobs"]}["ok"] == "done", r.stdout


def multipart(fields: dict) -> tuple[bytes, str]:
    boundary = "vgen-test-boundary-7f3a"
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


def uploads(out):
    d = out / "uploads"
    return sorted(p.name for p in d.iterdir()) if d.exists() else []


def big_body_config(tmp_path):
    config = tmp_path / "serve.json"
    config.write_text(json.dumps({"service": {"max_body_bytes": 8 << 20}}))
    return ["--config", str(config)]


def test_serve_refuses_bad_images_with_400_naming_the_field_and_keeps_nothing(packages, images, tmp_path):
    out = tmp_path / "out"
    server = Server(packages["i2v"], out, *big_body_config(tmp_path))
    try:
        def post_json(spec):
            return server.json("POST", "/v1/jobs", {"prompt": "a cat", **SMALL_SPEC, **spec})

        status, _, body = post_json({})
        assert status == 400 and body["error"]["message"] == "image: required by model 'i2v'"
        status, _, body = post_json({"image": "/etc/passwd"})
        assert status == 400 and body["error"]["message"].startswith("image: not base64 of a PNG, JPEG or WebP")
        trunc = base64.b64encode((images / "truncated.png").read_bytes()).decode()
        status, _, body = post_json({"image": "data:image/png;base64," + trunc})
        assert status == 400 and body["error"]["message"].startswith("image: cannot decode"), body
        huge = base64.b64encode((images / "huge.png").read_bytes()).decode()
        status, _, body = post_json({"image": huge})
        assert status == 400 and "larger than the limit" in body["error"]["message"]
        good = base64.b64encode(png_bytes()).decode()
        status, _, body = post_json({"image": good, "last_image": base64.b64encode(b"GIF89a....").decode()})
        assert status == 400 and body["error"]["message"].startswith("last_image: "), body

        data, ctype = multipart({"spec": json.dumps({"prompt": "a cat", **SMALL_SPEC}),
                                 "image": ("x.png", (images / "text.png").read_bytes(), "image/png")})
        status, _, raw = server.request("POST", "/v1/jobs", data, {"Content-Type": ctype})
        assert status == 400 and json.loads(raw)["error"]["message"] == "image: not a PNG, JPEG or WebP image"
        data, ctype = multipart({"image": ("x.png", png_bytes(), "image/png")})
        status, _, raw = server.request("POST", "/v1/jobs", data, {"Content-Type": ctype})
        assert status == 400 and "no 'spec' field" in json.loads(raw)["error"]["message"]
        status, _, raw = server.request("POST", "/v1/jobs", data[: len(data) // 2], {"Content-Type": ctype})
        assert status == 400 and "multipart: truncated" in json.loads(raw)["error"]["message"]
        assert uploads(out) == []
        assert [p.name for p in out.iterdir() if p.suffix == ".mp4"] == []
    finally:
        server.stop()


def test_serve_refuses_an_image_for_a_text_model_before_writing_it(packages, tmp_path):
    out = tmp_path / "out"
    server = Server(packages["t2v"], out, *big_body_config(tmp_path))
    try:
        data, ctype = multipart({"spec": json.dumps({"prompt": "a cat", **SMALL_SPEC}),
                                 "image": ("x.png", png_bytes(), "image/png")})
        status, _, raw = server.request("POST", "/v1/jobs", data, {"Content-Type": ctype})
        assert status == 400 and json.loads(raw)["error"]["message"] == "image: model 't2v' does not take an image"
        assert uploads(out) == []
    finally:
        server.stop()


def test_serve_keeps_an_upload_while_its_job_runs_and_removes_it_after(packages, tmp_path):
    out = tmp_path / "out"
    server = Server(packages["opt"], out, *big_body_config(tmp_path))
    try:
        picture = png_bytes(colour=(1, 2, 3))
        spec = {"prompt": "a cat", **SMALL_SPEC, "steps": 6}
        data, ctype = multipart({"spec": json.dumps(spec), "image": ("cat.png", picture, "image/png")})
        status, _, raw = server.request("POST", "/v1/jobs", data, {"Content-Type": ctype})
        assert status == 202, raw
        first = json.loads(raw)["id"]
        # The same picture as base64 in JSON: the same upload file, used twice.
        status, _, body = server.json("POST", "/v1/jobs", {**spec, "seed": 1, "image": base64.b64encode(picture).decode()})
        assert status == 202, body
        second = body["id"]
        import hashlib
        assert uploads(out) == [hashlib.sha256(picture).hexdigest() + ".png"]
        for job in (first, second):
            done = server.wait_status(job, {"done", "failed"})
            assert done["status"] == "done", done
        deadline = time.monotonic() + 120  # bounds a hang: removal follows the jobs' end
        while uploads(out) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert uploads(out) == []
        status, _, video = server.request("GET", f"/v1/jobs/{first}/video")
        assert status == 200 and len(video) > 0
    finally:
        server.stop()


def test_serve_resumes_an_image_job_after_sigkill_with_its_upload(packages, tmp_path):
    """The upload outlives a crash for as long as its job is unfinished; an upload that no
    resumed job needs (a leftover) is removed at restart."""
    import hashlib
    out = tmp_path / "out"
    spec = {"prompt": "a cat", **SMALL_SPEC, "steps": 20}
    picture = png_bytes(colour=(9, 9, 9))
    name = hashlib.sha256(picture).hexdigest() + ".png"
    # The crash comes while a job is unfinished by construction, not by the timing of this
    # process: the fault drill SIGKILLs the service as the last job starts decoding.
    drill = {"VGEN_FAULTS": json.dumps({"crash": {"stage": "decode", "prompt": "a cat 2"}})}
    server = Server(packages["opt"], out, *big_body_config(tmp_path), env=drill)
    try:
        ids = []
        for i in range(3):
            data, ctype = multipart({"spec": json.dumps({**spec, "seed": i, "prompt": f"a cat {i}"}),
                                     "image": ("cat.png", picture, "image/png")})
            status, _, raw = server.request("POST", "/v1/jobs", data, {"Content-Type": ctype})
            assert status == 202, raw
            ids.append(json.loads(raw)["id"])
        assert server.proc.wait(timeout=600) == -9
    finally:
        server.kill()
    assert uploads(out) == [name]
    (out / "uploads" / ("0" * 64 + ".png")).write_bytes(png_bytes())  # a leftover nobody needs

    server = Server(packages["opt"], out, *big_body_config(tmp_path))
    try:
        assert uploads(out) == [name]  # the leftover went at start; the resumed jobs' image stayed
        results = [server.wait_status(i, {"done", "failed", "cancelled"}, timeout=300) for i in ids]
        assert all(r["status"] == "done" for r in results), results
        deadline = time.monotonic() + 120  # bounds a hang: removal follows the jobs' end
        while uploads(out) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert uploads(out) == []
    finally:
        server.stop()
