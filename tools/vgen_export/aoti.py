"""AOTInductor packages (``--compile aoti``): a component's methods exported with torch.export
(dynamic dims declared) and compiled by Inductor into one ``.pt2`` for one device type, which
vgen loads with torch::inductor::AOTIModelPackageLoader (stages/model/aoti_backend.cpp).

One .pt2 holds one compiled model per method, named after it: "<method>-model" ("forward-model",
"forward_compact-model"; torch 2.11's AOTIModelPackageLoader takes the first model whose name
starts with the one asked for, so no model name may be the start of another: hence the suffix).
"forward" is always one of them, and its metadata lists them all.
Each model's metadata records the torch version and device type it was built for (the C++
loader refuses a package for another of either before it opens the shared library). What
Inductor cannot compile (complex numbers, a data-dependent branch) fails the export by name:
nothing is dropped silently, and the TorchScript file stays the package's fallback.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import tempfile
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch

# The C++ loader reads these from each model's metadata (AOTIModelPackageLoader::get_metadata).
TORCH_KEY = "vgen_torch"
DEVICE_KEY = "vgen_device"
METHOD_KEY = "vgen_method"
METHODS_KEY = "vgen_methods"  # every method of the package, comma-separated (the loader's list)
# each input's dims and their ranges, "dim:min:max" ','-separated, inputs ';'-separated: the
# compiled code checks no shape, so the loader refuses (and falls back on) a call outside them
INPUT_RANGES_KEY = "vgen_input_ranges"
MODEL_SUFFIX = "-model"


def model_name(method: str) -> str:
    return method + MODEL_SUFFIX


@dataclass
class Method:
    """One method to compile: a module whose forward is the method, example args (the export
    shapes), their dynamic shapes (torch.export's spec) and checks: (args, eager reference)."""
    module: torch.nn.Module
    args: tuple
    dynamic_shapes: Any
    checks: list[tuple[tuple, torch.Tensor]] = field(default_factory=list)




def export_method(name: str, m: Method):
    """torch.export of one method with its dynamic shapes, as compile_aoti compiles it. Raises
    naming the method when export refuses (e.g. a guard that narrows a declared range)."""
    from torch.fx.experimental import _config as fx_config

    try:
        # size-oblivious: a dim declared from 1 stays one graph for 1 and more (one latent frame,
        # one row), instead of export specialising 1 away
        with fx_config.patch(backed_size_oblivious=True):
            return torch.export.export(m.module, m.args, dynamic_shapes=m.dynamic_shapes, strict=False)
    except Exception as e:  # noqa: BLE001 - re-raised with the method's name
        raise RuntimeError(f"aoti: torch.export of method '{name}' failed: {e}") from e


def check_exports(methods: dict[str, Method], device: str) -> dict[str, Any]:
    """Exports every method as compile_aoti would and stops before Inductor: what torch.export
    refuses on `device` shows without compiling. The methods' modules and args may be fake
    tensors (fake_device below), so a machine without the device checks its export: run 3 of
    the GPU check lost its compiled phase to a CUDA-only guard that this finds on a CPU.
    Returns the dynamic symbols' ranges per method; raises as export_method does."""
    ranges = {}
    for name, m in methods.items():
        ep = export_method(name, m)
        ranges[name] = {str(s): [_bound(r.lower), _bound(r.upper)] for s, r in ep.range_constraints.items()}
    return {"device": device, "torch": torch.__version__, "exported": sorted(methods), "ranges": ranges}


def _bound(v) -> int | str:
    try:
        return int(v)
    except (TypeError, ValueError, OverflowError):
        return str(v)  # sympy's infinity: unbounded


@contextlib.contextmanager
def fake_device(device: str):
    """Tensors and modules moved to `device` inside this context are torch's fake tensors (shapes,
    dtypes and the device's dispatch, no memory, no kernels), so that torch.export traces the
    device's decompositions where the device is absent (fake also where it is present: the
    check then costs no device memory)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode(allow_non_fake_inputs=True):
        yield


@contextlib.contextmanager
def _compile_threads(threads: int):
    """Inductor's parallel compile workers and the C++ compiler's OpenMP: `threads` at most (the
    machines we compile on are shared)."""
    from torch._inductor import config

    saved = config.compile_threads
    config.compile_threads = threads
    try:
        yield
    finally:
        config.compile_threads = saved


def compiled_kernel_count(pt2: Path) -> dict[str, dict[str, Any]]:
    """What Inductor generated, per method, read from the package's sources: its fused C++
    kernels (extern "C" cpp_fused_* in *.kernel.cpp), their OpenMP regions with a thread count
    fixed at compile time, and the ATen / oneDNN ops the wrapper still calls (aoti_torch_cpu_*,
    e.g. addmm_out, the attention)."""
    out: dict[str, dict[str, Any]] = {}
    with zipfile.ZipFile(pt2) as z:
        for name in z.namelist():
            if "/data/aotinductor/" not in name:
                continue
            method = name.split("/data/aotinductor/")[1].split("/")[0].removesuffix(MODEL_SUFFIX)
            entry = out.setdefault(method, {"fused_kernels": 0, "extern_ops": [], "fixed_thread_regions": 0})
            if name.endswith(".kernel.cpp"):
                text = z.read(name).decode(errors="replace")
                entry["fused_kernels"] += len(set(re.findall(r'extern "C"[^\n]*?(cpp_fused_\w+)\(', text)))
                # OpenMP regions pinned to the compiling machine's thread count (0 with dynamic threads)
                entry["fixed_thread_regions"] += len(re.findall(r"#pragma omp parallel num_threads\(", text))
            elif name.endswith(".wrapper.cpp"):
                text = z.read(name).decode(errors="replace")
                entry["extern_ops"] = sorted(set(entry["extern_ops"]) | set(re.findall(r"aoti_torch_cpu_(\w+)", text)))
    return out


def input_ranges(ep) -> str:
    """INPUT_RANGES_KEY's value for an ExportedProgram: each user input's static dims (min = max)
    and its dynamic dims that are a plain symbol with a finite range (a derived dim, e.g. 2*h,
    is left to the symbol's own check)."""
    import sympy

    user = set(ep.graph_signature.user_inputs)
    parts = []
    for node in ep.graph.nodes:
        if node.op != "placeholder" or node.name not in user:
            continue
        val = node.meta.get("val")
        dims = []
        for d, size in enumerate(getattr(val, "shape", ())):
            if isinstance(size, int):
                dims.append(f"{d}:{size}:{size}")
                continue
            expr = size.node.expr
            vr = ep.range_constraints.get(expr) if isinstance(expr, sympy.Symbol) else None
            if vr is not None and vr.lower.is_finite and vr.upper.is_finite:
                dims.append(f"{d}:{int(vr.lower)}:{int(vr.upper)}")
        parts.append(",".join(dims))
    return ";".join(parts)


def compile_aoti(methods: dict[str, Method], path: Path, device: str = "cpu", threads: int = 1,
                 tolerance: Callable[[torch.Tensor], float] | None = None) -> dict[str, Any]:
    """Exports and compiles every method into `path` (a .pt2), reloads it with torch's own
    loader and compares each method with its eager references. Returns the manifest's report:
    file facts, compile seconds, the dynamic dims kept, kernel counts and the checks. Raises
    naming the method when export or compilation fails."""
    if "forward" not in methods:
        raise ValueError("aoti: a package needs a 'forward' method (its metadata lists the others)")
    from torch._inductor import aot_compile
    from torch._inductor.package import load_package, package_aoti

    started = time.monotonic()
    files: dict[str, list] = {}
    dims: dict[str, list[str]] = {}
    work = Path(tempfile.mkdtemp(prefix="vgen_aoti_"))
    try:
        with _compile_threads(threads):
            for name, m in methods.items():
                ep = export_method(name, m)
                dims[name] = sorted(str(s) for s in ep.range_constraints)
                # freezing: the weights become constants Inductor may fold and prepack for oneDNN
                # (measured, medium bench transformer, CPU, 1 thread: 0.49 s per call without it,
                # 0.12 s with it, against TorchScript's 0.14 s)
                # dynamic_threads: each fused kernel's OpenMP region takes the calling thread's
                # thread count at run time (vgen's intra-op setting, at::set_num_threads) instead of
                # `#pragma omp parallel num_threads(N)` with N = torch.get_num_threads() of the
                # compiling process (2 here). Measured, medium bench transformer, forward_compact at
                # 2x16x3x16x16, 1 intra-op thread, 2 shared cores at load 15: kernels fixed at 2
                # threads 2.42 s per call, serial ones 0.50 s, TorchScript 0.68 s: the two-method
                # package was slow for this, not for holding two models (bench/results/aoti_*).
                options = {"aot_inductor.package": True, "freezing": True, "cpp.dynamic_threads": True,
                           "aot_inductor.output_path": str(work / name),
                           "aot_inductor.metadata": {TORCH_KEY: torch.__version__, DEVICE_KEY: device,
                                                     METHOD_KEY: name, METHODS_KEY: ",".join(methods),
                                                     INPUT_RANGES_KEY: input_ranges(ep)}}
                (work / name).mkdir()
                try:
                    files[model_name(name)] = aot_compile(ep.module(check_guards=False), m.args, options=options)
                except Exception as e:  # noqa: BLE001
                    raise RuntimeError(f"aoti: Inductor could not compile method '{name}': {e}") from e
        package_aoti(str(path), files)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    seconds = time.monotonic() - started
    checks = []
    for name, m in methods.items():
        loaded = load_package(str(path), model_name(name))
        for args, ref in m.checks:
            got = loaded(*args)
            got = got[0] if isinstance(got, (list, tuple)) else got
            diff = float((got.float() - ref.float()).abs().max())
            checks.append({"method": name, "shape": list(args[0].shape), "max_abs_diff": diff,
                           "tolerance": tolerance(ref) if tolerance else 1e-5})
    return {"compile_seconds": round(seconds, 2), "bytes": path.stat().st_size, "dynamic_symbols": dims,
            "kernels": compiled_kernel_count(path), "torch": torch.__version__, "device": device,
            "threads": threads, "checks": checks}


def compiled_entry(pkg_dir: Path, file_name: str, report: dict[str, Any], methods: list[str]) -> dict[str, Any]:
    """The component entry's ``compiled.<device>`` record (docs/MODEL_PACKAGE.md)."""
    from .manifest import component_entry

    return component_entry(pkg_dir, file_name, backend="aoti", torch=report["torch"], methods=methods,
                           compile_seconds=report["compile_seconds"])


def env_threads(default: int = 1) -> int:
    return int(os.environ.get("VGEN_AOTI_THREADS", str(default)))
