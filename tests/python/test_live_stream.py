"""Video while it is made (issue 32 item 4): `GET /v1/jobs/{id}/video?live=1` and
`GET /v1/videos/{id}/content?live=1` on a live `vgen serve` stream a running job's video as
fragmented MP4 with chunked transfer.

- ffprobe decodes frames from the live route before the job ends. "Before" is an event, not a
  race: the fault plan's "hold" keeps that job in its encode stage after the encode until the
  test cancels it, so its status read after the probe is still running, however slow the machine.
- The file of a watched job is the same bytes as the file of the same job nobody watched (the
  result cache is off, so both render), the live stream decodes to the same frames, and a finished
  job's live=1 serves the file itself.
- The first fragment leaves while the job is still in its decode stage (held there by the fault
  plan: an event, not timing), since a watched job's frames go to the encoder chunk by chunk as
  the VAE decodes them (stages/exec/chunked_decode.hpp, stages/media/streamed_encode.hpp).
- Two clients at once (both routes) get the same stream; a client that disconnects mid-stream
  costs the job nothing (it completes with the same bytes); a cancelled job ends the stream cleanly.
Each watched job is released by cancelling a "holder" (Server.hold_denoiser) only after its
live request has been answered, so the stream is open before the job's encode starts."""
from __future__ import annotations

import hashlib
import json
import os
import subprocess

import pytest

from test_cli_serve import HOLDER, Server, VGEN, package  # noqa: F401  (package: the module fixture)

pytestmark = pytest.mark.skipif(not VGEN.exists(), reason="build/bin/vgen not built")

# 33 frames at 8 fps: about four seconds of video, so several fragments (one about every half second).
LONG = {"width": 48, "height": 32, "frames": 33, "fps": 8, "steps": 2, "seed": 7}
FAULTS = {"hold": [{"stage": "encode", "prompt": "held-after-encode"},
                   {"stage": "preprocess", "prompt": "held-before-encode"},
                   {"stage": "decode", "prompt": "held-in-decode"}]}


@pytest.fixture(scope="module")
def server(package, tmp_path_factory):  # noqa: F811
    tmp = tmp_path_factory.mktemp("live_stream")
    config = tmp / "serve.json"
    config.write_text(json.dumps({"cache": {"results": {"entries": 0}}}))
    s = Server(package, tmp / "out", "--config", str(config), env={"VGEN_FAULTS": json.dumps(FAULTS)})
    yield s
    s.kill()


def submit(server, prompt, **extra):
    status, _, body = server.json("POST", "/v1/jobs", {**LONG, "prompt": prompt, **extra})
    assert status == 202, body
    return body["id"]


class Live:
    """One client of a live route: the response head is read at once (the stream is open on the
    server from then on); the body is read as it comes."""

    def __init__(self, server, path, timeout=300):
        self.conn = server.conn(timeout)
        self.conn.request("GET", path)
        self.response = self.conn.getresponse()
        assert self.response.status == 200, self.response.read()
        assert self.response.getheader("Content-Type") == "video/mp4"
        assert self.response.getheader("Transfer-Encoding") == "chunked"
        self.body = b""

    def read_some(self):
        data = self.response.read1(1 << 16)
        self.body += data
        return data

    def read_until(self, enough):
        while not enough(self.body):
            assert self.read_some(), "the stream ended first"
        return self.body

    def read_to_end(self):
        # http.client raises IncompleteRead if the chunked body does not end with its last chunk.
        while self.read_some():
            pass
        self.conn.close()
        return self.body


def boxes(data):
    """Complete top-level MP4 boxes at the start of `data`: [(type, bytes)]."""
    out, at = [], 0
    while at + 8 <= len(data):
        size = int.from_bytes(data[at:at + 4], "big")
        if size < 8 or at + size > len(data):
            break
        out.append((data[at + 4:at + 8].decode("latin-1"), data[at:at + size]))
        at += size
    return out


def has_a_fragment(data):
    return "mdat" in [t for t, _ in boxes(data)]


