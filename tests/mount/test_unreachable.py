"""Start-up against a server that hangs or is down (issue 12, item 7 and offline start)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.api import Api
from tests.support.files import store_files
from tests.support.hung import HungServer
from tests.support.mount import MountProcess, is_mounted, mount_store
from tests.support.server import ServerProcess

pytestmark = pytest.mark.deadline(180)

MEMFS = [sys.executable, "-m", "memfs.cli"]


def test_mount_daemon_reports_a_hung_server_within_seconds(tmp_path: Path) -> None:
    mountpoint = tmp_path / "mnt"
    mountpoint.mkdir()
    with HungServer() as hung:
        env = {**os.environ, "ANTHROPIC_BASE_URL": hung.url}
        result = subprocess.run(
            [
                *MEMFS,
                "mount",
                "memstore_x",
                str(mountpoint),
                "--daemon",
                "--cache-dir",
                str(tmp_path / "cache"),
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=25,
        )
    assert result.returncode == 3, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert hung.url in lines[0] and "did not answer" in lines[0], lines[0]
    assert "ReadTimeout: ReadTimeout" not in lines[0]
    assert not is_mounted(mountpoint)


def status_of(proc: MountProcess) -> dict[str, Any]:
    answer = json.loads(proc.memfs("status", str(proc.mountpoint)).stdout)["mounts"][0]
    assert answer["ok"], answer
    return dict(answer["stores"][0])


def test_a_warm_cache_starts_offline_and_catches_up(
    tmp_path: Path, server: ServerProcess, api: Api
) -> None:
    store_id = str(api.create_store("offline")["id"])
    api.create_memory(store_id, "/old.md", "old\n")
    first = mount_store(tmp_path, server.url, store_id)
    try:
        (first.mountpoint / "mine.md").write_text("mine\n")
        first.sync()
        assert first.stop() == 0
    finally:
        first.cleanup()
    server.stop()

    again = MountProcess(
        first.args, first.mountpoint, url=server.url, log_path=tmp_path / "again.log"
    )
    again.start()  # today: "cannot reach the store server", exit 3
    try:
        root = again.mountpoint
        assert (root / "old.md").read_text() == "old\n"
        assert (root / "mine.md").read_text() == "mine\n"
        (root / "mine.md").write_text("mine, edited offline\n")
        (root / "new.md").write_text("written offline\n")
        stats = status_of(again)
        assert stats["offline"] is True and stats["dirty"] == 2
        assert "starting offline" in again.log()
        assert again.memfs("sync", str(root), check=False).returncode == 1  # still down

        server.start()  # same port and database
        again.sync()
        assert store_files(api, store_id) == {
            "old.md": "old\n",
            "mine.md": "mine, edited offline\n",
            "new.md": "written offline\n",
        }
        stats = status_of(again)
        assert stats["offline"] is False and stats["dirty"] == 0
        assert again.stop() == 0
    finally:
        again.cleanup()


def test_a_cold_cache_still_refuses_to_start_without_the_server(tmp_path: Path) -> None:
    mountpoint = tmp_path / "mnt"
    mountpoint.mkdir()
    with HungServer() as hung:
        url = hung.url
    env = {**os.environ, "ANTHROPIC_BASE_URL": url}  # nothing listens there any more
    result = subprocess.run(
        [
            *MEMFS,
            "--log-level",
            "error",
            "mount",
            "memstore_x",
            str(mountpoint),
            "--cache-dir",
            str(tmp_path / "cache"),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 3, result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert "cannot reach the store at" in line and "no local copy" in line, line
    assert not is_mounted(mountpoint)
    assert not (tmp_path / "cache").exists()
