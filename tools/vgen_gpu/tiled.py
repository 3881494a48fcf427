"""The GPU check's tiled-decode phase (issue 30 item 3: "peak memory measured at 480p and 720p"):
the same job rendered from two copies of the bf16 package that differ only in the manifest's
"decode" section (stages/exec/tiled_decode_options.hpp): tiling "off" (one decoder call on the
whole latent) and "on" (overlapping spatial tiles, diffusers' enable_tiling sizes), at 720p
(1280x720, 81 frames) and at 480p (832x480, 81 frames: vgen_single is that size untiled, so
only the tiled run is added). Two steps: the decode is what is measured. The peak is the whole
process's, the denoise's activations included; the "off" and "on" runs differ only in the
decode, so their difference is the decode's.

Per run: the process's peak GPU memory (nvidia-smi above idle, sampled every 100 ms; LibTorch's
caching allocator keeps what it reserved, so this is the largest the process ever held), the
decode's device time from the trace, the whole process, and the mp4's hash (tiles are blended,
so a tiled decode's file differs from a whole one's: the section took effect).
On --device cpu --tiny: the tiny package at a small size with small tiles (peak RSS instead),
so that the suite runs the same code.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

from vgen_gpu.measure import read_trace, run_vgen, summarise_trace
from vgen_gpu.phases import PROMPTS, SEED, vgen_job_flags

# (name, shape, decode section); tiny: tiles of 32 px (4 latent pixels) over a 64x48 frame
REAL_RUNS = [("720p_off", dict(width=1280, height=720, frames=81, steps=2), {"tiling": "off"}),
             ("720p_on", dict(width=1280, height=720, frames=81, steps=2), {"tiling": "on"}),
             ("480p_on", dict(width=832, height=480, frames=81, steps=2), {"tiling": "on"})]
TINY_RUNS = [("small_off", dict(width=64, height=48, frames=5, steps=2), {"tiling": "off"}),
             ("small_on", dict(width=64, height=48, frames=5, steps=2), {"tiling": "on", "tile": 32, "stride": 16})]


def package_with_decode(work: Path, name: str, decode: dict) -> Path:
    """WORK/pkg hard-linked (copied where links fail) into WORK/<name> with the manifest's
    "decode" section replaced; the source package is not touched."""
    from vgen_export.manifest import link_package

    src, dst = work / "pkg", work / name
    link_package(src, dst)
    manifest = json.loads((src / "manifest.json").read_text())
    manifest["decode"] = decode
    (dst / "manifest.json").write_text(json.dumps(manifest, indent=1))
    return dst


def phase_vgen_tiled_decode(args) -> dict:
    work = Path(args.work)
    res = {}
    for name, shape, decode in (TINY_RUNS if args.tiny else REAL_RUNS):
        pkg = package_with_decode(work, f"pkg_decode_{name}", decode)
        out, trace = work / f"vgen_tiled_{name}.mp4", work / f"vgen_tiled_{name}.trace.json"
        out.unlink(missing_ok=True)
        cmd = [args.vgen, "render", PROMPTS[0], "-o", str(out), "--format", "mp4", "--model", str(pkg),
               "--seed", str(SEED), "--max-batch", "1", "--trace", str(trace), "--json", *vgen_job_flags(args, shape)]
        run = run_vgen(args, cmd, f"vgen_tiled_{name}.log")
        run.pop("stdout_json", None)
        summary = summarise_trace(read_trace(trace))
        # the file's hash: tiles are blended, so a tiled decode's frames (and file) differ from a whole one's
        run.update({"shape": shape, "decode": decode, "vae_decode_s": summary.get("vae_decode_s"),
                    "s_per_step": summary.get("s_per_step"), "job_end_to_end_s": summary.get("job_end_to_end_s"),
                    "file_bytes": out.stat().st_size, "file_sha256": hashlib.sha256(out.read_bytes()).hexdigest()})
        res[name] = run
        shutil.rmtree(pkg, ignore_errors=True)
    key = "nvidia_smi_peak_above_idle_mib" if args.device == "cuda" else "peak_rss_mib"
    if not args.tiny and all(res[n].get(key) for n in ("720p_off", "720p_on")):
        res["peak_ratio_720p_on_vs_off"] = round(res["720p_on"][key] / res["720p_off"][key], 3)
    return res
