"""The fleet on NATS JetStream end to end (issue 19): a private nats-server, `vgen serve --queue`
front ends and `vgen worker`s on the tiny random Wan package, everything on loopback.
- 30 jobs, 3 workers, one SIGKILLed in the middle of a job: every job ends done exactly once, as
  one valid output named by job, the killed worker's job is redelivered and finished by another.
- a poison job (a fault-injected crash on every delivery) is terminated after max_crashes
  deliveries and reported failed with its reason; the other jobs are unaffected.
- the front end SIGKILLed and restarted, and the broker restarted on the same store: every job
  that got a 202 finishes and is queryable.
Skipped with a reason when nats-server is not installed or vgen was built without the fleet.
Every process is stopped when its test ends; every wait has a deadline."""
from __future__ import annotations

import json
import os
import re
import select
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from test_cli_serve import SMALL, VGEN, Server, package  # noqa: F401  (the module-scoped fixture)

HAVE_BROKER = shutil.which("nats-server") is not None


def _vgen_has_worker():
    if not VGEN.exists():
        return False
    r = subprocess.run([str(VGEN), "worker", "--help"], capture_output=True, text=True, timeout=60)
    return r.returncode == 0


pytestmark = [
    pytest.mark.skipif(not HAVE_BROKER, reason="nats-server is not installed (apt-get install nats-server)"),
    pytest.mark.skipif(not _vgen_has_worker(), reason="vgen built without the fleet (libnats-dev missing)"),
]


class Broker:
    """nats-server -js on a loopback port it picks itself, with its store in `root`; restartable
    on the same port. Ready means this process wrote its ports file: a port probe alone would
    also accept another test's broker that took a port chosen here first (python.fleet once got
    a 202 "from a stopped broker" that way)."""

    def __init__(self, root: Path):
        self.root = root
        self.port = -1  # nats-server picks a free one on the first start (no race with other tests)
        self.proc = None
        self.start()

    @property
    def url(self):
        return f"nats://127.0.0.1:{self.port}"

    def start(self):
        ports_dir = self.root / f"nats-ports-{time.monotonic_ns()}"
        ports_dir.mkdir(parents=True)
        self.proc = subprocess.Popen(["nats-server", "-js", "-a", "127.0.0.1", "-p", str(self.port),
                                      "-sd", str(self.root / "store"), "-l", str(self.root / "nats.log"),
                                      "--ports_file_dir", str(ports_dir)])
        ports = ports_dir / f"nats-server_{self.proc.pid}.ports"
        deadline = time.monotonic() + 120  # bounds a hang: a loaded machine starts it slowly
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:  # e.g. a restart whose port another process took meanwhile
                log = (self.root / "nats.log").read_text()[-2000:] if (self.root / "nats.log").exists() else ""
                raise AssertionError(f"nats-server exited ({self.proc.returncode}) on start:\n{log}")
            try:
                url = json.loads(ports.read_text())["nats"][0]  # written once it listens
            except (OSError, ValueError, KeyError, IndexError):
                time.sleep(0.05)
                continue
            self.port = int(url.rsplit(":", 1)[1])
            return
        raise AssertionError("nats-server did not start")

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(30)


class Worker:
    """A `vgen worker` process; its log is a file the test reads."""

    def __init__(self, name, broker, package, out_dir, config, env=None, args=()):
        self.name = name
        self.log_path = out_dir.parent / f"worker-{name}-{time.monotonic_ns()}.log"
        self.log = open(self.log_path, "w")
        cmd = [str(VGEN), "--log-level", "info", "worker", "--queue", broker.url, "--model", str(package),
               "--output-dir", str(out_dir), "--name", name, "--config", str(config), *args]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=self.log, text=True,
                                     env={**os.environ, **(env or {})})
        ready, _, _ = select.select([self.proc.stdout], [], [], 180)
        line = self.proc.stdout.readline() if ready else ""
        assert line == f"worker {name} ready\n", f"{line!r}\n{self.logs()}"

    def logs(self):
        self.log.flush()
        return self.log_path.read_text()[-4000:]

    def running_job(self):
        """The job this worker started last and has not finished, or None."""
        text = self.log_path.read_text()
        started = re.findall(r"running job (\S+)", text)
        finished = set(re.findall(r"finished job (\S+):", text))
        return started[-1] if started and started[-1] not in finished else None

    def alive(self):
        return self.proc.poll() is None

    def kill(self):
        if self.alive():
            self.proc.kill()
            self.proc.wait(10)

    def stop(self, timeout=120):
        if self.alive():
            self.proc.send_signal(signal.SIGTERM)
            try:
                return self.proc.wait(timeout)
            finally:
                self.kill()
        return self.proc.returncode


