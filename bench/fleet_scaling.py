#!/usr/bin/env python3
"""Fleet scaling (issue 19): throughput of a fleet of 1, 2 and 4 `vgen worker`s behind a private
nats-server, fed and followed by `vgen batch --queue` (the jobs' records are watched, not polled),
with simulated compute: fault injection adds `--latency-ms` to every denoise call, standing in
for a GPU. The job is the smallest the tiny model renders (32x32, 5 frames, 1 step), so the
latency dominates and the shared cores are not what limits the fleet.
Jobs/s = jobs / the batch's run time (first submission to last job done). Then the idle cost:
CPU seconds the idle workers and the broker use over `--idle-s` seconds (no busy polling: ~0).
The load average (1 min) before and after each run is recorded: other work on the machine shows.

    python bench/fleet_scaling.py [--jobs-per-worker 6] [--workers 1,2,4] [--latency-ms 3000]
                                  [--model DIR] [--spec JSON] [--idle-s 5] [--out FILE]

Prints a table and writes bench/out/fleet_scaling.json (or --out).
"""
from __future__ import annotations

import argparse
import json
import os
import select
import shutil
import socket
import subprocess
import sys
import tempfile
import time
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
        prompts = tmp / "jobs.jsonl"
        prompts.write_text("".join(json.dumps({**spec, "seed": i}) + "\n" for i in range(jobs)))
        load_before = os.getloadavg()[0]
        r = subprocess.run([str(VGEN), "batch", str(prompts), "--queue", url, "--out", str(out), "--json"],
                           capture_output=True, text=True, timeout=3600, env={**os.environ, "OMP_NUM_THREADS": "1"})
        load_after = os.getloadavg()[0]
        assert r.returncode == 0, r.stderr[-2000:]
        summary = json.loads(r.stdout)
        makespan = summary["seconds"]
        failed = [j for j in summary["jobs"] if j["status"] != "done"]
        job_s = sorted(j["seconds"] for j in summary["jobs"])  # each job's run time on its worker
        idle_pids = [w.pid for w in workers] + [broker.pid]
        time.sleep(1)  # the last acks and records settle
        c0 = {p: cpu_seconds(p) for p in idle_pids}
        time.sleep(a.idle_s)
        idle = {p: cpu_seconds(p) - c0[p] for p in idle_pids}
        return {"workers": n_workers, "jobs": jobs, "failed": len(failed), "makespan_s": round(makespan, 2),
                "jobs_per_s": round(jobs / makespan, 3),
                "job_s_median": round(job_s[len(job_s) // 2], 2), "job_s_max": round(job_s[-1], 2),
                "idle_cpu_s_per_worker": round(sum(idle[w.pid] for w in workers) / n_workers / a.idle_s, 4),
                "idle_cpu_s_broker": round(idle[broker.pid] / a.idle_s, 4),
                "load_1min_before": round(load_before, 2), "load_1min_after": round(load_after, 2)}
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
    ap.add_argument("--latency-ms", type=int, default=3000)
    ap.add_argument("--model", default="", help="a model package (default: the bundled model)")
    ap.add_argument("--spec", default='{"width": 32, "height": 32, "frames": 5, "steps": 1}',
                    help="job fields beside the prompt: small, so that the simulated compute dominates")
    ap.add_argument("--idle-s", type=float, default=5)
    ap.add_argument("--out", default=str(ROOT / "bench" / "out" / "fleet_scaling.json"))
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
    print(f"{'workers':>7} {'jobs':>5} {'makespan s':>10} {'jobs/s':>7} {'x linear':>8} {'job s med/max':>13} {'idle CPU/worker':>15} "
          f"{'idle CPU broker':>15} {'load 1m':>12}")
    for r in rows:
        print(f"{r['workers']:>7} {r['jobs']:>5} {r['makespan_s']:>10} {r['jobs_per_s']:>7} {r['scaling_vs_linear']:>8} "
              f"{str(r['job_s_median']) + '/' + str(r['job_s_max']):>13} {r['idle_cpu_s_per_worker']:>15} {r['idle_cpu_s_broker']:>15} "
              f"{r['load_1min_before']:>5}->{r['load_1min_after']:<5}")
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"latency_ms": a.latency_ms, "spec": json.loads(a.spec), "cpus": os.cpu_count(),
                               "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
