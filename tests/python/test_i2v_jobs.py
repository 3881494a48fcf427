"""Image-to-video jobs end to end through `vgen batch` and `vgen serve` on each tiny random I2V
package, Wan 2.1 I2V (the real image encoder, VAE encoder and 36-channel transformer, not a
text-to-video package with its manifest edited) and Wan 2.2 I2V-A14B (two 36-channel experts): JSONL image paths resolve beside the file, HTTP images come
as multipart uploads and as base64 / data URLs in the JSON body, and every route's video is the
one `vgen render --image` makes for the same job. A bad image fails its own line or request
only, naming the field."""
from __future__ import annotations

import base64
import json
import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
from vgen_reference.wan_i2v_parity import test_image as pattern
from test_cli_serve import Server
from tiny_packages import tiny_wan

BUILD = Path(os.environ.get("VGEN_BUILD_DIR", ROOT / "build"))
VGEN = BUILD / "bin" / "vgen"
pytestmark = pytest.mark.skipif(not VGEN.exists(), reason="build/bin/vgen not built")

SPEC = {"width": 48, "height": 32, "frames": 9, "steps": 2, "seed": 3}


@pytest.fixture(scope="module", params=["i2v", "a14b-i2v"])
def i2v(tmp_path_factory, request):
    """The package, and a folder of pictures: in.png (48x32), other.jpg (another size and
    picture, resized by the job) and broken.png (text)."""
    import PIL.Image

    root = tmp_path_factory.mktemp("i2v_jobs_" + request.param)
    tiny_wan(root / "pkg", request.param)
    pics = root / "pics"
    (pics / "sub").mkdir(parents=True)
    pixels = pattern(32, 48)
    PIL.Image.fromarray(pixels).save(pics / "in.png")
    PIL.Image.fromarray(pixels[::-1].copy()).resize((80, 60)).save(pics / "sub" / "other.jpg", quality=95)
    (pics / "broken.png").write_text("not a picture\n")
    return root


def frames_of(path: Path) -> bytes:
    return subprocess.run(["ffmpeg", "-v", "error", "-i", str(path), "-f", "rawvideo", "-pix_fmt", "rgb24", "-"],
                          capture_output=True, check=True, timeout=60).stdout


def probe(path: Path) -> tuple[int, int, int]:
    s = json.loads(subprocess.run(["ffprobe", "-v", "error", "-count_frames", "-show_entries",
                                   "stream=width,height,nb_read_frames", "-of", "json", str(path)],
                                  capture_output=True, text=True, check=True, timeout=60).stdout)["streams"][0]
    return s["width"], s["height"], int(s["nb_read_frames"])


def render(i2v: Path, out: Path, image: Path, spec: dict) -> Path:
    """The reference: `vgen render --image` of the same job."""
    cmd = [str(VGEN), "render", spec["prompt"], "-o", str(out), "--model", str(i2v / "pkg"), "--image", str(image)]
    for key in ("width", "height", "frames", "steps", "seed"):
        cmd += [f"--{key}", str(spec[key])]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return out


def test_batch_runs_image_lines_with_paths_beside_the_file_and_fails_only_the_bad_line(i2v, tmp_path):
    jobs = [
        {"prompt": "a red circle moving left", "name": "near", "image": "in.png", **SPEC},
        {"prompt": "a blue square moving up", "name": "below", "image": "sub/other.jpg", **SPEC, "frames": 5},
        {"prompt": "a red circle moving left", "name": "broken", "image": "broken.png", **SPEC},
        {"prompt": "a red circle moving left", "name": "twoimages", "image": "in.png", "last_image": "in.png", **SPEC},
        {"prompt": "a red circle moving left", "name": "noimage", **SPEC},
        {"prompt": "a green star moving down", "name": "after", "image": "in.png", **SPEC, "seed": 4},
    ]
    prompts = i2v / "pics" / "jobs.jsonl"
    prompts.write_text("".join(json.dumps(j) + "\n" for j in jobs))
    out = tmp_path / "out"
    # From another working directory: only the file's own folder can resolve the paths.
    r = subprocess.run([str(VGEN), "batch", str(prompts), "--out", str(out), "--model", str(i2v / "pkg"), "--json"],
                       capture_output=True, text=True, timeout=600, cwd="/")
    assert r.returncode == 2, r.stderr  # invalid lines, no failed job
    summary = json.loads(r.stdout)
    by_name = {j["name"]: j for j in summary["jobs"]}
    assert {n: j["status"] for n, j in by_name.items()} == {
        "near": "done", "below": "done", "broken": "invalid", "twoimages": "invalid", "noimage": "invalid",
        "after": "done"}
    assert by_name["broken"]["error"].startswith("line 3: image: ") and "not a PNG, JPEG or WebP" in by_name["broken"]["error"]
    assert "line 4: last_image: " in by_name["twoimages"]["error"]
    assert "line 5: image: required" in by_name["noimage"]["error"]
    assert summary["counts"]["done"] == 3 and summary["counts"]["invalid"] == 3
    assert sorted(p.name for p in out.glob("*.mp4")) == ["after.mp4", "below.mp4", "near.mp4"]
    assert probe(out / "near.mp4") == (48, 32, 9)
    assert probe(out / "below.mp4") == (48, 32, 5)
    assert probe(out / "after.mp4") == (48, 32, 9)
    # The line's image is the one beside the file: its video is `vgen render --image` of that file.
    ref = render(i2v, tmp_path / "ref.mp4", i2v / "pics" / "in.png", jobs[0])
    assert frames_of(out / "near.mp4") == frames_of(ref)
    assert frames_of(out / "after.mp4") != frames_of(ref)


