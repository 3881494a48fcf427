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
