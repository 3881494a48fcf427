"""Export of the tiny HunyuanVideo 1.5 pipeline (python -m vgen_export.hunyuan15), what it refuses,
and the package's contract run in Python (the loop the C++ family implements) against diffusers'
own HunyuanVideo15Pipeline.

Run: /root/.cache/vgen/venv/bin/python -m pytest -q tests/python/test_export_hunyuan15.py
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
import weakref
from pathlib import Path

import numpy as np
import pytest
import torch

from vgen_export import common as ec
from vgen_export import hunyuan15 as eh
from vgen_export import manifest as mf
from vgen_export.common import load_saved
from vgen_export.tiny_hunyuan15 import write_tiny_hunyuan15
from test_cli_render import render_and_probe  # the CLI tests' render + ffprobe (same folder)

torch.set_num_threads(1)
ROOT = Path(__file__).resolve().parents[2]
VGEN = Path(os.environ.get("VGEN_BUILD_DIR", ROOT / "build")) / "bin" / "vgen"


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    root = tmp_path_factory.mktemp("hy15")
    src = write_tiny_hunyuan15(root / "diffusers", seed=0)
    manifest = eh.export_hunyuan15(src, root / "pkg", dtype="float32", tiny=True, seed=0)
    return src, root / "pkg", manifest


def test_manifest_describes_the_package(exported):
    _, pkg, manifest = exported
    assert mf.read_manifest(pkg)["family"] == "hunyuan-video-1.5"
    assert manifest["resolution"]["height"]["multiple_of"] == 16  # VAE 16 x patch 1
    assert manifest["frames"]["k_multiple"] == 4
    assert manifest["text"]["crop_start"] == 108 and manifest["text"]["max_length"] == 1000
    assert manifest["text"]["byt5"]["max_length"] == 256
    assert manifest["export_checks"]["template"]["mismatches"] == []
    assert manifest["export_checks"]["tokenizer_2"] == {"probes": len(eh.BYT5_PROBES), "mismatches": []}
    for name in ("text_encoder", "text_encoder_2", "transformer", "vae_decoder"):
        for check in manifest["export_checks"][name]["checks"]:
            assert check["max_abs_diff"] <= 1e-4, (name, check)


def test_glyph_texts_follow_the_pipeline():
    from diffusers.pipelines.hunyuan_video1_5.pipeline_hunyuan_video1_5 import extract_glyph_texts

    for p in ['no quotes', 'one "A"', '"A" and "A"', '"A" "B" “C”', '""', 'open "quote', '“x” then "x"']:
        assert eh.glyph_text(p) == extract_glyph_texts(p), p


def test_refuses_a_guider_it_cannot_reproduce(exported, tmp_path):
    src, _, _ = exported
    copy = tmp_path / "src"
    shutil.copytree(src, copy)
    cfg_file = next((copy / "guider").glob("*.json"))
    cfg = json.loads(cfg_file.read_text())
    cfg_file.write_text(json.dumps({**cfg, "guidance_rescale": 0.7}))
    with pytest.raises(eh.ExportRefused, match="guidance_rescale"):
        eh.refuse_unsupported(copy)
    run = subprocess.run([sys.executable, "-m", "vgen_export.hunyuan15", "--diffusers", str(copy), str(tmp_path / "o")],
                         capture_output=True, text=True)
    assert run.returncode == 2 and "refused" in run.stderr


def test_the_exports_free_the_eager_transformer_and_vae_before_the_reloads(tmp_path, monkeypatch):
    """The exporter held the eager transformer and VAE while it loaded their saved copies for the
    checks (two copies of the weights at once: what LTX-2's and Wan's exporters stopped doing at
    real size). With a Handoff each eager model is gone when its files are loaded, and the checks
    still pass; image-to-video: both VAE files are written before either reload."""
    from vgen_export.tiny_hunyuan15 import tiny_transformer, tiny_vae

    torch.manual_seed(0)
    seen = []
    real_load = eh.load_saved
    alive = None

    def load_and_look(path, map_location=None):
        seen.append((Path(path).name, alive() is None))
        return real_load(path, map_location)

    monkeypatch.setattr(eh, "load_saved", load_and_look)
    consts = eh.pipeline_constants(eh.I2V_PIPELINE)
    handoff = ec.Handoff(tiny_transformer(16, 8, task_type="i2v"))  # no local name keeps the model alive
    alive = weakref.ref(handoff.module)
    with torch.no_grad():
        result = eh.export_transformer(handoff, tmp_path / "transformer.pt", consts, 16, 8, torch.float32,
                                       torch.Generator().manual_seed(0), image_tokens=4)
    assert seen == [("transformer.pt", True)]
    assert len(result["checks"]) == 3 and not ec.failed_checks(result), result["checks"]

    seen.clear()
    handoff = ec.Handoff(tiny_vae())
    alive = weakref.ref(handoff.module)
    with torch.no_grad():
        checks = eh.export_vae(handoff, tmp_path, torch.Generator().manual_seed(0), i2v=True)
    assert seen == [("vae_decoder.pt", True), ("vae_encoder.pt", True)]
    for name in ("vae_decoder", "vae_encoder"):
        assert len(checks[name]["checks"]) == 3 and not ec.failed_checks(checks[name]), checks[name]


def package_loop(pkg: Path, case: dict, seed: int):
    """The C++ family's algorithm over the package files: template, BPE ids (HF tokenizers on the
    package's tokenizer.json), crop, ByT5 bytes, the pipeline's sigmas, CFG, decode."""
    from tokenizers import Tokenizer

    m = json.loads((pkg / "manifest.json").read_text())
    text, byt5 = m["text"], m["text"]["byt5"]
    tok = Tokenizer.from_file(str(pkg / "tokenizer.json"))
    te, te2 = load_saved(pkg / "text_encoder.pt"), load_saved(pkg / "text_encoder_2.pt")
    tr, vae = load_saved(pkg / "transformer.pt"), load_saved(pkg / "vae_decoder.pt")
    length = text["max_length"] + text["crop_start"]

    def qwen(prompt):
        s = text["template"].replace("{system}", text["system_message"]).replace("{prompt}", prompt or " ")
        ids = tok.encode(s, add_special_tokens=False).ids[:length]
        mask = torch.tensor([[1] * len(ids) + [0] * (length - len(ids))])
        ids = torch.tensor([ids + [m["tokenizer"]["pad_id"]] * (length - len(ids))])
        return te(ids, mask), mask[:, text["crop_start"]:].float()

    def glyphs(prompt):
        g = eh.glyph_text(prompt)
        if g is None:
            return torch.zeros(1, byt5["max_length"], byt5["output_dim"]), torch.zeros(1, byt5["max_length"])
        ids, mask = eh.byt5_ids(g, byt5["max_length"], byt5["offset"], byt5["eos_id"], byt5["pad_id"])
        mask = torch.tensor([mask])
        return te2(torch.tensor([ids]), mask), mask

    cfg = not math.isclose(case["guidance_scale"], 1.0)
    prompts = [case["prompt"]] + ([case["negative_prompt"]] if cfg else [])
    rows = [qwen(p) + glyphs(p) for p in prompts]
    emb, mask, emb2, mask2 = (torch.cat([r[k] for r in rows]) for k in range(4))
    f, h, w = (case["num_frames"] - 1) // 4 + 1, case["height"] // 16, case["width"] // 16
    latents = torch.randn(1, m["latent"]["channels"], f, h, w, generator=torch.Generator().manual_seed(seed))
    n, shift = case["num_inference_steps"], m["scheduler"]["config"]["shift"]
    s = np.linspace(1.0, 0.0, n + 1)[:-1].astype(np.float32)
    sigmas = torch.cat([torch.from_numpy(shift * s / (1 + (shift - 1) * s)), torch.zeros(1)])
    steps = []
    for i in range(n):
        pred = tr(latents.repeat(len(prompts), 1, 1, 1, 1), (sigmas[i] * 1000).expand(len(prompts)), emb, mask, emb2,
                  mask2)
        if cfg:
            pred = pred[1:2] + case["guidance_scale"] * (pred[:1] - pred[1:2])
        latents = latents + (sigmas[i + 1] - sigmas[i]) * pred
        steps.append(latents)
    video = vae(latents / m["vae"]["scaling_factor"])
    return (video / 2 + 0.5).clamp(0, 1).permute(0, 2, 1, 3, 4), steps


@pytest.mark.parametrize("case", [
    dict(prompt='a sign that says "OPEN"', negative_prompt="blurry", height=32, width=48, num_frames=5,
         num_inference_steps=2, guidance_scale=6.0),
    dict(prompt="a blue square", negative_prompt="", height=32, width=32, num_frames=5, num_inference_steps=2,
         guidance_scale=1.0)])
def test_the_package_loop_matches_diffusers(exported, case):
    from vgen_reference.hunyuan15_parity import run_hunyuan15_pipeline

    from diffusers import HunyuanVideo15Pipeline

    src, pkg, _ = exported
    pipe = HunyuanVideo15Pipeline.from_pretrained(src)
    pipe.set_progress_bar_config(disable=True)
    with torch.no_grad():
        want_frames, want_steps = run_hunyuan15_pipeline(pipe, case, 7)
        frames, steps = package_loop(pkg, case, 7)
    assert len(steps) == len(want_steps)
    for got, want in zip(steps, want_steps):
        assert float((got - want).abs().max()) <= 1e-4
    assert float((frames - want_frames).abs().max()) <= 1e-4


@pytest.mark.skipif(not VGEN.exists(), reason="build/bin/vgen not built")
def test_vgen_render_with_the_package(exported, tmp_path):
    _, streams = render_and_probe(exported[1], 'a neon sign that says "OPEN"', tmp_path / "clip.mp4", "--width", "48",
                                  "--height", "32", "--frames", "9", "--steps", "2", "--max-batch", "1")
    probe = streams[0]
    assert (probe["codec_name"], probe["width"], probe["height"], int(probe["nb_read_frames"])) == ("h264", 48, 32, 9)


@pytest.mark.skipif(not VGEN.exists(), reason="build/bin/vgen not built")
@pytest.mark.parametrize("flag,value,field", [("--width", "40", "width"), ("--height", "24", "height"),
                                              ("--frames", "7", "frames")])
def test_vgen_render_names_the_bad_field(exported, tmp_path, flag, value, field):
    out = tmp_path / "clip.mp4"
    r = subprocess.run([str(VGEN), "render", "x", "-o", str(out), "--model", str(exported[1]), flag, value,
                        "--max-batch", "1"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 2
    assert field in r.stderr
    assert not out.exists()


# ---- image-to-video ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def exported_i2v(tmp_path_factory):
    import PIL.Image

    from vgen_reference.wan_i2v_parity import test_image

    root = tmp_path_factory.mktemp("hy15i2v")
    src = write_tiny_hunyuan15(root / "diffusers", seed=0, variant="i2v")
    manifest = eh.export_hunyuan15(src, root / "pkg", dtype="float32", tiny=True, seed=0)
    image = root / "in.png"
    PIL.Image.fromarray(test_image(48, 64)).save(image)  # not the video's size: the family fits it
    return src, root / "pkg", manifest, image


def test_i2v_checkpoint_is_detected_and_ships_the_image_modules(exported_i2v):
    _, pkg, manifest, _ = exported_i2v
    assert manifest["source"]["pipeline"] == "HunyuanVideo15ImageToVideoPipeline"
    assert manifest["inputs"] == {"image": "required", "last_image": "none"}
    assert {"vae_encoder", "image_encoder"} <= set(manifest["components"])
    assert all((pkg / manifest["components"][n]["file"]).is_file() for n in ("vae_encoder", "image_encoder"))
    assert manifest["image_encoder"] == {"size": [32, 32], "tokens": 16, "dim": 16}
    assert manifest["transformer"]["task"] == "i2v" and "cond" in manifest["transformer"]["inputs"]
    for name in ("text_encoder", "text_encoder_2", "transformer", "vae_decoder", "vae_encoder", "image_encoder"):
        for check in manifest["export_checks"][name]["checks"]:
            assert check["max_abs_diff"] <= check["tolerance"], (name, check)
    # The image encoder at its own size and the transformer with image inputs are exact.
    assert manifest["export_checks"]["image_encoder"]["checks"][0]["max_abs_diff"] <= 1e-5
    assert all(c["max_abs_diff"] <= 1e-4 for c in manifest["export_checks"]["transformer"]["checks"])


def test_an_i2v_checkpoint_without_its_image_encoder_is_refused(exported_i2v, tmp_path):
    src = exported_i2v[0]
    copy = tmp_path / "src"
    shutil.copytree(src, copy)
    shutil.rmtree(copy / "image_encoder")
    with pytest.raises(eh.ExportRefused, match="image_encoder"):
        eh.refuse_unsupported(copy)


def probe_video(path: Path) -> tuple:
    probe = json.loads(subprocess.run(
        ["ffprobe", "-v", "error", "-count_frames", "-show_entries", "stream=codec_type,codec_name,width,height,nb_read_frames",
         "-of", "json", str(path)], capture_output=True, text=True, check=True).stdout)["streams"]
    assert [s["codec_type"] for s in probe] == ["video"]
    s = probe[0]
    return s["codec_name"], s["width"], s["height"], int(s["nb_read_frames"])


@pytest.mark.skipif(not VGEN.exists(), reason="build/bin/vgen not built")
def test_vgen_render_image_to_video_end_to_end(exported_i2v, tmp_path):
    _, pkg, _, image = exported_i2v
    out = tmp_path / "clip.mp4"
    r = subprocess.run([str(VGEN), "render", 'a neon sign that says "OPEN" flickers', "-o", str(out), "--model", str(pkg),
                        "--image", str(image), "--width", "32", "--height", "32", "--frames", "9", "--steps", "2",
                        "--max-batch", "1"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert probe_video(out) == ("h264", 32, 32, 9)


@pytest.mark.skipif(not VGEN.exists(), reason="build/bin/vgen not built")
def test_vgen_render_names_image_when_the_package_cannot_take_it_or_needs_it(exported, exported_i2v, tmp_path):
    image = exported_i2v[3]
    out = tmp_path / "clip.mp4"
    for pkg, extra in ((exported[1], ["--image", str(image)]), (exported_i2v[1], [])):
        r = subprocess.run([str(VGEN), "render", "x", "-o", str(out), "--model", str(pkg), "--max-batch", "1", *extra],
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 2, (pkg, r.stderr)
        assert "image" in r.stderr
        assert not out.exists()


@pytest.mark.skipif(not VGEN.exists(), reason="build/bin/vgen not built")
def test_vgen_serve_answers_400_naming_image_for_a_text_to_video_package(exported, exported_i2v, tmp_path):
    import http.client
    import re
    import select

    out = tmp_path / "out"
    out.mkdir()
    with open(tmp_path / "serve.log", "w+") as log:
        proc = subprocess.Popen([str(VGEN), "serve", "--listen", "127.0.0.1:0", "--model", str(exported[1]),
                                 "--output-dir", str(out)], stdout=subprocess.PIPE, stderr=log, text=True)
        try:
            ready, _, _ = select.select([proc.stdout], [], [], 120)
            m = re.fullmatch(r"listening on http://127\.0\.0\.1:(\d+)\n", proc.stdout.readline() if ready else "")
            assert m, "serve did not start"
            c = http.client.HTTPConnection("127.0.0.1", int(m.group(1)), timeout=120)
            c.request("POST", "/v1/jobs", json.dumps({"prompt": "x", "image": str(exported_i2v[3])}),
                      {"Content-Type": "application/json"})
            r = c.getresponse()
            body = json.loads(r.read() or b"{}")
            assert r.status == 400 and "image" in json.dumps(body), body
        finally:
            proc.terminate()
            proc.wait(timeout=60)
