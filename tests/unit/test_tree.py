"""Handler-level tests of the FUSE layer (no kernel): tree, journal and every errno row."""

from __future__ import annotations

import errno
import logging
import os
import stat
import unicodedata
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyfuse3
import pytest
import trio

from memfs.paths import MAX_CONTENT_BYTES, marker_content, sha256_hex
from memfs.state import extents
from memfs.state.journal import EXTENT_LOG_NAME
from memfs.state.store_state import StateStatistics
from tests.support.files import MARKER as MARKER_TEXT
from tests.support.fsharness import (
    CTX,
    O_RD,
    O_RW,
    O_WR,
    STORE_ID,
    Harness,
    attrs,
    fails,
    fields,
    snapshot,
)

ROOT = pyfuse3.ROOT_INODE
MARKER = MARKER_TEXT.encode()


@pytest.fixture
def h(tmp_path: Path) -> Iterator[Harness]:
    harness = Harness(tmp_path)
    yield harness
    harness.close()


@pytest.fixture
def ro(tmp_path: Path) -> Iterator[Harness]:
    """A read-only store that already holds /notes/a.md and an empty /empty directory."""
    harness = Harness(tmp_path)
    harness.seed("/notes/a.md", b"remote\n", "mem_a")
    harness.state.ensure_dirs("/empty")
    harness.reload(read_only=True)
    yield harness
    harness.close()


# -- the tree ---------------------------------------------------------------------------
async def test_create_write_read_and_attributes(h: Harness) -> None:
    await h.mkdir("/notes")
    ino = await h.write_file("/notes/a.md", b"hello\n")
    assert await h.read_file("/notes/a.md") == b"hello\n"
    a = await h.fs.getattr(ino, CTX)
    assert stat.S_ISREG(a.st_mode) and stat.S_IMODE(a.st_mode) == 0o644
    assert a.st_size == 6 and a.st_nlink == 1
    assert (a.st_uid, a.st_gid) == (os.getuid(), os.getgid())
    d = await h.fs.getattr(await h.ino("/notes"), CTX)
    assert stat.S_ISDIR(d.st_mode) and stat.S_IMODE(d.st_mode) == 0o755
    root = await h.fs.getattr(ROOT, CTX)
    assert stat.S_IMODE(root.st_mode) == 0o755
    assert h.node("/notes/a.md").state_name() == "dirty"


async def test_read_only_modes(ro: Harness) -> None:
    for path, mode in (
        ("/", 0o555),
        ("/notes", 0o555),
        ("/empty", 0o555),
        ("/notes/a.md", 0o444),
        ("/.anthropic-memory-store", 0o444),
    ):
        a = await ro.fs.getattr(await ro.ino(path), CTX)
        assert stat.S_IMODE(a.st_mode) == mode, path


async def test_read_only_modes_even_with_a_journal_from_a_writable_mount(h: Harness) -> None:
    await h.mkdir("/d")
    await h.write_file("/d/x.md", b"x")
    h.reload(read_only=True)
    for path, mode in (("/d", 0o555), ("/d/x.md", 0o444)):
        assert stat.S_IMODE((await h.fs.getattr(await h.ino(path), CTX)).st_mode) == mode


async def test_marker_is_synthetic_and_read_only(h: Harness) -> None:
    ino = await h.ino("/.anthropic-memory-store")
    assert await h.read_file("/.anthropic-memory-store") == marker_content(STORE_ID)
    assert marker_content(STORE_ID) == f"version 1\n{STORE_ID}".encode()
    await fails(errno.EPERM, h.fs.open(ino, O_WR, CTX))
    await fails(errno.EPERM, h.fs.open(ino, O_RD | os.O_TRUNC, CTX))
    await fails(errno.EPERM, h.fs.setattr(ino, attrs(st_size=0), fields(size=True), None, CTX))
    await fails(errno.EPERM, h.fs.setattr(ino, attrs(st_mode=0o644), fields(mode=True), None, CTX))
    await fails(errno.EPERM, h.fs.unlink(ROOT, MARKER, CTX))
    await fails(errno.ENOTDIR, h.fs.rmdir(ROOT, MARKER, CTX))
    await fails(errno.EPERM, h.fs.rename(ROOT, MARKER, ROOT, b"other", 0, CTX))
    await h.write_file("/x.md", b"x")
    await fails(errno.EPERM, h.fs.rename(ROOT, b"x.md", ROOT, MARKER, 0, CTX))
    await fails(errno.EEXIST, h.fs.create(ROOT, MARKER, stat.S_IFREG | 0o644, O_WR, CTX))
    await fails(errno.EEXIST, h.fs.mkdir(ROOT, MARKER, stat.S_IFDIR | 0o755, CTX))
    await fails(errno.ENOTSUP, h.fs.setxattr(ino, b"user.x", b"1", CTX))
    assert await h.read_file("/.anthropic-memory-store") == marker_content(STORE_ID)
    # Never a memory: not counted, not journaled.
    assert h.state.statistics().memories == 1
    assert all(r.path != "/.anthropic-memory-store" for r in h.state.journal.rows())


