"""vgen_export/aoti.py: what Inductor generates for the CPU.

The kernels of a compiled package must run with the thread count of the thread that calls them
(vgen sets it per device thread, and the self-tuner changes it), not with the exporting
process's torch.get_num_threads(): pinned at 2 they ran a 1-thread call about 4x slower than serial
kernels on the shared 2-core machine (bench/results/aoti_2026-11-27_dynamic_threads.txt)."""

from __future__ import annotations

import json
import zipfile

import torch

from vgen_export.aoti import INPUT_RANGES_KEY, Method, compile_aoti


class Elementwise(torch.nn.Module):
    def forward(self, x):
        return torch.tanh(x) * 2.0 + 1.0


def test_compiled_kernels_follow_the_callers_thread_count(tmp_path):
    saved = torch.get_num_threads()
    torch.set_num_threads(2)  # what the exporter's process had when the kernels were pinned
    try:
        x = torch.randn(64, 4096)  # large enough for Inductor to parallelise the kernel
        rows = torch.export.Dim("rows", min=1, max=1024)
        report = compile_aoti({"forward": Method(Elementwise(), (x,), ({0: rows},), [((x[:3],), Elementwise()(x[:3]))])},
                              tmp_path / "e.cpu.pt2")
    finally:
        torch.set_num_threads(saved)
    kernels = report["kernels"]["forward"]
    assert kernels["fused_kernels"] >= 1
    sources = ""
    with zipfile.ZipFile(tmp_path / "e.cpu.pt2") as z:
        sources = "".join(z.read(n).decode(errors="replace") for n in z.namelist() if n.endswith(".kernel.cpp"))
    # the kernel is parallel (so the check below could fail) and no region fixes its thread count
    assert "#pragma omp parallel" in sources
    assert "num_threads(" not in sources
    assert kernels["fixed_thread_regions"] == 0
    assert all(c["max_abs_diff"] <= c["tolerance"] for c in report["checks"])
    # the compiled code checks no shape: the package records the input's ranges for the loader
    # (rows 1..1024 as declared, 4096 features as exported)
    with zipfile.ZipFile(tmp_path / "e.cpu.pt2") as z:
        meta = [json.loads(z.read(n)) for n in z.namelist() if n.endswith("_metadata.json")]
    assert meta and all(m[INPUT_RANGES_KEY] == "0:1:1024,1:4096:4096" for m in meta)
