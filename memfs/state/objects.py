"""The object store of one store's cache directory: clean contents named by sha256.

`objects/ab/abcdef…` holds each content once; only the daemon holding the cache
directory's `lock` reads, writes or collects them (memfs/state/cachegc.py). An object is
written in place and checked against its name when read: a torn or tampered one is not
content, and is fetched again.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

from cachetools import LRUCache

from memfs.config import private_dir
from memfs.paths import is_sha256_hex, sha256_hex

NOFOLLOW = os.O_NOFOLLOW | os.O_CLOEXEC
# A file memfs creates is new: never one someone planted (O_EXCL), never through a link.
NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | NOFOLLOW


def _read_nofollow(path: Path) -> bytes:
    with open(os.open(path, os.O_RDONLY | NOFOLLOW), "rb") as f:
        return f.read()


def unusable_why(e: OSError) -> str:
    """Why a path of the cache directory cannot be used, for its error message."""
    return "a symlink" if e.errno == errno.ELOOP else f"not usable ({e.strerror})"


class ObjectStore:
    """Immutable contents addressed by sha256, with an in-memory LRU in front."""

    def __init__(self, root: Path, *, memory_budget: int = 64 * 1024 * 1024) -> None:
        self.root = private_dir(root, "object directory")
        self._lru: LRUCache[str, bytes] = LRUCache(maxsize=memory_budget, getsizeof=len)
        # sha -> size of clean contents evicted on purpose (CacheDir loads the table).
        self.evicted: dict[str, int] = {}

    def _path(self, sha: str) -> Path:
        if not is_sha256_hex(sha):  # the name of a file we open, read and delete
            raise ValueError(f"not a sha256: {sha[:80]!r}")
        return self.root / sha[:2] / sha

    def has(self, sha: str) -> bool:
        return sha in self._lru or self._path(sha).exists()

    def get(self, sha: str, *, touch: bool = True) -> bytes | None:
        """The content, or None; `touch` marks it read (the collector evicts the least
        recently read first), which loading the journal at start does not."""
        data = self._lru.get(sha)
        if data is not None:
            return data
        try:
            data = _read_nofollow(self._path(sha))
        except FileNotFoundError:
            return None
        if sha256_hex(data) != sha:  # a torn or tampered object is not content
            self._path(sha).unlink(missing_ok=True)
            return None
        if touch:
            try:
                os.utime(self._path(sha))
            except OSError:
                pass
        self._remember(sha, data)
        return data

    def scan(self) -> list[tuple[str, int, float]]:
        """Every object file as (sha, size, mtime); for the collector's worker thread."""
        found: list[tuple[str, int, float]] = []
        try:
            shards = list(os.scandir(self.root))
        except FileNotFoundError:
            return found
        for shard in shards:
            if not shard.is_dir(follow_symlinks=False):
                continue
            with os.scandir(shard.path) as entries:
                for entry in entries:
                    if not is_sha256_hex(entry.name) or entry.name[:2] != shard.name:
                        continue
                    try:
                        st = entry.stat(follow_symlinks=False)
                    except FileNotFoundError:
                        continue
                    found.append((entry.name, st.st_size, st.st_mtime))
        return found

    def remove_files(self, shas: list[str]) -> int:
        """Delete object files; returns how many were there."""
        removed = 0
        for sha in shas:
            try:
                self._path(sha).unlink()
                removed += 1
            except FileNotFoundError:
                pass
        return removed

    def forget(self, sha: str) -> None:
        """Drop an evicted content from memory too (the event loop's side)."""
        self._lru.pop(sha, None)

    def write_files(self, items: list[tuple[str, bytes]]) -> None:
        """Create object files for `items` (sha, data); safe from a worker thread, since
        it touches only the file system, never the in-memory cache."""
        for sha, data in items:
            path = self._path(sha)
            try:
                fd = os.open(path, NEW_FILE, 0o600)
            except FileExistsError:
                continue
            except FileNotFoundError:
                path.parent.mkdir(mode=0o700, exist_ok=True)
                fd = os.open(path, NEW_FILE, 0o600)
            with open(fd, "wb") as f:
                f.write(data)

    def put(self, data: bytes, sha: str | None = None) -> str:
        sha = sha or sha256_hex(data)
        self.evicted.pop(sha, None)
        if sha in self._lru:
            return sha
        # Written in place, no temp file and rename (a cold start writes thousands):
        # a torn object fails the sha check in `get` and is fetched again.
        self.write_files([(sha, data)])
        self._remember(sha, data)
        return sha

    def _remember(self, sha: str, data: bytes) -> None:
        if len(data) <= self._lru.maxsize // 16:
            self._lru[sha] = data
