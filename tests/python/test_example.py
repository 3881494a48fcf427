"""apps/example (build/bin/vgen_example): one embedding program, two JobServices.
- in process: a vgen::Runtime on the tiny random Wan package renders two jobs, cancels a third,
  reports progress and refuses a spec without a prompt (HTTP 400);
- on the fleet: the same code through a vgen::FleetClient, with a private nats-server and one
  `vgen worker` (skipped when nats-server is not installed or vgen was built without libnats)."""
from __future__ import annotations

import json
import re
import shutil
import subprocess

import pytest

from test_cli_serve import VGEN, package  # noqa: F401  (the module-scoped fixture)

EXAMPLE = VGEN.parent / "vgen_example"
pytestmark = pytest.mark.skipif(not EXAMPLE.exists(), reason="build/bin/vgen_example not built")


def example(*args, timeout=600):
    return subprocess.run([str(EXAMPLE), *map(str, args)], capture_output=True, text=True, timeout=timeout)


def check_report(r, out_dir):
    assert r.returncode == 0, r.stdout + r.stderr
    rows = re.findall(r"^\S+ (done|failed|cancelled) (.*)$", r.stdout, re.M)  # id state output
    assert len(rows) == 3, r.stdout
    by_output = {output: state for state, output in rows}
    for name in ("first", "second"):
        assert by_output.get(str(out_dir / f"{name}.mp4")) == "done", r.stdout
        assert (out_dir / f"{name}.mp4").stat().st_size > 0
    assert "rejected: prompt" in r.stdout and "(HTTP 400)" in r.stdout, r.stdout


def test_the_runtime_in_process(package, tmp_path):  # noqa: F811
    out = tmp_path / "out"
    r = example(out, package)
    check_report(r, out)
    assert int(re.search(r"progress events: (\d+)", r.stdout).group(1)) > 0, r.stdout


def test_the_same_code_on_the_fleet(package, tmp_path):  # noqa: F811
    if shutil.which("nats-server") is None:
        pytest.skip("nats-server is not installed (apt-get install nats-server)")
    probe = example(tmp_path, "--queue", "nats://127.0.0.1:1")
    if "built without libnats" in probe.stderr:
        pytest.skip("vgen built without libnats: the example has no fleet client")
    from test_fleet import Broker, Worker  # the fleet's own helpers (a private broker, a worker process)

    out = tmp_path / "out"
    out.mkdir()
    config = tmp_path / "fleet.json"
    config.write_text(json.dumps({"queue": {"fetch_wait_ms": 500}}))
    broker = Broker(tmp_path)
    worker = None
    try:
        worker = Worker("ex", broker, package, out, config)
        r = example(out, "--queue", broker.url)
        check_report(r, out)
        assert worker.stop() == 0, worker.logs()
    finally:
        if worker:
            worker.kill()
        broker.stop()
