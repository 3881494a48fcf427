"""What the GPU check measures with, shared by its phases (tools/vgen_gpu/phases.py, compiled.py):
peak memory, PSNR of 8-bit frames, running vgen, and reading vgen's trace.

A vgen trace (runtime/trace.hpp) has three processes: "jobs" (a track per job: its stage spans,
"queued <stage>" waits, args.job), "stages" and "devices" (a track per compute thread: one span
per model call: "preprocess", "denoise" (a group's whole loop), "denoise step" (args.batch:
rows), "decode"). Times here are in seconds on the trace's own clock.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import threading
import time
from pathlib import Path


class PeakMemory:
    """nvidia-smi memory.used sampled every 100 ms on a thread; peak above the idle value (MiB)."""

    def __init__(self, device: str):
        self.device, self.samples, self.proc, self.idle = device, [], None, None

    def __enter__(self):
        if self.device != "cuda":
            return self
        self.idle = self._query()
        self.proc = subprocess.Popen(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits",
                                      "-i", "0", "-lms", "100"], stdout=subprocess.PIPE, text=True)
        threading.Thread(target=self._read, daemon=True).start()
        return self

    def _query(self) -> int:
        out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits", "-i", "0"],
                             capture_output=True, text=True, check=True).stdout
        return int(out.split()[0])

    def _read(self):
        for line in self.proc.stdout:
            if line.strip().isdigit():
                self.samples.append(int(line))

    def __exit__(self, *exc):
        if self.proc:
            self.proc.terminate()
            self.proc.wait()

    def result(self) -> dict:
        if self.device != "cuda":
            return {}
        peak = max(self.samples, default=None)
        return {"nvidia_smi_peak_mib": peak, "nvidia_smi_idle_mib": self.idle,
                "nvidia_smi_peak_above_idle_mib": None if peak is None else peak - self.idle}


def sync(device: str):
    import torch

    if device == "cuda":
        torch.cuda.synchronize()


def median_after_first(xs: list[float]) -> float | None:
    return statistics.median(xs[1:] if len(xs) > 1 else xs) if xs else None


def to_uint8(frames):
    """[F,H,W,3] floats in [0,1] -> uint8 (round to nearest, as vgen's frames are)."""
    import numpy as np

    return (np.clip(frames, 0.0, 1.0) * 255.0 + 0.5).astype(np.uint8)


def psnr(a, b) -> dict:
    import numpy as np

    if a.shape != b.shape:
        raise RuntimeError(f"frame shapes differ: {a.shape} vs {b.shape}")
    a, b = a.astype(np.float64), b.astype(np.float64)
    per = [float(10 * np.log10(255.0 ** 2 / max(((x - y) ** 2).mean(), 1e-12))) for x, y in zip(a, b)]
    mse = ((a - b) ** 2).mean()
    return {"psnr_db": float(10 * np.log10(255.0 ** 2 / max(mse, 1e-12))), "min_frame_psnr_db": min(per),
            "max_abs_diff": int(np.abs(a - b).max()), "frames": len(per)}


def read_pngs(folder: Path):
    import numpy as np
    from PIL import Image

    files = sorted(folder.glob("*.png"))
    if not files:
        raise RuntimeError(f"no PNG frames in {folder}")
    return np.stack([np.asarray(Image.open(f).convert("RGB")) for f in files])


def attention_lines(log: Path) -> list[str]:
    """vgen's "attention: <file> <method> on <device> at <shape>: <kernels>" info lines
    (stages/model/attention_uses.cpp), the part after "attention: ", in order."""
    out = []
    for line in log.read_text(errors="replace").splitlines():
        if (at := line.find("] attention: ")) >= 0:  # after spdlog's "[info]"
            out.append(line[at + len("] attention: "):].strip())
    return out


def run_vgen(args, cmd: list[str], log_name: str, env: dict | None = None) -> dict:
    """Runs vgen (gpu_check.sh set LD_LIBRARY_PATH to bundle/lib + the torch libraries), returns
    wall time, rc, peak memory (nvidia-smi on CUDA, the child's peak RSS on CPU), its JSON line."""
    log = Path(args.work) / log_name
    if "--log-level" not in cmd:  # info: the log then names the attention kernels each module ran
        cmd = [cmd[0], "--log-level", "info", *cmd[1:]]
    with PeakMemory(args.device) as mem, open(log, "w") as out:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=out, text=True, env={**os.environ, **(env or {})},
                                cwd=args.work)
        stdout = proc.stdout.read()
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        wall = time.perf_counter() - t0
    res = {"rc": proc.returncode, "process_s": round(wall, 3), **mem.result()}
    if args.device != "cuda":
        res["peak_rss_mib"] = round(usage.ru_maxrss / 1024, 1)
    if proc.returncode != 0:
        raise RuntimeError(f"vgen exited {proc.returncode}: {log.read_text()[-2000:]}")
    if attention := attention_lines(log):
        res["attention"] = attention
    try:
        res["stdout_json"] = json.loads(stdout.strip().splitlines()[-1]) if stdout.strip() else None
    except (json.JSONDecodeError, IndexError):
        res["stdout_tail"] = stdout[-500:]
    return res


