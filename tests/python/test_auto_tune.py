"""The self-tuned defaults end to end (issue 24 item 1): `vgen batch` with no batching flags
measures the package at the jobs' shape once, logs what it chose and caches it; the next start
reads the cache; numbers given on the command line are kept and nothing is measured; `vgen serve`
exports the choice in /metrics."""
from __future__ import annotations

import json
import os
import subprocess

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


def test_batch_probes_once_then_reads_its_cache(package, tmp_path):
    prompts = tmp_path / "p.txt"
    prompts.write_text("a red ball\na blue cube\na green cone\n")
    tune = tmp_path / "tune"
    first = batch(package, prompts, tmp_path / "out1", tune)
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
    third = batch(package, prompts, tmp_path / "out3", tune, shape=[a if a != "2" else "3" for a in SMALL])  # 3 steps
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
    assert 'source="probe"' in gauges[0] or 'source="cache"' in gauges[0]
    assert float(gauges[0].rsplit(" ", 1)[1]) >= 1
    assert any(line.startswith("vgen_tune_probe_seconds{") for line in text.splitlines())
