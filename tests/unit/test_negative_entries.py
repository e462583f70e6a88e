"""Negative dentries: what `lookup` answers for a missing name, and what memfs must
remember so that a name appearing behind the kernel's back is invalidated."""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pyfuse3
import pytest

import memfs.state.tree
from memfs.mount.fs import NEGATIVE_TIMEOUT, MemFs
from memfs.state.tree import NegativeEntries
from tests.support.fsharness import CTX, O_WR, Harness, fails

ROOT = pyfuse3.ROOT_INODE


@pytest.fixture
def h(tmp_path: Path) -> Iterator[Harness]:
    harness = Harness(tmp_path)
    harness.fs = MemFs(harness.state, harness.waiter, content_timeout=0.3)  # real default
    yield harness
    harness.close()


async def test_missing_name_answers_inode_0_with_a_timeout(h: Harness) -> None:
    a = await h.fs.lookup(ROOT, b"missing.md", CTX)
    assert a.st_ino == 0 and a.entry_timeout == NEGATIVE_TIMEOUT
    assert (await h.fs.lookup(ROOT, b"\xff", CTX)).st_ino == 0  # never a valid name
    assert len(h.tree.negatives) == 2
    await fails(errno.ENAMETOOLONG, h.fs.lookup(ROOT, b"x" * 256, CTX))


async def test_kernel_creates_need_no_invalidation(h: Harness) -> None:
    """create, mkdir and rename through the kernel turn its own dentry positive."""
    for name in (b"f.md", b"d", b"g.md"):
        assert (await h.fs.lookup(ROOT, name, CTX)).st_ino == 0
    fi, _ = await h.fs.create(ROOT, b"f.md", stat.S_IFREG | 0o644, O_WR, CTX)
    await h.fs.release(fi.fh)
    await h.fs.mkdir(ROOT, b"d", 0o755, CTX)
    await h.fs.rename(ROOT, b"f.md", ROOT, b"g.md", 0, CTX)
    assert h.tree.negatives.take_stale() == []
    assert len(h.tree.negatives) == 0
    assert (await h.fs.lookup(ROOT, b"g.md", CTX)).st_ino != 0


async def test_a_name_made_behind_the_kernel_is_stale(h: Harness) -> None:
    assert (await h.fs.lookup(ROOT, b"notes", CTX)).st_ino == 0
    h.seed("/notes/a.md", b"remote\n", "mem_a")  # as a pull lands it
    assert h.tree.negatives.take_stale() == [(ROOT, "notes")]
    assert h.tree.negatives.take_stale() == []


async def test_a_failed_create_keeps_the_name_remembered(h: Harness) -> None:
    assert (await h.fs.lookup(ROOT, b"bad\x01.md", CTX)).st_ino == 0
    await fails(errno.EINVAL, h.fs.create(ROOT, b"bad\x01.md", stat.S_IFREG | 0o644, O_WR, CTX))
    assert len(h.tree.negatives) == 1


def test_a_full_table_answers_plain_enoent_until_entries_expire(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    now = [1000.0]
    monkeypatch.setattr(memfs.state.tree.time, "monotonic", lambda: now[0])
    neg = NegativeEntries(limit=2)
    assert neg.answer(1, "a", 10.0) and neg.answer(1, "b", 10.0)
    assert not neg.answer(1, "c", 10.0)  # full: the kernel must not cache "c"
    assert neg.refused == 1
    now[0] += 11.5  # past the kernel's timeout (and the slack)
    assert neg.answer(1, "c", 10.0)
    assert len(neg) == 1
    neg.appeared(1, "a")  # expired: the kernel forgot it already
    assert neg.take_stale() == []


def test_long_names_are_remembered_by_their_alias() -> None:
    from memfs.paths import local_name

    long = "x" * 300 + ".md"
    neg = NegativeEntries()
    assert neg.answer(7, local_name(long), 10.0)
    neg.appeared(7, long)
    assert neg.take_stale() == [(7, local_name(long))]


def test_harness_default_is_plain_enoent(tmp_path: Path) -> None:
    assert Harness(tmp_path).fs.negative_timeout == 0.0
    assert os.path.exists(tmp_path)
