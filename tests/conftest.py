"""Fixtures shared by every suite: a real store server and a client for it."""

from __future__ import annotations

import faulthandler
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import daemonwatch
from tests.support.api import Api
from tests.support.daemonwatch import DaemonWatch
from tests.support.deadline import deadline
from tests.support.mount import MountProcess, mount_store, require_fuse
from tests.support.server import ServerProcess, start_server

# Every daemon a test starts checks each pass's scope against a walk of every file
# (memfs/sync/engine.py, CHECK_SCOPE): a file the scope misses fails the test's mount.
os.environ.setdefault("MEMFS_TEST_CHECK_SCOPE", "1")

# The session's PostgreSQL cluster fixture; pytester for tests of the fixtures themselves.
pytest_plugins = ["tests.support.postgres", "pytester"]


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--long",
        action="store_true",
        help="long-running modes of the model and stress tests (hours)",
    )


@pytest.fixture(autouse=True)
def daemons(request: pytest.FixtureRequest) -> Iterator[DaemonWatch]:
    """The daemons and `memfs serve` processes this test starts, checked at teardown
    (tests/support/daemonwatch.py): each stopped by SIGTERM if still running, with the
    exit code the test expected and no ERROR line or traceback in its log that
    `expect_log` or `@pytest.mark.daemon_log(regex, ...)` did not declare; a server that
    outlives the test (`shared_server`) for what it logged meanwhile and that it runs."""
    watch = daemonwatch.begin()
    for marker in request.node.iter_markers("daemon_log"):
        watch.expect_log(*marker.args)
    try:
        yield watch
    finally:
        daemonwatch.end()
        problems = watch.problems()
    if problems:
        pytest.fail("\n\n".join(problems), pytrace=False)


def dump_all_stacks() -> None:
    """At a deadline: this process's threads to stderr, each daemon's to its log."""
    faulthandler.dump_traceback(sys.stderr, all_threads=True)
    watch = daemonwatch.current()
    for daemon in watch.daemons if watch else ():
        daemon.dump_stacks()


@pytest.fixture(autouse=True)
def bounded(request: pytest.FixtureRequest, daemons: DaemonWatch) -> Iterator[None]:
    """`@pytest.mark.deadline(S)`: the test fails after S seconds (10× with --long)
    instead of hanging CI on a system call stuck in a mount; every stack is dumped
    first. A hang SIGALRM cannot break (an uninterruptible wait) ends the run two
    minutes later, stacks dumped, rather than CI's whole budget."""
    marker = request.node.get_closest_marker("deadline")
    if marker is None:
        yield
        return
    seconds = int(marker.args[0]) * (10 if request.config.getoption("--long") else 1)
    faulthandler.dump_traceback_later(seconds + 120, exit=True)
    try:
        with deadline(seconds, on_expiry=dump_all_stacks):
            yield
    finally:
        faulthandler.cancel_dump_traceback_later()


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    """A fresh `memfs serve` on its own database, stopped at teardown."""
    proc = start_server(tmp_path / "store.db")
    try:
        yield proc
    finally:
        proc.stop()


@pytest.fixture
def api(server: ServerProcess) -> Iterator[Api]:
    with Api(server.url, server.api_key) as client:
        yield client


@pytest.fixture(scope="session")
def shared_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """One server for the whole session, for tests that only need fresh stores (fast)."""
    proc = start_server(tmp_path_factory.mktemp("shared-server") / "store.db")
    try:
        yield proc
    finally:
        proc.retire()  # exit 0, and nothing undeclared logged since the last test


@pytest.fixture
def shared_api(shared_server: ServerProcess) -> Iterator[Api]:
    with Api(shared_server.url) as client:
        yield client


@pytest.fixture
def store(shared_api: Api) -> dict[str, object]:
    """A fresh, empty store on the shared server."""
    return shared_api.create_store("Test Store")


@pytest.fixture
def mount(
    tmp_path: Path, shared_server: ServerProcess, store: dict[str, object]
) -> Iterator[MountProcess]:
    """A live single-store mount of `store` (writable), torn down after the test."""
    require_fuse()
    proc = mount_store(tmp_path, shared_server.url, str(store["id"]))
    try:
        yield proc
    finally:
        proc.cleanup()
