"""docs/ARCHITECTURE.md matches the tree it describes (pure Python: reads files, builds nothing).

- Every source folder (a folder under runtime/, stages/, api/ or apps/ that holds .cpp/.hpp
  files) has its own line in the layer picture, section "(a) Layers".
- Every family registered in the tree (each `families().add("<name>", ...)` in
  stages/families/**/*.cpp and tests/families/**/*.cpp) has a row in the family table,
  section "(c) The registered families", and the table lists no family that is not registered.
- Every repository path the file names (runtime/, stages/, api/, apps/, tools/, tests/, cmake/,
  bench/, web/, configs/, models/, with a file extension or as a folder with a trailing slash)
  exists, and so does every component named in backticks without an extension
  (`stages/exec/batcher`: its .hpp or .cpp).
- Every `Class::method` in the job's path block, section "(b) One job's path", is defined or
  declared in the sources.

Each failure names what is missing, so the doc is mended where the tree moved."""
from __future__ import annotations

import os
import re
from pathlib import Path

ROOT = Path(os.environ.get("VGEN_SOURCE_DIR", Path(__file__).resolve().parents[2]))
DOC = ROOT / "docs" / "ARCHITECTURE.md"
LAYERS = ("runtime", "stages", "api", "apps")
SOURCE_SUFFIXES = {".cpp", ".hpp"}


def doc_text() -> str:
    return DOC.read_text(encoding="utf-8")


