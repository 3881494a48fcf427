"""The GPU check's compiled phases (issue 31 item 6), run by the second command of a session
(`--only compiled`, tools/vgen_gpu/check.py): the bf16 transformer compiled ahead of time with
AOTInductor for the check's device (on it: CUDA kernels on a GPU, C++ on --device cpu), and the
single job rendered with that package.

aoti_compile: vgen_export.wan_compile.add_compiled_transformer copies WORK/pkg (hard links) to
WORK/pkg_aoti with transformer.<device>.pt2 and its manifest entry (compiled.<device>); reports
compile seconds, the .pt2's size, the compiled methods' largest difference from eager.
vgen_aoti: the single job of vgen_single on pkg_aoti: s/step against vgen bf16 TorchScript
(vgen_single, the first command's when the work directory is reused), the job to the end of its
decode, PSNR against diffusers bf16 and vgen bf16; which backend served the transformer is read
from vgen's log (a refused .pt2 falls back on TorchScript and says so: the phase then fails).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from vgen_gpu.measure import psnr, read_pngs
from vgen_gpu.phases import render_vgen


def job_method(pkg: Path) -> str:
    """The transformer method the check's job calls (stages/families/wan/wan_family.cpp): the
    compact one when the text encoder's output is masked and the transformer compacts it. Only
    that one is compiled: the compile is the longest part of the phase, and a job calls one."""
    m = json.loads((pkg / "manifest.json").read_text())
    compact = (m.get("transformer", {}).get("compact_context") and m.get("text_encoder", {}).get("output_masked")
               and "forward_compact" in m["components"]["transformer"].get("methods", []))
    return "forward_compact" if compact else "forward"


def phase_aoti_compile(args) -> dict:
    """In a child Python of its own so that Inductor's compile workers go with it on a time-out."""
    work = Path(args.work)
    threads = str(os.cpu_count() or 1) if args.device == "cuda" else os.environ.get("VGEN_AOTI_THREADS", "1")
    method = job_method(work / "pkg")
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "vgen_export.wan_compile", "--diffusers", str(work / "diffusers"),
                           "--package", str(work / "pkg"), "--out", str(work / "pkg_aoti"), "--device", args.device,
                           "--methods", method],
                          capture_output=True, text=True, env={**os.environ, "VGEN_AOTI_THREADS": threads})
    if done.returncode != 0:
        raise RuntimeError(f"vgen_export.wan_compile exited {done.returncode}: {(done.stdout + done.stderr)[-2500:]}")
    manifest = json.loads((work / "pkg_aoti" / "manifest.json").read_text())
    entry = manifest["components"]["transformer"]["compiled"][args.device]
    pt2 = work / "pkg_aoti" / entry["file"]
    printed = json.loads(done.stdout.strip().splitlines()[-1])
    return {"seconds": round(time.perf_counter() - t0, 2), "compile_seconds": printed["compile_seconds"],
            "pt2_bytes": pt2.stat().st_size, "pt2_file": entry["file"], "compile_threads": int(threads),
            "torch": printed["torch"], "device": printed["device"], "max_abs_diff_vs_eager": printed["max_abs_diff"],
            "methods": [method],
            "manifest_entry": entry}


def phase_vgen_aoti(args) -> dict:
    import numpy as np

    work = Path(args.work)
    res = render_vgen(args, "pkg_aoti", "vgen_frames_aoti")
    log = (work / "vgen_frames_aoti.log").read_text(errors="replace")
    # stages/model/component_backends.cpp logs a refused .pt2 (or method) as "model backend: component ..."
    refused = [l for l in log.splitlines() if "model backend:" in l]
    if refused:
        raise RuntimeError(f"vgen did not run the compiled transformer: {refused[:3]}")
    ours = read_pngs(work / "vgen_frames_aoti")
    res["psnr_vs_diffusers_bf16"] = psnr(ours, np.load(work / "diffusers_frames.npy"))
    res["psnr_vs_vgen_bf16"] = psnr(ours, read_pngs(work / "vgen_frames"))
    return res
