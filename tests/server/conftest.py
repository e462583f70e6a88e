"""The server tier runs against both backends: every test that takes `server`,
`shared_server` (or what builds on them: `api`, `shared_api`, `store`) runs once on
SQLite and once on a real PostgreSQL cluster."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.postgres import PostgresCluster
from tests.support.server import ServerProcess, start_server

BACKENDS = ("sqlite", "postgresql")


def _start(request: pytest.FixtureRequest, tmp: Path) -> ServerProcess:
    if request.param == "postgresql":
        cluster: PostgresCluster = request.getfixturevalue("postgres")
        return start_server(cluster.database(), log_path=tmp / "server.log")
    return start_server(tmp / "store.db")


@pytest.fixture(params=BACKENDS)
def server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ServerProcess]:
    """A fresh `memfs serve` on its own database, stopped at teardown."""
    proc = _start(request, tmp_path)
    try:
        yield proc
    finally:
        proc.stop()


@pytest.fixture(scope="session", params=BACKENDS)
def shared_server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    """One server per backend for the whole session, for tests that need fresh stores."""
    proc = _start(request, tmp_path_factory.mktemp(f"shared-{request.param}"))
    try:
        yield proc
    finally:
        proc.stop()
