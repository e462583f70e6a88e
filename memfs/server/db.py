"""Storage for the store server: every rule that needs the data lives here.

`Storage` holds the API's rules once, in SQL both engines speak (`?` placeholders; the
PostgreSQL backend in `memfs.server.pg` rewrites them). A backend supplies connections
and transactions. The rules every backend must keep:
- every write to a store begins by locking that store (`_write(store_id)`), so a
  precondition, a path-uniqueness check and the 10,000-memory cap are each one atomic
  step with the write they guard, across any number of server processes;
- a version's `created_at` is taken under that lock and is strictly later than the
  store's previous one (`stores.last_version_at`), so versions sort in commit order and
  the "newest version" an idle pass trusts never goes backwards or skips a commit.

Synchronous on purpose: each call is one short transaction, run on a worker thread by the
HTTP layer. The backends are `memfs.server.sqlite.Database` (embedded, one file) and
`memfs.server.pg.PostgresDatabase`; the schema and its migrations are
`memfs.server.migrations`.

Methods return plain dicts shaped exactly like the wire objects, or raise `ApiError`.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol, TypeVar

from memfs.paths import (
    MAX_MEMORIES_PER_STORE,
    PathRejected,
    ancestors,
    check_memory_path,
    sha256_hex,
)
from memfs.server import errors, tokens
from memfs.server.rows import MemoryRow, StoreRow, VersionRow
from memfs.server.wire import (
    Actor,
    after,
    decode_cursor,
    encode_cursor,
    new_id,
    now,
)

_STORE_COLS = StoreRow.columns()
_MEM_BASIC = MemoryRow.columns()
_MEM_FULL = MemoryRow.columns(content=True)
_VER_BASIC = VersionRow.columns()
_VER_FULL = VersionRow.columns(content=True)


class DatabaseUnavailable(Exception):
    """The database cannot be opened or written; the server refuses to start."""


def _newest_first(
    table: str,
    cols: str,
    where: list[str],
    args: list[Any],
    created_gte: str | None,
    created_lte: str | None,
    page: str | None,
) -> str:
    """A listing newest first, keyset-paged on (created_at, seq): the creation window
    and the cursor join `where`/`args`; the caller binds `limit + 1` last."""
    if created_gte is not None:
        where.append("created_at >= ?")
        args.append(created_gte)
    if created_lte is not None:
        where.append("created_at <= ?")
        args.append(created_lte)
    if page is not None:
        key = decode_cursor(page, table)
        where.append("(created_at, seq) < (?, ?)")
        args.extend(key[:2])
    return (
        f"SELECT {cols} FROM {table} WHERE {' AND '.join(where)} "
        "ORDER BY created_at DESC, seq DESC LIMIT ?"
    )


_Paged = TypeVar("_Paged", StoreRow, VersionRow)


def _page_of(kind: str, rows: list[_Paged], limit: int) -> tuple[list[_Paged], str | None]:
    """The first `limit` of `limit + 1` rows, and the cursor past them if there are more."""
    if len(rows) <= limit:
        return rows, None
    last = rows[limit - 1]
    return rows[:limit], encode_cursor(kind, [last.created_at, last.seq])


def _check_path(path: str) -> None:
    try:
        check_memory_path(path)
    except PathRejected as exc:
        raise errors.invalid(f"invalid path: {exc.reason}") from None


def _sha256(content: str) -> tuple[str, int]:
    data = content.encode("utf-8")
    return sha256_hex(data), len(data)


class Cursor(Protocol):
    def fetchone(self) -> Any: ...
    def fetchall(self) -> list[Any]: ...
    def __iter__(self) -> Iterator[Any]: ...


class Conn(Protocol):
    """What the rules need of a connection: `?`-placeholder SQL in, rows as tuples out."""

    def execute(self, sql: str, args: Sequence[Any] = ..., /) -> Cursor: ...


class Storage:
    """The API's operations; a backend subclass supplies connections and transactions."""

    backend = "abstract"
    inline_reads = False
    """True when a read is so short that a thread hand-off would cost more (SQLite)."""

    def __init__(self, *, max_memories: int = MAX_MEMORIES_PER_STORE) -> None:
        self.max_memories = max_memories

    def _read(self) -> AbstractContextManager[Conn]:
        """A read-only transaction: one consistent snapshot for multi-query listings."""
        raise NotImplementedError

    def _write(self, store_id: str | None = None) -> AbstractContextManager[Conn]:
        """A write transaction; with `store_id`, that store is locked before anything else
        is read, so every check in the transaction sees the latest committed state."""
        raise NotImplementedError

    def _blob(self, content: str) -> Any:
        """How content is bound as a parameter (text on SQLite, UTF-8 bytes on PostgreSQL)."""
        return content

    def close(self) -> None:
        raise NotImplementedError

    def ping(self) -> None:
        """Raise DatabaseUnavailable unless the database answers a query now."""
        try:
            with self._read() as conn:
                conn.execute("SELECT 1").fetchone()
        except errors.ApiError as exc:
            raise DatabaseUnavailable(exc.message) from exc

    def describe(self) -> str:
        """Where the data lives, for logs (never a password)."""
        raise NotImplementedError

    def follow_changes(self, changed: Callable[[str | None], None]) -> None:
        """Call `changed(store_id)` after each store-locked write commits, from any
        thread; `changed(None)` when commits may have gone unheard (the watch)."""
        raise NotImplementedError

    def head(self, store_id: str) -> str | None:
        """The store's newest version id (None: it has none): what a watch waits on."""
        with self._read() as conn:
            self._store_row(conn, store_id)
            row = conn.execute(
                "SELECT id FROM versions WHERE store_id = ? ORDER BY created_at DESC, seq DESC "
                "LIMIT 1",
                (store_id,),
            ).fetchone()
        return None if row is None else str(row[0])

    def newer(
        self, store_id: str, after: str, limit: int
    ) -> list[tuple[str, str, str, str]] | None:
        """The versions after `after` in the store's order, newest first, as (id,
        created_at, memory_id, operation): what a watch's answer names (docs/server.md,
        "The watch"). None if `after` is not a version of this store or more than
        `limit` came after it."""
        with self._read() as conn:
            key = conn.execute(
                "SELECT created_at, seq FROM versions WHERE store_id = ? AND id = ?",
                (store_id, after),
            ).fetchone()
            if key is None:
                return None
            rows = conn.execute(
                "SELECT id, created_at, memory_id, operation FROM versions WHERE store_id = ? "
                "AND (created_at, seq) > (?, ?) ORDER BY created_at DESC, seq DESC LIMIT ?",
                (store_id, key[0], key[1], limit + 1),
            ).fetchall()
        if len(rows) > limit:
            return None
        return [(str(r[0]), str(r[1]), str(r[2]), str(r[3])) for r in rows]

    def _stamp(self, conn: Conn, store_id: str) -> str:
        """The next version time of a (locked) store: now, or just after its last one.

        Clocks of different hosts disagree; this keeps a store's versions in commit order
        anyway, which is what an idle pass that trusts the newest version relies on.
        """
        row = conn.execute(
            "SELECT last_version_at FROM stores WHERE id = ?", (store_id,)
        ).fetchone()
        ts = now()
        if row is not None and row[0] and ts <= row[0]:
            ts = after(row[0])
        conn.execute("UPDATE stores SET last_version_at = ? WHERE id = ?", (ts, store_id))
        return ts

    # ----------------------------------------------------------------- stores

    def _store_row(self, conn: Conn, store_id: str) -> StoreRow:
        row = conn.execute(f"SELECT {_STORE_COLS} FROM stores WHERE id = ?", (store_id,)).fetchone()
        if row is None:
            raise errors.not_found(f"memory store {store_id} not found")
        return StoreRow.from_row(row)

    def _writable_store(self, conn: Conn, store_id: str) -> None:
        if self._store_row(conn, store_id).archived_at is not None:
            raise errors.conflict(f"memory store {store_id} is archived and read-only")

    def create_store(self, name: str, description: str, metadata: dict[str, str]) -> dict[str, Any]:
        store_id = new_id("memstore_")
        ts = now()
        with self._write() as conn:
            conn.execute(
                "INSERT INTO stores (id, name, description, metadata, created_at, updated_at) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (store_id, name, description, json.dumps(metadata), ts, ts),
            )
            return self._store_row(conn, store_id).wire()

    def get_store(self, store_id: str) -> dict[str, Any]:
        with self._read() as conn:
            return self._store_row(conn, store_id).wire()

    def memory_count(self, store_id: str) -> int:
        """How many memories a store holds now (the console's store list)."""
        with self._read() as conn:
            self._store_row(conn, store_id)
            return self._count(conn, store_id)

    def list_stores(
        self,
        *,
        limit: int,
        page: str | None,
        include_archived: bool,
        created_gte: str | None,
        created_lte: str | None,
        only: Sequence[str] | None = None,
    ) -> tuple[list[dict[str, Any]], str | None]:
        """`only`: the stores a token may see (None: every store)."""
        where = ["1 = 1"]
        args: list[Any] = []
        if only is not None:
            if not only:
                return [], None
            where.append(f"id IN ({','.join('?' * len(only))})")
            args.extend(only)
        if not include_archived:
            where.append("archived_at IS NULL")
        sql = _newest_first("stores", _STORE_COLS, where, args, created_gte, created_lte, page)
        with self._read() as conn:
            rows = conn.execute(sql, (*args, limit + 1)).fetchall()
        stores, next_page = _page_of("stores", [StoreRow.from_row(r) for r in rows], limit)
        return [r.wire() for r in stores], next_page

    def update_store(
        self,
        store_id: str,
        *,
        name: str | None,
        description: str | None,
        metadata_patch: dict[str, str | None] | None,
    ) -> dict[str, Any]:
        with self._write(store_id) as conn:
            row = self._store_row(conn, store_id)
            if row.archived_at is not None:
                raise errors.conflict(f"memory store {store_id} is archived and read-only")
            new_name = row.name if name is None else name
            new_description = row.description if description is None else description
            metadata: dict[str, str] = json.loads(row.metadata)
            for key, value in (metadata_patch or {}).items():
                if value is None:
                    metadata.pop(key, None)
                else:
                    metadata[key] = value
            if len(metadata) > 16:
                raise errors.invalid("metadata can hold at most 16 pairs")
            if (new_name, new_description, metadata) != (
                row.name,
                row.description,
                json.loads(row.metadata),
            ):
                conn.execute(
                    "UPDATE stores SET name = ?, description = ?, metadata = ?, updated_at = ? "
                    "WHERE id = ?",
                    (new_name, new_description, json.dumps(metadata), now(), store_id),
                )
            return self._store_row(conn, store_id).wire()

    def archive_store(self, store_id: str) -> dict[str, Any]:
        """Archive once; archiving an archived store returns it unchanged (safe to retry)."""
        with self._write(store_id) as conn:
            row = self._store_row(conn, store_id)
            if row.archived_at is None:
                ts = now()
                conn.execute(
                    "UPDATE stores SET archived_at = ?, updated_at = ? WHERE id = ?",
                    (ts, ts, store_id),
                )
            return self._store_row(conn, store_id).wire()

    def delete_store(self, store_id: str) -> dict[str, Any]:
        with self._write(store_id) as conn:
            self._store_row(conn, store_id)
            conn.execute("DELETE FROM versions WHERE store_id = ?", (store_id,))
            conn.execute("DELETE FROM memories WHERE store_id = ?", (store_id,))
            conn.execute("DELETE FROM stores WHERE id = ?", (store_id,))
        return {"id": store_id, "type": "memory_store_deleted"}

    # ----------------------------------------------------------------- tokens

    def create_token(self, scopes: dict[str, str], ttl_seconds: int) -> dict[str, Any]:
        """Issue a token for existing stores; the only time the token itself is seen."""
        token_id, token = tokens.new_token()
        created = now()
        expires = tokens.expiry(ttl_seconds)
        with self._write() as conn:
            for store_id in scopes:
                self._store_row(conn, store_id)
            conn.execute(
                "INSERT INTO tokens (id, hash, scopes, created_at, expires_at) "
                "VALUES (?, ?, ?, ?, ?)",
                (
                    token_id,
                    tokens.token_hash(token),
                    json.dumps(scopes, sort_keys=True),
                    created,
                    expires,
                ),
            )
        return {
            "id": token_id,
            "token": token,
            "scopes": scopes,
            "created_at": created,
            "expires_at": expires,
        }

    def token_record(self, token_id: str) -> dict[str, Any] | None:
        with self._read() as conn:
            row = conn.execute(
                "SELECT hash, scopes, expires_at, revoked_at FROM tokens WHERE id = ?",
                (token_id,),
            ).fetchone()
        if row is None:
            return None
        return {"hash": row[0], "scopes": row[1], "expires_at": row[2], "revoked_at": row[3]}

    def list_tokens(self) -> list[dict[str, Any]]:
        with self._read() as conn:
            rows = conn.execute(
                "SELECT id, scopes, created_at, expires_at, revoked_at FROM tokens "
                "ORDER BY created_at, id"
            ).fetchall()
        return [
            {
                "id": r[0],
                "scopes": json.loads(r[1]),
                "created_at": r[2],
                "expires_at": r[3],
                "revoked_at": r[4],
            }
            for r in rows
        ]

    def revoke_token(self, token_id: str) -> bool:
        """False when there is no such token; revoking twice keeps the first time."""
        with self._write() as conn:
            row = conn.execute("SELECT revoked_at FROM tokens WHERE id = ?", (token_id,)).fetchone()
            if row is None:
                return False
            if row[0] is None:
                conn.execute("UPDATE tokens SET revoked_at = ? WHERE id = ?", (now(), token_id))
        return True

    # --------------------------------------------------------------- memories

    def _memory_row(self, conn: Conn, store_id: str, memory_id: str) -> MemoryRow:
        row = conn.execute(
            f"SELECT {_MEM_FULL} FROM memories WHERE id = ? AND store_id = ?",
            (memory_id, store_id),
        ).fetchone()
        if row is None:
            self._store_row(conn, store_id)
            raise errors.not_found(f"memory {memory_id} not found")
        return MemoryRow.from_row(row)

    def _check_overlap(
        self, conn: Conn, store_id: str, path: str, exclude: str | None = None
    ) -> None:
        """409 if `path` equals, is under, or is above another memory's path."""
        skip = exclude or ""
        row = conn.execute(
            "SELECT id, path FROM memories WHERE store_id = ? AND path = ? AND id != ?",
            (store_id, path, skip),
        ).fetchone()
        if row is None:
            above = ancestors(path)
            if above:
                marks = ",".join("?" * len(above))
                row = conn.execute(
                    f"SELECT id, path FROM memories WHERE store_id = ? AND path IN ({marks}) "
                    "AND id != ? ORDER BY path LIMIT 1",
                    (store_id, *above, skip),
                ).fetchone()
        if row is None:
            row = conn.execute(
                "SELECT id, path FROM memories WHERE store_id = ? AND path > ? AND path < ? "
                "AND id != ? ORDER BY path LIMIT 1",
                (store_id, path + "/", path + "0", skip),
            ).fetchone()
        if row is not None:
            taken_id, taken = row
            if taken == path:
                message = f"a memory already exists at {path}"
            elif path.startswith(taken + "/"):
                message = f"{path} is below the memory at {taken}"
            else:
                message = f"{path} is above the memory at {taken}"
            raise errors.path_conflict(message, taken_id, taken)

    def _insert_version(
        self,
        conn: Conn,
        *,
        store_id: str,
        memory_id: str,
        operation: str,
        path: str,
        content: str | None,
        sha: str | None,
        size: int | None,
        actor: Actor,
        ts: str,
    ) -> str:
        version_id = new_id("memver_")
        conn.execute(
            "INSERT INTO versions (id, store_id, memory_id, operation, path, sha, size, "
            "actor_type, actor_id, created_at, content) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                version_id,
                store_id,
                memory_id,
                operation,
                path,
                sha,
                size,
                *actor,
                ts,
                None if content is None else self._blob(content),
            ),
        )
        return version_id

    def _content_version(
        self,
        conn: Conn,
        store_id: str,
        memory_id: str,
        operation: str,
        path: str,
        content: str,
        actor: Actor,
    ) -> tuple[str, str, int, str]:
        """A version with content (created, modified): (its id, sha, size, created_at)."""
        sha, size = _sha256(content)
        ts = self._stamp(conn, store_id)
        version_id = self._insert_version(
            conn,
            store_id=store_id,
            memory_id=memory_id,
            operation=operation,
            path=path,
            content=content,
            sha=sha,
            size=size,
            actor=actor,
            ts=ts,
        )
        return version_id, sha, size, ts

    def _count(self, conn: Conn, store_id: str) -> int:
        count: int = conn.execute(
            "SELECT count(*) FROM memories WHERE store_id = ?", (store_id,)
        ).fetchone()[0]
        return count

    def _create_in(
        self,
        conn: Conn,
        store_id: str,
        path: str,
        content: str,
        actor: Actor,
        count: int | None = None,
    ) -> MemoryRow:
        _check_path(path)
        self._check_overlap(conn, store_id, path)
        if count is None:
            count = self._count(conn, store_id)
        if count >= self.max_memories:
            raise errors.invalid(
                f"the memory store is full: it holds the maximum of {self.max_memories} memories"
            )
        memory_id = new_id("mem_")
        version_id, sha, size, ts = self._content_version(
            conn, store_id, memory_id, "created", path, content, actor
        )
        row = MemoryRow(memory_id, store_id, path, sha, size, version_id, ts, ts, content)
        conn.execute(
            f"INSERT INTO memories ({_MEM_FULL}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (memory_id, store_id, path, sha, size, version_id, ts, ts, self._blob(content)),
        )
        return row

    def create_memory(
        self, store_id: str, path: str, content: str, actor: Actor, *, full: bool
    ) -> dict[str, Any]:
        """Create never overwrites: a taken or overlapping path is a 409 path conflict."""
        with self._write(store_id) as conn:
            self._writable_store(conn, store_id)
            return self._create_in(conn, store_id, path, content, actor).wire(full)

    def bulk_create_memories(
        self, store_id: str, items: Iterable[tuple[str, str]], actor: Actor
    ) -> int:
        """Create many memories in one transaction, same rules as create (seeding, tests)."""
        n = 0
        with self._write(store_id) as conn:
            self._writable_store(conn, store_id)
            count = self._count(conn, store_id)
            for path, content in items:
                self._create_in(conn, store_id, path, content, actor, count + n)
                n += 1
        return n

    def get_memory(self, store_id: str, memory_id: str, *, full: bool) -> dict[str, Any]:
        with self._read() as conn:
            return self._memory_row(conn, store_id, memory_id).wire(full)

    def list_memories(
        self,
        store_id: str,
        *,
        path_prefix: str | None,
        depth: int,
        limit: int,
        page: str | None,
        full: bool,
    ) -> tuple[list[dict[str, Any]], str | None]:
        """Keyset listing in path byte order; `depth=1` rolls deeper paths into prefixes.

        The cursor is the path of the last item returned, so a memory that exists for the
        whole listing is returned exactly once whatever is created or deleted meanwhile.
        After a `memory_prefix` item the scan resumes past everything under that prefix.
        """
        prefix = path_prefix or "/"
        hi = prefix[:-1] + "0"  # '0' follows '/': [prefix, hi) is everything under prefix
        lo, inclusive = prefix, False
        if page is not None:
            key = decode_cursor(page, "memories")
            if len(key) != 1 or not isinstance(key[0], str) or not key[0].startswith(prefix):
                raise errors.invalid("page is not a valid cursor for this listing")
            last: str = key[0]
            lo, inclusive = (last[:-1] + "0", True) if last.endswith("/") else (last, False)
        cols = _MEM_FULL if full else _MEM_BASIC
        items: list[dict[str, Any]] = []
        last_key = ""
        with self._read() as conn:
            self._store_row(conn, store_id)

            def scan(lo: str, inclusive: bool, n: int) -> Cursor:
                op = ">=" if inclusive else ">"
                return conn.execute(
                    f"SELECT {cols} FROM memories WHERE store_id = ? AND path {op} ? "
                    "AND path < ? ORDER BY path LIMIT ?",
                    (store_id, lo, hi, n),
                )

            if depth == 0:
                rows = scan(lo, inclusive, limit + 1).fetchall()
                more = len(rows) > limit
                memories = [MemoryRow.from_row(r) for r in rows[:limit]]
                next_page = encode_cursor("memories", [memories[-1].path]) if more else None
                return [m.wire(full) for m in memories], next_page

            plen = len(prefix)
            exhausted = False
            while len(items) < limit and not exhausted:
                want = limit - len(items)
                seen = 0
                restart = False
                for found in scan(lo, inclusive, want):
                    seen += 1
                    row = MemoryRow.from_row(found)
                    path = row.path
                    slash = path.find("/", plen)
                    if slash < 0:
                        items.append(row.wire(full))
                        last_key = path
                        lo, inclusive = path, False
                    else:
                        last_key = path[: slash + 1]
                        items.append({"type": "memory_prefix", "path": last_key})
                        lo, inclusive = path[:slash] + "0", True
                        restart = True
                        break
                if not restart and seen < want:
                    exhausted = True
            more = False
            if not exhausted and items:
                more = scan(lo, inclusive, 1).fetchone() is not None
        return items, (encode_cursor("memories", [last_key]) if more else None)

    def update_memory(
        self,
        store_id: str,
        memory_id: str,
        *,
        content: str | None,
        path: str | None,
        precondition_sha: str | None,
        actor: Actor,
        full: bool,
    ) -> dict[str, Any]:
        """Spec §10's order: 404, precondition (with the idempotent-200 carve-out), path, apply."""
        with self._write(store_id) as conn:
            row = self._memory_row(conn, store_id, memory_id)
            self._writable_store(conn, store_id)
            cur_path = row.path
            cur_content = row.content or ""
            if precondition_sha is not None and precondition_sha != row.sha:
                asked = content is not None or path is not None
                same = (content is None or content == cur_content) and (
                    path is None or path == cur_path
                )
                if asked and same:
                    return row.wire(full)
                raise errors.precondition_failed(
                    f"memory {memory_id} no longer has content_sha256 {precondition_sha}"
                )
            new_path = cur_path if path is None else path
            new_content = cur_content if content is None else content
            if new_path != cur_path:
                _check_path(new_path)
                self._check_overlap(conn, store_id, new_path, exclude=memory_id)
            if new_path == cur_path and new_content == cur_content:
                return row.wire(full)
            version_id, sha, size, ts = self._content_version(
                conn, store_id, memory_id, "modified", new_path, new_content, actor
            )
            conn.execute(
                "UPDATE memories SET path = ?, content = ?, sha = ?, size = ?, version_id = ?, "
                "updated_at = ? WHERE id = ?",
                (new_path, self._blob(new_content), sha, size, version_id, ts, memory_id),
            )
            return dataclasses.replace(
                row,
                path=new_path,
                sha=sha,
                size=size,
                version_id=version_id,
                updated_at=ts,
                content=new_content,
            ).wire(full)

    def delete_memory(
        self, store_id: str, memory_id: str, *, expected_sha: str | None, actor: Actor
    ) -> dict[str, Any]:
        """Deletes are allowed in an archived store (the hosted API allows them too)."""
        with self._write(store_id) as conn:
            row = self._memory_row(conn, store_id, memory_id)
            if expected_sha is not None and expected_sha != row.sha:
                raise errors.precondition_failed(
                    f"memory {memory_id} no longer has content_sha256 {expected_sha}"
                )
            self._insert_version(
                conn,
                store_id=store_id,
                memory_id=memory_id,
                operation="deleted",
                path=row.path,
                content=None,
                sha=None,
                size=None,
                actor=actor,
                ts=self._stamp(conn, store_id),
            )
            conn.execute("DELETE FROM memories WHERE id = ?", (memory_id,))
        return {"id": memory_id, "type": "memory_deleted"}

    # --------------------------------------------------------------- versions

    def list_versions(
        self,
        store_id: str,
        *,
        memory_id: str | None,
        operation: str | None,
        actor_filters: list[Actor],
        created_gte: str | None,
        created_lte: str | None,
        limit: int,
        page: str | None,
        full: bool,
    ) -> tuple[list[dict[str, Any]], str | None]:
        where = ["store_id = ?"]
        args: list[Any] = [store_id]
        if memory_id is not None:
            where.append("memory_id = ?")
            args.append(memory_id)
        if operation is not None:
            where.append("operation = ?")
            args.append(operation)
        for actor_type, actor_id in actor_filters:
            where.append("actor_type = ? AND actor_id = ?")
            args.extend((actor_type, actor_id))
        cols = _VER_FULL if full else _VER_BASIC
        sql = _newest_first("versions", cols, where, args, created_gte, created_lte, page)
        with self._read() as conn:
            self._store_row(conn, store_id)
            rows = conn.execute(sql, (*args, limit + 1)).fetchall()
        versions, next_page = _page_of("versions", [VersionRow.from_row(r) for r in rows], limit)
        return [v.wire(full) for v in versions], next_page

    def _version_row(self, conn: Conn, store_id: str, version_id: str) -> VersionRow:
        row = conn.execute(
            f"SELECT {_VER_FULL} FROM versions WHERE id = ? AND store_id = ?",
            (version_id, store_id),
        ).fetchone()
        if row is None:
            self._store_row(conn, store_id)
            raise errors.not_found(f"memory version {version_id} not found")
        return VersionRow.from_row(row)

    def get_version(self, store_id: str, version_id: str, *, full: bool) -> dict[str, Any]:
        with self._read() as conn:
            return self._version_row(conn, store_id, version_id).wire(full)

    def redact_version(self, store_id: str, version_id: str, actor: Actor) -> dict[str, Any]:
        """Null the content fields, keep the audit fields; never the head of a live memory.

        Redacting an already redacted version returns it unchanged (safe to retry).
        """
        with self._write(store_id) as conn:
            row = self._version_row(conn, store_id, version_id)
            if row.redacted_at is None:
                head = conn.execute(
                    "SELECT 1 FROM memories WHERE id = ? AND version_id = ?",
                    (row.memory_id, version_id),
                ).fetchone()
                if head is not None:
                    raise errors.conflict(
                        f"memory version {version_id} is the current version of memory "
                        f"{row.memory_id}; write a new version or delete the memory first"
                    )
                conn.execute(
                    "UPDATE versions SET content = NULL, path = NULL, sha = NULL, size = NULL, "
                    "redacted_at = ?, redactor_type = ?, redactor_id = ? WHERE id = ?",
                    (now(), *actor, version_id),
                )
                row = self._version_row(conn, store_id, version_id)
            return row.wire(True)