async def test_nested_directories_and_implied_parents(h: Harness) -> None:
    h.seed("/a/b/c/deep.md", b"deep", "mem_deep")
    assert await h.read_file("/a/b/c/deep.md") == b"deep"
    for d in ("/a", "/a/b", "/a/b/c"):
        assert stat.S_ISDIR((await h.fs.getattr(await h.ino(d), CTX)).st_mode)
    await fails(errno.ENOTEMPTY, h.rmdir("/a/b"))
    await fails(errno.ENOENT, h.fs.lookup(ROOT, b"missing", CTX))
    await fails(errno.ENOENT, h.fs.lookup(ROOT, b"\xff", CTX))


async def test_lookup_counts_and_inodes_are_not_reused(h: Harness) -> None:
    ino = await h.write_file("/a.md", b"1")
    await h.unlink("/a.md")
    assert ino in h.tree.nodes  # the kernel still knows it
    lookups = h.tree.nodes[ino].lookups
    await h.fs.forget([(ino, lookups)])
    assert ino not in h.tree.nodes
    ino2 = await h.write_file("/a.md", b"2")
    assert ino2 != ino and ino2 > ino
    await fails(errno.ENOENT, h.fs.getattr(ino, CTX))


async def test_sparse_write_reads_back_zeros(h: Harness) -> None:
    fi, a = await h.fs.create(ROOT, b"s.md", stat.S_IFREG | 0o644, O_RW, CTX)
    await h.fs.write(fi.fh, 10, b"end")
    assert await h.fs.read(fi.fh, 0, 100) == b"\0" * 10 + b"end"
    assert (await h.fs.getattr(a.st_ino, CTX)).st_size == 13
    await h.fs.release(fi.fh)


async def test_append_handle_writes_at_the_end(h: Harness) -> None:
    await h.write_file("/log.md", b"one\n")
    fi = await h.fs.open(await h.ino("/log.md"), O_WR | os.O_APPEND, CTX)
    await h.fs.write(fi.fh, 0, b"two\n")
    await h.fs.release(fi.fh)
    assert await h.read_file("/log.md") == b"one\ntwo\n"


async def test_open_trunc_and_setattr_size(h: Harness) -> None:
    ino = await h.write_file("/t.md", b"0123456789")
    fi = await h.fs.open(ino, O_WR | os.O_TRUNC, CTX)
    await h.fs.release(fi.fh)
    assert await h.read_file("/t.md") == b""
    await h.write_file("/t.md", b"0123456789")
    await h.fs.setattr(ino, attrs(st_size=4), fields(size=True), None, CTX)
    assert await h.read_file("/t.md") == b"0123"
    a = await h.fs.setattr(ino, attrs(st_size=6), fields(size=True), None, CTX)
    assert a.st_size == 6
    assert await h.read_file("/t.md") == b"0123\0\0"


async def test_chmod_utime_and_owner(h: Harness) -> None:
    ino = await h.write_file("/m.md", b"x")
    a = await h.fs.setattr(ino, attrs(st_mode=stat.S_IFREG | 0o600), fields(mode=True), None, CTX)
    assert stat.S_IMODE(a.st_mode) == 0o600
    a = await h.fs.setattr(
        ino,
        attrs(st_atime_ns=1_000_000_000, st_mtime_ns=2_000_000_000),
        fields(atime=True, mtime=True),
        None,
        CTX,
    )
    assert (a.st_atime_ns, a.st_mtime_ns) == (1_000_000_000, 2_000_000_000)
    same = attrs(st_uid=os.getuid(), st_gid=os.getgid())
    await h.fs.setattr(ino, same, fields(uid=True, gid=True), None, CTX)  # chown to self
    await fails(
        errno.EPERM, h.fs.setattr(ino, attrs(st_uid=os.getuid() + 1), fields(uid=True), None, CTX)
    )
    await fails(
        errno.EPERM, h.fs.setattr(ino, attrs(st_gid=os.getgid() + 1), fields(gid=True), None, CTX)
    )
    # chmod/utime don't change content: a synced file stays clean.
    node = h.seed("/synced.md", b"s", "mem_s")
    await h.fs.setattr(node.ino, attrs(st_mode=stat.S_IFREG | 0o640), fields(mode=True), None, CTX)
    await h.fs.setattr(node.ino, attrs(st_mtime_ns=5), fields(mtime=True), None, CTX)
    assert node.state_name() == "clean"


async def test_open_then_unlink_keeps_data_readable(h: Harness) -> None:
    synced = h.seed("/synced.md", b"synced bytes", "mem_1")
    await h.write_file("/local.md", b"local bytes")
    handles = {}
    for path in ("/synced.md", "/local.md"):
        handles[path] = (await h.fs.open(await h.ino(path), O_RD, CTX)).fh
        await h.unlink(path)
        await fails(errno.ENOENT, h.fs.lookup(ROOT, path[1:].encode(), CTX))
    assert await h.fs.read(handles["/synced.md"], 0, 100) == b"synced bytes"
    assert await h.fs.read(handles["/local.md"], 0, 100) == b"local bytes"
    assert synced.state_name() == "pending-delete"
    assert set(h.state.tombstones) == {"mem_1"}
    for fh in handles.values():
        await h.fs.release(fh)
    # An unsynced file leaves nothing behind; a synced one leaves a tombstone.
    rows = list(h.state.journal.rows())
    assert [(r.path, r.memory_id) for r in rows] == [(None, "mem_1")]


