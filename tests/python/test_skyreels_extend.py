"""Extending a clip with SkyReels-V2 diffusion forcing (issue 34 item 4) end to end on the tiny
random SkyReels-V2 DF package (tools/vgen_export/skyreels.py, extension.overlap_frames = 5):
a clip is rendered, then extended twice with `vgen extend`; each result is one video stream of
input + frames - overlap frames (the segment starts with the clip's last `overlap` frames, which
the join drops, so the result's frames up to the seam are the input's own).

A finished job's latents: rendering with the DF package keeps the final latents beside the
output (.vgen-latents/<name>.<sha256>.latents); extending that very file takes the overlap's latents
from there instead of re-encoding the decoded frames. Shown by the server's counter
vgen_extend_latents_reused_total (an extend upload whose bytes are a finished job's output) and,
for the CLI, by the output differing from the extension of a byte-identical copy in another
folder (no latents there: its frames are encoded). Not checked: the decoded overlap against
the input's last frames (on the tiny random VAE it measured 21.6 dB PSNR, below the new frames'
32.1 dB, so it showed nothing about continuity). Deleting a video (DELETE /v1/videos/{id})
removes its kept latents with it.

The tiny model's weights are random: what the new frames show says nothing about motion; the
checks are the mechanism (frame counts, one stream, the overlap, the latents' reuse)."""
from __future__ import annotations

import base64
import hashlib
import json
import re
import shutil
import time

import pytest

from test_cli_serve import Server
from test_extend import VGEN, frames_of, one_video_stream, probe, psnr, vgen  # noqa: F401  (the skips come with VGEN)
from vgen_export import skyreels as es
from vgen_export.tiny_skyreels import write_tiny_skyreels

pytestmark = [pytest.mark.skipif(not VGEN.exists(), reason="build/bin/vgen not built"),
              pytest.mark.skipif(shutil.which("ffprobe") is None, reason="ffmpeg not installed")]

W, H, SEGMENT, OVERLAP = 48, 32, 9, 5
JOB = ["--width", str(W), "--height", str(H), "--frames", str(SEGMENT), "--steps", "2", "--seed", "3"]


@pytest.fixture(scope="module")
def package(tmp_path_factory):
    root = tmp_path_factory.mktemp("skyreels")
    es.export_skyreels(write_tiny_skyreels(root / "src", seed=0), root / "df", dtype="float32", tiny=True, seed=0,
                       overlap_history=OVERLAP)
    return root / "df"


@pytest.fixture(scope="module")
def base(package, tmp_path_factory):
    out = tmp_path_factory.mktemp("base") / "base.mp4"
    r = vgen("render", "a red circle", "-o", out, "--model", package, *JOB, "--fps", "16")
    assert r.returncode == 0, r.stderr
    one_video_stream(out, SEGMENT)
    return out


def kept_latents(video):
    return video.parent / ".vgen-latents" / f"{video.name}.{hashlib.sha256(video.read_bytes()).hexdigest()}.latents"


def test_extend_twice_sums_the_frames_in_one_stream(package, base, tmp_path):
    first, second = tmp_path / "first.mp4", tmp_path / "second.mp4"
    r = vgen("extend", base, "the circle rolls on", "-o", first, "--model", package, *JOB)
    assert r.returncode == 0, r.stderr
    one_video_stream(first, SEGMENT + SEGMENT - OVERLAP)  # 9 + 9 - 5 = 13
    r = vgen("extend", first, "and further", "-o", second, "--model", package, *JOB)
    assert r.returncode == 0, r.stderr
    one_video_stream(second, SEGMENT + 2 * (SEGMENT - OVERLAP))  # 13 + 9 - 5 = 17
    clip, once, twice = frames_of(base), frames_of(first), frames_of(second)
    kept = min(psnr(once[i], clip[i]) for i in range(SEGMENT))  # the input first, one more encode away
    kept2 = min(psnr(twice[i], once[i]) for i in range(len(once)))
    seam, seam2 = psnr(once[SEGMENT], clip[-1]), psnr(twice[len(once)], once[-1])
    print(f"input frames kept: min PSNR {kept:.1f} dB (second extension {kept2:.1f} dB); first new frame vs the "
          f"input's last: {seam:.1f} dB (second extension {seam2:.1f} dB)")
    assert kept > 30 and kept2 > 30
    assert kept_latents(first).is_file() and kept_latents(second).is_file()  # each result keeps its latents


def test_a_finished_job_s_latents_are_reused_by_the_cli(package, base, tmp_path):
    assert kept_latents(base).is_file()
    reused, encoded = tmp_path / "reused.mp4", tmp_path / "encoded.mp4"
    assert vgen("extend", base, "next", "-o", reused, "--model", package, *JOB).returncode == 0
    elsewhere = tmp_path / "copy"
    elsewhere.mkdir()
    shutil.copy(base, elsewhere / "base.mp4")  # the same bytes, without latents beside them
    r = vgen("extend", elsewhere / "base.mp4", "next", "-o", encoded, "--model", package, *JOB)
    assert r.returncode == 0, r.stderr
    a, b = frames_of(reused), frames_of(encoded)
    assert a.shape == b.shape
    same_input = psnr(a[:SEGMENT], b[:SEGMENT])
    new = psnr(a[SEGMENT:], b[SEGMENT:])
    print(f"extension with the finished job's latents vs with its frames re-encoded: new frames PSNR {new:.1f} dB "
          f"(input frames {same_input:.1f} dB)")
    assert same_input > 40 and new < same_input  # the overlap latents differed, so did the new frames


