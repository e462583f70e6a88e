"""PostgreSQL backend: many stateless `memfs serve` instances on one database.

The rules live in `Storage`; this supplies what makes them hold across processes:
- every write transaction first takes `SELECT … FOR UPDATE` on its store's row, so the
  checks that follow (precondition, path overlap, the cap) see every commit before it and
  no other instance can commit to that store until this one ends;
- the per-store version clock (`stores.last_version_at`) is read and advanced under that
  lock, so version order is commit order (sequences alone are allocated before commit
  and could let a later commit sort below a "newest" a reader already saw);
- listings read in one REPEATABLE READ snapshot;
- that same lock statement sends `NOTIFY memfs_store, '<store id>'`, delivered to every
  instance's one LISTEN connection when (and only if) the write commits: the watch's
  wake-up across instances (memfs/server/watch.py);
- connection trouble is a 503 the client retries, never a crash.

psycopg's async API is asyncio-only and the server runs on trio, so this is the sync pool,
called from trio worker threads like the SQLite backend.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, cast
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import psycopg
from psycopg.adapt import Loader
from psycopg_pool import ConnectionPool, PoolTimeout

from memfs.paths import MAX_MEMORIES_PER_STORE
from memfs.server import errors, migrations
from memfs.server.db import Conn, Cursor, DatabaseUnavailable, Storage

_MIGRATION_LOCK = 0x6D656D6673  # "memfs": one instance migrates, the others wait
_PLACEHOLDER = re.compile(r"\?")
CHANNEL = "memfs_store"  # NOTIFY's channel; the payload is the store's id
_LISTEN_BACKOFF_MAX = 30.0

log = logging.getLogger("memfs.server")


class _TextFromBytea(Loader):
    """Content is stored as UTF-8 BYTEA (text cannot hold NUL) and read back as str.

    PostgreSQL sends BYTEA in text results as `\\x` + hex (bytea_output=hex, the default,
    pinned per connection in `_configure`)."""

    def load(self, data: Any) -> Any:
        raw = bytes(data)
        return bytes.fromhex(raw[2:].decode("ascii")).decode("utf-8")


def _configure(conn: psycopg.Connection[Any]) -> None:
    conn.execute("SET bytea_output = hex")
    conn.adapters.register_loader("bytea", _TextFromBytea)


class _PgConn:
    """`?` placeholders in, psycopg cursors out: the `Conn` the rules are written for."""

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self.conn = conn

    def execute(self, sql: str, args: Sequence[Any] = ()) -> Cursor:
        query = _PLACEHOLDER.sub("%s", sql.replace("%", "%%"))
        return cast(Cursor, self.conn.execute(query, tuple(args), prepare=True))


def redact_url(url: str) -> str:
    """The URL without its password (in the user info or `?password=`), for logs."""
    parts = urlsplit(url)
    if parts.password is not None:
        netloc = parts.netloc.rsplit("@", 1)
        userinfo = netloc[0].split(":", 1)[0] + ":***"
        parts = parts._replace(netloc=f"{userinfo}@{netloc[1]}")
    query = parse_qsl(parts.query, keep_blank_values=True)
    if any(k == "password" for k, _ in query):
        hidden = [(k, "***" if k == "password" else v) for k, v in query]
        parts = parts._replace(query=urlencode(hidden, safe="*"))
    return urlunsplit(parts)


def carries_password(url: str) -> bool:
    """A password in the URL itself, which `ps` shows to every local user."""
    parts = urlsplit(url)
    return parts.password is not None or any(
        k == "password" for k, _ in parse_qsl(parts.query, keep_blank_values=True)
    )


def _unavailable(exc: Exception) -> errors.ApiError:
    first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    return errors.ApiError(503, "api_error", f"the database is unavailable: {first}")


class PostgresDatabase(Storage):
    backend = "postgresql"
    inline_reads = False

    def __init__(
        self, url: str, *, max_memories: int = MAX_MEMORIES_PER_STORE, pool_size: int = 8
    ) -> None:
        super().__init__(max_memories=max_memories)
        self.url = url
        self.pool = ConnectionPool(
            url,
            min_size=1,
            max_size=max(1, pool_size),
            kwargs={"autocommit": True},
            configure=_configure,
            check=ConnectionPool.check_connection,
            timeout=5.0,
            open=False,
            name="memfs",
        )
        self._closing = threading.Event()
        self._listener: threading.Thread | None = None

    @classmethod
    def open(
        cls,
        url: str,
        *,
        max_memories: int = MAX_MEMORIES_PER_STORE,
        pool_size: int = 8,
        migrate: bool = True,
    ) -> PostgresDatabase:
        """Connect, migrate (one instance at a time), or raise DatabaseUnavailable."""
        db = cls(url, max_memories=max_memories, pool_size=pool_size)
        try:
            conn = psycopg.connect(url, autocommit=True, connect_timeout=10)
        except psycopg.Error as exc:
            raise DatabaseUnavailable(_unavailable(exc).message) from exc
        try:
            with conn.transaction():
                conn.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
                current = _pg_schema_version(conn)
                migrations.bring_up(
                    conn.execute,
                    current,
                    migrations.POSTGRES_STEPS,
                    migrate=migrate,
                    placeholder="%s",
                )
        except migrations.SchemaTooNew as exc:
            raise DatabaseUnavailable(str(exc)) from exc
        except psycopg.Error as exc:
            raise DatabaseUnavailable(_unavailable(exc).message) from exc
        finally:
            conn.close()
        try:
            db.pool.open(wait=True, timeout=10.0)
        except PoolTimeout as exc:
            db.pool.close()
            raise DatabaseUnavailable("cannot open the connection pool") from exc
        return db

    def describe(self) -> str:
        return redact_url(self.url)

    def _blob(self, content: str) -> Any:
        return content.encode("utf-8")

    def close(self) -> None:
        self._closing.set()
        self.pool.close()
        if self._listener is not None:
            self._listener.join(timeout=5.0)

    def follow_changes(self, changed: Callable[[str | None], None]) -> None:
        """One LISTEN connection for this instance, on a thread of its own; it waits in
        the socket (no query while idle) and hands each NOTIFY's store id to `changed`."""
        if self._listener is None:
            self._listener = threading.Thread(
                target=self._listen, args=(changed,), name="memfs-listen", daemon=True
            )
            self._listener.start()

    def _listen(self, changed: Callable[[str | None], None]) -> None:
        failures = 0
        while not self._closing.is_set():
            try:
                with psycopg.connect(self.url, autocommit=True, connect_timeout=10) as conn:
                    conn.execute(f"LISTEN {CHANNEL}")
                    if failures:
                        log.info("watch wake-ups reconnected failures=%d", failures)
                        changed(None)  # commits while away went unheard
                    failures = 0
                    while not self._closing.is_set():
                        for note in conn.notifies(timeout=1.0):
                            changed(note.payload)
            except psycopg.Error as exc:
                failures += 1
                if failures == 1:
                    log.warning(
                        "watch wake-ups lost the database; watches wait for their timeout "
                        "until it is back error=%s",
                        _unavailable(exc).message,
                    )
                changed(None)
                self._closing.wait(min(_LISTEN_BACKOFF_MAX, 0.5 * 2**failures))

    def ping(self) -> None:
        """A pooled connection within 3 s that answers `SELECT 1`, for /readyz."""
        try:
            with self.pool.connection(timeout=3.0) as conn:
                conn.execute("SELECT 1").fetchone()
        except (psycopg.Error, PoolTimeout) as exc:
            raise DatabaseUnavailable(_unavailable(exc).message) from exc

    @contextmanager
    def _connection(self) -> Iterator[psycopg.Connection[Any]]:
        try:
            with self.pool.connection() as conn:
                yield conn
        except (psycopg.OperationalError, psycopg.InterfaceError, PoolTimeout) as exc:
            raise _unavailable(exc) from exc

    @contextmanager
    def _read(self) -> Iterator[Conn]:
        with self._connection() as conn, conn.transaction():
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            yield _PgConn(conn)

    @contextmanager
    def _write(self, store_id: str | None = None) -> Iterator[Conn]:
        with self._connection() as conn, conn.transaction():
            if store_id is not None:
                conn.execute(
                    "SELECT pg_notify(%s, id) FROM stores WHERE id = %s FOR UPDATE",
                    (CHANNEL, store_id),
                )
            yield _PgConn(conn)


def _pg_schema_version(conn: psycopg.Connection[Any]) -> int:
    row = conn.execute("SELECT to_regclass('meta') IS NOT NULL").fetchone()
    if row is None or not row[0]:
        return 0
    found = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    return int(found[0]) if found is not None else 0