# ----------------------------------------------------------------------------- vgen's trace
def read_trace(trace_file: Path) -> list[dict]:
    """The trace's complete ("X") events, oldest first: name, process, track, start, end, dur (s), args."""
    raw = json.loads(Path(trace_file).read_text())["traceEvents"]
    procs = {e["pid"]: e["args"]["name"] for e in raw if e.get("ph") == "M" and e.get("name") == "process_name"}
    tracks = {(e["pid"], e["tid"]): e["args"]["name"] for e in raw if e.get("ph") == "M" and e.get("name") == "thread_name"}
    out = []
    for e in raw:
        if e.get("ph") != "X":
            continue
        start, dur = e["ts"] / 1e6, e.get("dur", 0) / 1e6
        out.append({"name": e["name"], "process": procs.get(e["pid"]), "track": tracks.get((e["pid"], e["tid"])),
                    "start": start, "end": start + dur, "dur": dur, "args": e.get("args", {})})
    return sorted(out, key=lambda e: e["start"])


def device_spans(events: list[dict], name: str) -> list[dict]:
    return [e for e in events if e["process"] == "devices" and e["name"] == name]


def job_timelines(events: list[dict]) -> dict[str, dict]:
    """Per job track: its first event (its submission: it enters the first queue), each stage's
    [start, end] and its last event's end."""
    jobs: dict[str, dict] = {}
    for e in events:
        if e["process"] != "jobs":
            continue
        j = jobs.setdefault(e["track"], {"start": e["start"], "end": e["end"], "stages": {}})
        j["start"], j["end"] = min(j["start"], e["start"]), max(j["end"], e["end"])
        if not e["name"].startswith("queued "):
            j["stages"][e["name"]] = [e["start"], e["end"]]
    return jobs


def summarise_trace(events: list[dict]) -> dict:
    """One job's render: s/step (median of the device's denoise steps after the first), its
    decode (the device's decode calls inside the job's decode stage), and the job's time from
    submission to the end of decode (the figure comparable with a pipeline call that writes no
    file) beside its stages."""
    steps = [e["dur"] for e in device_spans(events, "denoise step")]
    jobs = job_timelines(events)
    res = {"s_per_step": median_after_first(steps), "steps_seen": len(steps), "first_step_s": steps[0] if steps else None,
           "step_s": [round(s, 4) for s in steps]}
    if len(jobs) == 1:
        (job,) = jobs.values()
        dec = job["stages"].get("decode")
        if dec:
            res["vae_decode_s"] = sum(e["dur"] for e in device_spans(events, "decode")
                                      if e["start"] >= dec[0] and e["end"] <= dec[1])
            res["job_to_decode_end_s"] = round(dec[1] - job["start"], 4)
        res["job_stage_s"] = {k: round(b - a, 4) for k, (a, b) in job["stages"].items()}
        res["job_end_to_end_s"] = round(job["end"] - job["start"], 4)
    else:
        decodes = device_spans(events, "decode")
        res["vae_decode_s"] = decodes[-1]["dur"] if decodes else None
    return res


