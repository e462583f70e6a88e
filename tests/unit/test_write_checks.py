"""What `write(2)` decides without a kernel: EILSEQ as the bytes arrive
(`memfs/state/utf8.py`), and reading the close watch's events (`memfs/mount/closewatch.py`)."""

from __future__ import annotations

import itertools
import os
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memfs.mount import closewatch
from memfs.state.utf8 import breaks_utf8

E = "é".encode()
SUN = "日".encode()


@pytest.mark.parametrize(
    ("data", "offset", "buf", "breaks"),
    [
        (b"", 0, b"plain", False),
        (b"", 0, b"\xff", True),
        (b"ab", 2, E, False),
        (b"ab", 2, E[:1], False),  # cut at the end of the write: not invalid yet
        (b"ab" + E[:1], 3, E[1:], False),  # ... and finished by the next
        (b"ab" + SUN[:2], 4, b"x", True),  # ... or broken by it
        (b"ab", 2, E[1:], True),  # a continuation with nothing to continue
        (b"", 0, E[1:], True),
        (b"\0\0\0\0", 2, E[1:] + b"ok", False),  # after a hole: its lead may come later
        (b"ab", 6, E[1:], False),  # past the end, a hole too
        (b"\0\0\0\0", 2, E[1:] + b"\xff", True),
        (b"a" + SUN, 4, b"a", False),
        (None, 0, E, False),
    ],
)
def test_what_a_write_breaks(data: bytes | None, offset: int, buf: bytes, breaks: bool) -> None:
    assert breaks_utf8(data, offset, buf) is breaks


@settings(max_examples=300, deadline=None)
@given(text=st.text(max_size=40), cuts=st.lists(st.integers(0, 200), max_size=6))
def test_valid_text_written_in_any_pieces_is_never_refused(text: str, cuts: list[int]) -> None:
    raw = text.encode()
    points = sorted({0, len(raw), *(c % (len(raw) + 1) for c in cuts)})
    data = bytearray()
    for start, end in itertools.pairwise(points):
        assert not breaks_utf8(data, start, raw[start:end])
        data[start:end] = raw[start:end]
    assert bytes(data) == raw


@settings(max_examples=300, deadline=None)
@given(before=st.binary(max_size=8), buf=st.binary(min_size=1, max_size=12))
def test_an_append_is_refused_exactly_when_no_continuation_can_mend_it(
    before: bytes, buf: bytes
) -> None:
    """At the end of the file: refused iff the bytes before plus the write cannot be the
    start of valid UTF-8 (whatever the bytes before were, only the write's part counts)."""
    try:
        before.decode()
    except UnicodeDecodeError:
        return  # already broken before: not this write's doing, not this rule's case
    whole = before + buf
    tails = [b""] + [bytes([c]) + b"\x80" * k for c in range(0x80, 0xC0) for k in range(3)]
    mendable = any(_valid(whole + tail) for tail in tails)
    assert breaks_utf8(before, len(before), buf) is (not mendable)


def _valid(raw: bytes) -> bool:
    try:
        raw.decode()
    except UnicodeDecodeError:
        return False
    return True


def test_the_close_watch_reads_events_and_inodes() -> None:
    event = struct.Struct("=IBBHQii")
    buf = event.pack(24, 3, 0, 24, closewatch.FAN_CLOSE_WRITE, 7, 100) + event.pack(
        24, 3, 0, 24, closewatch.FAN_Q_OVERFLOW, -1, 0
    )
    assert closewatch.parse(buf) == [
        (closewatch.FAN_CLOSE_WRITE, 7, 100),
        (closewatch.FAN_Q_OVERFLOW, -1, 0),
    ]
    assert closewatch.parse(buf[:30]) == [(closewatch.FAN_CLOSE_WRITE, 7, 100)]
    r, w = os.pipe()
    try:
        assert closewatch.inode_of(r) == os.fstat(r).st_ino  # from procfs, no fstat
    finally:
        os.close(r)
        os.close(w)
    assert closewatch.inode_of(10_000) is None
