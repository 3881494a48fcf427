"""Crash recovery of `vgen serve`: jobs acknowledged with 202 survive a SIGKILL. After a
restart over the same output directory (and its journal) the unfinished jobs resume under
their ids and finish; the ones journaled done are still answered for and not rendered again; no
temporary files remain."""
from __future__ import annotations

import json
import sqlite3

from test_cli_serve import SMALL, Server, package  # noqa: F401  (package is a fixture)


def test_serve_resumes_acknowledged_jobs_after_sigkill(package, tmp_path):
    out = tmp_path / "out"
    spec = {**SMALL, "steps": 20}
    # The kill lands mid-run by construction, not by the timing of this process: the fault drill
    # SIGKILLs the service (no shutdown, no flushing) as the last job starts encoding. Jobs go one
    # at a time (an auto-tuned group could finish all 5 at once), in order, and the one encoder
    # writes each output before it takes the next: four are finished then, the last is not.
    drill = {"VGEN_FAULTS": json.dumps({"crash": {"stage": "encode", "prompt": "moving left 4"}})}
    server = Server(package, out, "--max-batch", "1", env=drill)
    try:
        ids = []
        for i in range(5):
            status, _, body = server.json("POST", "/v1/jobs", {"prompt": f"a red circle moving left {i}", "seed": i, **spec})
            assert status == 202, body
            ids.append(body["id"])
        assert server.proc.wait(timeout=600) == -9
    finally:
        server.kill()
    files_before = {p.name: p.stat().st_mtime_ns for p in out.glob("*.mp4")}
    assert 1 <= len(files_before) < len(ids), "the kill should land mid-run"
    with sqlite3.connect(out / ".vgen-journal.db") as db:
        recorded = {row[0]: row[1] for row in db.execute("SELECT id, status FROM jobs")}
    assert set(recorded) == set(ids)  # every acknowledged job was in the journal before the kill
    # What "finished" means is what the journal says: a job's file is put in place before its end
    # is journaled (on the store's thread), and the encoder may take the next job in between, so
    # the kill can land after a file and before its record. That job has not ended for anyone
    # (no client saw it done) and is rendered again; every journaled end is final.
    done_before = {f"{i}.mp4": files_before[f"{i}.mp4"] for i, s in recorded.items() if s == "done"}
    assert set(done_before) <= set(files_before)  # nothing journaled done without its file
    assert all(recorded[i] != "done" for i in ids if f"{i}.mp4" not in files_before)

    server = Server(package, out)
    try:
        results = {i: server.wait_status(i, {"done", "failed", "cancelled"}, timeout=300) for i in ids}
        assert all(r["status"] == "done" for r in results.values()), results
        status, hdrs, video = server.request("GET", f"/v1/jobs/{ids[0]}/video")
        assert status == 200 and hdrs["content-type"] == "video/mp4" and len(video) > 0
    finally:
        server.stop()
    for name, mtime in done_before.items():
        assert (out / name).stat().st_mtime_ns == mtime  # journaled done before the kill: not redone
    names = sorted(p.name for p in out.iterdir() if not p.name.startswith(".vgen-journal.db"))
    assert len(names) == len(ids) and all(n.endswith(".mp4") for n in names)  # one output each, no temporaries
    with sqlite3.connect(out / ".vgen-journal.db") as db:
        assert {row[0] for row in db.execute("SELECT DISTINCT status FROM jobs")} == {"done"}
