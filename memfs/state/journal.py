"""The journal of one store's local state: SQLite rows and the extent log beside them.

`journal.sqlite` holds one row per local file, directory or tombstone, the truth after a
crash; `extents.log` holds the changes of dirty files since their rows' bases, one
record per write (memfs/state/extents.py). A start replays the log into the bases; a
damaged record costs only itself, and the files that may have lost one are held back.

Synchronous on purpose: every call is a few local writes, and a journal update must be
on disk before the system call that caused it returns (invariant: nothing acknowledged
is lost to a `kill -9`). WAL with synchronous=NORMAL survives a killed process, and so
does a record `os.write`n to the extent log (it is in the page cache); an explicit
`fsync()` from the agent syncs the log and asks for a full checkpoint.
"""

from __future__ import annotations

import errno
import logging
import os
import sqlite3
import stat
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypedDict, Unpack

from memfs.errors import ConfigError
from memfs.paths import sha256_hex
from memfs.state import extents
from memfs.state.extents import TOUCH, TRUNCATE, WRITE, Lost, Record
from memfs.state.objects import NOFOLLOW, unusable_why

log = logging.getLogger("memfs.state")

EXTENT_LOG_NAME = "extents.log"

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS entries (
    entry_id    INTEGER PRIMARY KEY,
    path        TEXT UNIQUE,          -- current local path; NULL for a tombstone
    kind        TEXT NOT NULL,        -- 'file' | 'dir'
    memory_id   TEXT,                 -- remote identity, NULL until created
    base_sha    TEXT,                 -- remote sha at the last successful sync
    base_path   TEXT,                 -- remote path at the last successful sync
    sha         TEXT,                 -- current content sha when clean (object store)
    data        BLOB,                 -- current content when dirty
    dirty       INTEGER NOT NULL DEFAULT 0,
    mode        INTEGER NOT NULL,
    mtime_ns    INTEGER NOT NULL,
    sent_sha    TEXT,                 -- sha of an upload whose answer may be lost
    sent_path   TEXT,                 -- path of a create/rename whose answer may be lost
    refused_sha TEXT,                 -- content the server refused (400/413) or non-UTF-8
    refused_why TEXT,
    conflict    TEXT,                 -- path of the last conflict copy, if any
    -- the last extent-log sequence number `data` covers: replay applies the newer
    -- records of the row (memfs/state/extents.py)
    base_seq    INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS entries_memory ON entries(memory_id);
-- Clean contents the collector evicted under --cache-max-size: fetched again on demand,
-- never in the background; the size keeps st_size right while the bytes are away.
CREATE TABLE IF NOT EXISTS evicted (sha TEXT PRIMARY KEY, size INTEGER NOT NULL);
"""


@dataclass(slots=True)
class EntryRow:
    """One journal row, as loaded at start-up."""

    entry_id: int
    path: str | None
    kind: str
    memory_id: str | None
    base_sha: str | None
    base_path: str | None
    sha: str | None
    data: bytes | None
    dirty: bool
    mode: int
    mtime_ns: int
    sent_sha: str | None
    sent_path: str | None
    refused_sha: str | None
    refused_why: str | None
    conflict: str | None


_COLUMNS = (
    "entry_id, path, kind, memory_id, base_sha, base_path, sha, data, dirty, mode, mtime_ns,"
    " sent_sha, sent_path, refused_sha, refused_why, conflict"
)


def _disk_error(e: sqlite3.OperationalError) -> OSError | sqlite3.OperationalError:
    """SQLite's "database or disk is full" is the cache disk's ENOSPC; its I/O error EIO.

    As OSError they reach the writer as that errno (fs._guard) and count as a failed
    pass in the sync task, instead of an unexpected error that ends the mount.
    """
    code = getattr(e, "sqlite_errorcode", None)
    if code == sqlite3.SQLITE_FULL or "disk is full" in str(e):
        return OSError(errno.ENOSPC, f"cache disk full: {e}")
    if code is not None and code & 0xFF == sqlite3.SQLITE_IOERR:
        return OSError(errno.EIO, f"cache disk I/O error: {e}")
    return e


class _Db:
    """The journal's connection, with disk failures raised as OSError."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    @property
    def in_transaction(self) -> bool:
        return self._conn.in_transaction

    def execute(self, sql: str, params: Sequence[object] = ()) -> sqlite3.Cursor:
        try:
            return self._conn.execute(sql, params)
        except sqlite3.OperationalError as e:
            raise _disk_error(e) from e

    def executemany(self, sql: str, rows: Iterable[Sequence[object]]) -> sqlite3.Cursor:
        try:
            return self._conn.executemany(sql, rows)
        except sqlite3.OperationalError as e:
            raise _disk_error(e) from e

    def executescript(self, script: str) -> None:
        try:
            self._conn.executescript(script)
        except sqlite3.OperationalError as e:
            raise _disk_error(e) from e

    def close(self) -> None:
        self._conn.close()


class EntryFields(TypedDict, total=False):
    """The columns of an `entries` row a caller may set (the schema above): mypy checks
    every `Journal.insert`/`update` keyword against this, and `_check` at run time."""

    path: str | None
    memory_id: str | None
    base_sha: str | None
    base_path: str | None
    sha: str | None
    data: bytes | None
    dirty: int
    mode: int
    mtime_ns: int
    sent_sha: str | None
    sent_path: str | None
    refused_sha: str | None
    refused_why: str | None
    conflict: str | None


# The columns a caller may set: those of EntryFields (`kind` is set once, at insert).
_UPDATABLE = frozenset(EntryFields.__annotations__)


def _open_log(path: Path) -> int:
    """The extent log, appended to: never through a link, created 0600 where new."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_APPEND | NOFOLLOW)
    except FileNotFoundError:
        fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_EXCL | NOFOLLOW, 0o600)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(errno.EINVAL, "not a regular file", str(path))
    return fd


# Keeps a file's last good content as a conflict copy: (path, memory id, bytes) -> copy.
KeepCopy = Callable[[str, str | None, bytes], str]


def lost_records_why(offset: int, copied: bool) -> str:
    """Why a file whose extent-log records were damaged is held back (`refused_why`)."""
    kept = (
        "its last good content is kept as a conflict copy"
        if copied
        else "the damaged log is kept aside"
    )
    return f"changes to it were lost to damage in {EXTENT_LOG_NAME} (at byte {offset}); {kept}"


@dataclass(frozen=True)
class LogDamage:
    """What a start found damaged in the extent log (`Journal.damage`)."""

    offset: int  # the first damaged byte
    size: int  # damaged bytes, in all
    held: list[str]  # the files held back (refused), by path
    kept: Path | None  # where the damaged log now is


@dataclass
class _Replayed:
    """What one read of the extent log found (`Journal._replay`)."""

    start: int | None  # the sequence number the log's header says it follows
    top: int  # the highest sequence number seen
    replayed: dict[int, bytearray] = field(default_factory=dict)  # rows with records
    mtimes: dict[int, int] = field(default_factory=dict)
    # a row that may have lost a record: where the first was, its content before it
    good: dict[int, tuple[int, bytes]] = field(default_factory=dict)
    lost: list[Lost] = field(default_factory=list)
    torn: Lost | None = None
    records: int = 0


class Journal:
    """The SQLite journal of one store's local state, and the extent log beside it."""

    def __init__(
        self, path: Path, *, store_id: str = "", keep_copy: KeepCopy | None = None
    ) -> None:
        self.path = path
        self.damage: LogDamage | None = None
        self._db = _Db(sqlite3.connect(path, isolation_level=None, check_same_thread=False))
        log_path = path.with_name(EXTENT_LOG_NAME)
        try:
            self._log = _open_log(log_path)
        except OSError as e:
            self._db.close()
            raise ConfigError(
                f"cannot use cache directory {path.parent}: {log_path} is {unusable_why(e)}"
            ) from e
        self._log_size = 0
        self._broken = False  # a failed write left bytes the log could not take back
        self._logs: dict[int, int] = {}
        self._seq = 0
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(SCHEMA)
        self._migrate()
        row = self._db.execute("SELECT max(base_seq) FROM entries").fetchone()
        self._seq = int(row[0] or 0)
        try:
            self._recover(store_id, keep_copy)
        except OSError as e:
            self.close()
            raise ConfigError(
                f"cannot use cache directory {path.parent}: its {EXTENT_LOG_NAME} could not "
                f"be replayed ({e})"
            ) from e

    def _migrate(self) -> None:
        """Fold an older journal's `extents` table (one SQLite row per change) into
        its rows' bases, and drop it: the extent log replaces it."""
        columns = {r[1] for r in self._db.execute("PRAGMA table_info(entries)")}
        if "base_seq" not in columns:
            self._db.execute("ALTER TABLE entries ADD COLUMN base_seq INTEGER NOT NULL DEFAULT 0")
        table = "SELECT 1 FROM sqlite_master WHERE type='table' AND name='extents'"
        if self._db.execute(table).fetchone() is None:
            return
        old: dict[int, list[Record]] = {}
        for entry_id, seq, offset, payload, mtime_ns in self._db.execute(
            "SELECT entry_id, seq, offset, data, mtime_ns FROM extents ORDER BY seq"
        ):
            kind = TRUNCATE if payload is None else WRITE
            old.setdefault(entry_id, []).append(
                Record(kind, entry_id, seq, offset, mtime_ns, payload)
            )
        with self.transaction():
            self._rebase(old)
            self._db.execute("DROP TABLE extents")

    def _recover(self, store_id: str, keep_copy: KeepCopy | None) -> None:
        """Start from the log: replay its records into the bases, as a stream (what this
        holds is the dirty files' contents and one record), then empty it.

        A damaged record costs only itself (memfs/state/extents.py): the others are
        replayed, and a file that may have lost one is held back from the store (state
        `refused`, `lost_records_why`) with the content it had before the first it lost
        kept as a conflict copy (`keep_copy`); the damaged log is moved aside, never
        cut, and one warning names where and the files. Each new base, hold and copy is
        committed and checkpointed before the log goes, so a kill at any point loses
        nothing: the next start finds the records older than the new bases."""
        bases: dict[int, int] = {
            int(e): int(seq)
            for e, seq in self._db.execute(
                "SELECT entry_id, base_seq FROM entries WHERE data IS NOT NULL"
            )
        }
        self._logs = dict.fromkeys(bases, 0)
        size = os.fstat(self._log).st_size
        got = self._replay(bases)
        self._seq = got.top
        if got.torn is not None:
            log.info(
                "the extent log ended in a record cut short, as a power loss leaves it; "
                "dropped memory_store_id=%s offset=%d bytes=%d",
                store_id,
                got.torn.offset,
                got.torn.size,
            )
        if not got.records and not got.lost and got.torn is None:
            if size == 0:  # a new log
                self._write_header()
            elif got.start is None:  # a damaged header and nothing else
                self._compact()
            else:
                self._log_size = size
            return
        held = self._hold(got, keep_copy)
        try:
            with self.transaction():
                for e, content in got.replayed.items():
                    self._db.execute(
                        "UPDATE entries SET data=?, mtime_ns=coalesce(?, mtime_ns), base_seq=?"
                        " WHERE entry_id=?",
                        (bytes(content), got.mtimes.get(e), self._seq, e),
                    )
                for e, why, sha, copy in held:
                    self._db.execute(
                        "UPDATE entries SET refused_sha=?, refused_why=?,"
                        " conflict=coalesce(?, conflict) WHERE entry_id=?",
                        (sha, why, copy, e),
                    )
            self._db.execute("PRAGMA wal_checkpoint(FULL)")
        except OSError:
            if got.lost:
                raise  # a hold that cannot be written: no start that would push the files
            # A full cache disk: the log stays as it is, replayed by `rows`.
            self._load_logs(self._read_log())
            self._log_size = size
            return
        kept = self._keep_aside() if got.lost else None
        self._empty_log()
        if got.lost:
            paths = self._paths([e for e, _, _, _ in held])
            self.damage = LogDamage(got.lost[0].offset, sum(x.size for x in got.lost), paths, kept)
            log.warning(
                "the extent log is damaged: its good records were replayed, the files "
                "that may have lost one are held back from the store (refused) with their "
                "last good content kept as a conflict copy, and the damaged log is kept "
                "aside memory_store_id=%s offset=%d damaged_bytes=%d files=%s kept=%s",
                store_id,
                self.damage.offset,
                self.damage.size,
                ",".join(paths) or "none",
                kept,
            )

    def _replay(self, bases: Mapping[int, int]) -> _Replayed:
        """Read the log once, applying each record newer than its row's base."""
        start, items = extents.read(self._log)
        got = _Replayed(start, max(self._seq, start or 0))
        ids: range | None = None  # every id a row has or had, if a record's file is unknown
        for item in items:
            if isinstance(item, Lost):
                got.top = max(got.top, item.seq or 0, (item.before or 1) - 1)
                if item.torn:
                    got.torn = item
                    continue
                got.lost.append(item)
                if ids is None:  # a deleted row's id: at most the highest, or a little past
                    top_id = self._db.execute("SELECT max(entry_id) FROM entries").fetchone()
                    ids = range(1, int(top_id[0] or 0) + 64)
                for e in item.owners(bases, ids):
                    if e not in got.good:
                        content = got.replayed.get(e)
                        data = self._base(e) if content is None else bytes(content)
                        got.good[e] = (item.offset, data)
                continue
            got.records += 1
            got.top = max(got.top, item.seq)
            if item.seq <= bases.get(item.entry_id, item.seq):
                continue  # older than its row's base, or its row holds none
            content = got.replayed.get(item.entry_id)
            if content is None:
                content = got.replayed[item.entry_id] = bytearray(self._base(item.entry_id))
            if item.kind != TOUCH:
                extents.apply(content, item.offset, item.payload)
            got.mtimes[item.entry_id] = item.mtime_ns
        return got

    def _hold(
        self, got: _Replayed, keep_copy: KeepCopy | None
    ) -> list[tuple[int, str, str, str | None]]:
        """Each file that may have lost a record: (row, why it is held, the sha of the
        content it is held with, its conflict copy), the copy saved first (a copy that
        cannot be saved is logged: the log kept aside still holds the bytes)."""
        held: list[tuple[int, str, str, str | None]] = []
        for e, (offset, data) in sorted(got.good.items()):
            row = self._db.execute(
                "SELECT path, memory_id FROM entries WHERE entry_id=?", (e,)
            ).fetchone()
            path, memory_id = (None, None) if row is None else row
            copy = None
            if keep_copy is not None and path is not None and not path.startswith("\0"):
                try:
                    copy = keep_copy(path, memory_id, data)
                except OSError as err:
                    log.warning(
                        "could not keep the last good content of a file damaged in the "
                        "extent log path=%s error=%s",
                        path,
                        err,
                    )
            content = got.replayed.get(e)
            sha = sha256_hex(self._base(e) if content is None else bytes(content))
            held.append((e, lost_records_why(offset, copy is not None), sha, copy))
        return held

    def _paths(self, entry_ids: list[int]) -> list[str]:
        paths = []
        for e in entry_ids:
            row = self._db.execute("SELECT path FROM entries WHERE entry_id=?", (e,)).fetchone()
            paths.append(f"(unlinked {e})" if row is None or row[0] is None else str(row[0]))
        return sorted(paths)

    def _base(self, entry_id: int) -> bytes:
        row = self._db.execute("SELECT data FROM entries WHERE entry_id=?", (entry_id,)).fetchone()
        return b"" if row is None or row[0] is None else bytes(row[0])

    def _keep_aside(self) -> Path:
        """Move the damaged log aside (a new empty one takes its place): the bytes
        stay, for recovery by hand."""
        log_path = self.path.with_name(EXTENT_LOG_NAME)
        stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
        aside = log_path.with_name(f"{EXTENT_LOG_NAME}.damaged-{stamp}")
        n = 1
        while aside.exists():
            n += 1
            aside = log_path.with_name(f"{EXTENT_LOG_NAME}.damaged-{stamp}-{n}")
        os.rename(log_path, aside)
        old, self._log = self._log, _open_log(log_path)
        os.close(old)
        return aside

    def _empty_log(self) -> None:
        """Empty the log and write its header (the sequence number its records follow).
        A header that cannot be written leaves the log empty, which reads the same."""
        os.ftruncate(self._log, 0)
        self._log_size = 0
        self._broken = False
        self._write_header()

    def _write_header(self) -> None:
        header = extents.log_header(self._seq)
        try:
            if os.write(self._log, header) == len(header):
                self._log_size = len(header)
                return
        except OSError:
            pass
        try:
            os.ftruncate(self._log, 0)
        except OSError:
            self._broken = True

    def _read_log(self) -> list[Record]:
        """The log's records (those that check), read again while running."""
        return [r for r in extents.read(self._log)[1] if isinstance(r, Record)]

    def _live(self, records: list[Record]) -> dict[int, list[Record]]:
        """Every row holding a base, with the records newer than it, in order."""
        live: dict[int, list[Record]] = {}
        based: dict[int, int] = {}
        for entry_id, base_seq in self._db.execute(
            "SELECT entry_id, base_seq FROM entries WHERE data IS NOT NULL"
        ):
            live[entry_id], based[entry_id] = [], base_seq
        for r in records:
            if r.seq > based.get(r.entry_id, r.seq):
                live[r.entry_id].append(r)
        return live

    def _load_logs(self, records: list[Record]) -> None:
        """Which rows hold a base a record may follow, and the cost of their records."""
        self._logs = {
            entry_id: sum(extents.cost(r.payload) for r in rs)
            for entry_id, rs in self._live(records).items()
        }

    def _reload_logs(self) -> None:
        """After a rollback: what the rows' bases are again. A row missing from `_logs`
        (if even this fails) rewrites its whole content at its next change, always safe."""
        self._logs = {}
        try:
            self._load_logs(self._read_log())
        except (OSError, sqlite3.Error):
            pass

    def _rebase(self, live: Mapping[int, list[Record]]) -> None:
        """Rewrite the base of each row in `live` with its records applied."""
        for entry_id, records in live.items():
            if not records:
                continue
            row = self._db.execute(
                "SELECT data FROM entries WHERE entry_id=?", (entry_id,)
            ).fetchone()
            if row is None or row[0] is None:
                continue
            data, mtime_ns = extents.replay(row[0], records)
            self._db.execute(
                "UPDATE entries SET data=?, mtime_ns=?, base_seq=? WHERE entry_id=?",
                (data, mtime_ns, self._seq, entry_id),
            )
            self._logs[entry_id] = 0

    def _compact(self) -> None:
        """Fold every record into its row's base, then empty the log. The new bases are
        committed and synced first, so a kill (or a power loss) at any point loses
        nothing: until the log is emptied, replay finds its records older than them."""
        if self._db.in_transaction:
            raise ValueError("the extent log cannot be compacted inside a transaction")
        with self.transaction():
            self._rebase(self._live(self._read_log()))
        self._db.execute("PRAGMA wal_checkpoint(FULL)")
        self._empty_log()

    def _add(
        self, kind: int, entry_id: int, offset: int, payload: bytes | None, mtime_ns: int
    ) -> None:
        """Append one record with one `os.write`: in the page cache when it returns, so it
        survives a killed daemon. A failed write is taken back (ftruncate), so a record
        never follows garbage; if even that fails, the log is compacted before the next."""
        if self._db.in_transaction:
            raise ValueError("a record cannot join a transaction: a rollback would keep it")
        record = extents.encode(Record(kind, entry_id, self._seq + 1, offset, mtime_ns, payload))
        if self._broken or self._log_size + len(record) > extents.LOG_FILE_MAX:
            self._compact()
        try:
            written = os.write(self._log, record)
            if written != len(record):
                raise OSError(errno.ENOSPC, "cache disk full: a short write to the extent log")
        except OSError:
            try:
                os.ftruncate(self._log, self._log_size)
            except OSError:
                self._broken = True
            raise
        self._seq += 1
        self._log_size += written
        self._logs[entry_id] += extents.cost(payload)

    def close(self) -> None:
        self._db.close()
        os.close(self._log)

    # meta -------------------------------------------------------------------------
    def get_meta(self, key: str) -> str | None:
        row = self._db.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
        return None if row is None else str(row[0])

    def set_meta(self, key: str, value: str) -> None:
        self._db.execute("INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)", (key, value))

    # entries ----------------------------------------------------------------------
    def rows(self) -> Iterator[EntryRow]:
        """Every row, a dirty file's content with its records replayed (kill -9 recovery)."""
        live = self._live(self._read_log())
        for r in self._db.execute(f"SELECT {_COLUMNS} FROM entries ORDER BY path"):
            values = list(r)
            values[8] = bool(values[8])
            row = EntryRow(*values)
            records = live.get(row.entry_id)
            if records and row.data is not None:
                row.data, mtime_ns = extents.replay(row.data, records)
                row.mtime_ns = mtime_ns or row.mtime_ns
            yield row

    def is_empty(self) -> bool:
        return self._db.execute("SELECT 1 FROM entries LIMIT 1").fetchone() is None

    def insert(self, *, kind: str, **fields: Unpack[EntryFields]) -> int:
        """A new row; `path` (None: a tombstone), `mode` and `mtime_ns` are required."""
        missing = {"path", "mode", "mtime_ns"} - set(fields)
        if missing:
            raise ValueError(f"a journal row needs {sorted(missing)}")
        self._check(fields)
        names = ["kind", "base_seq", *fields]
        cur = self._db.execute(
            f"INSERT INTO entries({', '.join(names)}) VALUES ({', '.join('?' * len(names))})",
            (kind, self._seq, *fields.values()),
        )
        assert cur.lastrowid is not None  # a reused id's old records are older than its base
        self._rebased(cur.lastrowid, fields.get("data"))
        return cur.lastrowid

    def update(self, entry_id: int, **fields: Unpack[EntryFields]) -> None:
        """Set columns; setting `data` (a new base, or None) drops the row's records."""
        self._check(fields)
        touch = "data" not in fields and "mtime_ns" in fields and bool(self._logs.get(entry_id))
        if touch and self._db.in_transaction:  # replay takes the last record's time
            self._rebase({entry_id: self._live(self._read_log()).get(entry_id, [])})
            touch = False
        values: dict[str, object] = dict(fields)
        if "data" in fields:
            values["base_seq"] = self._seq
        sets = ", ".join(f"{k}=?" for k in values)
        self._db.execute(
            f"UPDATE entries SET {sets} WHERE entry_id=?", (*values.values(), entry_id)
        )
        if "data" in fields:
            self._rebased(entry_id, fields["data"])
        elif touch:
            self._add(TOUCH, entry_id, 0, None, fields["mtime_ns"])

    def _rebased(self, entry_id: int, data: bytes | None) -> None:
        if data is None:
            self._logs.pop(entry_id, None)
        else:
            self._logs[entry_id] = 0

    def logged(self, entry_id: int) -> int | None:
        """The cost of the row's records (memfs/state/extents.py), or None if the row
        holds no base to append to, or a transaction is open (a rollback could not take a
        record back): the next change must set `data`."""
        return None if self._db.in_transaction else self._logs.get(entry_id)

    def append(self, entry_id: int, offset: int, payload: bytes | None, mtime_ns: int) -> None:
        """Log one change after the row's base: a write of `payload` at `offset`, or with
        `payload` None a truncate to `offset` bytes. One small record, whatever the size."""
        if self.logged(entry_id) is None:
            raise ValueError(f"journal row {entry_id} holds no base to log a change after")
        self._add(TRUNCATE if payload is None else WRITE, entry_id, offset, payload, mtime_ns)

    def delete(self, entry_id: int) -> None:
        self._db.execute("DELETE FROM entries WHERE entry_id=?", (entry_id,))
        self._logs.pop(entry_id, None)

    def referenced_shas(self) -> set[str]:
        """Every sha a row names: content (clean) and the baseline (last synced)."""
        shas: set[str] = set()
        for sha, base in self._db.execute("SELECT sha, base_sha FROM entries"):
            shas.update(s for s in (sha, base) if s)
        return shas

    def evicted(self) -> dict[str, int]:
        return {
            str(sha): int(size) for sha, size in self._db.execute("SELECT sha, size FROM evicted")
        }

    def set_evicted(self, added: dict[str, int], dropped: set[str]) -> None:
        with self.transaction():
            self._db.executemany(
                "INSERT OR REPLACE INTO evicted(sha, size) VALUES (?, ?)", list(added.items())
            )
            self._db.executemany("DELETE FROM evicted WHERE sha=?", [(s,) for s in dropped])

    def transaction(self) -> _Transaction:
        return _Transaction(self._db, self._reload_logs)

    def checkpoint(self) -> None:
        """Make everything so far durable against power loss too (the agent's fsync)."""
        os.fsync(self._log)
        self._db.execute("PRAGMA wal_checkpoint(FULL)")

    @staticmethod
    def _check(fields: Mapping[str, object]) -> None:
        unknown = set(fields) - _UPDATABLE
        if unknown:
            raise ValueError(f"unknown journal columns: {sorted(unknown)}")


class _Transaction:
    """BEGIN … COMMIT (ROLLBACK on an exception). Nested use joins the outer one, so a
    caller may batch many journal writes (a big pull) around code that has its own."""

    def __init__(self, db: _Db, rolled_back: Callable[[], None]) -> None:
        self._db = db
        self._rolled_back = rolled_back  # what the caller knows of the rows is stale
        self._outer = False

    def __enter__(self) -> None:
        self._outer = not self._db.in_transaction
        if self._outer:
            self._db.execute("BEGIN")

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if not self._outer:
            return
        if exc_type is not None:
            try:
                self._db.execute("ROLLBACK")
            finally:
                self._rolled_back()
            return
        try:
            self._db.execute("COMMIT")
        except BaseException:
            try:
                if self._db.in_transaction:  # a COMMIT that failed (disk full) stays open
                    self._db.execute("ROLLBACK")
            finally:
                self._rolled_back()
            raise
