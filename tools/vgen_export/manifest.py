"""The vgen model package manifest (``manifest.json``): build, write, read, validate.

The format is specified in docs/MODEL_PACKAGE.md. Readers must reject a manifest whose
``format`` is not ``vgen-model-package`` or whose ``format_version`` they do not know.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

FORMAT = "vgen-model-package"
FORMAT_VERSION = 1
FAMILY_WAN21_T2V = "wan2.1-t2v"
FAMILY_WAN21_I2V = "wan2.1-i2v"
FAMILY_WAN21_FLF2V = "wan2.1-flf2v"
FAMILY_WAN22_A14B_T2V = "wan2.2-a14b-t2v"
FAMILY_WAN22_A14B_I2V = "wan2.2-a14b-i2v"
FAMILY_WAN22_TI2V = "wan2.2-ti2v"
FAMILY_WAN21_VACE = "wan2.1-vace"
FAMILY_LTX_VIDEO = "ltx-video"
FAMILY_LTX2 = "ltx2"
FAMILY_HUNYUAN15 = "hunyuan-video-1.5"
FAMILY_SKYREELS_V2_DF = "skyreels-v2-df"
FAMILIES = (FAMILY_WAN21_T2V, FAMILY_WAN21_I2V, FAMILY_WAN21_FLF2V, FAMILY_WAN22_A14B_T2V, FAMILY_WAN22_A14B_I2V,
            FAMILY_WAN22_TI2V, FAMILY_WAN21_VACE, FAMILY_LTX_VIDEO, FAMILY_LTX2, FAMILY_HUNYUAN15, FAMILY_SKYREELS_V2_DF)
# Components a family needs besides REQUIRED_COMPONENTS.
FAMILY_COMPONENTS = {FAMILY_WAN21_I2V: ("image_encoder", "vae_encoder"), FAMILY_WAN21_FLF2V: ("image_encoder", "vae_encoder"),
                     FAMILY_WAN22_A14B_T2V: ("transformer_2",), FAMILY_WAN22_A14B_I2V: ("transformer_2", "vae_encoder"),
                     FAMILY_WAN22_TI2V: ("vae_encoder",), FAMILY_WAN21_VACE: ("vae_encoder",), FAMILY_HUNYUAN15: ("text_encoder_2",),
                     FAMILY_SKYREELS_V2_DF: ("vae_encoder",)}
MANIFEST_NAME = "manifest.json"

# Components whose file must exist and whose sha256 is checked by readers.
REQUIRED_COMPONENTS = ("tokenizer", "text_encoder", "transformer", "vae_decoder")
REQUIRED_KEYS = (
    "format",
    "format_version",
    "family",
    "dtype",
    "components",
    "tokenizer",
    "text_encoder",
    "scheduler",
    "latent",
    "transformer",
    "resolution",
    "frames",
    "defaults",
    "export_checks",
)


class ManifestError(ValueError):
    """A manifest that this reader must refuse."""


def sha256_file(path: Path | str, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while True:
            block = f.read(chunk)
            if not block:
                break
            h.update(block)
    return h.hexdigest()


def component_entry(pkg_dir: Path, file_name: str, **extra: Any) -> dict[str, Any]:
    """``{"file", "sha256", "bytes", ...extra}`` for a file already written into the package."""
    path = Path(pkg_dir) / file_name
    return {"file": file_name, "sha256": sha256_file(path), "bytes": path.stat().st_size, **extra}


def package_head(family: str, dtype: str, diffusers_dir: Path | str, tiny: bool, seed: int,
                 **source: Any) -> dict[str, Any]:
    """A manifest's first keys: format, version, family, dtype and ``source`` (what the package was
    exported from, and with which torch / diffusers / transformers). ``source`` keys given here
    (``pipeline``) stand after ``diffusers_dir``: key order is the file's order."""
    import diffusers
    import torch
    import transformers

    return {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "family": family,
        "dtype": dtype,
        "source": {"diffusers_dir": str(diffusers_dir), **source, "tiny": tiny, "seed": seed if tiny else None,
                   "torch": torch.__version__, "diffusers": diffusers.__version__,
                   "transformers": transformers.__version__},
    }