def reused_counter(server) -> float:
    status, _, body = server.request("GET", "/metrics")
    assert status == 200
    m = re.search(rb"^vgen_extend_latents_reused_total(?:\{[^}]*\})? ([0-9.e+]+)$", body, re.M)
    return float(m.group(1)) if m else 0.0


def test_extending_a_finished_job_over_http_reuses_its_latents(package, base, tmp_path):
    server = Server(package, tmp_path / "out")
    try:
        spec = {"prompt": "a red circle", "width": W, "height": H, "frames": SEGMENT, "steps": 2, "seed": 5}
        status, _, body = server.json("POST", "/v1/jobs", spec)
        assert status == 202, body
        assert server.wait_status(body["id"], {"done", "failed"})["status"] == "done"
        status, _, made = server.request("GET", f"/v1/jobs/{body['id']}/video")
        assert status == 200
        assert reused_counter(server) == 0
        ext = {**spec, "prompt": "next", "extend": True}
        # The server's own result (its latents are in its output folder), then a file it never made
        # (rendered by the CLI elsewhere, at 16 fps): reused once, not twice.
        for video, reused, fps in ((made, 1, "24/1"), (base.read_bytes(), 1, "16/1")):
            status, _, job = server.json("POST", "/v1/jobs", {**ext, "video": base64.b64encode(video).decode()})
            assert status == 202, job
            assert server.wait_status(job["id"], {"done", "failed"})["status"] == "done"
            assert reused_counter(server) == reused
            status, _, out = server.request("GET", f"/v1/jobs/{job['id']}/video")
            (tmp_path / "ext.mp4").write_bytes(out)
            one_video_stream(tmp_path / "ext.mp4", SEGMENT + SEGMENT - OVERLAP, fps=fps)
    finally:
        server.stop()


def test_deleting_a_video_removes_its_kept_latents(package, tmp_path):
    """Review finding 6: the latents stayed after DELETE /v1/videos/{id} removed their video."""
    server = Server(package, tmp_path / "out")
    try:
        spec = {"prompt": "a red circle", "width": W, "height": H, "frames": SEGMENT, "steps": 2}
        ids = []
        # Two seeds: the same spec twice would be one render and a copy from the result cache,
        # and a copy keeps no latents of its own.
        for seed, name in ((7, "kept"), (8, "deleted")):
            status, _, body = server.json("POST", "/v1/jobs", {**spec, "seed": seed, "name": name})
            assert status == 202, body
            assert server.wait_status(body["id"], {"done", "failed"})["status"] == "done"
            ids.append(body["id"])
        kept, deleted = tmp_path / "out" / "kept.mp4", tmp_path / "out" / "deleted.mp4"
        kept_file, deleted_file = kept_latents(kept), kept_latents(deleted)
        assert kept_file.is_file() and deleted_file.is_file()
        status, _, _ = server.request("DELETE", f"/v1/videos/{ids[1]}")
        assert status == 200
        deadline = time.monotonic() + 60  # the files go once the watcher has seen the job's end (at once here)
        while (deleted.exists() or deleted_file.exists()) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not deleted.exists() and not deleted_file.exists()
        assert kept.is_file() and kept_file.is_file()  # another video's stay
    finally:
        server.stop()


def test_a_batch_rerun_skips_a_finished_extend_of_a_clip_with_kept_latents(package, base, tmp_path):
    """The batch's skip check admits a line as submit does, kept latents included: an extend of a
    clip whose latents are kept has them in its content key, so a rerun finds its output complete
    instead of rendering it again (it was, while the check keyed the line without them)."""
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    shutil.copy(base, jobs / base.name)
    shutil.copytree(base.parent / ".vgen-latents", jobs / ".vgen-latents")  # the clip's latents beside it
    assert kept_latents(jobs / base.name).is_file()
    line = {"prompt": "next", "name": "longer", "video": base.name, "extend": True,
            "width": W, "height": H, "frames": SEGMENT, "steps": 2, "seed": 3}
    prompts = jobs / "prompts.jsonl"
    prompts.write_text(json.dumps(line) + "\n")
    out = tmp_path / "out"
    statuses = []
    for _ in range(2):
        r = vgen("batch", prompts, "--out", out, "--model", package, "--json")
        assert r.returncode == 0, r.stderr
        statuses.append({j["name"]: j["status"] for j in json.loads(r.stdout)["jobs"]}["longer"])
    assert statuses == ["done", "skipped"], statuses
    one_video_stream(out / "longer.mp4", SEGMENT + SEGMENT - OVERLAP)
