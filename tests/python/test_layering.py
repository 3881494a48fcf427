"""The C++ layers keep to their own vocabulary (issue 29): runtime/ is a domain-free core and
api/ names no model family. Reads the sources only (nothing is built or imported).

- runtime/ (comments included) says none of the denoising words: previews, preemption, the
  step cache, resumes, denoise/decode/encode/preprocess. A stage's vocabulary belongs in
  stages/ and reaches the core through a job's generic detail (runtime/job.hpp).
- api/ names no model family (the folders of stages/families/): a new model is a folder and a
  registration, not an edit of the library.
- No #include runs from runtime/ to stages/ or api/.
"""
from __future__ import annotations

import os
import re
from pathlib import Path

ROOT = Path(os.environ.get("VGEN_SOURCE_DIR", Path(__file__).resolve().parents[2]))
SOURCES = {".hpp", ".cpp", ".h", ".cc", ".txt", ".cmake"}

DENOISE_WORDS = re.compile(r"preview|preempt|step[ _-]?cache|resumed|denois|decode|encode|preprocess", re.IGNORECASE)
INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]([^">]+)[">]')


def files(folder: str) -> list[Path]:
    return sorted(p for p in (ROOT / folder).rglob("*") if p.is_file() and (p.suffix in SOURCES or p.name == "CMakeLists.txt"))


def hits(folder: str, pattern: re.Pattern[str]) -> list[str]:
    out = []
    for path in files(folder):
        for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if pattern.search(line):
                out.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    return out


def family_names() -> list[str]:
    names = sorted(p.name for p in (ROOT / "stages" / "families").iterdir() if p.is_dir())
    assert names, "stages/families/ has no family folder"
    return names


def family_pattern(names: list[str]) -> re.Pattern[str]:
    # "wan", "Wan21", "wan_family", "LTX", "LtxFamily"; not "want" or "swan".
    words = "|".join(re.escape(n) for n in names)
    camel = "|".join(re.escape(n[:1].upper() + n[1:]) for n in names)
    return re.compile(rf"(?i:(?<![a-z])(?:{words})(?![a-z]))|(?<![A-Za-z])(?:{camel})(?=[A-Z])")


def test_the_patterns_catch_what_they_are_for():
    for bad in ("JobPreview", "report_preview", "preempted", "step cache", "step_cache", "resumed", "denoiser",
                "JobState::decode", "encoded", "preprocess"):
        assert DENOISE_WORDS.search(bad), bad
    pattern = family_pattern(["wan", "ltx"])
    for bad in ("wan", "Wan21", "stages/families/wan/wan_family.hpp", "LTX-Video", "LtxFamily", "WanFamily", "ltx2"):
        assert pattern.search(bad), bad
    for fine in ("want", "swan", "wanted", "saltx", "a warning"):
        assert not pattern.search(fine), fine


def test_runtime_has_no_denoise_vocabulary():
    found = hits("runtime", DENOISE_WORDS)
    assert not found, "denoising words in runtime/ (say 'a stage'; keep the vocabulary in stages/):\n" + "\n".join(found)


def test_api_names_no_model_family():
    found = hits("api", family_pattern(family_names()))
    assert not found, "model family names in api/:\n" + "\n".join(found)


def test_runtime_includes_neither_stages_nor_api():
    found = []
    for path in files("runtime"):
        for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            m = INCLUDE.match(line)
            if m and m.group(1).split("/")[0] in ("stages", "api"):
                found.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    assert not found, "includes from runtime/ into stages/ or api/:\n" + "\n".join(found)
