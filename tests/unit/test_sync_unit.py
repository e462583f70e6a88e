"""`StoreSync` rule by rule, against the real server app in-process (tests/support/apistore.py).

A real `Tree`/`StoreState`/`CacheDir` live in tmp_path; local edits go through the same
`StoreState` calls the FUSE handlers make. Time-driven rules run `StoreSync.run` under
trio's autojump clock, with the tree's and the engine's monotonic clock tied to trio's.
"""

from __future__ import annotations

import itertools
import json
import logging
import math
import os
import sqlite3
import time
import types
from collections.abc import AsyncIterator
from contextlib import closing
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyfuse3
import pytest
import trio

import memfs.errors
import memfs.state.node
import memfs.state.store_state
import memfs.state.tree
import memfs.sync.engine
import memfs.sync.feed
import memfs.sync.landing
import memfs.sync.plan
import memfs.sync.pusher
import memfs.sync.schedule
from memfs.config import DEFAULT_EXCLUDES
from memfs.mount.answers import last_pass
from memfs.mount.fs import MemFs
from memfs.paths import MAX_CONTENT_BYTES
from memfs.store.transport import RetryPolicy
from memfs.sync.engine import RefusedFile
from memfs.sync.notify import NullNotifier, Unveil
from memfs.sync.pusher import MERGE_RETRIES, delete_cap
from memfs.sync.schedule import (
    ECHO_DEFER,
    MAX_DEFER,
    MAX_GIVE_WAY,
    MIN_GAP,
    QUIET_FOR_UPLOAD,
    PassKind,
)
from tests.support.apistore import OTHER_CLIENT
from tests.support.fsharness import CTX as FS_CTX
from tests.support.fsharness import Waiter
from tests.support.syncharness import Harness, read_copy, running, sha, synced


@pytest.fixture
async def h(tmp_path: Path) -> AsyncIterator[Harness]:
    harness = Harness(tmp_path)
    yield harness
    await harness.aclose()


@pytest.fixture
def trio_clock_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """The tree's and the engine's `time.monotonic` follow trio's (autojump) clock."""
    fake = types.SimpleNamespace(
        **{k: getattr(time, k) for k in dir(time) if not k.startswith("__")}
    )
    fake.monotonic = trio.current_time
    for module in (memfs.sync.engine, memfs.sync.plan, memfs.state.tree, memfs.state.store_state):
        monkeypatch.setattr(module, "time", fake)


# --------------------------------------------------------------------------- pulls


async def test_start_lists_without_content_then_streams_it(h: Harness) -> None:
    h.fake.add("/a.md", "alpha")
    h.fake.add("/dir/b.md", "beta")
    await h.start()
    assert set(h.local_files()) == {"/a.md", "/dir/b.md"}
    assert h.local_files()["/a.md"] is None  # listed, content not here yet
    assert [s.op for s in h.fake.requests] == ["versions", "list"]
    async with trio.open_nursery() as nursery:
        await nursery.start(h.sync.run)
        with trio.fail_after(5):
            await h.sync.wait_content(h.node("/a.md"))
            await h.sync.wait_content(h.node("/dir/b.md"))
        nursery.cancel_scope.cancel()
    assert h.local_files() == {"/a.md": "alpha", "/dir/b.md": "beta"}
    assert h.node("/a.md").memory_id == h.fake.id_of("/a.md")


async def test_pull_create_change_rename_delete(h: Harness) -> None:
    ids = await synced(h, {"/keep.md": "k", "/edit.md": "v1", "/old/name.md": "n", "/gone.md": "g"})
    edit_ino = h.node("/edit.md").ino
    name_node = h.node("/old/name.md")
    old_dir_ino = h.node("/old").ino
    gone_parent = h.state.root.ino
    h.fake.add("/new.md", "fresh")
    h.fake.edit(ids["/edit.md"], content="v2")
    h.fake.edit(ids["/old/name.md"], path="/moved/name2.md")
    h.fake.remove(ids["/gone.md"])
    h.notifier.inodes.clear()
    h.notifier.entries.clear()
    result = await h.sync_once()
    assert result.outcome == "ok"
    assert h.local_files() == {
        "/keep.md": "k",
        "/edit.md": "v2",
        "/moved/name2.md": "n",
        "/new.md": "fresh",
    }
    # The renamed file is the same inode with the same memory id.
    assert h.node("/moved/name2.md") is name_node
    assert name_node.memory_id == ids["/old/name.md"]
    assert h.node("/new.md").memory_id == h.fake.id_of("/new.md")
    # The kernel is told: changed content, the old name, the removed name.
    assert edit_ino in h.notifier.inodes
    assert (old_dir_ino, "name.md") in h.notifier.entries
    assert (gone_parent, "gone.md") in h.notifier.entries
    assert all(n.state_name() == "clean" for n in h.state.walk_files())
    assert h.fake.writes() == []  # a pull never writes back


async def test_names_told_missing_are_invalidated_when_a_pull_brings_them(h: Harness) -> None:
    """A negative entry the kernel may hold for a name is dropped when the name arrives
    remotely (a create, an implicit directory, a remote rename); names never looked up
    cost the kernel nothing."""
    ids = await synced(h, {"/old.md": "o"})
    root = h.state.root.ino
    for name in ("new.md", "dir", "moved.md", "never-pulled.md"):
        assert h.tree.negatives.answer(root, name, 300.0)
    h.fake.add("/new.md", "fresh")
    h.fake.add("/dir/inside.md", "i")
    h.fake.add("/unasked.md", "u")
    h.fake.edit(ids["/old.md"], path="/moved.md")
    h.notifier.entries.clear()
    assert (await h.sync_once()).outcome == "ok"
    told = set(h.notifier.entries)
    assert {(root, "new.md"), (root, "dir"), (root, "moved.md")} <= told
    assert (root, "unasked.md") not in told and (root, "never-pulled.md") not in told
    # The kernel may hold the root's listing (FOPEN_CACHE_DIR): it is dropped too.
    assert root in h.notifier.inodes
    assert len(h.tree.negatives) == 1  # only never-pulled.md is still cached as missing
    h.notifier.entries.clear()
    assert (await h.sync_once()).outcome == "ok"
    assert h.notifier.entries == []  # told once


# --------------------------------------------------------------------------- pushes


async def test_push_create_then_update_with_baseline_precondition(h: Harness) -> None:
    await h.start()
    h.write("/notes/a.md", "one")
    assert (await h.sync_once()).pushed == 1
    mid = h.fake.id_of("/notes/a.md")
    node = h.node("/notes/a.md")
    assert node.memory_id == mid and node.state_name() == "clean"
    h.write("/notes/a.md", "two")
    assert node.state_name() == "dirty"
    await h.sync_once()
    update = h.fake.ops("update")[-1]
    assert update.memory_id == mid
    assert update.body == {
        "content": "two",
        "precondition": {"type": "content_sha256", "content_sha256": sha("one")},
    }
    assert h.fake.by_path() == {"/notes/a.md": "two"}
    assert node.state_name() == "clean" and node.base_sha == sha("two")
    # Clean content left the journal for the object store.
    assert node.data is None and h.state.objects.get(sha("two")) == b"two"


async def test_rename_file_and_directory_keep_ids(h: Harness) -> None:
    ids = await synced(h, {"/a.md": "A", "/d/x.md": "X", "/d/sub/y.md": "Y"})
    h.rename("/a.md", "/b.md")
    h.rename("/d", "/e")
    h.fake.requests.clear()
    result = await h.sync_once()
    assert result.outcome == "ok"
    assert h.fake.by_path() == {"/b.md": "A", "/e/x.md": "X", "/e/sub/y.md": "Y"}
    assert {h.fake.id_of(p) for p in ("/b.md", "/e/x.md", "/e/sub/y.md")} == set(ids.values())
    updates = h.fake.ops("update")
    assert len(updates) == 3 and h.fake.ops("create", "delete") == []
    for u in updates:
        assert u.body is not None and "content" not in u.body  # a rename sends no content
        assert u.body["precondition"]["content_sha256"] in {sha("A"), sha("X"), sha("Y")}
    assert all(n.state_name() == "clean" for n in h.state.walk_files())


async def test_atomic_save_keeps_the_memory_id(h: Harness) -> None:
    ids = await synced(h, {"/doc.md": "old"})
    h.write("/.doc.md.tmp123", "new content")
    h.rename("/.doc.md.tmp123", "/doc.md")
    h.fake.requests.clear()
    await h.sync_once()
    assert h.fake.by_path() == {"/doc.md": "new content"}
    assert h.fake.id_of("/doc.md") == ids["/doc.md"]
    assert [s.op for s in h.fake.writes()] == ["update"]
    assert h.node("/doc.md").state_name() == "clean"
    assert h.state.tombstones == {}


async def test_vim_style_save_keeps_the_memory_id(h: Harness) -> None:
    ids = await synced(h, {"/doc.md": "old"})
    h.rename("/doc.md", "/doc.md~")  # backup by rename (an excluded name)
    h.write("/doc.md", "written by vim")  # a brand-new file at the old name
    h.unlink("/doc.md~")  # the backup goes
    h.fake.requests.clear()
    await h.sync_once()
    assert h.fake.by_path() == {"/doc.md": "written by vim"}
    assert h.fake.id_of("/doc.md") == ids["/doc.md"]
    assert [s.op for s in h.fake.writes()] == ["update"]
    assert h.state.tombstones == {} and h.node("/doc.md").state_name() == "clean"


async def test_vim_save_with_a_pass_in_the_middle_keeps_the_id(h: Harness) -> None:
    ids = await synced(h, {"/doc.md": "old"})
    h.rename("/doc.md", "/doc.md~")
    h.write("/doc.md", "written by vim")
    await h.sync_once()  # sees the backup and the new file at once
    h.unlink("/doc.md~")
    await h.sync_once()
    await h.sync_once()
    assert h.fake.by_path() == {"/doc.md": "written by vim"}
    assert h.fake.id_of("/doc.md") == ids["/doc.md"]
    assert h.fake.ops("delete") == []
    assert h.local_files() == {"/doc.md": "written by vim"}


# --------------------------------------------------------------------------- conflicts


