"""The watch on every test's daemons (tests/support/daemonwatch.py) itself.

Inner test runs (pytester, in a subprocess) mount a real store on a real `memfs serve`:
a daemon whose log holds an undeclared ERROR line, or that dies with an exit code the
test did not expect, fails the test at teardown; one declared ERROR line passes.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from tests.support.daemonwatch import unexpected

ROOT = Path(__file__).resolve().parents[2]

CONFTEST = """
from tests.conftest import api, daemons, server  # noqa: F401
"""

# A real mount, then a line in its real log as the daemon would write it.
INNER = """
import os, signal
import pytest
from tests.support.mount import mount_store

LINE = "2026-12-04 04:00:00,000 ERROR memfs.mount.fs: boom memory_store_id=x path=/a.md\\n"


@pytest.fixture
def proc(tmp_path, server, api):  # stopped before the server, as conftest's `mount` is
    store = api.create_store("watched")
    proc = mount_store(tmp_path, server.url, str(store["id"]))
    (proc.mountpoint / "a.md").write_text("hello\\n")
    yield proc
    proc.cleanup()


def test_undeclared_error(proc):
    with proc.log_path.open("a") as log:
        log.write(LINE)


@pytest.mark.daemon_log(r"ERROR memfs\\.mount\\.fs: boom ")
def test_declared_by_marker(proc):
    with proc.log_path.open("a") as log:
        log.write(LINE)


def test_declared_by_fixture(proc, daemons):
    daemons.expect_log(r"boom memory_store_id=x")
    with proc.log_path.open("a") as log:
        log.write(LINE)


def test_clean(proc):
    assert (proc.mountpoint / "a.md").read_text() == "hello\\n"


def test_killed_behind_the_fixtures_back(proc):
    os.kill(proc.pid, signal.SIGKILL)
    proc.proc.wait(10)
"""


@pytest.fixture
def inner(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> str:
    """The inner run's report (-rA: one line per outcome, errors with their message)."""
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_inner=INNER)
    monkeypatch.setenv("PYTHONPATH", f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", "-rA", timeout=240).stdout.str()


def test_a_sick_daemon_fails_its_test_and_declared_lines_pass(inner: str) -> None:
    seen: dict[str, set[str]] = {}
    for status, name in re.findall(r"^(PASSED|ERROR|FAILED) test_inner\.py::(\w+)", inner, re.M):
        seen.setdefault(name, set()).add(status)
    assert seen == {
        "test_undeclared_error": {"PASSED", "ERROR"},  # the test passed, its teardown not
        "test_declared_by_marker": {"PASSED"},
        "test_declared_by_fixture": {"PASSED"},
        "test_clean": {"PASSED"},
        "test_killed_behind_the_fixtures_back": {"PASSED", "ERROR"},
    }, inner
    assert "unexpected in the daemon's output:" in inner, inner
    assert re.search(r"mount at \S+: the daemon exited -9, not 0", inner), inner


def test_what_counts_as_unexpected() -> None:
    """ERROR and CRITICAL records, any record with a traceback (in either log format),
    stderr's own traceback; a declared pattern covers the whole record it matches."""
    lines = [
        "2026-12-04 04:00:00,000 INFO memfs.sync: pass done memory_store_id=s",
        "2026-12-04 04:00:01,000 ERROR memfs.sync: lost memory_store_id=s",
        "2026-12-04 04:00:02,000 WARNING memfs.sync: retry memory_store_id=s",
        "Traceback (most recent call last):",
        '  File "x.py", line 1, in f',
        "ValueError: x",
        json.dumps({"level": "critical", "message": "gone"}),
        json.dumps({"level": "info", "message": "fine"}),
    ]
    text = "\n".join(lines)
    bad = unexpected(text, [])
    assert [b.splitlines()[0] for b in bad] == [lines[1], lines[2], lines[6]]
    assert "ValueError: x" in bad[1]
    assert (
        unexpected(text, [re.compile("lost"), re.compile("ValueError"), re.compile("gone")]) == []
    )
    assert unexpected("Traceback (most recent call last):\nSystemExit: 3\n", []) != []
