"""`vgen serve` end to end on the tiny random Wan package: submit, follow the Server-Sent
Events, fetch the video (whole and by range) and probe it with ffprobe; cancel; 429 under a
full queue; 400/404/405/413/415 naming the problem; 401 with a token. Every request has a
timeout, and every server is stopped (SIGTERM, then killed) when its test ends."""
from __future__ import annotations

import http.client
import json
import os
import re
import select
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tiny_packages import tiny_wan

ROOT = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("VGEN_BUILD_DIR", ROOT / "build"))
VGEN = BUILD / "bin" / "vgen"
pytestmark = pytest.mark.skipif(not VGEN.exists(), reason="build/bin/vgen not built")

SMALL = {"width": 48, "height": 32, "frames": 9, "steps": 3, "fps": 12}
# A job that outlasts any test (cancelled by it), shaped unlike SMALL: see Server.hold_denoiser.
HOLDER = {"width": 64, "height": 64, "frames": 13, "steps": 1000}


def export_tiny_wan(root, variant="t2v", name=None):
    """The tiny random Wan package of `variant` (t2v, i2v, ...) exported to root/<name or variant>."""
    return tiny_wan(root / (name or variant), variant)  # exported once per build (tiny_packages.py)


@pytest.fixture(scope="module")
def package(tmp_path_factory):
    return export_tiny_wan(tmp_path_factory.mktemp("serve"), name="pkg")


