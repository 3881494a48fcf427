"""The post-stages end to end on the tiny random Wan package: `vgen render --interpolate N
--upscale M` writes (frames-1) x N + 1 frames at N x fps and M x the size (ffprobe), through
the libavfilter fallback, through an exported RRDBNet package, and with both post models
configured (RIFE and RRDBNet); the same through `vgen batch` lines and `vgen serve`; a job past the frame-size limit is refused before rendering, naming the field; and the
post settings are part of the content key (the output's "vgen:" comment)."""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from vgen_export.post import export_realesrgan, write_random_realesrgan
from vgen_export.rife import export_rife, write_random_rife
from tiny_packages import tiny_wan

BUILD = Path(os.environ.get("VGEN_BUILD_DIR", Path(__file__).resolve().parents[2] / "build"))
VGEN = BUILD / "bin" / "vgen"
pytestmark = pytest.mark.skipif(not VGEN.exists(), reason="build/bin/vgen not built")
SMALL = ["--width", "48", "--height", "32", "--frames", "9", "--steps", "2", "--fps", "12", "--seed", "3"]


@pytest.fixture(scope="module")
def package(tmp_path_factory):
    root = tmp_path_factory.mktemp("post")
    return tiny_wan(root / "pkg")


def render(package, out, *args):
    cmd = [str(VGEN), "render", "a red circle moving left", "-o", str(out), "--model", str(package), *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600)


def probe(path):
    out = subprocess.run(["ffprobe", "-v", "error", "-count_frames", "-show_entries",
                          "stream=width,height,r_frame_rate,nb_read_frames:format_tags=comment", "-of", "json", str(path)],
                         capture_output=True, text=True, check=True).stdout
    doc = json.loads(out)
    s = doc["streams"][0]
    return {"size": (s["width"], s["height"]), "fps": s["r_frame_rate"], "frames": int(s["nb_read_frames"]),
            "key": doc["format"]["tags"]["comment"]}


def serve_post_clip(server) -> list:
    """POST /v1/jobs a 48x32, 9-frame job at 12 fps with interpolate 2 and upscale 2 as "clip",
    wait for it, and check the file: 96x64, 17 frames at 24 fps. Returns the job's events."""
    status, _, body = server.json("POST", "/v1/jobs", {"prompt": "a red circle moving left", "name": "clip", "width": 48,
                                                      "height": 32, "frames": 9, "steps": 2, "fps": 12,
                                                      "interpolate": 2, "upscale": 2})
    assert status == 202, body
    events = server.events(body["id"], timeout=300)
    assert events[-1][0] == "done", events
    p = probe(server.out_dir / "clip.mp4")
    assert (p["size"], p["fps"], p["frames"]) == ((96, 64), "24/1", 17)
    return events


def test_interpolate_and_upscale_double_frames_fps_and_size(package, tmp_path):
    base, post = tmp_path / "base.mp4", tmp_path / "post.mp4"
    assert render(package, base, *SMALL).returncode == 0
    r = render(package, post, *SMALL, "--interpolate", "2", "--upscale", "2", "--json")
    assert r.returncode == 0, r.stderr
    result = json.loads(r.stdout)
    # Each stage ran once for this job; a job without them has no entry (test_cli_render).
    assert set(result["stage_seconds"]) == {"preprocess", "denoise", "decode", "interpolate", "upscale", "encode"}
    b, p = probe(base), probe(post)
    assert b == {"size": (48, 32), "fps": "12/1", "frames": 9, "key": b["key"]}
    # minterpolate's definition: one new frame per gap, nothing after the last: 2 x 9 - 1.
    assert (p["size"], p["fps"], p["frames"]) == ((96, 64), "24/1", 17)
    assert p["key"] != b["key"]  # another video: another content key (and result-cache entry)


def test_interpolate_four_alone(package, tmp_path):
    out = tmp_path / "x4.mp4"
    r = render(package, out, *SMALL, "--interpolate", "4")
    assert r.returncode == 0, r.stderr
    p = probe(out)
    assert (p["size"], p["fps"], p["frames"]) == ((48, 32), "48/1", 33)


def test_model_backed_upscale_from_an_exported_package(package, tmp_path):
    ckpt = write_random_realesrgan(tmp_path / "x4.pth", scale=4)
    export_realesrgan(ckpt, tmp_path / "upscaler")
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"post": {"upscale_model": str(tmp_path / "upscaler"), "tile": 16, "tile_overlap": 8}}))
    out = tmp_path / "up.mp4"
    r = render(package, out, *SMALL, "--upscale", "4", "--config", str(config))
    assert r.returncode == 0, r.stderr
    p = probe(out)
    assert (p["size"], p["fps"], p["frames"]) == ((192, 128), "12/1", 9)


def test_refused_before_rendering_naming_the_field(package, tmp_path):
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"post": {"max_side": 1024}}))
    out = tmp_path / "big.mp4"
    r = render(package, out, "--width", "512", "--height", "256", "--frames", "5", "--steps", "2", "--upscale", "4",
               "--config", str(config))
    assert r.returncode == 2
    assert "upscale" in r.stderr and "1024" in r.stderr, r.stderr
    r = render(package, out, *SMALL, "--interpolate", "3")
    assert r.returncode == 2 and "interpolate" in r.stderr, r.stderr
    r = render(package, out, *SMALL[:-4], "--fps", "120", "--interpolate", "4")  # 480 fps: past the frame-rate limit
    assert r.returncode == 2 and "interpolate" in r.stderr, r.stderr
    assert not out.exists()


