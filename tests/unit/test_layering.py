"""The layers of docs/architecture.md, kept by reading memfs's own source.

Every module belongs to a package (or is a leaf), and each package imports only the
packages below it (`ALLOWED`), in every import form: `import memfs.x.y`, `from memfs.x
import y`, `from memfs import x`, lazy imports inside functions and imports for type
hints alike. No two modules of memfs import each other, directly or around a circle,
in any of these forms (`TYPE_CHECKING` imports included): a circle makes the modules
one unit that can only be read, typed and changed together. State is written only by
its own methods; the FUSE adapter never talks to the network.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

SOURCE = Path(__file__).resolve().parents[2] / "memfs"
LEAVES = {"errors", "config", "paths", "logs", "metrics", "audit"}
PACKAGES = {"cli", "worker", "mount", "control", "sync", "state", "store", "server"}

# package -> the memfs packages (or leaves) it may import, besides itself and the leaves
ALLOWED: dict[str, set[str]] = {
    "cli": {"worker", "mount", "control", "sync", "state", "store", "server"},
    "worker": {"control"},
    "mount": {"control", "sync", "state", "store"},
    "control": set(),
    "sync": {"state", "store"},
    "state": set(),
    "store": set(),
    "server": set(),
}
# modules that may import nothing of an otherwise allowed package
FORBIDDEN_MODULES: dict[str, set[str]] = {
    "cli": {"memfs.mount.fs", "memfs.mount.daemon"},  # the CLI reaches a daemon by launch()
}
THIRD_PARTY_FORBIDDEN: dict[str, set[str]] = {
    "sync": {"pyfuse3"},
    "state": {"pyfuse3", "httpx", "trio"},
    "store": {"pyfuse3"},
    "control": {"pyfuse3"},
    "server": {"pyfuse3"},
}


def _modules() -> list[Path]:
    return sorted(p for p in SOURCE.rglob("*.py") if "__pycache__" not in p.parts)


def _unit(path: Path) -> str:
    """The package a module belongs to, or the leaf's own name."""
    rel = path.relative_to(SOURCE)
    return rel.parts[0] if len(rel.parts) > 1 else rel.stem


