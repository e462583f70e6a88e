"""One store's cache directory: its layout, its lock, and what it keeps besides the
journal (conflict copies).

Layout of a cache directory (one per store):

    objects/ab/abcdef…      clean contents, named by sha256 (memfs/state/objects.py);
                            only the daemon holding `lock` reads, writes or collects
                            them (memfs/state/cachegc.py)
    journal.sqlite          one row per local file, directory or tombstone; the truth
                            after a crash (memfs/state/journal.py)
    extents.log             the changes of dirty files since their rows' bases, one
                            record per write (memfs/state/extents.py)
    extents.log.damaged-…   a log a start found damaged, kept aside for recovery by hand
    conflicts/              losing local bytes from store-wins conflicts, each with a
                            hidden `.<copy>.json` record (memfs/state/conflicts.py)
    audit.jsonl[.N]         the audit trail of accepted changes (memfs/audit.py)
    lock                    flock'd by the live daemon: one daemon per directory
"""

from __future__ import annotations

import errno
import fcntl
import os
import time
from pathlib import Path

from memfs.audit import TRAIL_NAME
from memfs.config import private_dir
from memfs.errors import ConfigError
from memfs.paths import sha256_hex
from memfs.state import conflicts
from memfs.state.journal import Journal
from memfs.state.objects import NEW_FILE, NOFOLLOW, ObjectStore, unusable_why

JOURNAL_NAME = "journal.sqlite"
LISTED_META = "listed_at"  # journal meta: when a start last merged the store's listing


class CacheDir:
    """One store's cache directory, locked for the lifetime of one daemon."""

    def __init__(self, root: Path, store_id: str) -> None:
        self.root = root
        # Unpushed bytes and pulled contents live here: private to the mounting user,
        # whatever the mount itself shows to others; nothing in it is a symlink.
        private_dir(root, "cache directory")
        try:
            self._lock_fd = os.open(root / "lock", os.O_RDWR | os.O_CREAT | NOFOLLOW, 0o600)
            for name in (JOURNAL_NAME, JOURNAL_NAME + "-wal", JOURNAL_NAME + "-shm", TRAIL_NAME):
                if os.path.islink(root / name):  # SQLite would follow it; a trail is skipped
                    raise OSError(errno.ELOOP, "a symlink", str(root / name))
        except OSError as e:
            raise ConfigError(
                f"cannot use cache directory {root}: {e.filename or root} is {unusable_why(e)}"
            ) from e
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self._lock_fd)
            raise ConfigError(
                f"cache directory {root} is in use by another memfs daemon; "
                "give each mount its own --cache-dir"
            ) from None
        try:
            self.objects = ObjectStore(root / "objects")
            self.conflicts = private_dir(root / "conflicts", "conflict directory")
        except ConfigError:
            os.close(self._lock_fd)
            raise
        try:
            self.journal = Journal(
                root / JOURNAL_NAME,
                store_id=store_id,
                keep_copy=lambda path, memory_id, data: self._keep_damaged(
                    store_id, path, memory_id, data
                ),
            )
        except ConfigError:
            os.close(self._lock_fd)
            raise
        self.objects.evicted = self.journal.evicted()
        known = self.journal.get_meta("memory_store_id")
        if known is None:
            self.journal.set_meta("memory_store_id", store_id)
        elif known != store_id:
            self.close()
            raise ConfigError(f"cache directory {root} belongs to store {known}, not {store_id}")

    def never_synced(self) -> bool:
        """No start ever merged the store's listing here, and nothing is journaled."""
        return self.journal.get_meta(LISTED_META) is None and self.journal.is_empty()

    def mark_listed(self, at: str) -> None:
        """A start merged the store's listing: this cache can serve an offline start."""
        self.journal.set_meta(LISTED_META, at)

    def save_conflict(self, path: str, data: bytes) -> Path:
        """Keep the losing bytes of a conflict; returns where they are."""
        stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
        flat = path.strip("/").replace("/", "__")
        if len(flat.encode()) > 180:  # a memory path may be 1,024 bytes; a file name 255
            tail = flat.encode()[-120:].decode("utf-8", "ignore")
            flat = f"{sha256_hex(path.encode())[:16]}-{tail}"
        target = self.conflicts / f"{stamp}-{flat}"
        n = 1
        while target.exists():
            n += 1
            target = self.conflicts / f"{stamp}-{n}-{flat}"
        tmp = target.with_name("." + target.name + ".tmp")
        tmp.unlink(missing_ok=True)
        with open(os.open(tmp, NEW_FILE, 0o600), "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
        return target

    def _keep_damaged(self, store_id: str, path: str, memory_id: str | None, data: bytes) -> str:
        """Keep the last good content of a file whose extent-log records were damaged,
        listed by `memfs conflicts` like any conflict copy."""
        copy = self.save_conflict(path, data)
        conflicts.record(
            store_id,
            copy,
            path=path,
            memory_id=memory_id,
            local_sha=sha256_hex(data),
            size=len(data),
            remote_sha=None,
            remote_version="",
        )
        return str(copy)

    def close(self) -> None:
        self.journal.close()
        os.close(self._lock_fd)
