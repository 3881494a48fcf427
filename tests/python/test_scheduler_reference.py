"""Sanity checks for tools/reference/scheduler_reference.py (vgen_reference.scheduler_reference,
the C++ parity test's oracle)."""
import json
import math

from vgen_reference import scheduler_reference


def test_reference_file_is_complete_and_finite(tmp_path):
    out = tmp_path / "ref.json"
    assert scheduler_reference.main(["--out", str(out)]) == 0  # (its speed is no test: ctest's timeout bounds a hang)
    doc = json.loads(out.read_text())
    cases = doc["cases"]
    assert {c["scheduler"] for c in cases} == {
        "FlowMatchEulerDiscreteScheduler", "UniPCMultistepScheduler", "DDIMScheduler",
        "EulerDiscreteScheduler"}
    wan = next(c for c in cases if c["name"] == "unipc_wan480")
    assert wan["params"]["use_flow_sigmas"] and wan["params"]["flow_shift"] == 3.0
    for c in cases:
        n = c["num_inference_steps"]
        size = math.prod(c["sample_shape"])
        assert len(c["timesteps"]) == n and len(c["model_outputs"]) == n
        assert not c["sigmas"] or len(c["sigmas"]) == n + 1
        for dtype in ("float64", "float32"):
            steps = c["results"][dtype]["steps"]
            assert len(steps) == n and all(len(s) == size for s in steps)
            assert all(math.isfinite(v) for s in steps for v in s), (c["name"], dtype)


def test_reference_is_deterministic(tmp_path):
    module = scheduler_reference
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    module.main(["--out", str(a)])
    module.main(["--out", str(b)])
    assert a.read_text() == b.read_text()