async def test_rename_file_directory_and_over_existing(h: Harness) -> None:
    await h.mkdir("/d")
    await h.write_file("/d/a.md", b"a")
    await h.write_file("/b.md", b"b")
    await h.rename("/d", "/e")
    assert await h.read_file("/e/a.md") == b"a"
    await fails(errno.ENOENT, h.ino("/d"))
    await h.rename("/b.md", "/e/a.md")  # over an existing file
    assert await h.read_file("/e/a.md") == b"b"
    await fails(errno.ENOENT, h.ino("/b.md"))
    await h.rename("/e/a.md", "/e/a.md")  # onto itself: nothing happens
    assert await h.read_file("/e/a.md") == b"b"
    assert sorted(r.path or "" for r in h.state.journal.rows()) == ["/e", "/e/a.md"]


async def test_atomic_save_keeps_the_memory_identity(h: Harness) -> None:
    h.seed("/notes/a.md", b"v1\n", "mem_a")
    await h.write_file("/notes/.a.md.tmp", b"v2\n")
    await h.rename("/notes/.a.md.tmp", "/notes/a.md")
    node = h.node("/notes/a.md")
    assert node.memory_id == "mem_a" and node.state_name() == "dirty"
    assert h.state.tombstones == {}
    assert await h.read_file("/notes/a.md") == b"v2\n"
    h.reload()
    node = h.node("/notes/a.md")
    assert (node.memory_id, node.base_path, h.state.tombstones) == ("mem_a", "/notes/a.md", {})


async def test_synced_rename_keeps_identity_and_is_pending(h: Harness) -> None:
    h.seed("/a.md", b"a", "mem_a")
    await h.mkdir("/dir")
    await h.rename("/a.md", "/dir/b.md")
    node = h.node("/dir/b.md")
    assert (node.memory_id, node.base_path, node.state_name()) == ("mem_a", "/a.md", "dirty")
    assert not node.dirty  # content is unchanged: only the path is pending


