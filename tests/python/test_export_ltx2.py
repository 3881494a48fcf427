"""Export of the tiny LTX-2 pipeline (python -m vgen_export.ltx2): the manifest, each exported
module against diffusers (float32, the export's own checks and a pipeline-level check of the
text path), and what it refuses by name.

Run: /root/.cache/vgen/venv/bin/python -m pytest -q tests/python/test_export_ltx2.py
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import weakref
from pathlib import Path

import pytest
import torch

from vgen_export import common as ec
from vgen_export import ltx2 as el
from vgen_export import manifest as mf
from vgen_export.common import load_saved
from vgen_export.tiny_ltx2 import TINY_MAX_LENGTH, tiny_transformer, tiny_vae, write_tiny_ltx2
from test_cli_render import render_and_probe  # the CLI tests' render + ffprobe (same folder)

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    root = tmp_path_factory.mktemp("ltx2")
    src = write_tiny_ltx2(root / "diffusers", seed=0)
    manifest = el.export_ltx2(src, root / "pkg", dtype="float32", tiny=True, seed=0, max_length=TINY_MAX_LENGTH)
    return src, root / "pkg", manifest


def test_manifest_describes_the_ltx2_package(exported):
    _, pkg, manifest = exported
    assert mf.read_manifest(pkg)["family"] == "ltx2"
    assert manifest["frames"]["k_multiple"] == 8 and manifest["frames"]["rule"] == "8k+1"
    assert manifest["resolution"]["height"]["multiple_of"] == 32
    assert manifest["tokenizer"]["padding"] == "left" and manifest["tokenizer"]["add_bos"] is True
    assert manifest["audio"]["latent_channels"] * manifest["audio"]["latent_mel_bins"] == \
        manifest["transformer"]["audio_in_channels"]
    assert manifest["scheduler"]["type"] == "FlowMatchEulerDiscreteScheduler"
    assert manifest["export_checks"]["tokenizer"]["mismatches"] == 0


def test_every_exported_module_matches_diffusers_in_float32(exported):
    _, _, manifest = exported
    for name in ("text_encoder", "transformer", "vae_decoder", "vae_encoder"):
        for check in manifest["export_checks"][name]["checks"]:
            assert check["max_abs_diff"] <= 1e-4, (name, check)
    checks = manifest["export_checks"]["transformer"]["checks"]
    assert all(c["coords_diff"] == 0 for c in checks)  # vgen's rope coordinates are diffusers' bit for bit
    assert any(c["per_token"] for c in checks) and not all(c["per_token"] for c in checks)  # both pipelines' calls


def test_the_package_also_runs_image_to_video(exported):
    _, _, manifest = exported
    assert manifest["inputs"] == {"image": "optional", "last_image": "none"}
    assert manifest["transformer"]["timestep"] == "per_token"
    assert manifest["image_conditioning"]["image_crf"] == 0


def test_the_vae_encoder_file_holds_the_encoder_only(exported):
    """vae_encoder.pt carried the whole VAE (its decoder too: 2.1 GB of LTX-2's 4.9 GB, found by
    the real-size check): it holds exactly the encoder's parameters."""
    src, pkg, _ = exported
    from diffusers import AutoencoderKLLTX2Video

    vae = AutoencoderKLLTX2Video.from_pretrained(src, subfolder="vae")
    saved = load_saved(pkg / "vae_encoder.pt")
    assert sum(p.numel() for p in saved.parameters()) == sum(p.numel() for p in vae.encoder.parameters())


def test_the_text_path_is_the_pipelines(exported):
    # Tokenizer (as the runtime tokenizes) + text_encoder.pt against LTX2Pipeline's encode_prompt
    # and connectors on a batch with guidance rows.
    src, pkg, _ = exported
    from diffusers import LTX2Pipeline

    pipe = LTX2Pipeline.from_pretrained(src)
    prompts = [" a dog barks at a passing car ", "", "red " * 40]
    with torch.no_grad():
        embeds, mask, _, _ = pipe.encode_prompt(prompts, do_classifier_free_guidance=False,
                                                max_sequence_length=TINY_MAX_LENGTH)
        video, audio, cmask = pipe.connectors(embeds, mask, padding_side="left")
        ids, m = el.spm_tokenize(pkg / "tokenizer.model", prompts, TINY_MAX_LENGTH)
        got = load_saved(pkg / "text_encoder.pt")(ids, m)
    d = video.shape[-1]
    assert torch.equal(m, mask.long())
    assert (got[..., :d] - video).abs().max() <= 1e-4
    assert (got[..., d:2 * d] - audio).abs().max() <= 1e-4
    assert torch.equal(got[..., -1], cmask.float())


