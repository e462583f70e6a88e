"""Round trips the kernel no longer makes, and what writers keep: FOPEN_NOFLUSH on
read-only opens when the installed pyfuse3 has it (scripts/install builds it with
scripts/pyfuse3-noflush.patch), and today's behaviour, with one log line, when it is a
stock build. Passes on both builds."""

from __future__ import annotations

import errno
import os

import pytest

from tests.support.mount import MountProcess

pytestmark = pytest.mark.fuse

STOCK_LINE = "pyfuse3 has no FileInfo.noflush (a stock build)"


def delta(before: dict[str, int], after: dict[str, int], key: str) -> int:
    return after.get(key, 0) - before.get(key, 0)


def test_read_only_close_sends_no_flush_when_pyfuse3_can(mount: MountProcess) -> None:
    f = mount.mountpoint / "note.md"
    f.write_text("hello\n")
    assert f.read_text() == "hello\n"  # warm: the page cache holds it
    levers = mount.mount_status()["pyfuse3"]
    before = mount.fuse_requests()
    for _ in range(3):
        assert f.read_text() == "hello\n"
    after = mount.fuse_requests()
    assert delta(before, after, "open") == 3 and delta(before, after, "release") == 3
    if levers["noflush"]:
        assert delta(before, after, "flush") == 0
        assert STOCK_LINE not in mount.log()
    else:
        assert delta(before, after, "flush") == 3
        assert mount.log().count(STOCK_LINE) == 1


def test_writers_still_flush_and_get_eilseq_at_close(mount: MountProcess) -> None:
    f = mount.mountpoint / "bin.md"
    before = mount.fuse_requests()
    fd = os.open(f, os.O_CREAT | os.O_WRONLY, 0o644)
    os.write(fd, b"\xff\xfe not utf-8\n")
    with pytest.raises(OSError) as info:
        os.close(fd)
    assert info.value.errno == errno.EILSEQ
    fd = os.open(f, os.O_RDWR)  # read-write is a writer too: its close still checks
    os.write(fd, b"\xff")
    with pytest.raises(OSError) as info:
        os.close(fd)
    assert info.value.errno == errno.EILSEQ
    assert delta(before, mount.fuse_requests(), "flush") >= 2
    assert f.read_bytes().startswith(b"\xff")  # a reader of refused bytes is fine
    os.truncate(f, 0)
    f.write_text("fixed\n")
    assert f.read_text() == "fixed\n"
