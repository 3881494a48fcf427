"""tools/ is one installable distribution (tools/pyproject.toml) whose packages import each other
only by package name: no import cycle, no import that works only because a script's own folder
is on sys.path, no private name taken from another module, no sys.path edit anywhere in the
tooling, the benchmarks or these tests. Every `import` and `from ... import` of tools/**/*.py,
those inside functions included, is read with ast (nothing is imported, so no torch is needed)
and resolved the way the installed packages resolve it. A cycle works only as long as one side
imports lazily, and makes each module's behaviour depend on which was imported first."""
from __future__ import annotations

import ast
import importlib.util
import os
import tomllib
from pathlib import Path

ROOT = Path(os.environ.get("VGEN_SOURCE_DIR", Path(__file__).resolve().parents[2]))
TOOLS = ROOT / "tools"


def packages(tools: Path = TOOLS) -> dict[str, Path]:
    """Import name -> folder, as tools/pyproject.toml installs them."""
    config = tomllib.loads((tools / "pyproject.toml").read_text())["tool"]["setuptools"]
    folders = config.get("package-dir", {})
    return {name: (tools / folders.get(name, name)).resolve() for name in config["packages"]}


def module_name(file: Path, pkgs: dict[str, Path]) -> str | None:
    """The dotted name `file` is imported as (None: in no package)."""
    for name, folder in pkgs.items():
        if file.is_relative_to(folder):
            parts = list(file.relative_to(folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            return ".".join([name, *parts])
    return None


def resolve(name: str, pkgs: dict[str, Path]) -> list[Path]:
    """The files that importing dotted `name` executes: each package's __init__.py on the way,
    then the module. [] when `name` is not in one of the packages (a third-party import, or one
    that only a script folder on sys.path would have found)."""
    first, *rest = name.split(".")
    if first not in pkgs:
        return []
    here = pkgs[first]
    files = [here / "__init__.py"]
    for i, part in enumerate(rest):
        here = here / part
        if (here / "__init__.py").is_file():
            files.append(here / "__init__.py")
        elif i == len(rest) - 1 and here.with_suffix(".py").is_file():
            files.append(here.with_suffix(".py"))
        else:
            return []
    return [f.resolve() for f in files]


def imported_names(file: Path, pkgs: dict[str, Path]):
    """(node, absolute module name, names taken from it) for every import in `file`."""
    tree = ast.parse(file.read_text(), filename=str(file))
    own = module_name(file.resolve(), pkgs)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node, alias.name, []
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: from the package that holds `file`
                assert own is not None, f"{file}: relative import outside a package"
                base = own.split(".")
                base = base[:len(base) - node.level] if file.name != "__init__.py" else base[:len(base) - node.level + 1]
                name = ".".join(base + ([node.module] if node.module else []))
            else:
                name = node.module
            yield node, name, [alias.name for alias in node.names]


def imports_of(file: Path, pkgs: dict[str, Path]) -> set[Path]:
    """The tools/ files that `file` imports, at any depth of its code."""
    out: set[Path] = set()
    for _, name, names in imported_names(file, pkgs):
        found = resolve(name, pkgs)
        out.update(found)
        for member in names:  # `from pkg import module` imports pkg.module
            if found:
                out.update(resolve(f"{name}.{member}", pkgs))
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


def tools_files(tools: Path = TOOLS) -> list[Path]:
    return sorted(p.resolve() for p in tools.rglob("*.py") if "egg-info" not in str(p))


def import_graph(tools: Path = TOOLS) -> dict[Path, set[Path]]:
    pkgs = packages(tools)
    return {f: imports_of(f, pkgs) for f in tools_files(tools)}


def rel(path: Path) -> str:
    return path.relative_to(TOOLS.resolve()).as_posix()


def test_the_graph_sees_the_imports_it_must():
    graph = {rel(f): {rel(g) for g in gs} for f, gs in import_graph().items()}
    assert "vgen_export/reference_loop.py" in graph["vgen_export/wan.py"]  # from .reference_loop import
    assert "vgen_export/manifest.py" in graph["vgen_export/wan.py"]        # from . import manifest
    assert "vgen_export/common.py" in graph["vgen_export/ltx.py"]          # the exporters' shared parts
    assert "demo_model/model.py" in graph["demo_model/train.py"]           # relative, in a mapped folder
    assert "demo_model/export.py" in graph["demo_model/train.py"]          # inside a function
    assert "vgen_export/__init__.py" in graph["demo_model/export.py"]      # a package on the way
    assert "reference/wan_i2v_parity.py" in graph["reference/wan_a14b_i2v_parity.py"]  # vgen_reference.<module>


def test_cycles_are_found():
    a, b, c = Path("/a.py"), Path("/b.py"), Path("/c.py")
    assert cycles({a: {b}, b: {c}, c: {a}}) == [[a, b, c]]
    assert cycles({a: {b}, b: {c}, c: set()}) == []


def test_a_cycle_in_a_package_tree_is_found(tmp_path):
    """The whole path (pyproject map, relative and absolute imports, lazy ones) on a small tree."""
    (tmp_path / "pyproject.toml").write_text('[tool.setuptools]\npackages = ["vgen_a", "vgen_b"]\n'
                                             '[tool.setuptools.package-dir]\nvgen_a = "a"\nvgen_b = "vgen_b"\n')
    for folder in ("a", "vgen_b"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "__init__.py").write_text("")
    (tmp_path / "a" / "one.py").write_text("from .two import f\n")
    (tmp_path / "a" / "two.py").write_text("def f():\n    from vgen_b import three\n")
    (tmp_path / "vgen_b" / "three.py").write_text("import vgen_a.one\n")
    found = cycles(import_graph(tmp_path))
    assert [[p.name for p in cycle] for cycle in found] == [["one.py", "two.py", "three.py"]]  # a/, then vgen_b/


def test_tools_have_no_import_cycle():
    found = cycles(import_graph())
    assert not found, "import cycles in tools/: " + "; ".join(" <-> ".join(map(rel, cycle)) for cycle in found)


def test_every_tools_module_is_in_a_package():
    pkgs = packages()
    loose = [rel(f) for f in tools_files() if module_name(f, pkgs) is None]
    assert not loose, f"not in a package of tools/pyproject.toml (so not importable once installed): {loose}"


def test_no_import_relies_on_a_script_folder():
    """`import clips` from a sibling file works only while that folder is sys.path[0]."""
    pkgs = packages()
    stems = {f.stem for f in tools_files()} - {"__init__"}
    bad = [f"{rel(f)}:{node.lineno} {name}" for f in tools_files() for node, name, _ in imported_names(f, pkgs)
           if name.split(".")[0] in stems and not resolve(name, pkgs)]
    assert not bad, f"imports that only a script folder on sys.path resolves: {bad}"


def test_family_exporters_share_common_not_each_other():
    graph = {rel(f): {rel(g) for g in gs} for f, gs in import_graph().items()}
    assert "vgen_export/wan.py" not in graph["vgen_export/ltx.py"]
    assert "vgen_export/ltx.py" not in graph["vgen_export/wan.py"]


def python_files_using_tools() -> list[Path]:
    return tools_files() + sorted((ROOT / "tests" / "python").glob("*.py")) + sorted((ROOT / "bench").rglob("*.py"))


def test_no_private_name_is_imported_from_another_module():
    """What modules share is public (vgen_export.common); a `_name` stays inside its module."""
    pkgs = packages()
    bad = []
    for f in python_files_using_tools():
        aliases = {}  # local name -> a tools module it is bound to
        for node, name, names in imported_names(f, pkgs):
            if not resolve(name, pkgs):
                continue
            if isinstance(node, ast.ImportFrom):
                bad += [f"{f.name}:{node.lineno} from {name} import {n}" for n in names
                        if n.startswith("_") and not n.startswith("__")]
                aliases.update({a.asname or a.name: f"{name}.{a.name}" for a in node.names
                                if resolve(f"{name}.{a.name}", pkgs)})
            else:
                aliases.update({a.asname: a.name for a in node.names if a.asname})
        for node in ast.walk(ast.parse(f.read_text())):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases
                    and node.attr.startswith("_") and not node.attr.startswith("__")):
                bad.append(f"{f.name}:{node.lineno} {node.value.id}.{node.attr}")
    assert not bad, f"private names used across modules: {bad}"


def test_no_sys_path_edits():
    """The packages are installed (tools/setup.sh) or put on PYTHONPATH by CTest: nothing in the
    tooling, the benchmarks or the tests edits sys.path to find them."""
    bad = []
    for f in python_files_using_tools():
        for node in ast.walk(ast.parse(f.read_text())):
            target = None
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr in ("insert", "append", "extend")):
                target = node.func.value
            if isinstance(node, (ast.Assign, ast.AugAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                target = next((t.value if isinstance(t, ast.Subscript) else t for t in targets), None)
            if (isinstance(target, ast.Attribute) and target.attr == "path" and isinstance(target.value, ast.Name)
                    and target.value.id == "sys"):
                bad.append(f"{f.relative_to(ROOT)}:{node.lineno}")
    assert not bad, f"sys.path edits: {bad}"


def test_the_packages_import_from_this_source_tree():
    """Under CTest (PYTHONPATH, tests/CMakeLists.txt) or the editable install (tools/setup.sh),
    each package of pyproject.toml is this checkout's folder, as pyproject.toml maps it."""
    for name, folder in packages().items():
        spec = importlib.util.find_spec(name)
        assert spec is not None, f"{name} is not importable: run tools/setup.sh or the test through CTest"
        where = Path(next(iter(spec.submodule_search_locations))).resolve()
        assert where == folder, f"{name} imports from {where}, not {folder}"