@pytest.fixture
def fleet(tmp_path, package):  # noqa: F811
    """Makes brokers, front ends and workers, and stops them all at the end."""
    made = {"brokers": [], "servers": [], "workers": []}
    out = tmp_path / "out"
    out.mkdir()
    config = tmp_path / "fleet.json"
    # One job at a time per worker (not what the tuner would pick): a worker killed "mid-job"
    # must have finished one job and be inside another, which an auto-sized group of all its jobs
    # would not give.
    config.write_text(json.dumps({"queue": {"ack_wait_ms": 2000, "fetch_wait_ms": 500, "max_crashes": 2},
                                  "retry": {"attempts": 1}, "batching": {"max_batch": 1},
                                  "threads": {"per_device": 1}}))

    class Fleet:
        def __init__(self):
            self.out, self.config, self.package = out, config, package

        def broker(self):
            b = Broker(tmp_path)
            made["brokers"].append(b)
            return b

        def front_end(self, broker):
            s = Server(package, out, "--queue", broker.url, "--config", str(config), log_dir=tmp_path)
            made["servers"].append(s)
            return s

        def worker(self, name, broker, env=None):
            w = Worker(name, broker, package, out, config, env)
            made["workers"].append(w)
            return w

    yield Fleet()
    for w in made["workers"]:
        w.kill()
    for s in made["servers"]:
        s.kill()
    for b in made["brokers"]:
        b.stop()


def submit(server, prompt, **extra):
    status, headers, body = server.json("POST", "/v1/jobs", {"prompt": prompt, **SMALL, **extra})
    assert status == 202, body
    return body["id"]


def wait_final(server, ids, timeout=600, on_wait=None):
    """Polls until every job is done/failed/cancelled; returns {id: status body}."""
    left, out = set(ids), {}
    deadline = time.monotonic() + timeout
    while left and time.monotonic() < deadline:
        for i in sorted(left):
            status, _, body = server.json("GET", f"/v1/jobs/{i}")
            if status == 200 and body["status"] in ("done", "failed", "cancelled"):
                out[i] = body
                left.discard(i)
        if on_wait:
            on_wait()
        time.sleep(0.2)
    assert not left, f"{len(left)} job(s) not finished within {timeout}s: {sorted(left)[:3]}"
    return out


def check_outputs(out_dir, ids):
    """One valid video per job, named by job; no other file (no duplicate). Hidden files are a
    SIGKILLed writer's temporaries (".<name>.tmp-<pid>-..."), never a visible output."""
    files = sorted(p.name for p in out_dir.iterdir() if not p.name.startswith("."))
    assert files == sorted(f"{i}.mp4" for i in ids)
    for i in ids:
        probe = subprocess.run(["ffprobe", "-v", "error", "-count_frames", "-select_streams", "v:0",
                                "-show_entries", "stream=nb_read_frames", "-of", "csv=p=0", str(out_dir / f"{i}.mp4")],
                               capture_output=True, text=True, timeout=60)
        assert probe.returncode == 0 and probe.stdout.strip() == str(SMALL["frames"]), probe


def test_a_worker_killed_mid_job_loses_nothing(fleet):
    broker = fleet.broker()
    server = fleet.front_end(broker)
    slow = {"VGEN_FAULTS": json.dumps({"stages": {"denoise": {"latency_ms": 400}}})}  # a job lasts long enough to be killed in
    workers = [fleet.worker(f"w{i}", broker, slow) for i in range(3)]
    ids = [submit(server, f"clip {i}", seed=i) for i in range(30)]

    victim, killed_job = workers[1], None
    deadline = time.monotonic() + 300
    while killed_job is None and time.monotonic() < deadline:
        job = victim.running_job()
        if job and "finished job" in victim.log_path.read_text():  # it finished one before: mid-run
            victim.kill()
            killed_job = victim.running_job()  # still unfinished in its log: it died inside it
        time.sleep(0.05)
    assert killed_job, "the victim never ran a second job"

    results = wait_final(server, ids)
    assert all(r["status"] == "done" for r in results.values()), [r for r in results.values() if r["status"] != "done"]
    killed = results[killed_job]
    assert killed["retries"] >= 1, killed        # started again after the crash
    assert not killed["device"].startswith("w1/"), killed  # and finished by another worker
    repeated = sum(r["retries"] for r in results.values())
    print(f"\nfleet: 30 jobs, 3 workers, w1 killed in job {killed_job}; repeated starts {repeated}")
    check_outputs(fleet.out, ids)
    for w in workers:
        if w.alive():
            assert w.stop() == 0, w.logs()
    log_text = "".join(w.log_path.read_text() for w in workers)
    rewrites = sum(int(n) for n in re.findall(r"(\d+) rewrites", log_text))
    print(f"fleet: idempotent rewrites of an existing output: {rewrites}")


