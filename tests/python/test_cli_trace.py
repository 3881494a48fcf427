"""The trace timeline (issue 24): `vgen batch --trace FILE` writes Chrome / Perfetto trace JSON
with a track per stage worker, compute thread and job, denoise steps with their batch sizes and
each job's queue waits; `vgen serve` records N seconds on GET /v1/trace and, without
--output-dir, writes into $XDG_DATA_HOME/vgen/serve instead of the current directory."""
from __future__ import annotations

import http.client
import json
import os
import re
import select
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from vgen_trace import picture as trace_picture
from tiny_packages import tiny_wan

BUILD = Path(os.environ.get("VGEN_BUILD_DIR", Path(__file__).resolve().parents[2] / "build"))
VGEN = BUILD / "bin" / "vgen"
pytestmark = pytest.mark.skipif(not VGEN.exists(), reason="build/bin/vgen not built")
SMALL = ["--width", "32", "--height", "32", "--frames", "5", "--steps", "3"]


@pytest.fixture(scope="module")
def package(tmp_path_factory):
    root = tmp_path_factory.mktemp("trace")
    return tiny_wan(root / "pkg")


def schema_problems(trace) -> list[str]:
    """What Perfetto's JSON importer needs (the same rules as vgen::check_trace_json)."""
    if not isinstance(trace, dict) or not isinstance(trace.get("traceEvents"), list):
        return ["no traceEvents array"]
    problems, named, used = [], set(), set()
    for i, e in enumerate(trace["traceEvents"]):
        if not (isinstance(e, dict) and isinstance(e.get("name"), str) and isinstance(e.get("ph"), str)
                and isinstance(e.get("pid"), int) and isinstance(e.get("tid"), int)):
            problems.append(f"event {i}: name/ph/pid/tid")
            continue
        if e["ph"] == "M":
            if e["name"] == "thread_name":
                named.add((e["pid"], e["tid"]))
            continue
        if e["ph"] not in ("X", "i"):
            problems.append(f"event {i}: phase {e['ph']}")
        if not isinstance(e.get("ts"), (int, float)) or e["ts"] < 0:
            problems.append(f"event {i}: ts")
        if e["ph"] == "X" and (not isinstance(e.get("dur"), (int, float)) or e["dur"] < 0):
            problems.append(f"event {i}: dur")
        used.add((e["pid"], e["tid"]))
    problems += [f"track {k} unnamed" for k in used - named]
    return problems


def tracks_of(trace):
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in trace["traceEvents"]
             if e["ph"] == "M" and e["name"] == "thread_name"}
    return names


def test_batch_trace_has_stage_device_and_job_tracks(package, tmp_path):
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("".join(f"shape {i} moving left\n" for i in range(16)))
    trace_file = tmp_path / "run.trace.json"
    r = subprocess.run([str(VGEN), "batch", str(prompts), "--out", str(tmp_path / "out"), "--model", str(package),
                        "--max-batch", "4", "--trace", str(trace_file), *SMALL],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    trace = json.loads(trace_file.read_text())
    assert schema_problems(trace) == []
    names = tracks_of(trace)
    spans = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    track = lambda e: names[(e["pid"], e["tid"])]  # noqa: E731

    # Every job has its own track with its four stages and the queue waits before them.
    job_tracks = {n for n in names.values() if n.startswith("job ")}
    assert len(job_tracks) == 16
    for stage in ("preprocess", "denoise", "decode", "encode"):
        on_jobs = [e for e in spans if e["name"] == stage and track(e).startswith("job ")]
        assert len(on_jobs) == 16, stage
        on_workers = [e for e in spans if e["name"] == stage and track(e).startswith(stage + " worker ")]
        assert len(on_workers) == 16, stage
    assert any(e["name"] == "queued denoise" for e in spans)

    # Denoise steps on compute-thread tracks, with their batch sizes: 16 jobs x 3 steps in all.
    steps = [e for e in spans if e["name"] == "denoise step"]
    assert steps and all(track(e).startswith("cpu:0 thread ") for e in steps)
    assert sum(e["args"]["batch"] for e in steps) == 16 * 3
    assert max(e["args"]["batch"] for e in steps) > 1
    # A job's stages follow one another in time on its track.
    first = sorted((e for e in spans if track(e) == sorted(job_tracks)[0] and not e["name"].startswith("queued")),
                   key=lambda e: e["ts"])
    assert [e["name"] for e in first] == ["lookup", "preprocess", "denoise", "decode", "encode"]  # batch has a result cache
    for a, b in zip(first, first[1:]):
        assert a["ts"] + a["dur"] <= b["ts"] + 1  # microseconds, rounding

    # The picture tool draws it.
    info = trace_picture.draw(trace_file, tmp_path / "t.svg", "test")
    assert info["tracks"] >= 16 + 4 and (tmp_path / "t.svg").read_text().startswith("<svg")


def test_trace_flag_with_an_unwritable_file_still_renders(package, tmp_path):
    prompts = tmp_path / "p.txt"
    prompts.write_text("one\n")
    r = subprocess.run([str(VGEN), "batch", str(prompts), "--out", str(tmp_path / "out"), "--model", str(package),
                        "--trace", str(tmp_path / "missing" / "dir" / "t.json"), *SMALL],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "could not write the trace" in r.stderr


def start_serve(package, cwd, env, *args):
    cmd = [str(VGEN), "serve", "--listen", "127.0.0.1:0", "--model", str(package), *args]
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    ready, _, _ = select.select([proc.stdout], [], [], 180)
    line = proc.stdout.readline() if ready else ""
    m = re.fullmatch(r"listening on http://127\.0\.0\.1:(\d+)\n", line)
    if not m:
        proc.kill()
        raise AssertionError(f"unexpected first line {line!r}: {proc.stderr.read()[-3000:]}")
    return proc, int(m.group(1))


def request(port, method, path, body=None, timeout=120):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        headers = {"Content-Type": "application/json"} if body is not None else {}
        c.request(method, path, body=None if body is None else json.dumps(body), headers=headers)
        r = c.getresponse()
        return r.status, r.read()
    finally:
        c.close()


def test_serve_records_a_trace_window_and_defaults_its_output_dir(package, tmp_path):
    cwd, xdg = tmp_path / "cwd", tmp_path / "xdg"
    cwd.mkdir()
    env = {**os.environ, "XDG_DATA_HOME": str(xdg)}
    proc, port = start_serve(package, cwd, env)
    try:
        assert request(port, "GET", "/v1/trace?seconds=0")[0] == 400
        assert request(port, "GET", "/v1/trace?seconds=abc")[0] == 400
        # The window's response head comes once it is recording: the job is submitted after
        # that, not after a thread that may not have been scheduled yet.
        window = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        try:
            window.request("GET", "/v1/trace?seconds=10")
            answer = window.getresponse()
            assert answer.status == 200
            status, body = request(port, "POST", "/v1/jobs", {"prompt": "a red circle", "width": 32, "height": 32,
                                                               "frames": 5, "steps": 2, "name": "traced"})
            assert status == 202, body
            job = json.loads(body)["id"]
            trace = json.loads(answer.read())
        finally:
            window.close()
        assert schema_problems(trace) == []
        names = set(tracks_of(trace).values())
        assert f"job {job}" in names
        assert any(n.startswith("cpu:0 thread ") for n in names)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=120)
    # Nothing in the directory serve was started from; videos and journal in the explicit folder.
    assert list(cwd.iterdir()) == []
    served = xdg / "vgen" / "serve"
    assert (served / ".vgen-journal.db").exists()
    assert (served / "traced.mp4").exists()
