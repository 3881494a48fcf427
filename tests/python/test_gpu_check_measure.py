"""tools/vgen_gpu/measure.py's reading of a vgen trace (runtime/trace.hpp's format), on traces
written here with known times: the single job's time to the end of its decode, and the batch
measured after its warm-up jobs with the warm-up's decodes taken out of the window, and the
steady completion rate of queued jobs on one or two leases (vgen_leases)."""
from __future__ import annotations

import json
from pathlib import Path

from vgen_gpu.measure import batch_after_warmup, completion_rate, overlap_seconds, read_trace, summarise_trace

PIDS = {"stages": 1, "devices": 2, "jobs": 3}


class Trace:
    def __init__(self):
        self.events, self.tids = [], {}

    def span(self, process: str, track: str, name: str, start: float, end: float, **args):
        tid = self.tids.setdefault((process, track), len(self.tids) + 1)
        self.events.append({"name": name, "ph": "X", "pid": PIDS[process], "tid": tid, "ts": start * 1e6,
                            "dur": (end - start) * 1e6, **({"args": args} if args else {})})

    def job(self, job: str, stages: dict[str, tuple[float, float]], submitted: float):
        first = min(a for a, _ in stages.values())
        self.span("jobs", f"job {job}", "queued preprocess", submitted, first)
        for name, (a, b) in stages.items():
            self.span("jobs", f"job {job}", name, a, b, job=job)

    def write(self, path: Path) -> Path:
        meta = [{"name": "process_name", "ph": "M", "pid": pid, "tid": 0, "args": {"name": name}} for name, pid in PIDS.items()]
        meta += [{"name": "thread_name", "ph": "M", "pid": PIDS[p], "tid": tid, "args": {"name": t}}
                 for (p, t), tid in self.tids.items()]
        path.write_text(json.dumps({"traceEvents": meta + self.events}))
        return path


def test_single_job_to_the_end_of_its_decode(tmp_path):
    t = Trace()
    t.job("a", {"preprocess": (1.0, 1.5), "denoise": (1.5, 5.5), "decode": (5.5, 7.0), "encode": (7.0, 9.0)}, submitted=0.5)
    for i, (a, b) in enumerate([(1.5, 3.0), (3.0, 4.0), (4.0, 5.0), (5.0, 5.5)]):
        t.span("devices", "cuda:0 thread 0", "denoise step", a, b, batch=2)
    t.span("devices", "cuda:0 thread 0", "decode", 0.1, 0.2, batch=1)  # outside the job's decode stage
    t.span("devices", "cuda:0 thread 0", "decode", 5.6, 6.9, batch=1)
    t.span("stages", "decode worker 0", "decode", 5.5, 7.0)  # the same name on another process: not a device call
    r = summarise_trace(read_trace(t.write(tmp_path / "t.json")))
    assert r["steps_seen"] == 4 and r["first_step_s"] == 1.5 and r["s_per_step"] == 1.0
    assert abs(r["vae_decode_s"] - 1.3) < 1e-9
    assert r["job_to_decode_end_s"] == 6.5 and r["job_end_to_end_s"] == 8.5
    assert r["job_stage_s"] == {"preprocess": 0.5, "denoise": 4.0, "decode": 1.5, "encode": 2.0}


