"""Live video through the fleet (issue 32 item 4 on a front end, api/fleet/live_relay.hpp):
`GET /v1/jobs/{id}/video?live=1` on a `vgen serve --queue` front end streams the fragmented MP4
that a `vgen worker` (another process) encodes, relayed through the broker's <stream>_LIVE stream,
with chunked transfer, while the job runs.

- ffprobe decodes frames from the front end's live route before the job ends: the worker's fault
  plan holds the job in its encode stage after the encode until the test cancels it (an event,
  not a race), so its status read after the probe is still running.
- The worker's file of a watched job is the same bytes as that of the same job nobody watched,
  and the stream decodes to every frame.
- A client that disconnects mid-stream costs the job nothing: it ends done with the same bytes.
Order is made by events: the job waits in the worker's Runtime behind a holder (a job of far more
steps, --capacity 2 so that the worker holds both) until the worker's log says it relays the job
(the front end asked for it); only then is the holder cancelled.
Skipped with a reason when nats-server is not installed or vgen was built without the fleet."""
from __future__ import annotations

import hashlib
import json
import time

import pytest

from test_cli_serve import HOLDER, Server, package  # noqa: F401  (the module-scoped fixture)
from test_fleet import Broker, Worker, pytestmark  # noqa: F401  (pytestmark: the fleet's skips)
from test_live_stream import Live, boxes, has_a_fragment, probed_frames

# 33 frames at 8 fps: about four seconds of video, so several fragments.
LONG = {"width": 48, "height": 32, "frames": 33, "fps": 8, "steps": 2, "seed": 7}
# The holder stays in denoise until cancelled (held by the fault plan, not by a step count a
# warm machine might finish first); a "held-after-encode" job stays in encode until cancelled.
FAULTS = json.dumps({"hold": [{"stage": "encode", "prompt": "held-after-encode"}, {"stage": "denoise", "prompt": "a grey holder"}]})


@pytest.fixture
def fleet(tmp_path, package):  # noqa: F811
    """A broker, a front end and a worker (separate processes: the front end encodes nothing),
    stopped at the end. The result cache is off, so that a job of the same spec renders again."""
    made = []
    out = tmp_path / "out"
    out.mkdir()
    config = tmp_path / "fleet.json"
    config.write_text(json.dumps({"queue": {"ack_wait_ms": 5000, "fetch_wait_ms": 500}, "batching": {"max_batch": 1},
                                  "threads": {"per_device": 1}, "cache": {"results": {"entries": 0}}}))

    class Fleet:
        def start(self, env=None):
            self.broker = Broker(tmp_path)
            made.append(self.broker)
            self.server = Server(package, out, "--queue", self.broker.url, "--config", str(config), log_dir=tmp_path)
            made.append(self.server)
            # Two jobs held at once: the watched job waits in the worker's Runtime behind the holder.
            self.worker = Worker("w1", self.broker, package, out, config, env, ["--capacity", "2"])
            made.append(self.worker)
            return self.server, self.worker

    yield Fleet()
    for m in reversed(made):
        m.stop() if isinstance(m, Broker) else m.kill()


def submit(server, prompt, spec=LONG):
    status, _, body = server.json("POST", "/v1/jobs", {**spec, "prompt": prompt})
    assert status == 202, body
    return body["id"]


def wait_state(server, job, pred, timeout=300):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status, _, body = server.json("GET", f"/v1/jobs/{job}")
        if status == 200 and pred(body):
            return body
        time.sleep(0.1)
    raise AssertionError(f"job {job}: not reached within {timeout}s: {body}")


def wait_logged(worker, text, timeout=300):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if text in worker.logs():
            return
        time.sleep(0.1)
    raise AssertionError(f"worker {worker.name} never logged {text!r}:\n{worker.logs()}")


def watched(server, worker, prompt, path="video"):
    """A job that runs only once a live client of the front end is open and its worker relays it."""
    holder = submit(server, "a grey holder", {**HOLDER})
    wait_state(server, holder, lambda b: b["progress"]["state"] == "denoise")
    job = submit(server, prompt)
    route = f"/v1/jobs/{job}/video?live=1" if path == "video" else f"/v1/videos/{job}/content?live=1"
    live = Live(server, route)
    wait_logged(worker, f"live relay of job {job}:")  # the front end asked, the worker relays
    assert server.json("DELETE", f"/v1/jobs/{holder}")[0] == 202
    return job, live


def test_frames_are_probed_from_the_front_end_before_the_job_ends(fleet):
    server, worker = fleet.start(env={"VGEN_FAULTS": FAULTS})
    job, live = watched(server, worker, "a red circle, held-after-encode")

    early = live.read_until(has_a_fragment)
    kinds = [t for t, _ in boxes(early)]
    assert kinds[:2] == ["ftyp", "moov"], kinds
    prefix = b"".join(b for _, b in boxes(early)[:kinds.index("mdat") + 1])
    assert 0 < probed_frames(prefix) < LONG["frames"]
    status, _, body = server.json("GET", f"/v1/jobs/{job}")
    assert status == 200 and body["status"] not in ("done", "failed", "cancelled"), body  # still running

    whole = live.read_to_end()  # ends with the worker's encode; the job is still held there
    assert probed_frames(whole) == LONG["frames"]
    assert server.json("GET", f"/v1/jobs/{job}")[2]["status"] not in ("done", "failed", "cancelled")
    assert server.json("DELETE", f"/v1/jobs/{job}")[0] == 202
    wait_state(server, job, lambda b: b["status"] == "cancelled")


def test_the_watched_file_is_the_unwatched_bytes_and_a_client_that_leaves_costs_nothing(fleet):
    server, worker = fleet.start(env={"VGEN_FAULTS": FAULTS})
    prompt = "a blue square drifting"
    plain = submit(server, prompt)
    wait_state(server, plain, lambda b: b["status"] == "done")
    status, _, unwatched = server.request("GET", f"/v1/jobs/{plain}/video")
    assert status == 200

    job, live = watched(server, worker, prompt, path="content")
    streamed = live.read_to_end()
    wait_state(server, job, lambda b: b["status"] == "done")
    status, _, file = server.request("GET", f"/v1/jobs/{job}/video")
    assert status == 200 and hashlib.sha256(file).digest() == hashlib.sha256(unwatched).digest()
    assert [t for t, _ in boxes(streamed)][:3] == ["ftyp", "moov", "moof"]  # a stream, not the file
    assert probed_frames(streamed) == LONG["frames"]

    # A client that reads the first fragment and goes: the job still ends done, same bytes.
    leaver, live = watched(server, worker, prompt)
    live.read_until(has_a_fragment)
    live.conn.close()
    wait_state(server, leaver, lambda b: b["status"] == "done")
    status, _, file = server.request("GET", f"/v1/jobs/{leaver}/video")
    assert status == 200 and hashlib.sha256(file).digest() == hashlib.sha256(unwatched).digest()
