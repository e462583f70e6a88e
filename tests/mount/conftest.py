"""Every test in this tier runs against a real FUSE mount: it carries the `fuse` marker
and fails (under CI=true) or skips (elsewhere) when this machine cannot mount."""

from __future__ import annotations

import pytest

from tests.support.mount import require_fuse


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "/tests/mount/" in str(item.path):
            item.add_marker(pytest.mark.fuse)


@pytest.fixture(autouse=True)
def _fuse_usable() -> None:
    require_fuse()
