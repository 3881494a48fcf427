"""The GPU check's CUDA-graph phase (issue 30 item 4), in the second command's group
(tools/vgen_gpu/plan.py), after the AOTInductor render (vgen_aoti), best effort; CUDA only, optional.

vgen_single_graphs: vgen_single's job with {"model_backend": {"cuda_graphs": true}}
(stages/model/cuda_graph_calls.hpp): the denoiser's first three calls at a shape run as usual,
the fourth is captured, later ones replay. Reports s/step over the steps after the capture
(steps 5..N) against vgen_single's same steps, the capture step, frames' PSNR against
vgen_single's, peak GPU memory (each graph pins a step's activations), and vgen's "cuda graphs:"
log lines (captures with their time, or why a capture failed). Then the same both ways at a small
shape (480x272x17; on --tiny, the lease shape), where kernel launches weigh more in a step:
8 steps rather than 6, so that 4 steps replay (6 would leave 2 to take a median of).
"""

from __future__ import annotations

import json
import shutil
import statistics
from pathlib import Path

from vgen_gpu.measure import psnr, read_pngs, read_trace, run_vgen, summarise_trace
from vgen_gpu.phases import PROMPTS, SEED, render_vgen, shapes, vgen_job_flags

# The decorator's warm-up (CudaGraphLimits::warmup_calls): the denoiser is called once per step
# (both guidance halves in one batch), so step WARMUP + 1 captures and the later ones replay.
WARMUP_CALLS = 3
CONFIG = {"model_backend": {"cuda_graphs": True}}


def graph_lines(log: Path) -> list[str]:
    """vgen's "cuda graphs: ..." lines (stages/model/cuda_graph_uses.cpp), after spdlog's level."""
    out = []
    for line in log.read_text(errors="replace").splitlines():
        if (at := line.find("] cuda graphs: ")) >= 0:
            out.append(line[at + 2:].strip())
    return out


def after_capture(step_s: list[float]) -> float | None:
    """Median s/step of the steps that replay (after the warm-up and the capture step)."""
    later = step_s[WARMUP_CALLS + 1:]
    return round(statistics.median(later), 4) if later else None


def compare(graphed: dict, plain: dict) -> dict:
    g, p = after_capture(graphed.get("step_s") or []), after_capture(plain.get("step_s") or [])
    steps = graphed.get("step_s") or []
    return {"s_per_step_after_capture": g, "plain_s_per_step_same_steps": p,
            "speedup_same_steps": round(p / g, 4) if g and p else None,
            "capture_step_s": steps[WARMUP_CALLS] if len(steps) > WARMUP_CALLS else None,
            "replayed_steps": max(0, len(steps) - WARMUP_CALLS - 1)}


def render_small(args, out_name: str, config: dict | None) -> dict:
    work = Path(args.work)
    shape = dict(shapes(args.tiny, args.steps)["leases"])
    shape = {"width": shape["width"], "height": shape["height"], "frames": shape["frames"], "steps": 8}
    trace = work / f"{out_name}.trace.json"
    shutil.rmtree(work / out_name, ignore_errors=True)
    cmd = [args.vgen, "render", PROMPTS[0], "-o", str(work / out_name), "--format", "png", "--model", str(work / "pkg"),
           "--seed", str(SEED), "--max-batch", "1", "--trace", str(trace), "--json", *vgen_job_flags(args, shape)]
    if config:
        (work / f"{out_name}.config.json").write_text(json.dumps(config))
        cmd += ["--config", str(work / f"{out_name}.config.json")]
    res = run_vgen(args, cmd, f"{out_name}.log")
    res.update(summarise_trace(read_trace(trace)))
    res["shape"] = shape
    return res


def phase_vgen_single_graphs(args) -> dict:
    work = Path(args.work)
    plain_file = work / "phase-vgen_single.json"
    plain = json.loads(plain_file.read_text())["result"]["bfloat16"] if plain_file.is_file() else {}
    res = render_vgen(args, "pkg", "vgen_frames_graphs", CONFIG)
    res["graph_log"] = graph_lines(work / "vgen_frames_graphs.log")
    res.update(compare(res, plain))
    res["psnr_vs_vgen_bf16"] = psnr(read_pngs(work / "vgen_frames_graphs"), read_pngs(work / "vgen_frames"))
    # The small shape both ways (plain first: the graphed run's figures are compared with it).
    small_plain = render_small(args, "vgen_frames_small", None)
    small = render_small(args, "vgen_frames_small_graphs", CONFIG)
    small["graph_log"] = graph_lines(work / "vgen_frames_small_graphs.log")
    small.update(compare(small, small_plain))
    small["psnr_vs_plain"] = psnr(read_pngs(work / "vgen_frames_small_graphs"), read_pngs(work / "vgen_frames_small"))
    res["small"] = {"graphs": small, "plain": small_plain}
    return res


def table_row(q: dict, v: dict | None) -> dict:
    """check.py's table row "vgen_bf16_cuda_graphs" from the phase's result (and vgen_single's)."""
    keys = ("s_per_step_after_capture", "plain_s_per_step_same_steps", "speedup_same_steps", "capture_step_s",
            "replayed_steps", "psnr_vs_vgen_bf16", "graph_log", "nvidia_smi_peak_above_idle_mib")
    row = {k: q.get(k) for k in keys if k in q}
    if v and v.get("nvidia_smi_peak_above_idle_mib") is not None and q.get("nvidia_smi_peak_above_idle_mib") is not None:
        row["peak_mib_vs_vgen_bf16"] = q["nvidia_smi_peak_above_idle_mib"] - v["nvidia_smi_peak_above_idle_mib"]
    s = q.get("small")
    if s:
        g, p = s["graphs"], s["plain"]
        row["small"] = {"shape": g.get("shape"), **{k: g.get(k) for k in keys if k in g and k != "psnr_vs_vgen_bf16"},
                        "psnr_vs_plain": g.get("psnr_vs_plain"),
                        "plain_peak_above_idle_mib": p.get("nvidia_smi_peak_above_idle_mib")}
    return row