async def test_readdir_is_stable_and_stops_when_full(
    h: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    for i in range(50):
        await h.write_file(f"/f{i:03}.md", b"x")
    calls: list[tuple[bytes, int, int]] = []
    room = {"left": 0}

    def reply(token: Any, name: bytes, attr: pyfuse3.EntryAttributes, next_id: int) -> bool:
        if room["left"] == 0:
            return False
        room["left"] -= 1
        calls.append((name, next_id, attr.st_ino))
        return True

    monkeypatch.setattr(pyfuse3, "readdir_reply", reply)
    lookups_before = {n.ino: n.lookups for n in h.tree.nodes.values()}
    fh = await h.fs.opendir(ROOT, CTX)
    offset = 0
    seen: list[bytes] = []
    rounds = 0
    while True:
        room["left"] = 7
        before = len(calls)
        await h.fs.readdir(fh, offset, None)  # type: ignore[arg-type]
        batch = calls[before:]
        if not batch:
            break
        seen += [name for name, _, _ in batch]
        offset = batch[-1][1]
        rounds += 1
        if rounds == 2:  # the directory changes in the middle of the listing
            await h.write_file("/aaa-new.md", b"new")
            await h.unlink("/f040.md")
            await h.write_file("/f045.tmp", b"replacement")
            await h.rename("/f045.tmp", "/f045.md")
    # re-reading from an earlier offset gives the same entries again (stable offsets)
    room["left"] = 3
    before = len(calls)
    await h.fs.readdir(fh, 10, None)  # type: ignore[arg-type]
    assert [c[0] for c in calls[before:]] == [b"f007.md", b"f008.md", b"f009.md"]
    await h.fs.releasedir(fh)
    names = [f"f{i:03}.md".encode() for i in range(50) if i != 40]
    expected = [b".", b"..", MARKER, *names]
    assert seen == expected  # every surviving entry exactly once, in a stable order
    by_name = {name: ino for name, _, ino in calls}
    assert by_name[b"."] == ROOT and by_name[b".."] == ROOT
    assert by_name[b"f045.md"] == h.node("/f045.md").ino  # the replacement, not the dead one
    # a reference for every entry handed over, none for . and ..
    assert h.tree.root.lookups == lookups_before[ROOT]
    f001, f008 = h.node("/f001.md"), h.node("/f008.md")
    assert f001.lookups == lookups_before[f001.ino] + 1
    assert f008.lookups == lookups_before[f008.ino] + 2  # handed over twice


async def test_statfs_is_sane(h: Harness) -> None:
    await h.write_file("/a.md", b"x" * 5000)
    s = await h.fs.statfs(CTX)
    assert s.f_bsize > 0 and s.f_blocks >= 10_000 * MAX_CONTENT_BYTES // s.f_frsize - 1
    assert 0 < s.f_bfree <= s.f_blocks and s.f_bavail == s.f_bfree
    assert s.f_files >= 10_000 and s.f_ffree == s.f_files - 1
    assert s.f_namemax >= 255


async def test_usage_totals_follow_every_change(h: Harness) -> None:
    """statfs reads running totals, not a walk per call (issue 24 item 15): after
    every kind of change they equal what a walk counts."""

    def walked() -> tuple[int, int]:
        files = list(h.state.walk_files())
        return len(files), sum(n.size for n in files)

    async def check() -> None:
        assert (h.state.usage.files, h.state.usage.bytes) == walked()
        s = await h.fs.statfs(CTX)
        assert s.f_files - s.f_ffree == h.state.usage.files
        assert (s.f_blocks - s.f_bfree) * s.f_frsize == -(-h.state.usage.bytes // 512) * 512

    await check()
    h.seed("/s.md", b"synced", "mem_1")
    await h.write_file("/a.md", b"x" * 5000)
    await h.mkdir("/d")
    await h.write_file("/d/b.md", b"bb")
    await check()
    assert walked() == (3, 5008)
    fi = await h.fs.open(await h.ino("/a.md"), O_WR, CTX)
    await h.fs.write(fi.fh, 6000, b"y")  # sparse growth
    await h.fs.release(fi.fh)
    await check()
    await h.rename("/d/b.md", "/a.md")  # over an existing file
    await h.unlink("/s.md")  # a tombstone is not a file
    h.remote_only("/r.md", b"remote", "mem_2")
    await check()
    assert walked() == (2, 8)
    h.reload()  # r.md's size is unknown until a listing gives it (not downloaded)
    await check()
    assert walked()[0] == 2


async def test_xattrs(h: Harness) -> None:
    node = h.seed("/a.md", b"a", "mem_a")
    names = set(await h.fs.listxattr(node.ino, CTX))
    assert {b"user.memfs.memory_id", b"user.memfs.sha256", b"user.memfs.state"} <= names
    assert await h.fs.getxattr(node.ino, b"user.memfs.memory_id", CTX) == b"mem_a"
    assert await h.fs.getxattr(node.ino, b"user.memfs.sha256", CTX) == sha256_hex(b"a").encode()
    assert await h.fs.getxattr(node.ino, b"user.memfs.state", CTX) == b"clean"
    await fails(pyfuse3.ENOATTR, h.fs.getxattr(node.ino, b"user.other", CTX))
    for name in (
        b"user.memfs.state",
        b"user.memfs.memory_id",
        b"user.other",
        b"security.selinux",
        b"trusted.x",
    ):
        await fails(errno.ENOTSUP, h.fs.setxattr(node.ino, name, b"v", CTX))
    await fails(errno.ENOTSUP, h.fs.removexattr(node.ino, b"user.memfs.state", CTX))
    await fails(pyfuse3.ENOATTR, h.fs.removexattr(node.ino, b"user.other", CTX))
    await fails(errno.ENOTSUP, h.fs.setxattr(ROOT, b"user.x", b"v", CTX))
    # The state follows the file.
    await h.write_file("/a.md", b"changed")
    assert await h.fs.getxattr(node.ino, b"user.memfs.state", CTX) == b"dirty"
    assert (
        await h.fs.getxattr(node.ino, b"user.memfs.sha256", CTX) == sha256_hex(b"changed").encode()
    )


# -- waiting for content ----------------------------------------------------------------
async def test_read_waits_for_content_on_its_way(h: Harness) -> None:
    node = h.remote_only("/late.md", b"arrived", "mem_late")
    h.reload()

    async def deliver(n: Any) -> None:
        await trio.sleep(0.05)
        h.state.objects.put(b"arrived")

    h.waiter.deliver = deliver
    assert await h.read_file("/late.md") == b"arrived"
    assert h.waiter.calls == [h.node("/late.md").ino]
    assert node.memory_id == "mem_late"


async def test_content_that_never_arrives_is_eio_and_logged(
    h: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    h.remote_only("/never.md", b"never", "mem_never")
    h.reload()
    fi = await h.fs.open(await h.ino("/never.md"), O_RD, CTX)
    with trio.fail_after(5):
        await fails(errno.EIO, h.fs.read(fi.fh, 0, 10))
    assert "content did not arrive in time" in caplog.text
    # A write into it waits the same way rather than clobbering unknown content.
    wfi = await h.fs.open(await h.ino("/never.md"), O_WR, CTX)
    with trio.fail_after(5):
        await fails(errno.EIO, h.fs.write(wfi.fh, 0, b"x"))
    for f in (fi, wfi):
        await h.fs.release(f.fh)
    assert h.node("/never.md").state_name() == "clean"


async def test_truncate_of_content_on_its_way_waits(h: Harness) -> None:
    h.remote_only("/late.md", b"0123456789", "mem_late")
    h.reload()

    async def deliver(n: Any) -> None:
        await trio.sleep(0.05)
        h.state.objects.put(b"0123456789")

    h.waiter.deliver = deliver
    ino = await h.ino("/late.md")
    await h.fs.setattr(ino, attrs(st_size=4), fields(size=True), None, CTX)
    assert await h.read_file("/late.md") == b"0123"


# -- an unexpected exception ------------------------------------------------------------
async def test_unexpected_exception_is_eio_and_the_fs_survives(
    h: Harness, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    await h.write_file("/a.md", b"a")

    def boom(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("injected bug")

    monkeypatch.setattr(h.state, "write", boom)
    fi = await h.fs.open(await h.ino("/a.md"), O_WR, CTX)
    with caplog.at_level(logging.ERROR, logger="memfs.fs"):
        await fails(errno.EIO, h.fs.write(fi.fh, 0, b"b"))
    assert "unexpected error in handler; answering EIO handler=write" in caplog.text
    assert "RuntimeError: injected bug" in caplog.text  # with its traceback
    await h.fs.release(fi.fh)
    monkeypatch.undo()
    assert await h.read_file("/a.md") == b"a"
    await h.write_file("/b.md", b"b")
    assert await h.read_file("/b.md") == b"b"


# -- the journal ------------------------------------------------------------------------
async def _busy_history(h: Harness) -> None:
    """A bit of everything a session does, leaving pending changes of every kind."""
    h.seed("/keep.md", b"keep", "mem_keep")
    h.seed("/edit.md", b"old", "mem_edit")
    h.seed("/move.md", b"move", "mem_move")
    h.seed("/gone.md", b"gone", "mem_gone")
    h.seed("/dir/inside.md", b"inside", "mem_inside")
    h.seed("/trunc.md", b"0123456789", "mem_trunc")
    await h.write_file("/edit.md", b"new content")
    await h.mkdir("/sub")
    await h.rename("/move.md", "/sub/moved.md")
    await h.unlink("/gone.md")
    await h.rename("/dir", "/renamed-dir")
    await h.write_file("/new.md", b"brand new")
    await h.write_file("/sub/new2.md", b"second")
    await h.write_file("/tmp.md", b"temporary")
    await h.unlink("/tmp.md")
    await h.mkdir("/empty")
    await h.mkdir("/empty2", 0o700)
    await h.mkdir("/x")
    await h.mkdir("/x/y")
    await h.rmdir("/x/y")
    ino = await h.write_file("/modes.md", b"m")
    await h.fs.setattr(
        ino,
        attrs(st_mode=stat.S_IFREG | 0o600, st_mtime_ns=123_000),
        fields(mode=True, mtime=True),
        None,
        CTX,
    )
    await h.fs.setattr(await h.ino("/trunc.md"), attrs(st_size=3), fields(size=True), None, CTX)
    fi, _ = await h.fs.create(ROOT, b"bin.md", stat.S_IFREG | 0o644, O_WR, CTX)
    await h.fs.write(fi.fh, 2, b"\xa9 binary")  # after a hole: invalid only at close
    await fails(errno.EILSEQ, h.fs.flush(fi.fh))
    await h.fs.release(fi.fh)
    # a sparse write
    fi, _ = await h.fs.create(ROOT, b"sparse.md", stat.S_IFREG | 0o644, O_WR, CTX)
    await h.fs.write(fi.fh, 5, b"tail")
    await h.fs.release(fi.fh)


async def test_reload_reproduces_tree_contents_and_pending_state(h: Harness) -> None:
    await _busy_history(h)
    before = snapshot(h)
    stats = before["stats"]
    assert stats == StateStatistics(
        memories=10, bytes=stats.bytes, dirty=8, refused=1, conflicts=0, pending_deletes=1
    )
    h.reload()
    after = snapshot(h)
    assert after == before
    assert await h.read_file("/edit.md") == b"new content"
    assert await h.read_file("/trunc.md") == b"012"
    assert await h.read_file("/sparse.md") == b"\0" * 5 + b"tail"
    assert await h.read_file("/renamed-dir/inside.md") == b"inside"
    assert h.node("/sub/moved.md").base_path == "/move.md"
    assert [t.base_path for t in h.state.tombstones.values()] == ["/gone.md"]
    assert h.node("/bin.md").state_name() == "refused"
    await fails(errno.ENOENT, h.ino("/tmp.md"))
    await fails(errno.ENOENT, h.ino("/x/y"))
    assert h.node("/empty").children == {}
    assert stat.S_IMODE(h.node("/empty2").mode) == 0o700
    # and a second restart changes nothing either
    h.reload()
    assert snapshot(h) == before


async def test_journal_is_written_before_the_call_returns(h: Harness) -> None:
    """Every acknowledged change is visible to another connection at once (kill -9)."""
    import sqlite3

    spy = sqlite3.connect(h.cache_path / "journal.sqlite")

    def rows() -> dict[str, tuple[Any, ...]]:
        return {
            r[0]: r[1:]
            for r in spy.execute(
                "SELECT path, kind, data, dirty, mode FROM entries WHERE path IS NOT NULL"
            )
        }

    fi, a = await h.fs.create(ROOT, b"a.md", stat.S_IFREG | 0o644, O_WR, CTX)
    assert rows()["/a.md"][:3] == ("file", b"", 1)
    await h.fs.write(fi.fh, 0, b"abc")  # a record in the extent log after the empty base
    assert rows()["/a.md"][1:3] == (b"", 1)
    fd = os.open(h.cache_path / EXTENT_LOG_NAME, os.O_RDONLY)
    try:
        records = list(extents.read(fd)[1])
    finally:
        os.close(fd)
    assert [(r.offset, r.payload) for r in records if isinstance(r, extents.Record)] == [
        (0, b"abc")
    ]
    await h.fs.setattr(a.st_ino, attrs(st_mode=0o100600), fields(mode=True), None, CTX)
    assert rows()["/a.md"][3] == 0o600
    await h.mkdir("/d")
    assert rows()["/d"][0] == "dir"
    await h.rename("/a.md", "/d/b.md")
    assert set(rows()) == {"/d", "/d/b.md"}
    await h.fs.release(fi.fh)
    spy.close()


def test_killed_process_loses_nothing(tmp_path: Path) -> None:
    """A child makes changes then SIGKILLs itself mid-flight; the journal has them all."""
    import signal
    import subprocess
    import sys
    import textwrap

    script = textwrap.dedent(f"""
        import os, signal, stat, trio
        from pathlib import Path
        from tests.support.fsharness import Harness, CTX, O_WR
        async def main():
            h = Harness(Path({str(tmp_path)!r}))
            await h.mkdir("/d")
            await h.write_file("/d/a.md", b"alpha")
            fi, _ = await h.fs.create(1, b"open.md", stat.S_IFREG | 0o644, O_WR, CTX)
            await h.fs.write(fi.fh, 0, b"never closed")
            os.kill(os.getpid(), signal.SIGKILL)
        trio.run(main)
    """)
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.run([sys.executable, "-c", script], cwd=root, capture_output=True)
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()
    h = Harness(tmp_path)
    try:
        assert h.node("/d/a.md").data == bytearray(b"alpha")
        assert h.node("/open.md").data == bytearray(b"never closed")
        assert h.node("/open.md").dirty
    finally:
        h.close()


# -- read-only store: EROFS for every mutation ------------------------------------------
async def test_read_only_store_refuses_every_mutation(ro: Harness) -> None:
    fs = ro.fs
    a = await ro.ino("/notes/a.md")
    notes = await ro.ino("/notes")
    assert await ro.read_file("/notes/a.md") == b"remote\n"
    await fails(errno.EROFS, fs.open(a, O_WR, CTX))
    await fails(errno.EROFS, fs.open(a, O_RW, CTX))
    await fails(errno.EROFS, fs.open(a, O_RD | os.O_TRUNC, CTX))
    await fails(errno.EROFS, fs.open(await ro.ino("/.anthropic-memory-store"), O_WR, CTX))
    await fails(errno.EROFS, fs.create(notes, b"new.md", stat.S_IFREG | 0o644, O_WR, CTX))
    await fails(errno.EROFS, fs.mknod(notes, b"new.md", stat.S_IFREG | 0o644, 0, CTX))
    await fails(errno.EROFS, fs.mkdir(notes, b"d", stat.S_IFDIR | 0o755, CTX))
    await fails(errno.EROFS, fs.unlink(notes, b"a.md", CTX))
    await fails(errno.EROFS, fs.rmdir(ROOT, b"empty", CTX))
    await fails(errno.EROFS, fs.rename(notes, b"a.md", notes, b"b.md", 0, CTX))
    await fails(errno.EROFS, fs.rename(notes, b"a.md", ROOT, b"b.md", 0, CTX))
    await fails(errno.EROFS, fs.rename(ROOT, b"empty", notes, b"empty", 0, CTX))
    for f, at in (
        (fields(size=True), attrs(st_size=0)),
        (fields(mode=True), attrs(st_mode=0o100600)),
        (fields(atime=True, mtime=True), attrs(st_atime_ns=1, st_mtime_ns=1)),
    ):
        await fails(errno.EROFS, fs.setattr(a, at, f, None, CTX))
    await fails(
        errno.EROFS, fs.setattr(notes, attrs(st_mode=0o40700), fields(mode=True), None, CTX)
    )
    await fails(errno.EROFS, fs.link(a, notes, b"hard", CTX))
    await fails(errno.EROFS, fs.symlink(notes, b"sym", b"a.md", CTX))
    await fails(errno.EROFS, fs.mknod(notes, b"fifo", stat.S_IFIFO | 0o644, 0, CTX))
    await fails(errno.EROFS, fs.setxattr(a, b"user.x", b"1", CTX))
    await fails(errno.EROFS, fs.removexattr(a, b"user.memfs.state", CTX))
    # A read handle cannot be used to write either.
    fi = await fs.open(a, O_RD, CTX)
    await fails(errno.EBADF, fs.write(fi.fh, 0, b"x"))
    await fs.release(fi.fh)
    assert await ro.read_file("/notes/a.md") == b"remote\n"
    assert ro.node("/notes/a.md").state_name() == "clean"
    rows = [(r.path, r.dirty) for r in ro.state.journal.rows()]
    assert rows == [("/empty", False), ("/notes", False), ("/notes/a.md", False)]


async def test_closing_mount_refuses_writes(h: Harness) -> None:
    ino = await h.write_file("/a.md", b"a")
    fi = await h.fs.open(ino, O_WR, CTX)
    h.fs.closing = True
    await fails(errno.EROFS, h.fs.write(fi.fh, 0, b"b"))
    await fails(errno.EROFS, h.fs.create(ROOT, b"b.md", stat.S_IFREG | 0o644, O_WR, CTX))
    await h.fs.release(fi.fh)


# -- EPERM: no links, devices, FIFOs or sockets -----------------------------------------
async def test_links_and_special_files_are_eperm(h: Harness) -> None:
    a = await h.write_file("/a.md", b"a")
    await fails(errno.EPERM, h.fs.symlink(ROOT, b"sym", b"a.md", CTX))
    await fails(errno.EPERM, h.fs.link(a, ROOT, b"hard", CTX))
    for kind in (stat.S_IFIFO, stat.S_IFCHR, stat.S_IFBLK, stat.S_IFSOCK):
        await fails(errno.EPERM, h.fs.mknod(ROOT, b"special", kind | 0o644, 0, CTX))
    await fails(errno.EINVAL, h.fs.readlink(a, CTX))
    # mknod of a regular file is a create
    node = await h.fs.mknod(ROOT, b"plain.md", stat.S_IFREG | 0o644, 0, CTX)
    assert stat.S_ISREG(node.st_mode)
    assert sorted(h.state.root.children or {}) == [".anthropic-memory-store", "a.md", "plain.md"]


# -- EFBIG ------------------------------------------------------------------------------
async def test_efbig_at_the_write_or_truncate_that_crosses_the_limit(h: Harness) -> None:
    fi, a = await h.fs.create(ROOT, b"big.md", stat.S_IFREG | 0o644, O_WR, CTX)
    assert await h.fs.write(fi.fh, 0, b"x" * MAX_CONTENT_BYTES) == MAX_CONTENT_BYTES
    await fails(errno.EFBIG, h.fs.write(fi.fh, MAX_CONTENT_BYTES, b"y"))
    await fails(errno.EFBIG, h.fs.write(fi.fh, MAX_CONTENT_BYTES - 1, b"yz"))
    await fails(errno.EFBIG, h.fs.write(fi.fh, 200_000, b"y"))
    await h.fs.release(fi.fh)
    fi = await h.fs.open(a.st_ino, O_WR | os.O_APPEND, CTX)
    await fails(errno.EFBIG, h.fs.write(fi.fh, 0, b"y"))
    await h.fs.release(fi.fh)
    assert (await h.fs.getattr(a.st_ino, CTX)).st_size == MAX_CONTENT_BYTES
    await fails(
        errno.EFBIG,
        h.fs.setattr(a.st_ino, attrs(st_size=MAX_CONTENT_BYTES + 1), fields(size=True), None, CTX),
    )
    await h.fs.setattr(a.st_ino, attrs(st_size=10), fields(size=True), None, CTX)
    await h.fs.setattr(a.st_ino, attrs(st_size=MAX_CONTENT_BYTES), fields(size=True), None, CTX)
    assert (await h.fs.getattr(a.st_ino, CTX)).st_size == MAX_CONTENT_BYTES


# -- paths the API would reject ---------------------------------------------------------
BAD_NAMES = [
    (b"\xff\xfe.md", errno.EINVAL),  # not UTF-8
    (unicodedata.normalize("NFD", "café.md").encode(), errno.EINVAL),  # not NFC
    (b"tab\there.md", errno.EINVAL),  # control
    (b"nl\nhere.md", errno.EINVAL),
    ("zero\u200bwidth.md".encode(), errno.EINVAL),  # format (Cf)
    ("bidi\u202e.md".encode(), errno.EINVAL),
    ("line\u2028sep.md".encode(), errno.EINVAL),
    (b"x" * 1024, errno.ENAMETOOLONG),
]


@pytest.mark.parametrize(("name", "code"), BAD_NAMES)
async def test_names_the_api_rejects(h: Harness, name: bytes, code: int) -> None:
    await h.write_file("/ok.md", b"ok")
    await fails(code, h.fs.create(ROOT, name, stat.S_IFREG | 0o644, O_WR, CTX))
    await fails(code, h.fs.mknod(ROOT, name, stat.S_IFREG | 0o644, 0, CTX))
    await fails(code, h.fs.mkdir(ROOT, name, stat.S_IFDIR | 0o755, CTX))
    await fails(code, h.fs.rename(ROOT, b"ok.md", ROOT, name, 0, CTX))
    assert sorted(h.state.root.children or {}) == [".anthropic-memory-store", "ok.md"]


async def test_long_and_deep_paths(h: Harness) -> None:
    seg = "s" * 200
    path = ""
    for _ in range(4):
        path += "/" + seg
        await h.mkdir(path)
    # 4 x 201 = 804 bytes; a 230-byte name would make the path 1035 bytes
    await fails(
        errno.ENAMETOOLONG,
        h.fs.create(await h.ino(path), b"n" * 230, stat.S_IFREG | 0o644, O_WR, CTX),
    )
    await fails(
        errno.ENAMETOOLONG, h.fs.mkdir(await h.ino(path), b"n" * 230, stat.S_IFDIR | 0o755, CTX)
    )
    await h.write_file(path + "/" + "n" * 200, b"fits")  # 1005 bytes
    # moving a directory can push its content past the limit
    await h.mkdir("/" + "p" * 100)
    await fails(errno.ENAMETOOLONG, h.rename("/" + seg, "/" + "p" * 100 + "/" + seg))
    # 20 segments at most: a directory at depth 20 could hold nothing
    deep = ""
    for i in range(19):
        deep += f"/d{i}"
        await h.mkdir(deep)
    await h.write_file(deep + "/leaf.md", b"20 segments")
    await fails(
        errno.ENAMETOOLONG, h.fs.mkdir(await h.ino(deep), b"d19", stat.S_IFDIR | 0o755, CTX)
    )
    await h.mkdir("/e0")
    await fails(errno.ENAMETOOLONG, h.rename("/d0", "/e0/d0"))
    assert await h.read_file(deep + "/leaf.md") == b"20 segments"


# -- EILSEQ -----------------------------------------------------------------------------
async def test_eilseq_at_write_and_the_file_is_refused(h: Harness) -> None:
    fi, a = await h.fs.create(ROOT, b"bin.md", stat.S_IFREG | 0o644, O_WR, CTX)
    await fails(errno.EILSEQ, h.fs.write(fi.fh, 0, "héllo".encode("latin-1")))
    node = h.node("/bin.md")
    assert node.size == 0 and node.state_name() == "refused"  # nothing of it landed
    await h.fs.fsync(fi.fh, False)  # what is there is valid; the hold-back stays
    await h.fs.flush(fi.fh)
    await h.fs.release(fi.fh)
    assert b"UTF-8" in await h.fs.getxattr(a.st_ino, b"user.memfs.refused", CTX)
    h.reload()
    assert h.node("/bin.md").state_name() == "refused"
    await h.write_file("/bin.md", "héllo".encode())  # a write that succeeds lifts it
    assert h.node("/bin.md").state_name() == "dirty"


async def test_eilseq_at_close_and_fsync_for_bytes_written_out_of_order(h: Harness) -> None:
    fi, a = await h.fs.create(ROOT, b"bin.md", stat.S_IFREG | 0o644, O_WR, CTX)
    # A continuation byte after a hole: valid if its lead comes later, which it never does.
    await h.fs.write(fi.fh, 2, "é".encode()[1:])
    await fails(errno.EILSEQ, h.fs.fsync(fi.fh, False))
    await fails(errno.EILSEQ, h.fs.flush(fi.fh))
    await h.fs.release(fi.fh)
    node = h.node("/bin.md")
    assert node.state_name() == "refused"
    assert await h.fs.getxattr(a.st_ino, b"user.memfs.state", CTX) == b"refused"
    assert b"UTF-8" in await h.fs.getxattr(a.st_ino, b"user.memfs.refused", CTX)
    stats = h.state.statistics()
    assert (stats.refused, stats.dirty) == (1, 0)
    h.reload()
    assert h.node("/bin.md").state_name() == "refused"
    # Fixing the content lifts the refusal.
    await h.write_file("/bin.md", "héllo".encode())
    assert h.node("/bin.md").state_name() == "dirty"
    # A read-only handle never reports it; valid UTF-8 (even with NULs) is fine.
    fi = await h.fs.open(a.st_ino, O_RD, CTX)
    await h.fs.flush(fi.fh)
    await h.fs.release(fi.fh)


async def test_split_multibyte_write_is_fine_once_complete(h: Harness) -> None:
    data = "ü".encode()
    fi, _ = await h.fs.create(ROOT, b"u.md", stat.S_IFREG | 0o644, O_WR, CTX)
    await h.fs.write(fi.fh, 0, data[:1])
    await h.fs.write(fi.fh, 1, data[1:])
    await h.fs.flush(fi.fh)
    await h.fs.fsync(fi.fh, True)
    await h.fs.release(fi.fh)
    assert h.node("/u.md").state_name() == "dirty"


# -- ENOTEMPTY / EISDIR / ENOTDIR / EEXIST / EINVAL / EXDEV ------------------------------
async def test_namespace_errnos(h: Harness) -> None:
    await h.mkdir("/d")
    await h.write_file("/d/f.md", b"f")
    await h.mkdir("/empty")
    await h.write_file("/file.md", b"x")
    d, f = await h.ino("/d"), await h.ino("/file.md")
    await fails(errno.ENOTEMPTY, h.rmdir("/d"))
    await fails(errno.ENOTEMPTY, h.rename("/empty", "/d"))
    await fails(errno.EISDIR, h.unlink("/d"))
    await fails(errno.EISDIR, h.rename("/file.md", "/empty"))
    await fails(errno.EISDIR, h.fs.open(d, O_RD, CTX))
    await fails(errno.EISDIR, h.fs.setattr(d, attrs(st_size=0), fields(size=True), None, CTX))
    await fails(errno.ENOTDIR, h.rmdir("/file.md"))
    await fails(errno.ENOTDIR, h.rename("/empty", "/file.md"))
    await fails(errno.ENOTDIR, h.fs.lookup(f, b"x", CTX))
    await fails(errno.ENOTDIR, h.fs.mkdir(f, b"x", stat.S_IFDIR | 0o755, CTX))
    await fails(errno.ENOTDIR, h.fs.opendir(f, CTX))
    await fails(errno.EEXIST, h.mkdir("/d"))
    await fails(errno.EEXIST, h.fs.create(ROOT, b"file.md", stat.S_IFREG | 0o644, O_WR, CTX))
    await fails(errno.EEXIST, h.rename("/file.md", "/d/f.md", pyfuse3.RENAME_NOREPLACE))
    await fails(errno.EINVAL, h.rename("/d", "/d/sub"))
    await fails(errno.EINVAL, h.rename("/file.md", "/d/f.md", pyfuse3.RENAME_EXCHANGE))
    await fails(errno.ENOENT, h.unlink("/nope.md"))
    await fails(errno.ENOENT, h.rmdir("/nope"))
    await fails(errno.ENOENT, h.rename("/nope.md", "/x.md"))
    await fails(errno.EBADF, h.fs.read(9999, 0, 1))
    # an empty directory can be replaced by a directory
    await h.mkdir("/d2")
    await h.rename("/d2", "/empty")
    assert sorted(h.state.root.children or {}) == [
        ".anthropic-memory-store",
        "d",
        "empty",
        "file.md",
    ]