def test_a_poison_job_is_terminated_after_max_crashes(fleet):
    broker = fleet.broker()
    server = fleet.front_end(broker)
    crash = {"VGEN_FAULTS": json.dumps({"crash": {"stage": "denoise", "prompt": "POISON"}})}
    workers = [fleet.worker(f"p{i}", broker, crash) for i in range(2)]
    poison = submit(server, "POISON pill")
    ids = [submit(server, f"fine {i}", seed=i) for i in range(4)]
    restarts = 0

    def restart_dead():
        nonlocal restarts
        for k, w in enumerate(workers):
            if not w.alive():
                restarts += 1
                workers[k] = fleet.worker(f"p{k}-{restarts}", broker, crash)

    results = wait_final(server, ids + [poison], on_wait=restart_dead)
    bad = results[poison]
    assert bad["status"] == "failed", bad
    assert "crashed the worker 2 times" in bad["error"]["message"], bad
    assert all(results[i]["status"] == "done" for i in ids), results
    assert restarts == 2, restarts  # each of its two deliveries killed one worker
    check_outputs(fleet.out, ids)


def test_front_end_killed_and_broker_restarted(fleet):
    broker = fleet.broker()
    server = fleet.front_end(broker)
    workers = [fleet.worker(f"r{i}", broker) for i in range(2)]
    first = [submit(server, f"before {i}", seed=i) for i in range(6)]
    server.proc.kill()  # SIGKILL: nothing of the jobs lived in it
    server.proc.wait(10)
    server = fleet.front_end(broker)
    second = [submit(server, f"after {i}", seed=10 + i) for i in range(4)]
    broker.stop()  # the broker restarts on the same store mid-run
    broker.start()
    results = wait_final(server, first + second)
    assert all(r["status"] == "done" for r in results.values()), results
    check_outputs(fleet.out, first + second)
    for w in workers:
        assert w.stop() == 0, w.logs()


