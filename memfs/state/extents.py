"""A dirty file's changes since its base, as records in an append-only log.

Why: storing the whole content on every write made a write cost the file's size (12,000
appends of 8 bytes wrote 1.25 GB to the cache disk), and even one small SQLite commit per
write costs a 4 KiB WAL frame (61 MB for the same appends). Instead the journal keeps a
base (the row's `data`, with `base_seq`, the last sequence number it covers) and each
change is one record appended to `extents.log` beside it with one `os.write`: a write
`(offset, bytes)`, a truncate `(size, None)` or a new mtime. Loading the journal replays
the records newer than each base and folds them into the bases (`Journal`'s start).
Once a file's records outgrow the file (or `LOG_MIN_BYTES`) the next change rewrites its
base (`StoreState.write` decides with `fits`); once the log passes `LOG_FILE_MAX` every
base is rewritten and the log emptied (`Journal.append`), so what the journal writes
stays linear in what is written.

Every record checks itself, and one damaged record costs only itself (`read`): a record
starts with a magic and a crc32 of its header (kind, length, entry id, sequence number,
offset, mtime, the payload's crc32) and ends with a crc32 of its entry id and sequence
number. A bad payload is skipped by its (checked) length, with its file known; a bad
header is skipped by looking for the next magic whose header checks, and its file is
told by the crc at the end of the bytes skipped (`Lost.owners`). The log starts with a
header naming the sequence number it follows. A record cut short at the end of the log,
or zeros there, is the torn tail a power loss may leave (a killed process cannot tear
one `os.write`). A log of the first format (a crc32 over each record, no magic) is still
read, up to its first bad record, and rewritten in this one at the next start.
"""

from __future__ import annotations

import os
import struct
import zlib
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

from memfs.paths import LOCAL_ONLY_MAX_BYTES

WRITE, TRUNCATE, TOUCH = 0, 1, 2
_KINDS = (WRITE, TRUNCATE, TOUCH)
# The log's first bytes: its format, the sequence number its records follow, a crc32.
LOG_MAGIC = b"memfs extents 2\n"
_FILE = struct.Struct("<16sQI")
LOG_HEADER_SIZE = _FILE.size
# A record: magic, crc32 of the rest of the header, kind, payload length, entry id,
# sequence number, offset (a truncate's size), mtime, crc32 of the payload; the payload;
# then crc32 of (entry id, sequence number).
_MAGIC = b"\xff\xe5"  # 0xff never occurs in UTF-8: rare inside a payload
_HEAD = struct.Struct("<2sIBIQQQqI")
_ID = struct.Struct("<QQ")
_TAIL = struct.Struct("<I")
RECORD_OVERHEAD = _HEAD.size + _TAIL.size
# The first format: crc32, kind, payload length, entry id, sequence number, offset, mtime.
_V1 = struct.Struct("<IBIQQQq")
# The log is read in pieces of this size: what reading it holds is this and one record.
CHUNK = 1024 * 1024
# A small file's records may hold this much before its base is rewritten.
LOG_MIN_BYTES = 64 * 1024
# The log is emptied (every base rewritten) before it grows past this.
LOG_FILE_MAX = 4 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class Record:
    """One change: `payload` at `offset` (WRITE), a truncate to `offset` bytes
    (TRUNCATE, payload None) or only a new mtime (TOUCH)."""

    kind: int
    entry_id: int
    seq: int
    offset: int
    mtime_ns: int
    payload: bytes | None


@dataclass(frozen=True, slots=True)
class Lost:
    """Bytes of the log no record could be read from, at `offset`, `size` long.

    `entry_id` and `seq` are the record's when its header checked (its payload did not);
    otherwise the bytes follow the record `after` (its sequence number, or the one the
    log starts after) and precede the record `before` (None: none followed), and `tail`
    is their last four bytes (the crc of the lost record's id, if it ended there).
    `torn`: the tail a power loss leaves, not damage."""

    offset: int
    size: int
    after: int
    before: int | None = None
    entry_id: int | None = None
    seq: int | None = None
    tail: int | None = None
    torn: bool = False

    def owners(self, bases: Mapping[int, int], ids: Iterable[int]) -> set[int]:
        """The rows (`bases`: each row holding a base -> the last sequence number its
        base covers) that may have lost a record here: the record's own when its
        header or its end tells it (its id one of `ids`: every id a row has or had),
        else every row with a base older than the lost records (never fewer than those
        that did lose one)."""
        if self.torn:
            return set()
        if self.entry_id is not None and self.seq is not None:
            return {self.entry_id} if self.seq > bases.get(self.entry_id, self.seq) else set()
        # The lost sequence numbers are after+1 .. hi (unbounded at the log's end).
        hi = None if self.before is None else self.before - 1
        if hi is not None and hi <= self.after:
            return set()  # no record is missing: bytes that were never one
        last = self.after + 1 if hi is None else hi  # the seq of the record ending here
        told = next((e for e in ids if self.tail == tail_crc(e, last)), None)
        found = set() if told is None or last <= bases.get(told, last) else {told}
        if told is not None and (hi is None or hi == self.after + 1):
            return found  # one record lost, and the crc at its end names its file
        if told is not None and hi is not None:
            hi -= 1  # the others lost before it
        return found | {e for e, seq in bases.items() if hi is None or seq < hi}


