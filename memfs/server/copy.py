"""`memfs serve copy`: move a whole database between backends, proved intact by sha.

Every store, memory, version (redacted ones stay redacted) and token is copied with its
ids and timestamps, in the source's order, in one target transaction: a failed copy
leaves the target as empty as it was. Then both sides are digested independently (every
row's fields plus a fresh SHA-256 of every content) and must agree.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from memfs.paths import sha256_hex
from memfs.server.db import Conn, Storage

STORE_COLS = "id, name, description, metadata, created_at, updated_at, archived_at, last_version_at"
MEMORY_COLS = "id, store_id, path, sha, size, version_id, created_at, updated_at, content"
VERSION_COLS = (
    "id, store_id, memory_id, operation, path, sha, size, actor_type, actor_id, "
    "created_at, redacted_at, redactor_type, redactor_id, content"
)
TOKEN_COLS = "id, hash, scopes, created_at, expires_at, revoked_at"
TABLES = (
    ("stores", STORE_COLS, "seq", None),
    ("memories", MEMORY_COLS, "store_id, path", 8),
    ("versions", VERSION_COLS, "seq", 13),
    ("tokens", TOKEN_COLS, "id", None),
)


class CopyRefused(Exception):
    """The copy cannot start (target not empty) or did not verify."""


@dataclass
class CopyReport:
    counts: dict[str, int]
    digest: str


def _rows(conn: Conn, table: str, cols: str, order: str) -> Iterator[tuple[Any, ...]]:
    """Streamed, so a large store is never all in memory."""
    for row in conn.execute(f"SELECT {cols} FROM {table} ORDER BY {order}"):
        yield tuple(row)


def digest(db: Storage) -> CopyReport:
    """Counts and one SHA-256 over every row, contents re-hashed (not trusted).

    Row digests are sorted here, not in SQL: the engines' collations may disagree."""
    h = hashlib.sha256()
    counts: dict[str, int] = {}
    with db._read() as conn:
        for table, cols, _, content_at in TABLES:
            rows: list[str] = []
            for row in _rows(conn, table, cols, "id"):
                fields = list(row)
                if content_at is not None and fields[content_at] is not None:
                    content = fields[content_at]
                    actual = sha256_hex(content.encode("utf-8"))
                    if table == "memories" and actual != fields[3]:
                        raise CopyRefused(f"memory {fields[0]} content does not match its sha")
                    fields[content_at] = actual
                rows.append(hashlib.sha256(repr((table, fields)).encode("utf-8")).hexdigest())
            rows.sort()
            h.update(f"{table}:{len(rows)}:{','.join(rows)};".encode())
            counts[table] = len(rows)
    return CopyReport(counts, h.hexdigest())


def copy_database(source: Storage, target: Storage) -> CopyReport:
    """Copy everything, then verify; CopyRefused if the target has data or they differ."""
    with source._read() as src, target._write() as dst:
        for table, _, _, _ in TABLES:
            if dst.execute(f"SELECT 1 FROM {table} LIMIT 1").fetchone() is not None:
                raise CopyRefused(f"the target database is not empty (it has {table})")
        for table, cols, order, content_at in TABLES:
            marks = ", ".join("?" * len(cols.split(",")))
            sql = f"INSERT INTO {table} ({cols}) VALUES ({marks})"
            for row in _rows(src, table, cols, order):
                fields = list(row)
                if content_at is not None and fields[content_at] is not None:
                    fields[content_at] = target._blob(fields[content_at])
                dst.execute(sql, fields)
    before, after = digest(source), digest(target)
    if before != after:
        raise CopyRefused(f"the copy does not match the source ({before.counts} vs {after.counts})")
    return after