def multipart(fields: dict) -> tuple[bytes, str]:
    boundary = "vgen-i2v-boundary-51c2"
    body = b""
    for name, value in fields.items():
        if isinstance(value, tuple):
            filename, data, ctype = value
            head = f'Content-Disposition: form-data; name="{name}"; filename="{filename}"\r\nContent-Type: {ctype}\r\n'
        else:
            data, head = value.encode(), f'Content-Disposition: form-data; name="{name}"\r\n'
        body += f"--{boundary}\r\n".encode() + head.encode() + b"\r\n" + data + b"\r\n"
    return body + f"--{boundary}--\r\n".encode(), f"multipart/form-data; boundary={boundary}"


def test_serve_takes_uploads_and_base64_images_then_serves_the_videos(i2v, tmp_path):
    config = tmp_path / "serve.json"
    config.write_text(json.dumps({"service": {"max_body_bytes": 8 << 20}}))
    png = (i2v / "pics" / "in.png").read_bytes()
    jpg = (i2v / "pics" / "sub" / "other.jpg").read_bytes()
    spec = {"prompt": "a red circle moving left", **SPEC}
    server = Server(i2v / "pkg", tmp_path / "out", "--config", str(config))
    try:
        body, ctype = multipart({"spec": json.dumps({**spec, "name": "upload"}), "image": ("in.png", png, "image/png")})
        status, _, raw = server.request("POST", "/v1/jobs", body, {"Content-Type": ctype})
        assert status == 202, raw
        ids = {"upload": json.loads(raw)["id"]}
        # A bad picture between the good ones: 400 naming the field, the others unaffected.
        status, _, bad = server.json("POST", "/v1/jobs", {**spec, "image": base64.b64encode(b"not a picture").decode()})
        assert status == 400 and bad["error"]["message"].startswith("image: "), bad
        body, ctype = multipart({"spec": json.dumps(spec), "image": ("x.png", b"\x89PNG\r\n\x1a\n broken", "image/png")})
        status, _, raw = server.request("POST", "/v1/jobs", body, {"Content-Type": ctype})
        assert status == 400 and json.loads(raw)["error"]["message"].startswith("image: "), raw
        for name, image in (("data_url", "data:image/jpeg;base64," + base64.b64encode(jpg).decode()),
                            ("plain", base64.b64encode(png).decode())):
            status, _, job = server.json("POST", "/v1/jobs", {**spec, "name": name, "image": image,
                                                              **({"frames": 5} if name == "data_url" else {"seed": 4})})
            assert status == 202, job
            ids[name] = job["id"]
        videos = {}
        for name, job_id in ids.items():
            done = server.wait_status(job_id, {"done", "failed", "cancelled"}, timeout=300)
            assert done["status"] == "done", done
            status, hdrs, data = server.request("GET", f"/v1/jobs/{job_id}/video")
            assert status == 200 and hdrs["content-type"] == "video/mp4" and data
            videos[name] = tmp_path / f"{name}.mp4"
            videos[name].write_bytes(data)
        assert probe(videos["upload"]) == (48, 32, 9)
        assert probe(videos["data_url"]) == (48, 32, 5)
        assert probe(videos["plain"]) == (48, 32, 9)
    finally:
        assert server.stop() == 0
    # The uploaded picture made the video `vgen render --image` makes; base64 of the same bytes
    # with another seed a different one.
    ref = render(i2v, tmp_path / "ref.mp4", i2v / "pics" / "in.png", spec)
    assert frames_of(videos["upload"]) == frames_of(ref)
    assert frames_of(videos["plain"]) != frames_of(ref)
