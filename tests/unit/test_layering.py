"""The layers of docs/architecture.md, kept by reading memfs's own source.

State (node/tree/state/records/cache) is written only by its own methods; the FUSE adapter
never talks to the network; lower layers never import upper ones.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SOURCE = Path(__file__).resolve().parents[2] / "memfs"
STATE = {"cache", "node", "tree", "state", "records", "cachegc"}  # (cachegc: its collector)

# module -> memfs modules it must never import (directly)
FORBIDDEN = {
    "paths": {"client", "sync", "fs", "daemon", "node", "tree", "state", "cache", "fetcher",
              "session"},
    "errors": {"client", "sync", "fs", "daemon", "node", "tree", "state", "cache"},
    "cache": {"client", "sync", "fs", "daemon", "node", "tree", "state", "fetcher"},
    "records": {"client", "sync", "fs", "daemon", "fetcher"},
    "node": {"client", "sync", "fs", "daemon", "fetcher", "cache", "records", "tree"},
    "tree": {"client", "sync", "fs", "daemon", "fetcher", "cache", "records"},
    "state": {"client", "sync", "fs", "daemon", "fetcher"},
    "fs": {"client", "sync", "daemon", "fetcher", "session", "commands"},
    "fetcher": {"sync", "fs", "daemon"},
    "plan": {"client", "fs", "daemon", "sync", "landing", "pusher", "fetcher", "notify"},
    "landing": {"client", "fs", "daemon", "sync", "pusher", "fetcher"},
    "pusher": {"fs", "daemon", "sync", "session"},
    "sync": {"fs", "daemon", "session", "commands"},
    "client": {"sync", "fs", "daemon", "node", "tree", "state", "cache"},
    # configuration and the httpx client: below the calls, above nothing of the engine
    "connection": {"client", "wire", "sync", "fs", "daemon", "node", "tree", "state", "cache",
                   "metrics"},
}


def _tree(name: str) -> ast.Module:
    return ast.parse((SOURCE / f"{name}.py").read_text())


def _imports(module: ast.Module) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(module):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("memfs."):
            found.add(node.module.split(".")[1])
        elif isinstance(node, ast.Import):
            found.update(a.name.split(".")[1] for a in node.names
                         if a.name.startswith("memfs."))
    return found


@pytest.mark.parametrize("name", sorted(FORBIDDEN))
def test_lower_layers_do_not_import_upper_ones(name: str) -> None:
    assert _imports(_tree(name)) & FORBIDDEN[name] == set()


def test_only_the_state_layer_touches_the_journal() -> None:
    offenders = []
    for path in sorted(SOURCE.rglob("*.py")):
        if path.parent == SOURCE and path.stem in STATE:
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
            base = base.value
    if isinstance(target, ast.Attribute) and isinstance(base, ast.Name) and base.id == "result":
        return True  # the pass's own PassResult
    while isinstance(base, ast.Attribute):  # self.pusher.x: a part of the engine
        if base.attr == "state":
            return False
        base = base.value
    return isinstance(base, ast.Name) and base.id == "self"


@pytest.mark.parametrize("name", ["sync", "fetcher", "plan", "landing", "pusher"])
def test_the_sync_engine_writes_no_node_fields(name: str) -> None:
    """Nodes change only through StoreState's methods: the engine assigns attributes of
    itself and of its own results (`PassResult`), never of a node or the state."""
    offenders = []
    for node in ast.walk(_tree(name)):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = list(node.targets)
        elif isinstance(node, ast.AugAssign | ast.AnnAssign):
            targets = [node.target]
        elif isinstance(node, ast.Delete):
            targets = list(node.targets)
        while any(isinstance(t, ast.Tuple | ast.List) for t in targets):
            targets = [e for t in targets for e in (
                t.elts if isinstance(t, ast.Tuple | ast.List) else [t])]
        for target in targets:
            if isinstance(target, ast.Attribute | ast.Subscript) and not _own(target):
                offenders.append(f"{name}.py:{node.lineno}")
    assert offenders == []
