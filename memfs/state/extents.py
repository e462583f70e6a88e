"""A dirty file's changes since its base, as records in an append-only log.

Why: storing the whole content on every write made a write cost the file's size (12,000
appends of 8 bytes wrote 1.25 GB to the cache disk), and even one small SQLite commit per
write costs a 4 KiB WAL frame (61 MB for the same appends). Instead the journal keeps a
base (the row's `data`, with `base_seq`, the last sequence number it covers) and each
change is one record appended to `extents.log` beside it with one `os.write`: a write
`(offset, bytes)`, a truncate `(size, None)` or a new mtime. Loading the journal replays
the records newer than each base (`Journal.rows`). Once a file's records outgrow the file
(or `LOG_MIN_BYTES`) the next change rewrites its base (`StoreState.write` decides with
`fits`); once the log passes `LOG_FILE_MAX` every base is rewritten and the log emptied
(`Journal.append`), so what the journal writes stays linear in what is written.

A record checks itself (crc32): replay stops at the first record that does not, the
torn tail a power loss may leave (a killed process cannot tear one `os.write`).
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass

from memfs.paths import LOCAL_ONLY_MAX_BYTES

WRITE, TRUNCATE, TOUCH = 0, 1, 2
# crc32, kind, payload length, entry id, sequence number, offset (a truncate's size), mtime
_HEADER = struct.Struct("<IBIQQQq")
RECORD_OVERHEAD = _HEADER.size
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


def encode(r: Record) -> bytes:
    payload = r.payload or b""
    body = _HEADER.pack(0, r.kind, len(payload), r.entry_id, r.seq, r.offset, r.mtime_ns)[4:]
    return struct.pack("<I", zlib.crc32(payload, zlib.crc32(body))) + body + payload


def decode(buf: bytes) -> Iterator[tuple[Record, int]]:
    """The valid records at the start of `buf`, each with the offset just past it."""
    at = 0
    while at + _HEADER.size <= len(buf):
        crc, kind, length, entry_id, seq, offset, mtime_ns = _HEADER.unpack_from(buf, at)
        end = at + _HEADER.size + length
        if kind not in (WRITE, TRUNCATE, TOUCH) or length > LOCAL_ONLY_MAX_BYTES or end > len(buf):
            return
        payload = buf[at + _HEADER.size : end]
        if zlib.crc32(payload, zlib.crc32(buf[at + 4 : at + _HEADER.size])) != crc:
            return
        yield Record(kind, entry_id, seq, offset, mtime_ns, payload if kind == WRITE else None), end
        at = end


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
