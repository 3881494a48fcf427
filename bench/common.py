"""Shared helpers for the benchmarks: paths, the machine description, statistics over runs,
tables and JSON output. Standard library only (the venv's torch is imported only where
asked for, to report its thread settings)."""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Iterable

ROOT = Path(__file__).resolve().parents[1]
BUILD = Path(os.environ.get("VGEN_BUILD_DIR", ROOT / "build"))
BIN = Path(os.environ.get("VGEN_BENCH_BIN", BUILD / "bin"))
OUT = Path(os.environ.get("VGEN_BENCH_OUT", ROOT / "bench" / "out"))
VENV_PY = Path(os.environ.get("VGEN_VENV", Path.home() / ".cache" / "vgen" / "venv")) / "bin" / "python"
RUNS = int(os.environ.get("VGEN_BENCH_RUNS", "5"))


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def load() -> dict[str, Any]:
    one, five, fifteen = os.getloadavg()
    return {"loadavg_1m": round(one, 2), "loadavg_5m": round(five, 2), "loadavg_15m": round(fifteen, 2)}


def torch_threads() -> dict[str, Any]:
    """The venv torch's default intra-op/inter-op threads (what LibTorch in vgen also uses:
    vgen never calls at::set_num_threads)."""
    code = ("import torch,json;print(json.dumps({'torch':torch.__version__,"
            "'intra_op_threads':torch.get_num_threads(),'inter_op_threads':torch.get_num_interop_threads(),"
            "'parallel_info':torch.__config__.parallel_info().splitlines()[:6]}))")
    try:
        return json.loads(subprocess.run([str(VENV_PY), "-c", code], capture_output=True, text=True,
                                         check=True, timeout=120).stdout)
    except Exception as e:  # noqa: BLE001 - informational only
        return {"error": repr(e)}


def machine(with_torch: bool = False) -> dict[str, Any]:
    m: dict[str, Any] = {"nproc": os.cpu_count(), "cpu_model": cpu_model(), "kernel": platform.release(),
                         "python": sys.version.split()[0], **load(),
                         "env": {k: os.environ[k] for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS") if k in os.environ}}
    try:
        m["other_processes_top"] = subprocess.run(
            ["ps", "-eo", "pcpu,comm", "--sort=-pcpu", "--no-headers"], capture_output=True, text=True,
            timeout=10).stdout.splitlines()[:5]
    except Exception:  # noqa: BLE001
        pass
    if with_torch:
        m["torch_threads"] = torch_threads()
    return m


def stats(xs: Iterable[float]) -> dict[str, float]:
    xs = list(xs)
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs), "n": len(xs)}


def run_json(cmd: list[str], timeout: float = 3600, env: dict | None = None) -> Any:
    """Runs a command that prints one JSON object as its last stdout line."""
    p = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=timeout,
                       env={**os.environ, **(env or {})})
    if p.returncode != 0:
        raise RuntimeError(f"{cmd[0]} failed ({p.returncode}):\n{p.stderr[-3000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def timed(cmd: list[str], timeout: float = 3600, env: dict | None = None, **kw) -> float:
    t0 = time.perf_counter()
    p = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=timeout,
                       env={**os.environ, **(env or {})}, **kw)
    dt = time.perf_counter() - t0
    if p.returncode != 0:
        raise RuntimeError(f"{cmd[0]} failed ({p.returncode}):\n{p.stderr[-3000:]}")
    return dt


def fmt(x: float, digits: int = 3) -> str:
    if x == 0:
        return "0"
    if abs(x) >= 1000:
        return f"{x:,.0f}"
    return f"{x:.{digits}g}"


def table(headers: list[str], rows: list[list[Any]]) -> str:
    cells = [[str(h) for h in headers]] + [[c if isinstance(c, str) else fmt(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    line = lambda r: "| " + " | ".join(c.ljust(w) for c, w in zip(r, widths)) + " |"  # noqa: E731
    return "\n".join([line(cells[0]), "|" + "|".join("-" * (w + 2) for w in widths) + "|"] +
                     [line(r) for r in cells[1:]])


def write(name: str, result: dict[str, Any]) -> Path:
    OUT.mkdir(parents=True, exist_ok=True)
    path = OUT / f"{name}.json"
    result = {"bench": name, "when": time.strftime("%Y-%m-%dT%H:%M:%S%z"), **result}
    path.write_text(json.dumps(result, indent=2) + "\n")
    print(f"\nwrote {path}")
    return path


def mmm(s: dict[str, float], digits: int = 3) -> str:
    """'median (min–max)'."""
    return f"{fmt(s['median'], digits)} ({fmt(s['min'], digits)}–{fmt(s['max'], digits)})"