@pytest.mark.parametrize("split_above", [0, None])
def test_the_transformer_export_frees_the_eager_model_before_the_reload(tmp_path, monkeypatch, split_above):
    """The exporter held the eager transformer and the reloaded copy at once: twice LTX-2's 19 B
    weights (found by the real-size check, bench/real_size.py --family ltx2). With a Handoff the
    eager model is gone when the saved file is loaded for the checks, and the checks still pass."""
    torch.manual_seed(0)
    transformer = tiny_transformer(16, 8, 16).eval()
    rope = el.rope_of(transformer)
    handoff = ec.Handoff(transformer)
    del transformer  # the Handoff holds the only reference
    alive = weakref.ref(handoff.module)
    seen = []
    real_load = el.load_saved

    def load_and_look(path, map_location=None):
        seen.append(alive() is None)
        return real_load(path, map_location)

    monkeypatch.setattr(el, "load_saved", load_and_look)
    if split_above is not None:
        monkeypatch.setattr(ec, "SPLIT_ABOVE", split_above)
    with torch.no_grad():
        result = el.export_transformer(handoff, tmp_path / "transformer.pt", 8, torch.float32,
                                       torch.Generator().manual_seed(0), rope, cross_timestep=True)
    assert seen == [True]
    assert len(result["checks"]) == 4 and not ec.failed_checks(result), result["checks"]
    assert ("weights_file" in result) == (split_above == 0)


def test_the_vae_export_frees_the_eager_vae_before_the_reloads(tmp_path, monkeypatch):
    """The eager VAE stayed alive beside each reloaded file (LTX-2's export peaked at 8.7 GB for
    a 4.9 GB VAE at real size): with a Handoff both files are written, then the VAE is gone
    before either is loaded for its checks, which still pass."""
    handoff = ec.Handoff(tiny_vae(seed=0))
    alive = weakref.ref(handoff.module)
    seen = []
    real_load = el.load_saved

    def load_and_look(path, map_location=None):
        seen.append(alive() is None)
        return real_load(path, map_location)

    monkeypatch.setattr(el, "load_saved", load_and_look)
    with torch.no_grad():
        checks = el.export_vae(handoff, tmp_path, torch.Generator().manual_seed(0))
    assert seen == [True, True]
    for name in ("vae_decoder", "vae_encoder"):
        assert len(checks[name]["checks"]) == 3 and not ec.failed_checks(checks[name]), checks[name]


def _refused(tmp_path, src, edit):
    bad = tmp_path / "bad"
    shutil.copytree(src, bad)
    edit(bad)
    proc = subprocess.run([sys.executable, "-m", "vgen_export.ltx2", "--diffusers", str(bad), str(tmp_path / "out")],
                          capture_output=True, text=True)
    return proc.returncode, proc.stderr


def _set(path: Path, **changes):
    cfg = json.loads(path.read_text())
    cfg.update(changes)
    path.write_text(json.dumps(cfg))


@pytest.mark.parametrize("edit, named", [
    (lambda d: _set(d / "model_index.json", _class_name="LTX2ConditionPipeline"), "LTX2ConditionPipeline"),
    (lambda d: _set(d / "vae" / "config.json", timestep_conditioning=True), "timestep_conditioning"),
    (lambda d: _set(d / "connectors" / "config.json", per_modality_projections=True), "per_modality_projections"),
    (lambda d: _set(d / "scheduler" / "scheduler_config.json", stochastic_sampling=True), "stochastic_sampling"),
])
def test_what_vgen_cannot_reproduce_is_refused_by_name(exported, tmp_path, edit, named):
    src, _, _ = exported
    rc, err = _refused(tmp_path, src, edit)
    assert rc == 2 and named in err, err


BUILD = Path(os.environ.get("VGEN_BUILD_DIR", Path(__file__).resolve().parents[2] / "build"))
VGEN = BUILD / "bin" / "vgen"


@pytest.mark.skipif(not VGEN.exists(), reason="build/bin/vgen not built")
def test_vgen_render_with_the_ltx2_package(exported, tmp_path):
    _, probe = render_and_probe(exported[1], "a dog barks at a passing car", tmp_path / "clip.mp4", "--width", "96",
                                "--height", "64", "--frames", "17", "--steps", "2", "--fps", "24")
    video = [s for s in probe if s["codec_type"] == "video"][0]
    assert (video["width"], video["height"], int(video["nb_read_frames"])) == (96, 64, 17)
    assert [s for s in probe if s["codec_type"] == "audio"], probe  # the clip's sound, muxed beside it


