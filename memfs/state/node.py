"""A node of the namespace: a file, a directory or the marker, and the rules for names.

Plain data: `Node` carries what the kernel, the journal and the sync engine know of
one entry. Only `StoreState` (memfs/state/store_state.py) and its sync half
(`SyncRecords`, memfs/state/records.py) write its fields; a file's `size` and `linked`
keep the `usage` totals of its tree (the mount's one store) as they change. The inode
table (`Tree`, memfs/state/tree.py) counts its lookups. The checks here turn a name from
the kernel into one the API accepts, or an errno.
"""

from __future__ import annotations

import errno
import stat
from dataclasses import dataclass
from enum import Enum
from typing import Literal

from memfs.errors import FsError
from memfs.paths import (
    MAX_PATH_BYTES,
    MAX_PATH_SEGMENTS,
    NAME_MAX,
    PathRejected,
    check_segment,
    sha256_hex,
)

# A file's sync state, as xattrs (`user.memfs.state`), status and history show it.
FileState = Literal["clean", "dirty", "refused", "conflict", "pending-delete"]
FILE_MODE = 0o644
DIR_MODE = 0o755


class Kind(Enum):
    DIR = "dir"
    FILE = "file"
    MARKER = "marker"


@dataclass
class Usage:
    """Running totals of a store's linked files, kept by `Node` as they change."""

    files: int = 0
    bytes: int = 0


class Node:
    """A file, directory or the marker. File fields are unused on directories."""

    __slots__ = (
        "_linked",
        "_size",
        "atime_ns",
        "base_path",
        "base_sha",
        "children",
        "closed_at",
        "closed_ns",
        "conflict",
        "ctime_ns",
        "data",
        "dirty",
        "dirty_since",
        "entry_id",
        "ino",
        "kind",
        "lookups",
        "memory_id",
        "mode",
        "mtime_ns",
        "name",
        "open_handles",
        "open_writers",
        "parent",
        "refused_sha",
        "refused_why",
        "retries",
        "retry_at",
        "sent_path",
        "sent_sha",
        "sha",
        "truncated_ns",
        "usage",
        "version",
    )

    def __init__(
        self,
        ino: int,
        kind: Kind,
        name: str,
        parent: Node | None,
        usage: Usage,
        mode: int,
        mtime_ns: int,
    ) -> None:
        self.ino = ino
        self.kind = kind
        self.name = name
        self.parent = parent
        self.usage = usage  # the totals of the tree this node is in
        self.children: dict[str, Node] | None = {} if kind is Kind.DIR else None
        self.mode = mode
        self.mtime_ns = self.ctime_ns = self.atime_ns = mtime_ns
        self.entry_id: int | None = None
        self.data: bytearray | None = None  # authoritative content when set
        self.sha: str | None = None  # content sha when `data` is None
        self._size = 0
        self._linked = True
        if kind is Kind.FILE:
            usage.files += 1
        self.dirty = False
        self.dirty_since: float | None = None
        # The last close of a writer while dirty (monotonic): closed since `dirty_since`,
        # the file was written and closed, then opened again (an appender's stream).
        self.closed_at: float | None = None
        # The last close of a writer (time.time_ns()), on a mount that sees closes but
        # counts no opens (zero-message opens with a close watch): a write after it is
        # a write of a new open, and a truncate after it a rewrite still under way.
        self.closed_ns = 0
        # The last truncate (time.time_ns()): with a writer open, a rewrite may be half
        # done (vim's O_TRUNC, then write), which a pull must not merge (`Lander.busy`).
        self.truncated_ns = 0
        self.memory_id: str | None = None
        self.base_sha: str | None = None
        self.base_path: str | None = None
        self.sent_sha: str | None = None
        self.sent_path: str | None = None
        self.refused_sha: str | None = None
        self.refused_why: str | None = None
        # A transient refusal (the store was full): retried at `retry_at` (time.time()),
        # the `retries`-th time; None for a permanent one, which waits for new content.
        # Kept in memory only: a restart retries at once.
        self.retry_at: float | None = None
        self.retries = 0
        self.conflict: str | None = None
        self.version = 0
        self.lookups = 0
        self.open_handles = 0
        self.open_writers = 0

    # A linked file's size and linkage are counted in its tree's `usage` as they
    # change, so `statfs` (df) reads running totals instead of walking every file.
    @property
    def size(self) -> int:
        return self._size

    @size.setter
    def size(self, value: int) -> None:
        if self._linked and self.kind is Kind.FILE:
            self.usage.bytes += value - self._size
        self._size = value

    @property
    def linked(self) -> bool:
        """False once unlinked (a tombstone, or open after its unlink)."""
        return self._linked

    @linked.setter
    def linked(self, value: bool) -> None:
        if value != self._linked and self.kind is Kind.FILE:
            sign = 1 if value else -1
            self.usage.files += sign
            self.usage.bytes += sign * self._size
        self._linked = value

    @property
    def is_dir(self) -> bool:
        return self.kind is Kind.DIR

    def state_name(self) -> FileState:
        """The sync state shown in xattrs and status."""
        if self.kind is not Kind.FILE:
            return "clean"
        if not self.linked:
            return "pending-delete"
        if self.refused_sha is not None and self.refused_sha == self.current_sha():
            return "refused"
        if self.dirty or (self.base_path is not None and self.base_path != self.store_path()):
            return "dirty"
        if self.memory_id is None:
            return "dirty"
        if self.conflict:
            return "conflict"
        return "clean"

    def current_sha(self) -> str | None:
        if self.data is not None:
            return sha256_hex(bytes(self.data))
        return self.sha

    def store_path(self) -> str:
        """Path inside the mount's store, as the API names it ('/a/b.md'): the names up
        to the root (a mount serves one store, rooted at the mount root)."""
        parts: list[str] = []
        node = self
        while node.parent is not None:
            parts.append(node.name)
            node = node.parent
        return "/" + "/".join(reversed(parts))


def check_length(raw: bytes) -> None:
    """NAME_MAX, as on any local filesystem (the API itself allows 1,023 bytes)."""
    if len(raw) > NAME_MAX:
        raise FsError(errno.ENAMETOOLONG, f"file name is longer than {NAME_MAX} bytes")


def check_name(raw: bytes) -> str:
    """Decode a name from the kernel and apply the API's segment rules."""
    check_length(raw)
    try:
        name = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise FsError(errno.EINVAL, "file name is not UTF-8") from None
    try:
        check_segment(name)
    except PathRejected as e:
        raise FsError(errno.ENAMETOOLONG if e.too_long else errno.EINVAL, e.reason) from None
    return name


def check_depth(path: str, *, is_dir: bool) -> None:
    """Refuse a path the API could never store: too long, or too deep."""
    segments = path.count("/")
    if len(path.encode("utf-8")) > MAX_PATH_BYTES:
        raise FsError(errno.ENAMETOOLONG, "path is longer than 1024 bytes")
    # A directory at the last allowed depth could hold nothing the API accepts.
    if segments > MAX_PATH_SEGMENTS or (is_dir and segments >= MAX_PATH_SEGMENTS):
        raise FsError(errno.ENAMETOOLONG, f"path is deeper than {MAX_PATH_SEGMENTS} segments")


def stat_mode(node: Node) -> int:
    if node.is_dir:
        return stat.S_IFDIR | node.mode
    return stat.S_IFREG | node.mode