class Server:
    """A `vgen serve` process on a free loopback port (`binary`: another build of the CLI, e.g.
    bin/vgen_test_families with the test-only families)."""

    def __init__(self, package, out_dir, *args, env=None, start_timeout=120, log_dir=None, binary=None):
        out_dir.mkdir(parents=True, exist_ok=True)
        self.out_dir = out_dir
        log_dir = log_dir or out_dir.parent  # elsewhere when that is a small file system under test
        self.log = open(log_dir / f"serve-{os.getpid()}-{time.monotonic_ns()}.log", "w+")
        cmd = [str(binary or VGEN), "--log-level", "info", "serve", "--listen", "127.0.0.1:0", "--model", str(package),
               "--output-dir", str(out_dir), *args]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=self.log, text=True,
                                     env={**os.environ, **(env or {})})
        try:
            ready, _, _ = select.select([self.proc.stdout], [], [], start_timeout)
            line = self.proc.stdout.readline() if ready else ""
            m = re.fullmatch(r"listening on http://127\.0\.0\.1:(\d+)\n", line)
            assert m, f"unexpected first line {line!r}; log:\n{self.logs()}"
            self.port = int(m.group(1))
            assert self.port != 0
        except BaseException:
            self.kill()
            raise

    def logs(self):
        self.log.flush()
        self.log.seek(0)
        return self.log.read()[-4000:]

    def conn(self, timeout=60):
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)

    def request(self, method, path, body=None, headers=None, timeout=60):
        c = self.conn(timeout)
        try:
            if isinstance(body, (dict, list)):
                body = json.dumps(body)
                headers = {"Content-Type": "application/json", **(headers or {})}
            c.request(method, path, body=body, headers=headers or {})
            r = c.getresponse()
            return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
        finally:
            c.close()

    def json(self, method, path, body=None, headers=None):
        status, hdrs, data = self.request(method, path, body, headers)
        return status, hdrs, json.loads(data) if data else None

    def events(self, job_id, until=None, timeout=120):
        """Reads the job's event stream to its end: [(event, data)]. `until(event, data)` is
        called for each event (e.g. to act on progress)."""
        c = self.conn(timeout)
        try:
            c.request("GET", f"/v1/jobs/{job_id}/events", headers={"Accept": "text/event-stream"})
            r = c.getresponse()
            assert r.status == 200, r.read()
            assert r.getheader("Content-Type") == "text/event-stream"
            out, event, data = [], None, []
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                line = r.readline()
                if not line:
                    return out  # the server ended the stream
                line = line.decode().rstrip("\n")
                if line.startswith("event: "):
                    event = line[7:]
                elif line.startswith("data: "):
                    data.append(line[6:])
                elif line == "" and event:
                    item = (event, json.loads("\n".join(data)))
                    out.append(item)
                    if until:
                        until(*item)
                    event, data = None, []
            raise AssertionError(f"event stream did not end within {timeout}s: {out}")
        finally:
            c.close()

    def hold_denoiser(self, spec, headers=None, timeout=300):
        """Submits `spec` and returns its id once it denoises. With one denoise worker (the
        default) the jobs submitted after it wait until it leaves: give it far more steps than
        the test takes and a shape no other job of the test has (so none joins its group), and
        cancel it when the test is ready (events_from_start). Its state lasts until then, so
        polling for it cannot miss it."""
        status, _, body = self.json("POST", "/v1/jobs", spec, headers)
        assert status == 202, body
        holder = body["id"]
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            status, _, body = self.json("GET", f"/v1/jobs/{holder}", headers=headers)
            assert status == 200 and body["status"] not in ("done", "failed", "cancelled"), body
            if body["progress"]["state"] == "denoise":
                return holder
            time.sleep(0.05)
        raise AssertionError(f"the holder {holder} did not start denoising within {timeout}s")

    def events_from_start(self, job_id, holder, until=None, timeout=120):
        """The whole event stream of a job submitted after `holder` (hold_denoiser): the holder
        is cancelled once the stream has answered, so the job runs only while it is followed
        and no event of it can be missed, however slow this process is."""
        released = []

        def release(event, data):
            if not released:
                released.append(self.json("DELETE", f"/v1/jobs/{holder}")[0])
            if until:
                until(event, data)
        events = self.events(job_id, until=release, timeout=timeout)
        assert released == [202], released  # the holder was still running: the job had waited
        first = events[0][1]
        assert events[0][0] == "progress" and first["state"] in ("queued", "preprocess", "denoise"), events[0]
        assert first["step"] == 0, events[0]  # it had not started denoising
        return events

    def wait_status(self, job_id, states, timeout=120):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            status, _, body = self.json("GET", f"/v1/jobs/{job_id}")
            assert status == 200, body
            if body["status"] in states:
                return body
            time.sleep(0.05)
        raise AssertionError(f"job {job_id} not in {states} within {timeout}s")

    def stop(self, timeout=60):
        """SIGTERM and expect a clean exit; kill if it does not come."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        finally:
            self.kill()

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self.proc.stdout.close()
        self.log.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.kill()


@pytest.fixture
def server(package, tmp_path):
    s = Server(package, tmp_path / "out")
    yield s
    s.kill()


def probe(path):
    out = subprocess.run(["ffprobe", "-v", "error", "-count_frames", "-show_entries",
                          "stream=codec_name,width,height,nb_read_frames", "-of", "json", str(path)],
                         capture_output=True, text=True, check=True, timeout=60).stdout
    return json.loads(out)["streams"][0]


def test_submit_events_video(server, tmp_path):
    # Waits behind a holder: a 3-step job can end before this process opens its event stream.
    holder = server.hold_denoiser({"prompt": "holding the denoiser", **HOLDER})
    status, hdrs, body = server.json("POST", "/v1/jobs", {"prompt": "a red circle moving left", "name": "clip",
                                                          "seed": 3, **SMALL})
    assert status == 202, body
    job = body["id"]
    assert body["status"] == "queued"
    assert hdrs["location"] == f"/v1/jobs/{job}" == body["links"]["self"]

    events = server.events_from_start(job, holder)
    names = [e for e, _ in events]
    # serve previews by default: the tiny package's exporter fitted its factors (test_web.py has more)
    assert names[-1] == "done" and set(names[:-1]) == {"progress", "preview"}, events
    steps = [d["step"] for e, d in events if e == "progress" and d["state"] == "denoise" and d["total"] == 3]
    assert steps and max(steps) == 3, events
    final = events[-1][1]
    assert final["status"] == "done" and final["output_name"] == "clip.mp4"
    assert set(final["stage_seconds"]) >= {"preprocess", "denoise", "decode", "encode"}

    status, _, st = server.json("GET", f"/v1/jobs/{job}")
    assert status == 200 and st["status"] == "done" and st["content_type"] == "video/mp4"
    assert st["spec"]["seed"] == 3 and st["cache_hit"] is False and "output" not in st

    status, hdrs, video = server.request("GET", f"/v1/jobs/{job}/video")
    assert status == 200
    assert hdrs["content-type"] == "video/mp4" and hdrs["accept-ranges"] == "bytes"
    assert int(hdrs["content-length"]) == len(video) > 0
    assert video == (server.out_dir / "clip.mp4").read_bytes()
    (tmp_path / "got.mp4").write_bytes(video)
    s = probe(tmp_path / "got.mp4")
    assert (s["codec_name"], s["width"], s["height"], int(s["nb_read_frames"])) == ("h264", 48, 32, 9)

    status, hdrs, part = server.request("GET", f"/v1/jobs/{job}/video", headers={"Range": "bytes=10-109"})
    assert status == 206 and part == video[10:110]
    assert hdrs["content-range"] == f"bytes 10-109/{len(video)}"
    status, _, part = server.request("GET", f"/v1/jobs/{job}/video", headers={"Range": "bytes=-16"})
    assert status == 206 and part == video[-16:]
    status, hdrs, _ = server.request("GET", f"/v1/jobs/{job}/video", headers={"Range": f"bytes={len(video)}-"})
    assert status == 416 and hdrs["content-range"] == f"bytes */{len(video)}"

    # An ended job's stream sends the final event at once.
    assert [e for e, _ in server.events(job, timeout=60)] == ["progress", "done"]

    status, hdrs, metrics = server.request("GET", "/metrics")
    assert status == 200 and hdrs["content-type"].startswith("text/plain; version=0.0.4")
    assert b"# TYPE" in metrics
    assert server.json("GET", "/healthz")[:3:2] == (200, {"status": "ok"})
    assert server.stop() == 0


def test_cancel_running_job(server):
    # 1000 steps of a larger clip: far longer than a loaded machine needs to cancel it at step 1.
    status, _, body = server.json("POST", "/v1/jobs", {"prompt": "a slow one", **SMALL, **HOLDER})
    assert status == 202, body
    job = body["id"]
    cancelled = []

    def cancel_once_denoising(event, data):
        if not cancelled and data.get("state") == "denoise" and data.get("step", 0) >= 1:
            cancelled.append(server.json("DELETE", f"/v1/jobs/{job}"))

    events = server.events(job, until=cancel_once_denoising)
    assert cancelled and cancelled[0][0] == 202, cancelled
    assert events[-1][0] == "cancelled", events[-3:]
    assert events[-1][1]["error"]["kind"] == "cancelled"
    st = server.wait_status(job, {"cancelled"}, timeout=60)
    assert st["status"] == "cancelled"
    status, _, body = server.json("GET", f"/v1/jobs/{job}/video")
    assert status == 409 and body["error"]["kind"] == "not_ready"
    status, _, body = server.json("DELETE", f"/v1/jobs/{job}")  # already ended: nothing to do
    assert status == 200 and body["status"] == "cancelled"
    assert server.stop() == 0


def test_bad_requests(server):
    def error(status, method, path, body=None, headers=None):
        got, hdrs, data = server.request(method, path, body, headers)
        assert got == status, data
        err = json.loads(data)["error"]
        return err, hdrs

    err, _ = error(400, "POST", "/v1/jobs", '{"prompt": "x", ', {"Content-Type": "application/json"})
    assert err["kind"] == "invalid_argument" and "not valid JSON" in err["message"]
    err, _ = error(400, "POST", "/v1/jobs", {"prompt": "x", "width": 250})
    assert err["message"] == "width: must be a multiple of 16 (got 250)"
    err, _ = error(400, "POST", "/v1/jobs", {"prompt": "x", "name": "../escape"})
    assert err["message"].startswith("name:")
    err, _ = error(400, "POST", "/v1/jobs", {"prompt": "x", "colour": "red"})
    assert err["message"].startswith("colour: unknown field")
    err, _ = error(400, "POST", "/v1/jobs", [1, 2])
    assert "JSON object" in err["message"]
    error(415, "POST", "/v1/jobs", "prompt=x", {"Content-Type": "application/x-www-form-urlencoded"})
    err, _ = error(413, "POST", "/v1/jobs", json.dumps({"prompt": "x" * 70000}), {"Content-Type": "application/json"})
    assert "65536" in err["message"]
    for method, path in [("GET", "/v1/jobs/nope"), ("DELETE", "/v1/jobs/nope"), ("GET", "/v1/jobs/nope/video"),
                         ("GET", "/v1/jobs/nope/events"), ("GET", "/v2/other")]:
        err, _ = error(404, method, path)
        assert err["kind"] == "not_found"
    err, hdrs = error(405, "PUT", "/v1/jobs/x")
    assert hdrs["allow"] == "GET, DELETE"
    # The journal, and the lock the service holds on its directory while it runs.
    assert [p for p in server.out_dir.iterdir() if not p.name.startswith((".vgen-journal.db", ".vgen.lock"))] == []
    assert (server.out_dir / ".vgen.lock").read_text() == f"{server.proc.pid}\n"
    assert server.stop() == 0
    assert not (server.out_dir / ".vgen.lock").exists()  # removed on a clean exit


def test_full_queue_answers_429(package, tmp_path):
    config = tmp_path / "small-queue.json"
    config.write_text(json.dumps({
        "stages": {s: {"workers": 1, "queue": 1} for s in ("preprocess", "denoise", "decode", "encode")},
        "batching": {"max_batch": 1}, "threads": {"per_device": 1},  # else max_batch x leases workers
        "service": {"max_connections": 64},
    }))
    with Server(package, tmp_path / "out", "--config", str(config)) as server:
        c = server.conn(timeout=30)
        statuses, accepted, retry_after = [], [], []
        for i in range(40):
            c.request("POST", "/v1/jobs", body=json.dumps({"prompt": "burst", **SMALL, "steps": 500, "seed": i}),
                      headers={"Content-Type": "application/json"})
            r = c.getresponse()
            body = json.loads(r.read())
            statuses.append(r.status)
            if r.status == 202:
                accepted.append(body["id"])
            if r.status == 429:
                assert body["error"]["kind"] == "overloaded"
                retry_after.append(r.getheader("Retry-After"))
        c.close()
        assert all(s in (202, 429) for s in statuses), statuses
        assert 0 < len(accepted) < 40 and retry_after, statuses
        assert all(v is not None and int(v) >= 1 for v in retry_after)
        for job in accepted:
            assert server.json("DELETE", f"/v1/jobs/{job}")[0] in (200, 202)
        for job in accepted:
            assert server.wait_status(job, {"cancelled", "done"})["status"] == "cancelled"
        # Room again once the queue has drained.
        status, _, body = server.json("POST", "/v1/jobs", {"prompt": "after", **SMALL, "seed": 99})
        assert status == 202, body
        assert server.stop() == 0


def test_token_required(package, tmp_path):
    with Server(package, tmp_path / "out", env={"VGEN_TOKEN": "s3cret"}) as server:
        assert server.request("GET", "/healthz")[0] == 200
        status, hdrs, body = server.request("GET", "/v1/jobs/x")
        assert status == 401 and hdrs["www-authenticate"] == "Bearer"
        assert json.loads(body)["error"]["kind"] == "unauthorized"
        assert server.request("GET", "/metrics", headers={"Authorization": "Bearer wrong!"})[0] == 401
        assert server.request("POST", "/v1/jobs", {"prompt": "x"})[0] == 401
        assert server.request("GET", "/v1/jobs/x", headers={"Authorization": "Bearer s3cret"})[0] == 404
        assert server.stop() == 0


def test_flags_override_config(package, tmp_path):
    config = tmp_path / "service.json"
    config.write_text(json.dumps({"service": {"token": "from-config", "max_body_bytes": 65536}, "job_ttl_s": 3600}))
    with Server(package, tmp_path / "out", "--config", str(config), "--token", "tok", "--max-body", "4096",
                "--job-ttl", "1") as server:
        auth = {"Authorization": "Bearer tok"}
        assert server.request("GET", "/metrics", headers={"Authorization": "Bearer from-config"})[0] == 401
        status, _, body = server.request("POST", "/v1/jobs", json.dumps({"prompt": "x" * 5000}),
                                         {**auth, "Content-Type": "application/json"})
        assert status == 413 and b"4096" in body
        status, _, body = server.json("POST", "/v1/jobs", {"prompt": "short", **SMALL}, auth)
        assert status == 202, body
        job = body["id"]
        deadline = time.monotonic() + 120
        while server.json("GET", f"/v1/jobs/{job}", headers=auth)[2]["status"] != "done":
            assert time.monotonic() < deadline
            time.sleep(0.05)
        time.sleep(1.5)  # past --job-ttl
        assert server.json("GET", f"/v1/jobs/{job}", headers=auth)[0] == 404
        assert server.stop() == 0


def test_print_routes_match_openapi():
    r = subprocess.run([str(VGEN), "serve", "--print-routes"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    doc = json.loads((ROOT / "docs" / "openapi.json").read_text())
    documented = {f"{m.upper()} {p}" for p, item in doc["paths"].items() for m in item if m != "parameters"}
    assert set(r.stdout.split("\n")) - {""} == documented


def test_bad_listen_address_exits_2(package, tmp_path):
    r = subprocess.run([str(VGEN), "serve", "--listen", "nonsense", "--model", str(package)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "listen" in r.stderr


@pytest.mark.parametrize("listen,args,warned", [
    ("0.0.0.0:0", [], True),
    ("0.0.0.0:0", ["--log-level", "off"], True),  # said even when the log is off
    ("0.0.0.0:0", ["--token", "s3cret"], False),
    ("127.0.0.1:0", [], False),
])
def test_listening_beyond_loopback_without_a_token_warns(package, tmp_path, listen, args, warned):
    pre = [a for a in args if a != "--token" and a != "s3cret"]
    post = [a for a in args if a in ("--token", "s3cret")]
    cmd = [str(VGEN), *pre, "serve", "--listen", listen, "--model", str(package), "--output-dir", str(tmp_path / "out"), *post]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={k: v for k, v in os.environ.items() if k != "VGEN_TOKEN"})
    try:
        ready, _, _ = select.select([proc.stdout], [], [], 120)
        line = proc.stdout.readline() if ready else ""
        assert line.startswith("listening on http://"), line
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert ("open to the network WITHOUT authentication" in stderr) == warned, stderr
