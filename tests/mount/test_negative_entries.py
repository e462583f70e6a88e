"""Negative entries over a real mount: the kernel caches "no such file" for a looked-up
missing name, and memfs makes it forget that name when it appears behind the kernel's
back (a pull). A local create on a cached-missing name works as on any filesystem."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from tests.support.api import Api
from tests.support.mount import MountProcess, mount_store
from tests.support.server import ServerProcess

pytestmark = pytest.mark.fuse


def missing(path: Path) -> bool:
    try:
        os.stat(path)
    except FileNotFoundError:
        return True
    return False


def drop_slab() -> int:
    """The kernel's count of slab drops: a drop may evict a cached negative entry."""
    with open("/proc/vmstat") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("drop_slab "))


def test_a_missing_name_is_looked_up_once(mount: MountProcess) -> None:
    before, slab = mount.fuse_requests(), drop_slab()
    for _ in range(5):
        assert missing(mount.mountpoint / "nothing.md")
    after = mount.fuse_requests()
    lookups = after.get("lookup", 0) - before.get("lookup", 0)
    assert lookups == 1 or (drop_slab() != slab and lookups <= 5), lookups


def test_remote_create_is_visible_after_a_pass(
    shared_api: Api, store: dict[str, Any], mount: MountProcess
) -> None:
    sid = str(store["id"])
    root = mount.mountpoint
    old = shared_api.create_memory(sid, "/old.md", "old\n")
    mount.sync()
    for name in ("new.md", "sub", "moved.md"):
        assert missing(root / name)
        assert missing(root / name)  # answered by the kernel's negative entry
    assert missing(root / "sub" / "deep.md")
    shared_api.create_memory(sid, "/new.md", "fresh\n")
    shared_api.create_memory(sid, "/sub/deep.md", "deep\n")
    shared_api.update_memory(sid, old["id"], path="/moved.md")
    mount.sync()
    assert (root / "new.md").read_text() == "fresh\n"
    assert (root / "sub" / "deep.md").read_text() == "deep\n"
    assert (root / "moved.md").read_text() == "old\n"
    assert missing(root / "old.md")
    assert sorted(os.listdir(root)) == [".anthropic-memory-store", "moved.md", "new.md", "sub"]


def test_local_create_on_a_name_cached_missing(
    shared_api: Api, store: dict[str, Any], mount: MountProcess
) -> None:
    sid = str(store["id"])
    root = mount.mountpoint
    names = ("a.md", "dir", "b.md", "c.md", "saved.md", ".saved.md.swp")
    for name in names:
        assert missing(root / name)
    (root / "a.md").write_text("a\n")  # O_CREAT
    (root / "dir").mkdir()
    (root / "dir" / "in.md").write_text("in\n")
    fd = os.open(root / "b.md", os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    os.write(fd, b"b\n")
    os.close(fd)
    os.rename(root / "a.md", root / "c.md")  # onto a cached-missing name
    tmp = root / ".saved.md.swp"  # an editor's save: temp, then rename over
    tmp.write_text("saved\n")
    os.rename(tmp, root / "saved.md")
    assert missing(root / "a.md") and missing(tmp)
    assert (root / "c.md").read_text() == "a\n"
    assert (root / "b.md").read_text() == "b\n"
    assert (root / "saved.md").read_text() == "saved\n"
    mount.sync()
    got = {m["path"]: m for m in shared_api.list_memories(sid)}
    assert sorted(got) == ["/b.md", "/c.md", "/dir/in.md", "/saved.md"]


def test_read_only_mount_sees_a_remote_create(
    tmp_path: Path, shared_server: ServerProcess, shared_api: Api, store: dict[str, Any]
) -> None:
    sid = str(store["id"])
    ro = mount_store(tmp_path, shared_server.url, sid, "--read-only", name="ro")
    try:
        assert missing(ro.mountpoint / "later.md")
        shared_api.create_memory(sid, "/later.md", "later\n")
        ro.sync()
        assert (ro.mountpoint / "later.md").read_text() == "later\n"
    finally:
        ro.cleanup()
