"""The GPU check's plan and summary table (tools/vgen_gpu/plan.py, check.py) without running a
phase: where the single job with TorchScript's optimiser off, the attention probe and the
cuDNN-first render run, and the rows the table builds from phase results (made-up figures, not
measurements)."""
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


def test_attention_probe_and_cudnn_render_run_in_the_first_group_before_the_step_profile():
    first, compiled = GROUPS["first"], GROUPS["compiled"]
    assert "sdpa_probe" in first and first.index("sdpa_probe") < first.index("step_profile")
    assert first.index("sdpa_probe") > first.index("vgen_single")  # its shares read vgen_single's s/step
    assert first.index("sdpa_probe") > first.index("diffusers_single")
    assert "sdpa_probe" not in OPTIONAL and "sdpa_probe" not in CUDA_ONLY and SHARES["sdpa_probe"] == 30
    # cuDNN first: right after the probe, before what the first command's budget may cut (fp8, the
    # tiled decode); optional, CUDA only; not run again by the second command
    assert first.index("sdpa_probe") < first.index("vgen_single_cudnn") < first.index("step_profile")
    assert first.index("vgen_single_cudnn") < first.index("vgen_fp8") and first[-1] == "vgen_tiled_decode"
    assert "vgen_single_cudnn" not in compiled and "vgen_single_cudnn" in OPTIONAL and SHARES["vgen_single_cudnn"] == 50
    assert "cuDNN" in CUDA_ONLY["vgen_single_cudnn"]
    assert expand_only("sdpa_probe") == {"sdpa_probe"} and "vgen_single_cudnn" in expand_only("first")


def test_the_cudnn_render_and_the_attention_probe_make_table_rows():
    probe = {"tokens": 32760, "compact_rows": 21, "vgen_cross": "cross_padded", "default_priority": ["FLASH_ATTENTION"],
             "per_step": {"FLASH_ATTENTION": {"step_ms_512_rows": 900.0}},
             "cases": {"self": {"default_choice": "FLASH_ATTENTION", "cudnn_first_choice": "CUDNN_ATTENTION",
                                "backends": {"FLASH_ATTENTION": {"status": "ok", "ms": 29.0},
                                             "MATH": {"status": "skipped", "reason": "memory"}}}}}
    report = {"phases": {"vgen_single": {"status": "ok", "result": {"bfloat16": single([5.0, 2.0, 1.25], 4.0)}},
                         "vgen_single_cudnn": {"status": "ok", "result": {**single([4.0, 1.5, 1.0], 4.0),
                                                                           "psnr_vs_vgen_bf16": {"psnr_db": 40.0}}},
                         "sdpa_probe": {"status": "ok", "result": probe}}}
    derive(report)
    t = report["table"]
    assert t["vgen_bf16_attention_cudnn_first"]["s_per_step_vs_vgen_bf16"] == 0.8
    assert t["vgen_bf16_attention_cudnn_first"]["psnr_vs_vgen_bf16"] == {"psnr_db": 40.0}
    assert t["sdpa"]["ms"] == {"self": {"FLASH_ATTENTION": 29.0, "MATH": "skipped"}}
    assert t["sdpa"]["cudnn_first_choice"] == {"self": "CUDNN_ATTENTION"} and t["sdpa"]["vgen_cross"] == "cross_padded"
    skipped = {"phases": {"vgen_single_cudnn": {"status": "skipped", "error": CUDA_ONLY["vgen_single_cudnn"]}}}
    derive(skipped)
    assert "vgen_bf16_attention_cudnn_first" not in skipped["table"]


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


def test_attention_per_step_is_layers_times_self_plus_cross_for_the_cross_case_each_side_runs():
    from vgen_gpu.probe_sdpa import projection

    def case(default, **ms):
        return {"default_choice": default, "backends": {b: ({"status": "ok", "ms": ms[b]} if b in ms else
                                                            {"status": "refused"}) for b in
                                                        ("FLASH_ATTENTION", "EFFICIENT_ATTENTION", "CUDNN_ATTENTION", "MATH")}}

    cases = {"self": case("FLASH_ATTENTION", FLASH_ATTENTION=20.0, EFFICIENT_ATTENTION=30.0, CUDNN_ATTENTION=15.0),
             "cross_padded": case("FLASH_ATTENTION", FLASH_ATTENTION=2.0, EFFICIENT_ATTENTION=3.0, CUDNN_ATTENTION=1.0,
                                  MATH=8.0),
             "cross_compact": case("EFFICIENT_ATTENTION", EFFICIENT_ATTENTION=0.5, CUDNN_ATTENTION=0.25)}
    steps = {"vgen_single": 1.0, "diffusers_single": 2.0}
    p = projection({"layers": 30}, cases, steps, "cross_compact")
    assert p["CUDNN_ATTENTION"] == {"step_ms_512_rows": 480.0, "step_ms_compact": 457.5,
                                    "share_of_vgen_single_step": 0.4575, "share_of_diffusers_single_step": 0.24}
    assert p["FLASH_ATTENTION"]["step_ms_compact"] is None and "share_of_vgen_single_step" not in p["FLASH_ATTENTION"]
    assert p["MATH"] == {"step_ms_512_rows": None, "step_ms_compact": None}  # self skipped or refused: no step figure
    assert p["default"]["step_ms_compact"] == 30 * (20.0 + 0.5)  # flash for self, efficient for the masked cross
    padded = projection({"layers": 30}, cases, {"vgen_single": 1.0}, "cross_padded")
    assert padded["FLASH_ATTENTION"] == {"step_ms_512_rows": 660.0, "step_ms_compact": None, "share_of_vgen_single_step": 0.66}


