"""A package whose component does not fit in the memory left fails with a clear error before
it is loaded (exit 2, naming the file and both sizes, no output written) instead of the process
being killed mid-load. VGEN_MEMORY_AVAILABLE fakes a small machine (runtime/host_memory.hpp)."""
from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from tiny_packages import tiny_wan

ROOT = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("VGEN_BUILD_DIR", ROOT / "build"))
VGEN = BUILD / "bin" / "vgen"
pytestmark = pytest.mark.skipif(not VGEN.exists(), reason="build/bin/vgen not built")


@pytest.fixture(scope="module")
def package(tmp_path_factory):
    root = tmp_path_factory.mktemp("memory_limit")
    return tiny_wan(root / "pkg")


def render(package, out, limit):
    env = {k: v for k, v in os.environ.items() if k != "VGEN_MEMORY_AVAILABLE"}
    if limit is not None:
        env["VGEN_MEMORY_AVAILABLE"] = str(limit)
    return subprocess.run([str(VGEN), "render", "a red circle", "-o", str(out), "--model", str(package), "--steps", "1"],
                          capture_output=True, text=True, timeout=300, env=env)


def test_a_component_larger_than_the_memory_left_exits_2_naming_it(package, tmp_path):
    sizes = {n: c["bytes"] for n, c in json.loads((package / "manifest.json").read_text())["components"].items()}
    out = tmp_path / "o" / "clip.mp4"
    out.parent.mkdir()
    # Room for the text encoder (loaded first) but not for the transformer.
    limit = sizes["text_encoder"] + 1
    assert sizes["transformer"] > limit
    r = render(package, out, limit)
    assert r.returncode == 2, r.stderr
    assert re.search(r"model file '[^']*transformer\.pt' is \d+ kB but only \d+ kB of memory is available", r.stderr), r.stderr
    assert list(out.parent.iterdir()) == []
    # With the machine's own MemAvailable it renders.
    r = render(package, out, None)
    assert r.returncode == 0, r.stderr
    assert out.exists()


def test_a_malformed_limit_is_refused_naming_the_variable(package, tmp_path):
    r = render(package, tmp_path / "clip.mp4", "lots")
    assert r.returncode == 2, r.stderr
    assert "VGEN_MEMORY_AVAILABLE" in r.stderr