async def test_changed_both_sides_store_wins_and_keeps_a_copy(
    h: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    ids = await synced(h, {"/c.md": "base"})
    h.write("/c.md", "local edit")
    h.fake.edit(ids["/c.md"], content="remote edit")
    with caplog.at_level(logging.WARNING, "memfs.sync"):
        result = await h.sync_once()
    assert result.conflicts == 1
    assert h.read("/c.md") == "remote edit"
    assert h.fake.by_path() == {"/c.md": "remote edit"} and h.fake.writes() == []
    node = h.node("/c.md")
    assert node.conflict is not None and read_copy(node.conflict) == "local edit"
    assert Path(node.conflict).parent == h.cache.conflicts
    assert node.state_name() == "conflict"
    assert any(
        "keeping the remote version" in r.getMessage() and node.conflict in r.getMessage()
        for r in caplog.records
    )
    stats = h.sync.statistics()
    assert stats.conflicts == 1
    assert stats.conflict_copies[0].path == "/c.md"
    assert stats.conflict_copies[0].copy == node.conflict
    # The next local edit pushes normally against the winner.
    h.write("/c.md", "re-applied")
    await h.sync_once()
    assert h.fake.by_path() == {"/c.md": "re-applied"}


async def test_409_on_update_local_loses_copy_kept(
    h: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    ids = await synced(h, {"/c.md": "base"})
    h.write("/c.md", "mine")

    def race(op: str, mid: str | None, body: dict[str, Any] | None) -> None:
        if op == "update":  # someone else writes between our listing and our update
            h.fake.edit(ids["/c.md"], content="theirs")

    h.fake.before_write = race
    with caplog.at_level(logging.WARNING, "memfs.sync"):
        result = await h.sync_once()
    assert result.outcome == "ok"
    assert h.fake.by_path() == {"/c.md": "theirs"}
    assert h.read("/c.md") == "theirs"
    node = h.node("/c.md")
    assert node.state_name() == "conflict"
    assert node.conflict is not None and read_copy(node.conflict) == "mine"
    assert any(
        "the upload was refused and the local edit loses" in r.getMessage() for r in caplog.records
    )


async def test_appends_on_both_sides_merge_and_land_on_both(
    h: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    """Two sessions each append a line: the pass merges them three ways (no copy)."""
    ids = await synced(h, {"/log.md": "# log\n"})
    h.write("/log.md", "# log\nmine\n")
    h.fake.edit(ids["/log.md"], content="# log\ntheirs\n")
    with caplog.at_level(logging.INFO, "memfs.sync"):
        result = await h.sync_once()
    assert result.conflicts == 0
    assert h.fake.by_path() == {"/log.md": "# log\ntheirs\nmine\n"}
    assert h.read("/log.md") == "# log\ntheirs\nmine\n"
    assert h.node("/log.md").state_name() == "clean"
    assert any("merged the two" in r.getMessage() for r in caplog.records)
    conflicts = h.cache.conflicts
    assert not conflicts.exists() or not any(conflicts.iterdir())


async def test_409_on_update_merges_and_pushes_on_top_of_the_winner(h: Harness) -> None:
    """A lost race (412 on our update) merges with the version that won and pushes again."""
    ids = await synced(h, {"/log.md": "a\n"})
    h.write("/log.md", "a\nmine\n")
    raced = []

    def race(op: str, mid: str | None, body: dict[str, Any] | None) -> None:
        if op == "update" and not raced:  # someone else appends between listing and update
            raced.append(1)
            h.fake.edit(ids["/log.md"], content="a\ntheirs\n")

    h.fake.before_write = race
    result = await h.sync_once()
    assert raced and result.outcome == "ok" and result.conflicts == 0
    assert h.fake.by_path() == {"/log.md": "a\ntheirs\nmine\n"}
    assert h.read("/log.md") == "a\ntheirs\nmine\n"
    assert h.node("/log.md").state_name() == "clean"


async def test_races_lost_past_the_merge_retries_wait_for_the_next_pass_not_a_copy(
    h: Harness,
) -> None:
    """Another writer appends before each of our uploads, more often than one pass merges
    and pushes again (`MERGE_RETRIES`): the merge waits, dirty, for the next pass. Before,
    the store won at the fourth lost race and our line went to a conflict copy (four
    appending mounts lost 5 of 160 lines so, tests/mount/test_races.py)."""
    ids = await synced(h, {"/log.md": "a\n"})
    h.write("/log.md", "a\nmine\n")
    theirs: list[str] = []

    def race(op: str, mid: str | None, body: dict[str, Any] | None) -> None:
        if op == "update" and len(theirs) <= MERGE_RETRIES:  # one more than a pass retries
            theirs.append(f"theirs{len(theirs)}\n")
            h.fake.edit(ids["/log.md"], content="a\n" + "".join(theirs))

    h.fake.before_write = race
    result = await h.sync_once()
    assert len(theirs) == MERGE_RETRIES + 1
    assert result.outcome == "ok" and result.conflicts == 0 and not result.conflict_copies
    assert h.node("/log.md").dirty  # merged, its upload left for the next pass
    assert "mine\n" not in h.fake.by_path()["/log.md"]
    result = await h.sync_once()
    assert result.conflicts == 0
    expected = "a\n" + "".join(theirs) + "mine\n"
    assert h.fake.by_path() == {"/log.md": expected}
    assert h.read("/log.md") == expected
    assert h.node("/log.md").state_name() == "clean"


async def test_a_merged_lost_race_is_told_to_the_kernel_before_it_goes_up_again(
    h: Harness,
) -> None:
    """The merge of a lost race is the file at once: the kernel drops its cached times
    and pages before the merge is uploaded again, not at the end of the push. Before, a
    writer that checked the file's times in between (vim, before it writes) saw none of
    the landing and wrote its older buffer over the merge; the next merge of that
    reverted line conflicted, and the store won (tests/mount/test_races.py)."""
    ids = await synced(h, {"/log.md": "a\n"})
    h.write("/log.md", "a\nmine\n")
    ino = h.node("/log.md").ino
    told_before: list[bool] = []

    def race(op: str, mid: str | None, body: dict[str, Any] | None) -> None:
        if op != "update":
            return
        if not told_before:
            h.notifier.inodes.clear()
            h.fake.edit(ids["/log.md"], content="theirs\na\n")
        told_before.append(ino in h.notifier.inodes)

    h.fake.before_write = race
    result = await h.sync_once()
    assert result.outcome == "ok" and result.conflicts == 0
    assert told_before == [False, True]  # the second upload is the merge
    assert h.fake.by_path() == {"/log.md": "theirs\na\nmine\n"}


async def test_a_pulled_change_is_shown_as_the_kernel_saw_it_until_it_is_told(
    h: Harness,
) -> None:
    """A pull lands on the event loop and the kernel hears of it a thread hop later. In
    between, the handlers answer the file as the kernel last saw it (bytes, size,
    times). Before, a read there got the new bytes cut to the kernel's old size: a
    landing one byte longer lost a reader its last newline (tests/mount/test_races.py,
    the vim test). A local write in between works on the file as it now is."""
    ids = await synced(h, {"/n.md": "api 9\nsaved 1\n"})
    fs = MemFs(h.state, Waiter(), content_timeout=0.3, negative_timeout=0.0)
    fs.noflush = fs.cache_readdir = False
    ino = (await fs.lookup(pyfuse3.ROOT_INODE, b"n.md", FS_CTX)).st_ino
    old_mtime = (await fs.getattr(ino, FS_CTX)).st_mtime_ns

    async def shown() -> tuple[int, int, bytes]:
        a = await fs.getattr(ino, FS_CTX)
        fi = await fs.open(ino, os.O_RDONLY, FS_CTX)
        try:
            return a.st_size, a.st_mtime_ns, await fs.read(fi.fh, 0, 4096)
        finally:
            await fs.release(fi.fh)

    seen: list[tuple[int, int, bytes]] = []
    write_between = False

    class Kernel(NullNotifier):
        async def invalidate_inodes(self, inodes: list[int], unveil: Unveil) -> None:
            if ino in inodes:
                if write_between:
                    fi = await fs.open(ino, os.O_WRONLY | os.O_TRUNC, FS_CTX)
                    await fs.write(fi.fh, 0, b"mine\n")
                    await fs.release(fi.fh)
                seen.append(await shown())
            await super().invalidate_inodes(inodes, unveil)

    h.sync.lander.notifier = Kernel()
    h.fake.edit(ids["/n.md"], content="api 10\nsaved 1\n")
    await h.sync_once()
    assert seen == [(14, old_mtime, b"api 9\nsaved 1\n")]
    size, mtime, data = await shown()
    assert (size, data) == (15, b"api 10\nsaved 1\n") and mtime > old_mtime
    assert len(h.state.veils) == 0

    seen.clear()
    write_between = True
    h.fake.edit(ids["/n.md"], content="api 11\nsaved 1\n")
    await h.sync_once()
    assert seen[0][0] == 5 and seen[0][2] == b"mine\n"
    assert len(h.state.veils) == 0


async def test_an_older_buffer_saved_over_a_merge_is_replayed_onto_it(h: Harness) -> None:
    """vim loaded the file, a lost race landed its merge, and vim (its check of the
    file's times before the kernel heard) saved its buffer over it: line 1 reverted,
    one line added. The next merge with the store's change of line 1 conflicted and the
    store won, the saved line in a copy (tests/mount/test_races.py, the opt-out mode).
    Now vim's own change, replayed onto the merge, merges."""
    ids = await synced(h, {"/notes.md": "api 0\nbody\n"})
    h.write("/notes.md", "api 0\nbody\nsaved 1\n")
    h.fake.edit(ids["/notes.md"], content="api 1\nbody\n")
    assert (await h.sync_once()).conflicts == 0  # lost the race, merged, pushed
    assert h.read("/notes.md") == "api 1\nbody\nsaved 1\n"
    h.write("/notes.md", "api 0\nbody\nsaved 1\nsaved 2\n")  # vim's older buffer
    h.fake.edit(ids["/notes.md"], content="api 2\nbody\nsaved 1\n")
    result = await h.sync_once()
    assert result.conflicts == 0 and not result.conflict_copies
    expected = "api 2\nbody\nsaved 1\nsaved 2\n"
    assert h.fake.by_path() == {"/notes.md": expected}
    assert h.read("/notes.md") == expected


async def test_an_older_buffer_saved_over_a_pull_of_a_rewritten_file_is_replayed(
    h: Harness,
) -> None:
    """The same over a plain pull: the file was clean, rewritten in place lately (an
    editor's), and a pull changed line 1 under the editor's buffer."""
    ids = await synced(h, {"/notes.md": "api 0\nbody\n"})
    h.write("/notes.md", "api 0\nbody\nsaved 1\n")
    await h.sync_once()
    h.fake.edit(ids["/notes.md"], content="api 1\nbody\nsaved 1\n")
    await h.sync_once()
    assert h.read("/notes.md") == "api 1\nbody\nsaved 1\n"
    h.write("/notes.md", "api 0\nbody\nsaved 1\nsaved 2\n")  # the buffer before the pull
    h.fake.edit(ids["/notes.md"], content="api 2\nbody\nsaved 1\n")
    result = await h.sync_once()
    assert result.conflicts == 0
    assert h.fake.by_path() == {"/notes.md": "api 2\nbody\nsaved 1\nsaved 2\n"}


async def test_a_writer_that_saw_the_landing_and_changed_its_line_still_conflicts(
    h: Harness,
) -> None:
    """The replay is no way around a real conflict: a writer that had the merge and
    changed the line the store changes too loses to the store, its bytes in a copy."""
    ids = await synced(h, {"/notes.md": "api 0\nbody\n"})
    h.write("/notes.md", "api 0\nbody\nsaved 1\n")
    h.fake.edit(ids["/notes.md"], content="api 1\nbody\n")
    await h.sync_once()
    h.write("/notes.md", "mine\nbody\nsaved 1\n")
    h.fake.edit(ids["/notes.md"], content="api 2\nbody\nsaved 1\n")
    result = await h.sync_once()
    assert result.conflicts == 1
    assert h.fake.by_path() == {"/notes.md": "api 2\nbody\nsaved 1\n"}


async def test_a_file_changed_during_its_upload_merges_later(h: Harness) -> None:
    """The baseline an accepted upload set is kept at hand even when the file changed
    while it was in flight: the next change on both sides merges. Without it the base
    was missing and the merge fell back to store-wins, so a line went to a conflict
    copy (seen with two sessions appending to one memory)."""
    ids = await synced(h, {"/log.md": "a\n"})
    h.write("/log.md", "a\nb\n")

    def append_during_upload(op: str, mid: str | None, body: dict[str, Any] | None) -> None:
        if op == "update" and h.read("/log.md") == "a\nb\n":
            h.write("/log.md", "a\nb\nc\n")

    h.fake.before_write = append_during_upload
    await h.sync_once()
    assert h.fake.by_path() == {"/log.md": "a\nb\n"}
    assert h.node("/log.md").state_name() != "clean"  # c is still to push
    h.fake.edit(ids["/log.md"], content="a\nb\ntheirs\n")
    result = await h.sync_once()
    assert result.conflicts == 0
    assert h.fake.by_path() == {"/log.md": "a\nb\ntheirs\nc\n"}
    assert h.read("/log.md") == "a\nb\ntheirs\nc\n"


# Two clean edits of a 60 KB memory, 35 KB each: each side fits the store, their merge
# (130 KB) does not (issue 35 item 8 reproduced it with 130,702 bytes).
BIG_BASE = "".join(f"base line {i:05d}\n" for i in range(3_750))
MINE = "".join(f"mine {i:05d} ................\n" for i in range(1_250))
THEIRS = "".join(f"theirs {i:05d} ..............\n" for i in range(1_250))


def over_the_limit(local: str, remote: str) -> str:
    merged = len(local) + len(remote) - len(BIG_BASE)
    assert max(len(local), len(remote)) <= MAX_CONTENT_BYTES < merged
    return f"the merge of both sides is {merged} bytes, over the store's limit of 102400"


async def test_a_merge_over_the_store_limit_is_not_pushed_and_the_local_side_is_kept(
    h: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    """Before, the clean merge became the file, was pushed, refused by the store and
    held back: the log said "merged the two", no copy was kept and the pass was ok."""
    ids = await synced(h, {"/big.md": BIG_BASE})
    local, remote = MINE + BIG_BASE, BIG_BASE + THEIRS
    why = over_the_limit(local, remote)
    h.write("/big.md", local)
    h.fake.edit(ids["/big.md"], content=remote)
    with caplog.at_level(logging.INFO, "memfs.sync"):
        result = await h.sync_once()
    assert result.outcome == "ok" and result.conflicts == 1
    assert h.fake.by_path() == {"/big.md": remote} and h.fake.writes() == []
    assert h.read("/big.md") == remote
    node = h.node("/big.md")
    assert node.state_name() == "conflict" and node.refused_sha is None
    assert node.conflict is not None and read_copy(node.conflict) == local
    [kept] = result.conflict_copies
    assert kept.why == why and last_pass(result).conflict_copies[0].why == why
    assert h.sync.statistics().conflict_copies == (kept,)
    lines = [r.getMessage() for r in caplog.records]
    assert not any("merged the two" in line for line in lines)
    assert any("keeping the remote version" in line and why in line for line in lines)


async def test_a_lost_race_whose_merge_is_over_the_limit_keeps_the_local_side(
    h: Harness,
) -> None:
    """The same when the other side wins the race to the store (412 on our update):
    the merge with the winner is not pushed."""
    ids = await synced(h, {"/big.md": BIG_BASE})
    local, remote = MINE + BIG_BASE, BIG_BASE + THEIRS
    h.write("/big.md", local)

    def race(op: str, mid: str | None, body: dict[str, Any] | None) -> None:
        if op == "update" and h.fake.by_path()["/big.md"] == BIG_BASE:
            h.fake.edit(ids["/big.md"], content=remote)

    h.fake.before_write = race
    result = await h.sync_once()
    assert result.outcome == "ok" and result.conflicts == 1
    assert h.fake.by_path() == {"/big.md": remote}
    assert h.read("/big.md") == remote
    node = h.node("/big.md")
    assert node.state_name() == "conflict" and node.refused_sha is None
    assert node.conflict is not None and read_copy(node.conflict) == local
    [kept] = result.conflict_copies
    assert kept.why == over_the_limit(local, remote)


async def test_404_on_update_recreates(h: Harness) -> None:
    ids = await synced(h, {"/r.md": "base"})
    h.write("/r.md", "edited")

    def vanish(op: str, mid: str | None, body: dict[str, Any] | None) -> None:
        if op == "update" and mid in h.fake.memories:
            h.fake.remove(ids["/r.md"])

    h.fake.before_write = vanish
    await h.sync_once()
    assert h.fake.by_path() == {"/r.md": "edited"}
    new_id = h.fake.id_of("/r.md")
    assert new_id != ids["/r.md"]
    assert h.node("/r.md").memory_id == new_id
    assert h.node("/r.md").state_name() == "clean"
    assert [s.op for s in h.fake.writes()] == ["update", "create"]


@pytest.mark.parametrize(
    ("status", "etype"), [(400, "invalid_request_error"), (413, "request_too_large")]
)
async def test_rejected_upload_is_refused_until_content_changes(
    h: Harness, status: int, etype: str, caplog: pytest.LogCaptureFixture
) -> None:
    await h.start()
    h.write("/big.md", "refused bytes")
    h.fake.fail("create", status, etype, times=10)
    with caplog.at_level(logging.WARNING, "memfs.sync"):
        result = await h.sync_once()
    assert result.outcome == "ok"
    node = h.node("/big.md")
    assert node.state_name() == "refused" and node.refused_why
    assert any(
        "stays un-synced until its content changes" in r.getMessage() for r in caplog.records
    )
    assert h.sync.statistics().refused_files == (RefusedFile("/big.md", node.refused_why),)
    # Not retried while the content is the same, even across a restart.
    await h.sync_once()
    h.restart()
    await h.start()
    await h.sync_once()
    assert len(h.fake.ops("create")) == 1
    assert h.node("/big.md").state_name() == "refused"
    # A change makes it eligible again.
    h.fake.faults.clear()
    h.write("/big.md", "acceptable now")
    await h.sync_once()
    assert h.fake.by_path() == {"/big.md": "acceptable now"}
    assert h.node("/big.md").state_name() == "clean"


async def test_rejected_update_is_refused_too(h: Harness) -> None:
    await synced(h, {"/u.md": "base"})
    h.write("/u.md", "too big, say")
    h.fake.fail("update", 413, "request_too_large", times=10)
    await h.sync_once()
    await h.sync_once()
    assert len(h.fake.ops("update")) == 1
    assert h.node("/u.md").state_name() == "refused"
    assert h.fake.by_path() == {"/u.md": "base"}


@pytest.mark.parametrize(
    ("status", "etype"),
    [(500, "api_error"), (503, "api_error"), (429, "rate_limit_error"), (529, "overloaded_error")],
)
async def test_transient_failure_fails_the_pass_and_loses_nothing(
    h: Harness, status: int, etype: str
) -> None:
    await synced(h, {"/t.md": "base"})
    h.write("/t.md", "edited")
    h.write("/n.md", "new")
    h.fake.fail("update", status, etype)
    h.fake.fail("create", status, etype)
    result = await h.sync_once()
    assert result.outcome == "failed" and result.error
    assert h.node("/t.md").state_name() == "dirty"
    assert h.fake.by_path() == {"/t.md": "base"}
    # Survives a crash: the journal still holds both.
    h.fake.faults.clear()
    h.restart()
    await h.start()
    assert h.fake.by_path() == {"/t.md": "edited", "/n.md": "new"}
    assert all(n.state_name() == "clean" for n in h.state.walk_files())


async def test_transient_failures_back_off_and_retry_within_a_pass(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    h = Harness(tmp_path, retry=RetryPolicy())
    try:
        await synced(h, {"/t.md": "base"})
        h.write("/t.md", "edited")
        h.fake.fail("update", 429, "rate_limit_error", times=2, headers={"retry-after": "7"})
        t0 = trio.current_time()
        result = await h.sync_once()
        assert result.outcome == "ok"
        assert trio.current_time() - t0 >= 14  # honoured retry-after twice
        assert h.fake.by_path() == {"/t.md": "edited"}
        assert len(h.fake.ops("update")) == 3
    finally:
        await h.aclose()


async def test_uploads_give_way_to_a_busy_mount_but_not_for_long(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """An upload costs the thread that answers FUSE requests about 1.5 ms of CPU: it
    waits while the mount answers requests, starts once the mount has been quiet
    QUIET_FOR_UPLOAD, is held MAX_GIVE_WAY at most by a mount that is never quiet, and
    not at all by one that is being unmounted (its final sync)."""
    h = Harness(tmp_path)
    fs = MemFs(h.state, Waiter())
    h.sync.pusher.last_request = fs.last_answered  # as the daemon wires them
    sent: list[float] = []
    h.fake.before_write = lambda op, mid, body: sent.append(trio.current_time())

    async def busy(until: float) -> None:  # a writer's requests, QUIET_FOR_UPLOAD / 4 apart
        while trio.current_time() < until:
            await fs.getattr(pyfuse3.ROOT_INODE, FS_CTX)
            await trio.sleep(QUIET_FOR_UPLOAD / 4)

    async def pushed_while_busy(until: float) -> memfs.sync.plan.PassResult:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(busy, until)
            await trio.lowlevel.checkpoint()  # the first request is answered
            result = await h.sync_once()
            nursery.cancel_scope.cancel()
        return result

    try:
        await h.start()
        h.write("/a.md", "one")
        h.write("/b.md", "two")
        t0 = trio.current_time()
        assert (await pushed_while_busy(t0 + 0.1)).pushed == 2
        assert len(sent) == 2
        assert t0 + 0.1 <= min(sent) <= max(sent) < t0 + 0.1 + 2 * QUIET_FOR_UPLOAD
        # A mount that is never quiet: held MAX_GIVE_WAY, then pushed anyway.
        h.write("/a.md", "three")
        t1 = trio.current_time()
        assert (await pushed_while_busy(t1 + 60)).pushed == 1
        assert t1 + MAX_GIVE_WAY <= sent[-1] < t1 + MAX_GIVE_WAY + 0.05
        # Unmounting: the final sync does not wait for anybody.
        fs.closing = True
        h.write("/b.md", "four")
        t2 = trio.current_time()
        assert (await pushed_while_busy(t2 + 60)).pushed == 1
        assert sent[-1] == t2
        assert h.fake.by_path() == {"/a.md": "three", "/b.md": "four"}
    finally:
        await h.aclose()


async def test_offline_then_catches_up(
    tmp_path: Path, autojump_clock: trio.testing.MockClock, trio_clock_time: None
) -> None:
    h = Harness(tmp_path, retry=RetryPolicy(max_attempts=3, deadline=10), interval=15.0)
    try:
        await synced(h, {"/t.md": "base"})
        async with trio.open_nursery() as nursery:
            await nursery.start(h.sync.run)
            for op in ("list", "versions", "retrieve", "create", "update", "delete"):
                h.fake.fail(op, 503, times=1000)  # the server is gone
            h.write("/t.md", "offline edit")
            h.write("/o.md", "offline create")
            await trio.sleep(60)
            assert h.sync.last_pass is not None and h.sync.last_pass.outcome == "failed"
            assert h.fake.by_path() == {"/t.md": "base"}  # tried, on the interval only
            assert len(h.fake.ops("update")) <= 2 * 60 / 15 + 2
            h.fake.faults.clear()  # it is back
            await trio.sleep(20)
            assert h.sync.last_pass.outcome == "ok"
            nursery.cancel_scope.cancel()
        assert h.fake.by_path() == {"/t.md": "offline edit", "/o.md": "offline create"}
    finally:
        await h.aclose()


# --------------------------------------------------------------------------- lost answers


async def test_lost_create_answer_is_settled_by_the_listing(h: Harness) -> None:
    await h.start()
    h.write("/l.md", "created once")
    h.fake.lose_answer("create")
    result = await h.sync_once()
    assert result.outcome == "failed"
    assert h.fake.by_path() == {"/l.md": "created once"}  # it did land
    await h.sync_once()
    assert len(h.fake.ops("create")) == 1 and len(h.fake.memories) == 1
    node = h.node("/l.md")
    assert node.memory_id == h.fake.id_of("/l.md") and node.state_name() == "clean"


async def test_lost_create_answer_then_an_edit_pushes_the_edit(h: Harness) -> None:
    """The lost create is ours (sent sha), so the newer bytes update it: no conflict."""
    await h.start()
    h.write("/l.md", "first")
    h.fake.lose_answer("create")
    assert (await h.sync_once()).outcome == "failed"
    h.write("/l.md", "second")
    result = await h.sync_once()
    assert result.outcome == "ok" and result.conflicts == 0
    assert h.fake.by_path() == {"/l.md": "second"}
    assert len(h.fake.ops("create")) == 1
    assert h.read("/l.md") == "second" and h.node("/l.md").state_name() == "clean"
    conflicts = h.cache.conflicts
    assert not conflicts.exists() or not any(conflicts.iterdir())


async def test_lost_create_answer_then_unlink_deletes_it(h: Harness) -> None:
    """A create whose answer was lost, unlinked before the next listing: the memory the
    lost create made is ours, so it is deleted, not pulled back as a remote file."""
    await h.start()
    h.write("/l.md", "made")
    h.fake.lose_answer("create")
    assert (await h.sync_once()).outcome == "failed"
    h.unlink("/l.md")
    result = await h.sync_once()
    assert result.outcome == "ok" and result.conflicts == 0
    await h.sync_once()
    assert h.fake.by_path() == {} and h.local_files() == {}


async def test_lost_create_answer_then_unlink_and_rewrite_updates_it(h: Harness) -> None:
    """... and a new file written at its path takes the memory over (no conflict copy)."""
    await h.start()
    h.write("/l.md", "made")
    h.fake.lose_answer("create")
    assert (await h.sync_once()).outcome == "failed"
    h.unlink("/l.md")
    h.write("/l.md", "made again")
    result = await h.sync_once()
    assert result.outcome == "ok" and result.conflicts == 0
    assert h.fake.by_path() == {"/l.md": "made again"} and len(h.fake.ops("create")) == 1
    assert h.read("/l.md") == "made again" and h.node("/l.md").state_name() == "clean"
    conflicts = h.cache.conflicts
    assert not conflicts.exists() or not any(conflicts.iterdir())


async def test_lost_create_answer_then_rename_moves_it(h: Harness) -> None:
    """A lost create renamed before the next listing: one memory, at the new path."""
    await h.start()
    h.write("/a.md", "made")
    h.fake.lose_answer("create")
    assert (await h.sync_once()).outcome == "failed"
    h.rename("/a.md", "/b.md")
    result = await h.sync_once()
    assert result.outcome == "ok" and result.conflicts == 0
    await h.sync_once()
    assert h.fake.by_path() == {"/b.md": "made"} and len(h.fake.ops("create")) == 1
    assert h.local_files() == {"/b.md": "made"}


async def test_lost_create_answer_then_restart_and_unlink(h: Harness) -> None:
    """What the lost create sent survives a restart with the unlink."""
    await h.start()
    h.write("/l.md", "made")
    h.fake.lose_answer("create")
    assert (await h.sync_once()).outcome == "failed"
    h.unlink("/l.md")
    h.restart()
    await h.start()
    await h.sync_once()
    await h.sync_once()
    assert h.fake.by_path() == {} and h.local_files() == {}


async def test_lost_update_answer_is_settled_by_the_listing(h: Harness) -> None:
    ids = await synced(h, {"/l.md": "v1"})
    h.write("/l.md", "v2")
    h.fake.lose_answer("update")
    assert (await h.sync_once()).outcome == "failed"
    node = h.node("/l.md")
    assert node.sent_sha == sha("v2")  # remembered, in case the answer was lost
    h.restart()  # ... even across a crash
    await h.start()
    await h.sync_once()
    assert len(h.fake.ops("update")) == 1
    node = h.node("/l.md")
    assert node.memory_id == ids["/l.md"] and node.state_name() == "clean"
    assert node.base_sha == sha("v2")


async def test_lost_answers_with_retries_settle_within_the_pass(tmp_path: Path) -> None:
    h = Harness(tmp_path, retry=RetryPolicy(base_delay=0.001))
    try:
        ids = await synced(h, {"/u.md": "v1"})
        h.write("/u.md", "v2")
        h.write("/c.md", "new")
        h.fake.lose_answer("update")
        h.fake.lose_answer("create")
        result = await h.sync_once()
        assert result.outcome == "ok"
        assert h.fake.by_path() == {"/u.md": "v2", "/c.md": "new"}
        assert h.fake.id_of("/u.md") == ids["/u.md"] and len(h.fake.memories) == 2
        assert all(n.state_name() == "clean" for n in h.state.walk_files())
    finally:
        await h.aclose()


async def test_lost_rename_answer_is_settled(h: Harness) -> None:
    ids = await synced(h, {"/a.md": "A"})
    h.rename("/a.md", "/b.md")
    h.fake.lose_answer("update")
    assert (await h.sync_once()).outcome == "failed"
    await h.sync_once()
    assert h.fake.by_path() == {"/b.md": "A"} and h.fake.id_of("/b.md") == ids["/a.md"]
    assert len(h.fake.ops("update")) == 1
    assert h.node("/b.md").state_name() == "clean"


# --------------------------------------------------------------------------- deletes


async def test_delete_enabled_sends_guarded_delete(
    h: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    ids = await synced(h, {"/d.md": "doomed", "/k.md": "kept"})
    h.unlink("/d.md")
    assert h.sync.statistics().pending_delete_paths == ("/d.md",)
    with caplog.at_level(logging.INFO, "memfs.sync"):
        result = await h.sync_once()
    assert result.deleted == 1
    (delete,) = h.fake.ops("delete")
    assert delete.memory_id == ids["/d.md"]
    assert delete.params["expected_content_sha256"] == sha("doomed")
    assert h.fake.by_path() == {"/k.md": "kept"}
    assert h.state.tombstones == {}
    assert any("propagated local deletion" in r.getMessage() for r in caplog.records)


async def test_delete_guard_keeps_a_remote_change(
    h: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    ids = await synced(h, {"/d.md": "doomed"})
    h.unlink("/d.md")

    def race(op: str, mid: str | None, body: dict[str, Any] | None) -> None:
        if op == "delete":
            h.fake.edit(ids["/d.md"], content="changed meanwhile")

    h.fake.before_write = race
    with caplog.at_level(logging.WARNING, "memfs.sync"):
        await h.sync_once()
    assert h.fake.by_path() == {"/d.md": "changed meanwhile"}
    assert h.local_files() == {"/d.md": "changed meanwhile"}  # restored locally
    assert h.state.tombstones == {}
    assert any("keeping the remote version" in r.getMessage() for r in caplog.records)


async def test_deleted_locally_changed_remotely_restores(
    h: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    ids = await synced(h, {"/d.md": "doomed"})
    h.unlink("/d.md")
    h.fake.edit(ids["/d.md"], content="remote edit")
    with caplog.at_level(logging.WARNING, "memfs.sync"):
        await h.sync_once()
    assert h.fake.ops("delete") == []
    assert h.local_files() == {"/d.md": "remote edit"}
    assert h.node("/d.md").memory_id == ids["/d.md"]
    assert any("restoring the remote version" in r.getMessage() for r in caplog.records)


async def test_delete_log_only(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    h = Harness(tmp_path, deletions="log_only")
    try:
        await synced(h, {"/d.md": "doomed"})
        h.unlink("/d.md")
        with caplog.at_level(logging.INFO, "memfs.sync"):
            await h.sync_once()
            await h.sync_once()
        assert h.fake.ops("delete") == []
        assert h.fake.by_path() == {"/d.md": "doomed"}
        said = [r for r in caplog.records if "log-only: sync would delete" in r.getMessage()]
        assert len(said) == 1 and "path=/d.md" in said[0].getMessage()
        assert not h.exists("/d.md")  # the local deletion stands
    finally:
        await h.aclose()


async def test_delete_disabled(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    h = Harness(tmp_path, deletions="disabled")
    try:
        await synced(h, {"/d.md": "doomed"})
        h.unlink("/d.md")
        with caplog.at_level(logging.DEBUG, "memfs.sync"):
            await h.sync_once()
            await h.sync_once(final=True)
        assert h.fake.ops("delete") == []
        assert h.fake.by_path() == {"/d.md": "doomed"}
        assert not any(
            "delete" in r.getMessage() and "would" in r.getMessage() for r in caplog.records
        )
    finally:
        await h.aclose()


@pytest.mark.parametrize("n", [12, 40, 240])
async def test_delete_cap_per_pass(
    tmp_path: Path, n: int, caplog: pytest.LogCaptureFixture
) -> None:
    h = Harness(tmp_path)
    try:
        await synced(h, {f"/f{i:03d}.md": f"content {i}" for i in range(n)})
        for i in range(n):
            h.unlink(f"/f{i:03d}.md")
        per_pass = []
        baseline = n
        with caplog.at_level(logging.WARNING, "memfs.sync"):
            while h.state.tombstones:
                before = len(h.fake.ops("delete"))
                result = await h.sync_once()
                sent = len(h.fake.ops("delete")) - before
                assert sent == result.deleted == min(delete_cap(baseline), baseline)
                per_pass.append(sent)
                baseline -= sent
                assert len(per_pass) < 50
        assert per_pass[0] == max(8, min(50, n // 4))
        assert sum(per_pass) == n and h.fake.memories == {}
        assert any("delete cap reached" in r.getMessage() for r in caplog.records)
    finally:
        await h.aclose()


async def test_remote_delete_of_dirty_file_recreates(
    h: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    ids = await synced(h, {"/x.md": "base", "/clean.md": "c"})
    h.write("/x.md", "edited here")
    h.fake.remove(ids["/x.md"])
    h.fake.remove(ids["/clean.md"])
    with caplog.at_level(logging.INFO, "memfs.sync"):
        await h.sync_once()
    assert h.fake.by_path() == {"/x.md": "edited here"}
    assert h.fake.id_of("/x.md") != ids["/x.md"]
    assert h.local_files() == {"/x.md": "edited here"}  # clean one removed locally
    assert any("re-creating it from the file" in r.getMessage() for r in caplog.records)


async def test_read_only_never_pushes_and_keeps_dirty_files(
    h: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    ids = await synced(h, {"/x.md": "base", "/y.md": "y", "/z.md": "z"})
    # Edits left in the journal by an earlier writable mount of the same cache.
    h.write("/x.md", "edited here")
    h.write("/new.md", "never pushed")
    h.unlink("/z.md")
    h.rename("/y.md", "/y2.md")
    h.restart(read_only=True)
    with caplog.at_level(logging.WARNING, "memfs.sync"):
        await h.start()
        h.fake.remove(ids["/x.md"])
        await h.sync_once()
        await h.sync_once(final=True)
    assert h.fake.writes() == []
    assert h.fake.by_path() == {"/y.md": "y", "/z.md": "z"}
    assert h.read("/x.md") == "edited here"  # kept, unsynced
    assert h.read("/new.md") == "never pushed"
    assert any("which a read-only store cannot push" in r.getMessage() for r in caplog.records)


# --------------------------------------------------------------------------- timing


async def test_open_for_write_waits_for_close_at_most_one_more_interval(
    tmp_path: Path, autojump_clock: trio.testing.MockClock, trio_clock_time: None
) -> None:
    h = Harness(tmp_path, interval=15.0)
    try:
        async with running(h):
            await trio.sleep(1)
            node = h.write("/open.md", "still writing", keep_open=True)
            closed = h.write("/closed.md", "done")
            await trio.sleep(15)  # first timed pass (t=15): only the closed file goes
            assert h.fake.by_path() == {"/closed.md": "done"}
            await trio.sleep(15)  # second (t=30): dirty for >= one interval, open or not
            assert h.fake.by_path() == {"/closed.md": "done", "/open.md": "still writing"}
            h.close(node)
            assert closed.state_name() == "clean"
    finally:
        await h.aclose()


async def test_an_appender_open_at_every_pass_is_still_pushed_within_max_defer(
    tmp_path: Path, autojump_clock: trio.testing.MockClock, trio_clock_time: None
) -> None:
    """A stream of appends (open, write, close, again) that every pass finds open: a
    file closed since it changed goes at MAX_DEFER open or not, not one interval later."""
    h = Harness(tmp_path, interval=15.0)
    try:
        async with running(h):
            await trio.sleep(20)  # past the first timed pass
            node = h.write("/log.md", "start\n")
            h.state.closed(node, writing=False)
            await trio.sleep(2)
            assert h.fake.by_path() == {"/log.md": "start\n"}
            t0 = trio.current_time()
            lines = 0
            while trio.current_time() - t0 < 6:
                node.open_handles += 1
                node.open_writers += 1
                h.state.write(node, node.size, f"line {lines}\n".encode())
                lines += 1
                await trio.sleep(0.05)  # every pass runs while it is open
                h.state.closed(node, writing=True)
            stored = h.fake.by_path()["/log.md"]
            behind = lines - stored.count("line ")
            assert behind * 0.05 <= MAX_DEFER + MIN_GAP, (lines, behind)
    finally:
        await h.aclose()


async def test_close_releases_the_upload_at_the_next_pass(
    tmp_path: Path, autojump_clock: trio.testing.MockClock, trio_clock_time: None
) -> None:
    h = Harness(tmp_path, interval=15.0)
    try:
        async with running(h):
            await trio.sleep(1)
            node = h.write("/open.md", "writing", keep_open=True)
            await trio.sleep(15)
            assert h.fake.memories == {}
            h.close(node)
            await h.sync.sync_now()
            assert h.fake.by_path() == {"/open.md": "writing"}
    finally:
        await h.aclose()


async def test_without_tracked_writers_a_push_waits_for_a_quiet_spell(tmp_path: Path) -> None:
    """--zero-message-opens: no close to wait for, so a timer pass leaves a file written in
    the last WRITE_QUIET_NS; a pass someone asked for (`memfs sync`) and the final one
    push it."""
    h = Harness(tmp_path, interval=15.0)
    h.state.tree.writers_tracked = False
    try:
        async with running(h):
            h.write("/quiet.md", "written a while ago")
            h.node("/quiet.md").mtime_ns -= memfs.sync.plan.WRITE_QUIET_NS
            h.write("/busy.md", "being written")
            await h.sync_once()  # a timer's pass
            assert h.fake.by_path() == {"/quiet.md": "written a while ago"}
            await h.sync.sync_now()  # asked for
            assert h.fake.by_path() == {
                "/quiet.md": "written a while ago",
                "/busy.md": "being written",
            }
            h.write("/last.md", "just now")
            await h.sync_once()
            assert "/last.md" not in h.fake.by_path()
            await h.sync.final_sync()
            assert h.fake.by_path()["/last.md"] == "just now"
    finally:
        await h.aclose()


async def test_without_tracked_writers_a_seen_close_settles_a_write(tmp_path: Path) -> None:
    """Zero-message opens with the close watch: a file closed since its last write is
    pushed at the next pass, as after a RELEASE; one written again after its close, or
    never closed, waits for the quiet spell; a pull onto a file truncated and not yet
    closed waits (`Lander.busy`)."""
    h = Harness(tmp_path, interval=15.0)
    h.state.tree.writers_tracked = False
    h.state.tree.closes_seen = True
    try:
        async with running(h):
            h.write("/closed.md", "done")
            h.write("/open.md", "still being written")
            h.state.writer_closed(h.node("/closed.md"))
            await h.sync_once()
            assert h.fake.by_path() == {"/closed.md": "done"}
            h.state.writer_closed(h.node("/open.md"))
            h.write("/open.md", "written again after the close")
            await h.sync_once()
            assert "/open.md" not in h.fake.by_path()
            node = h.node("/closed.md")
            h.state.truncate(node, 0)  # vim's O_TRUNC, its write still to come
            assert h.sync.lander.busy(node)
            h.state.write(node, 0, b"rewritten")
            h.state.writer_closed(node)
            assert not h.sync.lander.busy(node)
    finally:
        await h.aclose()


async def test_final_pass_does_not_wait_for_open_files(h: Harness) -> None:
    await h.start()
    h.write("/open.md", "at unmount", keep_open=True)
    await h.sync_once()
    assert h.fake.memories == {}
    result = await h.sync.final_sync()
    assert result.outcome == "ok"
    assert h.fake.by_path() == {"/open.md": "at unmount"}


async def test_temp_files_between_passes_never_reach_the_store(h: Harness) -> None:
    ids = await synced(h, {"/doc.md": "a"})
    # sed -i: temp file written, renamed over; and a scratch file created and removed.
    h.write("/sedAbC123", "b")
    h.rename("/sedAbC123", "/doc.md")
    h.write("/scratch.tmp", "gone soon")
    h.unlink("/scratch.tmp")
    h.mkdirs("/tmpdir")
    h.write("/tmpdir/t", "x")
    h.rename("/tmpdir/t", "/tmpdir/u")
    h.unlink("/tmpdir/u")
    h.fake.requests.clear()
    await h.sync_once()
    assert [(s.op, s.memory_id) for s in h.fake.writes()] == [("update", ids["/doc.md"])]
    paths = {str((s.body or {}).get("path")) for s in h.fake.requests}
    assert not {"/sedAbC123", "/scratch.tmp", "/tmpdir/t", "/tmpdir/u"} & paths
    assert h.fake.by_path() == {"/doc.md": "b"}


async def test_excluded_globs_stay_local(tmp_path: Path) -> None:
    h = Harness(tmp_path, excludes=(*DEFAULT_EXCLUDES, "*.tmp"))
    try:
        await h.start()
        for path in ("/.notes.md.swp", "/notes.md~", "/d/4913", "/x.tmp", "/#a#"):
            h.write(path, "local only")
        h.write("/notes.md", "synced")
        await h.sync_once()
        await h.sync_once(final=True)
        assert h.fake.by_path() == {"/notes.md": "synced"}
        assert h.read("/x.tmp") == "local only"
        stats = h.sync.statistics()
        # Excluded files are not "waiting to be pushed": the flush must not report them.
        assert stats.dirty_files == () and stats.dirty == 0
    finally:
        await h.aclose()


async def test_change_during_own_upload_stays_dirty(h: Harness) -> None:
    ids = await synced(h, {"/w.md": "v1"})
    h.write("/w.md", "v2")
    h.write("/n.md", "n1")

    def meanwhile(op: str, mid: str | None, body: dict[str, Any] | None) -> None:
        if op == "update" and body and body.get("content") == "v2":
            h.write("/w.md", "v3")  # the agent writes again while v2 is on the wire
        if op == "create" and body and body.get("content") == "n1":
            h.write("/n.md", "n2")

    h.fake.before_write = meanwhile
    await h.sync_once()
    assert h.fake.by_path() == {"/w.md": "v2", "/n.md": "n1"}
    assert h.node("/w.md").state_name() == "dirty"
    assert h.node("/n.md").state_name() == "dirty"
    h.restart()  # and the journal agrees
    await h.start()
    assert h.fake.by_path() == {"/w.md": "v3", "/n.md": "n2"}
    (last,) = [
        u
        for u in h.fake.ops("update")
        if u.memory_id == ids["/w.md"] and u.body and u.body["content"] == "v3"
    ]
    assert last.body == {  # v3 sent against v2, the new baseline
        "content": "v3",
        "precondition": {"type": "content_sha256", "content_sha256": sha("v2")},
    }
    assert h.fake.id_of("/w.md") == ids["/w.md"] and len(h.fake.memories) == 2


async def test_unlink_during_own_create_becomes_a_delete(h: Harness) -> None:
    await h.start()
    h.write("/brief.md", "short-lived")

    def meanwhile(op: str, mid: str | None, body: dict[str, Any] | None) -> None:
        if op == "create":
            h.unlink("/brief.md")

    h.fake.before_write = meanwhile
    await h.sync_once()
    assert len(h.fake.memories) == 1 and len(h.state.tombstones) == 1
    h.restart()  # a kill -9 here must not bring the deleted file back
    h.fake.before_write = None
    await h.start()
    await h.sync_once()
    assert h.fake.memories == {} and h.state.tombstones == {}
    assert h.local_files() == {}


async def test_rename_over_a_file_whose_update_is_in_flight_passes_the_baseline_on(
    h: Harness,
) -> None:
    """`mv b a` while a's update is in flight: b takes a's memory, and the store's new
    baseline (a's accepted upload) with it, so b's bytes follow as an update. Without
    that, b's upload failed its precondition on our own write: a conflict copy."""
    ids = await synced(h, {"/a.md": "a0"})
    h.write("/a.md", "a1")
    h.write("/b.md", "b")

    def meanwhile(op: str, mid: str | None, body: dict[str, Any] | None) -> None:
        if op == "update" and h.exists("/b.md"):
            h.rename("/b.md", "/a.md")

    h.fake.before_write = meanwhile
    result = await h.sync_once()
    h.fake.before_write = None
    assert result.outcome == "ok" and result.conflicts == 0
    assert not h.fake.ops("create")  # b is a's memory now: no second memory
    result = await h.sync_once()
    assert result.conflicts == 0
    assert h.fake.by_path() == {"/a.md": "b"} and h.fake.id_of("/a.md") == ids["/a.md"]
    assert h.local_files() == {"/a.md": "b"} and h.node("/a.md").state_name() == "clean"


async def test_rename_over_a_memory_while_the_own_create_is_in_flight(h: Harness) -> None:
    """`mv b a` while b's create is in flight: b is a's memory now; the memory the
    create made stands for nothing local and is deleted (not pulled back as /b.md)."""
    ids = await synced(h, {"/a.md": "a0"})
    h.write("/b.md", "b")

    def meanwhile(op: str, mid: str | None, body: dict[str, Any] | None) -> None:
        if op == "create":
            h.rename("/b.md", "/a.md")

    h.fake.before_write = meanwhile
    assert (await h.sync_once()).outcome == "ok"
    h.fake.before_write = None
    await h.sync_once()
    await h.sync_once()
    assert h.fake.by_path() == {"/a.md": "b"} and h.fake.id_of("/a.md") == ids["/a.md"]
    assert h.local_files() == {"/a.md": "b"} and h.state.tombstones == {}


# --------------------------------------------------------------------------- restart


async def test_restart_pushes_journal_first_with_preconditions(h: Harness) -> None:
    ids = await synced(h, {"/a.md": "base", "/b.md": "b"})
    h.write("/a.md", "edited before the crash")
    h.write("/c.md", "created before the crash")
    h.unlink("/b.md")
    h.restart()
    await h.start()  # the initial pass pushes what the journal holds
    assert h.fake.by_path() == {
        "/a.md": "edited before the crash",
        "/c.md": "created before the crash",
    }
    update = h.fake.ops("update")[-1]
    assert update.memory_id == ids["/a.md"]
    assert update.body is not None
    assert update.body["precondition"]["content_sha256"] == sha("base")


async def test_restart_with_remote_change_store_wins(h: Harness) -> None:
    ids = await synced(h, {"/a.md": "base"})
    h.write("/a.md", "local")
    h.restart()
    h.fake.edit(ids["/a.md"], content="remote")
    await h.start()
    await h.sync.fetcher.fetch_all_missing()
    assert h.read("/a.md") == "remote"
    assert h.fake.writes() == []
    node = h.node("/a.md")
    assert node.conflict is not None and read_copy(node.conflict) == "local"


async def test_restart_with_appends_on_both_sides_merges_them(h: Harness) -> None:
    """Lines appended before a kill -9, unpushed, while another writer appended too: the
    start's pass merges them (the store's side fetched for it, not left to stream in
    behind the mount); before, the store won and the lines went to a conflict copy."""
    ids = await synced(h, {"/log.md": "top\n"})
    h.write("/log.md", "top\nmine\n")
    h.restart()
    h.fake.edit(ids["/log.md"], content="top\ntheirs\n")
    await h.start()
    assert h.fake.by_path() == {"/log.md": "top\ntheirs\nmine\n"}
    assert h.read("/log.md") == "top\ntheirs\nmine\n"
    node = h.node("/log.md")
    assert node.conflict is None and node.state_name() == "clean"


async def test_a_start_whose_merge_fetch_failed_keeps_the_local_side_for_the_next_pass(
    h: Harness,
) -> None:
    """The store's side of such a merge did not arrive at start: the file keeps its
    local change (no copy, nothing pushed) and the next pass merges."""
    ids = await synced(h, {"/log.md": "top\n"})
    h.write("/log.md", "top\nmine\n")
    h.restart()
    h.fake.edit(ids["/log.md"], content="top\ntheirs\n")
    h.fake.fail("retrieve", 503, times=1)
    await h.start()
    assert h.read("/log.md") == "top\nmine\n" and h.node("/log.md").conflict is None
    assert h.fake.by_path() == {"/log.md": "top\ntheirs\n"}
    await h.sync_once()
    assert h.fake.by_path() == {"/log.md": "top\ntheirs\nmine\n"}
    assert h.read("/log.md") == "top\ntheirs\nmine\n" and h.node("/log.md").conflict is None


# --------------------------------------------------------------------------- idle cost


@pytest.mark.parametrize("versions", [True, False], ids=["head-check", "no-versions"])
@pytest.mark.parametrize("n", [10, 250, 1000])
async def test_idle_pass_only_lists(
    tmp_path: Path, n: int, versions: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Idle (a probing mount's pass): one request for the store's head version; without
    versions, the listing."""
    h = Harness(tmp_path)
    h.fake.versions_supported = versions
    try:
        files = {f"/d{i % 7}/f{i:04d}.md": f"content of {i}" for i in range(n)}
        await synced(h, files)
        await h.sync_once()
        reads = {"content": 0, "get": 0, "hash": 0}

        def counting(name: str, fn: Any) -> Any:
            def wrapper(*a: Any, **kw: Any) -> Any:
                reads[name] += 1
                return fn(*a, **kw)

            return wrapper

        monkeypatch.setattr(h.state, "content", counting("content", h.state.content))
        monkeypatch.setattr(h.state.objects, "get", counting("get", h.state.objects.get))
        for module in (
            memfs.sync.plan,
            memfs.sync.landing,
            memfs.sync.pusher,
            memfs.state.node,
            memfs.state.store_state,
        ):
            if hasattr(module, "sha256_hex"):
                monkeypatch.setattr(module, "sha256_hex", counting("hash", module.sha256_hex))
        h.fake.requests.clear()
        h.notifier.inodes.clear()
        h.notifier.entries.clear()
        t0 = time.perf_counter()
        result = await h.sync.run_pass(kind="probe")
        elapsed_ms = (time.perf_counter() - t0) * 1000
        assert result.outcome == "ok" and result.pulled == result.pushed == 0
        if versions:
            assert [s.op for s in h.fake.requests] == ["versions"] and not result.listed
        else:
            assert [s.op for s in h.fake.requests] == ["list"] * math.ceil(n / 100)
            assert all(s.params["view"] == "basic" for s in h.fake.requests)
        assert reads == {"content": 0, "get": 0, "hash": 0}
        assert h.notifier.inodes == [] and h.notifier.entries == []
        print(f"idle pass n={n}: {len(h.fake.requests)} requests, {elapsed_ms:.1f} ms")
    finally:
        await h.aclose()


async def test_feed_passes_bring_every_change_without_a_listing(h: Harness) -> None:
    """A remote create, edit, rename and delete each cost one page of the versions feed
    (their contents in it); a local change is pushed with no read at all; only a full
    pass lists (memfs/sync/feed.py)."""
    ids = await synced(h, {"/a.md": "A", "/b.md": "B", "/c.md": "C"})

    async def ops(kind: PassKind = "feed") -> list[str]:
        h.fake.requests.clear()
        result = await h.sync.run_pass(kind=kind)
        assert result.outcome == "ok" and result.kind == kind
        return [s.op for s in h.fake.requests]

    h.fake.edit(ids["/a.md"], content="A2")
    h.fake.add("/new.md", "N")
    h.fake.edit(ids["/b.md"], path="/moved/b.md")
    h.fake.remove(ids["/c.md"])
    assert await ops() == ["versions"]
    assert h.local_files() == {"/a.md": "A2", "/new.md": "N", "/moved/b.md": "B"}
    h.write("/a.md", "A3")
    assert await ops("push") == ["update"]
    assert h.fake.by_path()["/a.md"] == "A3"
    assert "list" in await ops("full")


async def test_a_pull_whose_fetch_failed_is_retried_by_the_next_pass(
    h: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The store's head does not move again for a pull whose content did not arrive:
    the next pass lists anyway and lands it (it was left behind until a new change)."""
    ids = await synced(h, {"/a.md": "A"})
    await h.sync_once()
    h.fake.edit(ids["/a.md"], content="A2")
    h.fake.fail("retrieve", 503, times=1)
    read = memfs.sync.engine.read_feed

    async def without_contents(*args: Any, **kw: Any) -> Any:
        feed = await read(*args, **kw)
        feed.contents.clear()  # as a page too big to carry them would
        return feed

    monkeypatch.setattr(memfs.sync.engine, "read_feed", without_contents)
    result = await h.sync_once()
    monkeypatch.undo()
    assert result.outcome == "ok" and result.pulled == 0 and h.read("/a.md") == "A"
    result = await h.sync_once()  # the feed from before that change: read again
    assert result.kind == "feed" and result.pulled == 1 and h.read("/a.md") == "A2"


async def test_refused_file_does_not_keep_the_pass_listing(h: Harness) -> None:
    await synced(h, {"/a.md": "A"})
    node = h.write("/bad.md", "x")
    node.refused_sha = node.current_sha()  # held back: nothing to push
    await h.sync_once()
    await h.sync_once()
    h.fake.requests.clear()
    await h.sync_once()
    assert [s.op for s in h.fake.requests] == ["versions"]


# --------------------------------------------------------------------------- edge cases


async def test_remote_swap_of_two_paths_converges(h: Harness) -> None:
    ids = await synced(h, {"/a.md": "A", "/b.md": "B"})
    node_a = h.node("/a.md")
    h.fake.edit(ids["/a.md"], path="/tmp.md")
    h.fake.edit(ids["/b.md"], path="/a.md")
    h.fake.edit(ids["/a.md"], path="/b.md")
    await h.sync_once()
    assert h.local_files() == {"/a.md": "B", "/b.md": "A"}
    assert h.node("/b.md") is node_a and node_a.memory_id == ids["/a.md"]
    assert h.fake.writes() == []
    h.restart()  # the journal agrees
    await h.start()
    assert h.local_files() == {"/a.md": "B", "/b.md": "A"}
    assert h.fake.writes() == []


async def test_remote_file_replaces_an_empty_local_directory(h: Harness) -> None:
    ids = await synced(h, {"/x/only.md": "in a dir"})
    h.fake.remove(ids["/x/only.md"])
    await h.sync_once()
    assert h.exists("/x") and h.node("/x").is_dir  # left empty locally
    h.fake.add("/x", "now a file")
    await h.sync_once()
    assert h.local_files() == {"/x": "now a file"}


async def test_new_local_file_where_the_store_created_one(h: Harness) -> None:
    await h.start()
    h.write("/same.md", "identical")
    h.write("/diff.md", "mine")
    h.fake.add("/same.md", "identical")
    h.fake.add("/diff.md", "theirs")
    await h.sync_once()
    await h.sync_once()
    assert h.fake.ops("create") == [] and len(h.fake.memories) == 2
    assert h.local_files() == {"/same.md": "identical", "/diff.md": "theirs"}
    copy = h.node("/diff.md").conflict
    assert copy is not None and read_copy(copy) == "mine"
    assert h.node("/same.md").conflict is None


async def test_local_rename_onto_a_path_the_store_just_took(h: Harness) -> None:
    ids = await synced(h, {"/a.md": "A"})
    h.rename("/a.md", "/b.md")
    h.fake.add("/b.md", "B from elsewhere")
    for _ in range(3):
        await h.sync_once()
    # Store wins the path; the local rename is undone, nothing is lost or duplicated.
    assert h.fake.by_path() == {"/a.md": "A", "/b.md": "B from elsewhere"}
    assert h.local_files() == {"/a.md": "A", "/b.md": "B from elsewhere"}
    assert h.node("/a.md").memory_id == ids["/a.md"]
    assert all(n.state_name() in ("clean", "conflict") for n in h.state.walk_files())


async def test_remote_rename_and_local_edit_merge(h: Harness) -> None:
    ids = await synced(h, {"/a.md": "base"})
    h.write("/a.md", "local edit")
    h.fake.edit(ids["/a.md"], path="/renamed.md")
    await h.sync_once()
    await h.sync_once()
    assert h.fake.by_path() == {"/renamed.md": "local edit"}
    assert h.local_files() == {"/renamed.md": "local edit"}
    assert h.node("/renamed.md").conflict is None
    assert h.fake.id_of("/renamed.md") == ids["/a.md"]


async def test_local_rename_and_remote_edit_merge(h: Harness) -> None:
    ids = await synced(h, {"/a.md": "base"})
    h.rename("/a.md", "/mine.md")
    h.fake.edit(ids["/a.md"], content="remote edit")
    await h.sync_once()
    await h.sync.fetcher.fetch_all_missing()
    await h.sync_once()
    assert h.fake.by_path() == {"/mine.md": "remote edit"}
    assert h.local_files() == {"/mine.md": "remote edit"}
    assert h.node("/mine.md").conflict is None
    assert h.fake.id_of("/mine.md") == ids["/a.md"]


async def test_deleted_locally_renamed_remotely_is_restored(h: Harness) -> None:
    ids = await synced(h, {"/a.md": "A"})
    h.unlink("/a.md")
    h.fake.edit(ids["/a.md"], path="/moved.md")
    await h.sync_once()
    assert h.fake.by_path() == {"/moved.md": "A"}
    assert h.local_files() == {"/moved.md": "A"}


async def test_conflict_mark_clears_once_a_new_edit_is_pushed(h: Harness) -> None:
    ids = await synced(h, {"/c.md": "base"})
    h.write("/c.md", "local")
    h.fake.edit(ids["/c.md"], content="remote")
    await h.sync_once()
    assert h.node("/c.md").state_name() == "conflict"
    h.write("/c.md", "merged by hand")
    await h.sync_once()
    assert h.node("/c.md").state_name() == "clean"
    assert h.sync.statistics().conflicts == 0


async def test_read_only_pull_invalidates_the_kernel_cache(h: Harness) -> None:
    ids = await synced(h, {"/r.md": "old"})
    h.restart(read_only=True)
    await h.start()
    await h.sync.fetcher.fetch_all_missing()
    ino = h.node("/r.md").ino
    h.notifier.inodes.clear()
    h.fake.edit(ids["/r.md"], content="new")
    assert (await h.sync_once()).outcome == "ok"
    assert h.read("/r.md") == "new"
    assert ino in h.notifier.inodes


def test_a_bug_beside_a_network_error_is_not_a_failed_pass() -> None:
    from memfs.errors import StoreUnavailable
    from memfs.sync.engine import _expected_failure

    net = StoreUnavailable("down")
    assert _expected_failure(ExceptionGroup("pass", [net, OSError("disk")])) is net
    assert _expected_failure(ExceptionGroup("pass", [net, KeyError("bug")])) is None
    assert _expected_failure(KeyError("bug")) is None


async def test_local_swap_converges_in_one_pass(h: Harness) -> None:
    """`mv a t; mv b a; mv t b`: each rename is blocked by the other until one memory
    steps aside; both keep their ids and nothing is left parked."""
    ids = await synced(h, {"/a.md": "A", "/b.md": "B", "/c.md": "C"})
    h.rename("/a.md", "/t.md")
    h.rename("/b.md", "/a.md")
    h.rename("/t.md", "/b.md")
    result = await h.sync_once()
    assert result.outcome == "ok"
    assert h.fake.by_path() == {"/a.md": "B", "/b.md": "A", "/c.md": "C"}
    assert h.fake.id_of("/a.md") == ids["/b.md"] and h.fake.id_of("/b.md") == ids["/a.md"]
    assert h.node("/a.md").state_name() == h.node("/b.md").state_name() == "clean"
    await h.sync_once()
    assert h.fake.by_path() == {"/a.md": "B", "/b.md": "A", "/c.md": "C"}


# --------------------------------------------------------------------------- push soon


async def test_a_settled_change_is_pushed_within_a_second_without_sync(
    tmp_path: Path, autojump_clock: trio.testing.MockClock, trio_clock_time: None
) -> None:
    """Push soon (memfs/sync/schedule.py): no `memfs sync`, no interval to wait for."""
    h = Harness(tmp_path, interval=15.0)
    try:
        async with running(h):
            await trio.sleep(20)  # past the first timed pass
            h.write("/a.md", "settled")
            await trio.sleep(1.0)
            assert h.fake.by_path() == {"/a.md": "settled"}
            # A file still open for write waits for its close, then goes as soon.
            node = h.write("/open.md", "writing", keep_open=True)
            await trio.sleep(5)
            assert "/open.md" not in h.fake.by_path()
            h.state.closed(node, writing=True)
            await trio.sleep(1.0)
            assert h.fake.by_path()["/open.md"] == "writing"
    finally:
        await h.aclose()


async def test_push_soon_coalesces_a_stream_of_writes(
    tmp_path: Path, autojump_clock: trio.testing.MockClock, trio_clock_time: None
) -> None:
    """A write every 0.1 s for 10 s is at most one pass per MIN_GAP, and its last bytes
    reach the store about a second after the stream stops."""
    h = Harness(tmp_path, interval=15.0)
    try:
        async with running(h):
            await trio.sleep(1)
            before = sum(h.sync.scheduler.statistics().passes.values())
            seen: list[float] = []  # when the store had each line
            for i in range(100):
                h.write("/s.md", f"line {i}\n")
                await trio.sleep(0.1)
                if h.fake.by_path().get("/s.md") == f"line {i}\n":
                    seen.append(trio.current_time())
            await trio.sleep(1.5)
            assert h.fake.by_path() == {"/s.md": "line 99\n"}
            passes = sum(h.sync.scheduler.statistics().passes.values()) - before
            assert 1 <= passes <= 10 / memfs.sync.schedule.MIN_GAP + 1
            # A stream that never settles is still pushed: the deadline a later write
            # moves cannot move past MAX_DEFER after the first write still waiting.
            gaps = [b - a for a, b in itertools.pairwise(seen)]
            assert len(seen) >= 5 and max(gaps) <= memfs.sync.schedule.MAX_DEFER + 0.5
    finally:
        await h.aclose()


async def test_a_failure_the_store_repeats_every_pass_is_warned_once(
    h: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 24 item 5: a delete the store refuses at every pass was one warning a pass;
    now one per path and cause, then a count."""
    await synced(h, {"/a.md": "a\n"})
    h.unlink("/a.md")
    h.fake.fail("delete", 400, "invalid_request_error", times=12)
    with caplog.at_level(logging.WARNING, "memfs.sync"):
        for _ in range(12):
            await h.sync_once()
    lines = caplog.text.splitlines()
    assert sum("failed to delete memory memory_store_id=" in line for line in lines) == 1
    assert (
        sum("a warning repeated; it is logged once per cause count=10" in line for line in lines)
        == 1
    )
    await h.sync_once()  # the store takes it now
    assert h.fake.memories == {}


@pytest.mark.parametrize("n", [100, 2_000])
async def test_a_change_costs_the_same_requests_at_any_store_size(
    tmp_path: Path, n: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 36: a local change is its upload alone, another writer's change one page of
    the feed with its content, whatever the store's size (before: a listing of ⌈N/100⌉
    pages each). The store here was filled a moment ago, inside the feed's overlap;
    a real one is older, so the overlap is left out (memfs/sync/feed.py)."""
    monkeypatch.setattr(memfs.sync.feed, "OVERLAP", 0.0)
    h = Harness(tmp_path)
    try:
        h.fake.add_many((f"/d{i % 20}/m{i:05d}.md", f"memory {i}\n") for i in range(n))
        await h.start()
        await h.sync.fetcher.fetch_all_missing()
        h.fake.requests.clear()
        h.write("/d0/m00000.md", "a local change\n")
        assert (await h.sync.run_pass(kind="push")).pushed == 1
        local = [s.op for s in h.fake.requests]
        h.fake.requests.clear()
        h.fake.edit(h.fake.id_of("/d1/m00001.md"), content="a remote change\n")
        assert (await h.sync.run_pass(kind="feed")).pulled == 1
        remote = [s.op for s in h.fake.requests]
        assert (local, remote) == (["update"], ["versions"])
        assert h.read("/d1/m00001.md") == "a remote change\n"
    finally:
        await h.aclose()


async def test_news_forty_times_a_second_is_at_most_one_pass_a_second(
    tmp_path: Path, autojump_clock: trio.testing.MockClock, trio_clock_time: None
) -> None:
    """Issue 35 item 9: passes the watch woke had no minimum gap; another session writing
    40 times a second (or a server whose watch always reports a new head) made a mount
    list the store ~5 times a second. Now passes are MIN_GAP apart whatever woke them."""
    h = Harness(tmp_path, interval=15.0)
    try:
        await synced(h, {"/a.md": "a"})
        async with running(h):
            await trio.sleep(5)
            before = sum(h.sync.scheduler.statistics().passes.values())
            for n in range(400):  # 10 s of news, 25 ms apart
                h.sync._heard(f"memver_other_{n}")
                await trio.sleep(0.025)
            passes = sum(h.sync.scheduler.statistics().passes.values()) - before
            assert 5 <= passes <= 10 / memfs.sync.schedule.MIN_GAP + 1
    finally:
        await h.aclose()


async def test_a_feed_answered_with_garbage_falls_back_to_a_listing(
    h: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    ids = await synced(h, {"/a.md": "A"})
    h.fake.edit(ids["/a.md"], content="A2")

    async def garbage(*args: Any, **kw: Any) -> Any:
        raise memfs.errors.StoreError("list_versions: malformed answer from the store: x")
        yield  # an async generator, as the client's

    monkeypatch.setattr(h.sync.client, "iter_versions", garbage)
    result = await h.sync_once()
    assert result.outcome == "ok" and result.kind == "full" and h.read("/a.md") == "A2"


async def test_the_feed_follows_a_delete_and_a_create_at_one_path(h: Harness) -> None:
    ids = await synced(h, {"/a.md": "first life"})
    h.fake.remove(ids["/a.md"])
    h.fake.add("/a.md", "second life")
    result = await h.sync_once()
    assert result.kind == "feed" and h.read("/a.md") == "second life"
    assert h.node("/a.md").memory_id == h.fake.id_of("/a.md") != ids["/a.md"]


def _restamp(h: Harness, at: str, version_id: str | None = None, *, seq: int | None = None) -> None:
    """Give a version (None: every version) the time, and with `seq` the place among the
    versions of that time, that a late transaction of another server instance would have
    left it with. The server stamps `created_at` as fixed-width UTC text
    (`%Y-%m-%dT%H:%M:%S.%fZ`) and lists versions newest first by created_at, then seq."""
    where, args = ("WHERE id = ?", (version_id,)) if version_id is not None else ("", ())
    with closing(sqlite3.connect(h.tmp_path / "server" / "store.sqlite")) as db, db:
        db.execute(f"UPDATE versions SET created_at = ? {where}", (at, *args))
        if seq is not None:
            db.execute(f"UPDATE versions SET seq = ? {where}", (seq, *args))


def _seconds_before(at: str, seconds: float) -> str:
    parsed = memfs.sync.feed.parse_time(at)
    assert parsed is not None
    return (parsed - timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _head(h: Harness) -> str:
    head = h.fake.db.head(h.fake.store_id)
    assert head is not None
    return head


async def _fed(h: Harness, ids: dict[str, str], path: str, content: str) -> memfs.sync.feed.Cursor:
    """Another writer's change, brought by a feed pass: the cursor is at its version."""
    h.fake.edit(ids[path], content=content)
    assert (await h.sync_once()).kind == "feed" and h.read(path) == content
    cursor = h.sync._cursor
    assert cursor is not None and cursor.head == _head(h)
    return cursor


async def test_the_feed_reads_a_version_stamped_with_the_cursors_own_time(h: Harness) -> None:
    """Issue 36, the feed: another writer's version carries exactly the time of the
    version the cursor holds. The head moved, so the probe reads the feed, which reads
    from before the cursor's time (`feed.OVERLAP`, `created_at[gte]`): it lands."""
    ids = await synced(h, {"/a.md": "A", "/b.md": "B"})
    cursor = await _fed(h, ids, "/a.md", "A2")
    h.fake.edit(ids["/b.md"], content="B2")
    same_time = _head(h)
    _restamp(h, cursor.at, same_time)
    result = await h.sync.run_pass(kind="probe")
    assert result.kind == "feed" and result.pulled == 1
    assert h.local_files() == {"/a.md": "A2", "/b.md": "B2"}
    assert h.sync._cursor is not None
    assert (h.sync._cursor.at, h.sync._cursor.head) == (cursor.at, same_time)
    assert {same_time, cursor.head} <= set(h.sync._cursor.seen)


async def test_of_two_versions_with_one_time_the_feed_reads_the_one_it_had_not(
    h: Harness,
) -> None:
    """Two versions share one time; the mount read the one that sorts first (the cursor
    holds it) before the other, committed late, was there. The next feed pass (the head
    moved again since) reads that time again and lands the other; the cursor goes on to
    the newest version."""
    ids = await synced(h, {"/a.md": "A", "/b.md": "B", "/c.md": "C"})
    cursor = await _fed(h, ids, "/a.md", "A2")
    h.fake.edit(ids["/b.md"], content="B2")
    _restamp(h, cursor.at, _head(h), seq=-1)  # after the cursor's version of that time
    assert _head(h) == cursor.head
    h.fake.edit(ids["/c.md"], content="C2")
    newest = _head(h)
    result = await h.sync.run_pass(kind="probe")
    assert result.kind == "feed" and result.pulled == 2
    assert h.local_files() == {"/a.md": "A2", "/b.md": "B2", "/c.md": "C2"}
    assert h.sync._cursor is not None and h.sync._cursor.head == newest
    assert h.sync._cursor.at > cursor.at


async def test_the_feed_lands_a_version_committed_after_a_later_one_was_read(
    h: Harness,
) -> None:
    """A late commit: the mount read version Vb (the cursor: Vb, time T); then versions
    of other memories become visible that were stamped about 1 s before T (another
    server instance's transactions, committed after Vb's). The head did not move (a
    probe sees nothing); the next feed pass reads from `feed.OVERLAP` before T and lands
    them, and the cursor stays at Vb, the newest version it read. The versions it had
    seen applied (`Cursor.seen`) do not hide them: they are not among them; once applied
    they are, and the next read passes over them."""
    ids = await synced(h, {"/a.md": "A", "/b.md": "B"})
    assert h.sync._cursor is not None
    # Created a while ago: a later version of a memory has a later time (one clock).
    _restamp(h, _seconds_before(h.sync._cursor.at, 60))
    cursor = await _fed(h, ids, "/a.md", "A2")
    h.fake.edit(ids["/b.md"], content="B2")
    late_b = _head(h)
    _restamp(h, _seconds_before(cursor.at, 1.0), late_b)
    h.fake.add("/c.md", "C")
    late_c = _head(h)
    _restamp(h, _seconds_before(cursor.at, 0.9), late_c)
    assert _head(h) == cursor.head
    result = await h.sync_once()
    assert result.kind == "feed" and result.pulled == 2
    assert h.local_files() == {"/a.md": "A2", "/b.md": "B2", "/c.md": "C"}
    assert h.sync._cursor is not None
    assert (h.sync._cursor.at, h.sync._cursor.head) == (cursor.at, cursor.head)
    assert set(h.sync._cursor.seen) == {cursor.head, late_b, late_c}
    assert (await h.sync_once()).pulled == 0


def _restamp_since(h: Harness, since: str, at: str) -> None:
    """Every version stamped after `since` (the ones just made) now carries `at`."""
    with closing(sqlite3.connect(h.tmp_path / "server" / "store.sqlite")) as db, db:
        db.execute("UPDATE versions SET created_at = ? WHERE created_at > ?", (at, since))


def _stamp(at: datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


async def test_a_burst_past_max_versions_in_the_overlap_does_not_keep_the_passes_listing(
    h: Harness,
) -> None:
    """300 versions within a second: the pass that meets them lists the store (more than
    `feed.MAX_VERSIONS` new ones). The next change's feed pass reads them all again (they
    are inside `feed.OVERLAP`) but the cursor has seen them applied (`Cursor.seen`): they
    no longer count against MAX_VERSIONS, and that pass is a `feed` pass (it listed too)."""
    ids = await synced(h, {"/a.md": "A"})
    h.fake.add_many((f"/burst/m{i:03d}.md", f"{i}\n") for i in range(300))
    result = await h.sync_once()
    assert result.kind == "full" and result.pulled == 300
    h.fake.edit(ids["/a.md"], content="A2")
    h.fake.requests.clear()
    result = await h.sync_once()
    assert result.kind == "feed" and result.pulled == 1 and h.read("/a.md") == "A2"
    assert {s.op for s in h.fake.requests} == {"versions"}
    h.fake.edit(ids["/a.md"], content="A3")
    result = await h.sync_once()
    assert result.kind == "feed" and result.pulled == 1 and h.read("/a.md") == "A3"


async def test_a_store_taking_more_than_max_versions_per_overlap_is_followed_by_the_feed(
    h: Harness,
) -> None:
    """Another writer changes 120 memories every 1.1 s (~110 versions a second): each
    feed pass reads the last two rounds again (240 versions inside `feed.OVERLAP`) with
    the new one. Counted, they made every pass list the whole store; the 200 the cursor
    keeps as seen are not counted now (the other 40 are, as new), so every pass is a
    `feed` pass and pulls the round. Versions are stamped on a made-up clock: round k at
    t0 + 1.1 k s."""
    n = 120
    t0 = datetime.now(UTC) - timedelta(seconds=100)
    fresh = _stamp(t0 + timedelta(seconds=50))  # every version made since is after this
    h.fake.add_many((f"/m{i:03d}.md", "0\n") for i in range(n))
    _restamp_since(h, fresh, _stamp(t0))
    await h.start()
    await h.sync.fetcher.fetch_all_missing()
    mids = [h.fake.id_of(f"/m{i:03d}.md") for i in range(n)]
    for k in range(1, 6):
        for mid in mids:
            h.fake.edit(mid, content=f"{k}\n")
        _restamp_since(h, fresh, _stamp(t0 + timedelta(seconds=1.1 * k)))
        h.fake.requests.clear()
        result = await h.sync_once()
        assert (result.kind, result.pulled) == ("feed", n), k
        assert {s.op for s in h.fake.requests} == {"versions"}
        assert h.read("/m007.md") == f"{k}\n"
        assert h.sync._cursor is not None
        assert len(h.sync._cursor.seen) == memfs.sync.feed.MAX_SEEN


async def test_the_overlap_read_again_brings_nothing_to_apply(
    h: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The feed re-reads `feed.OVERLAP` before the cursor; the versions there it has seen
    applied (`Cursor.seen`) are passed over: not in `Feed.newest` (nothing to plan), no
    content carried, not counted (`Feed.news`). A pass that finds nothing new brings
    nothing to the fetcher."""
    ids = await synced(h, {"/a.md": "A", "/b.md": "B", "/c.md": "C"})
    start = h.sync._cursor
    # the start's listing: the three creates, inside the overlap, are seen
    assert start is not None and len(start.seen) == 3
    read = memfs.sync.feed.read_feed
    h.fake.edit(ids["/a.md"], content="A2")
    h.fake.remove(ids["/b.md"])
    first = await read(h.client, h.fake.store_id, start)
    assert first.complete and (first.versions, first.news) == (5, 2)
    assert set(first.newest) == {ids["/a.md"], ids["/b.md"]}
    assert [(f.memory.path, f.content) for f in first.contents] == [("/a.md", "A2")]
    assert len(first.cursor.seen) == 5
    again = await read(h.client, h.fake.store_id, first.cursor)
    assert again.complete and (again.versions, again.news) == (5, 0)
    assert again.newest == {} and again.contents == [] and again.cursor == first.cursor
    h.fake.edit(ids["/c.md"], content="C2")
    third = await read(h.client, h.fake.store_id, again.cursor)
    assert (third.versions, third.news) == (6, 1) and set(third.newest) == {ids["/c.md"]}

    # The engine: a feed pass after the one that applied them fetches and plans nothing.
    await h.sync_once()
    assert h.local_files() == {"/a.md": "A2", "/c.md": "C2"}
    stored: list[str] = []
    monkeypatch.setattr(h.sync.fetcher, "store", lambda full: stored.append(full.memory.id))
    h.fake.requests.clear()
    result = await h.sync.run_pass(kind="feed")
    assert (result.kind, result.pulled, result.pushed) == ("feed", 0, 0)
    assert [s.op for s in h.fake.requests] == ["versions"] and stored == []


async def test_an_unseen_older_version_is_not_the_state_of_a_memory_whose_newest_is_seen(
    h: Harness,
) -> None:
    """Newest first, the feed takes the first version of a memory it reads as the
    memory's state. When that version is one the cursor has seen applied, the memory is
    as this mount has it, and an older version of it further down the list (one the
    cursor does not name: it kept only the newest `MAX_SEEN`, or it was committed late)
    is not its state either: landing it would put back old content."""
    ids = await synced(h, {"/a.md": "A1", "/b.md": "B1"})
    cursor = await _fed(h, ids, "/a.md", "A2")
    # A cursor that kept only the newest version of its window: A2 (A1 is before it).
    h.sync._cursor = memfs.sync.feed.Cursor(cursor.at, cursor.head, (cursor.head,))
    h.fake.edit(ids["/b.md"], content="B2")
    result = await h.sync_once()
    assert result.kind == "feed" and result.pulled == 1
    assert h.local_files() == {"/a.md": "A2", "/b.md": "B2"}
    assert h.fake.by_path() == {"/a.md": "A2", "/b.md": "B2"}


def test_a_cursor_kept_before_it_had_seen_ids_still_loads() -> None:
    """The journal's cursor (meta `feed_cursor`) as memfs kept it before `Cursor.seen`:
    it loads, with nothing seen (the feed counts and applies the whole window again, as
    it did). `seen` round-trips, an unreadable one is dropped, a long one is cut."""
    cursor = memfs.sync.feed.Cursor
    at = "2026-01-02T03:04:05.678901Z"
    old = json.dumps({"at": at, "head": "memver_a"})
    assert cursor.loads(old) == cursor(at, "memver_a", ())
    kept = cursor(at, "memver_b", ("memver_b", "memver_a"))
    assert cursor.loads(kept.dumps()) == kept
    assert cursor.loads(cursor(at, "memver_a").dumps()) == cursor(at, "memver_a")
    for garbage in ([1, 2], "memver_a", None, {"x": 1}):
        assert cursor.loads(json.dumps({"at": at, "head": "h", "seen": garbage})) == cursor(at, "h")
    many = json.dumps({"at": at, "head": "h", "seen": [f"memver_{i}" for i in range(999)]})
    loaded = cursor.loads(many)
    assert loaded is not None and len(loaded.seen) == memfs.sync.feed.MAX_SEEN
    assert cursor.loads('{"at": 1, "head": "h"}') is None and cursor.loads("{}") is None


async def test_a_cursor_older_than_the_store_keeps_versions_lists_the_store(h: Harness) -> None:
    await synced(h, {"/a.md": "a"})
    h.sync._cursor = memfs.sync.feed.Cursor("2020-01-01T00:00:00.000000Z", "memver_gone")
    h.fake.add("/b.md", "b")
    result = await h.sync_once()
    assert result.kind == "full" and h.read("/b.md") == "b"
    assert h.sync._cursor is not None and h.sync._cursor.head != "memver_gone"
    assert (await h.sync_once()).kind == "feed"  # and from there on, the feed again


async def test_the_cursor_is_kept_across_a_restart(h: Harness) -> None:
    await synced(h, {"/a.md": "a"})
    await h.sync_once()
    kept = h.sync._cursor
    h.restart()
    await h.start()
    assert h.sync._cursor == kept


async def test_a_create_refused_for_its_own_earlier_create_takes_that_memory(
    tmp_path: Path,
) -> None:
    """A create whose answer was lost landed after the store was read (a pass cancelled
    mid-upload at unmount): the next create of the file finds its path taken by those
    very bytes and takes the memory over at once; at unmount it was left unpushed, exit 1."""
    h = Harness(tmp_path, retry=RetryPolicy(max_attempts=1))
    await h.start()
    node = h.write("/n.md", "new\n")
    h.fake.lose_answer("create")
    result = memfs.sync.plan.PassResult(0.0, 0.0, "ok")
    with pytest.raises(memfs.errors.StoreError):
        await h.sync.pusher._push_create(node, result)
    await h.sync.pusher._push_create(node, result)  # as a pass that had not seen it would
    assert result.pushed == 1 and node.state_name() == "clean"
    assert node.memory_id == h.fake.id_of("/n.md") and len(h.fake.memories) == 1
    await h.aclose()


async def test_a_local_directory_where_the_store_has_a_file_settles_to_the_store_shape(
    h: Harness,
) -> None:
    """Issue 36 item 5: one mount made `/x` a directory, another made it a file first.
    The store takes no memory that overlaps another's, so every upload under `/x/` is
    refused; before, they stayed unpushable forever ("the next pass settles it", 100+
    times) while `memfs sync` said ok. Now the store's shape wins at the next pass and
    each local file is kept as a conflict copy."""
    await synced(h, {"/other.md": "o\n"})
    h.write("/x/a.md", "a\n")
    h.write("/x/b/c.md", "c\n")
    h.fake.add("/x", "the store's file\n")
    pushed = await h.sync.run_pass(kind="push")
    assert sorted(pushed.unsettled) == ["/x/a.md", "/x/b/c.md"]
    assert last_pass(pushed).unsettled == pushed.unsettled
    settled = await h.sync_once()
    assert settled.kind == "feed" and settled.unsettled == [] and settled.conflicts == 2
    assert h.local_files() == {"/other.md": "o\n", "/x": "the store's file\n"}
    kept = {c.path: read_copy(c.copy) for c in settled.conflict_copies}
    assert kept == {"/x/a.md": "a\n", "/x/b/c.md": "c\n"}
    assert all(c.why and "other shape" in c.why for c in settled.conflict_copies)
    after = await h.sync_once()
    assert (after.pushed, after.unsettled, after.conflicts) == (0, [], 0)
    assert _store_paths(h) == ["/other.md", "/x"]


async def test_a_local_file_where_the_store_has_a_directory_settles_to_the_store_shape(
    h: Harness,
) -> None:
    await synced(h, {"/other.md": "o\n"})
    h.write("/x", "mine\n")
    h.fake.add("/x/a.md", "the store's\n")
    assert (await h.sync.run_pass(kind="push")).unsettled == ["/x"]
    settled = await h.sync_once()
    assert settled.unsettled == [] and settled.conflicts == 1
    assert [read_copy(c.copy) for c in settled.conflict_copies] == ["mine\n"]
    assert h.local_files() == {"/other.md": "o\n", "/x/a.md": "the store's\n"}
    assert (await h.sync_once()).pushed == 0
    assert _store_paths(h) == ["/other.md", "/x/a.md"]


async def test_memfs_sync_settles_a_taken_path_before_it_answers(h: Harness) -> None:
    """`sync_now` (what `memfs sync` waits for) runs the pass that settles an upload
    whose path another mount took a moment before it, and reports both as one."""
    await synced(h, {"/other.md": "o\n"})

    def another_mount_first(op: str, _mid: str | None, body: dict[str, Any] | None) -> None:
        if op == "create" and body is not None and body.get("path") == "/x":
            h.fake.before_write = None
            h.fake.add("/x/a.md", "the store's\n")

    h.fake.before_write = another_mount_first
    h.write("/x", "mine\n")
    async with running(h):
        result = await h.sync.sync_now()
    assert result.unsettled == [] and result.conflicts == 1 and result.outcome == "ok"
    assert [read_copy(c.copy) for c in result.conflict_copies] == ["mine\n"]
    assert h.local_files() == {"/other.md": "o\n", "/x/a.md": "the store's\n"}


def _store_paths(h: Harness) -> list[str]:
    return sorted(m["path"] for m in h.fake.memories.values())


async def test_a_redacted_version_in_the_feed_is_passed_over_for_the_newest(h: Harness) -> None:
    """Issue 36, the feed: the store redacts only versions that are no memory's head
    (spec §5), so a redacted version in the window is an older one of a memory whose
    newest version the feed also reads: the pass stays a feed pass and lands the newest."""
    ids = await synced(h, {"/a.md": "A1"})
    h.fake.edit(ids["/a.md"], content="A2")
    h.fake.edit(ids["/a.md"], content="A3")
    versions, _ = h.fake.db.list_versions(
        h.fake.store_id,
        memory_id=ids["/a.md"],
        operation=None,
        actor_filters=[],
        created_gte=None,
        created_lte=None,
        limit=10,
        page=None,
        full=False,
    )
    older = versions[1]  # newest first: A3, then A2
    redacted = h.fake.db.redact_version(h.fake.store_id, older["id"], OTHER_CLIENT)
    assert redacted["redacted_at"] is not None and redacted["path"] is None
    result = await h.sync_once()
    assert result.kind == "feed" and h.read("/a.md") == "A3"


async def test_the_echo_of_an_own_upload_moves_the_cursor_without_a_feed_read(
    tmp_path: Path, autojump_clock: trio.testing.MockClock, trio_clock_time: None
) -> None:
    """Issue 36: a local change cost its upload, the watch's answer and a feed read
    ECHO_DEFER later (3 requests; the target is 2). The watch now names the versions
    after the head it waited on; when they are all this mount's own uploads the cursor
    moves there with no read. Another writer's version among them still owes the feed."""
    h = Harness(tmp_path, interval=15.0)
    try:
        ids = await synced(h, {"/log.md": "start\n", "/other.md": "x\n"})
        async with running(h):
            await trio.sleep(5)  # the start's pass; the watch is open
            assert h.sync.listener.mode == "watch"
            reads = len(h.fake.ops("versions"))
            own: list[str | None] = []
            for n in range(3):
                node = h.write("/log.md", f"start\nline {n}\n", keep_open=True)
                h.state.closed(node, writing=True)
                await trio.sleep(2 + ECHO_DEFER)
                assert h.fake.by_path()["/log.md"] == f"start\nline {n}\n"
                assert h.sync._cursor is not None
                own.append(h.fake.db.head(h.fake.store_id))
                assert h.sync._cursor.head == own[-1]
                # our versions are applied: the next feed read passes over them
                assert set(own) <= set(h.sync._cursor.seen)
            assert len(h.fake.ops("versions")) == reads  # no feed read, no probe
            assert len(h.fake.writes()) == 3
            # Another writer's change arrives by the feed at once, as before.
            h.fake.edit(ids["/other.md"], content="y\n")
            await trio.sleep(2)
            assert h.read("/other.md") == "y\n"
            assert len(h.fake.ops("versions")) > reads  # (twice here: the mock clock
            # puts the news at the very time its pass starts, which counts as during it)

            # Ours and another's between two answers: the echo is not whole; the feed
            # pass it owes brings the other's.
            def race(op: str, mid: str | None, body: Any) -> None:
                h.fake.before_write = None
                h.fake.edit(ids["/other.md"], content="z\n")

            h.fake.before_write = race
            node = h.write("/log.md", "start\nlast\n", keep_open=True)
            h.state.closed(node, writing=True)
            await trio.sleep(2 + ECHO_DEFER)
            assert h.read("/other.md") == "z\n"
            assert h.fake.by_path()["/log.md"] == "start\nlast\n"
    finally:
        await h.aclose()


async def test_a_pull_waits_while_its_file_is_being_rewritten(h: Harness) -> None:
    """Issue 36, race 1: vim rewrites a file in place (O_TRUNC, then write). A pull that
    came between the two merged the half-written (empty) file with the store's version:
    a conflict, the store won, and the save went to a copy or was written over. Now a
    pull onto a file truncated by a writer still open waits; after the close it merges."""
    ids = await synced(h, {"/n.md": "one\ntwo\n"})
    node = h.node("/n.md")
    h.state.opened(node, writing=True)
    h.state.truncate(node, 0)  # vim's O_TRUNC; its write has not come yet
    h.fake.edit(ids["/n.md"], content="ONE\ntwo\n")
    result = await h.sync_once()
    assert result.conflicts == 0 and h.read("/n.md") == ""
    h.state.write(node, 0, b"one\ntwo\nthree\n")
    h.state.closed(node, writing=True)
    for _ in range(3):
        await h.sync_once()
    assert h.fake.by_path()["/n.md"] == "ONE\ntwo\nthree\n"
    assert h.read("/n.md") == "ONE\ntwo\nthree\n"
    assert h.sync.conflict_copies == []


async def test_a_lost_race_waits_while_its_file_is_being_rewritten(h: Harness) -> None:
    """The same during an upload: the store answers 409 (another writer came first)
    while vim has truncated the file again. The retrieved winner is not merged with the
    half-written file (before: store wins, "the local edit loses"); the pass after the
    close merges."""
    ids = await synced(h, {"/n.md": "one\ntwo\n"})
    node = h.write("/n.md", "one\ntwo\nsaved 0\n")

    def race(op: str, mid: str | None, body: Any) -> None:
        h.fake.before_write = None
        h.fake.edit(ids["/n.md"], content="ONE\ntwo\n")
        h.state.opened(node, writing=True)
        h.state.truncate(node, 0)

    h.fake.before_write = race
    result = await h.sync_once()
    assert result.conflicts == 0 and h.sync.conflict_copies == []
    h.state.write(node, 0, b"one\ntwo\nsaved 0\nsaved 1\n")
    h.state.closed(node, writing=True)
    for _ in range(3):
        await h.sync_once()
    assert h.fake.by_path()["/n.md"] == "ONE\ntwo\nsaved 0\nsaved 1\n"
    assert h.read("/n.md") == "ONE\ntwo\nsaved 0\nsaved 1\n"


async def test_the_echo_of_an_own_delete_moves_the_cursor_without_a_feed_read(
    tmp_path: Path, autojump_clock: trio.testing.MockClock, trio_clock_time: None
) -> None:
    """A delete's answer names no version, so its echo looked like another writer's
    change: every local delete cost a feed read 1 s later (3 requests, and a pass that
    took the next slot of push soon). The watch names each version's memory and
    operation; a delete of a memory this mount deleted is its own echo."""
    h = Harness(tmp_path, interval=15.0)
    try:
        await synced(h, {"/a.md": "a\n", "/b.md": "b\n", "/c.md": "c\n"})
        async with running(h):
            await trio.sleep(5)
            assert h.sync.listener.mode == "watch"
            reads = len(h.fake.ops("versions"))
            h.unlink("/a.md")
            await trio.sleep(2 + ECHO_DEFER)
            assert "/a.md" not in h.fake.by_path()
            node = h.write("/b.md", "b2\n", keep_open=True)
            h.state.closed(node, writing=True)
            h.unlink("/c.md")  # an update and a delete in one push: both echoes ours
            await trio.sleep(2 + ECHO_DEFER)
            assert h.fake.by_path() == {"/b.md": "b2\n"}
            assert len(h.fake.ops("versions")) == reads
            assert h.sync._cursor is not None
            assert h.sync._cursor.head == h.fake.db.head(h.fake.store_id)
    finally:
        await h.aclose()
