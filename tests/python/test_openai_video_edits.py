"""OpenAI's video-in routes on a live `vgen serve` through the official `openai` SDK (pinned in
tools/requirements.txt; issue 34 item 5): videos.edit (video-to-video on an upload, and on a
finished video by id), videos.remix (a finished video with a new prompt) and videos.extend (an
upload, and a finished video by id), each result read with ffprobe; the refusals surfacing as the
SDK's BadRequestError / NotFoundError / ConflictError with `param`; hostile uploads (a file that
is no video, a truncated mp4) refused naming `video` with nothing left in the uploads folder.

One server with a token serves the tiny text-to-video package (the default), the same package
exported with its VAE encoder ("v2v": it takes a video) and a tiny image-to-video package ("i2v",
what extending needs). Every wait is on a job's state.

By id, the SDK's own edit() and extend() cannot send a source: their `video` parameter is typed
as a file or {"id": ...}, but openai 3.51.0 then raises in extract_files ("Expected entry at
`video` to be bytes ..."), client side. The by-id form is sent as JSON through the same client
(client.post), which is the body OpenAI's API documents."""
from __future__ import annotations

import hashlib
import io
import json
import shutil
import subprocess
import time
import warnings
from pathlib import Path

import pytest

from test_cli_serve import Server, VGEN, probe
from test_openai_videos import wait_done  # the SDK's retrieve until completed
from tiny_packages import tiny_wan

openai = pytest.importorskip("openai")
pytestmark = [pytest.mark.skipif(not VGEN.exists(), reason="build/bin/vgen not built"),
              pytest.mark.skipif(shutil.which("ffmpeg") is None, reason="ffmpeg not installed"),
              pytest.mark.filterwarnings("ignore::DeprecationWarning")]  # the SDK marks the videos API deprecated

TOKEN = "edits-token"
# The tiny packages' fps is 8: "1" second is 4 * round(8 / 4) + 1 = 9 frames.
SMALL = {"size": "48x32", "seconds": "1"}
FAST = {"steps": 2}


def ffmpeg(*args: str) -> None:
    subprocess.run(["ffmpeg", "-v", "error", "-nostdin", "-y", *args], check=True, timeout=120)


@pytest.fixture(scope="module")
def packages(tmp_path_factory):
    root = tmp_path_factory.mktemp("openai_video_edits")
    tiny_wan(root / "t2v")
    tiny_wan(root / "v2v", video_input=True)
    tiny_wan(root / "i2v", "i2v")
    return root


