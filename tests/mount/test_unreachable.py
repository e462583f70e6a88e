"""Start-up against a server that hangs or is down (issue 12, item 7 and offline start)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.hung import HungServer
from tests.support.mount import is_mounted

pytestmark = pytest.mark.deadline(180)

MEMFS = [sys.executable, "-m", "memfs.cli"]


def test_mount_daemon_reports_a_hung_server_within_seconds(tmp_path: Path) -> None:
    mountpoint = tmp_path / "mnt"
    mountpoint.mkdir()
    with HungServer() as hung:
        env = {**os.environ, "ANTHROPIC_BASE_URL": hung.url}
        result = subprocess.run(
            [*MEMFS, "mount", "memstore_x", str(mountpoint), "--daemon",
             "--cache-dir", str(tmp_path / "cache")],
            env=env, capture_output=True, text=True, timeout=25)
    assert result.returncode == 3, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert hung.url in lines[0] and "did not answer" in lines[0], lines[0]
    assert "ReadTimeout: ReadTimeout" not in lines[0]
    assert not is_mounted(mountpoint)
