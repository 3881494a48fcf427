"""The exported denoisers call PyTorch's fused attention (issue 30 item 2): every TorchScript
method the manifest lists for a transformer component, inlined, calls
aten::scaled_dot_product_attention once per attention layer of the model (counted from the
diffusers config, family by family) and has no unfused attention (a softmax, or SDPA's math
kernel called by name). Fused SDPA is what lets LibTorch pick flash / memory-efficient / cuDNN
at run time (model_backend.attention); a softmax(q @ k^T) @ v traced into the graph would pin the
slow path whatever the setting.

No softmax appears anywhere in these graphs (checked: none in any tiny package's modules, the
denoisers included), so its absence is asserted outright rather than only after a matmul.
The AOTInductor file (.cpu.pt2) beside a transformer is not checked: it holds compiled code, no
TorchScript graph, and Inductor lowers SDPA itself.

Run: /root/.cache/vgen/venv/bin/python -m pytest -q tests/python/test_fused_attention.py
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from vgen_export import hunyuan15 as eh
from vgen_export import ltx as el
from vgen_export import ltx2 as el2
from vgen_export import skyreels as es
from vgen_export import wan as ew
from vgen_export.tiny_hunyuan15 import write_tiny_hunyuan15
from vgen_export.tiny_ltx import write_tiny_ltx
from vgen_export.tiny_ltx2 import write_tiny_ltx2
from vgen_export.tiny_skyreels import write_tiny_skyreels
from vgen_export.tiny_wan import write_tiny_wan

torch.set_num_threads(1)

FUSED = "aten::scaled_dot_product_attention"
# Attention written out: a softmax (in any of its spellings) or SDPA's reference kernel by name.
UNFUSED = {"aten::softmax", "aten::_softmax", "aten::_safe_softmax", "aten::special_softmax",
           "aten::_scaled_dot_product_attention_math"}


def nodes(block):
    for n in block.nodes():
        yield n
        for b in n.blocks():  # prim::If / prim::Loop bodies
            yield from nodes(b)


def attention_in(graph) -> dict:
    """The fused SDPA calls of an (inlined) graph, and every unfused-attention node with where it
    was traced from."""
    found = {"fused": 0, "unfused": []}
    for n in nodes(graph):
        if n.kind() == FUSED:
            found["fused"] += 1
        elif n.kind() in UNFUSED:
            found["unfused"].append(f"{n.kind()} at {n.sourceRange().strip().splitlines()[0][:160] if n.sourceRange() else '?'}")
    return found


def attention_problems(module, method: str, expected: int) -> list[str]:
    """What is wrong with `module.method`'s attention (empty: fused, `expected` calls)."""
    found = attention_in(getattr(module, method).inlined_graph)
    problems = [f"{method}: unfused attention: {u}" for u in found["unfused"]]
    if found["fused"] != expected:
        problems.append(f"{method}: {found['fused']} {FUSED} calls, expected {expected}")
    return problems


# ----------------------------------------------------------------------------- families
# The attention layers one call of each family's transformer runs, from its diffusers config.
def wan_layers(cfg: dict) -> int:
    """Per block: self-attention and cross-attention to the text; an image-conditioned model's
    cross-attention (added_kv_proj_dim) attends to the image tokens in a second call. VACE: each
    control block (vace_layers) is a block of its own with self and cross-attention."""
    return cfg["num_layers"] * (2 + (cfg.get("added_kv_proj_dim") is not None)) + 2 * len(cfg.get("vace_layers") or [])


def ltx_layers(cfg: dict) -> int:
    return cfg["num_layers"] * 2  # attn1 (self), attn2 (cross to the text)


def ltx2_layers(cfg: dict) -> int:
    # video self, video-text, audio self, audio-text, audio-to-video, video-to-audio
    return cfg["num_layers"] * 6


def hunyuan15_layers(cfg: dict) -> int:
    # one joint attention (video and text tokens together) per block, and the text token
    # refiner's self-attention per refiner block
    return cfg["num_layers"] + cfg["num_refiner_layers"]


