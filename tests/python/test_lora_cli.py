"""LoRA through the front ends (issue: LoRA per request): a LoRA job renders and differs from
the base; bad LoRAs (unknown name, a path outside lora_dir, keys that match no layer, a shape
mismatch, a truncated file) exit 2 on the CLI and answer 400 on the service, naming the file
and the first bad key, with nothing written."""
from __future__ import annotations

import subprocess

import pytest
import torch
from safetensors.torch import save_file

from test_cli_serve import VGEN, Server, package  # noqa: F401  (package is a fixture)

SIZE = ["--width", "32", "--height", "32", "--frames", "5", "--steps", "2"]
DIM = 24  # the tiny transformer's hidden size (2 heads x 12)


def lora(path, keys=None, shape_a=(4, DIM), shape_b=(DIM, 4), seed=0):
    gen = torch.Generator().manual_seed(seed)
    keys = keys or ["transformer.blocks.0.attn1.to_q", "transformer.blocks.1.attn2.to_v"]
    tensors = {}
    for k in keys:
        tensors[f"{k}.lora_A.weight"] = torch.randn(shape_a, generator=gen) * 0.5
        tensors[f"{k}.lora_B.weight"] = torch.randn(shape_b, generator=gen) * 0.5
    save_file(tensors, str(path))


@pytest.fixture
def loras(tmp_path):
    d = tmp_path / "loras"
    d.mkdir()
    lora(d / "style.safetensors")
    lora(d / "nomatch.safetensors", keys=["transformer.blocks.0.attn9.to_zz"])
    lora(d / "badshape.safetensors", shape_a=(4, DIM + 1))
    good = (d / "style.safetensors").read_bytes()
    (d / "truncated.safetensors").write_bytes(good[: len(good) // 2])
    (tmp_path / "outside.safetensors").write_bytes(good)
    return d


def render(package, out, *args):
    cmd = [str(VGEN), "render", "a red circle moving left", "-o", str(out), "--model", str(package), *SIZE, *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300)


def test_a_lora_job_renders_and_changes_the_video(package, loras, tmp_path):
    base = render(package, tmp_path / "base.mp4")
    assert base.returncode == 0, base.stderr
    styled = render(package, tmp_path / "styled.mp4", "--lora-dir", str(loras), "--lora", "style:0.8")
    assert styled.returncode == 0, styled.stderr
    assert (tmp_path / "styled.mp4").read_bytes() != (tmp_path / "base.mp4").read_bytes()


@pytest.mark.parametrize("name, expect", [
    ("missing", "missing"),
    ("../outside", "outside"),
    ("nomatch", "attn9"),
    ("badshape", "shape"),
    ("truncated", "truncated"),
])
def test_bad_loras_exit_2_naming_the_file_and_key(package, loras, tmp_path, name, expect):
    out = tmp_path / "x.mp4"
    r = render(package, out, "--lora-dir", str(loras), "--lora", name)
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert expect in r.stderr, r.stderr
    assert not out.exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".x.mp4")]  # no temporary either


def test_the_service_answers_400_for_bad_loras(package, loras, tmp_path):
    with Server(package, tmp_path / "out", "--lora-dir", str(loras)) as server:
        for name, expect in [("missing", "missing"), ("nomatch", "attn9"), ("truncated", "truncated")]:
            status, _, body = server.json("POST", "/v1/jobs", {"prompt": "p", "width": 32, "height": 32, "frames": 5,
                                                                "steps": 2, "loras": [{"name": name}]})
            assert status == 400, (name, status, body)
            assert expect in body["error"]["message"], body
        status, _, body = server.json("POST", "/v1/jobs", {"prompt": "p", "width": 32, "height": 32, "frames": 5,
                                                            "steps": 2, "loras": [{"name": "style", "scale": 0.5}]})
        assert status == 202, body
        assert server.wait_status(body["id"], {"done", "failed"}, timeout=300)["status"] == "done"


# Few-step sampling (issue 22): a LoRA's header may suggest steps / guidance / shift.
NO_STEPS = ["--width", "32", "--height", "32", "--frames", "5"]


def render_json(package, out, *args):
    cmd = [str(VGEN), "render", "a red circle moving left", "-o", str(out), "--model", str(package), "--json", *NO_STEPS,
           *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300)


