"""Every test in this tier runs against a real FUSE mount: it carries the `fuse` marker
and fails (under CI=true) or skips (elsewhere) when this machine cannot mount, and a hang
bound (`deadline`, DEFAULT_DEADLINE seconds unless it names its own)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.mount import QUIET, MountProcess, mount_store, require_fuse
from tests.support.server import ServerProcess

DEFAULT_DEADLINE = 300  # seconds; the slowest single test here takes about a minute


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "/tests/mount/" in str(item.path):
            item.add_marker(pytest.mark.fuse)
            if item.get_closest_marker("deadline") is None:
                item.add_marker(pytest.mark.deadline(DEFAULT_DEADLINE))


@pytest.fixture(autouse=True)
def _fuse_usable() -> None:
    require_fuse()


@pytest.fixture
def quiet(
    tmp_path: Path, shared_server: ServerProcess, store: dict[str, Any]
) -> Iterator[MountProcess]:
    """A mount of a fresh store that syncs only when asked: no pass runs between a
    test's steps, so each step's outcome is known."""
    proc = mount_store(
        tmp_path,
        shared_server.url,
        str(store["id"]),
        *QUIET,
    )
    try:
        yield proc
    finally:
        proc.cleanup()
