"""Handler-level checks of issue 12's refusals: NAME_MAX and aliases, refused writes,
local-only files (no kernel; tests/mount/ has the same through real tools)."""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pyfuse3
import pytest

from memfs.paths import MAX_CONTENT_BYTES, NAME_MAX, local_name
from tests.support.fsharness import CTX, O_WR, Harness, fails

ROOT = pyfuse3.ROOT_INODE


@pytest.fixture
def h(tmp_path: Path) -> Iterator[Harness]:
    harness = Harness(tmp_path)
    yield harness
    harness.close()


def test_local_name_is_stable_short_and_distinct() -> None:
    assert local_name("a.md") == "a.md"
    assert local_name("x" * 255) == "x" * 255
    names = {local_name("x" * n + ".md") for n in range(253, 300)}
    assert len(names) == 300 - 253
    assert all(len(n.encode()) <= NAME_MAX and n.endswith(".md") for n in names)
    multi = local_name("é" * 200)
    assert len(multi.encode()) <= NAME_MAX and multi.startswith("é")
    assert local_name("y" * 1000 + ".md") == local_name("y" * 1000 + ".md")


async def test_too_long_names_are_enametoolong_before_eperm_and_erofs(h: Harness) -> None:
    long = b"n" * 256
    await h.write_file("/a.md", b"a")
    a = await h.ino("/a.md")
    await fails(errno.ENAMETOOLONG, h.fs.lookup(ROOT, long, CTX))
    await fails(errno.ENAMETOOLONG, h.fs.create(ROOT, long, stat.S_IFREG | 0o644, O_WR, CTX))
    await fails(errno.ENAMETOOLONG, h.fs.mknod(ROOT, long, stat.S_IFIFO | 0o644, 0, CTX))
    await fails(errno.ENAMETOOLONG, h.fs.mkdir(ROOT, long, stat.S_IFDIR | 0o755, CTX))
    await fails(errno.ENAMETOOLONG, h.fs.rename(ROOT, b"a.md", ROOT, long, 0, CTX))
    await fails(errno.ENAMETOOLONG, h.fs.symlink(ROOT, long, b"a.md", CTX))
    await fails(errno.ENAMETOOLONG, h.fs.link(a, ROOT, long, CTX))
    await fails(errno.ENAMETOOLONG, h.fs.unlink(ROOT, long, CTX))
    await fails(errno.ENAMETOOLONG, h.fs.rmdir(ROOT, long, CTX))
    await fails(errno.EPERM, h.fs.symlink(ROOT, b"n" * 255, b"a.md", CTX))


async def test_a_long_remote_name_is_reachable_by_its_alias(h: Harness) -> None:
    long = "L" * 300 + ".md"
    h.seed("/" + long, b"long\n", "mem_long")
    alias = local_name(long)
    assert await h.read_file("/" + alias) == b"long\n"
    await fails(errno.EEXIST, h.fs.mkdir(ROOT, alias.encode(), stat.S_IFDIR | 0o755, CTX))
    await h.rename("/" + alias, "/short.md")
    assert h.node("/short.md").memory_id == "mem_long"


async def test_a_refused_write_holds_the_file_back_until_a_write_succeeds(h: Harness) -> None:
    parent, name = await h.parent("/big.md")
    fi, _ = await h.fs.create(parent, name, stat.S_IFREG | 0o644, O_WR, CTX)
    await fails(errno.EFBIG, h.fs.write(fi.fh, 0, b"x" * (MAX_CONTENT_BYTES + 1)))
    await h.fs.release(fi.fh)
    node = h.node("/big.md")
    assert node.state_name() == "refused" and "File too large" in (node.refused_why or "")
    h.reload()  # the refusal is journaled
    node = h.node("/big.md")
    assert node.state_name() == "refused"
    fi = await h.fs.open(node.ino, O_WR | os.O_TRUNC, CTX)  # truncate to the same ""
    await h.fs.release(fi.fh)
    assert node.state_name() == "dirty"


async def test_local_only_files_take_any_bytes_up_to_a_mebibyte(h: Harness) -> None:
    h.state.local_only = lambda name: name.endswith(".swp")
    await h.write_file("/.a.md.swp", b"\xff\xfe binary" * 20_000)  # 200 KB, not UTF-8
    node = h.node("/.a.md.swp")
    assert node.state_name() == "dirty" and node.refused_sha is None
    fi, _ = await h.fs.create(ROOT, b"b.md", stat.S_IFREG | 0o644, O_WR, CTX)
    await fails(errno.EILSEQ, h.fs.write(fi.fh, 0, b"\xff\xfe binary"))  # a synced name
    await h.fs.flush(fi.fh)  # the refused write changed nothing: nothing to refuse here
    await h.fs.release(fi.fh)


async def test_a_refused_append_to_a_clean_file_holds_nothing_back(h: Harness) -> None:
    node = h.seed("/clean.md", b"synced\n", "mem_clean")
    fi = await h.fs.open(node.ino, O_WR | os.O_APPEND, CTX)
    await fails(errno.EFBIG, h.fs.write(fi.fh, 0, b"x" * MAX_CONTENT_BYTES))
    await h.fs.release(fi.fh)
    assert node.state_name() == "clean" and node.refused_sha is None
