"""Which Wan pipeline a diffusers directory holds, and whether vgen can export it.

``detect_wan(dir)`` reads only JSON (``model_index.json`` and the component configs) and names
the variant from what diffusers itself switches on: the pipeline class, an ``image_encoder``,
``transformer_2`` with ``boundary_ratio`` (Wan 2.2 A14B), ``expand_timesteps`` and the z_dim-48
VAE (Wan 2.2 TI2V-5B), the transformer's ``in_channels`` (16 text-to-video, 36 = noise 16 +
mask 4 + condition 16 image-to-video) and ``pos_embed_seq_len`` (first-last-frame).

``check_exportable(variant)`` raises ``UnsupportedWanPipeline`` naming the variant and why,
for anything the exporter cannot write yet or a directory whose parts disagree, so that no
package is written silently as the wrong family.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

T2V, I2V, VACE = "WanPipeline", "WanImageToVideoPipeline", "WanVACEPipeline"
# Variants the exporter writes (manifest ``family``).
EXPORTABLE = ("wan2.1-t2v", "wan2.1-i2v", "wan2.1-flf2v", "wan2.2-a14b-t2v", "wan2.2-a14b-i2v", "wan2.2-ti2v",
              "wan2.1-vace")


class UnsupportedWanPipeline(ValueError):
    """A diffusers directory the exporter refuses; the message names the variant and why."""


@dataclass
class WanVariant:
    name: str                      # "wan2.1-t2v", "wan2.1-i2v", "wan2.1-flf2v", "wan2.2-ti2v", "wan2.2-a14b-t2v", ...
    pipeline: str                  # model_index.json's _class_name
    in_channels: int
    z_dim: int
    image_encoder: bool
    two_experts: bool
    boundary_ratio: float | None
    expand_timesteps: bool
    problems: list[str] = field(default_factory=list)  # why its parts disagree (refused)


def _read(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise UnsupportedWanPipeline(f"{path.parent.name}/{path.name} is missing in {path.parent.parent}")
    return json.loads(path.read_text())


def _present(index: dict[str, Any], name: str) -> bool:
    """A component listed with a library and class (diffusers writes [null, null] for none)."""
    entry = index.get(name)
    return isinstance(entry, (list, tuple)) and len(entry) == 2 and entry[0] is not None and entry[1] is not None


def detect_wan(diffusers_dir: Path | str) -> WanVariant:
    root = Path(diffusers_dir)
    index = _read(root / "model_index.json")
    pipeline = str(index.get("_class_name", ""))
    if pipeline not in (T2V, I2V, VACE):
        raise UnsupportedWanPipeline(
            f"{root}: pipeline {pipeline or '(no _class_name)'} is not one vgen exports "
            f"(it exports {T2V}, {I2V} and {VACE} directories)")
    tname = "transformer" if _present(index, "transformer") else "transformer_2"
    tcfg = _read(root / tname / "config.json")
    vcfg = _read(root / "vae" / "config.json")
    in_ch, z_dim = int(tcfg["in_channels"]), int(vcfg.get("z_dim", 16))
    two = _present(index, "transformer_2") or index.get("boundary_ratio") is not None
    expand = bool(index.get("expand_timesteps") or False)
    v = WanVariant(name="", pipeline=pipeline, in_channels=in_ch, z_dim=z_dim,
                   image_encoder=_present(index, "image_encoder"), two_experts=two,
                   boundary_ratio=index.get("boundary_ratio"), expand_timesteps=expand)
    image_model = in_ch != z_dim  # noise + mask + condition channels: needs an image
    # VACE (WanVACEPipeline): the transformer's config lists vace_layers, whatever the pipeline
    # class says; control = inactive + reactive latents + the 8x8-packed mask.
    vace = pipeline == VACE or tcfg.get("vace_layers") is not None
    if vace:
        v.name = "wan2.2-vace" if two else "wan2.1-vace"
        if pipeline != VACE:
            v.problems.append(f"a transformer with vace_layers in a {pipeline} directory")
        if tcfg.get("vace_layers") is None:
            v.problems.append("WanVACEPipeline without transformer vace_layers")
        elif int(tcfg.get("vace_in_channels", 96)) != 2 * z_dim + 64:
            v.problems.append(f"vace_in_channels {tcfg.get('vace_in_channels')}: VACE needs {2 * z_dim + 64} "
                              f"(inactive {z_dim} + reactive {z_dim} + mask 64)")
        if in_ch != z_dim:
            v.problems.append(f"transformer in_channels {in_ch} != vae z_dim {z_dim} (VACE denoises the latents alone)")
        return v
    if two:
        v.name = "wan2.2-a14b-" + ("i2v" if image_model else "t2v")
        if not _present(index, "transformer_2") or v.boundary_ratio is None:
            v.problems.append("transformer_2 and boundary_ratio must come together")
        if image_model:
            # Wan2.2-I2V-A14B: the first frame enters through the channels only (noise + mask +
            # condition), per-row timesteps, no image embeddings.
            if pipeline != I2V:
                v.problems.append(f"two experts with in_channels {in_ch} (image-to-video) in a {pipeline} directory")
            if in_ch != 2 * z_dim + 4:
                v.problems.append(f"transformer in_channels {in_ch}: image-to-video needs {2 * z_dim + 4} "
                                  f"(noise {z_dim} + mask 4 + condition {z_dim})")
            if v.image_encoder or tcfg.get("image_dim") is not None:
                v.problems.append("an image_encoder or transformer image_dim with two experts (A14B I2V takes no "
                                  "image embeddings)")
            if expand:
                v.problems.append("expand_timesteps with two experts (A14B I2V keeps one timestep per row)")
    elif expand or z_dim == 48:
        v.name = "wan2.2-ti2v"
        # TI2V-5B conditions on the image through the latents (the first latent frame kept
        # clean), never through extra channels or an image encoder.
        if in_ch != z_dim:
            v.problems.append(f"transformer in_channels {in_ch} != vae z_dim {z_dim} (TI2V denoises the latents alone)")
        if not expand:
            v.problems.append("a z_dim-48 VAE without expand_timesteps (TI2V needs per-token timesteps)")
        if v.image_encoder:
            v.problems.append("an image_encoder with expand_timesteps (TI2V takes no image embeddings)")
        if not vcfg.get("patch_size") or not vcfg.get("is_residual"):
            v.problems.append("TI2V needs the Wan 2.2 VAE (patch_size and is_residual set)")
    elif pipeline == I2V or image_model:
        v.name = "wan2.1-flf2v" if tcfg.get("pos_embed_seq_len") else "wan2.1-i2v"
        if pipeline != I2V:
            v.problems.append(f"transformer in_channels {in_ch} != vae z_dim {z_dim} (an image-to-video "
                              f"transformer) in a {pipeline} directory")
        if in_ch != 2 * z_dim + 4:
            v.problems.append(f"transformer in_channels {in_ch}: image-to-video needs {2 * z_dim + 4} "
                              f"(noise {z_dim} + mask 4 + condition {z_dim})")
        if not v.image_encoder or tcfg.get("image_dim") is None:
            v.problems.append("Wan 2.1 image-to-video needs an image_encoder and a transformer image_dim")
    else:
        v.name = "wan2.1-t2v"
    return v


def check_exportable(v: WanVariant) -> None:
    if v.problems:
        raise UnsupportedWanPipeline(f"{v.pipeline} directory detected as {v.name}, but: " + "; ".join(v.problems))
    if v.name not in EXPORTABLE:
        why = "two VACE experts are not implemented" if v.name == "wan2.2-vace" else "not implemented"
        raise UnsupportedWanPipeline(f"{v.pipeline} directory detected as {v.name}: vgen cannot export it yet "
                                     f"({why}); it exports {', '.join(EXPORTABLE)}")
