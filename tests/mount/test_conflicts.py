"""`memfs conflicts` through the real CLI on live mounts: a forced conflict is listed with
the version that won, its bytes come back exactly, a restore reaches the store (or loses
again and is kept again), drop forgets it, and a read-only store refuses the restore. A
clean merge the store cannot hold is a conflict copy that says why."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from memfs.paths import MAX_CONTENT_BYTES
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


# Two clean edits of a 60 KB memory, 35 KB each: each side fits the store, their merge
# (130 KB) does not (issue 35 item 8 reproduced it with 130,702 bytes).
BIG_BASE = "".join(f"base line {i:05d}\n" for i in range(3_750))
MINE = "".join(f"mine {i:05d} ................\n" for i in range(1_250))
THEIRS = "".join(f"theirs {i:05d} ..............\n" for i in range(1_250))


def test_a_merge_the_store_cannot_hold_keeps_the_local_side_and_fails_the_sync(
    quiet: MountProcess, shared_api: Api, store: dict[str, Any]
) -> None:
    """Before, the clean merge was pushed, refused and held back: no copy was kept, the
    log said "merged the two" and `memfs sync` exited 0. Now the store wins, the local
    side is a conflict copy that says why, and `memfs sync` exits 1 until it is dealt
    with (a restore, a drop, or a new edit pushed)."""
    sid = str(store["id"])
    f = quiet.mountpoint / "big.md"
    f.write_text(BIG_BASE)
    quiet.sync()
    local, remote = MINE + BIG_BASE, BIG_BASE + THEIRS
    merged = len(local) + len(remote) - len(BIG_BASE)
    assert max(len(local), len(remote)) <= MAX_CONTENT_BYTES < merged
    why = f"the merge of both sides is {merged} bytes, over the store's limit of 102400"
    shared_api.update_memory(sid, memory(shared_api, sid, "/big.md")["id"], content=remote)
    f.write_text(local)
    done = quiet.memfs("sync", str(quiet.mountpoint), check=False)
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert " conflicts=1 " in done.stdout and f"({why})" in done.stdout, done.stdout
    assert f.read_text() == remote
    assert memory(shared_api, sid, "/big.md")["content"] == remote
    assert xattrs(f)["user.memfs.state"] == "conflict"
    [kept] = quiet.mount_status()["stores"][0]["conflict_copies"]
    assert kept["why"] == why and Path(kept["copy"]).read_text() == local
    status = [sys.executable, "-m", "memfs.cli", "status", str(quiet.mountpoint)]
    code, human, _ = on_a_terminal(status, quiet.env)
    assert code == 0 and f"conflict: /big.md -> {kept['copy']} ({why})" in human, human
    log = quiet.log()
    assert "merged the two" not in log and f'why="{why}"' in log
    # until it is dealt with, every `memfs sync` says so
    again = quiet.memfs("sync", str(quiet.mountpoint), check=False)
    assert again.returncode == 1 and why in again.stdout, again.stdout
    (copy,) = listed(quiet)
    cli_ok(quiet, "conflicts", "drop", copy["id"])
    quiet.sync()