@pytest.fixture(scope="module")
def clips(tmp_path_factory):
    """in.mp4: 13 frames of 64x48 at 8 fps; a text file named .mp4; in.mp4 cut in half."""
    d = tmp_path_factory.mktemp("clips")
    ffmpeg("-f", "lavfi", "-i", "testsrc=s=64x48:r=8", "-frames:v", "13", "-c:v", "libx264", "-pix_fmt", "yuv420p", str(d / "in.mp4"))
    good = (d / "in.mp4").read_bytes()
    (d / "truncated.mp4").write_bytes(good[: len(good) // 2])  # the index (moov) is at the end
    (d / "text.mp4").write_text("this is a text file, not a video\n" * 20)
    return d


@pytest.fixture(scope="module")
def service(packages, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("openai_video_edits_serve")
    config = tmp / "serve.json"
    config.write_text(json.dumps({"models": {"v2v": str(packages / "v2v"), "i2v": str(packages / "i2v")},
                                  "service": {"max_body_bytes": 8 << 20, "token": TOKEN}}))
    server = Server(packages / "t2v", tmp / "out", "--config", str(config))
    yield server
    server.kill()


@pytest.fixture
def client(service):
    return openai.OpenAI(base_url=f"http://127.0.0.1:{service.port}/v1", api_key=TOKEN, max_retries=0, timeout=120)


def download(client, video_id, path: Path) -> Path:
    client.videos.download_content(video_id).write_to_file(path)
    return path


def job_spec(service, video_id) -> dict:
    status, _, job = service.json("GET", f"/v1/jobs/{video_id}", headers={"Authorization": f"Bearer {TOKEN}"})
    assert status == 200, job
    return job["spec"]


def by_id(client, route: str, **body):
    """An edit or extend naming a finished video: JSON {"video": {"id": ...}} through the SDK's client."""
    return client.post(route, body=body, cast_to=openai.types.Video)


def uploads_left(service) -> list[str]:
    d = service.out_dir / "uploads"
    return sorted(p.name for p in d.iterdir()) if d.exists() else []


def wait_uploads_gone(service, timeout=120):
    deadline = time.monotonic() + timeout  # bounds a hang: removal follows the job's end
    while uploads_left(service) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert uploads_left(service) == []


def test_edit_an_upload_renders_video_to_video_on_a_model_that_takes_a_video(client, service, clips, tmp_path):
    clip = (clips / "in.mp4").read_bytes()
    # No model named: the first served model that takes a video.
    edited = client.videos.edit(prompt="the same scene in watercolour", video=("in.mp4", clip, "video/mp4"),
                                extra_body={**SMALL, **FAST, "strength": 0.6, "seed": 3})
    assert edited.model == "v2v" and edited.size == "48x32" and edited.seconds == "1", edited
    assert edited.remixed_from_video_id is None
    wait_done(client, edited.id)
    s = probe(download(client, edited.id, tmp_path / "edit.mp4"))
    assert (s["codec_name"], s["width"], s["height"], int(s["nb_read_frames"])) == ("h264", 48, 32, 9)
    spec = job_spec(service, edited.id)
    assert spec["strength"] == 0.6 and spec["video_sha256"] == hashlib.sha256(clip).hexdigest(), spec
    wait_uploads_gone(service)  # the upload was the job's, and went with it

    # Another strength is another video.
    other = client.videos.edit(prompt="the same scene in watercolour", video=("in.mp4", clip, "video/mp4"),
                               extra_body={**SMALL, **FAST, "strength": 1.0, "seed": 3, "model": "v2v"})
    wait_done(client, other.id)
    assert download(client, other.id, tmp_path / "other.mp4").read_bytes() != (tmp_path / "edit.mp4").read_bytes()


def test_edit_a_finished_video_by_id_keeps_its_size_and_length(client, service, tmp_path):
    source = client.videos.create(prompt="a red circle moving left", model="t2v", **SMALL, extra_body={**FAST, "seed": 5})
    wait_done(client, source.id)
    source_file = download(client, source.id, tmp_path / "source.mp4")
    edited = by_id(client, "/videos/edits", prompt="a blue circle", video={"id": source.id}, steps=2, seed=4)
    assert edited.model == "v2v" and (edited.size, edited.seconds) == ("48x32", "1"), edited
    wait_done(client, edited.id)
    s = probe(download(client, edited.id, tmp_path / "edited.mp4"))
    assert (s["width"], s["height"], int(s["nb_read_frames"])) == (48, 32, 9)
    assert job_spec(service, edited.id)["video_sha256"] == hashlib.sha256(source_file.read_bytes()).hexdigest()
    # The same through a video[id] form field (multipart, as other clients send it).
    form = client.post("/videos/edits", body={"prompt": "a blue circle", "video[id]": source.id, "steps": "2", "seed": "4"},
                       files=[], cast_to=openai.types.Video,
                       options={"headers": {"Content-Type": "multipart/form-data"}})
    wait_done(client, form.id)
    assert download(client, form.id, tmp_path / "form.mp4").read_bytes() == (tmp_path / "edited.mp4").read_bytes()


def test_edit_refusals_name_their_param(client, service, clips):
    clip = (clips / "in.mp4").read_bytes()
    with pytest.raises(openai.BadRequestError) as e:  # a model without video input
        client.videos.edit(prompt="p", video=("in.mp4", clip, "video/mp4"), extra_body={**SMALL, "model": "t2v"})
    assert (e.value.status_code, e.value.param) == (400, "video") and "does not take a video" in e.value.message
    with pytest.raises(openai.BadRequestError) as e:
        client.videos.edit(prompt="p", video=("in.mp4", clip, "video/mp4"), extra_body={"model": "sora-2"})
    assert e.value.param == "model"
    with pytest.raises(openai.BadRequestError) as e:
        client.videos.edit(prompt="p", video=("in.mp4", clip, "video/mp4"), extra_body={"strength": 1.5})
    assert e.value.param == "strength"
    with pytest.raises(openai.NotFoundError) as e:
        by_id(client, "/videos/edits", prompt="p", video={"id": "0193b5d6-8a1c-7f3e-9b2a-4c5d6e7f8091"})
    assert e.value.param == "video"
    running = client.videos.create(prompt="not yet", size="64x64", seconds="1", extra_body={"steps": 1000, "seed": 31})
    try:
        with pytest.raises(openai.ConflictError) as e:
            by_id(client, "/videos/edits", prompt="p", video={"id": running.id})
        assert e.value.param == "video" and e.value.code == "video_not_ready"
    finally:
        client.videos.delete(running.id)
    with pytest.raises(openai.BadRequestError) as e:
        by_id(client, "/videos/edits", prompt="p", video="AAAA")  # JSON takes a reference, not bytes
    assert e.value.param == "video"
    assert uploads_left(service) == []


@pytest.mark.parametrize("route", ["edit", "extend"])
@pytest.mark.parametrize("name,says", [("text.mp4", "is not a video file we read"), ("truncated.mp4", "is not a video file we read")])
def test_hostile_uploads_are_refused_naming_video_and_leave_nothing(client, service, clips, route, name, says):
    bad = (clips / name).read_bytes()
    with pytest.raises(openai.BadRequestError) as e:
        if route == "edit":
            client.videos.edit(prompt="p", video=(name, bad, "video/mp4"), extra_body={**SMALL, **FAST})
        else:
            client.videos.extend(prompt="p", seconds="1", video=(name, bad, "video/mp4"), extra_body={"size": "48x32", **FAST})
    message = e.value.body["message"]  # .message is the SDK's "Error code: 400 - " + it
    assert e.value.param == "video" and message.startswith("video: ") and says in message, message
    assert str(service.out_dir) not in message  # the temporary's path is not shown
    assert uploads_left(service) == []  # no upload, no temporary
    assert client.videos.list(limit=1).object == "list"  # still serving


def test_remix_on_a_text_model_renders_the_same_spec_with_the_new_prompt(client, service, tmp_path):
    source = client.videos.create(prompt="a green star", model="t2v", **SMALL, extra_body={**FAST, "seed": 7})
    wait_done(client, source.id)
    original = download(client, source.id, tmp_path / "original.mp4").read_bytes()

    same = client.videos.remix(source.id, prompt="a green star")
    assert same.id != source.id and same.remixed_from_video_id == source.id, same
    assert (same.model, same.size, same.seconds, same.prompt) == ("t2v", "48x32", "1", "a green star")
    other = client.videos.remix(source.id, prompt="a purple moon")
    wait_done(client, same.id)
    wait_done(client, other.id)
    assert download(client, same.id, tmp_path / "same.mp4").read_bytes() == original  # same spec, same seed: same bytes
    remixed = download(client, other.id, tmp_path / "other.mp4")
    assert remixed.read_bytes() != original
    s = probe(remixed)
    assert (s["width"], s["height"], int(s["nb_read_frames"])) == (48, 32, 9)
    spec = job_spec(service, other.id)
    assert (spec["seed"], spec["steps"], spec["prompt"]) == (7, 2, "a purple moon"), spec
    # Retrieve and list say what it remixed; the source says nothing.
    assert client.videos.retrieve(other.id).remixed_from_video_id == source.id
    listed = {v.id: v for v in client.videos.list(limit=20)}
    assert listed[other.id].remixed_from_video_id == source.id and listed[source.id].remixed_from_video_id is None
    # vgen's own fields may change; model, size and seconds may not.
    reseeded = client.videos.remix(source.id, prompt="a green star", extra_body={"seed": 8})
    assert job_spec(service, reseeded.id)["seed"] == 8
    wait_done(client, reseeded.id)
    with pytest.raises(openai.BadRequestError) as e:
        client.videos.remix(source.id, prompt="p", extra_body={"size": "64x64"})
    assert e.value.param == "size"
    with pytest.raises(openai.BadRequestError) as e:  # a text model's remix re-renders: no strength
        client.videos.remix(source.id, prompt="p", extra_body={"strength": 0.5})
    assert e.value.param == "strength"


def test_remix_on_a_video_model_conditions_on_the_original(client, service, tmp_path):
    source = client.videos.create(prompt="a yellow square", model="v2v", **SMALL, extra_body={**FAST, "seed": 9})
    wait_done(client, source.id)
    original = download(client, source.id, tmp_path / "original.mp4").read_bytes()
    remix = client.videos.remix(source.id, prompt="a yellow square at night")
    assert remix.remixed_from_video_id == source.id and remix.model == "v2v"
    spec = job_spec(service, remix.id)
    assert spec["strength"] == 0.6 and spec["video_sha256"] == hashlib.sha256(original).hexdigest(), spec
    assert spec["seed"] == 9
    stronger = client.videos.remix(source.id, prompt="a yellow square at night", extra_body={"strength": 0.9})
    assert job_spec(service, stronger.id)["strength"] == 0.9
    wait_done(client, remix.id)
    wait_done(client, stronger.id)
    s = probe(download(client, remix.id, tmp_path / "remix.mp4"))
    assert (s["width"], s["height"], int(s["nb_read_frames"])) == (48, 32, 9)
    assert (tmp_path / "remix.mp4").read_bytes() != download(client, stronger.id, tmp_path / "stronger.mp4").read_bytes()
    wait_uploads_gone(service)


def test_remix_refusals(client):
    with pytest.raises(openai.NotFoundError):
        client.videos.remix("0193b5d6-8a1c-7f3e-9b2a-4c5d6e7f8091", prompt="p")
    running = client.videos.create(prompt="not yet", size="64x64", seconds="1", extra_body={"steps": 1000, "seed": 32})
    try:
        with pytest.raises(openai.ConflictError) as e:
            client.videos.remix(running.id, prompt="p")
        assert e.value.code == "video_not_ready" and "completed" in e.value.message
    finally:
        client.videos.delete(running.id)


def test_extend_an_upload_and_a_finished_video(client, service, clips, tmp_path):
    """seconds "1" is 9 frames at 8 fps: 8 new frames after the clip's last one (test_extend.py:
    input + new - 1 frames in one stream)."""
    import PIL.Image
    from vgen_reference.wan_i2v_parity import test_image as pattern

    clip = (clips / "in.mp4").read_bytes()
    longer = client.videos.extend(prompt="the pattern rolls on", seconds="1", video=("in.mp4", clip, "video/mp4"),
                                  extra_body={"size": "48x32", **FAST, "seed": 3})
    assert longer.model == "i2v", longer  # the first model that takes an image
    wait_done(client, longer.id)
    out = download(client, longer.id, tmp_path / "longer.mp4")
    s = probe(out)
    assert (s["width"], s["height"], int(s["nb_read_frames"])) == (48, 32, 13 + 9 - 1)
    streams = json.loads(subprocess.run(["ffprobe", "-v", "error", "-show_entries", "stream=codec_type", "-of", "json", str(out)],
                                        capture_output=True, text=True, check=True).stdout)["streams"]
    assert [x["codec_type"] for x in streams] == ["video"]  # one continuous stream
    assert job_spec(service, longer.id)["extend"] is True

    buf = io.BytesIO()
    PIL.Image.fromarray(pattern(32, 48)).save(buf, format="PNG")
    source = client.videos.create(prompt="a red circle", model="i2v", **SMALL, input_reference=("in.png", buf.getvalue(), "image/png"),
                                  extra_body=FAST)
    wait_done(client, source.id)
    extended = by_id(client, "/videos/extensions", prompt="and further", seconds="1", video={"id": source.id}, steps=2)
    assert extended.model == "i2v" and extended.size == "48x32"
    wait_done(client, extended.id)
    s = probe(download(client, extended.id, tmp_path / "extended.mp4"))
    assert (s["width"], s["height"], int(s["nb_read_frames"])) == (48, 32, 9 + 9 - 1)
    wait_uploads_gone(service)


def test_extend_refusals_name_their_param(client, clips):
    clip = (clips / "in.mp4").read_bytes()
    with pytest.raises(openai.BadRequestError) as e:  # a model that takes no image cannot extend
        client.videos.extend(prompt="p", seconds="1", video=("in.mp4", clip, "video/mp4"), extra_body={"model": "t2v"})
    assert e.value.param == "model" and "takes no image" in e.value.message
    with pytest.raises(openai.BadRequestError) as e:
        client.videos.extend(prompt="p", seconds="600", video=("in.mp4", clip, "video/mp4"))
    assert e.value.param == "seconds"
    with pytest.raises(openai.BadRequestError) as e:
        client.videos.extend(prompt="p", seconds="1", video=("in.mp4", clip, "video/mp4"), extra_body={"strength": 0.5})
    assert e.value.param == "strength"
    with pytest.raises(openai.NotFoundError) as e:
        by_id(client, "/videos/extensions", prompt="p", seconds="1", video={"id": "0193b5d6-8a1c-7f3e-9b2a-4c5d6e7f8091"})
    assert e.value.param == "video"
