"""What every exported TorchScript module goes through (the Wan exporters share it): tracing
without warnings noise, device-agnostic saving, and the jit-vs-eager checks."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import torch


def _two_frames(cache: torch.Tensor) -> torch.Tensor:
    """Normalise a causal-conv cache to exactly 2 frames (zero frames in front): equivalent
    for a kernel-3 causal conv, whose own padding would supply those zeros."""
    if cache.shape[2] >= 2:
        return cache[:, :, -2:]
    zero = torch.zeros_like(cache[:, :, :1])
    return torch.cat([zero] * (2 - cache.shape[2]) + [cache], 2)


def _trace(module, inputs):
    with warnings.catch_warnings():
        # Expected: deprecation notices and shape-constant branches (see MODEL_PACKAGE.md).
        warnings.simplefilter("ignore")
        return torch.jit.trace(module, inputs, check_trace=False)


def _graphs(module: torch.jit.ScriptModule):
    for name, sub in module.named_modules():
        for method in sub._c._method_names():  # noqa: SLF001
            yield f"{name or '<root>'}.{method}", sub._c._get_method(method).graph  # noqa: SLF001


def count_device_constants(module: torch.jit.ScriptModule) -> int:
    return sum(1 for _, g in _graphs(module) for n in g.findAllNodes("prim::Constant")
               if n.output().type().kind() == "DeviceObjType")


def make_device_agnostic(module: torch.jit.ScriptModule) -> int:
    """Tracing records every ``.to(x.device)`` / ``arange(device=...)`` with the trace-time
    device as a constant (here "cpu"), which breaks the module on a GPU. Replace each such
    constant by ``prim::device`` of the graph's first tensor input (all inputs of a package
    module live on one device). Returns the number of constants replaced."""
    replaced = 0
    for name, graph in _graphs(module):
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


def _save(module: torch.jit.ScriptModule, path: Path) -> dict[str, int]:
    replaced = make_device_agnostic(module)
    module.save(str(path))
    left = count_device_constants(torch.jit.load(str(path)))
    if left:
        raise RuntimeError(f"{path.name}: {left} device constants survive")
    return {"device_constants_replaced": replaced, "device_constants_left": left}


def _max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.float() - b.float()).abs().max())


def _tolerance(dtype: torch.dtype, ref: torch.Tensor) -> float:
    return 1e-5 if dtype == torch.float32 else 1e-2 * (1.0 + float(ref.float().abs().max()))


def _failed_checks(report: dict[str, Any]) -> list[dict[str, Any]]:
    return [c for c in report["checks"] if not c["max_abs_diff"] <= c["tolerance"]]  # NaN fails too


def _assert_checks(name: str, report: dict[str, Any]) -> None:
    for check in _failed_checks(report):
        raise RuntimeError(f"{name}: exported module differs from eager at {check['shape']}: "
                           f"{check['max_abs_diff']} > {check['tolerance']}")


def _patchify(x, patch):
    """The Wan 2.2 VAE's pixel unshuffle before its encoder (identity without a patch size):
    each chunk is patchified on its own, which equals patchifying the whole video (per frame)."""
    if not patch:
        return x
    from diffusers.models.autoencoders.autoencoder_kl_wan import patchify

    return patchify(x, patch_size=patch)


def _unpatchify(x, patch):
    """The Wan 2.2 VAE's pixel shuffle after its decoder (identity without a patch size); per
    chunk, as it acts on each frame alone, and before the clamp, which it commutes with."""
    if not patch:
        return x
    from diffusers.models.autoencoders.autoencoder_kl_wan import unpatchify

    return unpatchify(x, patch_size=patch)
