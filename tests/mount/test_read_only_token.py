"""A credential that may only read a store mounts it read-only (issue 24 item 7).

Before, a `memfs serve` token scoped `STORE:ro` mounted read-write: writes were accepted
into the journal and every pass then failed with 403. Now the daemon asks the store at
start whether the credential may write (`StoreClient.may_write`) and mounts the store
read-only, as an archived one: every change answers EROFS and nothing piles up.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.api import Api
from tests.support.mount import MountProcess
from tests.support.server import REPO_ROOT, ServerProcess, start_server

ADMIN = "sk-test-admin-read-only-token"
WARNING = "the credential may only read this memory store; mounting it read-only"


@pytest.fixture
def keyed(tmp_path: Path) -> Iterator[ServerProcess]:
    server = start_server(tmp_path / "store.db", api_key=ADMIN)
    try:
        yield server
    finally:
        server.stop()


def issue_token(server: ServerProcess, scope: str) -> str:
    """`memfs serve token create`, the real CLI, as an operator issues one."""
    command = ["serve", "token", "create", "--db", server.db, "--store", scope]
    done = subprocess.run(
        [sys.executable, "-m", "memfs.cli", *command],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO_ROOT,
        check=True,
    )
    return done.stdout.splitlines()[0]


def mount_with_token(
    tmp_path: Path, server: ServerProcess, store_id: str, token: str
) -> MountProcess:
    mountpoint = tmp_path / "mnt"
    args = ["mount", store_id, str(mountpoint), "--cache-dir", str(tmp_path / "cache")]
    return MountProcess(
        [*args, "--sync-interval", "3600"],
        mountpoint,
        url=server.url,
        log_path=tmp_path / "mnt.log",
        env={"ANTHROPIC_AUTH_TOKEN": token},
    ).start()


def shell(command: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["sh", "-c", command], cwd=cwd, capture_output=True, text=True, timeout=30
    )


def test_a_read_only_token_mounts_read_only(tmp_path: Path, keyed: ServerProcess) -> None:
    with Api(keyed.url, ADMIN) as api:
        store = api.create_store("shared notes")["id"]
        api.create_memory(store, "/notes/a.md", "hello\n")
        mount = mount_with_token(tmp_path, keyed, store, issue_token(keyed, f"{store}:ro"))
        try:
            assert shell("cat notes/a.md", mount.mountpoint).stdout == "hello\n"
            for change in (
                "echo changed > notes/a.md",
                "echo new > notes/b.md",
                "mkdir more",
                "rm notes/a.md",
                "mv notes/a.md notes/c.md",
            ):
                done = shell(change, mount.mountpoint)
                assert done.returncode != 0, change
                assert "Read-only file system" in done.stderr, (change, done.stderr)
            status = mount.mount_status()
            assert status["stores"][0]["dirty"] == 0, status
        finally:
            assert mount.stop() == 0
        assert mount.log().count(WARNING) == 1
        assert [(m["path"], m["content"]) for m in _full(api, store)] == [
            ("/notes/a.md", "hello\n")
        ]


def test_a_read_write_token_mounts_writable(tmp_path: Path, keyed: ServerProcess) -> None:
    with Api(keyed.url, ADMIN) as api:
        store = api.create_store("my notes")["id"]
        api.create_memory(store, "/notes/a.md", "hello\n")
        mount = mount_with_token(tmp_path, keyed, store, issue_token(keyed, store))
        try:
            assert shell("echo changed > notes/a.md", mount.mountpoint).returncode == 0
            assert mount.sync().returncode == 0
        finally:
            assert mount.stop() == 0
        assert WARNING not in mount.log()
        assert [(m["path"], m["content"]) for m in _full(api, store)] == [
            ("/notes/a.md", "changed\n")
        ]


def _full(api: Api, store_id: str) -> list[dict[str, object]]:
    return [api.get_memory(store_id, m["id"]) for m in api.list_memories(store_id)]