def run_batch(prompts, out, *args, timeout=600):
    cmd = [str(VGEN), "batch", str(prompts), "--out", str(out), "--width", "48", "--height", "32", "--frames", "9",
           "--steps", "3", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def shape(summary):
    """What must not differ between a local and a fleet batch: the keys, and each row's line,
    name, status and keys (the timings do)."""
    return (sorted(summary), summary["counts"], summary["total"],
            [(j["line"], j["name"], j["status"], sorted(j)) for j in summary["jobs"]])


def test_batch_on_the_queue_reports_like_the_local_batch_and_a_rerun_skips_done_lines(fleet, tmp_path):
    broker = fleet.broker()
    workers = [fleet.worker(f"b{i}", broker) for i in range(2)]
    prompts = tmp_path / "jobs.jsonl"
    lines = [json.dumps({"prompt": f"a {c} circle moving left", "seed": k}) for k, c in enumerate(["red", "green", "blue", "cyan"])]
    lines.insert(2, json.dumps({"prompt": "escape", "name": "../outside"}))  # invalid: a path as name
    prompts.write_text("\n".join(lines) + "\n")

    r = run_batch(prompts, fleet.out, "--queue", broker.url, "--config", str(fleet.config), "--json")
    assert r.returncode == 2, r.stderr  # one invalid line, every job done: as the local batch
    summary = json.loads(r.stdout)
    assert summary == json.loads((fleet.out / "batch-summary.json").read_text())
    assert summary["counts"] == {"done": 4, "skipped": 0, "failed": 0, "cancelled": 0, "invalid": 1}, summary
    done = [j for j in summary["jobs"] if j["status"] == "done"]
    for j in done:
        assert Path(j["output"]).name == j["name"] + ".mp4"
        probe = subprocess.run(["ffprobe", "-v", "error", "-count_frames", "-select_streams", "v:0", "-show_entries",
                                "stream=nb_read_frames", "-of", "csv=p=0", j["output"]], capture_output=True, text=True)
        assert probe.stdout.strip() == "9", probe
    assert {j["name"] for j in done} == {p.stem for p in fleet.out.glob("*.mp4")}
    assert "line 3" in r.stderr and "name" in r.stderr

    local_out = tmp_path / "local"  # the same file through the local batch: the same summary
    local = run_batch(prompts, local_out, "--model", str(fleet.package), "--json")
    assert local.returncode == 2, local.stderr
    assert shape(json.loads(local.stdout)) == shape(summary)
    table = run_batch(prompts, fleet.out, "--queue", broker.url, "--config", str(fleet.config))
    local_table = run_batch(prompts, local_out, "--model", str(fleet.package))
    totals = re.sub(r"\d+\.\d+ s", "T s", table.stdout.splitlines()[-1])
    assert table.stdout.splitlines()[0] == local_table.stdout.splitlines()[0]  # the same columns
    assert totals == re.sub(r"\d+\.\d+ s", "T s", local_table.stdout.splitlines()[-1]), (table.stdout, local_table.stdout)
    assert "4 skipped" in totals, table.stdout  # the second run of each skipped all four

    # A rerun: a damaged output is rendered again, a complete one skipped (not rewritten), and a
    # line whose settings changed is rendered again though its file is complete.
    victim = Path(done[0]["output"])
    victim.write_bytes(victim.read_bytes()[: victim.stat().st_size // 2])
    kept = {Path(j["output"]): Path(j["output"]).stat().st_mtime_ns for j in done[1:]}
    changed = lines[-1].replace('"seed": 3', '"seed": 30')
    prompts.write_text("\n".join(lines[:-1] + [changed]) + "\n")
    r = run_batch(prompts, fleet.out, "--queue", broker.url, "--config", str(fleet.config), "--json")
    assert r.returncode == 2, r.stderr
    status = {j["name"]: j["status"] for j in json.loads(r.stdout)["jobs"] if j["status"] != "invalid"}
    last = done[-1]["name"]
    assert status == {j["name"]: "done" if j["name"] in (victim.stem, last) else "skipped" for j in done}, status
    for path, mtime in kept.items():
        if path.stem != last:
            assert path.stat().st_mtime_ns == mtime, path  # skipped: not rewritten
    assert subprocess.run(["ffprobe", "-v", "error", str(victim)], capture_output=True).returncode == 0
    for w in workers:
        assert w.stop() == 0, w.logs()


def test_submissions_waiting_on_the_broker_do_not_block_the_io_threads(fleet):
    """The fleet's 202 waits for the broker's ack; while the broker does not answer (SIGSTOP),
    the submissions wait off the io threads, so other requests are still answered at once."""
    import threading

    broker = fleet.broker()
    server = fleet.front_end(broker)
    assert submit(server, "before the stop")  # connected, stream and bucket made
    answers = []

    def post(i):
        answers.append(server.request("POST", "/v1/jobs", {"prompt": f"stopped broker {i}", **SMALL}, timeout=120)[0])

    os.kill(broker.proc.pid, signal.SIGSTOP)
    try:
        posts = [threading.Thread(target=post, args=(i,)) for i in range(4)]  # more than the 2 io threads
        for t in posts:
            t.start()
        time.sleep(0.5)  # the posts are in the server, waiting on the broker
        t0 = time.monotonic()
        status, _, _ = server.request("GET", "/healthz", timeout=30)
        took = time.monotonic() - t0
        assert status == 200
        # Blocked io threads would hold /healthz until SIGCONT (its 30 s timeout fails first); a
        # busy machine may take seconds to answer, which says nothing about blocking.
        assert took < 20, f"/healthz took {took:.1f} s behind submissions waiting on the broker"
        assert not answers, answers  # no 202 without the broker's ack
    finally:
        os.kill(broker.proc.pid, signal.SIGCONT)
    for t in posts:
        t.join(120)
    assert len(answers) == 4 and all(a in (202, 503) for a in answers), answers