def test_cuda_graphs_single_job_runs_in_the_compiled_group_right_after_the_unoptimised_one_on_cuda_only():
    compiled = GROUPS["compiled"]
    # best effort after the compiled render: the compile (issue 31's figure) keeps its time
    assert compiled.index("vgen_single_graphs") == compiled.index("vgen_aoti") + 1
    assert "vgen_single_graphs" not in GROUPS["first"]
    assert "vgen_single_graphs" in OPTIONAL and SHARES["vgen_single_graphs"] == 130
    assert "vgen_single_graphs" in CUDA_ONLY and "cuda_graphs" in CUDA_ONLY["vgen_single_graphs"]
    assert set(ORDER) == set(SHARES) and "vgen_single_graphs" in expand_only("compiled")
    assert expand_only("vgen_single_graphs") == {"vgen_single_graphs"}


def test_the_cuda_graphs_render_makes_a_row_of_the_steps_after_the_capture():
    steps = [5.0, 2.0, 1.3, 1.6, 1.1, 1.0, 1.2]  # warm-up 3, capture (step 4), then replays
    graphed = {**single(steps, 4.0), "s_per_step_after_capture": 1.1, "plain_s_per_step_same_steps": 1.25,
               "speedup_same_steps": 1.1364, "capture_step_s": 1.6, "replayed_steps": 3,
               "psnr_vs_vgen_bf16": {"psnr_db": 45.0}, "graph_log": ["cuda graphs: captured transformer.pt forward"],
               "nvidia_smi_peak_above_idle_mib": 30000,
               "small": {"graphs": {"shape": {"width": 480}, "s_per_step_after_capture": 0.08, "speedup_same_steps": 1.2,
                                    "psnr_vs_plain": {"psnr_db": 50.0}},
                         "plain": {"nvidia_smi_peak_above_idle_mib": 9000}}}
    plain = {**single([5.0, 2.0, 1.3, 1.2, 1.3, 1.2, 1.3], 4.0), "nvidia_smi_peak_above_idle_mib": 28000}
    report = {"phases": {"vgen_single": {"status": "ok", "result": {"bfloat16": plain}},
                         "vgen_single_graphs": {"status": "ok", "result": graphed}}}
    derive(report)
    row = report["table"]["vgen_bf16_cuda_graphs"]
    assert row["s_per_step_after_capture"] == 1.1 and row["capture_step_s"] == 1.6 and row["replayed_steps"] == 3
    assert row["peak_mib_vs_vgen_bf16"] == 2000 and row["psnr_vs_vgen_bf16"] == {"psnr_db": 45.0}
    assert row["small"]["speedup_same_steps"] == 1.2 and row["small"]["plain_peak_above_idle_mib"] == 9000
    assert row["graph_log"] == ["cuda graphs: captured transformer.pt forward"]
    skipped = {"phases": {"vgen_single_graphs": {"status": "skipped", "error": CUDA_ONLY["vgen_single_graphs"]}}}
    derive(skipped)
    assert "vgen_bf16_cuda_graphs" not in skipped["table"]


def test_graphs_after_capture_takes_the_replayed_steps_only():
    from vgen_gpu.graphs import after_capture, compare

    assert after_capture([9.0, 2.0, 1.5, 3.0, 1.0, 1.2, 1.1]) == 1.1  # steps 5..7
    assert after_capture([9.0, 2.0, 1.5, 3.0]) is None  # no step replayed
    c = compare({"step_s": [9.0, 2.0, 1.5, 3.0, 1.0, 1.0]}, {"step_s": [9.0, 2.0, 1.5, 1.5, 1.5, 1.5]})
    assert c == {"s_per_step_after_capture": 1.0, "plain_s_per_step_same_steps": 1.5, "speedup_same_steps": 1.5,
                 "capture_step_s": 3.0, "replayed_steps": 2}
