"""The extent log (memfs/state/extents.py): a dirty file's writes are records
(offset, bytes) in `extents.log` after a base in its journal row, and reloading the
journal (what a restart after `kill -9` does) rebuilds exactly the bytes the file held,
whatever mix of writes, truncates, compactions, pushes and reloads came before; a torn
tail is dropped and logged, a kill at any point of a compaction loses nothing, and a
damaged record costs only itself: its file is held back with its last good content
kept, the others replay, and the log is read as a stream."""

from __future__ import annotations

import errno
import logging
import os
import signal
import sqlite3
import struct
import subprocess
import sys
import tempfile
import tracemalloc
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memfs.errors import ConfigError, FsError
from memfs.paths import sha256_hex
from memfs.state import conflicts, extents, journal
from memfs.state.cachedir import CacheDir
from memfs.state.journal import EXTENT_LOG_NAME, Journal
from memfs.state.node import Node
from memfs.state.records import SyncRecords
from memfs.state.store_state import StoreState
from memfs.state.tree import Tree
from memfs.state.utf8 import breaks_utf8

STORE = "memstore_extents"


class Store:
    """One StoreState over a cache directory, reopened from its journal on `reload`."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._open()

    def _open(self) -> None:
        self.cache = CacheDir(self.root, STORE)
        self.state = StoreState(
            Tree(uid=os.getuid(), gid=os.getgid()), STORE, self.cache, read_only=False
        )
        self.state.load_journal()

    def reload(self) -> None:
        self.cache.close()
        self._open()

    def node(self, name: str) -> Node:
        assert self.state.root.children is not None
        return self.state.root.children[name]


@contextmanager
def store(*, log_min: int, log_max: int = extents.LOG_FILE_MAX) -> Iterator[Store]:
    with (
        tempfile.TemporaryDirectory() as tmp,
        mock.patch.object(extents, "LOG_MIN_BYTES", log_min),
        mock.patch.object(extents, "LOG_FILE_MAX", log_max),
    ):
        s = Store(Path(tmp) / "cache")
        try:
            yield s
        finally:
            s.cache.close()


def test_apply_writes_truncates_and_gaps() -> None:
    data = bytearray(b"hello")
    extents.apply(data, 5, b" world")
    extents.apply(data, 0, b"J")
    assert data == b"Jello world"
    extents.apply(data, 13, b"!")  # past the end: the gap reads back as zeros
    assert data == b"Jello world\0\0!"
    extents.apply(data, 4, None)
    assert data == b"Jell"
    extents.apply(data, 6, None)
    assert data == b"Jell\0\0"


OPS = st.lists(
    st.one_of(
        st.tuples(st.just("write"), st.integers(0, 400), st.binary(min_size=0, max_size=60)),
        st.tuples(st.just("truncate"), st.integers(0, 400), st.none()),
        st.tuples(st.just("reload"), st.just(0), st.none()),
        st.tuples(st.just("push"), st.just(0), st.none()),
    ),
    max_size=60,
)


@settings(max_examples=150, deadline=None)
@given(
    ops=OPS,
    log_min=st.sampled_from([0, 100, 64 * 1024]),
    log_max=st.sampled_from([300, 2000, extents.LOG_FILE_MAX]),
)
def test_random_writes_and_truncates_match_a_bytearray_across_reloads(
    ops: list[tuple[str, int, Any]], log_min: int, log_max: int
) -> None:
    with store(log_min=log_min, log_max=log_max) as s:
        s.state.create_file(s.state.root, "f.md", 0o644)
        model = bytearray()
        for op, offset, payload in ops:
            node = s.node("f.md")
            if op == "write":
                try:
                    s.state.write(node, offset, payload)
                except FsError as e:  # invalid UTF-8 as written: nothing of it lands
                    assert e.errno == errno.EILSEQ and breaks_utf8(model, offset, payload)
                else:
                    extents.apply(model, offset, payload)
            elif op == "truncate":
                s.state.truncate(node, offset)
                extents.apply(model, offset, None)
            elif op == "reload":
                mtime = node.mtime_ns
                s.reload()
                assert s.node("f.md").mtime_ns == mtime
            else:  # a push the store accepted: clean, content in the object store
                SyncRecords(s.state).make_clean(node, s.state.objects.put(bytes(model)))
            node = s.node("f.md")
            assert s.state.content(node) == model and node.size == len(model)
        s.reload()
        node = s.node("f.md")
        assert s.state.content(node) == model
        assert node.dirty == (node.sha is None)


def test_small_appends_log_extents_instead_of_rewriting_the_file(tmp_path: Path) -> None:
    s = Store(tmp_path / "cache")
    rewrites: list[int] = []
    update = s.state.journal.update

    def counting(entry_id: int, **fields: Any) -> None:
        if fields.get("data") is not None:
            rewrites.append(len(fields["data"]))
        update(entry_id, **fields)

    s.state.journal.update = counting  # type: ignore[method-assign]
    node = s.state.create_file(s.state.root, "log.md", 0o644)
    for i in range(6000):
        s.state.write(node, node.size, b"line %03d" % (i % 1000))
    # 48,000 bytes of appends: the whole file is rewritten only at compactions (a log
    # outgrowing max(64 KiB, the file)), not once per write.
    assert len(rewrites) <= 6 and sum(rewrites) < 4 * node.size, rewrites
    expected = b"".join(b"line %03d" % (i % 1000) for i in range(6000))
    s.reload()
    assert s.state.content(s.node("log.md")) == expected
    s.cache.close()


def test_a_push_drops_the_log_and_the_next_write_starts_a_new_base(tmp_path: Path) -> None:
    s = Store(tmp_path / "cache")
    node = s.state.create_file(s.state.root, "a.md", 0o644)
    s.state.write(node, 0, b"one")
    assert node.entry_id is not None
    assert s.state.journal.logged(node.entry_id) == extents.cost(b"one")
    SyncRecords(s.state).make_clean(node, s.state.objects.put(b"one"))
    assert s.state.journal.logged(node.entry_id) is None  # no base: content is by sha
    s.state.write(node, 3, b" two")
    assert s.state.journal.logged(node.entry_id) == 0  # a new base, an empty log
    s.reload()
    assert s.state.content(s.node("a.md")) == b"one two" and s.node("a.md").dirty
    s.cache.close()


def test_a_rolled_back_transaction_restores_what_it_knew_of_the_records(
    tmp_path: Path,
) -> None:
    j = Journal(tmp_path / "j.sqlite")
    a = j.insert(path="/a.md", kind="file", mode=0o644, mtime_ns=1, data=b"base", dirty=1)
    j.append(a, 4, b"+", 2)
    try:
        with j.transaction():
            j.update(a, data=None, sha=sha256_hex(b"base+"))
            assert j.logged(a) is None  # no record may join a transaction
            raise RuntimeError("abort")
    except RuntimeError:
        pass
    assert j.logged(a) == extents.cost(b"+")  # the base and its record are back
    assert next(j.rows()).data == b"base+"
    j.close()
    again = Journal(tmp_path / "j.sqlite")
    assert again.logged(a) == 0  # the start folded the record into the base
    assert next(again.rows()).data == b"base+"
    again.delete(a)
    assert again.is_empty() and again.logged(a) is None
    again.close()


def test_replay_applies_the_records_in_order_with_the_last_mtime(tmp_path: Path) -> None:
    j = Journal(tmp_path / "j.sqlite")
    a = j.insert(path="/a.md", kind="file", mode=0o644, mtime_ns=1, data=b"hello", dirty=1)
    b = j.insert(path="/b.md", kind="file", mode=0o644, mtime_ns=1, data=b"", dirty=1)
    j.append(a, 5, b" world", 2)
    j.append(b, 0, b"other", 3)
    j.append(a, 0, b"J", 4)
    j.append(a, 8, None, 5)
    j.update(a, mtime_ns=7)  # a utime after the writes: a record too
    j.close()
    again = Journal(tmp_path / "j.sqlite")
    rows = {r.path: (r.data, r.mtime_ns) for r in again.rows()}
    assert rows == {"/a.md": (b"Jello wo", 7), "/b.md": (b"other", 3)}
    again.close()


# How a power loss leaves the last record: cut short, or its bytes zeros from some
# point on (the file's size written before its data), or zeros after it.
@pytest.mark.parametrize("torn", ["short", "zeros-in-header", "zeros-in-payload", "zeros-after"])
def test_a_torn_tail_is_dropped_logged_and_the_next_record_follows_the_valid_ones(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, torn: str
) -> None:
    j = Journal(tmp_path / "j.sqlite")
    a = j.insert(path="/a.md", kind="file", mode=0o644, mtime_ns=1, data=b"", dirty=1)
    j.append(a, 0, b"kept", 2)
    j.append(a, 4, b" torn", 3)
    j.close()
    log = tmp_path / EXTENT_LOG_NAME
    whole = log.stat().st_size
    last = whole - extents.cost(b" torn")
    if torn == "short":
        os.truncate(log, whole - 2)
    elif torn == "zeros-after":
        with open(log, "ab") as f:
            f.write(bytes(5000))
        last, whole = whole, whole + 5000
    else:
        os.truncate(log, last + (20 if torn == "zeros-in-header" else 50))
        os.truncate(log, whole)
    cut = log.stat().st_size - last
    with caplog.at_level(logging.INFO, "memfs.state"):
        again = Journal(tmp_path / "j.sqlite")
    expected = b"kept torn" if torn == "zeros-after" else b"kept"  # (the record was whole)
    row = next(again.rows())
    assert (row.data, row.refused_why) == (expected, None)  # not damage: nothing held
    said = [r for r in caplog.records if "cut short" in r.getMessage()]
    assert [r.levelno for r in said] == [logging.INFO], caplog.text
    assert f"offset={last} bytes={cut}" in said[0].getMessage()
    assert again.damage is None and list(tmp_path.glob("*.damaged-*")) == []
    assert log.stat().st_size == extents.LOG_HEADER_SIZE  # folded into the base at open
    again.append(a, len(expected), b" next", 4)
    again.close()
    third = Journal(tmp_path / "j.sqlite")
    assert next(third.rows()).data == expected + b" next"
    third.close()


def _spans(log: Path) -> list[tuple[int, int, int]]:
    """(offset, size, entry id) of each record of a log in the current format: magic (2),
    header crc (4), kind (1), payload length (4), entry id (8) at 11, ...; the payload
    after the header; a 4-byte crc at the end."""
    sample = extents.encode(extents.Record(extents.WRITE, 7, 9, 0, 0, b"xy"))
    assert sample[7:11] == (2).to_bytes(4, "little") and sample[11:19] == (7).to_bytes(8, "little")
    buf = log.read_bytes()
    at, spans = extents.LOG_HEADER_SIZE, []
    while at < len(buf):
        size = extents.RECORD_OVERHEAD + int.from_bytes(buf[at + 7 : at + 11], "little")
        spans.append((at, size, int.from_bytes(buf[at + 11 : at + 19], "little")))
        at += size
    return spans


def _flip(log: Path, at: int) -> None:
    with open(log, "r+b") as f:
        f.seek(at)
        byte = f.read(1)
        f.seek(at)
        f.write(bytes([byte[0] ^ 0x10]))


def _appends(s: Store, names: list[str], count: int) -> dict[str, list[bytes]]:
    """`count` lines appended to each file, interleaved, one record each."""
    lines: dict[str, list[bytes]] = {name: [] for name in names}
    for name in names:
        s.state.create_file(s.state.root, name, 0o644)
    for i in range(count):
        for name in names:
            node = s.node(name)
            line = b"%s line %02d\n" % (name.encode(), i)
            s.state.write(node, node.size, line)
            lines[name].append(line)
    return lines


# Where one byte of a record is damaged: its payload (the header checks and names the
# file), its magic, its length, its entry id (the header fails; the crc at its end names
# the file).
@pytest.mark.parametrize("where", [-8, 0, 8, 12])
def test_one_damaged_byte_costs_only_its_record_and_holds_only_its_file(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, where: int
) -> None:
    s = Store(tmp_path / "cache")
    lines = _appends(s, ["a.md", "b.md"], 41)
    a_id, b_id = s.node("a.md").entry_id, s.node("b.md").entry_id
    log = tmp_path / "cache" / EXTENT_LOG_NAME
    spans = [span for span in _spans(log) if span[2] == a_id]
    assert len(spans) == 41  # one record per append
    at, size, _ = spans[20]  # the 21st line of a.md
    s.cache.close()
    before = log.read_bytes()
    _flip(log, at + size + where if where < 0 else at + where)
    damaged = log.read_bytes()
    with caplog.at_level(logging.INFO, "memfs.state"):
        s._open()
    # Every other file's appends replay; the damaged file's other records too.
    b = s.node("b.md")
    assert s.state.content(b) == b"".join(lines["b.md"]) and b.state_name() == "dirty"
    a = s.node("a.md")
    lost = lines["a.md"][20]
    hole = b"\0" * len(lost)
    assert s.state.content(a) == b"".join(lines["a.md"][:20]) + hole + b"".join(lines["a.md"][21:])
    # It is held back from the store, and its last good content is a conflict copy.
    assert a.state_name() == "refused" and a.refused_why == journal.lost_records_why(at, True)
    assert a.conflict is not None
    assert Path(a.conflict).read_bytes() == b"".join(lines["a.md"][:20])
    kept = conflicts.kept_copies(STORE, s.cache.conflicts)
    assert [(k.path, k.copy) for k in kept] == [("/a.md", a.conflict)]
    # The damaged log is kept aside, whole; a new one replaced it.
    aside = list((tmp_path / "cache").glob(EXTENT_LOG_NAME + ".damaged-*"))
    assert [p.read_bytes() for p in aside] == [damaged] and damaged != before
    assert log.stat().st_size == extents.LOG_HEADER_SIZE
    # One warning, naming the offset and the file.
    warned = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warned) == 1, caplog.text
    assert f"offset={at} " in warned[0].getMessage()
    assert "files=/a.md kept=" in warned[0].getMessage()
    # A restart keeps the hold (journaled), and a new write ends it, as any refusal.
    s.reload()
    a = s.node("a.md")
    assert a.state_name() == "refused" and s.node("b.md").state_name() == "dirty"
    s.state.write(a, a.size, b"more\n")
    assert a.state_name() == "dirty"
    assert (s.node("a.md").entry_id, s.node("b.md").entry_id) == (a_id, b_id)
    s.cache.close()


@settings(max_examples=300, deadline=None)
@given(
    sizes=st.lists(st.tuples(st.integers(1, 3), st.integers(0, 40)), min_size=1, max_size=12),
    pick=st.integers(0, 10**9),
    bit=st.integers(0, 7),
)
def test_any_one_flipped_bit_loses_at_most_its_record_and_names_its_file(
    tmp_path_factory: pytest.TempPathFactory, sizes: list[tuple[int, int]], pick: int, bit: int
) -> None:
    records = [
        extents.Record(extents.WRITE, e, seq, 0, seq, bytes([seq]) * n)
        for seq, (e, n) in enumerate(sizes, start=1)
    ]
    encoded = [extents.encode(r) for r in records]
    log = bytearray(extents.log_header(0) + b"".join(encoded))
    at = extents.LOG_HEADER_SIZE + pick % (len(log) - extents.LOG_HEADER_SIZE)
    log[at] ^= 1 << bit
    hit, start = 0, extents.LOG_HEADER_SIZE  # the record holding the flipped byte
    while start + len(encoded[hit]) <= at:
        start += len(encoded[hit])
        hit += 1
    path = tmp_path_factory.mktemp("flip") / "log"
    path.write_bytes(log)
    fd = os.open(path, os.O_RDONLY)
    try:
        _, items = extents.read(fd)
        got = list(items)
    finally:
        os.close(fd)
    read = [r for r in got if isinstance(r, extents.Record)]
    lost = [x for x in got if isinstance(x, extents.Lost)]
    if at >= start + len(encoded[hit]) - 4:  # its end's crc: the record itself is whole
        assert read == records and lost == []
        return
    assert read == records[:hit] + records[hit + 1 :]
    assert len(lost) == 1 and lost[0].offset == start and not lost[0].torn
    bases = {1: 0, 2: 0, 3: 0}
    assert lost[0].owners(bases, range(1, 10)) == {records[hit].entry_id}


def test_a_damaged_record_of_a_file_pushed_or_deleted_since_holds_nothing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    s = Store(tmp_path / "cache")
    lines = _appends(s, ["old.md", "new.md"], 5)
    old = s.node("old.md")
    SyncRecords(s.state).make_clean(old, s.state.objects.put(b"".join(lines["old.md"])))  # pushed
    more = _appends(s, ["later.md", "gone.md"], 5)
    gone_id = s.node("gone.md").entry_id
    s.state.unlink(s.state.root, "gone.md")  # its row deleted: its id is no row's now
    log = tmp_path / "cache" / EXTENT_LOG_NAME
    spans = _spans(log)
    at, _, _ = next(span for span in spans if span[2] == old.entry_id)
    gone_at, _, _ = next(span for span in spans if span[2] == gone_id)
    s.cache.close()
    _flip(log, at + 30)  # the headers: the crc at each record's end names its file
    _flip(log, gone_at + 12)
    with caplog.at_level(logging.WARNING, "memfs.state"):
        s._open()
    assert s.state.content(s.node("new.md")) == b"".join(lines["new.md"])
    assert s.state.content(s.node("later.md")) == b"".join(more["later.md"])
    assert "gone.md" not in (s.state.root.children or {})
    assert s.node("old.md").sha is not None  # still the pushed content, by sha
    assert [n.refused_why for n in s.state.walk_files()] == [None] * 3
    assert "files=none" in caplog.text and f"offset={at} " in caplog.text
    assert s.cache.journal.damage is not None and s.cache.journal.damage.held == []
    s.cache.close()


def test_a_damaged_stretch_holds_every_file_that_may_have_lost_a_record(
    tmp_path: Path,
) -> None:
    s = Store(tmp_path / "cache")
    lines = _appends(s, ["a.md", "b.md", "c.md"], 10)
    c = s.node("c.md")
    SyncRecords(s.state).make_clean(c, s.state.objects.put(b"".join(lines["c.md"])))  # pushed, then
    s.state.truncate(c, 0)  # a new base, newer than anything the stretch can hold
    s.state.write(c, 0, b"c again")
    spans = _spans(tmp_path / "cache" / EXTENT_LOG_NAME)
    s.cache.close()
    start = spans[4][0] + 3
    with open(tmp_path / "cache" / EXTENT_LOG_NAME, "r+b") as f:  # a bad sector's worth
        f.seek(start)
        f.write(b"\xee" * (spans[9][0] - start + 5))
    s._open()
    held = sorted(n.name for n in s.state.walk_files() if n.state_name() == "refused")
    assert held == ["a.md", "b.md"]  # either may have lost a record; c could not have
    assert s.state.content(s.node("c.md")) == b"c again"
    # Records a0 b0 c0 a1 | b1 c1 a2 b2 c2 a3 | b3 c3 a4 ...: each file's last good
    # content is what it held before the stretch.
    for name, good in (("a.md", 2), ("b.md", 1)):
        node = s.node(name)
        assert node.conflict is not None
        assert Path(node.conflict).read_bytes() == b"".join(lines[name][:good])
        assert s.state.content(node).endswith(b"".join(lines[name][4:]))
    s.cache.close()


def test_a_log_of_the_first_format_is_read_and_rewritten(tmp_path: Path) -> None:
    def v1(r: extents.Record) -> bytes:  # the first format's record, as memfs wrote it
        payload = r.payload or b""
        head = struct.pack("<BIQQQq", r.kind, len(payload), r.entry_id, r.seq, r.offset, 5)
        return struct.pack("<I", zlib.crc32(payload, zlib.crc32(head))) + head + payload

    j = Journal(tmp_path / "j.sqlite")
    a = j.insert(path="/a.md", kind="file", mode=0o644, mtime_ns=1, data=b"base", dirty=1)
    j.close()
    records = [
        extents.Record(extents.WRITE, a, 1, 4, 5, b" one"),
        extents.Record(extents.TRUNCATE, a, 2, 6, 5, None),
        extents.Record(extents.WRITE, a, 3, 6, 5, b"two"),
    ]
    (tmp_path / EXTENT_LOG_NAME).write_bytes(b"".join(v1(r) for r in records))
    again = Journal(tmp_path / "j.sqlite")
    assert next(again.rows()).data == b"base otwo"
    again.append(a, 9, b"!", 6)
    again.close()
    assert (tmp_path / EXTENT_LOG_NAME).read_bytes().startswith(extents.LOG_MAGIC)
    third = Journal(tmp_path / "j.sqlite")
    assert next(third.rows()).data == b"base otwo!"
    third.close()


def test_a_large_log_is_read_as_a_stream(tmp_path: Path) -> None:
    """160 MiB of records and garbage: the start holds a chunk, a record and the
    files' contents, never the log (it read the whole log, 1 GiB for a 1 GiB log)."""
    j = Journal(tmp_path / "j.sqlite")
    ids = [
        j.insert(path=f"/{n}.md", kind="file", mode=0o644, mtime_ns=1, data=b"", dirty=1)
        for n in range(3)
    ]
    j.close()
    payload = bytearray(os.urandom(60_000))
    with open(tmp_path / EXTENT_LOG_NAME, "wb") as f:
        f.write(extents.log_header(0))
        for seq in range(1, 2301):
            if seq == 1200:
                f.write(os.urandom(20 * 1024 * 1024))  # a damaged stretch to skip
            payload[:4] = seq.to_bytes(4, "little")
            record = extents.Record(extents.WRITE, ids[seq % 3], seq, 0, seq, bytes(payload))
            f.write(extents.encode(record))
    assert (tmp_path / EXTENT_LOG_NAME).stat().st_size > 150 * 1024 * 1024
    tracemalloc.start()
    try:
        again = Journal(tmp_path / "j.sqlite")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 8 * 1024 * 1024, peak
    rows = {r.entry_id: r.data for r in again.rows()}
    for n, e in enumerate(ids):  # each file's last record (none was lost: garbage only)
        last = max(seq for seq in range(1, 2301) if seq % 3 == n)
        assert rows[e] is not None and rows[e][:4] == last.to_bytes(4, "little")
    assert again.damage is not None and again.damage.held == []
    again.close()


