"""The SQLite backend of the store server: one file, a small pool of connections.

The API's rules are `Storage`'s (memfs/server/db.py); this module supplies connections
and transactions. Durability and atomicity come from SQLite itself:
- WAL with `synchronous=FULL`, so a write that was answered survives `kill -9`;
- writes run in `BEGIN IMMEDIATE`, so a precondition check and the write it guards are
  one atomic step even against another server process on the same file;
- an in-process lock queues this process's writers, so they do not busy-poll each other.

The file holds every memory in the clear, so it is private: created 0600 (SQLite gives
`-wal` and `-shm` the database file's mode) in directories memfs creates 0700.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import stat
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import cast

from memfs.paths import MAX_MEMORIES_PER_STORE
from memfs.server import migrations
from memfs.server.db import Conn, DatabaseUnavailable, Storage

log = logging.getLogger("memfs.server")


class Database(Storage):
    """One SQLite file, a small pool of connections: the embedded, single-host backend."""

    backend = "sqlite"
    inline_reads = True

    def __init__(self, path: Path, *, max_memories: int = MAX_MEMORIES_PER_STORE) -> None:
        super().__init__(max_memories=max_memories)
        self.path = path
        self._pool: list[sqlite3.Connection] = []
        self._pool_lock = threading.Lock()
        self._write_lock = threading.Lock()
        self._changed: Callable[[str | None], None] | None = None

    @classmethod
    def open(
        cls, path: Path, *, max_memories: int = MAX_MEMORIES_PER_STORE, migrate: bool = True
    ) -> Database:
        """Open (creating if needed), migrate, prove writable, or raise DatabaseUnavailable."""
        db = cls(path, max_memories=max_memories)
        try:
            _create_private(path)
            conn = db._connect()
        except (sqlite3.Error, OSError) as exc:
            raise DatabaseUnavailable(str(exc) or type(exc).__name__) from exc
        try:
            mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                raise DatabaseUnavailable(f"cannot switch the database to WAL mode ({mode})")
            conn.execute("BEGIN IMMEDIATE")
            current = _sqlite_schema_version(conn)
            migrations.bring_up(
                conn.execute, current, migrations.SQLITE_STEPS, migrate=migrate, placeholder="?"
            )
            conn.execute("COMMIT")
        except (sqlite3.Error, OSError) as exc:
            conn.close()
            raise DatabaseUnavailable(str(exc) or type(exc).__name__) from exc
        except migrations.SchemaTooNew as exc:
            conn.close()
            raise DatabaseUnavailable(str(exc)) from exc
        except DatabaseUnavailable:
            conn.close()
            raise
        db._release(conn)
        _warn_if_open_to_others(path)
        return db

    def describe(self) -> str:
        return str(self.path)

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(
            self.path, isolation_level=None, check_same_thread=False, timeout=30.0
        )
        conn.execute("PRAGMA synchronous=FULL")
        return conn

    def _acquire(self) -> sqlite3.Connection:
        with self._pool_lock:
            if self._pool:
                return self._pool.pop()
        return self._connect()

    def _release(self, conn: sqlite3.Connection) -> None:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        with self._pool_lock:
            self._pool.append(conn)

    def close(self) -> None:
        with self._pool_lock:
            pool, self._pool = self._pool, []
        for conn in pool:
            conn.close()

    @contextmanager
    def _read(self) -> Iterator[Conn]:
        conn = self._acquire()
        try:
            conn.execute("BEGIN")
            yield cast(Conn, conn)
            conn.execute("COMMIT")
        finally:
            self._release(conn)

    @contextmanager
    def _write(self, store_id: str | None = None) -> Iterator[Conn]:
        """`BEGIN IMMEDIATE` takes SQLite's one write lock, which covers every store."""
        with self._write_lock:
            conn = self._acquire()
            try:
                conn.execute("BEGIN IMMEDIATE")
                try:
                    yield cast(Conn, conn)
                except BaseException:
                    conn.execute("ROLLBACK")
                    raise
                conn.execute("COMMIT")
            finally:
                self._release(conn)
        if store_id is not None and self._changed is not None:
            self._changed(store_id)

    def follow_changes(self, changed: Callable[[str | None], None]) -> None:
        """One process holds the database's writers: its own commits are all there is."""
        self._changed = changed


def _create_private(path: Path) -> None:
    """Create missing directories 0700 and a new database file 0600 (never through a
    symlink); SQLite gives `-wal` and `-shm` the database file's mode."""
    missing = [p for p in (path.parent, *path.parent.parents) if not p.exists()]
    for directory in reversed(missing):
        directory.mkdir(mode=0o700, exist_ok=True)
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600))
    except FileExistsError:
        pass


def _warn_if_open_to_others(path: Path) -> None:
    """One warning for a database, `-wal` or `-shm` that group or others can open.

    Warned about, not refused: refusing would stop a server that ran for months on the
    old 0644 default at an upgrade, and the warning names the one fix.
    """
    open_to_others = []
    for name in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
        try:
            st = name.stat()
        except OSError:
            continue  # missing, or not reachable: opening it will say what is wrong
        mode = stat.S_IMODE(st.st_mode)
        if stat.S_ISREG(st.st_mode) and mode & 0o077:
            open_to_others.append(f"{name.name}:{mode:o}")
    if open_to_others:
        log.warning(
            "other users can read the database; chmod 600 its files db=%s files=%s",
            path,
            ",".join(open_to_others),
        )


def _sqlite_schema_version(conn: sqlite3.Connection) -> int:
    """0 for a new file; the first release wrote '1' without a migration history."""
    has_meta = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'meta'"
    ).fetchone()
    if has_meta is None:
        return 0
    row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    return int(row[0]) if row is not None else 0
