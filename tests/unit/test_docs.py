"""docs/ names code that exists: every backticked module file, `module.name`,
`Class.attribute`, bare `function_name` and logger name in the docs resolves in memfs's
source, every relative link and `docs/x.md` resolves inside the repository, and the
README's speed figures are the latest bench run's, so a rename, a move or a new bench
run cannot leave the docs pointing at nothing or quoting a number no run measured.

Names are resolved by reading the source (ast), not by importing it: a module's
top-level names, a class's methods, class attributes, properties and the `self.x`
attributes its methods assign. A few names of the libraries memfs builds on are checked
by importing the library. Backticked text that is not code (commands, options, file
names of the cache, wire fields) has no dotted-identifier shape or starts with a name
that is neither a memfs module nor a class, and is left alone.

A bare backticked name that looks like code (a call, a name with an underscore, a
capitalised name) must be one memfs defines (a def, a class, an assignment, a
parameter) or has in a string (a wire field, a journal column); else the tests',
scripts', systemd units' or pyfuse3 patch's, or a library's. A private `_name` must be
memfs's own or the patch's. `NOT_MEMFS` lists the few other programs' names the docs
use. A logger cited in a log table (`(from memfs.sync)`) must be a name memfs logs under.
Every failure names the document, the line and the name.
"""

from __future__ import annotations

import ast
import functools
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
# A bare backticked name (`_guard`, `wait_content()`, `MountConfig`, `WRITE_QUIET_NS`).
BARE = re.compile(r"`(_?[A-Za-z][A-Za-z0-9_]*)(\(\))?`")
# Where a bare name may also be defined: the standard library modules memfs calls.
BARE_LIBRARIES = (
    *("builtins", "os", "fcntl", "mmap", "errno", "signal", "sqlite3", "pyfuse3", "trio"),
    *("trio.MemorySendChannel", "trio.Nursery"),
)
# Bare names in the docs that are code of none of those, nor in the tests, scripts, the
# pyfuse3 patch or the systemd units: other programs' names.
NOT_MEMFS = {
    "HTTPS_PROXY",  # httpx reads it
    "SYS_ADMIN",  # a capability
    "FUSE_VERSION",  # libfuse's
    "max_prepared_statements",  # PostgreSQL's and its tools'
    "pg_basebackup",
    "pg_dump",
}
# `(from memfs.x)` / `(logger memfs.x)` / `memfs.x logger`: a name log lines carry.
LOGGER_REF = re.compile(r"\((?:from|logger) `(memfs(?:\.\w+)*)`|`(memfs(?:\.\w+)*)` logger")
LINK = re.compile(r"\]\(([^)\s]+)\)")
# `docs/x.md`, `../elsewhere/x.md` and the like: a path to a document, linked or not.
DOC_PATH = re.compile(r"(?<![\w/.-])((?:\.\./|\./|docs/)[\w./-]*\.md)\b")


@dataclass
class Index:
    """What memfs's source defines, by module short name and by class name."""

    modules: dict[str, set[str]] = field(default_factory=dict)
    classes: dict[str, set[str]] = field(default_factory=dict)
    files: set[str] = field(default_factory=set)
    # Every identifier memfs's source defines, and the words of its strings (wire
    # fields, journal columns, metric and environment names).
    words: set[str] = field(default_factory=set)
    # The same for tests/, scripts/ (the pyfuse3 patch included) and contrib/.
    repo_words: set[str] = field(default_factory=set)
    patch_words: set[str] = field(default_factory=set)
    # The names memfs's loggers carry (`logging.getLogger("memfs.sync")`).
    loggers: set[str] = field(default_factory=set)


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


WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _words(tree: ast.AST) -> set[str]:
    """What `tree` defines (a def, a class, an assigned name or attribute, a parameter, a
    keyword argument, an import) and every word of its strings: a name only read is not
    enough, since the docs would then resolve a method by any call of its name."""
    words: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            words.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            words.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            words.add(node.attr)
        elif isinstance(node, ast.arg):
            words.add(node.arg)
        elif isinstance(node, ast.keyword) and node.arg:
            words.add(node.arg)
        elif isinstance(node, ast.alias):
            words |= set((node.asname or node.name).split("."))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            words |= set(WORD.findall(node.value))
    return words


