"""`memfs status` against a stopped daemon, and a mount ended from outside (issue 24,
item 13): a stopped daemon is reported at once with exit 1; an unmount from outside and
an aborted FUSE connection are each logged as what they are."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.mount import (
    MountProcess,
    is_mounted,
    lazy_unmount,
    mount_store,
    unmount_from_outside,
)
from tests.support.server import ServerProcess

pytestmark = pytest.mark.deadline(120)

FUSECTL = Path("/sys/fs/fuse/connections")


def _mount(tmp_path: Path, server: ServerProcess, store: dict[str, Any]) -> MountProcess:
    return mount_store(tmp_path, server.url, str(store["id"]), "--sync-interval", "3600")


def test_status_of_a_stopped_daemon_is_quick_and_fails(
    tmp_path: Path, shared_server: ServerProcess, store: dict[str, Any]
) -> None:
    proc = _mount(tmp_path, shared_server, store)
    try:
        os.kill(proc.pid, signal.SIGSTOP)
        try:
            t0 = time.monotonic()
            result = proc.memfs("status", str(proc.mountpoint), check=False)
            took = time.monotonic() - t0
            everything = proc.memfs("status", "--json", check=False)
        finally:
            os.kill(proc.pid, signal.SIGCONT)
        assert result.returncode == 1, result
        assert took < 4, took  # told from /proc, not by waiting out a timeout
        assert f"is stopped (SIGSTOP?); resume it: kill -CONT {proc.pid}" in result.stderr
        assert "Traceback" not in result.stderr
        assert everything.returncode == 1 and '"ok": false' in everything.stdout
        # Resumed, it answers again.
        assert proc.memfs("status", str(proc.mountpoint)).returncode == 0
    finally:
        proc.cleanup()


def test_status_of_a_wedged_daemon_is_bounded(
    tmp_path: Path, shared_server: ServerProcess, store: dict[str, Any]
) -> None:
    """A socket nobody answers on (a wedged daemon): exit 1 within the bound."""
    import socket

    proc = _mount(tmp_path, shared_server, store)
    try:
        info = next(
            i for i in _registered(proc) if i["mountpoint"] == os.path.realpath(proc.mountpoint)
        )
        sock = Path(info["socket"])
        sock.unlink()
        silent = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        silent.bind(str(sock))
        silent.listen(1)  # accepts, never answers
        try:
            t0 = time.monotonic()
            result = proc.memfs("status", str(proc.mountpoint), check=False)
            took = time.monotonic() - t0
        finally:
            silent.close()
        assert result.returncode == 1, result
        assert "did not answer within 5s" in result.stderr
        assert 4 < took < 15, took
    finally:
        proc.cleanup()


def _registered(proc: MountProcess) -> list[dict[str, Any]]:
    import json

    from memfs.control import registry

    return [json.loads(p.read_text()) for p in registry.runtime_dir().glob("*.json")]


def test_a_plain_umount_is_logged_as_such(
    tmp_path: Path, shared_server: ServerProcess, store: dict[str, Any]
) -> None:
    proc = _mount(tmp_path, shared_server, store)
    try:
        (proc.mountpoint / "a.md").write_text("kept\n")
        done = unmount_from_outside("umount", str(proc.mountpoint))
        assert done.returncode == 0, done.stderr
        assert proc.wait(60) == 0
        log = proc.log()
        assert "unmounted from outside (umount or fusermount3 -u)" in log, log
        assert "aborted" not in log
    finally:
        proc.cleanup()


def _fusectl() -> None:
    if not any(line.split()[2] == "fusectl" for line in open("/proc/self/mounts")):
        subprocess.run(["mount", "-t", "fusectl", "none", str(FUSECTL)], check=False)
    if not FUSECTL.is_dir() or not any(
        line.split()[2] == "fusectl" for line in open("/proc/self/mounts")
    ):
        if os.environ.get("CI") == "true":
            pytest.fail("fusectl is needed to abort a FUSE connection under CI=true")
        pytest.skip("fusectl (/sys/fs/fuse/connections) is not mounted")


def test_an_aborted_connection_is_logged_as_such(
    tmp_path: Path, shared_server: ServerProcess, store: dict[str, Any]
) -> None:
    _fusectl()
    proc = _mount(tmp_path, shared_server, store)
    try:
        (proc.mountpoint / "a.md").write_text("kept\n")
        minor = os.minor(os.stat(proc.mountpoint).st_dev)
        (FUSECTL / str(minor) / "abort").write_text("1")
        proc.wait(60)
        log = proc.log()
        assert "the FUSE connection was aborted from outside" in log, log
        assert "unmounted from outside" not in log
    finally:
        proc.cleanup()
        lazy_unmount(proc.mountpoint)
        assert not is_mounted(proc.mountpoint)
