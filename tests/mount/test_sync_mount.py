"""The sync rules end to end: real daemons over real FUSE mounts against `memfs serve`,
with remote edits made through the API (as another client would make them)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.api import Api
from tests.support.deadline import eventually
from tests.support.mount import MountProcess, is_mounted, mount_store, require_fuse, xattrs
from tests.support.server import ServerProcess

pytestmark = pytest.mark.fuse


def by_path(api: Api, store_id: str) -> dict[str, dict[str, Any]]:
    return {m["path"]: m for m in api.list_memories(store_id)}


def contents(api: Api, store_id: str) -> dict[str, str]:
    return {
        p: api.get_memory(store_id, m["id"])["content"] for p, m in by_path(api, store_id).items()
    }


def status(mount: MountProcess) -> dict[str, Any]:
    out = mount.memfs("status", str(mount.mountpoint), "--json").stdout
    store: dict[str, Any] = json.loads(out)["mounts"][0]["stores"][0]
    return store


def local_tree(root: Path) -> dict[str, str]:
    return {
        "/" + str(p.relative_to(root)): p.read_text()
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.name != ".anthropic-memory-store"
    }


def test_conflict_store_wins_copy_kept_and_reported(
    shared_api: Api, store: dict[str, Any], mount: MountProcess
) -> None:
    sid = str(store["id"])
    f = mount.mountpoint / "plan.md"
    f.write_text("base\n")
    mount.sync()
    mid = by_path(shared_api, sid)["/plan.md"]["id"]
    assert f.read_text() == "base\n"  # now in the kernel's page cache
    shared_api.update_memory(sid, mid, content="remote wins\n")
    f.write_text("local loses\n")
    mount.sync()
    assert f.read_text() == "remote wins\n"
    assert contents(shared_api, sid) == {"/plan.md": "remote wins\n"}
    assert by_path(shared_api, sid)["/plan.md"]["id"] == mid
    st = status(mount)
    assert st["conflicts"] == 1
    (copy,) = st["conflict_copies"]
    assert copy["path"] == "/plan.md"
    assert Path(copy["copy"]).read_text() == "local loses\n"
    assert not Path(copy["copy"]).is_relative_to(mount.mountpoint)
    log = mount.log()
    assert "memory changed both locally and remotely; keeping the remote version" in log
    assert copy["copy"] in log
    attrs = xattrs(f)
    assert attrs["user.memfs.state"] == "conflict"
    assert attrs["user.memfs.conflict_copy"] == copy["copy"]


def test_remote_create_edit_rename_delete_visible_after_sync(
    shared_api: Api, store: dict[str, Any], mount: MountProcess
) -> None:
    sid = str(store["id"])
    root = mount.mountpoint
    (root / "docs").mkdir()
    for name, text in {"edit.md": "v1", "rename.md": "r", "gone.md": "g"}.items():
        (root / "docs" / name).write_text(text)
    mount.sync()
    ids = {p: m["id"] for p, m in by_path(shared_api, sid).items()}
    # Warm every kernel cache: dentries, attributes, pages.
    assert sorted(os.listdir(root / "docs")) == ["edit.md", "gone.md", "rename.md"]
    assert (root / "docs" / "edit.md").read_text() == "v1"
    assert (root / "docs" / "gone.md").stat().st_size == 1
    shared_api.create_memory(sid, "/docs/new.md", "fresh")
    shared_api.update_memory(sid, ids["/docs/edit.md"], content="version two")
    shared_api.update_memory(sid, ids["/docs/rename.md"], path="/other/renamed.md")
    shared_api.delete_memory(sid, ids["/docs/gone.md"])
    mount.sync()
    assert sorted(os.listdir(root / "docs")) == ["edit.md", "new.md"]
    assert (root / "docs" / "edit.md").read_text() == "version two"
    assert (root / "docs" / "edit.md").stat().st_size == len("version two")
    assert (root / "docs" / "new.md").read_text() == "fresh"
    assert (root / "other" / "renamed.md").read_text() == "r"
    assert not (root / "docs" / "gone.md").exists()
    assert not (root / "docs" / "rename.md").exists()
    assert xattrs(root / "other" / "renamed.md")["user.memfs.memory_id"] == ids["/docs/rename.md"]
    assert contents(shared_api, sid) == {
        "/docs/edit.md": "version two",
        "/docs/new.md": "fresh",
        "/other/renamed.md": "r",
    }


def test_local_renames_and_saves_keep_memory_ids(
    shared_api: Api, store: dict[str, Any], mount: MountProcess
) -> None:
    sid = str(store["id"])
    root = mount.mountpoint
    (root / "dir").mkdir()
    (root / "dir" / "a.md").write_text("A")
    (root / "dir" / "b.md").write_text("B")
    (root / "solo.md").write_text("solo")
    (root / "atomic.md").write_text("before")
    (root / "sed.md").write_text("hello")
    mount.sync()
    ids = {p: m["id"] for p, m in by_path(shared_api, sid).items()}
    os.rename(root / "solo.md", root / "renamed.md")
    os.rename(root / "dir", root / "moved")
    tmp = root / ".atomic.md.tmp"
    tmp.write_text("after")
    os.replace(tmp, root / "atomic.md")
    subprocess.run(["sed", "-i", "s/hello/bye/", str(root / "sed.md")], check=True)
    mount.sync()
    now = by_path(shared_api, sid)
    assert set(now) == {"/renamed.md", "/moved/a.md", "/moved/b.md", "/atomic.md", "/sed.md"}
    assert now["/renamed.md"]["id"] == ids["/solo.md"]
    assert now["/moved/a.md"]["id"] == ids["/dir/a.md"]
    assert now["/moved/b.md"]["id"] == ids["/dir/b.md"]
    assert now["/atomic.md"]["id"] == ids["/atomic.md"]
    assert now["/sed.md"]["id"] == ids["/sed.md"]
    assert contents(shared_api, sid)["/atomic.md"] == "after"
    assert contents(shared_api, sid)["/sed.md"] == "bye"
    assert xattrs(root / "atomic.md")["user.memfs.state"] == "clean"


@pytest.mark.parametrize("mode", ["enabled", "log_only", "disabled"])
def test_deletion_modes(
    tmp_path: Path, shared_server: ServerProcess, shared_api: Api, mode: str
) -> None:
    require_fuse()
    sid = str(shared_api.create_store(f"deletions {mode}")["id"])
    keep = shared_api.create_memory(sid, "/keep.md", "keep")
    doomed = shared_api.create_memory(sid, "/doomed.md", "doomed")
    mount = mount_store(tmp_path, shared_server.url, sid, "--deletions", mode)
    try:
        assert (mount.mountpoint / "doomed.md").read_text() == "doomed"
        os.unlink(mount.mountpoint / "doomed.md")
        mount.sync()
        mount.sync()
        remaining = by_path(shared_api, sid)
        log = mount.log()
        if mode == "enabled":
            assert set(remaining) == {"/keep.md"}
            assert "propagated local deletion" in log
        else:
            assert set(remaining) == {"/keep.md", "/doomed.md"}
            assert remaining["/doomed.md"]["id"] == doomed["id"]
            assert "propagated local deletion" not in log
        assert ("log-only: sync would delete this memory on the server" in log) == (
            mode == "log_only"
        )
        assert remaining["/keep.md"]["id"] == keep["id"]
        assert not (mount.mountpoint / "doomed.md").exists()
        assert mount.stop() == 0
    finally:
        mount.cleanup()


def test_timer_runs_passes_without_being_asked(
    tmp_path: Path, shared_server: ServerProcess, shared_api: Api
) -> None:
    require_fuse()
    sid = str(shared_api.create_store("timer")["id"])
    mount = mount_store(tmp_path, shared_server.url, sid, "--sync-interval", "5")
    try:
        (mount.mountpoint / "t.md").write_text("by the timer")
        eventually(lambda: by_path(shared_api, sid), "the timer's pass", timeout=12, interval=0.2)
        assert contents(shared_api, sid) == {"/t.md": "by the timer"}
    finally:
        mount.cleanup()


def test_unmount_flushes_1000_dirty_files_within_the_bound(
    shared_api: Api, store: dict[str, Any], mount: MountProcess
) -> None:
    sid = str(store["id"])
    root = mount.mountpoint
    for d in range(10):
        (root / f"d{d}").mkdir()
        for i in range(100):
            (root / f"d{d}" / f"f{i:03d}.md").write_text(f"file {d}/{i}\n")
    t0 = time.monotonic()
    assert mount.stop(timeout=60) == 0
    elapsed = time.monotonic() - t0
    assert elapsed < 30, f"flush took {elapsed:.1f}s"
    assert not is_mounted(root)
    memories = shared_api.list_memories(sid)
    assert len(memories) == 1000
    assert {m["path"] for m in memories} == {
        f"/d{d}/f{i:03d}.md" for d in range(10) for i in range(100)
    }
    sample = next(m for m in memories if m["path"] == "/d7/f042.md")
    assert shared_api.get_memory(sid, sample["id"])["content"] == "file 7/42\n"
    print(f"flush of 1000 files: {elapsed:.2f}s")


def test_kill_9_mid_sync_then_restart_loses_nothing(
    tmp_path: Path, shared_server: ServerProcess, shared_api: Api
) -> None:
    require_fuse()
    sid = str(shared_api.create_store("crash")["id"])
    edited = shared_api.create_memory(sid, "/edited.md", "old")
    removed = shared_api.create_memory(sid, "/removed.md", "bye")
    mount = mount_store(tmp_path, shared_server.url, sid)
    try:
        root = mount.mountpoint
        assert (root / "edited.md").read_text() == "old"
        (root / "edited.md").write_text("new")
        os.unlink(root / "removed.md")
        expected = {"/edited.md": "new"}
        for i in range(400):
            (root / f"n{i:03d}.md").write_text(f"note {i}")
            expected[f"/n{i:03d}.md"] = f"note {i}"
        syncing = subprocess.Popen(
            [sys.executable, "-m", "memfs.cli", "sync", str(root)],
            env=mount.env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10  # kill once some (not all) uploads have landed
        while time.monotonic() < deadline and len(shared_api.list_memories(sid)) < 30:
            time.sleep(0.005)
        mount.kill()
        syncing.wait(30)
        landed = len(shared_api.list_memories(sid))
        mount.cleanup()
        again = mount_store(tmp_path, shared_server.url, sid)  # same cache directory
        try:
            again.sync()
            assert contents(shared_api, sid) == expected
            assert by_path(shared_api, sid)["/edited.md"]["id"] == edited["id"]
            assert removed["id"] not in {m["id"] for m in shared_api.list_memories(sid)}
            assert local_tree(again.mountpoint) == expected
            assert status(again)["dirty"] == 0
            assert again.stop() == 0
        finally:
            again.cleanup()
        print(f"kill -9 after {landed} of 402 changes had landed")
    finally:
        mount.cleanup()


def test_two_mounts_of_one_store_converge(
    tmp_path: Path, shared_server: ServerProcess, shared_api: Api
) -> None:
    require_fuse()
    sid = str(shared_api.create_store("two mounts")["id"])
    shared_api.create_memory(sid, "/shared.md", "v0")
    one = mount_store(tmp_path, shared_server.url, sid, name="one")
    two = mount_store(tmp_path, shared_server.url, sid, name="two")
    try:
        r1, r2 = one.mountpoint, two.mountpoint
        assert (r2 / "shared.md").read_text() == "v0"
        (r1 / "from-one.md").write_text("1")
        (r2 / "from-two.md").write_text("2")
        (r1 / "shared.md").write_text("edited on one")
        one.sync()
        two.sync()
        one.sync()
        assert (
            local_tree(r1)
            == local_tree(r2)
            == {"/shared.md": "edited on one", "/from-one.md": "1", "/from-two.md": "2"}
        )
        os.rename(r2 / "from-one.md", r2 / "renamed-by-two.md")
        os.unlink(r2 / "from-two.md")
        two.sync()
        one.sync()
        assert (
            local_tree(r1)
            == local_tree(r2)
            == contents(shared_api, sid)
            == {"/shared.md": "edited on one", "/renamed-by-two.md": "1"}
        )
        assert one.stop() == 0 and two.stop() == 0
    finally:
        one.cleanup()
        two.cleanup()


def test_sync_of_one_file_pushes_it_and_waits_for_the_store(
    shared_api: Api, store: dict[str, Any], mount: MountProcess
) -> None:
    """`memfs sync FILE`: that file now, answered with the store's word (exit 0 once the
    store has it, 1 with the reason when it will not take it)."""
    sid = str(store["id"])
    f = mount.mountpoint / "one" / "note.md"
    f.parent.mkdir()
    f.write_text("pushed by name\n")
    done = mount.memfs("sync", str(f))
    assert done.returncode == 0, done.stderr
    assert re.fullmatch(r"/one/note\.md: (pushed version=memver_\w+|unchanged)\n", done.stdout)
    assert contents(shared_api, sid)["/one/note.md"] == "pushed by name\n"
    again = mount.memfs("sync", str(f), "--json")
    assert json.loads(again.stdout)["outcome"] == "unchanged"
    bad = mount.mountpoint / "bad.md"
    fd = os.open(bad, os.O_WRONLY | os.O_CREAT, 0o644)
    with pytest.raises(OSError, match="Invalid or incomplete multibyte"):
        os.write(fd, b"\xff\xfe not text\n")  # EILSEQ at the write: the file is held back
    os.close(fd)
    refused = mount.memfs("sync", str(bad), check=False)
    assert refused.returncode == 1
    assert refused.stderr.startswith("/bad.md: refused (content is not valid UTF-8")
    missing = mount.memfs("sync", str(mount.mountpoint / "nothing.md"), check=False)
    assert missing.returncode == 1 and "/nothing.md: missing" in missing.stderr
    assert "/bad.md" not in contents(shared_api, sid)
    mount.expect_exit(1)  # the unmount names the file the store does not have