def test_records_older_than_a_base_are_ignored(tmp_path: Path) -> None:
    j = Journal(tmp_path / "j.sqlite")
    a = j.insert(path="/a.md", kind="file", mode=0o644, mtime_ns=1, data=b"", dirty=1)
    j.append(a, 0, b"old", 2)
    j.update(a, data=b"new base", mtime_ns=3)
    j.append(a, 8, b"!", 4)
    j.delete(a)  # its id comes back for the next row, its records must not
    b = j.insert(path="/b.md", kind="file", mode=0o644, mtime_ns=5, data=b"fresh", dirty=1)
    assert b == a
    j.close()
    again = Journal(tmp_path / "j.sqlite")
    assert [(r.path, r.data, r.mtime_ns) for r in again.rows()] == [("/b.md", b"fresh", 5)]
    assert again.logged(b) == 0
    again.close()


KILLED_CHILD = """
import os, signal, sys
from pathlib import Path
from memfs.state import conflicts, extents
from memfs.state.journal import Journal

extents.LOG_FILE_MAX = 600
where, at = sys.argv[2], int(sys.argv[3])
real, calls = os.ftruncate, 0

def ftruncate(fd, size):
    global calls
    calls += 1
    if calls == at and where == "before":  # the new bases committed, the log still full
        os.kill(os.getpid(), signal.SIGKILL)
    real(fd, size)
    if calls == at and where == "after":
        os.kill(os.getpid(), signal.SIGKILL)

os.ftruncate = ftruncate
j = Journal(Path(sys.argv[1]))
ids = [j.insert(path=f"/{n}.md", kind="file", mode=0o644, mtime_ns=1, data=b"", dirty=1)
       for n in range(3)]
sizes = [0, 0, 0]
for i in range(400):
    payload = b"%d;" % i
    j.append(ids[i % 3], sizes[i % 3], payload, i)
    sizes[i % 3] += len(payload)
    print(i, flush=True)
"""


