"""Priority and preemption through `vgen serve` on the tiny random Wan package: a high-priority
job submitted while a long low-priority one holds the device (max batch 1) preempts it at a step
boundary; the low job's event stream says `preempted` and `resumed`, the high job finishes
first, and the low job's video is byte-identical to the same job rendered uninterrupted."""
from __future__ import annotations

import subprocess
import threading

import pytest

from test_cli_serve import VGEN, Server, package  # noqa: F401  (package: the module's fixture)

pytestmark = pytest.mark.skipif(not VGEN.exists(), reason="build/bin/vgen not built")

# LOW must still be denoising when HIGH, submitted at its step 2, is ready to run: 300 steps
# leave a loaded machine far more than the few it needs (40 left it a fraction of a second).
LOW = {"prompt": "a red circle moving left", "name": "low", "seed": 5, "width": 48, "height": 32, "frames": 9,
       "steps": 300, "fps": 12}
HIGH = {"prompt": "a blue square moving up", "name": "high", "seed": 6, "width": 48, "height": 32, "frames": 9,
        "steps": 3, "fps": 12, "priority": 50}


def test_high_priority_preempts_and_the_preempted_video_is_identical(package, tmp_path):
    one_lease = tmp_path / "one-lease.json"  # a busy device: one job at a time, whatever the tuner would pick
    one_lease.write_text('{"threads": {"per_device": 1}}')
    with Server(package, tmp_path / "out", "--max-batch", "1", "--config", str(one_lease)) as server:
        status, _, body = server.json("POST", "/v1/jobs", LOW)
        assert status == 202, body
        low = body["id"]
        high = {}
        finished = []  # job names in the order their streams ended
        lock = threading.Lock()

        def submit_high(event, data):
            if event == "progress" and data["state"] == "denoise" and data["step"] >= 2 and not high:
                status, _, b = server.json("POST", "/v1/jobs", HIGH)
                assert status == 202, b
                high["id"] = b["id"]
                t = threading.Thread(target=follow_high, daemon=True)
                high["thread"] = t
                t.start()

        def follow_high():
            high["events"] = server.events(high["id"])
            with lock:
                finished.append("high")

        low_events = server.events(low, until=submit_high, timeout=300)
        with lock:
            finished.append("low")
        assert high, "the low job ended before it reached step 2"
        high["thread"].join(300)
        assert finished == ["high", "low"], (finished, low_events)
        assert high["events"][-1][0] == "done"
        assert low_events[-1][0] == "done", low_events
        notes = [(d.get("event"), d["step"]) for e, d in low_events if e == "progress" and d.get("event")]
        kinds = [k for k, _ in notes]
        assert "preempted" in kinds and "resumed" in kinds[kinds.index("preempted"):], low_events
        at = dict(notes)
        assert at["resumed"] == at["preempted"] >= 2  # it went on from the step it left at
        steps = [d["step"] for e, d in low_events if e == "progress" and d["state"] == "denoise" and not d.get("event")]
        assert max(steps) == LOW["steps"]
        status, _, st = server.json("GET", f"/v1/jobs/{low}")
        assert st["progress"]["preemptions"] == 1, st
        status, _, metrics = server.request("GET", "/metrics")
        assert b"vgen_denoise_preempted_total 1" in metrics, metrics
        assert b"vgen_denoise_resumed_total 1" in metrics
        video = (server.out_dir / "low.mp4").read_bytes()
        assert server.stop() == 0

    # The same job, never interrupted: the same bytes.
    alone = tmp_path / "alone" / "low.mp4"
    alone.parent.mkdir()
    args = [a for k in ("width", "height", "frames", "steps", "fps", "seed") for a in (f"--{k}", str(LOW[k]))]
    r = subprocess.run([str(VGEN), "render", LOW["prompt"], "-o", str(alone), "--model", str(package), *args],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    assert alone.read_bytes() == video