def _loggers(tree: ast.AST, dotted: str) -> set[str]:
    """The names of the loggers `logging.getLogger(...)` makes in one module."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if not (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "getLogger"
            and len(node.args) == 1
        ):
            continue
        arg = node.args[0]
        if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
            names.add(arg.value)
        elif isinstance(arg, ast.Name) and arg.id == "__name__":
            names.add(dotted)
    return names


@functools.cache
def build_index() -> Index:
    index = Index()
    bases: dict[str, set[str]] = {}
    for path in sorted(SOURCE.rglob("*.py")):
        tree = ast.parse(path.read_text())
        rel = path.relative_to(ROOT).with_suffix("")
        dotted = ".".join(rel.parts[:-1] if path.name == "__init__.py" else rel.parts)
        index.words |= _words(tree)
        index.loggers |= _loggers(tree, dotted)
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
        index.repo_words |= {
            w
            for p in (ROOT / sub).rglob("*.py")
            if p.resolve() != Path(__file__).resolve()  # its examples of gone names
            for w in _words(ast.parse(p.read_text()))
        }
    index.files |= {p.name for p in (ROOT / "scripts").iterdir()}
    for other in [*(ROOT / "scripts").iterdir(), *(ROOT / "contrib").rglob("*")]:
        if other.is_file() and other.suffix != ".py":
            index.repo_words |= set(WORD.findall(other.read_text()))
    index.patch_words = set(WORD.findall((ROOT / "scripts" / "pyfuse3-levers.patch").read_text()))
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
        if ref in index.loggers:
            return False
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


def _bare_library(name: str) -> bool:
    for where in BARE_LIBRARIES:
        module, _, attr = where.partition(".")
        owner = importlib.import_module(module)
        if hasattr(getattr(owner, attr) if attr else owner, name):
            return True
    return False


def looks_like_code(name: str, called: bool) -> bool:
    """`wait_content()`, `_guard`, `check_name`, `MountConfig`, `Tree`, `WRITE_QUIET_NS`:
    a call, a name with an underscore, or a capitalised name with a lower-case letter.
    A plain lower-case word (`cat`, `data`, `lookups`) or an errno (`EROFS`) is left
    alone: too many of them are commands, fields of the wire or plain words."""
    if called or "_" in name.strip("_"):
        return True
    return name[0].isupper() and any(c.islower() for c in name)


def bare_unresolved(name: str, index: Index) -> bool:
    """True when a bare backticked name that looks like code names nothing: memfs's
    source neither defines nor uses it (nor has it in a string), and neither do the
    tests, scripts, the pyfuse3 patch and units, nor a library memfs calls. A private
    name must be memfs's own (or a word of its strings, `_netdev`) or the patched
    pyfuse3's: a test's fake may still define a method memfs lost."""
    if name.startswith("_"):
        return name not in index.words and name not in index.patch_words
    if name in NOT_MEMFS or name in index.words:
        return False
    if name.endswith("_total") and name.removesuffix("_total") in index.words:
        return False  # a Prometheus counter: the client appends `_total`
    return name not in index.repo_words and not _bare_library(name)


def _line(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def _where(doc: Path, text: str, offset: int) -> str:
    return f"{doc.relative_to(ROOT)}:{_line(text, offset)}"


def references() -> list[tuple[str, str]]:
    """(doc:line, ref) for every dotted code reference."""
    found: list[tuple[str, str]] = []
    for doc in DOCS:
        text = doc.read_text()
        found += [
            (_where(doc, text, m.start()), m.group(1))
            for m in DOTTED.finditer(text)
            if not m.group(1).endswith(".py")
        ]
    return found


def bare_references() -> list[tuple[str, str]]:
    """(doc:line, name) for every bare backticked name that looks like code."""
    found: list[tuple[str, str]] = []
    for doc in DOCS:
        text = doc.read_text()
        found += [
            (_where(doc, text, m.start()), m.group(1))
            for m in BARE.finditer(text)
            if looks_like_code(m.group(1), bool(m.group(2)))
        ]
    return found


def test_every_dotted_code_reference_in_the_docs_resolves() -> None:
    index = build_index()
    refs = references()
    assert len(refs) > 100, "the pattern no longer finds the docs' code references"
    missing = [f"{where}: `{ref}`" for where, ref in refs if unresolved(ref, index)]
    assert not missing, "docs name code that does not exist:\n" + "\n".join(missing)


def test_every_bare_name_in_the_docs_is_code_that_exists() -> None:
    index = build_index()
    refs = bare_references()
    assert len(refs) > 300, "the pattern no longer finds the docs' bare names"
    missing = [f"{where}: `{name}`" for where, name in refs if bare_unresolved(name, index)]
    assert not missing, (
        "docs name code that does not exist (or, if it is not memfs's code, add it "
        "to NOT_MEMFS):\n" + "\n".join(missing)
    )


def test_the_names_that_are_not_memfs_code_are_named_by_the_docs_and_nowhere_in_memfs() -> None:
    """NOT_MEMFS stays the short list it must be: each entry is in a doc, and is none of
    memfs's, the repository's or a library's names (those resolve without it)."""
    index = build_index()
    named = {name for _, name in bare_references()}
    unused = sorted(NOT_MEMFS - named)
    assert not unused, f"NOT_MEMFS names what no doc names any more: {unused}"
    code = sorted(n for n in NOT_MEMFS if n in index.words | index.repo_words or _bare_library(n))
    assert not code, f"NOT_MEMFS holds names the code has, which need no exception: {code}"


