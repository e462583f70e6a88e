"""Extra benchmark sections: standalone modules that plug into `scripts/bench`.

A section is a module `scripts/benchmarks/<name>.py` with a top-level `run(quick: bool)`
that returns one of
  - a `Section`: markdown lines for the report, raw numbers for bench-out/results.json,
    optional rows for the Targets table;
  - a dict of raw numbers: the module's `table(results) -> str` renders the markdown
    (a standalone module with its own `main` has both anyway);
  - a list of markdown lines.
Its heading is the module's TITLE, or else its docstring's first line up to a colon.
`quick` asks for the `--quick` sizes (the whole `--quick` run takes about 8 minutes).
For example:

    from .common import summary
    from .engines import start_server
    from .report import fmt
    from .sections import Section, target, workdir

    TITLE = "Server start"

    def run(quick: bool) -> Section:
        d = workdir("server_start")
        took = []
        for _ in range(2 if quick else 5):
            t0 = time.perf_counter()
            start_server(d / "store.db", d / "server.log").stop()
            took.append(time.perf_counter() - t0)
        s = summary(took)
        return Section(lines=["| start s |", "|---|", f"| {fmt(s)} |"],
                       data={"start_s": s},
                       targets=[target("server up < 5 s", f"{s['median']:.2f} s",
                                       s["median"] < 5)])

`run` starts what it needs itself and stops it before it returns: `workdir(name)` gives a
fresh folder under bench-out/work/, `engines.start_server(db, log, *args)` a `memfs
serve`, `engines.MemfsMount` a mount, `tests.support.mount.MountProcess(...,
log_level="info")` any other daemon (`memfs session`): the test suite's own helpers, at
info log level (debug logging costs throughput). `engines.LIVE`/`cleanup_all` catch a
mount left behind. `common.summary` makes the `median (min–max)` cells that `report.fmt`
prints, `target()` a row of the Targets table. Bound every wait; raise if a measurement
fails (the harness reports the error, goes on with the rest, and exits 1).

Sections are found by file name, nothing to register: `scripts/bench --section NAME`
(or `--only NAME`) runs one, `scripts/bench --list` names them all, and a run with no
selection (`scripts/bench`, `scripts/bench --quick`) runs every section after the
built-in cases, in name order. The report numbers them after the built-in six.
"""

from __future__ import annotations

import importlib
import json
import pkgutil
import shutil
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from .common import WORK, log

# The harness's own modules; every other module of the package is a section.
CORE = frozenset(
    {
        "__init__",
        "__main__",
        "cases",
        "chart",
        "common",
        "engines",
        "proxy",
        "readonly",
        "refworker",
        "report",
        "sections",
        "workloads",
    }
)


@dataclass
class Section:
    """What a section's `run` gives back."""

    lines: list[str]  # markdown under the section's heading: prose, tables
    data: dict[str, Any] = field(default_factory=dict)  # raw numbers for results.json
    targets: list[dict[str, str]] = field(default_factory=list)  # made by `target()`


def target(name: str, measured: str, ok: bool | None) -> dict[str, str]:
    """One row of the report's Targets table (ok None: not judged)."""
    return {
        "target": name,
        "measured": measured,
        "status": "n/a" if ok is None else ("met" if ok else "NOT met"),
    }


def workdir(name: str) -> Path:
    """A fresh, empty folder for one section's files, under bench-out/work/."""
    path = WORK / name
    if path.exists():
        shutil.rmtree(path)
    path.mkdir(parents=True)
    return path


def available() -> list[str]:
    """Names of the section modules in this package, in name order."""
    here = Path(__file__).resolve().parent
    return sorted(m.name for m in pkgutil.iter_modules([str(here)]) if m.name not in CORE)


def load(name: str) -> ModuleType:
    """Import one section; LookupError (one line) if `name` is not one."""
    if name in CORE or name not in available():
        raise LookupError(
            f"no benchmark section {name!r} (sections: {', '.join(available()) or 'none'})"
        )
    try:
        module = importlib.import_module(f"{__package__}.{name}")
    except Exception as e:
        raise LookupError(f"scripts/benchmarks/{name}.py does not import: {e!r}") from e
    if not callable(getattr(module, "run", None)):
        raise LookupError(
            f"scripts/benchmarks/{name}.py is not a section: it has no run(quick) function"
        )
    return module


def title(module: ModuleType) -> str:
    """TITLE, or the docstring's first line up to a colon ("Server load: ..." -> "Server load")."""
    explicit = getattr(module, "TITLE", None)
    if isinstance(explicit, str):
        return explicit
    doc = (module.__doc__ or "").strip()
    first = doc.splitlines()[0] if doc else module.__name__.rsplit(".", 1)[-1]
    return first.split(":", 1)[0].strip().rstrip(".")


def as_section(module: ModuleType, got: Any) -> Section:
    """Whatever `run` returned, as a Section."""
    if isinstance(got, Section):
        return got
    if isinstance(got, dict):
        render = getattr(module, "table", None)
        text = (
            render(got)
            if callable(render)
            else ("```\n" + json.dumps(got, indent=2, default=str) + "\n```")
        )
        return Section(lines=str(text).splitlines(), data=got)
    return Section(lines=[str(line) for line in got])


def runnable(names: list[str], *, strict: bool) -> list[str]:
    """The sections among `names` that load. strict: the first that does not is an
    error; otherwise it is logged and left out (a helper module is not a section)."""
    out = []
    for name in names:
        try:
            load(name)
        except LookupError as e:
            if strict:
                raise
            log(f"skipping {name}: {e}")
        else:
            out.append(name)
    return out


def run(name: str, quick: bool) -> dict[str, Any]:
    """Run one section; its entry of results["sections"] (an `error` if it failed)."""
    module = load(name)
    entry: dict[str, Any] = {"title": title(module)}
    log(f"section {name}: {entry['title']}")
    t0 = time.perf_counter()
    try:
        section = as_section(module, module.run(quick))
    except Exception as e:
        log(f"section {name} failed: {e!r}\n{traceback.format_exc()}")
        entry.update(error=repr(e), lines=[], data={}, targets=[])
    else:
        entry.update(lines=section.lines, data=section.data, targets=section.targets)
    entry["seconds"] = round(time.perf_counter() - t0, 1)
    return entry
