"""Which phases the GPU check runs (tools/vgen_gpu/check.py): their order, budget shares, the two
commands' groups and what the second command may reuse from the first one's work directory."""

from __future__ import annotations

# (budget share in seconds) per phase; the real ones planned for an H100/H200. H200 2026-11-28
# run 3 (bench/results/gpu_check_h200_2026-11-28_run3.json): export 100 s, each render 33-48 s,
# diffusers_batch 67 s, vgen_batch 72 s, vgen_fp8 45 s, vgen_leases 30 s; the first command took
# 464 s of its 540. vgen_tiled_decode (three renders at 720p/480p, 2 steps): an estimate.
# vgen_single_unoptimised (vgen_single's render with model_backend.torchscript_gpu_optimize
# false): an estimate, not yet run on a GPU. sdpa_probe (a few attention calls per backend, no
# model) and vgen_single_cudnn (vgen_single's render with cuDNN's attention first): estimates, not
# yet run on a GPU. vgen_single_graphs (vgen_single's render with model_backend.cuda_graphs, then a
# small shape both ways: three vgen processes, each about a vgen_single render's load and decode at
# most): an estimate, not yet run on a GPU.
SHARES = {"environment": 30, "build_model": 90, "export": 180, "diffusers_single": 110, "vgen_single": 130,
          "compare": 30, "diffusers_batch": 80, "vgen_batch": 100, "vgen_fp8": 60, "vgen_leases": 70,
          "aoti_compile": 300, "vgen_aoti": 70, "vgen_single_fusion": 50, "vgen_tiled_decode": 110,
          "step_profile": 40, "vgen_single_unoptimised": 50, "fp8_linear_probe": 40,
          "decode_probe": 60, "sdpa_probe": 30, "vgen_single_cudnn": 50, "vgen_single_graphs": 130}
# The first command measures one job every way (and the diagnostics of where its time goes), in
# the order of what the next decision needs: the job both ways, attention per kernel and a render
# with cuDNN's attention first (attention is 71 % of a step's FLOPs), the step's kernel split, the
# decode, then fp8 (measured in run 3, bounded by arithmetic) and the tiled decode's memory (measured
# on CPU too), which its budget may cut. The second compiles for the device, renders with it, then
# runs what was measured before and changes only with the step or decode speed (the batch, two
# leases, fusion), best effort, with what is left.
GROUPS = {"first": ["environment", "build_model", "export", "diffusers_single", "vgen_single", "compare",
                    "sdpa_probe", "vgen_single_cudnn", "step_profile", "decode_probe", "fp8_linear_probe",
                    "vgen_fp8", "vgen_tiled_decode"],
          "compiled": ["environment", "build_model", "export", "diffusers_single", "vgen_single",
                       "vgen_single_unoptimised", "aoti_compile", "vgen_aoti", "vgen_single_graphs", "diffusers_batch",
                       "vgen_batch", "vgen_leases", "vgen_single_fusion"]}
ORDER = list(dict.fromkeys(GROUPS["first"] + GROUPS["compiled"]))
# Best effort: no time is held back for them from the phases before (they get what is left).
OPTIONAL = {"diffusers_batch", "vgen_batch", "vgen_leases", "vgen_single_fusion", "vgen_single_cudnn",
            "vgen_single_graphs"}
# vgen_single_unoptimised: on a CPU the once-per-job modules already run as exported and the
# setting changes nothing else, so it would measure nothing.
CUDA_ONLY = {"vgen_single_fusion": "TorchScript fusion is a CUDA setting",
             "vgen_single_unoptimised": "model_backend.torchscript_gpu_optimize is a CUDA setting (on a CPU the "
                                        "once-per-job modules already run as exported)",
             "vgen_single_cudnn": "model_backend.attention's cuDNN backend is a CUDA one (on a CPU the order leaves "
                                  "flash for CPU or math, as by default)",
             "vgen_single_graphs": "model_backend.cuda_graphs captures CUDA graphs (CUDA only: on a CPU every call "
                                   "runs as usual)"}
# What a phase leaves in WORK for the later ones: with its phase file (status ok, same shapes)
# the second command reuses it instead of running it again.
PRODUCTS = {"build_model": "diffusers/model_index.json", "export": "pkg/manifest.json",
            "diffusers_single": "diffusers_frames.npy", "vgen_single": "vgen_frames", "aoti_compile": "pkg_aoti/manifest.json"}


def expand_only(only: str) -> set[str]:
    names = set()
    for n in filter(None, (only or "first").split(",")):
        if n in GROUPS:
            names |= set(GROUPS[n])
        elif n in SHARES:
            names.add(n)
        else:
            raise SystemExit(f"--only: unknown phase or group '{n}' (groups: {', '.join(GROUPS)}; phases: {', '.join(ORDER)})")
    return names