def tail_crc(entry_id: int, seq: int) -> int:
    return zlib.crc32(_ID.pack(entry_id, seq))


def log_header(start_seq: int) -> bytes:
    """The first bytes of an empty log whose records follow `start_seq`."""
    head = LOG_MAGIC + struct.pack("<Q", start_seq)
    return head + struct.pack("<I", zlib.crc32(head))


def encode(r: Record) -> bytes:
    payload = r.payload or b""
    fields = _HEAD.pack(
        _MAGIC, 0, r.kind, len(payload), r.entry_id, r.seq, r.offset, r.mtime_ns,
        zlib.crc32(payload),
    )[6:]  # fmt: skip
    head = _MAGIC + struct.pack("<I", zlib.crc32(fields)) + fields
    return head + payload + _TAIL.pack(tail_crc(r.entry_id, r.seq))


class _Reader:
    """The bytes of an open file, read by position a chunk at a time (never whole)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.size = os.fstat(fd).st_size
        self._at = 0
        self._buf = b""

    def get(self, at: int, n: int) -> bytes:
        """The bytes at [at, at + n), fewer at the end of the file."""
        if at < self._at or min(at + n, self.size) > self._at + len(self._buf):
            self._buf = os.pread(self.fd, max(n, CHUNK), at)
            self._at = at
        return self._buf[at - self._at : at - self._at + n]

    def zeros(self, at: int) -> bool:
        """Whether everything from `at` on is zero bytes."""
        while at < self.size:
            piece = self.get(at, CHUNK)
            if piece.strip(b"\0"):
                return False
            at += len(piece)
        return True


def _header(head: bytes) -> tuple[int, int, int, int, int, int, int] | None:
    """A record header's fields (kind, length, entry id, seq, offset, mtime, payload
    crc) if it checks and is one memfs writes, else None."""
    if len(head) < _HEAD.size or head[:2] != _MAGIC:
        return None
    _, crc, kind, length, entry_id, seq, offset, mtime_ns, pcrc = _HEAD.unpack(head)
    if zlib.crc32(head[6:]) != crc or kind not in _KINDS:
        return None
    if length > LOCAL_ONLY_MAX_BYTES or offset > LOCAL_ONLY_MAX_BYTES:  # not one of ours
        return None
    return kind, length, entry_id, seq, offset, mtime_ns, pcrc


def _next_header(reader: _Reader, at: int) -> int | None:
    """Where the first record header that checks starts at or after `at`."""
    while at < reader.size:
        piece = reader.get(at, CHUNK)
        i = piece.find(_MAGIC)
        if i < 0:
            if len(piece) < len(_MAGIC):
                return None
            at += len(piece) - 1  # the magic may straddle two pieces
            continue
        if _header(reader.get(at + i, _HEAD.size)) is not None:
            return at + i
        at += i + 1
    return None


def read(fd: int) -> tuple[int | None, Iterator[Record | Lost]]:
    """What the log holds, read as a stream: the sequence number its records follow
    (None if unknown: no header, a damaged one, a log of the first format), and its
    records in order, with a `Lost` for each stretch no record could be read from."""
    reader = _Reader(fd)
    if reader.size == 0:
        return None, iter(())
    first = reader.get(0, _FILE.size)
    if first[: len(LOG_MAGIC)] == LOG_MAGIC or first == LOG_MAGIC[: len(first)]:
        at = len(first)
        start: int | None = None
        if len(first) == _FILE.size and zlib.crc32(first[:-4]) == _FILE.unpack(first)[2]:
            start = _FILE.unpack(first)[1]
        return start, _read_v2(reader, at, start or 0)
    if _v1_record(reader, 0) is not None:
        return None, _read_v1(reader)
    # No header (its write failed after the log was emptied), or a damaged one: the
    # records start at 0, or right after the header's bytes.
    at = _FILE.size if _next_header(reader, 0) == _FILE.size else 0
    return None, _read_v2(reader, at, 0)


def _read_v2(reader: _Reader, at: int, after: int) -> Iterator[Record | Lost]:
    while at < reader.size:
        fields = _header(reader.get(at, _HEAD.size))
        if fields is None:
            if reader.size - at < _HEAD.size or reader.zeros(at + _HEAD.size):
                # Zeros after a header that does not check: a record a power loss cut
                # (a whole record ends in a crc, never in zeros).
                yield Lost(at, reader.size - at, after, torn=True)
                return
            found = _next_header(reader, at + 1)
            end = reader.size if found is None else found
            next_fields = None if found is None else _header(reader.get(found, _HEAD.size))
            before = None if next_fields is None else next_fields[3]
            tail = _TAIL.unpack(reader.get(end - 4, 4))[0] if end - at >= 4 else None
            yield Lost(at, end - at, after, before, tail=tail)
            at = end
            continue
        kind, length, entry_id, seq, offset, mtime_ns, pcrc = fields
        end = at + _HEAD.size + length + _TAIL.size
        if end > reader.size:  # a record cut short: nothing follows it
            yield Lost(at, reader.size - at, after, entry_id=entry_id, seq=seq, torn=True)
            return
        payload = reader.get(at + _HEAD.size, length)
        if zlib.crc32(payload) != pcrc:
            torn = end == reader.size and reader.zeros(end - _TAIL.size)  # zeros, as above
            yield Lost(at, end - at, after, entry_id=entry_id, seq=seq, torn=torn)
            if torn:
                return
        else:
            yield Record(kind, entry_id, seq, offset, mtime_ns, payload if kind == WRITE else None)
        after = seq
        at = end


def _v1_record(reader: _Reader, at: int) -> Record | None:
    """The first format's record at `at`, if whole and it checks."""
    head = reader.get(at, _V1.size)
    if len(head) < _V1.size:
        return None
    crc, kind, length, entry_id, seq, offset, mtime_ns = _V1.unpack(head)
    if kind not in _KINDS or length > LOCAL_ONLY_MAX_BYTES:
        return None
    payload = reader.get(at + _V1.size, length)
    if len(payload) < length or zlib.crc32(payload, zlib.crc32(head[4:])) != crc:
        return None
    return Record(kind, entry_id, seq, offset, mtime_ns, payload if kind == WRITE else None)