def test_batch_lines_carry_the_post_fields(package, tmp_path):
    jobs = tmp_path / "jobs.jsonl"
    jobs.write_text("\n".join(json.dumps(j) for j in [
        {"prompt": "a red circle moving left", "name": "plain"},
        {"prompt": "a red circle moving left", "name": "post", "interpolate": 2, "upscale": 2},
        {"prompt": "a red circle moving left", "name": "bad", "upscale": 8},
    ]) + "\n")
    out = tmp_path / "out"
    r = subprocess.run([str(VGEN), "batch", str(jobs), "--out", str(out), "--model", str(package), "--width", "32",
                        "--height", "32", "--frames", "5", "--steps", "2", "--fps", "8", "--json"],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 2, r.stderr  # the bad line is reported, the others run
    assert "upscale" in r.stdout + r.stderr
    plain, post = probe(out / "plain.mp4"), probe(out / "post.mp4")
    assert (plain["size"], plain["fps"], plain["frames"]) == ((32, 32), "8/1", 5)
    assert (post["size"], post["fps"], post["frames"]) == ((64, 64), "16/1", 9)
    # A rerun finds both finished: the skip check expects the post-stages' frames and size (it
    # once compared the file with the job's own 5 frames at 32x32 and rendered "post" again).
    r = subprocess.run([str(VGEN), "batch", str(jobs), "--out", str(out), "--model", str(package), "--width", "32",
                        "--height", "32", "--frames", "5", "--steps", "2", "--fps", "8", "--json"],
                       capture_output=True, text=True, timeout=600)
    statuses = {j["name"]: j["status"] for j in json.loads(r.stdout)["jobs"]}
    assert statuses == {"plain": "skipped", "post": "skipped", "bad": "invalid"}, statuses


def test_serve_takes_the_http_fields_and_refuses_with_400(package, tmp_path):
    from test_cli_serve import Server  # the serve tests' process helper (same folder)

    config = tmp_path / "config.json"
    config.write_text(json.dumps({"post": {"max_side": 1024}}))
    server = Server(package, tmp_path / "out", "--config", str(config))
    try:
        events = serve_post_clip(server)
        assert set(events[-1][1]["stage_seconds"]) >= {"interpolate", "upscale"}
        status, _, body = server.json("POST", "/v1/jobs", {"prompt": "too big", "width": 512, "height": 256, "frames": 5,
                                                          "upscale": 4})
        assert status == 400 and "upscale" in json.dumps(body), body
        status, _, metrics = server.request("GET", "/metrics")
        assert b'vgen_post_frames_total{stage="upscale"} 17' in metrics
        assert b'vgen_stage_duration_seconds_count{stage="interpolate"} 1' in metrics
        assert server.stop() == 0
    finally:
        server.kill()


@pytest.fixture(scope="module")
def post_models(tmp_path_factory):
    """Both post models exported from random checkpoints (RIFE needs ccvfi's IFNet to write its
    random checkpoint) and a config that names both."""
    pytest.importorskip("ccvfi.arch")
    root = tmp_path_factory.mktemp("post-models")
    export_rife(write_random_rife(root / "flownet.pkl", seed=3), root / "rife")
    export_realesrgan(write_random_realesrgan(root / "x2.pth", scale=2), root / "upscaler")
    config = root / "config.json"
    config.write_text(json.dumps({"post": {"interpolate_model": str(root / "rife"), "upscale_model": str(root / "upscaler"),
                                           "interpolate_batch": 4, "tile": 0}}))
    return config


def test_both_post_models_render_batch_and_serve(package, post_models, tmp_path):
    out = tmp_path / "both.mp4"
    r = render(package, out, *SMALL, "--interpolate", "2", "--upscale", "2", "--config", str(post_models), "--json")
    assert r.returncode == 0, r.stderr
    assert {"interpolate", "upscale"} <= set(json.loads(r.stdout)["stage_seconds"])
    p = probe(out)
    assert (p["size"], p["fps"], p["frames"]) == ((96, 64), "24/1", 17)  # 2 x 9 - 1 frames, RIFE's too

    jobs = tmp_path / "jobs.jsonl"
    jobs.write_text(json.dumps({"prompt": "a red circle moving left", "name": "post", "interpolate": 2, "upscale": 2}) + "\n")
    r = subprocess.run([str(VGEN), "batch", str(jobs), "--out", str(tmp_path / "batch"), "--model", str(package), "--width", "32",
                        "--height", "32", "--frames", "5", "--steps", "2", "--fps", "8", "--config", str(post_models), "--json"],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    p = probe(tmp_path / "batch" / "post.mp4")
    assert (p["size"], p["fps"], p["frames"]) == ((64, 64), "16/1", 9)

    from test_cli_serve import Server

    server = Server(package, tmp_path / "served", "--config", str(post_models))
    try:
        serve_post_clip(server)
        assert server.stop() == 0
    finally:
        server.kill()


def test_a_configured_rife_package_is_the_one_used(package, tmp_path):
    # Not silently minterpolate: a configured package that is not one fails the start, naming it.
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"post": {"interpolate_model": str(tmp_path)}}))
    r = render(package, tmp_path / "x.mp4", *SMALL, "--interpolate", "2", "--config", str(config))
    assert r.returncode != 0
    assert "manifest.json" in r.stderr and "rife" in r.stderr, r.stderr
    # Named explicitly, the fallback still serves with a model configured.
    config.write_text(json.dumps({"post": {"interpolate_model": str(tmp_path), "interpolator": "minterpolate"}}))
    r = render(package, tmp_path / "y.mp4", *SMALL, "--interpolate", "2", "--config", str(config))
    assert r.returncode == 0, r.stderr
    assert probe(tmp_path / "y.mp4")["frames"] == 17
