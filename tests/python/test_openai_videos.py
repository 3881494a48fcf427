"""OpenAI's videos API on a live `vgen serve`, driven by the official `openai` SDK (pinned in
tools/requirements.txt), as a backend team would point it at vgen: models.list, videos.create
(text, and image-to-video with input_reference), polling retrieve, download_content (video
probed with ffprobe, thumbnail, spritesheet), list with cursor paging in both orders, delete
(of a finished and of a running job), and bad requests surfacing as openai.BadRequestError
with the right `param`. One server with a token serves the tiny text-to-video package (the
default) and a tiny image-to-video package beside it. Every wait is on a job's state."""
from __future__ import annotations

import io
import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from test_cli_serve import Server, VGEN, package, probe  # noqa: F401  (the fleet case's module fixture)
from tiny_packages import tiny_wan

openai = pytest.importorskip("openai")
pytestmark = pytest.mark.skipif(not VGEN.exists(), reason="build/bin/vgen not built")

TOKEN = "sdk-token"
# The tiny package's fps is 8: "1" second is 4 * round(8 / 4) + 1 = 9 frames.
SMALL = {"size": "48x32", "seconds": "1"}
FAST = {"steps": 2}


@pytest.fixture(scope="module")
def packages(tmp_path_factory):
    root = tmp_path_factory.mktemp("openai_videos")
    for variant in ("t2v", "i2v"):
        tiny_wan(root / variant, variant)
    return root