def _read_v1(reader: _Reader) -> Iterator[Record | Lost]:
    """The first format's records, up to the first that does not check: with no magic
    to find the next one by, the rest is lost (torn if it ends the log cut short)."""
    at = after = 0
    while at < reader.size:
        r = _v1_record(reader, at)
        if r is None:
            head = reader.get(at, _V1.size)
            torn = len(head) < _V1.size or (at + _V1.size + _V1.unpack(head)[2] > reader.size)
            yield Lost(at, reader.size - at, after, torn=torn)
            return
        yield r
        after = r.seq
        at += _V1.size + len(r.payload or b"")


def replay(base: bytes, records: list[Record]) -> tuple[bytes, int | None]:
    """A base with its records applied in order, and the last record's mtime."""
    content = bytearray(base)
    for r in records:
        if r.kind != TOUCH:
            apply(content, r.offset, r.payload)
    return bytes(content), (records[-1].mtime_ns if records else None)


def apply(data: bytearray, offset: int, payload: bytes | None) -> None:
    """Apply one change in place: a write of `payload` at `offset` (zeros fill a gap,
    as a sparse write reads back), or with `payload` None a truncate to `offset` bytes."""
    if payload is None:
        if offset < len(data):
            del data[offset:]
        else:
            data.extend(bytes(offset - len(data)))
        return
    if offset > len(data):
        data.extend(bytes(offset - len(data)))
    data[offset : offset + len(payload)] = payload


def cost(payload: bytes | None) -> int:
    """What one change adds to a file's records (see `fits`)."""
    return RECORD_OVERHEAD + (0 if payload is None else len(payload))


def fits(logged: int, change: int, size: int) -> bool:
    """Whether a change of cost `change` may join records of cost `logged` for a file
    of `size` bytes; if not, the caller rewrites the base (which drops them)."""
    return logged + change <= max(LOG_MIN_BYTES, size)