@pytest.mark.parametrize(("where", "at"), [("before", 1), ("after", 1), ("before", 3)])
def test_a_kill_during_compaction_loses_no_acknowledged_record(
    tmp_path: Path, where: str, at: int
) -> None:
    child = subprocess.run(
        [sys.executable, "-c", KILLED_CHILD, str(tmp_path / "j.sqlite"), where, str(at)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert child.returncode == -signal.SIGKILL, child.stderr
    acknowledged = len(child.stdout.split())
    assert 0 < acknowledged < 400
    expected = [b"", b"", b""]
    for i in range(acknowledged):
        expected[i % 3] += b"%d;" % i
    j = Journal(tmp_path / "j.sqlite")
    assert [r.data for r in j.rows()] == expected
    j.close()


def test_a_symlink_at_the_log_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "cache"
    CacheDir(root, STORE).close()
    (root / EXTENT_LOG_NAME).unlink()
    target = tmp_path / "elsewhere"
    target.write_bytes(b"not memfs's")
    (root / EXTENT_LOG_NAME).symlink_to(target)
    with pytest.raises(ConfigError, match=r"extents\.log is a symlink"):
        CacheDir(root, STORE)
    assert target.read_bytes() == b"not memfs's"
    (root / EXTENT_LOG_NAME).unlink()
    CacheDir(root, STORE).close()  # the refusal let the lock go


def test_an_older_journal_extents_table_is_folded_into_the_bases(tmp_path: Path) -> None:
    db = sqlite3.connect(tmp_path / "j.sqlite")
    db.executescript(
        """
        CREATE TABLE entries (entry_id INTEGER PRIMARY KEY, path TEXT UNIQUE, kind TEXT NOT NULL,
            memory_id TEXT, base_sha TEXT, base_path TEXT, sha TEXT, data BLOB,
            dirty INTEGER NOT NULL DEFAULT 0, mode INTEGER NOT NULL, mtime_ns INTEGER NOT NULL,
            sent_sha TEXT, sent_path TEXT, refused_sha TEXT, refused_why TEXT, conflict TEXT);
        CREATE TABLE extents (entry_id INTEGER NOT NULL, seq INTEGER NOT NULL,
            offset INTEGER NOT NULL, data BLOB, mtime_ns INTEGER NOT NULL,
            PRIMARY KEY (entry_id, seq)) WITHOUT ROWID;
        INSERT INTO entries(entry_id, path, kind, data, dirty, mode, mtime_ns)
            VALUES (1, '/a.md', 'file', X'62617365', 1, 420, 1);
        INSERT INTO extents VALUES
            (1, 1, 4, X'2b6f6e65', 2), (1, 2, 3, NULL, 3), (1, 3, 3, X'21', 4);
        """
    )
    db.commit()
    db.close()
    j = Journal(tmp_path / "j.sqlite")
    assert [(r.data, r.mtime_ns) for r in j.rows()] == [(b"bas!", 4)]
    j.append(1, 4, b"?", 5)
    j.close()
    again = Journal(tmp_path / "j.sqlite")
    assert next(again.rows()).data == b"bas!?"
    again.close()
    db = sqlite3.connect(tmp_path / "j.sqlite")
    assert db.execute("SELECT 1 FROM sqlite_master WHERE name='extents'").fetchone() is None
    db.close()