def suggesting(path, **metadata):
    gen = torch.Generator().manual_seed(5)
    k = "transformer.blocks.0.attn1.to_q"
    save_file({f"{k}.lora_A.weight": torch.randn(4, DIM, generator=gen) * 0.5,
               f"{k}.lora_B.weight": torch.randn(DIM, 4, generator=gen) * 0.5},
              str(path), metadata={f"vgen.{key}": str(value) for key, value in metadata.items()})


def test_a_loras_suggestions_apply_unless_the_job_sets_the_field(package, tmp_path):
    import json
    d = tmp_path / "loras"
    d.mkdir()
    suggesting(d / "fast.safetensors", steps=1, guidance=1, shift=6)
    suggesting(d / "fast2.safetensors", steps=2)
    r = render_json(package, tmp_path / "a.mp4", "--lora-dir", str(d), "--lora", "fast")
    assert r.returncode == 0, r.stderr
    spec = json.loads(r.stdout)["spec"]  # the result's echo shows what the job ran with
    assert (spec["steps"], spec["guidance"], spec["shift"]) == (1, 1.0, 6.0)
    # The job's own flags win, field by field.
    r = render_json(package, tmp_path / "b.mp4", "--lora-dir", str(d), "--lora", "fast", "--steps", "2", "--guidance", "3")
    assert r.returncode == 0, r.stderr
    spec = json.loads(r.stdout)["spec"]
    assert (spec["steps"], spec["guidance"], spec["shift"]) == (2, 3.0, 6.0)
    # Without a LoRA: the package's defaults, no shift field (the scheduler's own).
    r = render_json(package, tmp_path / "c.mp4", "--steps", "1")
    assert r.returncode == 0, r.stderr
    spec = json.loads(r.stdout)["spec"]
    assert spec["guidance"] > 1 and "shift" not in spec
    # Two LoRAs suggesting different steps: exit 2 naming both, unless the job gives --steps.
    out = tmp_path / "d.mp4"
    r = render_json(package, out, "--lora-dir", str(d), "--lora", "fast", "--lora", "fast2")
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert "'fast' suggests steps 1 and 'fast2' suggests 2" in r.stderr, r.stderr
    assert not out.exists()
    r = render_json(package, out, "--lora-dir", str(d), "--lora", "fast", "--lora", "fast2", "--steps", "1")
    assert r.returncode == 0, r.stderr


def test_a_bad_suggestion_exits_2_naming_the_key(package, tmp_path):
    d = tmp_path / "loras"
    d.mkdir()
    suggesting(d / "bad.safetensors", steps="four")
    r = render_json(package, tmp_path / "x.mp4", "--lora-dir", str(d), "--lora", "bad")
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert "__metadata__.vgen.steps" in r.stderr and "bad.safetensors" in r.stderr, r.stderr


def metric(text, name, cache):
    import re
    m = re.search(rf'^{name}\{{cache="{cache}"\}} (\S+)$', text, re.M)
    return float(m.group(1)) if m else None


def test_metrics_count_lora_merges_hits_and_bytes(package, loras, tmp_path):
    with Server(package, tmp_path / "out", "--lora-dir", str(loras)) as server:
        for seed in (1, 2):  # one after the other: the second finds the first's merged variant
            status, _, body = server.json("POST", "/v1/jobs", {"prompt": "p", "width": 32, "height": 32, "frames": 5,
                                                                "steps": 1, "seed": seed,
                                                                "loras": [{"name": "style", "scale": 0.5}]})
            assert status == 202, body
            assert server.wait_status(body["id"], {"done", "failed"}, timeout=300)["status"] == "done"
        status, _, text = server.request("GET", "/metrics")
        assert status == 200
        text = text.decode()
        assert metric(text, "vgen_cache_misses_total", "lora") == 1, text  # one merge
        assert metric(text, "vgen_cache_hits_total", "lora") == 1
        assert metric(text, "vgen_cache_evictions_total", "lora") == 0
        assert metric(text, "vgen_cache_entries", "lora") == 1
        # style touches blocks.0.attn1.to_q and blocks.1.attn2.to_v: two DIM x DIM float32 weights.
        assert metric(text, "vgen_cache_bytes", "lora") == 2 * DIM * DIM * 4
