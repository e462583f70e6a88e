"""The watch on every test's `memfs serve` processes (tests/support/server.py, judged by
tests/support/daemonwatch.py as the mount daemons are).

Inner test runs (pytester, in a subprocess) start real servers: a server whose log holds
an undeclared traceback, or that died before its test ended, fails the test at teardown,
and so does the session's shared server when one test planted a traceback in its log;
declared lines, and exits the test made itself, pass.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from tests.support import daemonwatch
from tests.support.server import ServerProcess

ROOT = Path(__file__).resolve().parents[2]

CONFTEST = """
from tests.conftest import daemons, server, shared_server  # noqa: F401
"""

# What `memfs serve` logs when a request handler raises (memfs/server/app.py, _on_crash).
INNER = """
import os, signal
import pytest

CRASH = (
    "2026-12-06 07:00:00,000 ERROR memfs.server.app: unhandled error request_id=req_1 "
    "method=GET path=/v1/memory_stores\\n"
    "Traceback (most recent call last):\\n"
    '  File "memfs/server/app.py", line 1, in handler\\n'
    "ZeroDivisionError: division by zero\\n"
)


def plant(server):
    with server.log_path.open("a") as log:
        log.write(CRASH)


def test_undeclared_traceback(server):
    plant(server)


@pytest.mark.daemon_log(r"ERROR memfs\\.server\\.app: unhandled error ")
def test_declared_by_marker(server):
    plant(server)


def test_declared_by_fixture(server, daemons):
    daemons.expect_log(r"ZeroDivisionError")
    plant(server)


def test_clean(server):
    assert server.proc.poll() is None


def test_died_behind_the_fixtures_back(server):
    os.kill(server.proc.pid, signal.SIGKILL)
    server.proc.wait(10)


def test_killed_by_the_test(server):
    server.kill()


def test_stopped_by_the_test_itself(server):
    server.expect_exit(0)
    server.proc.send_signal(signal.SIGTERM)
    assert server.proc.wait(10) == 0


def test_shared_undeclared(shared_server):
    plant(shared_server)


def test_shared_clean_after(shared_server):
    assert shared_server.proc.poll() is None
"""


@pytest.fixture
def inner(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> str:
    """The inner run's report (-rA: one line per outcome, errors with their message)."""
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_inner=INNER)
    monkeypatch.setenv("PYTHONPATH", f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", "-rA", timeout=240).stdout.str()


def test_a_planted_server_traceback_fails_its_test(inner: str) -> None:
    seen: dict[str, set[str]] = {}
    for status, name in re.findall(r"^(PASSED|ERROR|FAILED) test_inner\.py::(\w+)", inner, re.M):
        seen.setdefault(name, set()).add(status)
    assert seen == {
        "test_undeclared_traceback": {"PASSED", "ERROR"},  # the test passed, its teardown not
        "test_declared_by_marker": {"PASSED"},
        "test_declared_by_fixture": {"PASSED"},
        "test_clean": {"PASSED"},
        "test_died_behind_the_fixtures_back": {"PASSED", "ERROR"},
        "test_killed_by_the_test": {"PASSED"},
        "test_stopped_by_the_test_itself": {"PASSED"},
        "test_shared_undeclared": {"PASSED", "ERROR"},
        "test_shared_clean_after": {"PASSED"},  # the shared log's lines are judged once
    }, inner
    assert "unexpected in the log of memfs serve --db " in inner, inner
    assert "ZeroDivisionError: division by zero" in inner, inner  # the record, quoted whole
    assert re.search(r"memfs serve --db \S+: the server exited -9 by itself", inner), inner


def test_a_server_log_is_judged_from_where_the_last_look_ended(tmp_path: Path) -> None:
    """The checker itself, on a server that never ran: what the log held before the
    `ServerProcess` is another's; each look judges only what is new."""
    log = tmp_path / "s.log"
    log.write_text("2026-12-06 07:00:00,000 ERROR memfs.server.app: an earlier run's\n")
    proc = ServerProcess(tmp_path / "s.db", log_path=log)
    watch = daemonwatch.DaemonWatch()
    assert watch.judge(proc) == []
    with log.open("a") as f:
        f.write("Traceback (most recent call last):\nValueError: planted\n")
    assert [p.splitlines()[-1] for p in watch.judge(proc)] == ["ValueError: planted"]
    assert watch.judge(proc) == []
    assert proc.finish() == []  # never started: nothing ended badly
