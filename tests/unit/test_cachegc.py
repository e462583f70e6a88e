"""The object-cache collector (memfs/state/cachegc.py) over a real CacheDir and StoreState."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from memfs.paths import sha256_hex
from memfs.state import cachegc
from tests.support.fsharness import CTX, O_RD, Harness


@pytest.fixture
def h(tmp_path: Path) -> Iterator[Harness]:
    harness = Harness(tmp_path)
    try:
        yield harness
    finally:
        harness.close()


def collect(h: Harness, max_clean_bytes: int | None = None) -> cachegc.Collected:
    return cachegc.collect(h.state, h.state.objects.scan(), max_clean_bytes=max_clean_bytes)


def on_disk(h: Harness) -> set[str]:
    return {sha for sha, _, _ in h.state.objects.scan()}


def test_garbage_goes_and_everything_named_stays(h: Harness) -> None:
    async def main() -> None:
        clean = h.seed("/clean.md", b"clean\n", "mem_clean")
        old = h.state.objects.put(b"replaced long ago\n")  # named by nothing
        gone = h.seed("/gone.md", b"unlinked but open\n", "mem_gone")
        tomb = h.seed("/tomb.md", b"deleted locally\n", "mem_tomb")
        fi = await h.fs.open(gone.ino, O_RD, CTX)  # keeps its object alive
        await h.unlink("/gone.md")
        await h.unlink("/tomb.md")  # a tombstone: base kept
        assert gone.entry_id is not None  # a tombstone row with path NULL
        # unlinked, open, and no row at all: only the live node names it
        orphan = h.seed("/orphan.md", b"open orphan\n", "mem_orphan")
        fo = await h.fs.open(orphan.ino, O_RD, CTX)
        h.state.remove_file(orphan, local=False)
        assert orphan.entry_id is None
        await h.write_file("/dirty.md", b"only in the journal\n")
        result = collect(h)
        assert result.removed == 1 and result.removed_bytes == len(b"replaced long ago\n")
        assert result.evicted == 0
        assert old not in on_disk(h)
        assert {clean.sha, gone.sha, tomb.base_sha, orphan.sha} <= on_disk(h)
        assert await h.fs.read(fo.fh, 0, 100) == b"open orphan\n"
        assert await h.fs.read(fi.fh, 0, 100) == b"unlinked but open\n"
        await h.fs.release(fo.fh)
        await h.fs.release(fi.fh)
        # once closed, the orphan's object is garbage; the tombstones' are not
        result = collect(h)
        assert result.removed == 1 and orphan.sha not in on_disk(h)
        assert {gone.sha, tomb.base_sha} <= on_disk(h)
        assert await h.read_file("/dirty.md") == b"only in the journal\n"

    trio.run(main)


def test_max_size_evicts_clean_content_only_and_keeps_sizes(h: Harness) -> None:
    async def main() -> None:
        a = h.seed("/a.md", b"a" * 5000, "mem_a")
        b = h.seed("/b.md", b"b" * 5000, "mem_b")
        c = h.seed("/c.md", b"c" * 5000, "mem_c")
        os.utime(h.state.objects._path(a.sha or ""), (1, 1))  # the least recently read
        fc = await h.fs.open(c.ino, O_RD, CTX)  # open: never evicted
        await h.write_file("/dirty.md", b"d" * 5000)  # dirty: in the journal
        result = collect(h, 10_000)
        assert result.evicted == 1 and result.evicted_bytes == 5000
        assert on_disk(h) == {b.sha, c.sha}
        result = collect(h, 0)
        assert on_disk(h) == {c.sha}  # c is open
        await h.fs.release(fc.fh)
        assert sha256_hex(b"a" * 5000) in h.state.objects.evicted
        # a restart still knows the evicted sizes (st_size) and the dirty bytes
        h.reload()
        assert h.node("/a.md").size == 5000 and h.node("/b.md").size == 5000
        assert await h.read_file("/dirty.md") == b"d" * 5000
        assert h.state.content(h.node("/a.md")) is None  # fetched again on demand
        # content that comes back is no longer "evicted"; unnamed evictions are forgotten
        h.state.objects.put(b"a" * 5000)
        assert a.sha not in h.state.objects.evicted

    trio.run(main)
