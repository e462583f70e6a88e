"""Fixtures shared by every suite: a real store server and a client for it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.api import Api
from tests.support.deadline import deadline
from tests.support.mount import MountProcess, mount_store, require_fuse
from tests.support.server import ServerProcess, start_server

pytest_plugins = ["tests.support.postgres"]  # the session's PostgreSQL cluster fixture


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--long",
        action="store_true",
        help="long-running modes of the model and stress tests (hours)",
    )


@pytest.fixture(autouse=True)
def bounded(request: pytest.FixtureRequest) -> Iterator[None]:
    """`@pytest.mark.deadline(S)`: the test fails after S seconds (10× with --long)
    instead of hanging CI on a system call stuck in a mount."""
    marker = request.node.get_closest_marker("deadline")
    if marker is None:
        yield
        return
    seconds = int(marker.args[0]) * (10 if request.config.getoption("--long") else 1)
    with deadline(seconds):
        yield


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
        proc.stop()


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