@pytest.fixture(scope="module")
def service(packages, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("openai_videos_serve")
    config = tmp / "serve.json"
    config.write_text(json.dumps({"models": {"i2v": str(packages / "i2v")},
                                  "service": {"max_body_bytes": 8 << 20, "token": TOKEN}}))
    server = Server(packages / "t2v", tmp / "out", "--config", str(config))
    yield server
    server.kill()


@pytest.fixture
def client(service):
    return openai.OpenAI(base_url=f"http://127.0.0.1:{service.port}/v1", api_key=TOKEN, max_retries=0, timeout=120)


def wait_done(client, video_id, timeout=300):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = client.videos.retrieve(video_id)
        assert v.status in ("queued", "in_progress", "completed"), v
        if v.status == "completed":
            return v
        time.sleep(0.05)
    raise AssertionError(f"video {video_id} not completed within {timeout}s")


def wait_status(client, video_id, status, timeout=300):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = client.videos.retrieve(video_id)
        if v.status == status:
            return v
        time.sleep(0.05)
    raise AssertionError(f"video {video_id} never {status} within {timeout}s")


def test_models_lists_the_served_packages(client):
    models = {m.id: m for m in client.models.list()}
    assert set(models) == {"t2v", "i2v"}
    assert all(m.object == "model" for m in models.values())


def test_create_poll_download_and_the_same_job_under_v1_jobs(client, service, tmp_path):
    created = client.videos.create(prompt="a red circle moving left", model="t2v", **SMALL, extra_body={**FAST, "seed": 5})
    assert created.object == "video" and created.status in ("queued", "in_progress"), created
    assert created.size == "48x32" and created.seconds == "1" and created.model == "t2v"
    assert created.created_at > 1_700_000_000 and created.completed_at is None
    v = wait_done(client, created.id)
    assert v.progress == 100 and v.completed_at >= v.created_at and v.error is None
    assert v.expires_at is not None and v.expires_at > v.completed_at

    video = tmp_path / "v.mp4"
    client.videos.download_content(created.id).write_to_file(video)
    s = probe(video)
    assert (s["codec_name"], s["width"], s["height"], int(s["nb_read_frames"])) == ("h264", 48, 32, 9)
    # The same job through vgen's own API, and the same bytes.
    auth = {"Authorization": f"Bearer {TOKEN}"}
    status, _, job = service.json("GET", f"/v1/jobs/{created.id}", headers=auth)
    assert status == 200 and job["status"] == "done" and job["spec"]["frames"] == 9 and job["spec"]["seed"] == 5, job
    status, _, raw = service.request("GET", f"/v1/jobs/{created.id}/video", headers=auth)
    assert status == 200 and raw == video.read_bytes()

    import PIL.Image
    thumb = client.videos.download_content(created.id, variant="thumbnail").content
    assert thumb.startswith(b"\x89PNG\r\n\x1a\n")
    assert PIL.Image.open(io.BytesIO(thumb)).size == (48, 32)
    sheet = client.videos.download_content(created.id, variant="spritesheet").content
    assert sheet.startswith(b"\xff\xd8\xff")
    assert PIL.Image.open(io.BytesIO(sheet)).size == (3 * 48, 3 * 32)  # 9 frames: 3 x 3 tiles
    # Cached beside the video, and served again as the same bytes.
    stills = sorted(p.name for p in service.out_dir.iterdir() if ".thumbnail." in p.name or ".spritesheet." in p.name)
    assert len(stills) == 2, stills
    assert client.videos.download_content(created.id, variant="thumbnail").content == thumb


def test_list_pages_by_cursor_in_both_orders(client):
    ids = [client.videos.create(prompt=f"a blue square {i}", **SMALL, extra_body={**FAST, "seed": 10 + i}).id for i in range(3)]
    first = client.videos.list(limit=2)
    assert len(first.data) == 2 and first.has_more is True
    assert [v.id for v in first.data] == [ids[2], ids[1]]  # newest first
    newest_first = [v.id for v in client.videos.list(limit=2)]  # the SDK follows `after` page by page
    assert newest_first[:3] == ids[::-1]
    assert len(newest_first) == len(set(newest_first))
    oldest_first = [v.id for v in client.videos.list(limit=2, order="asc")]
    assert oldest_first == newest_first[::-1]
    last = client.videos.list(limit=100, after=ids[1])
    assert client.videos.list(after="0193b5d6-8a1c-7f3e-9b2a-4c5d6e7f8091").data == []  # never recorded: nothing after it
    assert [v.id for v in last.data][:1] == [ids[0]] and ids[1] not in [v.id for v in last.data]
    for i in ids:
        wait_done(client, i)


def test_delete_removes_a_finished_and_a_running_video(client, service):
    done = client.videos.create(prompt="a green star", **SMALL, extra_body={**FAST, "seed": 21})
    wait_done(client, done.id)
    client.videos.download_content(done.id, variant="thumbnail")
    job = service.json("GET", f"/v1/jobs/{done.id}", headers={"Authorization": f"Bearer {TOKEN}"})[2]
    output = service.out_dir / job["output_name"]
    assert output.exists()
    deleted = client.videos.delete(done.id)
    assert (deleted.id, deleted.deleted, deleted.object) == (done.id, True, "video.deleted")
    with pytest.raises(openai.NotFoundError):
        client.videos.retrieve(done.id)
    status, _, _ = service.request("GET", f"/v1/jobs/{done.id}", headers={"Authorization": f"Bearer {TOKEN}"})
    assert status == 404
    deadline = time.monotonic() + 60  # the video and its stills go once the watcher has seen the job's end
    while list(service.out_dir.glob(output.stem + ".*")) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not output.exists()
    assert not list(service.out_dir.glob(output.stem + ".*"))
    assert done.id not in [v.id for v in client.videos.list(limit=100)]
    with pytest.raises(openai.NotFoundError):
        client.videos.delete(done.id)

    # A running job: cancelled, then gone from both APIs; the service goes on with the next one.
    running = client.videos.create(prompt="a long one", size="64x64", seconds="1", extra_body={"steps": 1000, "seed": 22})
    wait_status(client, running.id, "in_progress")
    client.videos.delete(running.id)
    with pytest.raises(openai.NotFoundError):
        client.videos.retrieve(running.id)
    after = client.videos.create(prompt="after the delete", **SMALL, extra_body={**FAST, "seed": 23})
    wait_done(client, after.id)


def test_image_to_video_with_input_reference(client, packages, tmp_path):
    import PIL.Image
    from vgen_reference.wan_i2v_parity import test_image as pattern

    buf = io.BytesIO()
    PIL.Image.fromarray(pattern(32, 48)).save(buf, format="PNG")
    created = client.videos.create(prompt="a red circle moving left", model="i2v", **SMALL,
                                   input_reference=("in.png", buf.getvalue(), "image/png"), extra_body=FAST)
    assert created.model == "i2v"
    wait_done(client, created.id)
    video = tmp_path / "i2v.mp4"
    client.videos.download_content(created.id).write_to_file(video)
    s = probe(video)
    assert (s["width"], s["height"], int(s["nb_read_frames"])) == (48, 32, 9)
    # The i2v package needs the image: refused before anything is queued, naming input_reference.
    with pytest.raises(openai.BadRequestError) as e:
        client.videos.create(prompt="no image", model="i2v", **SMALL)
    assert e.value.param == "input_reference" and e.value.status_code == 400


@pytest.mark.parametrize("kwargs,param", [
    ({"size": "50x32"}, "size"),                       # not a multiple of 16
    ({"size": "large"}, "size"),
    ({"seconds": "600"}, "seconds"),                   # beyond the package's frames
    ({"model": "sora-2"}, "model"),                    # not served here
    ({"extra_body": {"steps": "many"}}, "steps"),
    ({"extra_body": {"colour": "red"}}, "colour"),     # not a field of either API
])
def test_bad_requests_name_their_param(client, kwargs, param):
    with pytest.raises(openai.BadRequestError) as e:
        client.videos.create(prompt="p", **{**SMALL, **kwargs})
    assert e.value.param == param, e.value.body
    assert e.value.type == "invalid_request_error"


def test_no_token_and_unfinished_content_are_refused_in_openais_shape(client, service):
    anonymous = openai.OpenAI(base_url=f"http://127.0.0.1:{service.port}/v1", api_key="wrong", max_retries=0, timeout=60)
    with pytest.raises(openai.AuthenticationError):
        anonymous.videos.list()
    with pytest.raises(openai.NotFoundError):
        client.videos.retrieve("0193b5d6-8a1c-7f3e-9b2a-4c5d6e7f8091")
    running = client.videos.create(prompt="not yet", size="64x64", seconds="1", extra_body={"steps": 1000, "seed": 31})
    try:
        for variant in ("video", "thumbnail", "spritesheet"):
            with pytest.raises(openai.ConflictError) as e:
                client.videos.download_content(running.id, variant=variant)
            assert "completed" in e.value.message
        with pytest.raises(openai.BadRequestError) as e:
            client.videos.download_content(running.id, variant="poster")
        assert e.value.param == "variant"
    finally:
        client.videos.delete(running.id)


def test_the_same_routes_through_a_fleet_front_end(tmp_path, package):  # noqa: F811
    """`vgen serve --queue`: the routes sit on the JobService, here the FleetClient; a worker
    renders. The front end holds no package, so the request names its fps (else seconds map at
    the generic 16 fps)."""
    import test_fleet

    if not test_fleet.HAVE_BROKER:
        pytest.skip("nats-server is not installed")
    if not test_fleet._vgen_has_worker():
        pytest.skip("vgen was built without the fleet")
    out = tmp_path / "out"
    out.mkdir()
    config = tmp_path / "fleet.json"
    config.write_text(json.dumps({"queue": {"ack_wait_ms": 2000, "fetch_wait_ms": 500}}))
    broker = test_fleet.Broker(tmp_path)
    front = worker = None
    try:
        front = Server(package, out, "--queue", broker.url, "--config", str(config), log_dir=tmp_path)
        worker = test_fleet.Worker("w1", broker, package, out, config, None)
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{front.port}/v1", api_key="none", max_retries=0, timeout=120)
        assert [m.id for m in client.models.list()] == [package.name]
        created = client.videos.create(prompt="a red circle moving left", **SMALL, extra_body={**FAST, "fps": 8, "seed": 41})
        assert created.size == "48x32" and created.seconds == "1"
        wait_done(client, created.id)
        video = tmp_path / "fleet.mp4"
        client.videos.download_content(created.id).write_to_file(video)
        s = probe(video)
        assert (s["width"], s["height"], int(s["nb_read_frames"])) == (48, 32, 9)
        assert client.videos.download_content(created.id, variant="thumbnail").content.startswith(b"\x89PNG")
        assert created.id in [v.id for v in client.videos.list()]
        with pytest.raises(openai.BadRequestError) as e:
            client.videos.create(prompt="p", size="48x32x", seconds="1")
        assert e.value.param == "size"
        client.videos.delete(created.id)
        with pytest.raises(openai.NotFoundError):
            client.videos.retrieve(created.id)
    finally:
        for p in (worker, front):
            if p:
                p.kill()
        broker.stop()
