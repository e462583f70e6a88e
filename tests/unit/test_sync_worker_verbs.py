"""The two `StoreSync` verbs the SDK worker adapter (memfs/worker.py) adds.

`flush_writes` is the worker's push-only flush: edits go out, deletes wait.
`restore_missing` runs after a stopped tool call: what it left missing comes back from
the store instead of being deleted there.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.unit.test_sync_unit import Harness, running, synced


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
        assert len(h.state.tombstones) == 1   # the delete waits in the journal
        await h.sync.sync_now()               # a normal pass sends it
    assert h.fake.by_path() == {"/a.md": "a2", "/new.md": "n"}


async def test_restore_missing_brings_back_what_a_stopped_call_moved_away(
        h: Harness) -> None:
    ids = await synced(h, {"/gone.md": "g", "/moved.md": "m", "/saved.md": "s1",
                           "/stay.md": "x"})
    async with running(h):
        h.unlink("/gone.md")                    # moved out of the mount
        h.rename("/moved.md", "/moved.md.bak")  # moved inside it, not put back
        h.unlink("/saved.md")                   # a save in place: delete, write anew
        h.write("/saved.md", "s2")
        assert await h.sync.restore_missing() == 2
        await h.sync.sync_now()
        await h.sync.fetcher.fetch_all_missing()
    assert h.local_files() == {"/gone.md": "g", "/moved.md": "m", "/moved.md.bak": "m",
                               "/saved.md": "s2", "/stay.md": "x"}
    assert h.fake.by_path() == {"/gone.md": "g", "/moved.md": "m", "/moved.md.bak": "m",
                                "/saved.md": "s2", "/stay.md": "x"}
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
