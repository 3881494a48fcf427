#!/usr/bin/env python3
"""Fleet scaling (issue 19): throughput of a fleet of 1, 2 and 4 `vgen worker`s behind one
`vgen serve --queue` front end and a private nats-server, with simulated compute: fault
injection adds `--latency-ms` to every denoise call, standing in for a GPU (the model itself is
tiny, so the latency dominates and the two shared cores are not what limits the fleet).
Jobs/s = jobs / (last job done - first submission). Then the idle cost: CPU seconds the idle
workers and the broker use over `--idle-s` seconds (no busy polling: ~0).

    python bench/fleet_scaling.py [--jobs-per-worker 6] [--workers 1,2,4] [--latency-ms 1500]
                                  [--model DIR] [--spec JSON] [--idle-s 5]

Prints a table and writes bench/out/fleet_scaling.json.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import select
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VGEN = Path(os.environ.get("VGEN_BUILD_DIR", ROOT / "build")) / "bin" / "vgen"
TICK = os.sysconf("SC_CLK_TCK")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def first_line(proc, timeout=300):
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    return proc.stdout.readline() if ready else ""


def cpu_seconds(pid):
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK  # utime + stime


def http(port, method, path, body=None):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", method=method,
                                 data=json.dumps(body).encode() if body is not None else None,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.loads(r.read())


def run(n_workers, a, tmp):
    procs = []
    try:
        port = free_port()
        broker = subprocess.Popen(["nats-server", "-js", "-a", "127.0.0.1", "-p", str(port), "-sd", str(tmp / "store")],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        procs.append(broker)
        for _ in range(200):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.05)
        url = f"nats://127.0.0.1:{port}"
        out = tmp / "out"
        out.mkdir(exist_ok=True)
        model = ["--model", a.model] if a.model else []
        env = {**os.environ, "VGEN_FAULTS": json.dumps({"stages": {"denoise": {"latency_ms": a.latency_ms}}}),
               "OMP_NUM_THREADS": "1"}
        front = subprocess.Popen([str(VGEN), "serve", "--queue", url, "--listen", "127.0.0.1:0", *model],
                                 stdout=subprocess.PIPE, text=True)
        procs.append(front)
        m = re.fullmatch(r"listening on http://127\.0\.0\.1:(\d+)\n", first_line(front))
        assert m, "front end did not start"
        http_port = int(m.group(1))
        config = tmp / "worker.json"
        config.write_text(json.dumps({"warmup": True}))  # every worker at steady-state speed before it pulls
        workers = []
        for i in range(n_workers):
            w = subprocess.Popen([str(VGEN), "worker", "--queue", url, "--output-dir", str(out), "--name", f"b{i}",
                                  "--config", str(config), *model],
                                 stdout=subprocess.PIPE, text=True, env=env)
            procs.append(w)
            workers.append(w)
        for w in workers:
            assert first_line(w).startswith("worker "), "worker did not start"
        spec = {"prompt": "a red circle moving left", **json.loads(a.spec)}
        jobs = n_workers * a.jobs_per_worker
        t0 = time.monotonic()
        ids = [http(http_port, "POST", "/v1/jobs", {**spec, "seed": i})["id"] for i in range(jobs)]
        left = set(ids)
        while left:
            for i in list(left):
                if http(http_port, "GET", f"/v1/jobs/{i}")["status"] in ("done", "failed", "cancelled"):
                    left.discard(i)
            time.sleep(0.05)
        makespan = time.monotonic() - t0
        failed = [i for i in ids if http(http_port, "GET", f"/v1/jobs/{i}")["status"] != "done"]
        idle_pids = [w.pid for w in workers] + [broker.pid]
        time.sleep(1)  # the last acks and records settle
        c0 = {p: cpu_seconds(p) for p in idle_pids}
        time.sleep(a.idle_s)
        idle = {p: cpu_seconds(p) - c0[p] for p in idle_pids}
        return {"workers": n_workers, "jobs": jobs, "failed": len(failed), "makespan_s": round(makespan, 2),
                "jobs_per_s": round(jobs / makespan, 3),
                "idle_cpu_s_per_worker": round(sum(idle[w.pid] for w in workers) / n_workers / a.idle_s, 4),
                "idle_cpu_s_broker": round(idle[broker.pid] / a.idle_s, 4)}
    finally:
        for p in reversed(procs):
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(60)
                except subprocess.TimeoutExpired:
                    p.kill()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs-per-worker", type=int, default=6)
    ap.add_argument("--workers", default="1,2,4")
    ap.add_argument("--latency-ms", type=int, default=1500)
    ap.add_argument("--model", default="", help="a model package (default: the bundled model)")
    ap.add_argument("--spec", default='{"width": 32, "height": 32, "frames": 5, "steps": 2}',
                    help="job fields beside the prompt: small, so that the simulated compute dominates")
    ap.add_argument("--idle-s", type=float, default=5)
    a = ap.parse_args()
    if not shutil.which("nats-server") or not VGEN.exists():
        sys.exit("needs nats-server and build/bin/vgen")
    rows = []
    for n in [int(x) for x in a.workers.split(",")]:
        with tempfile.TemporaryDirectory(prefix="vgen-fleet-bench-") as tmp:
            rows.append(run(n, a, Path(tmp)))
        print(rows[-1], flush=True)
    base = rows[0]["jobs_per_s"] / rows[0]["workers"]
    for r in rows:
        r["scaling_vs_linear"] = round(r["jobs_per_s"] / (base * r["workers"]), 3)
    print(f"{'workers':>7} {'jobs':>5} {'makespan s':>10} {'jobs/s':>7} {'x linear':>8} {'idle CPU/worker':>15} {'idle CPU broker':>15}")
    for r in rows:
        print(f"{r['workers']:>7} {r['jobs']:>5} {r['makespan_s']:>10} {r['jobs_per_s']:>7} {r['scaling_vs_linear']:>8} "
              f"{r['idle_cpu_s_per_worker']:>15} {r['idle_cpu_s_broker']:>15}")
    out = ROOT / "bench" / "out"
    out.mkdir(parents=True, exist_ok=True)
    (out / "fleet_scaling.json").write_text(json.dumps({"latency_ms": a.latency_ms, "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
