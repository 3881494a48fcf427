"""What every exporter shares (Wan and LTX): the package dtypes, finding the SentencePiece file,
tracing without warnings noise, device-agnostic (and, for large modules, split) saving, and the
jit-vs-eager checks. Family exporters import from here, never from each other."""

from __future__ import annotations

import hashlib
import json
import os
import struct
import warnings
from pathlib import Path
from typing import Any

import torch

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}

# Components whose weights reach this many bytes are saved split: the TorchScript file keeps
# the code and empty placeholders, the weights go to <stem>.safetensors beside it, named in
# the extra file "vgen_weights" ({"file", "sha256"}). vgen maps that file instead of copying
# it (stages/mapped_weights.hpp); load_saved() does the same here. 0 splits every component.
SPLIT_ABOVE = int(os.environ.get("VGEN_SPLIT_WEIGHTS_ABOVE", str(256 << 20)))
WEIGHTS_EXTRA = "vgen_weights"
_ST_DTYPES = {torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16", torch.float64: "F64",
              torch.int64: "I64", torch.int32: "I32", torch.int16: "I16", torch.int8: "I8", torch.uint8: "U8",
              torch.bool: "BOOL", torch.float8_e4m3fn: "F8_E4M3"}  # (fp8 variants' Linear weights)


def find_spm_file(diffusers_dir: Path) -> Path:
    """The SentencePiece model of a diffusers pipeline's tokenizer/ folder (T5 and UMT5 alike)."""
    tok_dir = Path(diffusers_dir) / "tokenizer"
    for name in ("spiece.model", "tokenizer.model"):
        if (tok_dir / name).is_file():
            return tok_dir / name
    found = sorted(tok_dir.glob("*.model"))
    if not found:
        raise FileNotFoundError(f"no SentencePiece .model under {tok_dir}")
    return found[0]


def two_frame_cache(cache: torch.Tensor) -> torch.Tensor:
    """Normalise a causal-conv cache to exactly 2 frames (zero frames in front): equivalent
    for a kernel-3 causal conv, whose own padding would supply those zeros."""
    if cache.shape[2] >= 2:
        return cache[:, :, -2:]
    zero = torch.zeros_like(cache[:, :, :1])
    return torch.cat([zero] * (2 - cache.shape[2]) + [cache], 2)


def trace_quietly(module, inputs):
    with warnings.catch_warnings():
        # Expected: deprecation notices and shape-constant branches (see MODEL_PACKAGE.md).
        warnings.simplefilter("ignore")
        return torch.jit.trace(module, inputs, check_trace=False)


def method_graphs(module: torch.jit.ScriptModule):
    for name, sub in module.named_modules():
        for method in sub._c._method_names():  # noqa: SLF001
            yield f"{name or '<root>'}.{method}", sub._c._get_method(method).graph  # noqa: SLF001


def count_device_constants(module: torch.jit.ScriptModule) -> int:
    return sum(1 for _, g in method_graphs(module) for n in g.findAllNodes("prim::Constant")
               if n.output().type().kind() == "DeviceObjType")


def make_device_agnostic(module: torch.jit.ScriptModule) -> int:
    """Tracing records every ``.to(x.device)`` / ``arange(device=...)`` with the trace-time
    device as a constant (here "cpu"), which breaks the module on a GPU. Replace each such
    constant by ``prim::device`` of the graph's first tensor input (all inputs of a package
    module live on one device). Returns the number of constants replaced."""
    replaced = 0
    for name, graph in method_graphs(module):
        consts = [n for n in graph.findAllNodes("prim::Constant")
                  if n.output().type().kind() == "DeviceObjType"]
        if not consts:
            continue
        tensors = [v for v in graph.inputs() if v.type().kind() == "TensorType"]
        if not tensors:
            raise RuntimeError(f"{name}: device constant but no tensor input to take the device from")
        device = graph.create("prim::device", [tensors[0]], 1)
        device.output().setType(torch._C.DeviceObjType.get())  # noqa: SLF001
        device.insertBefore(next(iter(graph.nodes())))
        for const in consts:
            const.output().replaceAllUsesWith(device.output())
            const.destroy()
            replaced += 1
    return replaced


class Handoff:
    """Carries the only reference to a large module into the function that may free it (a
    caller's local variable would keep it alive for the whole call)."""

    def __init__(self, module):
        self.module = module

    def take(self):
        module, self.module = self.module, None
        return module


