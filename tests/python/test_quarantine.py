"""Poison-job quarantine (issue: recovery): a job that kills the worker process every time
it reaches its denoise stage (fault injection's "crash" drill: SIGKILL, no cleanup) is failed
with "crashed the worker 2 times" after the second crash, instead of crash-looping the
service on every restart; the other accepted jobs resume and finish."""
from __future__ import annotations

import json
import sqlite3
import subprocess

from test_cli_serve import SMALL, VGEN, Server, package  # noqa: F401  (package is a fixture)

CRASH = {"VGEN_FAULTS": json.dumps({"crash": {"stage": "denoise", "prompt": "POISON"}})}


def run_until_crash(package, out, timeout=300):
    """One restart of the service that dies of the poison job (it never needs to listen)."""
    cmd = [str(VGEN), "serve", "--listen", "127.0.0.1:0", "--model", str(package), "--output-dir", str(out)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**__import__("os").environ, **CRASH})
    try:
        return proc.wait(timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def attempts(out):
    with sqlite3.connect(out / ".vgen-journal.db") as db:
        return {row[0]: (row[1], row[2]) for row in db.execute("SELECT id, status, attempts FROM jobs")}


def test_a_job_that_crashes_the_worker_twice_is_quarantined(package, tmp_path):
    out = tmp_path / "out"
    server = Server(package, out, env=CRASH)
    try:
        ids = []
        for i, prompt in enumerate(["a red circle moving left", "POISON square", "a blue square moving up"]):
            status, _, body = server.json("POST", "/v1/jobs", {"prompt": prompt, "seed": i, **SMALL})
            assert status == 202, body
            ids.append(body["id"])
        assert server.proc.wait(300) == -9  # the poison job killed the process (first crash)
    finally:
        server.kill()
    poison = ids[1]
    assert attempts(out)[poison] == ("running", 1)

    assert run_until_crash(package, out) == -9  # resumed, and it crashed the worker again
    assert attempts(out)[poison] == ("running", 2)

    server = Server(package, out, env=CRASH)  # quarantined at start: this one survives
    try:
        results = {i: server.wait_status(i, {"done", "failed", "cancelled"}, timeout=300) for i in ids}
        assert results[poison]["status"] == "failed"
        assert results[poison]["error"]["message"] == "crashed the worker 2 times"
        assert all(results[i]["status"] == "done" for i in ids if i != poison), results
        status, _, metrics = server.request("GET", "/metrics")
        assert status == 200 and b"vgen_jobs_quarantined_total 1" in metrics
    finally:
        assert server.stop() == 0
    assert attempts(out)[poison] == ("failed", 2)