def frame_hashes(data):
    """ffmpeg's per-frame MD5s of an MP4 read from a pipe (no seeking: as a player reads a stream)."""
    out = subprocess.run(["ffmpeg", "-v", "error", "-i", "pipe:0", "-f", "framemd5", "-"], input=data,
                         capture_output=True, check=True, timeout=120).stdout.decode()
    return [line.split(",")[-1].strip() for line in out.splitlines() if line and not line.startswith("#")]


def probed_frames(data):
    """Frames ffprobe decodes from `data` on a pipe."""
    out = subprocess.run(["ffprobe", "-v", "error", "-count_frames", "-select_streams", "v:0", "-show_entries",
                          "stream=codec_name,nb_read_frames", "-of", "json", "-i", "pipe:0"], input=data,
                         capture_output=True, check=True, timeout=120).stdout
    stream = json.loads(out)["streams"][0]
    assert stream["codec_name"] == "h264", stream
    return int(stream["nb_read_frames"])


def video(server, job_id, query=""):
    status, headers, data = server.request("GET", f"/v1/jobs/{job_id}/video{query}")
    assert status == 200, data
    return data


def test_frames_are_probed_from_the_live_route_before_the_job_ends(server):
    holder = server.hold_denoiser({**HOLDER, "prompt": "a grey holder"})
    job = submit(server, "a red circle, held-after-encode")
    live = Live(server, f"/v1/jobs/{job}/video?live=1")
    assert server.json("DELETE", f"/v1/jobs/{holder}")[0] == 202  # the job runs from now on

    early = live.read_until(has_a_fragment)
    kinds = [t for t, _ in boxes(early)]
    assert kinds[:2] == ["ftyp", "moov"], kinds  # the init segment first
    prefix = b"".join(b for _, b in boxes(early)[:kinds.index("mdat") + 1])
    first = probed_frames(prefix)  # the first fragment alone
    assert 0 < first < LONG["frames"], first
    status, _, body = server.json("GET", f"/v1/jobs/{job}")
    assert status == 200 and body["status"] not in ("done", "failed", "cancelled"), body  # still running

    whole = live.read_to_end()  # the stream ends when the encode does; the job is still held
    assert probed_frames(whole) == LONG["frames"]
    assert server.json("GET", f"/v1/jobs/{job}")[2]["status"] not in ("done", "failed", "cancelled")
    assert server.json("DELETE", f"/v1/jobs/{job}")[0] == 202
    assert server.wait_status(job, ("cancelled",))["status"] == "cancelled"
    # Ended: live=1 answers as the plain route does (a cancelled job has no video).
    status, _, body = server.json("GET", f"/v1/jobs/{job}/video?live=1")
    assert status == 409, body


def test_the_first_fragment_leaves_while_the_job_is_still_in_its_decode_stage(server):
    """A watched job is encoded while it decodes (its family decodes in time chunks: the tiny Wan
    package has the VAE's packed streaming methods). The fault plan holds this job in its decode
    stage until it is cancelled, so it never reaches the encode stage: every byte of the stream
    comes from the encode that runs during decode, and the job's status, read after the first
    fragment, says "decode". Before chunked decode this stream stayed empty until cancelled."""
    holder = server.hold_denoiser({**HOLDER, "prompt": "a grey holder"})
    job = submit(server, "a red circle, held-in-decode")
    live = Live(server, f"/v1/jobs/{job}/video?live=1")
    assert server.json("DELETE", f"/v1/jobs/{holder}")[0] == 202  # the job runs from now on

    early = live.read_until(has_a_fragment)
    kinds = [t for t, _ in boxes(early)]
    assert kinds[:2] == ["ftyp", "moov"], kinds
    status, _, body = server.json("GET", f"/v1/jobs/{job}")
    assert status == 200 and body["status"] == "decode", body  # held there: the encode stage never ran
    prefix = b"".join(b for _, b in boxes(early)[:kinds.index("mdat") + 1])
    assert 0 < probed_frames(prefix) < LONG["frames"]
    whole = live.read_until(lambda data: probed_frames_or_zero(data) == LONG["frames"])  # all of it, still in decode
    assert server.json("GET", f"/v1/jobs/{job}")[2]["status"] == "decode"
    assert server.json("DELETE", f"/v1/jobs/{job}")[0] == 202
    assert server.wait_status(job, ("cancelled",))["status"] == "cancelled"
    assert len(frame_hashes(whole)) == LONG["frames"]
    # The encode finished during decode, but the file is the job's only through its encode
    # stage: cancelled first, it is never put in place (before the fix <id>.mp4 stayed).
    output = server.json("GET", f"/v1/jobs/{job}")[2].get("output") or ""
    visible = [p.name for p in server.out_dir.iterdir() if not p.name.startswith(".")]
    assert not any(name.startswith(job) for name in visible), visible
    assert not output or not os.path.exists(output), output
    # (That the stream and the file are the unwatched job's bytes and frames: the next test,
    # whose watched job now takes this same path.)


