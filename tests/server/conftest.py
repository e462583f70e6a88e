"""The server tier runs against both backends: every test that takes `server`,
`shared_server` (or what builds on them: `api`, `shared_api`, `store`) runs once on
SQLite and once on a real PostgreSQL cluster."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.postgres import BACKENDS, start_on
from tests.support.server import ServerProcess


def _start(request: pytest.FixtureRequest, tmp: Path) -> ServerProcess:
    return start_on(request.param, request, tmp)


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
        proc.retire()
