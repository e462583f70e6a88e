"""A dirty file's changes since its base in the journal, one row per write or truncate.

Why: storing the whole content on every write made a write cost the file's size (12,000
appends of 8 bytes wrote 1.25 GB to the cache disk). Instead the journal keeps a base (the
row's `data`) and appends each change as an extent, `(offset, bytes)` for a write and
`(size, None)` for a truncate; loading the journal replays them (`Journal.rows`). Once a
file's log outgrows the file (or `LOG_MIN_BYTES`), the next change rewrites the base and
drops the log (`StoreState.write` decides with `fits`), so what the journal writes stays
linear in what is written: about twice the bytes at most, plus `ROW_OVERHEAD` per change.
"""

from __future__ import annotations

# What one extent row is counted as beyond its bytes (keys, offset, mtime, page slack):
# many one-byte writes reach the compaction point too, so replay stays short.
ROW_OVERHEAD = 32
# A small file's log may hold this much before it is compacted into a new base.
LOG_MIN_BYTES = 64 * 1024


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
    """What one change adds to a file's log (see `fits`)."""
    return ROW_OVERHEAD + (0 if payload is None else len(payload))


def fits(logged: int, change: int, size: int) -> bool:
    """Whether a change of cost `change` may join a log of cost `logged` for a file of
    `size` bytes; if not, the caller rewrites the base (which empties the log)."""
    return logged + change <= max(LOG_MIN_BYTES, size)
