"""The GPU check's plan and summary table (tools/vgen_gpu/plan.py, check.py) without running a
phase: where the single job with TorchScript's optimiser off runs, and the rows the table
builds from phase results (made-up figures, not measurements)."""
from __future__ import annotations

from vgen_gpu.check import derive
from vgen_gpu.plan import CUDA_ONLY, GROUPS, OPTIONAL, ORDER, SHARES, expand_only


def test_unoptimised_single_job_runs_in_the_compiled_group_right_after_vgen_single_on_cuda_only():
    compiled = GROUPS["compiled"]
    assert compiled.index("vgen_single_unoptimised") == compiled.index("vgen_single") + 1
    assert compiled.index("vgen_single_unoptimised") < compiled.index("aoti_compile")
    assert "vgen_single_unoptimised" not in GROUPS["first"]
    assert SHARES["vgen_single_unoptimised"] == 50
    assert "vgen_single_unoptimised" in CUDA_ONLY and "torchscript_gpu_optimize" in CUDA_ONLY["vgen_single_unoptimised"]
    assert "vgen_single_unoptimised" not in OPTIONAL  # its time is held back from the phases before it
    assert set(ORDER) == set(SHARES) and "vgen_single_unoptimised" in expand_only("compiled")


def single(step_s: list[float], decode: float) -> dict:
    return {"s_per_step": step_s[-1], "first_step_s": step_s[0], "step_s": step_s, "vae_decode_s": decode,
            "job_to_decode_end_s": sum(step_s) + decode + 1.0, "stdout_json": {"seconds": sum(step_s) + decode + 2.0},
            "process_s": 30.0}


def test_table_rows_for_the_single_jobs_carry_the_second_step():
    report = {"phases": {
        "diffusers_single": {"status": "ok", "result": {"s_per_step": 1.0, "first_step_s": 3.0, "step_s": [3.0, 1.5, 1.0],
                                                        "vae_decode_s": 2.0, "end_to_end_s": 9.0}},
        "vgen_single": {"status": "reused", "result": {"bfloat16": single([5.0, 2.0, 1.0], 4.0)}},
        "vgen_single_unoptimised": {"status": "ok", "result": single([3.5, 1.1, 1.0], 3.0)},
        "vgen_single_fusion": {"status": "skipped", "error": "TorchScript fusion is a CUDA setting"}}}
    derive(report)
    t = report["table"]
    assert t["diffusers_bf16"]["second_step_s"] == 1.5
    assert t["vgen_bf16"]["second_step_s"] == 2.0
    row = t["vgen_bf16_torchscript_gpu_unoptimised"]
    assert (row["s_per_step"], row["first_step_s"], row["second_step_s"], row["vae_decode_s"]) == (1.0, 3.5, 1.1, 3.0)
    assert row["end_to_end_s"] == 3.5 + 1.1 + 1.0 + 3.0 + 1.0
    assert "vgen_bf16_torchscript_gpu_fusion" not in t  # skipped: no row


def test_a_skipped_unoptimised_phase_makes_no_row_and_one_step_no_second_step():
    report = {"phases": {"vgen_single": {"status": "ok", "result": {"bfloat16": single([5.0], 4.0)}},
                         "vgen_single_unoptimised": {"status": "skipped", "error": CUDA_ONLY["vgen_single_unoptimised"]}}}
    derive(report)
    assert "vgen_bf16_torchscript_gpu_unoptimised" not in report["table"]
    assert report["table"]["vgen_bf16"]["second_step_s"] is None
