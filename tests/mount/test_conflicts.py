"""`memfs conflicts` through the real CLI on live mounts: a forced conflict is listed with
the version that won, its bytes come back exactly, a restore reaches the store (or loses
again and is kept again), drop forgets it, and a read-only store refuses the restore."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.api import Api
from tests.support.mount import MountProcess, cli_bytes, cli_ok, mount_store, xattrs
from tests.support.server import ServerProcess
from tests.support.terminal import on_a_terminal

pytestmark = [pytest.mark.fuse, pytest.mark.deadline(180)]


def listed(mount: MountProcess) -> list[dict[str, Any]]:
    answer = json.loads(cli_ok(mount, "conflicts", str(mount.mountpoint), "--json"))
    (one,) = answer["mounts"]
    found: list[dict[str, Any]] = one["conflicts"]
    return found


def memory(api: Api, store_id: str, path: str) -> dict[str, Any]:
    (m,) = [m for m in api.list_memories(store_id) if m["path"] == path]
    return api.get_memory(store_id, m["id"])


LOSING = "local \u00e9dit that loses\r\nno newline".encode()


def force_conflict(mount: MountProcess, api: Api, store_id: str, remote: str) -> Path:
    f = mount.mountpoint / "plan.md"
    f.write_text("base\n")
    mount.sync()
    mid = memory(api, store_id, "/plan.md")["id"]
    api.update_memory(store_id, mid, content=remote)
    f.write_bytes(LOSING)
    mount.sync()
    assert f.read_text() == remote
    return f


def test_a_forced_conflict_is_listed_shown_and_restored_to_the_store(
    quiet: MountProcess, shared_api: Api, store: dict[str, Any]
) -> None:
    sid = str(store["id"])
    f = force_conflict(quiet, shared_api, sid, "remote wins\n")
    winner = memory(shared_api, sid, "/plan.md")
    (kept,) = listed(quiet)
    assert kept["path"] == "/plan.md" and kept["local_path"] == str(f)
    assert kept["remote_version"] == winner["memory_version_id"]
    assert kept["size"] == len(LOSING) and kept["restored_at"] is None
    assert kept["memory_id"] == winner["id"]
    assert Path(kept["copy"]).read_bytes() == LOSING
    text = cli_ok(quiet, "conflicts", str(quiet.mountpoint)).decode()
    assert text.startswith(f"{quiet.mountpoint}: 1 conflict copy\n"), text
    assert f"{kept['id']}" in text and f"lost to {winner['memory_version_id']}" in text
    assert cli_ok(quiet, "conflicts", "show", kept["id"]) == LOSING
    assert cli_ok(quiet, "conflicts", "show", kept["id"][:4]) == LOSING  # a unique prefix

    cli_ok(quiet, "conflicts", "restore", kept["id"])
    assert f.read_bytes() == LOSING
    quiet.sync()
    back = memory(shared_api, sid, "/plan.md")
    assert back["content"].encode() == LOSING and back["id"] == winner["id"]
    (after,) = listed(quiet)
    assert after["restored_at"] is not None
    assert xattrs(f)["user.memfs.state"] == "clean"  # the pushed edit resolved it
    status = [sys.executable, "-m", "memfs.cli", "status", str(quiet.mountpoint)]
    code, human, _ = on_a_terminal(status, quiet.env)
    assert code == 0 and " conflicts=0 " in human and "conflict:" not in human, human

    cli_ok(quiet, "conflicts", "drop", kept["id"])
    assert listed(quiet) == []
    assert not Path(kept["copy"]).exists()
    missing = cli_bytes(quiet, "conflicts", "show", kept["id"])
    assert missing.returncode == 1 and b"no conflict copy" in missing.stderr


def test_a_restore_that_loses_again_is_kept_again(
    quiet: MountProcess, shared_api: Api, store: dict[str, Any]
) -> None:
    sid = str(store["id"])
    f = force_conflict(quiet, shared_api, sid, "remote wins\n")
    (first,) = listed(quiet)
    mid = memory(shared_api, sid, "/plan.md")["id"]
    shared_api.update_memory(sid, mid, content="remote again\n")  # not pulled yet
    cli_ok(quiet, "conflicts", "restore", first["id"], "--mount", str(quiet.mountpoint))
    assert f.read_bytes() == LOSING
    quiet.sync()  # pushed with a precondition: the store changed, so it loses again
    assert f.read_text() == "remote again\n"
    assert memory(shared_api, sid, "/plan.md")["content"] == "remote again\n"
    copies = listed(quiet)
    assert len(copies) == 2
    second = next(c for c in copies if c["id"] != first["id"])
    assert Path(second["copy"]).read_bytes() == LOSING
    assert second["remote_version"] == memory(shared_api, sid, "/plan.md")["memory_version_id"]
    # a dirty file is not overwritten without --force
    f.write_text("new local work\n")
    refused = cli_bytes(
        quiet, "conflicts", "restore", second["id"], "--mount", str(quiet.mountpoint)
    )
    assert refused.returncode == 1 and b"not pushed yet" in refused.stderr
    assert f.read_text() == "new local work\n"


def test_copies_outlive_the_mount_and_a_read_only_store_refuses_their_restore(
    tmp_path: Path, shared_server: ServerProcess, shared_api: Api, store: dict[str, Any]
) -> None:
    sid = str(store["id"])
    first = mount_store(tmp_path, shared_server.url, sid, "--sync-interval", "3600")
    try:
        force_conflict(first, shared_api, sid, "remote wins\n")
        (kept,) = listed(first)
        assert first.stop() == 0
    finally:
        first.cleanup()
    ro = mount_store(tmp_path, shared_server.url, sid, "--read-only")  # same cache dir
    try:
        assert listed(ro) == [kept]
        where = ("--mount", str(ro.mountpoint))
        assert cli_ok(ro, "conflicts", "show", kept["id"], *where) == LOSING
        refused = cli_bytes(ro, "conflicts", "restore", kept["id"], *where)
        assert refused.returncode == 1 and b"read-only store" in refused.stderr
        assert (ro.mountpoint / "plan.md").read_text() == "remote wins\n"
        assert memory(shared_api, sid, "/plan.md")["content"] == "remote wins\n"
    finally:
        ro.cleanup()
