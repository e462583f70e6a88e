"""The two `StoreSync` verbs the SDK worker adapter (memfs/worker/engine.py) adds.

`flush_writes` is the worker's push-only flush: edits go out, deletes wait.
`restore_missing` runs after a stopped tool call: what it left missing comes back from
the store instead of being deleted there.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import trio

from memfs.errors import StoreAuthError, StoreUnavailable
from tests.support.syncharness import Harness, read_copy, running, sha, synced


@pytest.fixture
async def h(tmp_path: Path) -> AsyncIterator[Harness]:
    harness = Harness(tmp_path)
    yield harness
    await harness.aclose()


async def test_flush_writes_pushes_edits_and_sends_no_delete(h: Harness) -> None:
    await synced(h, {"/a.md": "a", "/b.md": "b"})
    async with running(h):
        h.write("/a.md", "a2")
        h.write("/new.md", "n")
        h.unlink("/b.md")
        result = await h.sync.flush_writes()
        assert result.outcome == "ok"
        assert h.fake.by_path() == {"/a.md": "a2", "/b.md": "b", "/new.md": "n"}
        assert h.fake.ops("delete") == []
        assert h.sync.deletions == "enabled"  # only suspended for that pass
        assert len(h.state.tombstones) == 1  # the delete waits in the journal
        await h.sync.sync_now()  # a normal pass sends it
    assert h.fake.by_path() == {"/a.md": "a2", "/new.md": "n"}


async def test_restore_missing_brings_back_what_a_stopped_call_moved_away(h: Harness) -> None:
    ids = await synced(h, {"/gone.md": "g", "/moved.md": "m", "/saved.md": "s1", "/stay.md": "x"})
    async with running(h):
        h.unlink("/gone.md")  # moved out of the mount
        h.rename("/moved.md", "/moved.md.bak")  # moved inside it, not put back
        h.unlink("/saved.md")  # a save in place: delete, write anew
        h.write("/saved.md", "s2")
        assert await h.sync.restore_missing() == 2
        await h.sync.sync_now()
        await h.sync.fetcher.fetch_all_missing()
    assert h.local_files() == {
        "/gone.md": "g",
        "/moved.md": "m",
        "/moved.md.bak": "m",
        "/saved.md": "s2",
        "/stay.md": "x",
    }
    assert h.fake.by_path() == {
        "/gone.md": "g",
        "/moved.md": "m",
        "/moved.md.bak": "m",
        "/saved.md": "s2",
        "/stay.md": "x",
    }
    assert h.fake.ops("delete") == []
    # The memories keep their ids; the copy is a new memory; the save kept its memory.
    assert h.fake.id_of("/gone.md") == ids["/gone.md"]
    assert h.fake.id_of("/moved.md") == ids["/moved.md"]
    assert h.fake.id_of("/saved.md") == ids["/saved.md"]
    assert h.fake.id_of("/moved.md.bak") not in ids.values()


async def test_restore_missing_with_nothing_missing_changes_nothing(h: Harness) -> None:
    await synced(h, {"/a.md": "a"})
    async with running(h):
        h.write("/a.md", "edited")
        assert await h.sync.restore_missing() == 0
        await h.sync.sync_now()
    assert h.fake.by_path() == {"/a.md": "edited"}


async def test_overlapping_flushes_leave_deletes_on(h: Harness) -> None:
    """Two push-only flushes at once: when both are done, deletes go out again."""
    await synced(h, {"/a.md": "a", "/b.md": "b"})
    async with running(h):
        h.unlink("/b.md")
        async with trio.open_nursery() as nursery:
            nursery.start_soon(h.sync.flush_writes)
            nursery.start_soon(h.sync.flush_writes)
        assert h.fake.ops("delete") == []
        assert h.sync.deletions == "enabled"
        await h.sync.sync_now()
    assert h.fake.by_path() == {"/a.md": "a"}


async def test_a_renamed_file_whose_content_never_arrived_follows_a_remote_delete(
    h: Harness,
) -> None:
    """Nothing of it is local but its name: the store's delete wins, nothing stays stuck
    (before: its identity was forgotten and it waited for content forever, unpushed)."""
    h.fake.add("/a.md", "alpha")
    h.fake.add("/keep.md", "k")
    await h.start()  # listed; contents not fetched
    h.rename("/a.md", "/renamed.md")
    h.fake.remove(h.fake.id_of("/a.md"))
    result = await h.sync_once()
    assert result.outcome == "ok"
    assert not h.exists("/renamed.md") and not h.exists("/a.md")
    assert h.fake.by_path() == {"/keep.md": "k"}
    assert [n.store_path() for n in h.state.walk_files() if n.dirty] == []


async def test_a_first_pass_that_cannot_reach_the_store_raises_the_cause(tmp_path: Path) -> None:
    """Start-up maps StoreUnavailable to exit 3 and StoreAuthError to exit 2: the first
    pass must raise the cause itself, not a plain StoreError."""
    for status, etype, expected in (
        (503, "overloaded_error", StoreUnavailable),
        (401, "authentication_error", StoreAuthError),
    ):
        h = Harness(tmp_path / str(status))
        try:
            h.fake.add("/a.md", "a")
            h.fake.fail("list", status, etype, times=10)
            with pytest.raises(expected):
                await h.start()
        finally:
            await h.aclose()


# -- push_path: one file now, and what became of it (`memfs sync FILE`, `write_file`) ----


async def test_push_path_answers_with_the_version_the_store_made(h: Harness) -> None:
    await synced(h, {"/a.md": "a"})
    async with running(h):
        h.write("/a.md", "a2")
        h.write("/new.md", "n")
        edited = await h.sync.push_path("/a.md", sha=sha("a2"))
        created = await h.sync.push_path("/new.md")
        again = await h.sync.push_path("/new.md")
    assert (edited.outcome, created.outcome, again.outcome) == ("pushed", "pushed", "unchanged")
    assert edited.version and created.version and edited.version != created.version
    assert h.fake.by_path() == {"/a.md": "a2", "/new.md": "n"}


async def test_push_path_without_merge_lets_the_store_win_a_race(h: Harness) -> None:
    """The worker's write_file: the SDK answers another session's change with a 409; the
    file becomes the store's version, the local bytes a conflict copy. With merge (the
    default, `memfs sync FILE`) the two different lines merge."""
    await synced(h, {"/a.md": "1\n2\n3\n", "/b.md": "1\n2\n3\n"})
    async with running(h):
        h.fake.edit(h.fake.id_of("/a.md"), content="1\n2\n3\nremote\n")
        h.fake.edit(h.fake.id_of("/b.md"), content="1\n2\n3\nremote\n")
        h.write("/a.md", "local\n1\n2\n3\n")
        h.write("/b.md", "local\n1\n2\n3\n")
        lost = await h.sync.push_path("/a.md", merge=False, sha=sha("local\n1\n2\n3\n"))
        merged = await h.sync.push_path("/b.md")
    assert lost.outcome == "conflict" and lost.copy is not None
    assert read_copy(lost.copy) == "local\n1\n2\n3\n"
    assert h.read("/a.md") == "1\n2\n3\nremote\n"
    assert merged.outcome == "pushed"
    assert h.fake.by_path() == {"/a.md": "1\n2\n3\nremote\n", "/b.md": "local\n1\n2\n3\nremote\n"}


async def test_push_path_says_why_it_did_not_push(h: Harness) -> None:
    await synced(h, {"/a.md": "a"})
    async with running(h):
        h.write("/a.md", "changed again")
        changed = await h.sync.push_path("/a.md", sha=sha("what the caller wrote"))
        missing = await h.sync.push_path("/nothing.md")
        h.write("/full.md", "f")
        h.fake.fail("create", 409, "invalid_request_error", message="the memory store is full")
        held = await h.sync.push_path("/full.md")
        h.fake.fail("update", 503, "overloaded_error", times=20)
        down = await h.sync.push_path("/a.md")
    assert changed.outcome == "changed" and missing.outcome == "missing"
    assert held.outcome == "refused" and "full" in held.why
    assert down.outcome == "unconfirmed"
    assert h.fake.by_path() == {"/a.md": "a"}  # nothing sent that was not asked for
