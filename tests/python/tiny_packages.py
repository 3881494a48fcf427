"""The tiny random Wan packages the Python tests render, exported once per build instead of once
per test file: some twenty files exported the same tiny float32 package in their module fixture
(~15 s of a core each, 20-40 s under `ctest -j2`). The first test that needs one exports it into
$VGEN_BUILD_DIR/test-packages/<key> under a file lock (a second process waits on the lock, then
copies); every caller gets its own copy, so a test that writes into its package changes no other
test's. The key covers the export's arguments, the exporter's sources (tools/vgen_export) and the
torch/diffusers/transformers versions, so an edited exporter exports afresh. Without
VGEN_BUILD_DIR (a bare pytest run) the package is exported straight into the destination."""
from __future__ import annotations

import fcntl
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import shutil
from pathlib import Path


def _key(kind: str, args: dict) -> str:
    # Versions from the installed metadata: importing diffusers and transformers takes seconds.
    versions = [importlib.metadata.version(p) for p in ("torch", "diffusers", "transformers", "sentencepiece")]
    h = hashlib.sha256(json.dumps([kind, args, versions], sort_keys=True).encode())
    tools = Path(importlib.util.find_spec("vgen_export").origin).resolve().parent
    for f in sorted(tools.rglob("*.py")):
        h.update(f.relative_to(tools).as_posix().encode())
        h.update(f.read_bytes())
    return h.hexdigest()[:20]


def _export_wan(dest: Path, variant: str, video_input: bool) -> None:
    from vgen_export import wan as ew
    from vgen_export.tiny_wan import write_tiny_wan

    work = dest.parent / f"{dest.name}.src"
    src = write_tiny_wan(work / f"diffusers-{variant}", seed=0, variant=variant)
    ew.export_wan(src, dest, dtype="float32", tiny=True, seed=0, video_input=video_input)
    shutil.rmtree(work)


def tiny_wan(dest, variant: str = "t2v", video_input: bool = False) -> Path:
    """The tiny random Wan package of `variant` (t2v, i2v, ...; seed 0, float32) at `dest`, which
    must not exist; video_input: with the VAE encoder (export_wan's video_input)."""
    dest = Path(dest)
    build = os.environ.get("VGEN_BUILD_DIR")
    if not build:
        _export_wan(dest, variant, video_input)
        return dest
    store = Path(build) / "test-packages"
    store.mkdir(parents=True, exist_ok=True)
    cached = store / f"wan-{variant}{'-v2v' if video_input else ''}-{_key('wan', {'variant': variant, 'video_input': video_input})}"
    with open(store / f"{cached.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # held while exporting; released when the file closes
        if not cached.is_dir():
            partial = store / f"{cached.name}.partial-{os.getpid()}"
            shutil.rmtree(partial, ignore_errors=True)
            _export_wan(partial, variant, video_input)
            os.rename(partial, cached)  # whole or absent: a killed export leaves only .partial-*
    shutil.copytree(cached, dest)
    return dest