def probed_frames_or_zero(data):
    try:
        return probed_frames(data)
    except subprocess.CalledProcessError:
        return 0


def test_the_watched_file_is_the_unwatched_bytes_and_two_clients_get_the_same_stream(server):
    prompt = "a blue square drifting"
    plain = submit(server, prompt)
    server.wait_status(plain, ("done",))
    unwatched = video(server, plain)

    holder = server.hold_denoiser({**HOLDER, "prompt": "a grey holder"})
    job = submit(server, prompt)
    first = Live(server, f"/v1/jobs/{job}/video?live=1")
    second = Live(server, f"/v1/videos/{job}/content?live=1")  # OpenAI's route, the same switch
    assert server.json("DELETE", f"/v1/jobs/{holder}")[0] == 202
    streamed = first.read_to_end()
    assert second.read_to_end() == streamed
    server.wait_status(job, ("done",))

    watched = video(server, job)
    assert hashlib.sha256(watched).hexdigest() == hashlib.sha256(unwatched).hexdigest()  # the file is unchanged
    assert video(server, job, "?live=1") == watched  # finished: live=1 serves the file
    assert frame_hashes(streamed) == frame_hashes(watched)  # the stream is the same frames
    assert len(frame_hashes(streamed)) == LONG["frames"]


def test_a_client_that_disconnects_mid_stream_costs_the_job_nothing(server):
    prompt = "a green triangle"
    plain = submit(server, prompt)
    server.wait_status(plain, ("done",))
    unwatched = video(server, plain)

    holder = server.hold_denoiser({**HOLDER, "prompt": "a grey holder"})
    job = submit(server, prompt)
    gone = Live(server, f"/v1/jobs/{job}/video?live=1")
    assert server.json("DELETE", f"/v1/jobs/{holder}")[0] == 202
    gone.read_until(lambda data: len(data) > 0)
    gone.conn.close()  # mid-stream
    assert server.wait_status(job, ("done", "failed", "cancelled"))["status"] == "done"
    assert video(server, job) == unwatched


def test_a_cancelled_job_ends_the_stream_cleanly(server):
    job = submit(server, "held-before-encode: a yellow star")
    live = Live(server, f"/v1/jobs/{job}/video?live=1")  # waits for a first fragment that never comes
    assert server.json("DELETE", f"/v1/jobs/{job}")[0] == 202
    assert live.read_to_end() == b""  # the last chunk came: a clean end, no bytes
    assert server.wait_status(job, ("cancelled",))["status"] == "cancelled"


def test_bad_live_values_are_refused(server):
    status, _, body = server.json("GET", "/v1/jobs/nope/video?live=maybe")
    assert status in (400, 404), body
    job = submit(server, "held-before-encode: a query check")
    status, _, body = server.json("GET", f"/v1/jobs/{job}/video?live=maybe")
    assert status == 400 and "live" in body["error"]["message"], body
    status, _, body = server.json("GET", f"/v1/videos/{job}/content?live=1&variant=thumbnail")
    assert status == 400, body
    assert server.json("DELETE", f"/v1/jobs/{job}")[0] == 202
    server.wait_status(job, ("cancelled",))
