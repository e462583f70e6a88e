"""docs/ names code that exists: every backticked module file, `module.name` and
`Class.attribute` in the docs resolves in memfs's source, so a rename or a move cannot
leave the architecture, concurrency or sync docs pointing at nothing.

Names are resolved by reading the source (ast), not by importing it: a module's
top-level names, a class's methods, class attributes, properties and the `self.x`
attributes its methods assign. A few names of the libraries memfs builds on are checked
by importing the library. Backticked text that is not code (commands, options, file
names of the cache, wire fields) has no dotted-identifier shape or starts with a name
that is neither a memfs module nor a class, and is left alone.
"""

from __future__ import annotations

import ast
import importlib
import re
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SOURCE = ROOT / "memfs"
DOCS = [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md"]
DOTTED = re.compile(r"`([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)+)(?:\(\))?`")
PY_FILE = re.compile(r"`((?:[\w-]+/)*[\w-]+\.py)`")
# Libraries whose names the docs use; checked by import and getattr.
LIBRARIES = {"os", "time", "trio", "pyfuse3", "httpx", "faulthandler", "cachetools", "anthropic"}
# Classes of those libraries the docs name without their module.
LIBRARY_CLASSES = {
    "FileInfo": "pyfuse3.FileInfo",
    "Operations": "pyfuse3.Operations",
    "EnvironmentWorker": "anthropic.lib.environments.EnvironmentWorker",
    "SessionMemoryStores": "anthropic.lib.tools._memories.SessionMemoryStores",
    "WorkItemRun": "anthropic.lib.environments._worker.WorkItemRun",
    "AgentToolContext": "anthropic.lib.tools.agent_toolset.AgentToolContext",
}
# Backticked file names (`memfs.log`, `client.md`) share the dotted shape; their suffix
# tells them apart.
FILE_SUFFIXES = {"md", "log", "jsonl", "json", "sqlite", "toml", "txt", "service", "patch", "png"}
# Attributes the patched pyfuse3 adds (docs/pyfuse3-patch.md); a stock build lacks them.
PATCHED = {"FileInfo.noflush", "FileInfo.cache_readdir"}


@dataclass
class Index:
    """What memfs's source defines, by module short name and by class name."""

    modules: dict[str, set[str]] = field(default_factory=dict)
    classes: dict[str, set[str]] = field(default_factory=dict)
    files: set[str] = field(default_factory=set)


def _class_names(node: ast.ClassDef) -> set[str]:
    names: set[str] = set()
    for item in ast.walk(node):
        if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(item.name)
        elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
            names.add(item.target.id)
        elif isinstance(item, ast.Assign):
            names |= {t.id for t in item.targets if isinstance(t, ast.Name)}
        elif isinstance(item, ast.Attribute) and isinstance(item.value, ast.Name):
            if item.value.id == "self":
                names.add(item.attr)
    return names


def _top_names(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for item in tree.body:
        if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(item.name)
        elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
            names.add(item.target.id)
        elif isinstance(item, ast.Assign):
            names |= {t.id for t in item.targets if isinstance(t, ast.Name)}
        elif isinstance(item, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in item.names}
    return names


def build_index() -> Index:
    index = Index()
    bases: dict[str, set[str]] = {}
    for path in sorted(SOURCE.rglob("*.py")):
        tree = ast.parse(path.read_text())
        rel = path.relative_to(ROOT).with_suffix("")
        dotted = ".".join(rel.parts[:-1] if path.name == "__init__.py" else rel.parts)
        top = _top_names(tree)
        index.modules.setdefault(path.stem, set()).update(top)
        index.modules[dotted] = top
        index.files.add(path.name)
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                index.classes.setdefault(node.name, set()).update(_class_names(node))
                bases[node.name] = {b.id for b in node.bases if isinstance(b, ast.Name)}
    for name in index.classes:  # a mixin's methods are the class's own (StoreState)
        todo = list(bases.get(name, ()))
        while todo:
            base = todo.pop()
            index.classes[name] |= index.classes.get(base, set())
            todo += bases.get(base, ())
    for sub in ("tests", "scripts"):
        index.files |= {p.name for p in (ROOT / sub).rglob("*.py")}
    index.files |= {p.name for p in (ROOT / "scripts").iterdir()}
    return index


def _library(dotted: str) -> bool:
    """True when `dotted` names an attribute chain of an importable library."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj: object = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for name in parts[cut:]:
            if not hasattr(obj, name) and name not in getattr(obj, "__annotations__", {}):
                return False
            if not hasattr(obj, name):
                return True  # a dataclass field without a default
            obj = getattr(obj, name)
        return True
    return False


def unresolved(ref: str, index: Index) -> bool:
    """True when `ref` looks like a memfs code reference and names nothing."""
    parts = ref.split(".")
    head, attr = parts[0], parts[1]
    if ref in PATCHED or parts[-1] in FILE_SUFFIXES:
        return False
    if head == "memfs":
        for cut in range(len(parts), 0, -1):
            names = index.modules.get(".".join(parts[:cut]))
            if names is None:
                continue
            rest = parts[cut:]
            if not rest:
                return False
            if rest[0] not in names:
                return True
            members = index.classes.get(rest[0])
            return len(rest) > 1 and members is not None and rest[1] not in members
        return True
    if head in LIBRARIES:
        return not _library(ref)
    if head in LIBRARY_CLASSES:
        return not _library(".".join([LIBRARY_CLASSES[head], *parts[1:]]))
    if head in index.classes:
        return attr not in index.classes[head]
    if head in index.modules:
        instance_of = index.classes.get(head.capitalize(), set())
        if attr not in index.modules[head]:
            return attr not in instance_of  # `node.version`: an attribute of a Node
        return len(parts) > 2 and attr in index.classes and parts[2] not in index.classes[attr]
    # CamelCase that is no class of memfs or of a known library: a class that is gone.
    return head[0].isupper() and head[1:] != head[1:].upper()


def references() -> list[tuple[str, str]]:
    found: list[tuple[str, str]] = []
    for doc in DOCS:
        text = doc.read_text()
        found += [(doc.name, m) for m in DOTTED.findall(text) if not m.endswith(".py")]
    return found


def test_every_dotted_code_reference_in_the_docs_resolves() -> None:
    index = build_index()
    refs = references()
    assert len(refs) > 100, "the pattern no longer finds the docs' code references"
    missing = sorted({f"{doc}: `{ref}`" for doc, ref in refs if unresolved(ref, index)})
    assert not missing, "docs name code that does not exist:\n" + "\n".join(missing)


def test_every_python_file_the_docs_name_exists() -> None:
    index = build_index()
    missing = sorted(
        {
            f"{doc.name}: `{name}`"
            for doc in DOCS
            for name in PY_FILE.findall(doc.read_text())
            if Path(name).name not in index.files and not (ROOT / name).exists()
        }
    )
    assert not missing, "docs name Python files that do not exist:\n" + "\n".join(missing)


# `tests/x/test_y.py::test_z`, and `::test_w` after it in the same table cell or line
TEST_REF = re.compile(r"`(tests/[\w/]+\.py)?::(test_\w+)`")


def test_every_test_the_docs_cite_exists() -> None:
    """The threat model (reliability.md §6) proves each promise by a test's name."""
    cited, missing = 0, []
    for doc in DOCS:
        for line in doc.read_text().splitlines():
            current = None
            for path, name in TEST_REF.findall(line):
                current = path or current
                if current is None:
                    missing.append(f"{doc.name}: `::{name}` names no file before it")
                    continue
                cited += 1
                source = ROOT / current
                defined = source.exists() and re.search(
                    rf"^(?:async )?def {name}\(", source.read_text(), re.MULTILINE
                )
                if not defined:
                    missing.append(f"{doc.name}: `{current}::{name}`")
    assert cited > 20, "the pattern no longer finds the docs' test references"
    assert not missing, "docs cite tests that do not exist:\n" + "\n".join(missing)


@pytest.mark.parametrize(
    ("ref", "bad"),
    [
        ("StoreState.write", False),
        ("StoreState.no_such_method", True),
        ("Planner.plan", False),
        ("GoneClass.method", True),
        ("fs._guard", False),
        ("fs.no_such_name", True),
        ("memfs.state.tree", False),
        ("memfs.state.no_such_module", True),
        ("trio.sleep", False),
        ("trio.no_such_thing", True),
        ("user.memfs.path", False),  # an xattr name, not code
    ],
)
def test_the_resolver_tells_real_names_from_gone_ones(ref: str, bad: bool) -> None:
    assert unresolved(ref, build_index()) is bad


def test_the_package_map_is_the_layering_rule_and_names_every_module() -> None:
    from tests.unit.test_layering import ALLOWED

    text = (ROOT / "docs" / "architecture.md").read_text()
    rows = re.findall(r"^\| `(\w+)/` \| [^|]+ \| ([^|]+) \|$", text, re.M)
    documented = {
        package: {n for n in re.findall(r"`(\w+)`", imports)} for package, imports in rows
    }
    assert documented == ALLOWED, "docs/architecture.md's package table is not the layering rule"
    modules = {p.name for p in SOURCE.rglob("*.py")} - {"__init__.py", "__main__.py"}
    unnamed = sorted(m for m in modules if f"`{m}`" not in text)
    assert not unnamed, f"docs/architecture.md does not name {unnamed}"
