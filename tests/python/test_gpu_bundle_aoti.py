"""The GPU check's second command (`tools/gpu_check.sh --only compiled`, issue 31 item 6) on CPU:
the bf16 transformer compiled ahead of time with AOTInductor for the check's device (here the
CPU: C++ kernels) by vgen_export.wan_compile, and the single job rendered with that package by the
bundled vgen. A file of its own so that `ctest -j2` runs it beside python.gpu_bundle. Measured
cost: 423 s under ctest on the shared 2-core machine at a load average of 2.3-3.9 (2026-11-27
23:45-23:52): the bundle about 3 min, the compile of the tiny transformer 93-145 s."""
from __future__ import annotations

import json

from test_gpu_bundle import BUILD, VGEN, bundle, pytestmark, run_gpu_check  # noqa: F401 - the fixture and skip


def test_compiled_phases_cold_then_warm(bundle, tmp_path):
    work = tmp_path / "work"
    # A fresh machine: nothing in --work, so the model, package and single-job results are made first.
    done, report = run_gpu_check(bundle, work, tmp_path / "cold", "--only", "compiled")
    assert done.returncode == 0, json.dumps(report["phases"], default=str)[-3000:]
    phases = report["phases"]
    assert list(phases) == ["environment", "build_model", "export", "diffusers_single", "vgen_single",
                            "vgen_single_unoptimised", "aoti_compile", "vgen_aoti", "vgen_single_graphs",
                            "diffusers_batch", "vgen_batch", "vgen_leases", "vgen_single_fusion"], list(phases)
    assert phases.pop("vgen_single_fusion")["status"] == "skipped"  # a CUDA setting
    assert phases.pop("vgen_single_unoptimised")["status"] == "skipped"  # a CUDA setting: a CPU has nothing to measure
    assert phases.pop("vgen_single_graphs")["status"] == "skipped"  # CUDA graphs: a CPU captures nothing
    assert "vgen_bf16_cuda_graphs" not in report["table"]
    assert "vgen_bf16_torchscript_gpu_unoptimised" not in report["table"]
    assert all(p["status"] == "ok" for p in phases.values()), phases
    t = report["table"]
    # The export wrote only what this command renders: no fp8 variant, no float32 package.
    assert set(phases["export"]["result"]) == {"bfloat16"}
    assert "transformer_fp8" not in phases["export"]["result"]["bfloat16"]["component_bytes"]
    compiled = phases["aoti_compile"]["result"]
    assert compiled["device"] == "cpu" and compiled["pt2_file"] == "transformer.cpu.pt2" and compiled["pt2_bytes"] > 0
    assert compiled["manifest_entry"]["backend"] == "aoti"
    # Only the method the job calls is compiled, and the manifest says which.
    assert compiled["methods"] in (["forward"], ["forward_compact"]), compiled["methods"]
    assert compiled["manifest_entry"]["methods"] == compiled["methods"]
    row = report["table"]["vgen_aoti"]
    assert row["s_per_step"] > 0 and row["compile_seconds"] > 0 and row["pt2_bytes"] == compiled["pt2_bytes"]
    assert row["s_per_step_vs_vgen_bf16"] > 0 and 0 < row["end_to_end_s"] < row["end_to_end_with_files_s"]
    # Compiled and TorchScript bf16 are the same model: close frames, not identical ones.
    assert row["psnr_vs_vgen_bf16"]["psnr_db"] > 30 and row["psnr_vs_diffusers_bf16"]["psnr_db"] > 30, row
    log = (work / "vgen_frames_aoti.log").read_text()
    assert "model backend:" not in log, log[-2000:]  # no refusal: the .pt2 served

    # The batch on equal terms: diffusers' loop records each job's steps and decode, vgen's 8 jobs
    # are measured after 8 warm-up jobs at the same shape, from the trace.
    loop, batch = t["batch"]["diffusers_loop"], t["batch"]["vgen_batch"]
    assert loop["jobs_per_min"] > 0 and loop["s_per_step"] > 0 and loop["vae_decode_s"] > 0, loop
    per_job = report["phases"]["diffusers_batch"]["result"]["per_job"]
    steps = report["shapes"]["batch"]["steps"]
    assert len(per_job) == 8 and all(len(j["step_s"]) == steps and j["vae_decode_s"] > 0 for j in per_job), per_job
    assert batch["jobs_per_min"] > 0 and batch["group_s_per_step"] > 0, batch
    # The steps after the warm-up are the measured jobs' only, and the warm-up's all came before
    # (a job that reached denoise late joins at a step boundary, which changes the batches, jobs
    # per step, but not their sum).
    assert sum(batch["group_step_batches"]) == 8 * steps, batch
    assert sum(batch["warmup_step_batches"]) == 8 * report["shapes"]["batch"]["warmup_steps"], batch
    assert len(batch["decode_s"]) >= 1 and batch["warmup_decode_in_window_s"] >= 0, batch
    assert 0 < batch["total_s"] <= batch["window_s"] < batch["process_s"], batch
    # Two leases on one device (issue 30 item 6; on CPU threads.per_device 1 vs 2, on a GPU
    # threads.per_gpu): the same 8 jobs after 2 warm-up ones, each run's steady rate from its trace.
    le = t["leases"]
    for n in ("1", "2"):
        assert le[n]["jobs_per_min"] > 0 and le[n]["window_s"] > 0 and le[n]["process_s"] > le[n]["window_s"], le
        assert le[n]["peak_rss_mib"] > 0, le
    assert le["1"]["compute_threads"] == 1 and le["1"]["concurrent_model_calls_s"] == 0, le
    assert 1 <= le["2"]["compute_threads"] <= 2, le
    assert le["throughput_ratio_2_vs_1"] > 0 and le["peak_memory_ratio_2_vs_1"] > 0, le
    runs = report["phases"]["vgen_leases"]["result"]
    assert runs["1"]["threads"] == {"per_device": 1} and runs["2"]["threads"] == {"per_device": 2}, runs
    assert runs["1"]["measured_jobs"] == runs["2"]["measured_jobs"] == 8, runs
    # Same jobs and seeds, one lease or two: the same videos, byte for byte (on a CPU; on a GPU a
    # difference is reported, not refused: kernels there need not be deterministic).
    assert le["same_files_1_vs_2"] == {"files": 10, "identical": 10, "differing": [], "only_in_one": []}, le

    # The machine still warm: the same --work, everything made before is reused, the render runs again.
    done, again = run_gpu_check(bundle, work, tmp_path / "warm", "--only", "compiled")
    assert done.returncode == 0, json.dumps(again["phases"], default=str)[-3000:]
    statuses = {k: v["status"] for k, v in again["phases"].items()}
    assert statuses == {"environment": "ok", "build_model": "reused", "export": "reused", "diffusers_single": "reused",
                        "vgen_single": "reused", "vgen_single_unoptimised": "skipped", "vgen_single_graphs": "skipped",
                        "aoti_compile": "reused",
                        "vgen_aoti": "ok", "diffusers_batch": "ok",
                        "vgen_batch": "ok", "vgen_leases": "ok", "vgen_single_fusion": "skipped"}, statuses
    assert again["table"]["vgen_aoti"]["compile_seconds"] == row["compile_seconds"]
    assert again["table"]["vgen_aoti"]["psnr_vs_vgen_bf16"]["psnr_db"] > 30
