#!/usr/bin/env python3
"""The driver behind tools/gpu_check.sh (which sets up the bundle, LD_LIBRARY_PATH and PYTHONPATH).

    python -m vgen_gpu.check --device cuda|cpu [--tiny] --vgen BIN --work DIR --out DIR [--budget-s S]
                             [--only first|compiled|PHASE,...]

Runs the phases below, each in its own child process (a crash or a hang costs that phase only)
with a time box cut to what is left of the budget, and rewrites OUT/gpu_check.json after every
phase, so a run cut short still leaves the phases it finished. Big files (the diffusers
directory, the packages, frames) stay in WORK, never in OUT (OUT comes back from the device).

Two commands a session (each under the device's 600 s a command; docs/PERFORMANCE.md, "how to
rerun"; the groups: tools/vgen_gpu/plan.py). The first (default, --only first) measures one job
every way: environment, build_model, export (bf16 package with an fp8 variant of the
transformer; tiny: a float32 package too), diffusers_single and vgen_single (one job: same
prompt, seed and size, bf16, same device), compare (PSNR of the 8-bit frames), vgen_fp8,
vgen_tiled_decode (tools/vgen_gpu/tiled.py: peak memory with the VAE's tiling off and on at 720p,
on at 480p). The second (--only compiled, same --work): environment, then build_model, export,
diffusers_single and vgen_single reused from WORK when the first command left them there (status
"reused": a warm machine) and run again when not (a fresh machine: export then writes the bf16
package only), then vgen_single_unoptimised (CUDA only: the single job with
model_backend.torchscript_gpu_optimize false, TorchScript on the GPU run as exported), then
aoti_compile and vgen_aoti (tools/vgen_gpu/compiled.py; only the transformer method the job calls
is compiled), then, best effort with what is left: vgen_single_graphs (CUDA only: the single job
with model_backend.cuda_graphs, and a small shape both ways; tools/vgen_gpu/graphs.py), diffusers_batch and
vgen_batch (8 jobs at a smaller shape: a WanPipeline loop vs one vgen batch with --max-batch 8,
both warmed at the shape before their clocks), vgen_leases (8 queued jobs at a small shape with 1
and with 2 leases on the device: jobs/min, peak memory, their ratio, whether the two runs wrote
the same files; threads.per_gpu) and
vgen_single_fusion (CUDA only).
Phases: tools/vgen_gpu/phases.py; measurements: tools/vgen_gpu/measure.py.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
import traceback
from pathlib import Path

from vgen_gpu.plan import CUDA_ONLY, OPTIONAL, ORDER, PRODUCTS, SHARES, expand_only


def shapes_of(args) -> dict:
    from vgen_gpu.phases import shapes

    return shapes(args.tiny, args.steps)


def phase_function(name: str):
    from vgen_gpu import compiled, graphs, phases, probe_decode, probe_fp8, probe_sdpa, probe_step, tiled

    for module in (phases, compiled, graphs, tiled, probe_step, probe_fp8, probe_decode, probe_sdpa):
        if hasattr(module, f"phase_{name}"):
            return getattr(module, f"phase_{name}")
    raise KeyError(f"no phase function for '{name}'")


# ----------------------------------------------------------------------------- driver
def run_phase(args) -> int:
    import torch

    torch.set_num_threads(os.cpu_count() or 1)
    out = Path(args.work) / f"phase-{args.phase}.json"
    try:
        res = phase_function(args.phase)(args)
        out.write_text(json.dumps({"status": "ok", "result": res, "shapes": shapes_of(args)}, default=str))
        return 0
    except Exception as e:  # recorded, the next phases still run
        out.write_text(json.dumps({"status": "failed", "error": f"{type(e).__name__}: {e}"[-3000:],
                                   "traceback": traceback.format_exc()[-3000:]}))
        traceback.print_exc()
        return 1


def reusable(args, name: str, selected: set[str]) -> dict | None:
    """The earlier run's phase file when this is the compiled command and WORK still holds what
    the phase made, at the same shapes."""
    if "aoti_compile" not in selected or name not in PRODUCTS:
        return None
    work = Path(args.work)
    f = work / f"phase-{name}.json"
    if not f.is_file() or not (work / PRODUCTS[name]).exists():
        return None
    earlier = json.loads(f.read_text())
    if earlier.get("status") != "ok" or earlier.get("shapes") != json.loads(json.dumps(shapes_of(args))):
        return None
    return {"status": "reused", "result": earlier["result"], "from": str(f),
            "made_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(f.stat().st_mtime))}


def write_report(path: Path, report: dict):
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(report, indent=1, default=str))
    tmp.replace(path)


def pick(x: dict | None, *keys: str) -> dict:
    return {k: x.get(k) for k in keys if k in x} if x else {}


PEAKS = ("nvidia_smi_peak_above_idle_mib", "torch_max_allocated_mib", "peak_rss_mib")


def second_step(x: dict) -> float | None:
    steps = x.get("step_s") or []
    return steps[1] if len(steps) > 1 else None


def vgen_row(x: dict) -> dict:
    """A vgen single-job row: end_to_end_s is the job from submission to the end of its decode
    (the trace), comparable with diffusers' pipeline call, which writes no file; with_files_s adds
    the frames written (the job's own seconds, submission to its files). second_step_s: where
    LibTorch's profiling executor optimises each graph (its first step profiles)."""
    j = x.get("stdout_json") or {}
    return {**pick(x, "s_per_step", "first_step_s"), "second_step_s": second_step(x),
            **pick(x, "vae_decode_s"), "end_to_end_s": x.get("job_to_decode_end_s"),
            "end_to_end_with_files_s": j.get("seconds"), "process_s": x.get("process_s"),
            "stage_s": j.get("stage_seconds"), **pick(x, *PEAKS)}


def derive(report: dict):
    """The table's rows, from whatever phases finished (or were reused)."""
    r = {k: v.get("result") for k, v in report["phases"].items() if v.get("status") in ("ok", "reused")}
    table = {}
    d, v = r.get("diffusers_single"), (r.get("vgen_single") or {}).get("bfloat16")
    if d:
        table["diffusers_bf16"] = {**pick(d, "s_per_step", "first_step_s"), "second_step_s": second_step(d),
                                   **pick(d, "vae_decode_s", "end_to_end_s"),
                                   "files_written": 0, **pick(d, *PEAKS)}
    if v:
        table["vgen_bf16"] = vgen_row(v)
    if r.get("vgen_single_unoptimised"):
        table["vgen_bf16_torchscript_gpu_unoptimised"] = vgen_row(r["vgen_single_unoptimised"])
    if r.get("vgen_single_fusion"):
        table["vgen_bf16_torchscript_gpu_fusion"] = vgen_row(r["vgen_single_fusion"])
    for name, phase in (("vgen_fp8", "vgen_fp8"), ("vgen_aoti", "vgen_aoti")):
        q = r.get(phase)
        if q:
            table[name] = {**vgen_row(q), **pick(q, "psnr_vs_diffusers_bf16", "psnr_vs_vgen_bf16")}
            if v and q.get("s_per_step") and v.get("s_per_step"):
                table[name]["s_per_step_vs_vgen_bf16"] = round(q["s_per_step"] / v["s_per_step"], 4)
        elif phase in report["phases"]:
            table[name] = f"not measured: phase {phase} did not finish (see phases.{phase})"
    q = r.get("vgen_single_cudnn")
    if q:  # optional and CUDA-only: no row when it did not run
        table["vgen_bf16_attention_cudnn_first"] = {**vgen_row(q), **pick(q, "psnr_vs_diffusers_bf16", "psnr_vs_vgen_bf16")}
        if v and q.get("s_per_step") and v.get("s_per_step"):
            table["vgen_bf16_attention_cudnn_first"]["s_per_step_vs_vgen_bf16"] = round(q["s_per_step"] / v["s_per_step"], 4)
    q = r.get("vgen_single_graphs")
    if q:  # optional and CUDA-only: no row when it did not run
        from vgen_gpu.graphs import table_row

        table["vgen_bf16_cuda_graphs"] = {**vgen_row(q), **table_row(q, v)}
    c = r.get("aoti_compile")
    if c:
        table["aoti_compile"] = pick(c, "compile_seconds", "pt2_bytes", "compile_threads", "max_abs_diff_vs_eager", "device")
        if isinstance(table.get("vgen_aoti"), dict):
            table["vgen_aoti"].update(pick(c, "compile_seconds", "pt2_bytes"))
    if r.get("compare"):
        table["psnr"] = r["compare"]
    loop, batch = r.get("diffusers_batch"), r.get("vgen_batch")
    if "diffusers_batch" in report["phases"] or "vgen_batch" in report["phases"]:
        table["batch"] = {
            "diffusers_loop": {**pick(loop, "total_s", "jobs_per_min", "s_per_step", "first_step_s", "vae_decode_s"),
                               "terms": "models loaded, one 1-step call at the shape before the clock",
                               **pick(loop, *PEAKS)} if loop else None,
            "vgen_batch": {"total_s": batch.get("jobs_span_s"), "jobs_per_min": batch.get("jobs_per_min"),
                           "group_s_per_step": batch.get("group_s_per_step"),
                           "group_s_per_job_step": batch["group_s_per_step"] / batch["measured_jobs"]
                           if batch.get("group_s_per_step") else None,
                           **pick(batch, "group_first_step_s", "group_step_batches", "warmup_step_batches", "window_s",
                                  "warmup_decode_in_window_s", "decode_s", "process_s"),
                           "terms": "models loaded, 8 warm-up jobs at the shape before the window (the trace's)",
                           **pick(batch, *PEAKS)} if batch else None}
    le = r.get("vgen_leases")
    if le:
        row = lambda x: pick(x, "jobs_per_min", "window_s", "compute_threads", "concurrent_model_calls_s", "process_s", *PEAKS)
        table["leases"] = {"1": row(le["1"]), "2": row(le["2"]), "throughput_ratio_2_vs_1": le.get("throughput_ratio_2_vs_1"),
                           "peak_memory_ratio_2_vs_1": le.get("peak_memory_ratio_2_vs_1"), "shape": le.get("shape"),
                           "same_files_1_vs_2": le.get("outputs"),
                           "terms": "vgen batch --max-batch 1, one process each; the first 2 jobs to end are the warm-up"}
    elif "vgen_leases" in report["phases"]:
        table["leases"] = "not measured: phase vgen_leases did not finish (see phases.vgen_leases)"
    if r.get("decode_probe"):
        table["decode_probe"] = r["decode_probe"]
    sd = r.get("sdpa_probe")
    if sd:
        table["sdpa"] = {"per_step": sd["per_step"], **pick(sd, "tokens", "compact_rows", "vgen_cross", "default_priority"),
                         "ms": {c: {b: x.get("ms", x["status"]) for b, x in row["backends"].items()}
                                for c, row in sd["cases"].items()},
                         "default_choice": {c: row["default_choice"] for c, row in sd["cases"].items()},
                         "cudnn_first_choice": {c: row["cudnn_first_choice"] for c, row in sd["cases"].items()}}
    if r.get("fp8_linear_probe"):
        table["fp8_linear"] = r["fp8_linear_probe"]["shapes"]
    td = r.get("vgen_tiled_decode")
    if td:
        table["tiled_decode"] = {n: {**pick(x, "shape", "decode", "vae_decode_s", "process_s", *PEAKS)} for n, x in td.items()
                                 if isinstance(x, dict)}
        table["tiled_decode"].update(pick(td, "peak_ratio_720p_on_vs_off"))
    elif "vgen_tiled_decode" in report["phases"]:
        table["tiled_decode"] = "not measured: phase vgen_tiled_decode did not finish (see phases.vgen_tiled_decode)"
    report["table"] = table


def plan(args, selected: set[str]) -> tuple[list[str], dict[str, dict]]:
    """The phases to run in order, and those reused: a prefix of PRODUCTS' phases (once one runs
    again, what the later ones made from it is stale)."""
    names, reused = [n for n in ORDER if n in selected], {}
    for n in names:
        if n in PRODUCTS:
            x = reusable(args, n, selected)
            if x is None:
                break
            reused[n] = x
    return names, reused


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    ap.add_argument("--tiny", action="store_true")
    ap.add_argument("--vgen", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--budget-s", type=float, default=None,
                    help="all phases together (default 450: the device's 8 minutes less the set-up; --tiny: 1200)")
    ap.add_argument("--steps", type=int, default=None, help="steps of the single-job render")
    ap.add_argument("--text-layers", type=int, default=1, help="real size: UMT5-XXL layers (24 = the real depth)")
    ap.add_argument("--only", default="first", help="first (default), compiled, or comma-separated phases")
    ap.add_argument("--phase", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.phase:
        return run_phase(args)

    if args.budget_s is None:
        args.budget_s = 1200.0 if args.tiny else 450.0
    out, work = Path(args.out), Path(args.work)
    out.mkdir(parents=True, exist_ok=True)
    work.mkdir(parents=True, exist_ok=True)
    report_file = out / "gpu_check.json"
    start = time.perf_counter()
    deadline = start + args.budget_s
    selected = expand_only(args.only)
    names, reused = plan(args, selected)
    report = {"started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "device": args.device,
              "tiny": args.tiny, "only": args.only, "budget_s": args.budget_s, "shapes": shapes_of(args), "phases": {}}
    if not args.tiny:
        report["note"] = ("single job: fewer steps than Wan's 50 (the budget); a 50-step render's denoise time is "
                          "s_per_step x 50. Text encoder reduced, see phases.build_model.")
    failed = False
    for name in names:
        if name in reused:
            report["phases"][name] = reused[name]
            print(f"== {name}: reused ({reused[name]['from']}, {reused[name]['made_utc']})", flush=True)
            derive(report)
            write_report(report_file, report)
            continue
        left = deadline - time.perf_counter()
        if name in CUDA_ONLY and args.device != "cuda":
            report["phases"][name] = {"status": "skipped", "error": CUDA_ONLY[name]}
            write_report(report_file, report)
            continue
        if left < 5:
            report["phases"][name] = {"status": "skipped", "error": "out of budget"}
            failed |= name not in OPTIONAL
            write_report(report_file, report)
            continue
        reserved = sum(SHARES[n] for n in names if n not in report["phases"] and n not in reused and n not in OPTIONAL
                       and n != name and (n not in CUDA_ONLY or args.device == "cuda"))  # what will run holds time back
        share = SHARES[name]
        timeout = left if args.tiny else min(left, share + max(0.0, left - share - reserved))
        print(f"== {name} (time box {timeout:.0f} s)", flush=True)
        cmd = [sys.executable, "-m", "vgen_gpu.check", "--phase", name] + sys.argv[1:]
        t0 = time.perf_counter()
        # Its own process group: a phase over its time box goes with the vgen it started.
        (work / f"phase-{name}.json").unlink(missing_ok=True)
        child = subprocess.Popen(cmd, start_new_session=True)
        try:
            rc = child.wait(timeout=timeout)
            status = json.loads((work / f"phase-{name}.json").read_text()) if (work / f"phase-{name}.json").is_file() \
                else {"status": "failed", "error": f"exited {rc} without a result"}
        except subprocess.TimeoutExpired:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()
            status = {"status": "timeout", "error": f"over its time box of {timeout:.0f} s"}
        status.pop("shapes", None)
        status["seconds"] = round(time.perf_counter() - t0, 2)
        report["phases"][name] = status
        failed |= status["status"] != "ok"
        print(f"== {name}: {status['status']} in {status['seconds']} s", flush=True)
        derive(report)
        report["elapsed_s"] = round(time.perf_counter() - start, 2)
        write_report(report_file, report)
    derive(report)
    report["elapsed_s"] = round(time.perf_counter() - start, 2)
    report["ok"] = not failed
    write_report(report_file, report)
    print(json.dumps(report.get("table", {}), indent=1, default=str))
    return 0 if not failed else 1


if __name__ == "__main__":
    sys.exit(main())