def torchscript_components(pkg_dir: Path, dtype: str, transformer: dict[str, Any] | None = None,
                           vae_decoder_methods: tuple[str, ...] = ("forward",),
                           vae_encoder_methods: tuple[str, ...] = ("forward",)) -> dict[str, Any]:
    """The ``components`` of a package exported as TorchScript with a SentencePiece tokenizer:
    tokenizer.model, text_encoder.pt and transformer.pt in ``dtype`` (``transformer``: more keys of
    its entry), vae_decoder.pt and vae_encoder.pt in float32."""
    return {
        "tokenizer": component_entry(pkg_dir, "tokenizer.model", format="sentencepiece"),
        "text_encoder": component_entry(pkg_dir, "text_encoder.pt", format="torchscript", dtype=dtype,
                                        methods=["forward"]),
        "transformer": component_entry(pkg_dir, "transformer.pt", format="torchscript", dtype=dtype,
                                       methods=["forward"], **(transformer or {})),
        "vae_decoder": component_entry(pkg_dir, "vae_decoder.pt", format="torchscript", dtype="float32",
                                       methods=list(vae_decoder_methods)),
        "vae_encoder": component_entry(pkg_dir, "vae_encoder.pt", format="torchscript", dtype="float32",
                                       methods=list(vae_encoder_methods)),
    }


def t5_tokenizer_section(sp, max_length: int, **extra: Any) -> dict[str, Any]:
    """``tokenizer`` for a T5-style SentencePiece model ``sp`` (tokenizer.model): an EOS after at most
    max_length - 1 pieces, padded on the right; ``extra`` keys follow."""
    return {"file": "tokenizer.model", "type": "sentencepiece", "vocab_size": sp.vocab_size(),
            "max_length": max_length, "pad_id": sp.pad_id(), "eos_id": sp.eos_id(), "unk_id": sp.unk_id(),
            "add_eos": True, "padding": "right", "truncation": "pieces[:max_length-1] + [eos]", **extra}


def _jsonable(value: Any) -> Any:
    """Scheduler configs hold tuples, numpy scalars and FrozenDicts: make them plain JSON."""
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if hasattr(value, "item") and callable(value.item) and not isinstance(value, (str, bytes)):
        try:
            return value.item()
        except (ValueError, TypeError):
            pass
    if hasattr(value, "tolist"):
        return value.tolist()
    return value


def scheduler_section(scheduler) -> dict[str, Any]:
    """``{"type": class name, "config": the diffusers config dict}`` (private keys dropped)."""
    config = {k: v for k, v in dict(scheduler.config).items() if not k.startswith("_")}
    return {"type": type(scheduler).__name__, "config": _jsonable(config)}


def link_package(src: Path | str, dst: Path | str) -> None:
    """A copy of package `src` in `dst` (replaced) whose files are hard links where the file
    system allows, else copies, without its manifest: the caller writes dst's own (writing
    through a link would change the source's)."""
    import os
    import shutil

    src, dst = Path(src), Path(dst)
    shutil.rmtree(dst, ignore_errors=True)

    def link_or_copy(a, b):
        try:
            os.link(a, b)
        except OSError:
            shutil.copy2(a, b)

    shutil.copytree(src, dst, copy_function=link_or_copy)
    (dst / MANIFEST_NAME).unlink()


def write_manifest(pkg_dir: Path | str, manifest: dict[str, Any]) -> Path:
    validate_manifest(manifest)
    path = Path(pkg_dir) / MANIFEST_NAME
    path.write_text(json.dumps(_jsonable(manifest), indent=2, sort_keys=False) + "\n")
    return path


def validate_manifest(manifest: dict[str, Any]) -> None:
    """Structural checks every reader performs (no file access)."""
    if manifest.get("format") != FORMAT:
        raise ManifestError(f"not a vgen model package (format={manifest.get('format')!r})")
    version = manifest.get("format_version")
    if version != FORMAT_VERSION:
        raise ManifestError(
            f"unsupported format_version {version!r}: this reader knows only {FORMAT_VERSION}"
        )
    missing = [k for k in REQUIRED_KEYS if k not in manifest]
    if missing:
        raise ManifestError(f"manifest lacks {missing}")
    if manifest["family"] not in FAMILIES:
        raise ManifestError(f"unknown family {manifest['family']!r}")
    for name in REQUIRED_COMPONENTS + FAMILY_COMPONENTS.get(manifest["family"], ()):
        entry = manifest["components"].get(name)
        if not entry or "file" not in entry or "sha256" not in entry:
            raise ManifestError(f"component {name!r} missing or lacks file/sha256")


def read_manifest(pkg_dir: Path | str, verify_files: bool = True) -> dict[str, Any]:
    """Load and validate ``manifest.json``; with ``verify_files`` also check every sha256."""
    pkg_dir = Path(pkg_dir)
    manifest = json.loads((pkg_dir / MANIFEST_NAME).read_text())
    validate_manifest(manifest)
    if verify_files:
        for name, entry in manifest["components"].items():
            path = pkg_dir / entry["file"]
            if not path.is_file():
                raise ManifestError(f"component {name!r}: {entry['file']} is missing")
            digest = sha256_file(path)
            if digest != entry["sha256"]:
                raise ManifestError(f"component {name!r}: sha256 mismatch ({digest} != {entry['sha256']})")
    return manifest
