"""Another user pre-creating the runtime directory cannot deny memfs to a user (issue 24,
item 6): mount, status, sync and unmount all work through the fallback, each saying so
in one line; with no private directory at all, one clear line and no traceback."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

from tests.support.mount import MountProcess, is_mounted
from tests.support.server import ServerProcess

pytestmark = pytest.mark.deadline(120)

NOBODY = 65534


def _cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "memfs.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def _warned_once(result: subprocess.CompletedProcess[str], planted: Path) -> None:
    assert "Traceback" not in result.stderr, result.stderr
    lines = [ln for ln in result.stderr.splitlines() if "runtime directory not private" in ln]
    assert len(lines) == 1, result.stderr
    assert f"path={planted}" in lines[0] and f"belongs to uid {NOBODY}" in lines[0], lines


def test_a_planted_runtime_directory_falls_back(
    tmp_path: Path, shared_server: ServerProcess, store: dict[str, Any]
) -> None:
    planted = tmp_path / "xdg" / "memfs"
    planted.mkdir(parents=True, mode=0o777)
    os.chown(planted, NOBODY, NOBODY)  # another user was there first
    home = Path(tempfile.mkdtemp(prefix="h", dir="/tmp"))  # a socket path fits in 107 bytes
    env = {"XDG_RUNTIME_DIR": str(tmp_path / "xdg"), "HOME": str(home)}
    mountpoint = tmp_path / "mnt"
    proc = MountProcess(
        ["mount", str(store["id"]), str(mountpoint), "--cache-dir", str(tmp_path / "cache")],
        mountpoint,
        url=shared_server.url,
        log_path=tmp_path / "mnt.log",
        env=env,
    ).start()
    try:
        (mountpoint / "a.md").write_text("hello\n")
        fallback = home / ".local" / "state" / "memfs" / "run"
        assert len(list(fallback.glob("*.sock"))) == 1
        assert list(planted.iterdir()) == []  # nothing of ours in the planted directory
        assert os.stat(fallback).st_mode & 0o777 == 0o700
        for args in (["status", str(mountpoint)], ["sync", str(mountpoint)]):
            result = proc.memfs(*args, "--json", check=False)
            assert result.returncode == 0, result.stderr
            _warned_once(result, planted)
        result = proc.memfs("unmount", str(mountpoint), check=False)
        assert result.returncode == 0, result.stderr
        _warned_once(result, planted)
        assert proc.wait(30) == 0
        assert not is_mounted(mountpoint)
    finally:
        proc.cleanup()
        shutil.rmtree(home, ignore_errors=True)


def test_no_private_directory_at_all_is_one_clear_line(tmp_path: Path) -> None:
    planted = tmp_path / "xdg" / "memfs"
    planted.mkdir(parents=True)
    os.chown(planted, NOBODY, NOBODY)
    home = tmp_path / "home"
    (home / ".local" / "state" / "memfs").mkdir(parents=True)
    (home / ".local" / "state" / "memfs" / "run").symlink_to("/etc")
    env = {**os.environ, "XDG_RUNTIME_DIR": str(tmp_path / "xdg"), "HOME": str(home)}
    for command in (["status"], ["sync", str(tmp_path)], ["unmount", str(tmp_path)]):
        result = _cli(env, *command)
        assert "Traceback" not in result.stderr, result.stderr
        assert result.returncode == 2, (command, result.stderr)
        assert result.stderr.strip().splitlines()[-1] == (
            f"memfs: the runtime directory {planted} is not a private directory of this user "
            f"(it belongs to uid {NOBODY}), nor is {home}/.local/state/memfs/run "
            "(it is a symbolic link); remove one or set XDG_RUNTIME_DIR"
        ), result.stderr
    assert os.stat("/etc").st_mode & 0o777 == 0o755  # the link was never followed