def test_every_logger_the_docs_name_logs() -> None:
    """A log table's `(from memfs.x)` is the name the line carries (`%(name)s`)."""
    index = build_index()
    cited, missing = 0, []
    for doc in DOCS:
        text = doc.read_text()
        for m in LOGGER_REF.finditer(text):
            name = m.group(1) or m.group(2)
            cited += 1
            if name not in index.loggers:
                missing.append(f"{_where(doc, text, m.start())}: `{name}`")
    assert cited >= 3, "the pattern no longer finds the docs' logger names"
    assert not missing, (
        f"docs name loggers memfs does not have (it has {sorted(index.loggers)}):\n"
        + "\n".join(missing)
    )


def _anchors(doc: Path) -> set[str]:
    """GitHub's anchors for a document's headings."""
    anchors = set()
    for heading in re.findall(r"^#+ (.+)$", doc.read_text(), re.MULTILINE):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        anchors.add(slug)
    return anchors


def broken_link(doc: Path, target: str) -> str | None:
    """Why a relative link or document path in `doc` does not resolve, or None."""
    if re.match(r"[a-z]+:", target):
        return None  # http:, https:, mailto:
    path, _, anchor = target.partition("#")
    if path.startswith("docs/") and doc.parent == ROOT / "docs":
        resolved = (ROOT / path).resolve()  # the docs name each other from the root too
    else:
        resolved = (doc.parent / path).resolve() if path else doc
    if not resolved.is_relative_to(ROOT):
        return "outside the repository"
    if not resolved.exists():
        return "no such file"
    if anchor and resolved.suffix == ".md" and anchor not in _anchors(resolved):
        return f"no heading #{anchor}"
    return None


def test_every_link_and_document_path_resolves_inside_the_repository() -> None:
    checked, broken = 0, []
    for doc in DOCS:
        text = doc.read_text()
        found = [*LINK.finditer(text), *DOC_PATH.finditer(text)]
        for m in found:
            checked += 1
            why = broken_link(doc, m.group(1))
            if why:
                broken.append(f"{_where(doc, text, m.start())}: {m.group(1)} ({why})")
    assert checked > 50, "the patterns no longer find the docs' links"
    assert not broken, "docs link to what is not in the repository:\n" + "\n".join(broken)


def _workload_ratios() -> set[str]:
    """The `vs native` medians of docs/performance.md's agent workload table (§2)."""
    text = (ROOT / "docs" / "performance.md").read_text()
    section = text.split("## 2. Agent workload", 1)[1].split("\n## ", 1)[0]
    rows = r"^\| (?:memfs|session store)[^|]* \| [^|]+ \| (\d+\.\d+) \("
    return set(re.findall(rows, section, re.MULTILINE))


