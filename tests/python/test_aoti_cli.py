"""A package exported with `--compile aoti` renders the frames of its TorchScript twin through
`vgen render`, `vgen batch` and `vgen serve` (issue 31).

The package is the `wan_aoti_parity` fixture's (stages.wan_aoti_parity_reference: the tiny Wan of
the parity tests, float32, its transformer, text encoder and VAE decoder also compiled for the
CPU). Its twin is the same files with the manifest's `compiled` entries taken out, so TorchScript
serves every component. The C++ parity test (stages.wan_aoti) holds the compiled package to
diffusers within 1e-4 on the latents; here the three front ends are held to each other on the
8-bit frames. The two backends' frames differ by about 1e-7 (stages.wan_aoti), which flips a
value across an 8-bit rounding boundary about once in 10^4 values, so the PNG comparisons allow
one level and count the values that differ; the served mp4s are compared after decoding, where
the encoder may spread such a flip over its block."""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from test_cli_serve import Server, probe
from vgen_export import manifest as mf

ROOT = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("VGEN_BUILD_DIR", ROOT / "build"))
VGEN = BUILD / "bin" / "vgen"
FIXTURE = Path(os.environ.get("VGEN_WAN_AOTI_PARITY_DIR", BUILD / "tests" / "wan_aoti_parity"))
pytestmark = [pytest.mark.skipif(not VGEN.exists(), reason="build/bin/vgen not built"),
              pytest.mark.skipif(not (FIXTURE / "parity.json").is_file(),
                                 reason="the wan_aoti_parity fixture (stages.wan_aoti_parity_reference) has not run")]
SIZE = {"width": 48, "height": 32, "frames": 9, "steps": 3}
FLAGS = [f"--{k}={v}" for k, v in SIZE.items()]
PROMPTS = ["a red circle moving left", "a blue square moving up"]


@pytest.fixture(scope="module")
def packages(tmp_path_factory):
    compiled = Path(json.loads((FIXTURE / "parity.json").read_text())["package"])
    twin = tmp_path_factory.mktemp("aoti-cli") / "twin"
    mf.link_package(compiled, twin)
    manifest = mf.read_manifest(compiled, verify_files=False)
    stripped = [name for name, c in manifest["components"].items() if c.pop("compiled", None)]
    assert set(stripped) >= {"transformer", "vae_decoder"}, stripped
    mf.write_manifest(twin, manifest)
    return {"aoti": compiled, "torchscript": twin}


@pytest.fixture(scope="module")
def config(tmp_path_factory):
    # One fixed thread split for every run: float32's last bits follow the intra-op thread count,
    # and the runs compared here must differ only in their backend.
    path = tmp_path_factory.mktemp("aoti-cli-config") / "threads.json"
    path.write_text(json.dumps({"threads": {"per_device": 1, "intra_op": 1}}))
    return path


def run(*args, timeout=600):
    r = subprocess.run([str(VGEN), *map(str, args)], capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, r.stderr[-3000:]
    return r


def frames(directory: Path) -> np.ndarray:
    files = sorted(directory.glob("*.png"))
    assert files, f"no frames in {directory}"
    return np.stack([np.asarray(Image.open(f), dtype=np.int16) for f in files])


def same_frames(a: np.ndarray, b: np.ndarray):
    assert a.shape == b.shape, (a.shape, b.shape)
    diff = np.abs(a - b)
    assert diff.max() <= 1, f"{int(diff.max())} levels apart"
    assert np.count_nonzero(diff) <= max(2, a.size // 1000), f"{np.count_nonzero(diff)} of {a.size} values differ"


def test_each_package_is_served_by_its_backend(packages):
    for backend, package in packages.items():
        out = run("devices", "--model", package).stdout
        served = {line.split("\t")[0]: line for line in out.splitlines() if "\tbackend=" in line}
        for component in ("text_encoder", "transformer", "vae_decoder"):
            assert f"\tbackend={backend}\t" in served.get(component, ""), out


def test_render_gives_the_same_frames_on_both_backends(packages, config, tmp_path):
    got = {}
    for backend, package in packages.items():
        run("--log-level", "info", "render", PROMPTS[0], "-o", tmp_path / f"{backend}.png", "--model", package,
            "--seed", 3, "--format", "png", "--config", config, *FLAGS)
        got[backend] = frames(tmp_path / f"{backend}.png")
    assert got["aoti"].shape == (SIZE["frames"], SIZE["height"], SIZE["width"], 3)
    same_frames(got["aoti"], got["torchscript"])


def test_batch_gives_the_same_frames_on_both_backends_and_as_render(packages, config, tmp_path):
    jobs = tmp_path / "jobs.jsonl"
    jobs.write_text("".join(json.dumps({"prompt": p, "name": f"job{i}", "seed": 3 + i}) + "\n" for i, p in enumerate(PROMPTS)))
    got = {}
    for backend, package in packages.items():
        out = tmp_path / backend
        # both jobs in one denoiser call: the compiled transformer's batch rows are dynamic
        summary = json.loads(run("batch", jobs, "-o", out, "--model", package, "--format", "png", "--max-batch", 2,
                                 "--config", config, "--json", *FLAGS).stdout)
        assert [j["status"] for j in summary["jobs"]] == ["done", "done"], summary
        got[backend] = [frames(next(p for p in out.iterdir() if p.name.startswith(f"job{i}"))) for i in range(len(PROMPTS))]
    for a, b in zip(got["aoti"], got["torchscript"]):
        same_frames(a, b)
    # the first job batched equals it rendered alone (same seed and prompt)
    run("render", PROMPTS[0], "-o", tmp_path / "solo.png", "--model", packages["aoti"], "--seed", 3, "--format", "png",
        "--config", config, *FLAGS)
    same_frames(got["aoti"][0], frames(tmp_path / "solo.png"))


def decoded(path: Path) -> np.ndarray:
    raw = subprocess.run(["ffmpeg", "-v", "error", "-i", str(path), "-f", "rawvideo", "-pix_fmt", "rgb24", "-"],
                         capture_output=True, check=True, timeout=60).stdout
    return np.frombuffer(raw, dtype=np.uint8).reshape(-1, SIZE["height"], SIZE["width"], 3).astype(np.int16)


def test_serve_gives_the_same_video_on_both_backends(packages, config, tmp_path):
    videos = {}
    for backend, package in packages.items():
        with Server(package, tmp_path / backend, "--config", str(config)) as server:
            status, _, body = server.json("POST", "/v1/jobs", {"prompt": PROMPTS[0], "name": "clip", "seed": 3, **SIZE})
            assert status == 202, body
            final = server.wait_status(body["id"], ("done", "failed", "cancelled"), timeout=300)
            assert final["status"] == "done", final
            videos[backend] = tmp_path / backend / "clip.mp4"
            assert server.stop() == 0
    for path in videos.values():
        s = probe(path)
        assert (s["codec_name"], s["width"], s["height"], int(s["nb_read_frames"])) == \
            ("h264", SIZE["width"], SIZE["height"], SIZE["frames"])
    a, b = decoded(videos["aoti"]), decoded(videos["torchscript"])
    assert a.shape == b.shape
    if videos["aoti"].read_bytes() != videos["torchscript"].read_bytes():
        # a flipped 8-bit value before the encoder: it stays local and small after decoding
        assert np.abs(a - b).mean() < 0.05 and np.abs(a - b).max() <= 8, (np.abs(a - b).mean(), np.abs(a - b).max())
