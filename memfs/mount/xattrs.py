"""The `user.memfs.*` extended attributes: a file's store, memory id, sha256, sync state,
why it was refused, its conflict copy and a long name's real path (docs/sync.md,
reliability.md §3). Read-only: memfs stores no other attribute, and with `--no-xattrs`
every request answers ENOSYS, which the kernel remembers for the connection."""

from __future__ import annotations

import errno
from collections.abc import Callable
from typing import NoReturn

import pyfuse3

from memfs.errors import FsError
from memfs.paths import NAME_MAX
from memfs.state.node import Kind, Node
from memfs.state.store_state import StoreState

# Every attribute memfs shows is named here; any other name has no value.
XATTR_PREFIX = b"user.memfs."


class Xattrs:
    """What the xattr handlers of `MemFs` answer. `mutable` is the store a change goes
    to or the errno that refuses it (`MemFs`'s): a change is refused as a mutation
    first (EROFS), then as unsupported."""

    def __init__(
        self, state: StoreState, *, enabled: bool, mutable: Callable[[], StoreState]
    ) -> None:
        self.state = state
        # --no-xattrs: every xattr request answers ENOSYS, which the kernel remembers
        # for the connection (fc->no_getxattr, …), so `ls -la` and writes stop asking
        # for security.selinux and security.capability (docs/performance.md).
        self.enabled = enabled
        self._mutable = mutable

    def get(self, inode: int, name: bytes) -> bytes:
        node = self._node(inode)
        if not name.startswith(XATTR_PREFIX):
            # security.capability, asked by the kernel before every write and O_TRUNC
            # open: answered without building the values (the sha256 of the content).
            raise FsError(pyfuse3.ENOATTR)
        value = self.values(node).get(name)
        if value is None:
            raise FsError(pyfuse3.ENOATTR)
        return value

    def names(self, inode: int) -> list[bytes]:
        return list(self.values(self._node(inode)))

    def set(self, inode: int) -> NoReturn:
        self._node(inode)  # ENOSYS with --no-xattrs, ENOENT
        self._mutable()
        raise FsError(errno.ENOTSUP, "extended attributes are not stored")

    def remove(self, inode: int, name: bytes) -> NoReturn:
        node = self._node(inode)
        self._mutable()
        if name.startswith(XATTR_PREFIX) and name in self.values(node):
            raise FsError(errno.ENOTSUP, "memfs attributes are read-only")
        raise FsError(pyfuse3.ENOATTR)

    def _node(self, inode: int) -> Node:
        """The node an xattr request is about; ENOSYS, once and for all, with --no-xattrs."""
        if not self.enabled:
            raise FsError(errno.ENOSYS)
        return self.state.tree.get(inode)

    def values(self, node: Node) -> dict[bytes, bytes]:
        values = {b"user.memfs.store_id": self.state.store_id.encode()}
        path = node.store_path()
        if any(len(s.encode("utf-8", "surrogateescape")) > NAME_MAX for s in path.split("/")):
            values[b"user.memfs.path"] = path.encode("utf-8", "surrogateescape")
        if node.kind is Kind.FILE:
            if node.memory_id:
                values[b"user.memfs.memory_id"] = node.memory_id.encode()
            sha = node.current_sha()
            if sha:
                values[b"user.memfs.sha256"] = sha.encode()
            values[b"user.memfs.state"] = node.state_name().encode()
            if node.refused_why and node.state_name() == "refused":
                values[b"user.memfs.refused"] = node.refused_why.encode()
            if node.conflict:
                values[b"user.memfs.conflict_copy"] = node.conflict.encode()
        return values