@pytest.mark.skipif(not VGEN.exists(), reason="build/bin/vgen not built")
def test_vgen_render_image_to_video_with_the_ltx2_package(exported, tmp_path):
    import numpy as np
    import PIL.Image

    image = tmp_path / "first.png"
    y, x = np.mgrid[0:64, 0:96]
    PIL.Image.fromarray(np.stack([x * 2, y * 3, (x + y) % 256], -1).astype(np.uint8)).save(image)
    out = tmp_path / "clip.mp4"
    r = subprocess.run([str(VGEN), "render", "a dog barks", "-o", str(out), "--model", str(exported[1]), "--image",
                        str(image), "--width", "96", "--height", "64", "--frames", "9", "--steps", "2"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert out.stat().st_size > 0


@pytest.mark.skipif(not VGEN.exists(), reason="build/bin/vgen not built")
@pytest.mark.parametrize("flag,value,field", [("--frames", "12", "frames"), ("--width", "48", "width")])
def test_vgen_render_names_the_bad_field(exported, tmp_path, flag, value, field):
    out = tmp_path / "clip.mp4"
    r = subprocess.run([str(VGEN), "render", "x", "-o", str(out), "--model", str(exported[1]), flag, value],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 2, r.stderr
    assert field in r.stderr
    assert not out.exists()


@pytest.mark.skipif(not VGEN.exists(), reason="build/bin/vgen not built")
def test_vgen_batch_runs_ltx2_jobs_and_names_a_bad_frame_count(exported, tmp_path):
    jobs = tmp_path / "jobs.jsonl"
    jobs.write_text(json.dumps({"prompt": "a dog barks at a passing car", "name": "dog", "frames": 9, "steps": 2}) + "\n" +
                    json.dumps({"prompt": "rain", "name": "bad", "frames": 12}) + "\n")
    out = tmp_path / "out"
    r = subprocess.run([str(VGEN), "batch", str(jobs), "--out", str(out), "--model", str(exported[1]), "--json"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 2, r.stderr  # a line was invalid, no job failed
    by_line = {j["line"]: j for j in json.loads(r.stdout)["jobs"]}
    assert by_line[1]["status"] == "done", r.stderr
    assert by_line[2]["status"] == "invalid" and "frames" in by_line[2]["error"]
    assert (out / "dog.mp4").stat().st_size > 0


@pytest.mark.skipif(not VGEN.exists(), reason="build/bin/vgen not built")
def test_vgen_serve_runs_an_ltx2_job_and_answers_400_naming_frames(exported, tmp_path):
    import http.client
    import re
    import select
    import time

    out = tmp_path / "out"
    out.mkdir()
    with open(tmp_path / "serve.log", "w+") as log:
        proc = subprocess.Popen([str(VGEN), "serve", "--listen", "127.0.0.1:0", "--model", str(exported[1]),
                                 "--output-dir", str(out)], stdout=subprocess.PIPE, stderr=log, text=True)
        try:
            ready, _, _ = select.select([proc.stdout], [], [], 120)
            m = re.fullmatch(r"listening on http://127\.0\.0\.1:(\d+)\n", proc.stdout.readline() if ready else "")
            assert m, "serve did not start"

            def call(method, path, body=None):
                c = http.client.HTTPConnection("127.0.0.1", int(m.group(1)), timeout=120)
                c.request(method, path, json.dumps(body) if body is not None else None,
                          {"Content-Type": "application/json"})
                r = c.getresponse()
                return r.status, json.loads(r.read() or b"{}")

            status, body = call("POST", "/v1/jobs", {"prompt": "rain", "frames": 12})
            assert status == 400 and "frames" in json.dumps(body), body
            status, body = call("POST", "/v1/jobs", {"prompt": "a dog barks", "frames": 9, "steps": 2})
            assert status in (200, 201, 202), body
            job = body["id"]
            deadline = time.monotonic() + 240
            while time.monotonic() < deadline:
                status, body = call("GET", f"/v1/jobs/{job}")
                if body.get("status") in ("done", "failed", "cancelled"):
                    break
                time.sleep(0.05)
            assert body.get("status") == "done", body
        finally:
            proc.terminate()
            proc.wait(timeout=60)