def _imported(path: Path) -> set[str]:
    """Every module named by an import in `path`, fully dotted."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            raise AssertionError(f"{path}: relative import")
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
    return found


def _memfs_units(names: set[str]) -> set[str]:
    units = set()
    for name in names:
        parts = name.split(".")
        if parts[0] == "memfs" and len(parts) > 1 and parts[1] in PACKAGES | LEAVES:
            units.add(parts[1])
    return units


def test_every_module_is_in_a_package_or_a_leaf() -> None:
    stray = [
        str(p.relative_to(SOURCE))
        for p in _modules()
        if _unit(p) not in PACKAGES | LEAVES | {"__init__"}
    ]
    assert stray == []


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(SOURCE)))
def test_imports_only_point_down(path: Path) -> None:
    unit = _unit(path)
    names = _imported(path)
    used = _memfs_units(names) - {unit}
    if unit in LEAVES or unit == "__init__":
        allowed = LEAVES
    else:
        allowed = ALLOWED[unit] | LEAVES
    assert used - allowed == set(), f"{unit} may import only {sorted(allowed)}"
    assert names & FORBIDDEN_MODULES.get(unit, set()) == set()
    third = {n.split(".")[0] for n in names}
    assert third & THIRD_PARTY_FORBIDDEN.get(unit, set()) == set()


def test_the_rule_sees_every_import_form(tmp_path: Path) -> None:
    """A check of the checker: each form names the package it imports."""
    sample = tmp_path / "sample.py"
    sample.write_text(
        "import memfs.sync.engine\nfrom memfs import mount\n"
        "def f():\n    from memfs.store.client import StoreClient\n"
        "if True:\n    from memfs.cli import main\n"
    )
    assert _memfs_units(_imported(sample)) == {"sync", "mount", "store", "cli"}


def _module_name(path: Path, source: Path) -> str:
    parts = path.relative_to(source.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _import_graph(source: Path) -> dict[str, set[str]]:
    """Module -> the modules of the same tree it imports, in every form `_imported` sees.
    `from memfs.x import y` names the module `memfs.x.y` when there is one, else
    `memfs.x` (a package's own `__init__`, which its submodules' import runs first but
    which is no edge of theirs)."""
    paths = {
        _module_name(p, source): p for p in source.rglob("*.py") if "__pycache__" not in p.parts
    }
    graph: dict[str, set[str]] = {}
    for name, path in paths.items():
        _imported(path)  # refuses relative imports
        edges: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                for alias in node.names:
                    sub = f"{node.module}.{alias.name}"
                    edges.add(sub if sub in paths else node.module)
            elif isinstance(node, ast.Import):
                edges.update(alias.name for alias in node.names)
        graph[name] = {other for other in edges if other in paths and other != name}
    return graph


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(name: str) -> None:
        index[name] = low[name] = len(index)
        stack.append(name)
        on_stack.add(name)
        for other in sorted(graph[name]):
            if other not in index:
                visit(other)
                low[name] = min(low[name], low[other])
            elif other in on_stack:
                low[name] = min(low[name], index[other])
        if low[name] == index[name]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == name:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for name in sorted(graph):
        if name not in index:
            visit(name)
    return sorted(found)


def test_no_import_circle_between_modules() -> None:
    """Each circle is listed with its modules; break it by moving what both need into a
    module below them, or by handing one side what it uses (a parameter, a protocol)."""
    assert _circles(_import_graph(SOURCE)) == []


def test_the_circle_rule_sees_type_only_and_lazy_imports(tmp_path: Path) -> None:
    """A check of the checker: a circle closed only under TYPE_CHECKING, or only inside a
    function, is still a circle; a one-way import is none."""
    pkg = tmp_path / "memfs"
    (pkg / "state").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "state" / "__init__.py").write_text("")
    (pkg / "state" / "a.py").write_text("from memfs.state.b import B\n")
    (pkg / "state" / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from memfs.state.a import A\n"
    )
    (pkg / "state" / "c.py").write_text("def f():\n    from memfs.state import d\n")
    (pkg / "state" / "d.py").write_text("import memfs.state.c\n")
    (pkg / "state" / "e.py").write_text("from memfs.state import a\n")
    (pkg / "sync" / "__init__.py").parent.mkdir()
    (pkg / "sync" / "__init__.py").write_text("from memfs.sync.f import F\n")
    (pkg / "sync" / "f.py").write_text("from memfs.sync import g\n")
    (pkg / "sync" / "g.py").write_text("")
    assert _circles(_import_graph(pkg)) == [
        ["memfs.state.a", "memfs.state.b"],
        ["memfs.state.c", "memfs.state.d"],
    ]


def test_only_the_state_layer_touches_the_journal() -> None:
    offenders = []
    for path in sorted(SOURCE.rglob("*.py")):
        if path.parent.name == "state":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and node.attr == "journal":
                offenders.append(f"{path.relative_to(SOURCE)}:{node.lineno}")
    assert offenders == []


def _own(target: ast.Attribute | ast.Subscript) -> bool:
    """`self.x`, an item of it (`self.x[k]`), or an item of a local (`stats[k]`)."""
    base = target.value
    if isinstance(target, ast.Subscript):
        if isinstance(base, ast.Name):
            return True
        if isinstance(base, ast.Attribute):
            target, base = base, base.value  # `result.versions[k]`: as `result.versions`
    if isinstance(target, ast.Attribute) and isinstance(base, ast.Name) and base.id == "result":
        return True  # the pass's own PassResult
    while isinstance(base, ast.Attribute):  # self.pusher.x: a part of the engine
        if base.attr == "state":
            return False
        base = base.value
    return isinstance(base, ast.Name) and base.id == "self"


@pytest.mark.parametrize("name", ["engine", "fetcher", "plan", "landing", "pusher"])
def test_the_sync_engine_writes_no_node_fields(name: str) -> None:
    """Nodes change only through StoreState's methods: the engine assigns attributes of
    itself and of its own results (`PassResult`), never of a node or the state."""
    offenders = []
    for node in ast.walk(ast.parse((SOURCE / "sync" / f"{name}.py").read_text())):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = list(node.targets)
        elif isinstance(node, ast.AugAssign | ast.AnnAssign):
            targets = [node.target]
        elif isinstance(node, ast.Delete):
            targets = list(node.targets)
        while any(isinstance(t, ast.Tuple | ast.List) for t in targets):
            targets = [
                e for t in targets for e in (t.elts if isinstance(t, ast.Tuple | ast.List) else [t])
            ]
        for target in targets:
            if isinstance(target, ast.Attribute | ast.Subscript) and not _own(target):
                offenders.append(f"{name}.py:{node.lineno}")
    assert offenders == []


MAX_LINES = 600


def test_no_module_is_over_600_lines_but_those_architecture_md_names() -> None:
    """A module holds one job: one over 600 lines is named, with its job, in
    architecture.md's "Module size" paragraph (so a module that grows past it is either
    split or argued for there)."""
    text = (SOURCE.parent / "docs" / "architecture.md").read_text()
    paragraph = text[text.index("**Module size.**") :]
    paragraph = paragraph[: paragraph.index("\n\n")]
    named = set(re.findall(r"`([\w/]+\.py)`\s+\(", paragraph))
    large = {
        str(p.relative_to(SOURCE))
        for p in _modules()
        if len(p.read_text().splitlines()) > MAX_LINES
    }
    assert large - named == set()
