"""The self-tuned defaults end to end (issue 24 item 1): `vgen batch` with no batching flags
measures the package at the jobs' shape once, logs what it chose and caches it; the next start
reads the cache; numbers given on the command line are kept and nothing is measured; `vgen serve`
exports the choice in /metrics. Issue 31 item 5: the first job waits at most tune.first_wait_s for
the probe; the rest of the search runs between jobs (`vgen serve`), is cached, and switches the
batch."""
from __future__ import annotations

import json
import os
import re
import subprocess
import time

import pytest

from test_cli_serve import VGEN, Server, package  # noqa: F401  (package: the module's fixture)

SMALL = ["--width", "32", "--height", "32", "--frames", "5", "--steps", "2"]
pytestmark = pytest.mark.skipif(not VGEN.exists(), reason="build/bin/vgen not built")


def batch(package, prompts, out, tune_dir, *args, shape=SMALL):
    cmd = [str(VGEN), "--log-level", "info", "batch", str(prompts), "--out", str(out), "--model", str(package), *shape, *args]
    env = {**os.environ, "VGEN_TUNE_DIR": str(tune_dir)}
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)


def tune_lines(stderr):
    return [line for line in stderr.splitlines() if "auto-tune:" in line]


def config(tmp_path, **tune):
    path = tmp_path / "tune-config.json"
    path.write_text(json.dumps({"tune": tune}))
    return str(path)


def test_batch_probes_once_then_reads_its_cache(package, tmp_path):
    prompts = tmp_path / "p.txt"
    prompts.write_text("a red ball\na blue cube\na green cone\n")
    tune = tmp_path / "tune"
    whole = config(tmp_path, first_wait_s=86400)  # the whole search before the first job, as before issue 31
    first = batch(package, prompts, tmp_path / "out1", tune, "--config", whole)
    assert first.returncode == 0, first.stderr
    lines = tune_lines(first.stderr)
    assert len(lines) == 1 and "probed" in lines[0], first.stderr
    files = list(tune.glob("*.json"))
    assert len(files) == 1
    doc = json.loads(files[0].read_text())
    chosen = doc["choice"]
    assert 1 <= chosen["batch"] <= 8 and chosen["leases"] * chosen["intra_op"] == doc["space"]["cores"]
    assert doc["samples"] and all(s["spent_s"] > 0 for s in doc["samples"])
    assert '"width":32' in doc["key"] and '"steps":2' in doc["key"]  # the jobs' shape, not the package defaults

    second = batch(package, prompts, tmp_path / "out2", tune)
    assert second.returncode == 0, second.stderr
    lines = tune_lines(second.stderr)
    assert len(lines) == 1 and f"(from {files[0]})" in lines[0], second.stderr
    setting = f"batch {chosen['batch']}, "
    assert setting in lines[0]
    assert len(list(tune.glob("*.json"))) == 1

    # Another shape is another probe (and file).
    third = batch(package, prompts, tmp_path / "out3", tune, "--config", whole, shape=[a if a != "2" else "3" for a in SMALL])  # 3 steps
    assert third.returncode == 0, third.stderr
    assert "probed" in tune_lines(third.stderr)[0]
    assert len(list(tune.glob("*.json"))) == 2


def test_numbers_on_the_command_line_are_kept_and_nothing_is_measured(package, tmp_path):
    prompts = tmp_path / "p.txt"
    prompts.write_text("a red ball\n")
    config = tmp_path / "c.json"
    config.write_text(json.dumps({"threads": {"per_device": 1, "intra_op": 1}}))
    tune = tmp_path / "tune"
    r = batch(package, prompts, tmp_path / "out", tune, "--max-batch", "2", "--config", str(config))
    assert r.returncode == 0, r.stderr
    assert not tune_lines(r.stderr) or "probed" not in tune_lines(r.stderr)[0]
    assert not tune.exists() or not list(tune.iterdir())


def test_a_bad_max_batch_is_refused_by_name(package, tmp_path):
    prompts = tmp_path / "p.txt"
    prompts.write_text("a red ball\n")
    for bad in ("0", "many", "-3", "300"):
        r = batch(package, prompts, tmp_path / "out", tmp_path / "tune", "--max-batch", bad)
        assert r.returncode == 2, (bad, r.stderr)
        assert "--max-batch" in r.stderr
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").glob("*.mp4"))