def _weights(module: torch.jit.ScriptModule) -> list[tuple[str, torch.Tensor]]:
    """Every parameter and buffer slot, shared ones under each of their names (a tied weight,
    e.g. T5's embedding, is written once per name: the loaders fill slots by name)."""
    return list(module.named_parameters(remove_duplicate=False)) + list(module.named_buffers(remove_duplicate=False))


def _owner(module: torch.jit.ScriptModule, name: str):
    c = module._c  # noqa: SLF001 - the C++ module: slots are replaced there, not in eager modules
    *path, leaf = name.split(".")
    for part in path:
        c = c.getattr(part)
    return c, leaf


def write_weights(path: Path, named: list[tuple[str, torch.Tensor]]) -> str:
    """Streams the tensors into a safetensors file, largest element size first (so that every
    tensor starts at a multiple of its element size) with the data region 64-byte aligned;
    no second copy of the weights is made. Returns the file's sha256."""
    named = sorted(named, key=lambda kv: -kv[1].element_size())
    header, offset = {}, 0
    for name, t in named:
        if t.dtype not in _ST_DTYPES:
            raise ValueError(f"{path.name}: tensor '{name}' has dtype {t.dtype}, not storable in safetensors")
        header[name] = {"dtype": _ST_DTYPES[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + t.numel() * t.element_size()]}
        offset += t.numel() * t.element_size()
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-(8 + len(text)) % 64)
    digest = hashlib.sha256()
    with open(path, "wb") as f:
        for chunk in (struct.pack("<Q", len(text)), text):
            f.write(chunk)
            digest.update(chunk)
        for _, t in named:
            data = memoryview(t.detach().contiguous().reshape(-1).view(torch.uint8).numpy())
            f.write(data)
            digest.update(data)
    return digest.hexdigest()


