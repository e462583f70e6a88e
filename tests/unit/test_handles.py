"""The handle modes of `memfs/mount/handles.py` at handler level (no kernel): zero-message
opens on a read-only VFS and on a writable mount, which the mount tests otherwise reach
only through a patched pyfuse3 and a kernel that can skip OPEN."""

from __future__ import annotations

import errno
import os
import stat
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pyfuse3
import pytest

from memfs.mount import handles
from memfs.mount.fs import MemFs
from tests.support.fsharness import CTX, O_RD, O_WR, Harness, fails

ROOT = pyfuse3.ROOT_INODE


class Trail:
    """The audit trail's hooks, recorded."""

    def __init__(self) -> None:
        self.writes: list[tuple[str, int]] = []

    def change(
        self, store_id: str, op: str, path: str, pid: int, uid: int, *a: Any, **k: Any
    ) -> None:
        if op == "write":
            self.writes.append((path, pid))

    def sync_to_disk(self, store_id: str) -> None:
        pass


def by_inode(h: Harness, monkeypatch: pytest.MonkeyPatch, *, read_only_vfs: bool) -> Trail:
    """Make `h.fs` a mount with zero-message opens, as INIT on the patched pyfuse3 does."""
    fs = MemFs(
        h.state,
        h.waiter,
        content_timeout=0.3,
        negative_timeout=0.0,
        read_only_vfs=read_only_vfs,
        zero_message_writes=True,
    )
    fs.noflush = fs.cache_readdir = False
    fs.pass_inode_without_fh = True
    monkeypatch.setattr(pyfuse3, "no_open_support", True, raising=False)
    monkeypatch.setattr(pyfuse3, "no_opendir_support", True, raising=False)
    fs.init()
    trail = Trail()
    fs.trail = trail  # type: ignore[assignment]
    h.fs = fs
    return trail


def ctx(pid: int) -> Any:
    return SimpleNamespace(uid=0, gid=0, pid=pid, umask=0o022)


@pytest.fixture
def h(tmp_path: Path) -> Iterator[Harness]:
    harness = Harness(tmp_path)
    harness.seed("/a.md", b"hello", "mem_a")
    harness.seed("/d/b.md", b"bee", "mem_b")
    yield harness
    harness.close()


async def test_open_requests_hand_out_handles(h: Harness) -> None:
    assert not h.fs.handles.files_by_inode and h.tree.writers_tracked
    ino = await h.ino("/a.md")
    reader = (await h.fs.open(ino, O_RD, CTX)).fh
    writer = (await h.fs.open(ino, O_WR | os.O_APPEND, CTX)).fh
    assert reader and writer and reader != writer
    assert h.node("/a.md").open_handles == 2 and h.node("/a.md").open_writers == 1
    await fails(errno.EBADF, h.fs.write(reader, 0, b"x"))
    assert await h.fs.write(writer, 0, b"!") == 1  # O_APPEND: at the end
    assert await h.fs.read(reader, 0, 100) == b"hello!"
    await fails(errno.EBADF, h.fs.read(ino + 1000, 0, 1))
    await h.fs.release(writer)
    await h.fs.release(reader)
    assert h.node("/a.md").open_handles == 0
    await fails(errno.EBADF, h.fs.read(reader, 0, 1))


@pytest.mark.parametrize("read_only_vfs", [True, False])
async def test_zero_message_opens_take_the_inode(
    h: Harness, monkeypatch: pytest.MonkeyPatch, read_only_vfs: bool
) -> None:
    by_inode(h, monkeypatch, read_only_vfs=read_only_vfs)
    assert h.fs.handles.files_by_inode and h.fs.handles.dirs_by_inode
    assert h.tree.writers_tracked is read_only_vfs  # no RELEASE says who writes
    ino = await h.ino("/a.md")
    await fails(errno.ENOSYS, h.fs.open(ino, O_RD, CTX))
    await fails(errno.ENOSYS, h.fs.opendir(ROOT, CTX))
    await fails(errno.ENOSYS, h.fs.flush(ino))
    assert await h.fs.read(ino, 1, 3) == b"ell"
    await fails(errno.ENOENT, h.fs.read(12345, 0, 1))
    fi, _ = await h.fs.create(ROOT, b"new.md", stat.S_IFREG | 0o644, O_WR, CTX)
    assert fi.fh == 0 and h.node("/new.md").open_handles == 0  # no RELEASE will come
    await h.fs.fsync(ino, False)  # nothing of its own to sync: no error either way
    await h.fs.fsyncdir(ROOT, False)
    await fails(errno.ENOENT, h.fs.fsyncdir(12345, False))