def test_batch_measured_after_its_warmup(tmp_path):
    t = Trace()
    dev = "cuda:0 thread 0"
    # 2 warm-up jobs: 2 steps (0..2), their decodes run between the measured group's steps
    for j in range(2):
        t.job(f"w{j}", {"preprocess": (0.0, 0.1), "denoise": (0.1, 2.0), "decode": (2.0, 3.1 + j), "encode": (3.1 + j, 3.5 + j)},
              submitted=0.0)
    for a, b in [(0.1, 1.0), (1.0, 2.0)]:
        t.span("devices", dev, "denoise step", a, b, batch=4)
    # the measured pair: submitted at 0, prepared during the warm-up, 3 steps from 2.0 with the
    # warm-up's two decodes (0.25 s each) between them
    for j in range(2):
        t.job(f"m{j}", {"preprocess": (0.2, 0.3), "denoise": (0.3, 5.5), "decode": (5.5, 6.0 + j), "encode": (6.0 + j, 6.5 + j)},
              submitted=0.0)
    t.span("devices", dev, "denoise step", 2.0, 3.0, batch=4)
    t.span("devices", dev, "decode", 3.0, 3.25, batch=1)
    t.span("devices", dev, "decode", 3.25, 3.5, batch=1)
    t.span("devices", dev, "denoise step", 3.5, 4.5, batch=4)
    t.span("devices", dev, "denoise step", 4.5, 5.5, batch=4)
    t.span("devices", dev, "decode", 5.5, 6.0, batch=1)
    t.span("devices", dev, "decode", 6.0, 7.0, batch=1)
    r = batch_after_warmup(read_trace(t.write(tmp_path / "b.json")), warm_jobs=2)
    assert r["warmup_jobs"] == 2 and r["measured_jobs"] == 2
    assert r["warmup_step_batches"] == [4, 4] and r["group_step_batches"] == [4, 4, 4]
    assert r["group_s_per_step"] == 1.0 and r["group_first_step_s"] == 1.0
    assert r["window_s"] == 5.5  # 2.0 (the warm-up's denoise ends) .. 7.5 (the last measured job ends)
    assert r["warmup_decode_in_window_s"] == 0.5 and r["jobs_span_s"] == 5.0
    assert r["decode_s"] == [0.5, 1.0] and r["measured_job_to_decode_end_s"] == [4.0, 5.0]


def leases_trace(tmp_path: Path, leases: int, jobs: int, job_s: float = 2.0) -> Path:
    """`jobs` equal jobs of job_s seconds each on `leases` compute threads, submitted at 0; the
    second thread starts half a job later (staggered), each thread runs its jobs back to back."""
    t = Trace()
    for j in range(jobs):
        lane, k = j % leases, j // leases
        start = lane * job_s / 2 + k * job_s
        t.job(f"j{j}", {"preprocess": (start, start + 0.5), "denoise": (start + 0.5, start + 1.5),
                        "decode": (start + 1.5, start + job_s)}, submitted=0.0)
        dev = f"cuda:0 thread {lane}"
        t.span("devices", dev, "preprocess", start, start + 0.5)
        t.span("devices", dev, "denoise", start + 0.5, start + 1.5)  # the group's loop: not counted twice
        t.span("devices", dev, "denoise step", start + 0.5, start + 1.5, batch=1)
        t.span("devices", dev, "decode", start + 1.5, start + job_s)
    return t.write(tmp_path / f"leases{leases}.json")


def test_completion_rate_of_one_and_two_leases(tmp_path):
    one = completion_rate(read_trace(leases_trace(tmp_path, 1, 10)), skip=2)
    assert one["measured_jobs"] == 8 and one["window_s"] == 16.0 and one["jobs_per_min"] == 30.0
    assert one["compute_threads"] == 1 and one["concurrent_model_calls_s"] == 0.0
    assert one["all_jobs_span_s"] == 20.0
    two = completion_rate(read_trace(leases_trace(tmp_path, 2, 10)), skip=2)
    # ends at 2, 3, 4, 5, ..., 11: from the 2nd end (3.0) to the last (11.0), 8 jobs in 8 s
    assert two["measured_jobs"] == 8 and two["window_s"] == 8.0 and two["jobs_per_min"] == 60.0
    assert two["compute_threads"] == 2
    assert two["concurrent_model_calls_s"] == 9.0  # both threads busy from 1.0 to 10.0


def test_completion_rate_needs_jobs_after_the_warmup(tmp_path):
    import pytest

    with pytest.raises(RuntimeError, match="need at least 4"):
        completion_rate(read_trace(leases_trace(tmp_path, 1, 3)), skip=2)


def test_overlap_counts_only_two_tracks_at_once():
    assert overlap_seconds([[(0.0, 2.0)], [(1.0, 3.0)]]) == 1.0
    assert overlap_seconds([[(0.0, 1.0)], [(1.0, 2.0)]]) == 0.0  # touching, not overlapping
    assert overlap_seconds([[(0.0, 1.0), (2.0, 3.0)], [(0.5, 2.5)]]) == 1.0
