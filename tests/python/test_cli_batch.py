"""`vgen batch` end to end on the tiny random Wan package: mixed good and bad JSONL lines,
duplicates served from the result cache, a rerun after SIGKILL that skips the complete outputs
and redoes the rest, a damaged output redone, and --config with flags overriding it."""
from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tiny_packages import tiny_wan

BUILD = Path(os.environ.get("VGEN_BUILD_DIR", Path(__file__).resolve().parents[2] / "build"))
VGEN = BUILD / "bin" / "vgen"
pytestmark = pytest.mark.skipif(not VGEN.exists(), reason="build/bin/vgen not built")
SMALL = ["--width", "32", "--height", "32", "--frames", "5", "--steps", "2"]


@pytest.fixture(scope="module")
def package(tmp_path_factory):
    root = tmp_path_factory.mktemp("batch")
    return tiny_wan(root / "pkg")


def batch(package, prompts, out, *args, timeout=300):
    cmd = [str(VGEN), "batch", str(prompts), "--out", str(out), "--model", str(package), *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def probe_frames(path):
    out = subprocess.run(["ffprobe", "-v", "error", "-count_frames", "-show_entries", "stream=nb_read_frames",
                          "-of", "json", str(path)], capture_output=True, text=True, check=True).stdout
    return int(json.loads(out)["streams"][0]["nb_read_frames"])


def test_mixed_jsonl_reports_bad_lines_and_runs_the_rest(package, tmp_path):
    prompts = tmp_path / "jobs.jsonl"
    lines = [
        json.dumps({"prompt": "a red circle moving left", "name": "first"}),
        '{"prompt": "broken json",',
        json.dumps({"prompt": "a blue square moving up", "width": 250}),
        json.dumps({"prompt": "a red circle moving left", "name": "again"}),  # duplicate of line 1
        json.dumps({"prompt": "escape", "name": "../outside"}),
        json.dumps({"prompt": "a green triangle moving down", "steps": 3, "colour": "red"}),
        json.dumps({"prompt": "a yellow circle moving right", "seed": 7}),
    ]
    prompts.write_bytes(("\n".join(lines) + "\n").encode() + b'{"prompt": "bad \xff utf8"}\n')
    out = tmp_path / "out"
    r = batch(package, prompts, out, *SMALL, "--json")
    assert r.returncode == 2, r.stderr  # some lines were invalid, no job failed
    summary = json.loads(r.stdout)
    assert summary == json.loads((out / "batch-summary.json").read_text())
    by_line = {j["line"]: j for j in summary["jobs"]}
    assert by_line[1]["status"] == "done" and not by_line[1]["cache_hit"]
    assert by_line[4]["status"] == "done" and by_line[4]["cache_hit"]
    assert by_line[7]["status"] == "done"
    assert by_line[2]["status"] == "invalid" and "line 2: not valid JSON" in by_line[2]["error"]
    assert by_line[3]["status"] == "invalid" and "line 3" in by_line[3]["error"] and "width" in by_line[3]["error"]
    assert by_line[5]["status"] == "invalid" and "name" in by_line[5]["error"]
    assert by_line[6]["status"] == "invalid" and "colour" in by_line[6]["error"]
    assert by_line[8]["status"] == "invalid" and "UTF-8" in by_line[8]["error"]
    assert summary["counts"] == {"done": 3, "skipped": 0, "failed": 0, "cancelled": 0, "invalid": 5}
    assert (out / "first.mp4").read_bytes() == (out / "again.mp4").read_bytes()
    assert probe_frames(out / "first.mp4") == 5
    assert not (tmp_path / "outside.mp4").exists()
    assert "line 3" in r.stderr  # errors are also on stderr


def test_rerun_after_sigkill_skips_complete_outputs(package, tmp_path):
    prompts = tmp_path / "prompts.txt"
    colors = ["red", "green", "blue", "yellow", "cyan", "magenta", "white", "orange"]
    prompts.write_text("".join(f"a {c} circle moving left\n" for c in colors))
    out = tmp_path / "out"
    # One job per call: an auto-tuned batch of all 8 could finish them together before the kill.
    cmd = [str(VGEN), "batch", str(prompts), "--out", str(out), "--model", str(package),
           "--width", "32", "--height", "32", "--frames", "5", "--steps", "12", "--max-batch", "1"]
    # The kill lands mid-run by construction, not by the timing of this process: the fault drill
    # SIGKILLs the batch as the last job starts encoding (jobs go in order, and the one encoder
    # writes each output before it takes the next: seven are finished then, the last is not).
    drill = {"VGEN_FAULTS": json.dumps({"crash": {"stage": "encode", "prompt": "orange"}})}
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ, **drill})
    try:
        assert proc.wait(timeout=600) == -signal.SIGKILL
    finally:
        proc.kill()
        proc.wait(timeout=60)
    before = {p.name: p.stat().st_mtime_ns for p in out.glob("*.mp4")}
    assert 2 <= len(before) < len(colors), "the kill should land mid-run"

    r = batch(package, prompts, out, "--width", "32", "--height", "32", "--frames", "5", "--steps", "12", "--json")
    assert r.returncode == 0, r.stderr
    summary = json.loads(r.stdout)
    status = {j["name"] + ".mp4": j["status"] for j in summary["jobs"]}
    for name in before:
        assert status[name] == "skipped"
        assert (out / name).stat().st_mtime_ns == before[name]  # not rendered again
    assert sorted(n for n, s in status.items() if s == "done") == sorted(set(status) - set(before))
    files = sorted(p.name for p in out.iterdir() if not p.name.startswith(".vgen-journal.db"))
    assert files == sorted(list(status) + ["batch-summary.json"])  # no temporaries left
    with sqlite3.connect(out / ".vgen-journal.db") as db:  # every job recorded; the killed run's are closed
        rows = dict(db.execute("SELECT status, count(*) FROM jobs GROUP BY status").fetchall())
    assert rows.get("queued", 0) == 0
    # A kill between an output's rename and its row's update leaves that row interrupted.
    assert rows["done"] >= sum(1 for s in status.values() if s == "done")
    assert rows["done"] + rows.get("interrupted", 0) >= len(status)
    for name in status:
        assert probe_frames(out / name) == 5