def test_serve_exports_the_choice_in_metrics(package, tmp_path):
    tune = tmp_path / "tune"
    with Server(package, tmp_path / "out", env={"VGEN_TUNE_DIR": str(tune)}) as server:
        status, _, body = server.request("GET", "/metrics")
        assert status == 200
        text = body.decode()
    gauges = [line for line in text.splitlines() if line.startswith("vgen_tune_max_batch{")]
    assert len(gauges) == 1, text
    assert re.search(r'source="(probe|cache|partial|default)"', gauges[0]), gauges[0]
    assert float(gauges[0].rsplit(" ", 1)[1]) >= 1
    assert any(line.startswith("vgen_tune_probe_seconds{") for line in text.splitlines())


def test_the_first_batch_does_not_wait_for_the_search(package, tmp_path):
    """No wait at all: the jobs run at the safe default; nothing is cached as a choice yet."""
    prompts = tmp_path / "p.txt"
    prompts.write_text("a red ball\na blue cube\n")
    tune = tmp_path / "tune"
    r = batch(package, prompts, tmp_path / "out", tune, "--config", config(tmp_path, first_wait_s=0))
    assert r.returncode == 0, r.stderr
    lines = tune_lines(r.stderr)
    assert lines and "starting with batch 1, " in lines[0] and "(default: 0 settings measured" in lines[0], r.stderr
    assert "the search goes on between jobs" in lines[0]
    assert len(list((tmp_path / "out").glob("*.mp4"))) == 2
    # Nothing was measured (no job ever waited on tuning): what is cached, the jobs observed.
    docs = [json.loads(f.read_text()) for f in tune.glob("*.json")] if tune.exists() else []
    assert all(s["observed"] for d in docs for s in d["samples"]), docs


def metric(text, name):
    values = [float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name + "{")]
    return values[0] if values else None


def test_serve_learns_from_its_jobs_goes_on_between_jobs_switches_and_caches_it(package, tmp_path):
    tune = tmp_path / "tune"
    # Jobs of the package's default shape (what serve tunes). first_wait_s 5: nothing of unknown cost is measured (the jobs measure it), and between jobs
    # no measurement estimated above 5 s (the tiny package's take milliseconds).
    args = ["--config", config(tmp_path, first_wait_s=5, max_batch=4)]
    env = {"VGEN_TUNE_DIR": str(tune)}
    with Server(package, tmp_path / "out", *args, env=env) as server:
        ids = []
        for prompt in ("a red ball", "a blue cube"):  # at least 3 denoiser calls at batch 1 on the two leases
            status, _, body = server.json("POST", "/v1/jobs", {"prompt": prompt})
            assert status == 202, body
            ids.append(body["id"])
        for job_id in ids:
            assert server.wait_status(job_id, ("done", "failed", "cancelled"), timeout=300)["status"] == "done"
        # Then idle: the search measures what the jobs did not show, then reports it is over.
        deadline = time.monotonic() + 300
        while True:
            status, _, body = server.request("GET", "/metrics")
            assert status == 200
            text = body.decode()
            if metric(text, "vgen_tune_searching") == 0:
                break
            assert time.monotonic() < deadline, server.logs()
            time.sleep(0.2)
        logs = server.logs()
    assert "auto-tune: search done for model" in logs, logs
    assert metric(text, "vgen_tune_probe_seconds") > 0
    files = list(tune.glob("*.json"))
    assert len(files) == 1
    doc = json.loads(files[0].read_text())
    assert doc["complete"] is True and doc["samples"]
    assert any(s["observed"] for s in doc["samples"]) and any(not s["observed"] for s in doc["samples"])
    # The jobs' own calls were the first sample (observed); the runtime tried a larger batch on
    # them (a switch), and what it runs now is a batch the search allows.
    assert metric(text, "vgen_tune_switches_total") >= 1, text
    assert 1 <= metric(text, "vgen_tune_max_batch") <= 4, text
    # The next start takes the cached result and measures nothing.
    with Server(package, tmp_path / "out2", *args, env=env) as server:
        status, _, body = server.request("GET", "/metrics")
        text = body.decode()
    gauges = [line for line in text.splitlines() if line.startswith("vgen_tune_max_batch{")]
    assert len(gauges) == 1 and 'source="cache"' in gauges[0], text
    assert float(gauges[0].rsplit(" ", 1)[1]) == doc["choice"]["batch"]
    assert metric(text, "vgen_tune_searching") == 0
