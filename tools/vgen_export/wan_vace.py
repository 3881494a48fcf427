"""Wan VACE (diffusers' WanVACEPipeline): the transformer with its control inputs, and the
manifest sections of a VACE package. Called by wan.export_wan when detect_wan names the
directory "wan2.1-vace" (model_index.json's WanVACEPipeline / the transformer's vace_layers).

The package takes (manifest ``inputs``) a control video (the job's ``video``), a mask video and
reference images, all optional as in diffusers (no video: zeros and an all-ones mask). The
runtime builds the control latents itself, as WanVACEPipeline does, from two VAE encoder calls
(``vae_encoder.pt``: the inactive ``video * (1 - mask)`` and reactive ``video * mask`` parts,
the mask thresholded at 0.5), one per reference image (a single frame, its latents put in front
of the video's, paired with zeros), and the mask packed 8x8 into 64 channels (nearest-exact
in time, zeros on the reference frames): 16 + 16 + 64 = 96 = vace_in_channels.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import torch

from . import manifest as mf
from .common import dtype_tolerance, load_saved, max_diff, save_module


class TransformerVaceExport(torch.nn.Module):
    """forward(x [B,16,F',H',W'], t float32 [B], context [B,L,D], control [B,96,F',H',W'],
    control_scale float32 [B, len(vace_layers)]) -> flow prediction.

    WanVACETransformer3DModel.forward, step for step, except that the conditioning scale is
    per row (diffusers takes one per layer for the whole batch): rows of jobs with different
    conditioning scales then share a call, and a row's hint * scale is the same product as
    diffusers' (the scale cast to the transformer dtype, as the pipeline does). The control
    tokens cover every latent frame (the pipeline's reference frames are in both), so
    diffusers' zero padding of missing control tokens never applies."""

    def __init__(self, transformer):
        super().__init__()
        self.transformer = transformer
        self.vace_layers = [int(i) for i in transformer.config.vace_layers]

    def forward(self, hidden_states, timestep, encoder_hidden_states, control_hidden_states, control_scale):
        m = self.transformer
        b, _, f, h, w = hidden_states.shape
        p_t, p_h, p_w = m.config.patch_size
        rotary_emb = m.rope(hidden_states)
        hidden_states = m.patch_embedding(hidden_states).flatten(2).transpose(1, 2)
        control = m.vace_patch_embedding(control_hidden_states).flatten(2).transpose(1, 2)
        temb, timestep_proj, encoder_hidden_states, _ = m.condition_embedder(timestep, encoder_hidden_states, None)
        timestep_proj = timestep_proj.unflatten(1, (6, -1))
        scale = control_scale.to(hidden_states.dtype)
        hints = []
        for block in m.vace_blocks:
            hint, control = block(hidden_states, encoder_hidden_states, control, timestep_proj, rotary_emb)
            hints.append(hint)
        k = 0
        for i, block in enumerate(m.blocks):
            hidden_states = block(hidden_states, encoder_hidden_states, timestep_proj, rotary_emb)
            if i in self.vace_layers:
                hidden_states = hidden_states + hints[k] * scale[:, k].reshape(-1, 1, 1)
                k += 1
        shift, sc = (m.scale_shift_table + temb.unsqueeze(1)).chunk(2, dim=1)
        hidden_states = (m.norm_out(hidden_states.float()) * (1 + sc) + shift).type_as(hidden_states)
        hidden_states = m.proj_out(hidden_states)
        hidden_states = hidden_states.reshape(b, f // p_t, h // p_h, w // p_w, p_t, p_h, p_w, -1)
        hidden_states = hidden_states.permute(0, 7, 1, 4, 2, 5, 3, 6)
        return hidden_states.flatten(6, 7).flatten(4, 5).flatten(2, 3)


def export_transformer_vace(transformer, path: Path, max_length: int, dtype, gen) -> dict[str, Any]:
    """Traces TransformerVaceExport and checks the reloaded module against diffusers' own
    forward (one scale per batch, as diffusers takes it) at other shapes, and rows with
    different scales against each row alone."""
    cfg = transformer.config
    wrapper = TransformerVaceExport(transformer).eval()
    layers = len(cfg.vace_layers)
    _, ph, pw = cfg.patch_size

    def inputs(b, f, h, w):
        x = torch.randn(b, cfg.in_channels, f, h * ph, w * pw, generator=gen).to(dtype)
        t = torch.rand(b, generator=gen) * 1000.0
        ctx = torch.randn(b, max_length, cfg.text_dim, generator=gen).to(dtype)
        control = torch.randn(b, cfg.vace_in_channels, f, h * ph, w * pw, generator=gen).to(dtype)
        scale = (0.5 + torch.rand(b, layers, generator=gen))
        return x, t, ctx, control, scale

    trace_shape = (2, 2, 2, 2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traced = torch.jit.trace(wrapper, inputs(*trace_shape), check_trace=False)
    saved = save_module(traced, path)
    loaded = load_saved(path)
    checks = []
    for shape in ((1, 3, 3, 4), (3, 1, 1, 1), trace_shape):
        x, t, ctx, control, scale = inputs(*shape)
        scale = scale[:1].expand(shape[0], layers).contiguous()  # diffusers: one scale for the batch
        ref = transformer(hidden_states=x, timestep=t, encoder_hidden_states=ctx, control_hidden_states=control,
                          control_hidden_states_scale=scale[0].to(dtype), return_dict=False)[0]
        checks.append({"shape": list(x.shape), "max_abs_diff": max_diff(loaded(x, t, ctx, control, scale), ref),
                       "tolerance": dtype_tolerance(dtype, ref)})
    x, t, ctx, control, scale = inputs(2, 2, 2, 3)  # two rows, each its own scale
    both = loaded(x, t, ctx, control, scale)
    for r in range(2):
        ref = transformer(hidden_states=x[r:r + 1], timestep=t[r:r + 1], encoder_hidden_states=ctx[r:r + 1],
                          control_hidden_states=control[r:r + 1], control_hidden_states_scale=scale[r].to(dtype),
                          return_dict=False)[0]
        checks.append({"shape": list(x.shape), "row": r, "max_abs_diff": max_diff(both[r:r + 1], ref),
                       "tolerance": dtype_tolerance(dtype, ref)})
    b, f, h, w = trace_shape
    return {"trace_shape": [b, cfg.in_channels, f, h * ph, w * pw], **saved, "checks": checks,
            "compact_context": {"checks": [], "usable": False, "why": "not exported for VACE (forward only)"}}


def add_vace_sections(manifest: dict[str, Any], out_dir: Path, tcfg: dict[str, Any]) -> None:
    """components.vae_encoder, ``vace`` (what the control input is made of) and ``inputs``."""
    manifest["components"]["vae_encoder"] = mf.component_entry(
        out_dir, "vae_encoder.pt", format="torchscript", dtype="float32", methods=["forward", "encode_first"])
    manifest["vace"] = {
        "layers": [int(i) for i in tcfg["vace_layers"]],
        "in_channels": int(tcfg["vace_in_channels"]),
        "control": "[inactive latents; reactive latents; mask packed 8x8 -> 64 channels], reference frames first",
        "transformer_inputs": "forward(x, t float32 [B], context [B,L,D], control [B,96,F',H',W'], "
                              "control_scale float32 [B, layers])",
        "vae_encoder_input": "float32 [B,3,F,H,W] in [-1,1]; output: the posterior mean",
    }
    manifest["inputs"] = {"video": "optional", "mask_video": "optional", "reference_images": "optional"}