async def test_zero_message_writes_append_at_memfs_end_and_name_writers_per_burst(
    h: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    trail = by_inode(h, monkeypatch, read_only_vfs=False)
    clock = [100.0]
    monkeypatch.setattr(time, "monotonic", lambda: clock[0])
    stale: list[int] = []
    h.fs.stale_inode = stale.append
    ino = await h.ino("/a.md")
    # The kernel's idea of the size is stale: the append lands at memfs's end.
    assert await h.fs.write(ino, 2, b"!", ctx(7), os.O_WRONLY | os.O_APPEND) == 1
    assert await h.fs.read(ino, 0, 100) == b"hello!" and stale == [ino]
    assert await h.fs.write(ino, 6, b"?", ctx(7), os.O_APPEND) == 1  # at the end already
    assert stale == [ino]
    await h.fs.write(ino, 0, b"H", ctx(7), 0)
    assert await h.fs.read(ino, 0, 100) == b"Hello!?"
    assert trail.writes == [("/a.md", 7)]  # one burst of one process: one line
    clock[0] += handles.WRITER_BURST_S
    await h.fs.write(ino, 0, b"h", ctx(7), 0)
    await h.fs.write(ino, 0, b"h", ctx(8), 0)  # another process
    h.fs.writer_closed(ino)  # its close: the next write is a new open's
    await h.fs.write(ino, 0, b"h", ctx(8), 0)
    await h.fs.write(ino, 0, b"h", None, None)  # no context: nobody to name
    assert trail.writes == [("/a.md", 7), ("/a.md", 7), ("/a.md", 8), ("/a.md", 8)]
    await fails(errno.ENOENT, h.fs.write(12345, 0, b"x", ctx(7), 0))


async def test_zero_message_writes_refuse_what_open_refused(
    h: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    by_inode(h, monkeypatch, read_only_vfs=False)
    marker = await h.ino("/.anthropic-memory-store")
    ino = await h.ino("/a.md")
    await fails(errno.EPERM, h.fs.write(marker, 0, b"x", ctx(7), 0))
    h.fs.closing = True  # an unmount flushing: EROFS first, as `open` answered
    await fails(errno.EROFS, h.fs.write(marker, 0, b"x", ctx(7), 0))
    await fails(errno.EROFS, h.fs.write(ino, 0, b"x", ctx(7), 0))


async def test_zero_message_readdir_keeps_a_listing_until_its_end(
    h: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    by_inode(h, monkeypatch, read_only_vfs=False)
    room = {"left": 0}
    names: list[bytes] = []

    def reply(token: Any, name: bytes, attr: pyfuse3.EntryAttributes, next_id: int) -> bool:
        if room["left"] == 0:
            return False
        room["left"] -= 1
        names.append(name)
        return True

    monkeypatch.setattr(pyfuse3, "readdir_reply", reply)
    room["left"] = 3
    await h.fs.readdir(ROOT, 0, None)  # type: ignore[arg-type]
    assert names == [b".", b"..", b".anthropic-memory-store"]
    await h.fs.create(ROOT, b"0.md", stat.S_IFREG | 0o644, O_WR, CTX)  # would sort first
    room["left"] = 10
    await h.fs.readdir(ROOT, 3, None)  # type: ignore[arg-type]
    assert names[3:] == [b"a.md", b"d"]  # offsets stay those of the listing
    assert not h.fs.handles._listings  # the listing is complete
    room["left"] = 10
    await h.fs.readdir(ROOT, 0, None)  # type: ignore[arg-type]
    assert names[5:] == [b".", b"..", b".anthropic-memory-store", b"0.md", b"a.md", b"d"]
    await fails(errno.ENOTDIR, h.fs.readdir(await h.ino("/a.md"), 0, None))  # type: ignore[arg-type]