def test_the_readmes_speed_figures_are_the_latest_bench_runs() -> None:
    """docs/performance.md is written by `scripts/bench`; the README quotes it."""
    measured = _workload_ratios()
    assert len(measured) >= 2, "docs/performance.md's agent workload table changed shape"
    text = (ROOT / "README.md").read_text()
    quoted = [(m.group(1), _line(text, m.start())) for m in re.finditer(r"(\d+\.\d+)×", text)]
    assert quoted, "README.md quotes no speed figure; drop this test with them"
    stale = [f"README.md:{line}: {value}×" for value, line in quoted if value not in measured]
    assert not stale, (
        f"README.md quotes figures the latest bench run (docs/performance.md §2: "
        f"{sorted(measured)}) did not measure; quote the new run's:\n" + "\n".join(stale)
    )


def test_every_python_file_the_docs_name_exists() -> None:
    index = build_index()
    missing = [
        f"{_where(doc, text, m.start())}: `{m.group(1)}`"
        for doc in DOCS
        for text in [doc.read_text()]
        for m in PY_FILE.finditer(text)
        if Path(m.group(1)).name not in index.files and not (ROOT / m.group(1)).exists()
    ]
    assert not missing, "docs name Python files that do not exist:\n" + "\n".join(missing)


# `tests/x/test_y.py::test_z`, and `::test_w` after it in the same table cell or line
TEST_REF = re.compile(r"`(tests/[\w/]+\.py)?::(test_\w+)`")


def test_every_test_the_docs_cite_exists() -> None:
    """The threat model (reliability.md §6) proves each promise by a test's name."""
    cited, missing = 0, []
    for doc in DOCS:
        for number, line in enumerate(doc.read_text().splitlines(), 1):
            where = f"{doc.relative_to(ROOT)}:{number}"
            current = None
            for path, name in TEST_REF.findall(line):
                current = path or current
                if current is None:
                    missing.append(f"{where}: `::{name}` names no file before it")
                    continue
                cited += 1
                source = ROOT / current
                defined = source.exists() and re.search(
                    rf"^(?:async )?def {name}\(", source.read_text(), re.MULTILINE
                )
                if not defined:
                    missing.append(f"{where}: `{current}::{name}`")
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


@pytest.mark.parametrize(
    ("name", "bad"),
    [
        ("_guard", False),  # a method of MemFs
        ("WRITE_QUIET_NS", False),  # a constant
        ("expected_content_sha256", False),  # a wire field, in a string
        ("memfs_sync_passes_total", False),  # a counter; the client adds `_total`
        ("copy_file_range", False),  # os's
        ("MEMFS_CRASH_SEED", False),  # the crash trials' environment
        ("_ready_to_push", True),  # gone: Planner.ready_to_push
        ("wait_synced", True),  # never built
        ("NoSuchClass", True),
    ],
)
def test_the_bare_name_resolver_tells_real_names_from_gone_ones(name: str, bad: bool) -> None:
    assert bare_unresolved(name, build_index()) is bad


def test_the_logger_names_are_the_ones_memfs_logs_under() -> None:
    loggers = build_index().loggers
    assert {"memfs.sync", "memfs.client", "memfs.daemon", "memfs.mount.systemd"} <= loggers
    assert "memfs.state.tree" not in loggers  # a module, not a logger
    assert not unresolved("memfs.client", build_index())  # a logger, not a module


@pytest.mark.parametrize(
    ("target", "why"),
    [
        ("sync.md", None),
        ("docs/sync.md", None),  # from the root, as the docs also write
        ("design.md#why-fuse", None),
        ("sync.md#no-such-heading", "no heading #no-such-heading"),
        ("no-such.md", "no such file"),
        ("../shared/design/architecture.md", "no such file"),  # docs/../shared
        ("../../shared/design/architecture.md", "outside the repository"),
        ("../README.md", None),
        ("https://example.com/x", None),
    ],
)
def test_the_link_resolver_keeps_links_inside_the_repository(target: str, why: str | None) -> None:
    assert broken_link(ROOT / "docs" / "architecture.md", target) == why


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
