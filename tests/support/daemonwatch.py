"""Tests that watch the daemon, as s3ql's `checklogs` does.

A handler bug that the kernel sees as EIO, or a task that dies with a traceback, often
leaves the test's own assertions green. So every daemon a test starts (`MountProcess`
registers itself with the running test's `DaemonWatch`) is checked at teardown: it must
exit by itself or on a plain SIGTERM (final flush, unmount) with the exit code the test
expected, and its log and stderr must hold no ERROR/CRITICAL line and no traceback that
the test did not declare, with `daemons.expect_log(regex)` or
`@pytest.mark.daemon_log(regex, ...)` (for a fault-injection module, in `pytestmark`).

Every `memfs serve` a test starts (`ServerProcess`, tests/support/server.py) is watched
the same way: it must still be running at teardown (a server that died on its own fails
the test) and exit 0 on SIGTERM, and its log holds nothing undeclared. A server that
outlives one test (a session or module fixture's) is in `OUTLIVING`: each test judges
what it logged during that test and that it is still running, and the fixture's
`retire()` judges the rest.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

# A log record starts with `DATE TIME LEVEL logger:` (memfs.logs' text format) or is one
# JSON object (`--log-format json`); the lines up to the next start (a traceback) belong
# to it.
_TEXT_START = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (\w+) ")
_BAD_LEVELS = {"ERROR", "CRITICAL"}
TRACEBACK = "Traceback (most recent call last)"


def _level(line: str) -> str | None:
    """The level of a line that starts a record, or None for a continuation line."""
    if start := _TEXT_START.match(line):
        return start.group(1)
    if line.startswith("{"):
        try:
            level = json.loads(line).get("level")
        except (ValueError, AttributeError):
            return None
        return str(level).upper() if level is not None else None
    return None


def records(text: str) -> list[tuple[str | None, str]]:
    """`text` split into log records (level, text), each with the lines that continue
    it; lines before the first record (stderr's) make a record without a level."""
    out: list[tuple[str | None, str]] = []
    for line in text.splitlines():
        level = _level(line)
        if level is not None or not out:
            out.append((level, line))
        else:
            out[-1] = (out[-1][0], out[-1][1] + "\n" + line)
    return out


def unexpected(text: str, expected: Iterable[re.Pattern[str]]) -> list[str]:
    """The records of `text` at ERROR or above, or carrying a traceback, that no pattern
    of `expected` matches (searched in the whole record, traceback included)."""
    patterns = list(expected)
    bad = []
    for level, record in records(text):
        if level not in _BAD_LEVELS and TRACEBACK not in record:
            continue
        if not any(p.search(record) for p in patterns):
            bad.append(record)
    return bad


class Watched(Protocol):
    """What the watch needs of a daemon (tests.support.mount.MountProcess) or a server
    (tests.support.server.ServerProcess)."""

    @property
    def name(self) -> str:
        """What `outputs` are, for the report ("the daemon's output")."""
        ...

    def finish(self) -> list[str]: ...

    def outputs(self) -> list[str]: ...

    def dump_stacks(self) -> None: ...


class Outliving(Watched, Protocol):
    """A server started outside any test (a session or module fixture's)."""

    def ended(self) -> list[str]:
        """What was wrong with how it ended, if it is no longer running."""
        ...


OUTLIVING: list[Outliving] = []
"""The servers that outlive one test, each test's business while they run."""


@dataclass
class DaemonWatch:
    """The daemons one test started, and the log lines and exit codes it declared."""

    expected: list[re.Pattern[str]] = field(default_factory=list)
    daemons: list[Watched] = field(default_factory=list)
    logs: list[Path] = field(default_factory=list)

    def expect_log(self, *patterns: str) -> None:
        """Declare ERROR lines or tracebacks this test provokes on purpose."""
        self.expected += [re.compile(p) for p in patterns]

    def watch_log(self, path: Path) -> None:
        """Also check a log file no `MountProcess` owns (a `--daemon` child's)."""
        self.logs.append(path)

    def problems(self) -> list[str]:
        """Stop what is still running, then everything that was not as it should be."""
        found: list[str] = []
        for daemon in reversed(self.daemons):  # last started, first stopped: a mount
            found += daemon.finish()  # makes its final flush to a server still running
            found += self.judge(daemon)
        for server in OUTLIVING:
            found += server.ended()
            found += self.judge(server)
        for path in self.logs:
            text = path.read_text(errors="replace") if path.exists() else ""
            found += [f"unexpected in {path}:\n{r}" for r in self._bad(text)]
        return found

    def judge(self, daemon: Watched) -> list[str]:
        """The undeclared records in what `daemon` wrote since the last look."""
        return [
            f"unexpected in {daemon.name}:\n{r}"
            for text in daemon.outputs()
            for r in self._bad(text)
        ]

    def _bad(self, text: str) -> list[str]:
        return unexpected(text, self.expected)


_current: DaemonWatch | None = None


def current() -> DaemonWatch | None:
    """The running test's watch (None outside pytest, e.g. in scripts/bench)."""
    return _current


def begin() -> DaemonWatch:
    global _current
    _current = DaemonWatch()
    return _current


def end() -> None:
    global _current
    _current = None
