"""tools/ has no import cycle: every `import` and `from ... import` of tools/**/*.py, those inside
functions included, read with ast (nothing is imported, so no torch is needed). A cycle works
only as long as one side imports lazily, and makes each module's behaviour depend on which was
imported first."""
from __future__ import annotations

import ast
import os
from pathlib import Path

ROOT = Path(os.environ.get("VGEN_SOURCE_DIR", Path(__file__).resolve().parents[2]))
TOOLS = ROOT / "tools"


def module_files() -> dict[Path, Path]:
    """Each tools/ Python file by its own path (resolved)."""
    return {p.resolve(): p for p in TOOLS.rglob("*.py")}


def resolve(name: str, search: list[Path]) -> list[Path]:
    """The files that importing dotted `name` executes, looked up in `search` (the importing
    script's own folder, then tools/, as the scripts' sys.path has them): each package's
    __init__.py on the way, then the module."""
    for base in search:
        parts, files, here = name.split("."), [], base
        for i, part in enumerate(parts):
            here = here / part
            if (here / "__init__.py").is_file():
                files.append((here / "__init__.py").resolve())
            elif i == len(parts) - 1 and here.with_suffix(".py").is_file():
                files.append(here.with_suffix(".py").resolve())
            else:
                files = []
                break
        if files:
            return files
    return []


def imports_of(file: Path) -> set[Path]:
    """The tools/ files that `file` imports, at any depth of its code."""
    tree = ast.parse(file.read_text(), filename=str(file))
    search = [file.parent, TOOLS]
    package = file.parent if (file.parent / "__init__.py").is_file() else None
    out: set[Path] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                out.update(resolve(alias.name, search))
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: from the package that holds `file`
                assert package is not None, f"{file}: relative import outside a package"
                base = package
                for _ in range(node.level - 1):
                    base = base.parent
                prefix = ".".join(base.relative_to(TOOLS).parts)
                name = f"{prefix}.{node.module}" if node.module else prefix
                where = [TOOLS]
            else:
                name, where = node.module, search
            found = resolve(name, where)
            out.update(found)
            for alias in node.names:  # `from pkg import module` imports pkg.module
                if found:
                    out.update(resolve(f"{name}.{alias.name}", where))
    out.discard(file.resolve())
    return out


def cycles(graph: dict[Path, set[Path]]) -> list[list[Path]]:
    """Strongly connected components with more than one file (Tarjan)."""
    index: dict[Path, int] = {}
    low: dict[Path, int] = {}
    stack: list[Path] = []
    on_stack: set[Path] = set()
    found: list[list[Path]] = []

    def visit(v: Path) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def import_graph() -> dict[Path, set[Path]]:
    return {f: imports_of(f) for f in module_files()}


def test_the_graph_sees_the_imports_it_must():
    graph = import_graph()
    rel = {f.relative_to(TOOLS.resolve()).as_posix(): {g.relative_to(TOOLS.resolve()).as_posix() for g in gs}
           for f, gs in graph.items()}
    assert "vgen_export/reference_loop.py" in rel["vgen_export/export_wan.py"]  # from .reference_loop import
    assert "vgen_export/manifest.py" in rel["vgen_export/export_wan.py"]        # from . import manifest
    assert "demo_model/model.py" in rel["demo_model/train.py"]                  # a script's own folder
    assert "demo_model/export.py" in rel["demo_model/train.py"]                 # inside a function
    assert "vgen_export/__init__.py" in rel["demo_model/export.py"]             # a package on the way


def test_cycles_are_found():
    a, b, c = Path("/a.py"), Path("/b.py"), Path("/c.py")
    assert cycles({a: {b}, b: {c}, c: {a}}) == [[a, b, c]]
    assert cycles({a: {b}, b: {c}, c: set()}) == []


def test_tools_have_no_import_cycle():
    found = cycles(import_graph())
    assert not found, "import cycles in tools/: " + "; ".join(
        " <-> ".join(p.relative_to(TOOLS.resolve()).as_posix() for p in cycle) for cycle in found)