def load_weights(module: torch.jit.ScriptModule, path: Path) -> None:
    """Points the module's parameters and buffers at a private mapping of `path` (no copy)."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
    header.pop("__metadata__", None)
    start, size = 8 + n, path.stat().st_size
    storage = torch.UntypedStorage.from_file(str(path), shared=False, nbytes=size)
    named = dict(_weights(module))
    if set(named) != set(header):
        raise RuntimeError(f"{path.name}: tensors {sorted(set(header) ^ set(named))[:5]} do not match the module")
    with torch.no_grad():
        for name, t in named.items():
            begin = start + header[name]["data_offsets"][0]
            t.set_(storage, begin // t.element_size(), header[name]["shape"])


def load_saved(path: Path, map_location=None) -> torch.jit.ScriptModule:
    """torch.jit.load for a component save_module wrote, split or not."""
    extra = {WEIGHTS_EXTRA: ""}
    module = torch.jit.load(str(path), map_location=map_location, _extra_files=extra)
    info = extra[WEIGHTS_EXTRA]
    if info:
        load_weights(module, Path(path).parent / json.loads(info)["file"])
    return module


def save_module(module: torch.jit.ScriptModule, path: Path, split_above: int | None = None) -> dict[str, Any]:
    replaced = make_device_agnostic(module)
    named = _weights(module)
    total = sum(t.numel() * t.element_size() for _, t in named)
    split_above = SPLIT_ABOVE if split_above is None else split_above
    extra, stripped, weights = {}, [], None
    if named and total >= split_above:
        weights = path.with_suffix(".safetensors")
        sha = write_weights(weights, named)
        extra = {WEIGHTS_EXTRA: json.dumps({"file": weights.name, "sha256": sha})}
        for name, t in named:  # placeholders in the saved file; the traced module is restored
            owner, leaf = _owner(module, name)
            owner.setattr(leaf, torch.empty(0, dtype=t.dtype))
            stripped.append((owner, leaf, t))
    try:
        module.save(str(path), _extra_files=extra)
    finally:
        for owner, leaf, t in stripped:
            owner.setattr(leaf, t)
    left = count_device_constants(torch.jit.load(str(path)))
    if left:
        raise RuntimeError(f"{path.name}: {left} device constants survive")
    return {"device_constants_replaced": replaced, "device_constants_left": left,
            **({"weights_file": weights.name, "weights_bytes": total} if weights else {})}


def max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.float() - b.float()).abs().max())


def dtype_tolerance(dtype: torch.dtype, ref: torch.Tensor) -> float:
    return 1e-5 if dtype == torch.float32 else 1e-2 * (1.0 + float(ref.float().abs().max()))


def failed_checks(report: dict[str, Any]) -> list[dict[str, Any]]:
    return [c for c in report["checks"] if not c["max_abs_diff"] <= c["tolerance"]]  # NaN fails too


def assert_checks(name: str, report: dict[str, Any]) -> None:
    for check in failed_checks(report):
        raise RuntimeError(f"{name}: exported module differs from eager at {check['shape']}: "
                           f"{check['max_abs_diff']} > {check['tolerance']}")


def patchify_video(x, patch):
    """The Wan 2.2 VAE's pixel unshuffle before its encoder (identity without a patch size):
    each chunk is patchified on its own, which equals patchifying the whole video (per frame)."""
    if not patch:
        return x
    from diffusers.models.autoencoders.autoencoder_kl_wan import patchify

    return patchify(x, patch_size=patch)


def unpatchify_video(x, patch):
    """The Wan 2.2 VAE's pixel shuffle after its decoder (identity without a patch size); per
    chunk, as it acts on each frame alone, and before the clamp, which it commutes with."""
    if not patch:
        return x
    from diffusers.models.autoencoders.autoencoder_kl_wan import unpatchify

    return unpatchify(x, patch_size=patch)


def run_export(prog: str, tag: str, export, out: Path, diffusers: Path | None, seed: int,
               refused: type[Exception], checked: tuple[str, ...], **options: Any) -> int:
    """The end of an exporter's command line: export(diffusers, out, **options), or without
    ``diffusers`` a tiny random model first (``write_tiny_<tag>`` of ``tiny_<tag>.py`` into a
    temporary directory, ``tiny=True``); prints the package and its worst |jit - eager| over the
    ``checked`` components. Returns the exit code: 2, with the reason on stderr, when refused."""
    import importlib
    import sys
    import tempfile

    try:
        if diffusers is None:
            write_tiny = getattr(importlib.import_module(f".tiny_{tag}", __package__), f"write_tiny_{tag}")
            with tempfile.TemporaryDirectory(prefix=f"vgen_tiny_{tag}_") as tmp:
                src = write_tiny(Path(tmp) / "diffusers", seed=seed)
                manifest = export(src, out, tiny=True, seed=seed, **options)
        else:
            manifest = export(diffusers, out, **options)
    except refused as e:
        print(f"{prog}: refused: {e}", file=sys.stderr)
        return 2
    worst = max(c["max_abs_diff"] for n in checked for c in manifest["export_checks"][n]["checks"])
    print(f"wrote {out} ({manifest['family']}, {manifest['dtype']}); max |jit - eager| = {worst:.3g}")
    return 0


class ExportRefused(ValueError):
    """A checkpoint (or a part of it) that this exporter cannot reproduce; the message names it."""


def pipeline_index(diffusers_dir: Path, accepted: tuple[str, ...], what: str, parts: tuple[str, ...]) -> dict[str, Any]:
    """A diffusers directory's model_index.json, refused (ExportRefused) when there is none, when
    its pipeline class is not one of ``accepted`` (``what`` names the kind in the message) or when
    one of the component folders ``parts`` is missing."""
    index_file = diffusers_dir / "model_index.json"
    if not index_file.is_file():
        raise ExportRefused(f"{diffusers_dir}: no model_index.json (not a diffusers pipeline directory)")
    index = json.loads(index_file.read_text())
    cls = index.get("_class_name")
    if cls not in accepted:
        raise ExportRefused(f"{diffusers_dir}: pipeline {cls!r} is not {what} (accepted: {', '.join(accepted)})")
    for part in parts:
        if not (diffusers_dir / part).is_dir():
            raise ExportRefused(f"{diffusers_dir}: component {part!r} is missing")
    return index


def flow_match_euler_config(diffusers_dir: Path, family: str) -> dict[str, Any]:
    """scheduler/scheduler_config.json, refused unless it is a FlowMatchEulerDiscreteScheduler
    without the sigma options vgen does not port (``family`` names vgen's family in the message)."""
    sched = json.loads((diffusers_dir / "scheduler" / "scheduler_config.json").read_text())
    if sched.get("_class_name") != "FlowMatchEulerDiscreteScheduler":
        raise ExportRefused(f"scheduler {sched.get('_class_name')!r}: vgen's {family} family runs "
                            "FlowMatchEulerDiscreteScheduler only")
    for key in ("use_karras_sigmas", "use_exponential_sigmas", "use_beta_sigmas", "invert_sigmas", "stochastic_sampling"):
        if sched.get(key):
            raise ExportRefused(f"scheduler option {key}=true is not supported by vgen")
    return sched