def section(text: str, heading_start: str) -> str:
    """The body of the first Markdown heading that starts with `heading_start` (any level),
    up to the next heading of the same or a higher level."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        m = re.match(r"(#+)\s+(.*)", line)
        if m and m.group(2).startswith(heading_start):
            level = len(m.group(1))
            body = []
            in_code = False
            for rest in lines[i + 1:]:
                if rest.startswith("```"):
                    in_code = not in_code
                h = re.match(r"(#+)\s", rest)
                if not in_code and h and len(h.group(1)) <= level:
                    break
                body.append(rest)
            return "\n".join(body)
    raise AssertionError(f"docs/ARCHITECTURE.md has no section '{heading_start}'")


def code_block(body: str) -> str:
    """The first fenced code block of a section."""
    m = re.search(r"^```[^\n]*\n(.*?)^```", body, re.S | re.M)
    assert m, "the section has no code block"
    return m.group(1)


def source_folders() -> list[str]:
    """Folders under the layers that hold C++ sources themselves, as 'stages/media/'."""
    out = set()
    for layer in LAYERS:
        for f in (ROOT / layer).rglob("*"):
            if f.is_file() and f.suffix in SOURCE_SUFFIXES:
                out.add(f.parent.relative_to(ROOT).as_posix() + "/")
    return sorted(out)


def registered_families() -> dict[str, str]:
    """Manifest name -> the file that registers it."""
    out = {}
    add = re.compile(r'families\(\)\.add\(\s*"([^"]+)"')
    for base in (ROOT / "stages" / "families", ROOT / "tests" / "families"):
        for f in sorted(base.rglob("*.cpp")):
            for name in add.findall(f.read_text(encoding="utf-8")):
                out[name] = f.relative_to(ROOT).as_posix()
    return out


def test_every_source_folder_is_in_the_layer_picture():
    picture = code_block(section(doc_text(), "(a) Layers"))
    # A folder counts when a line of the picture starts with it (its own line, not a mention).
    drawn = {line.split()[0] for line in picture.splitlines() if line.strip() and not line.startswith(" ")}
    folders = source_folders()
    assert len(folders) >= 10, f"found only {folders}: is ROOT ({ROOT}) the repository?"
    missing = [f for f in folders if f not in drawn]
    assert not missing, (
        "source folders missing from the layer picture of docs/ARCHITECTURE.md "
        "(section '(a) Layers', one line starting with the folder): " + ", ".join(missing))
    gone = sorted(d for d in drawn if d.endswith("/") and d.split("/")[0] in LAYERS and d not in folders)
    assert not gone, "the layer picture draws folders that hold no sources: " + ", ".join(gone)


def test_every_registered_family_is_in_the_family_table():
    table = section(doc_text(), "(c) The registered families")
    rows = {}
    for line in table.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")] if line.lstrip().startswith("|") else []
        if len(cells) >= 3 and (m := re.fullmatch(r"`([^`]+)`", cells[0])):
            rows[m.group(1)] = cells
    families = registered_families()
    assert len(families) >= 2, f"found no registrations under stages/families/ ({families})"
    missing = [f"{name} (registered in {where})" for name, where in families.items() if name not in rows]
    assert not missing, ("registered families missing from the family table of docs/ARCHITECTURE.md "
                         "(section '(c) The registered families'): " + ", ".join(missing))
    unknown = sorted(set(rows) - set(families))
    assert not unknown, "the family table lists families nothing registers: " + ", ".join(unknown)
    for name, where in families.items():
        folder = Path(where).parent.as_posix() + "/"
        assert f"`{folder}`" in rows[name][1], f"family {name}: the table's folder should be `{folder}` ({where})"


PATH = re.compile(
    r"(?<![\w./-])((?:runtime|stages|api|apps|tools|tests|cmake|bench|web|configs|models)/[\w./{},-]*)")


def expand_braces(path: str) -> list[str]:
    m = re.search(r"\{([^{}]*)\}", path)
    if not m:
        return [path]
    return [p for alt in m.group(1).split(",") for p in expand_braces(path[:m.start()] + alt + path[m.end():])]


def named_paths(text: str) -> set[str]:
    """Repository paths the doc names: with a file extension, or a folder with a trailing slash.
    Placeholders (`tests/<folder>/...`, globs) are not paths."""
    out = set()
    for m in PATH.finditer(text):
        raw = m.group(1).rstrip(".,")
        after = text[m.end():m.end() + 1]
        if after in "<*" or "*" in raw:
            continue  # a placeholder or a glob
        for p in expand_braces(raw):
            if p.endswith("/") or re.search(r"\.[A-Za-z0-9]+$", p.split("/")[-1]):
                out.add(p)
    return out


def named_components(text: str) -> set[str]:
    """Component names in backticks, without an extension (`stages/exec/batcher`)."""
    return {m.group(1) for m in re.finditer(r"`((?:runtime|stages|api|apps)/[\w/]*\w)`", text)}


def component_exists(name: str) -> bool:
    return any((ROOT / (name + ext)).exists() for ext in ("", ".hpp", ".cpp"))


def test_every_named_path_exists():
    text = doc_text()
    paths = named_paths(text)
    assert len(paths) >= 20, f"found only {sorted(paths)}"
    missing = sorted(p for p in paths if not (ROOT / p).exists())
    missing += sorted(f"{c} (no {c}.hpp or {c}.cpp)" for c in named_components(text) if not component_exists(c))
    assert not missing, "docs/ARCHITECTURE.md names paths that do not exist: " + ", ".join(missing)


def strip_comments(code: str) -> str:
    code = re.sub(r"/\*.*?\*/", " ", code, flags=re.S)
    code = re.sub(r'"(?:\\.|[^"\\\n])*"', '""', code)
    return re.sub(r"//[^\n]*", " ", code)


def sources() -> dict[Path, str]:
    out = {}
    for layer in LAYERS:
        for f in (ROOT / layer).rglob("*"):
            if f.is_file() and f.suffix in SOURCE_SUFFIXES:
                out[f] = strip_comments(f.read_text(encoding="utf-8"))
    return out


def class_bodies(code: str, name: str) -> list[str]:
    """The bodies of `class name` / `struct name` definitions in `code` (braces matched)."""
    out = []
    for m in re.finditer(rf"\b(?:class|struct)\s+{re.escape(name)}\b[^;{{]*\{{", code):
        depth, i = 1, m.end()
        while i < len(code) and depth:
            depth += {"{": 1, "}": -1}.get(code[i], 0)
            i += 1
        out.append(code[m.end():i - 1])
    return out


def has_member(srcs: dict[Path, str], cls: str, member: str) -> bool:
    """Defined out of line (`Cls::member(`), or declared/defined in the class's body."""
    out_of_line = re.compile(rf"\b{re.escape(cls)}::{re.escape(member)}\s*[(<]")
    in_body = re.compile(rf"\b{re.escape(member)}\b\s*[(<{{=;]")
    for code in srcs.values():
        if out_of_line.search(code):
            return True
        if any(in_body.search(body) for body in class_bodies(code, cls)):
            return True
    return False


def test_every_method_of_the_job_path_exists():
    block = code_block(section(doc_text(), "(b) One job's path"))
    names = sorted(set(re.findall(r"\b([A-Z]\w*)::(~?\w+)", block)))
    assert len(names) >= 20, f"found only {names}"
    srcs = sources()
    missing = [f"{c}::{m}" for c, m in names if not has_member(srcs, c, m)]
    assert not missing, ("the job's path in docs/ARCHITECTURE.md names what the sources neither define nor "
                         "declare: " + ", ".join(missing))