FAMILIES = {
    "wan_t2v": (lambda d: ew.export_wan(write_tiny_wan(d / "src", seed=0), d / "pkg", tiny=True), wan_layers),
    "wan_i2v": (lambda d: ew.export_wan(write_tiny_wan(d / "src", seed=0, variant="i2v"), d / "pkg", tiny=True),
                wan_layers),
    "wan_vace": (lambda d: ew.export_wan(write_tiny_wan(d / "src", seed=0, variant="vace"), d / "pkg", tiny=True),
                 wan_layers),
    "skyreels": (lambda d: es.export_skyreels(write_tiny_skyreels(d / "src", seed=0), d / "pkg", tiny=True), wan_layers),
    "ltx": (lambda d: el.export_ltx(write_tiny_ltx(d / "src", seed=0), d / "pkg", tiny=True), ltx_layers),
    "ltx2": (lambda d: el2.export_ltx2(write_tiny_ltx2(d / "src", seed=0), d / "pkg", tiny=True, max_length=32),
             ltx2_layers),
    "hunyuan15": (lambda d: eh.export_hunyuan15(write_tiny_hunyuan15(d / "src", seed=0), d / "pkg", tiny=True),
                  hunyuan15_layers),
}


@pytest.mark.parametrize("family", FAMILIES)
def test_exported_denoisers_call_fused_attention_once_per_attention_layer(family, tmp_path):
    export, layers = FAMILIES[family]
    manifest = export(tmp_path)
    denoisers = {k: c for k, c in manifest["components"].items()
                 if k.startswith("transformer") and c.get("format") == "torchscript"}
    assert denoisers, f"{family}: no TorchScript transformer in the manifest"
    problems = []
    for name, component in denoisers.items():
        cfg = json.loads((tmp_path / "src" / name / "config.json").read_text())
        expected = layers(cfg)
        assert expected > 0
        module = torch.jit.load(str(tmp_path / "pkg" / component["file"]))
        assert component["methods"], f"{family}: {name} lists no methods"
        for method in component["methods"]:
            problems += [f"{family} {name}.{p}" for p in attention_problems(module, method, expected)]
    assert not problems, "\n".join(problems)


# ----------------------------------------------------------------------------- the check can fail
class Attention(torch.nn.Module):
    """One attention layer over [B, heads, L, D], fused or written out."""

    def __init__(self, fused: bool):
        super().__init__()
        self.fused = fused

    def forward(self, q, k, v):
        if self.fused:
            return torch.nn.functional.scaled_dot_product_attention(q, k, v)
        return torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(q.size(-1)), dim=-1) @ v


def traced(module, *args):
    return torch.jit.trace_module(module, {"forward": args}, check_trace=False)


def test_the_check_catches_attention_written_out_and_a_wrong_count():
    q = torch.randn(1, 2, 5, 4)
    assert attention_problems(traced(Attention(True), q, q, q), "forward", 1) == []
    unfused = attention_problems(traced(Attention(False), q, q, q), "forward", 1)
    assert any("unfused attention: aten::softmax" in p for p in unfused), unfused
    assert any(f"0 {FUSED} calls, expected 1" in p for p in unfused), unfused
    assert attention_problems(traced(Attention(True), q, q, q), "forward", 2) == [f"forward: 1 {FUSED} calls, expected 2"]


def test_the_check_catches_a_wan_transformer_traced_with_attention_written_out(monkeypatch):
    """The tiny Wan transformer traced as the export traces it (both methods), with diffusers'
    SDPA call replaced by softmax(q k^T) v: each layer's softmax is reported, no fused call left."""
    from vgen_export.reference_loop import compact_context
    from vgen_export.tiny_wan import tiny_transformer

    model = tiny_transformer().eval()
    cfg = dict(model.config)
    wrapper = ew.TransformerExport(model).eval()
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(2, cfg["in_channels"], 2, 4, 4, generator=gen)
    t = torch.tensor([500.0, 500.0])
    ctx = torch.randn(2, 8, cfg["text_dim"], generator=gen)
    ctx[:, 3:] = 0
    compact, bias = compact_context(ctx, [3, 3])

    def written_out(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
        logits = query @ key.transpose(-1, -2) * (scale or query.size(-1) ** -0.5)
        return torch.softmax(logits if attn_mask is None else logits + attn_mask, dim=-1) @ value

    with torch.no_grad():
        fused = torch.jit.trace_module(wrapper, {"forward": (x, t, ctx), "forward_compact": (x, t, compact, bias)},
                                       check_trace=False)
        monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", written_out)
        unfused = torch.jit.trace_module(wrapper, {"forward": (x, t, ctx), "forward_compact": (x, t, compact, bias)},
                                         check_trace=False)
    for method in ("forward", "forward_compact"):
        assert attention_problems(fused, method, wan_layers(cfg)) == []
        problems = attention_problems(unfused, method, wan_layers(cfg))
        assert sum("aten::softmax" in p for p in problems) == wan_layers(cfg), problems
        assert problems[-1] == f"{method}: 0 {FUSED} calls, expected {wan_layers(cfg)}"
