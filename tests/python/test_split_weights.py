"""Split components (tools/vgen_export/common.py): a large module's weights saved to a
safetensors file beside its TorchScript code and mapped back without a copy, and the Wan
transformer export that frees the eager model before it reloads the saved one.

Run: /root/.cache/vgen/venv/bin/python -m pytest -q tests/python/test_split_weights.py
"""

from __future__ import annotations

import json
import weakref

import pytest
import torch

from vgen_export import common as ec
from vgen_export import wan as ew
from vgen_export.tiny_wan import tiny_transformer

torch.set_num_threads(1)


class Inner(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 4)
        self.register_buffer("shift", torch.arange(4.0))

    def forward(self, x):
        return self.lin(x) + self.shift


class Outer(torch.nn.Module):  # float32 and float16 weights, a buffer, nested modules
    def __init__(self):
        super().__init__()
        self.blocks = torch.nn.ModuleList([Inner(), Inner()])
        self.head = torch.nn.Linear(4, 3).half()

    def forward(self, x):
        y = self.blocks[1](self.blocks[0](x)[..., :3])
        return self.head(y.half())


def test_a_split_component_round_trips_and_leaves_the_traced_module_whole(tmp_path):
    torch.manual_seed(0)
    eager = Outer().eval()
    x = torch.randn(2, 3)
    with torch.no_grad():
        ref = eager(x)
        traced = torch.jit.trace(eager, (x,))
        saved = ec.save_module(traced, tmp_path / "m.pt", split_above=0)
        assert saved["weights_file"] == "m.safetensors"
        assert torch.equal(eager(x), ref) and torch.equal(traced(x), ref)  # placeholders were put back
        # The TorchScript file holds no weights: loaded alone, every parameter is empty.
        bare = torch.jit.load(str(tmp_path / "m.pt"))
        assert all(p.numel() == 0 for p in bare.parameters())
        loaded = ec.load_saved(tmp_path / "m.pt")
        assert torch.equal(loaded(x), ref)
    header_len = int.from_bytes((tmp_path / "m.safetensors").read_bytes()[:8], "little")
    assert (8 + header_len) % 64 == 0  # the data region is aligned for mapping
    extra = {ec.WEIGHTS_EXTRA: ""}
    torch.jit.load(str(tmp_path / "m.pt"), _extra_files=extra)
    info = json.loads(extra[ec.WEIGHTS_EXTRA])
    assert info["file"] == "m.safetensors" and len(info["sha256"]) == 64


def test_small_components_stay_whole(tmp_path):
    traced = torch.jit.trace(Outer().eval(), (torch.randn(1, 3),))
    saved = ec.save_module(traced, tmp_path / "m.pt", split_above=1 << 20)
    assert "weights_file" not in saved and not (tmp_path / "m.safetensors").exists()


def test_mapped_weights_are_private(tmp_path):
    traced = torch.jit.trace(Outer().eval(), (torch.randn(1, 3),))
    ec.save_module(traced, tmp_path / "m.pt", split_above=0)
    before = (tmp_path / "m.safetensors").read_bytes()
    loaded = ec.load_saved(tmp_path / "m.pt")
    with torch.no_grad():
        for p in loaded.parameters():
            p.zero_()
    assert (tmp_path / "m.safetensors").read_bytes() == before


@pytest.mark.parametrize("split_above", [0, None])
def test_the_transformer_export_frees_the_eager_model_before_the_reload(tmp_path, monkeypatch, split_above):
    """The exporter held the eager transformer and the reloaded copy at once (12.4 GB peak for
    the 5.68 GB 1.3B transformer); with a Handoff the eager one is gone when the saved file is
    loaded for the checks, and the checks still pass."""
    torch.manual_seed(0)
    handoff = ec.Handoff(tiny_transformer().eval())  # no local name keeps the model alive
    alive = weakref.ref(handoff.module)
    seen = []
    real_load = ec.load_saved

    def load_and_look(path, map_location=None):
        seen.append(alive() is None)
        return real_load(path, map_location)

    monkeypatch.setattr(ew, "load_saved", load_and_look)
    if split_above is not None:
        monkeypatch.setattr(ec, "SPLIT_ABOVE", split_above)
    with torch.no_grad():
        result = ew.export_transformer(handoff, tmp_path / "transformer.pt", 16, torch.float32,
                                       torch.Generator().manual_seed(0))
    assert seen == [True]
    assert not ec.failed_checks(result), result["checks"]
    assert result["compact_context"]["usable"]
    assert ("weights_file" in result) == (split_above == 0)
