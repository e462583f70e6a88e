"""The layers of docs/architecture.md, kept by reading memfs's own source.

Every module belongs to a package (or is a leaf), and each package imports only the
packages below it (`ALLOWED`), in every import form: `import memfs.x.y`, `from memfs.x
import y`, `from memfs import x`, lazy imports inside functions and imports for type
hints alike. State is written only by its own methods; the FUSE adapter never talks to
the network.
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