def test_damaged_or_foreign_outputs_are_rendered_again(package, tmp_path):
    prompts = tmp_path / "p.txt"
    prompts.write_text("a red square moving down\na blue circle moving up\n")
    out = tmp_path / "out"
    assert batch(package, prompts, out, *SMALL).returncode == 0
    first, second = sorted(out.glob("*.mp4"))
    data = first.read_bytes()
    first.write_bytes(data[: len(data) // 2])               # truncated
    (out / f".{second.name}.tmp-123").write_bytes(b"partial")  # an interrupted encode
    r = batch(package, prompts, out, *SMALL, "--json")
    assert r.returncode == 0, r.stderr
    status = {j["name"]: j["status"] for j in json.loads(r.stdout)["jobs"]}
    assert status[first.stem] == "done" and status[second.stem] == "skipped"
    assert first.read_bytes() == data
    assert not list(out.glob(".*tmp*"))
    # Same name, other settings: the file does not belong to this job any more.
    r = batch(package, prompts, out, *SMALL[:-1], "3", "--json")
    assert [j["status"] for j in json.loads(r.stdout)["jobs"]] == ["done", "done"]


def test_config_file_with_flags_overriding_it(package, tmp_path):
    config = tmp_path / "c.json"
    config.write_text(json.dumps({"model": str(package), "output_dir": "from-config",
                                  "stages": {"preprocess": {"queue": 2}}, "encoder": {"crf": 30}}))
    prompts = tmp_path / "p.txt"
    prompts.write_text("a white triangle moving right\n")
    cmd = [str(VGEN), "batch", str(prompts), "--config", str(config), *SMALL]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert len(list((tmp_path / "from-config").glob("*.mp4"))) == 1  # relative to the config file
    r = subprocess.run(cmd + ["--out", str(tmp_path / "flag")], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert len(list((tmp_path / "flag").glob("*.mp4"))) == 1
    config.write_text(json.dumps({"stages": {"denoise": {"workers": 0}}}))
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "stages.denoise.workers" in r.stderr


@pytest.mark.parametrize("content,expect", [(b"", "holds no prompt"), (b"# only a comment\n\n", "holds no prompt")])
def test_unusable_prompt_files_exit_2(package, tmp_path, content, expect):
    prompts = tmp_path / "p.txt"
    prompts.write_bytes(content)
    r = batch(package, prompts, tmp_path / "out", timeout=60)
    assert r.returncode == 2 and expect in r.stderr
    r = batch(package, tmp_path / "missing.txt", tmp_path / "out", timeout=60)
    assert r.returncode == 2 and "cannot be read" in r.stderr


def test_fifty_jobs_under_thirty_percent_transient_faults_all_complete(package, tmp_path):
    """Fault injection through the environment: every stage fails 30 % of its attempts
    (deterministic for the seed); retries with backoff finish every one of 50 jobs."""
    prompts = tmp_path / "p.txt"
    prompts.write_text("".join(f"a red circle moving left {i}\n" for i in range(50)))
    config = tmp_path / "c.json"
    config.write_text(json.dumps({"retry": {"attempts": 12, "initial_backoff_ms": 1, "max_backoff_ms": 5}}))
    env = {**os.environ, "VGEN_FAULTS": json.dumps({"seed": 11, "stages": {"*": {"transient_rate": 0.3}}})}
    cmd = [str(VGEN), "batch", str(prompts), "--out", str(tmp_path / "out"), "--model", str(package),
           "--config", str(config), "--width", "32", "--height", "32", "--frames", "5", "--steps", "2", "--json"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    summary = json.loads(r.stdout)
    assert summary["counts"]["done"] == 50
    assert sum(j["retries"] for j in summary["jobs"]) > 20  # the faults really happened
    assert "injected transient fault" in r.stderr


# --- hostile inputs and signals (issue 23) ------------------------------------------------

def journal_count(out):
    """Jobs recorded in the output directory's journal so far (0 before it exists)."""
    try:
        with sqlite3.connect(f"file:{out / '.vgen-journal.db'}?mode=ro", uri=True, timeout=10) as db:
            return db.execute("SELECT count(*) FROM jobs").fetchone()[0]
    except sqlite3.OperationalError:  # not made yet
        return 0


def long_jsonl(path, n, steps=12):
    path.write_text("".join(json.dumps({"prompt": f"a red circle moving left {i}", "seed": i, "steps": steps}) + "\n"
                            for i in range(n)))
    return path


def start_batch(package, prompts, out, *args):
    """A `vgen batch` in the background, returned once it has written its first output (so the
    Runtime is running and more lines than the queues hold are still to be submitted)."""
    cmd = [str(VGEN), "batch", str(prompts), "--out", str(out), "--model", str(package),
           "--width", "32", "--height", "32", "--frames", "5", *args]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 240
    while time.time() < deadline and not list(out.glob("*.mp4")) and proc.poll() is None:
        time.sleep(0.05)
    assert proc.poll() is None and list(out.glob("*.mp4")), "the batch should be running"
    return proc


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_cancels_a_long_batch_and_still_writes_the_summary(package, tmp_path, sig):
    out = tmp_path / "out"
    proc = start_batch(package, long_jsonl(tmp_path / "jobs.jsonl", 400), out, "--json")
    try:
        proc.send_signal(sig)
        stdout, stderr = proc.communicate(timeout=90)  # before the fix: hung for ever
    finally:
        proc.kill()
    assert proc.returncode == 130, stderr[-2000:]  # exit_code_for(cancelled)
    assert "interrupted" in stderr
    summary = json.loads(stdout)
    assert summary == json.loads((out / "batch-summary.json").read_text())
    assert summary["interrupted"] is True
    assert summary["counts"]["done"] >= 1 and summary["counts"]["cancelled"] >= 1
    assert summary["total"] < 400  # the lines after the interruption were not started
    assert all(j["status"] in ("done", "cancelled") for j in summary["jobs"])
    assert not (out / ".vgen.lock").exists()  # released with the process


def test_a_signal_after_the_whole_file_was_read_cancels_the_running_jobs(package, tmp_path):
    """All lines fit in the queues, so the batch is only waiting for its jobs when the signal
    comes: those must be cancelled too, not run to their end."""
    config = tmp_path / "c.json"
    # One job at a time: an auto-tuned group of several would finish them together.
    config.write_text(json.dumps({"stages": {"preprocess": {"queue": 16}}, "batching": {"max_batch": 1},
                                  "threads": {"per_device": 1}}))
    out = tmp_path / "out"
    # The first job holds the one denoiser far longer than the test takes, so every job is
    # unfinished when the signal comes; it comes once all six are in the journal (the whole file
    # was read and submitted). Neither depends on how fast this process polls.
    holder = {"prompt": "a blue square moving up", "seed": 99, "steps": 1000, "width": 256, "height": 256, "frames": 33}
    jobs = tmp_path / "jobs.jsonl"
    jobs.write_text(json.dumps(holder) + "\n" + "".join(
        json.dumps({"prompt": f"a red circle moving left {i}", "seed": i, "steps": 80}) + "\n" for i in range(5)))
    cmd = [str(VGEN), "batch", str(jobs), "--out", str(out), "--model", str(package),
           "--width", "32", "--height", "32", "--frames", "5", "--json", "--config", str(config)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 300
        while journal_count(out) < 6:
            assert proc.poll() is None and time.monotonic() < deadline, "the batch did not submit its 6 jobs"
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 130, stderr[-2000:]
    summary = json.loads(stdout)
    assert summary["interrupted"] is True and summary["total"] == 6
    assert summary["counts"]["cancelled"] == 6, summary["counts"]  # before the fix: every job ran to "done"
    assert all("batch interrupted" in j["error"] for j in summary["jobs"] if j["status"] == "cancelled")


def test_a_second_signal_exits_at_once(package, tmp_path):
    out = tmp_path / "out"
    proc = start_batch(package, long_jsonl(tmp_path / "jobs.jsonl", 400, steps=40), out)
    try:
        proc.send_signal(signal.SIGTERM)
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=60)  # before the fix the second signal was ignored
    finally:
        proc.kill()
    assert proc.returncode == 130


def test_dev_zero_is_refused_at_once_as_not_text(package, tmp_path):
    # The timeout bounds the old bug (read without bound: 3 GB in 8 s) and leaves a loaded
    # machine time to start the binary; "at once" is the message naming line 1.
    try:
        r = batch(package, "/dev/zero", tmp_path / "out", timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail("vgen batch /dev/zero did not end")
    assert r.returncode == 2
    assert "prompt file '/dev/zero' is not a text file (a NUL byte on line 1)" in r.stderr


# Forks the command from a fresh, small interpreter: on Linux a child's peak RSS (ru_maxrss)
# starts at its parent's RSS at fork time, and pytest with torch loaded would mask the child's.
_PEAK_RSS = """
import os, sys
pid = os.fork()
if pid == 0:
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)
    os.dup2(null, 2)
    os.execv(sys.argv[1], sys.argv[1:])
_, status, usage = os.wait4(pid, 0)
print(os.waitstatus_to_exitcode(status), usage.ru_maxrss)
"""


def peak_rss_mib(cmd, timeout=300):
    """Runs `cmd` and returns (exit code, peak resident memory in MiB) of that process alone."""
    out = subprocess.run([sys.executable, "-c", _PEAK_RSS, *cmd], capture_output=True, text=True, timeout=timeout, check=True)
    rc, kib = out.stdout.split()
    return int(rc), int(kib) / 1024


def test_memory_stays_flat_in_the_length_of_the_prompt_file(package, tmp_path):
    """Every line is refused by the runtime (width 250), so the run is fast: what is measured
    is reading, validating and summarising. Before the fix the whole file became job specs
    first (200k lines: +220 MB). Batching and leases are fixed: with "auto" the tuner's search
    goes on while the process is idle (here: the whole run), and how far it gets, with the
    memory of the larger batches it measures, depends on how long the run lasts, not on the file."""
    fixed = tmp_path / "fixed.json"
    fixed.write_text(json.dumps({"batching": {"max_batch": 1}, "threads": {"per_device": 1}}))

    def run(n):
        prompts = tmp_path / f"p{n}.jsonl"
        with open(prompts, "w") as f:
            for i in range(n):
                f.write('{"prompt": "a red circle moving left and a blue square moving up %d", "width": 250}\n' % i)
        return peak_rss_mib([str(VGEN), "batch", str(prompts), "--out", str(tmp_path / f"out{n}"), "--model", str(package),
                             "--config", str(fixed)])

    rc_small, small = run(1_000)
    rc_big, big = run(200_000)
    assert rc_small == rc_big == 2  # every line invalid
    assert big - small < 100, f"peak RSS {small:.0f} MiB for 1k lines, {big:.0f} MiB for 200k lines"


def test_a_byte_order_mark_does_not_turn_jsonl_into_prompts(package, tmp_path):
    prompts = tmp_path / "jobs.txt"  # .txt: JSONL is detected from the first character
    prompts.write_bytes(b"\xef\xbb\xbf" + (json.dumps({"prompt": "a red circle moving left", "name": "bom"}) + "\n").encode())
    r = batch(package, prompts, tmp_path / "out", *SMALL, "--json")
    assert r.returncode == 0, r.stderr
    assert [(j["name"], j["status"]) for j in json.loads(r.stdout)["jobs"]] == [("bom", "done")]
    assert (tmp_path / "out" / "bom.mp4").exists()


def test_reserved_and_colliding_output_names_are_invalid_lines(package, tmp_path):
    prompts = tmp_path / "jobs.jsonl"
    prompts.write_text("".join(json.dumps(j) + "\n" for j in [
        {"prompt": "a red circle moving left", "name": "batch-summary.json", "format": "png"},
        {"prompt": "a red circle moving left", "name": "clip"},
        {"prompt": "a blue square moving up", "name": "clip.mp4", "format": "png"},
    ]))
    out = tmp_path / "out"
    r = batch(package, prompts, out, *SMALL, "--json")
    assert r.returncode == 2, r.stderr
    by_line = {j["line"]: j for j in json.loads(r.stdout)["jobs"]}
    assert by_line[1]["status"] == "invalid" and "is reserved" in by_line[1]["error"]
    assert by_line[2]["status"] == "done"
    assert by_line[3]["status"] == "invalid" and "the output of line 2" in by_line[3]["error"]
    assert (out / "batch-summary.json").is_file() and (out / "clip.mp4").is_file()


def test_one_owner_per_output_directory(package, tmp_path):
    out = tmp_path / "out"
    # Its first job outlasts the test (it is killed below), so the directory stays owned however
    # long the two refused starts take on a loaded machine; a job in the journal means the
    # Runtime, and so its lock, is up.
    jobs = tmp_path / "jobs.jsonl"
    jobs.write_text(json.dumps({"prompt": "a blue square moving up", "steps": 1000, "width": 256, "height": 256,
                                "frames": 33}) + "\n")
    proc = subprocess.Popen([str(VGEN), "batch", str(jobs), "--out", str(out), "--model", str(package)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 300
        while journal_count(out) < 1:
            assert proc.poll() is None and time.monotonic() < deadline, "the batch did not start its job"
            time.sleep(0.05)
        second = tmp_path / "second.txt"
        second.write_text("a green triangle moving down\n")
        r = batch(package, second, out, *SMALL, timeout=120)  # before the fix: both ran the jobs
        assert r.returncode == 1, r.stderr  # overloaded: the directory is busy, not wrong
        assert f"output directory '{out}' is in use by another vgen process (pid {proc.pid})" in r.stderr
        r = subprocess.run([str(VGEN), "serve", "--listen", "127.0.0.1:0", "--model", str(package), "--output-dir", str(out)],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 1 and "is in use by another vgen process" in r.stderr
        assert r.stdout == ""  # refused before it listened
        proc.kill()  # SIGKILL: the kernel drops its lock
        proc.wait(timeout=30)
        r = batch(package, second, out, *SMALL, "--json", timeout=300)
        assert r.returncode == 0, r.stderr
    finally:
        proc.kill()
        proc.communicate(timeout=30)