def batch_after_warmup(events: list[dict], warm_jobs: int) -> dict:
    """vgen_batch's jobs measured after a warm-up at their shape (tools/vgen_gpu/phases.py): the
    warm-up jobs are the `warm_jobs` whose denoise stage ends first (their loop has fewer steps
    and no job of another step count joins it). The window runs from the end of their denoise
    (the device is free for the measured group) to the last measured job's end; the warm-up's
    own decodes that the device runs between the measured group's steps are taken out of it
    (jobs_span_s), and reported (warmup_decode_in_window_s)."""
    threads = {e["track"] for e in events if e["process"] == "devices"}
    if len(threads) != 1:  # the window below is one compute thread's timeline
        raise RuntimeError(f"trace: model calls on {len(threads)} compute threads ({sorted(threads)}), expected one")
    jobs = sorted(job_timelines(events).values(), key=lambda j: j["stages"].get("denoise", [0, 0])[1])
    warm, measured = jobs[:warm_jobs], jobs[warm_jobs:]
    if not warm or not measured:
        raise RuntimeError(f"trace: {len(jobs)} jobs, expected {warm_jobs} warm-up jobs and the measured ones")
    warm_end = max(j["stages"]["denoise"][1] for j in warm)
    warm_decode_end = max(j["stages"].get("decode", [0, warm_end])[1] for j in warm)
    window_end = max(j["end"] for j in measured)
    steps = device_spans(events, "denoise step")
    group = [e for e in steps if e["start"] >= warm_end]
    warm_dec = [e for e in device_spans(events, "decode") if warm_end <= e["start"] and e["end"] <= warm_decode_end]
    decodes = [e for e in device_spans(events, "decode") if e["start"] > warm_decode_end]
    lost = sum(e["dur"] for e in warm_dec)
    window = window_end - warm_end
    return {"warmup_jobs": len(warm), "measured_jobs": len(measured),
            "warmup_step_batches": [e["args"].get("batch") for e in steps if e["end"] <= warm_end],
            "group_step_batches": [e["args"].get("batch") for e in group],
            "group_s_per_step": median_after_first([e["dur"] for e in group]),
            "group_first_step_s": group[0]["dur"] if group else None,
            "group_step_s": [round(e["dur"], 4) for e in group],
            "decode_s": [round(e["dur"], 4) for e in decodes], "decode_batches": [e["args"].get("batch") for e in decodes],
            "window_s": round(window, 4), "warmup_decode_in_window_s": round(lost, 4),
            "jobs_span_s": round(window - lost, 4),
            "measured_job_to_decode_end_s": [round(j["stages"]["decode"][1] - warm_end, 4) for j in measured
                                             if "decode" in j["stages"]]}


def completion_rate(events: list[dict], skip: int) -> dict:
    """Queued identical jobs through one vgen process (the vgen_leases phase): the steady rate
    at which they finish. The first `skip` completions are the warm-up (graphs profiled and
    optimised, allocator grown): the window runs from the skip-th job's end to the last one's, and
    counts the jobs that end in it, so that leases that finish in pairs or staggered are measured
    alike. Also how long model calls of two compute threads ran at the same time (the overlap two
    leases are for) and how many compute threads made calls."""
    jobs = job_timelines(events)
    ends = sorted(j["end"] for j in jobs.values())
    if skip < 1 or len(ends) < skip + 2:
        raise RuntimeError(f"trace: {len(ends)} jobs, need at least {skip + 2} to skip {skip} warm-up jobs")
    window = ends[-1] - ends[skip - 1]
    calls: dict[str, list[tuple[float, float]]] = {}
    for e in events:
        if e["process"] == "devices" and e["name"] != "denoise":  # "denoise" spans a group's whole loop
            calls.setdefault(e["track"], []).append((e["start"], e["end"]))
    return {"jobs_seen": len(ends), "warmup_jobs": skip, "measured_jobs": len(ends) - skip, "window_s": round(window, 4),
            "jobs_per_min": round(60 * (len(ends) - skip) / window, 3) if window > 0 else None,
            "all_jobs_span_s": round(ends[-1] - min(j["start"] for j in jobs.values()), 4),
            "compute_threads": len(calls), "concurrent_model_calls_s": round(overlap_seconds(list(calls.values())), 4)}


def overlap_seconds(tracks: list[list[tuple[float, float]]]) -> float:
    """Time during which model calls of at least two tracks were in flight together."""
    points = sorted([(a, 1) for t in tracks for a, _ in t] + [(b, -1) for t in tracks for _, b in t],
                    key=lambda p: (p[0], p[1]))  # an end before a start at the same instant
    busy, last, total = 0, None, 0.0
    for at, step in points:
        if busy >= 2 and last is not None:
            total += at - last
        busy, last = busy + step, at
    return total
