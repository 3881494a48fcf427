"""vgen_export.skyreels (issue 34 item 4): a SkyReels-V2 diffusion-forcing directory is detected
by its pipeline and transformer classes and exported with a per-frame-timestep transformer whose
rows are independent (diffusers' forward adds the fps projection right for one row only); any
other directory is refused before anything is written."""
from __future__ import annotations

import json

import pytest
import torch

from vgen_export import manifest as mf
from vgen_export import skyreels as es
from vgen_export.tiny_skyreels import write_tiny_skyreels
from vgen_export.tiny_wan import write_tiny_wan


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    return write_tiny_skyreels(tmp_path_factory.mktemp("sky") / "src", seed=0)


def test_tiny_export_states_what_the_package_takes(source, tmp_path):
    manifest = es.export_skyreels(source, tmp_path / "pkg", tiny=True, overlap_history=5)
    again = mf.read_manifest(tmp_path / "pkg")  # every sha256 verified
    assert again["family"] == "skyreels-v2-df" == manifest["family"]
    assert again["inputs"] == {"video": "optional"} and again["extension"] == {"overlap_frames": 5}
    assert again["transformer"]["timestep"] == "per_frame" and again["transformer"]["fps_embedding"] is True
    assert again["diffusion_forcing"]["ar_step"] == 0
    for name in ("text_encoder", "transformer", "vae_decoder", "vae_encoder"):
        for check in again["export_checks"][name]["checks"]:
            assert check["max_abs_diff"] <= check["tolerance"], (name, check)
    # The saved module: rows independent, and the fps flag changes the prediction.
    module = torch.jit.load(str(tmp_path / "pkg" / "transformer.pt"))
    g = torch.Generator().manual_seed(0)
    x, t = torch.randn(2, 16, 3, 4, 4, generator=g), torch.tensor([[0.0, 500.0, 500.0], [900.0, 900.0, 900.0]])
    ctx = torch.randn(2, again["tokenizer"]["max_length"], 32, generator=g)
    both = module(x, t, ctx, torch.tensor([1.0, 0.0]))
    for r, fps in ((0, 1.0), (1, 0.0)):
        assert (module(x[r:r + 1], t[r:r + 1], ctx[r:r + 1], torch.tensor([fps])) - both[r:r + 1]).abs().max() < 1e-5
    assert (module(x[:1], t[:1], ctx[:1], torch.tensor([0.0])) - both[:1]).abs().max() > 1e-4


def test_other_directories_are_refused_before_writing(tmp_path):
    wan = write_tiny_wan(tmp_path / "wan", seed=0)
    with pytest.raises(es.UnsupportedSkyReels, match="WanPipeline"):
        es.export_skyreels(wan, tmp_path / "out")
    assert not (tmp_path / "out").exists()
    assert es.main(["--diffusers", str(wan), "--out", str(tmp_path / "out2")]) == 2
    index = json.loads((wan / "model_index.json").read_text())
    index["_class_name"] = "SkyReelsV2DiffusionForcingPipeline"  # the pipeline says DF, the transformer does not
    (wan / "model_index.json").write_text(json.dumps(index))
    with pytest.raises(es.UnsupportedSkyReels, match="WanTransformer3DModel"):
        es.detect_skyreels_df(wan)
