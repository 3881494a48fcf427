#!/usr/bin/env python3
"""Time to the first frame on the live route against time to the whole file (issue 32 item 4).

A `vgen serve` renders one job at a time; right after each submission a client opens
GET /v1/jobs/{id}/video?live=1 and reads it, while another follows the job's events. From the
submission on it records: the first complete fragment (init segment + moof + mdat: the first
frames a player can show), the end of the live stream, and the job's `done` event (from then the
whole file is downloadable). A run whose live request came after the encode had started gets the
finished file instead of fragments; it is reported, not counted.

    python3 bench/live_stream.py --model bundled|tiny [--runs R] [--frames F] [--steps S]

bundled: models/vgen-shapes at its defaults; tiny: the tiny random Wan package the tests export
(tools/vgen_export), 48x32. Writes bench/out/live_stream_<model>.json.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import select
import subprocess
import tempfile
import threading
import time
from pathlib import Path

from common import BIN, ROOT, RUNS, VENV_PY, machine, mmm, stats, table, write


def tiny_package(root: Path) -> Path:
    """The tests' tiny random Wan package, exported by the venv with tools/ on PYTHONPATH (as bench/aoti.py does)."""
    code = ("import sys; from pathlib import Path; from vgen_export import wan as ew; "
            "from vgen_export.tiny_wan import write_tiny_wan; root = Path(sys.argv[1]); "
            "ew.export_wan(write_tiny_wan(root / 'diffusers', seed=0), root / 'pkg', dtype='float32', tiny=True, seed=0)")
    subprocess.run([str(VENV_PY), "-c", code, str(root)], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   env={**os.environ, "PYTHONPATH": str(ROOT / "tools")})
    return root / "pkg"


def serve(package: Path, out: Path, vgen: Path) -> tuple[subprocess.Popen, int]:
    config = out.parent / "serve.json"
    config.write_text(json.dumps({"cache": {"results": {"entries": 0}}}))
    proc = subprocess.Popen([str(vgen), "--log-level", "warn", "serve", "--listen", "127.0.0.1:0", "--model",
                             str(package), "--output-dir", str(out), "--config", str(config)],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    ready, _, _ = select.select([proc.stdout], [], [], 300)
    m = re.fullmatch(r"listening on http://127\.0\.0\.1:(\d+)\n", proc.stdout.readline() if ready else "")
    if not m:
        proc.kill()
        raise RuntimeError("vgen serve did not start")
    return proc, int(m.group(1))


def first_fragment_end(data: bytes) -> bool:
    at, kinds = 0, []
    while at + 8 <= len(data):
        size = int.from_bytes(data[at:at + 4], "big")
        if size < 8 or at + size > len(data):
            break
        kinds.append(data[at + 4:at + 8])
        at += size
    return b"moof" in kinds and b"mdat" in kinds[kinds.index(b"moof"):]


def one_run(port: int, spec: dict) -> dict:
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    c.request("POST", "/v1/jobs", json.dumps(spec), {"Content-Type": "application/json"})
    r = c.getresponse()
    body = json.loads(r.read())
    t0 = time.perf_counter()
    assert r.status == 202, body
    job = body["id"]
    done_at: list[float] = []

    def follow():
        e = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
        e.request("GET", f"/v1/jobs/{job}/events")
        res = e.getresponse()
        while line := res.readline():
            if line.startswith(b"event: done"):
                done_at.append(time.perf_counter() - t0)
        e.close()

    follower = threading.Thread(target=follow)
    follower.start()
    live = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    live.request("GET", f"/v1/jobs/{job}/video?live=1")
    res = live.getresponse()
    data, first = b"", None
    while chunk := res.read1(1 << 16):
        data += chunk
        if first is None and first_fragment_end(data):
            first = time.perf_counter() - t0
    stream_end = time.perf_counter() - t0
    live.close()
    follower.join()
    c.request("GET", f"/v1/jobs/{job}")
    status = json.loads(c.getresponse().read())
    c.request("GET", f"/v1/jobs/{job}/video")
    whole = c.getresponse().read()
    # The same job again with nobody watching (the result cache is off): its encode has no tap.
    c.request("POST", "/v1/jobs", json.dumps(spec), {"Content-Type": "application/json"})
    alone_at = time.perf_counter()
    alone = json.loads(c.getresponse().read())["id"]
    c.request("GET", f"/v1/jobs/{alone}/events")
    c.getresponse().read()  # the stream ends with the job
    unwatched_done = time.perf_counter() - alone_at
    c.request("GET", f"/v1/jobs/{alone}")
    unwatched = json.loads(c.getresponse().read())
    c.request("GET", f"/v1/jobs/{alone}/video")
    same = c.getresponse().read() == whole
    c.close()
    return {"job": job, "live": first is not None, "first_fragment_s": first, "stream_end_s": stream_end,
            "done_s": done_at[0] if done_at else None, "stream_bytes": len(data), "file_bytes": len(whole),
            "stage_seconds": status.get("stage_seconds"), "unwatched_stage_seconds": unwatched.get("stage_seconds"),
            "unwatched_file_identical": same, "unwatched_done_s": unwatched_done}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", choices=["bundled", "tiny"], default="tiny")
    ap.add_argument("--runs", type=int, default=RUNS)
    ap.add_argument("--frames", type=int)
    ap.add_argument("--steps", type=int)
    ap.add_argument("--vgen", type=Path, default=BIN / "vgen", help="the binary (e.g. another build's, for before/after)")
    ap.add_argument("--package", type=Path, help="a package exported already (tiny: skips the export)")
    ap.add_argument("--tag", default="", help="appended to the output's name")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        if args.model == "tiny":
            package = args.package or tiny_package(tmp)
            spec = {"width": 48, "height": 32, "frames": 33, "steps": 2}
        else:
            package, spec = ROOT / "models" / "vgen-shapes", {}
        if args.frames:
            spec["frames"] = args.frames
        if args.steps:
            spec["steps"] = args.steps
        proc, port = serve(package, tmp / "out", args.vgen)
        try:
            runs = [one_run(port, {**spec, "prompt": f"a red circle moving left, take {i}", "seed": 100 + i})
                    for i in range(args.runs + 1)][1:]  # the first warms the model up
        finally:
            proc.terminate()
            proc.wait(60)
    counted = [r for r in runs if r["live"] and r["done_s"] is not None]
    rows = [[k, mmm(stats(r[k] for r in counted))] for k in ("first_fragment_s", "stream_end_s", "done_s")] if counted else []
    if runs:
        rows.append(["unwatched job: done_s", mmm(stats(r["unwatched_done_s"] for r in runs))])
    if counted:
        rows.append(["(encode stage, watched)", mmm(stats(r["stage_seconds"]["encode"] for r in counted))])
        rows.append(["(encode stage, unwatched)", mmm(stats(r["unwatched_stage_seconds"]["encode"] for r in counted))])
    print(f"watched file == unwatched file: {[r['unwatched_file_identical'] for r in runs]}")
    print(table(["from submission to", "seconds: median (min–max)"], rows))
    print(f"{len(counted)} of {len(runs)} runs streamed live; spec {spec}")
    write(f"live_stream_{args.model}{args.tag}", {"model": args.model, "spec": spec, "vgen": str(args.vgen), "machine": machine(),
                                                 "runs": runs})


if __name__ == "__main__":
    main()
