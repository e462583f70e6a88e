"""The inode table of a mount: numbers never reused, a node kept while anything names it.

`Tree` hands out inode numbers from a counter that only goes up, and drops a node only
when the kernel has forgotten it, no handle is open and no directory names it
(`Tree.maybe_drop`). `NegativeEntries` remembers the names the kernel was told are
missing, so the sync task can invalidate one that appears behind the kernel's back.
What a store's files hold, and every change to them, is `StoreState` (memfs/state/store_state.py).
"""

from __future__ import annotations

import errno
import time
from dataclasses import dataclass

from memfs.errors import FsError
from memfs.paths import local_name
from memfs.state.node import DIR_MODE, Kind, Node, Usage

ROOT_INODE = 1


class NegativeEntries:
    """The names the kernel was told are missing, and may cache as missing.

    A lookup that finds nothing answers a negative entry (inode 0) with a timeout, so a
    shell probing for names (PATH, `.git`, editor backups) asks once per timeout. The
    kernel then answers "no such file" by itself, so a name that appears behind its
    back (a pull, or a file the sync task moves) must be invalidated: `appeared` moves
    it to the stale set, which the sync task hands to the kernel before a pass is
    reported done. A name created through the kernel (create, mkdir, rename) needs
    nothing: the kernel turned its own dentry positive (`created_here`).

    Bounded: with `limit` names handed out and none expired, a lookup answers a plain
    ENOENT (no timeout), so every cached negative is one memfs still remembers.
    """

    def __init__(self, limit: int = 16384) -> None:
        self.limit = limit
        self._given: dict[tuple[int, str], float] = {}  # (parent ino, shown) -> expiry
        self._stale: set[tuple[int, str]] = set()
        self.given = 0  # negative entries handed out (statistics)
        self.refused = 0  # plain ENOENT answered because the table was full

    def answer(self, parent_ino: int, shown: str, timeout: float) -> bool:
        """Record a negative entry for `shown` that the kernel keeps `timeout` seconds;
        False if it must not be cached."""
        key = (parent_ino, shown)
        now = time.monotonic()
        self._given.pop(key, None)  # re-inserted last: the dict stays in expiry order
        if len(self._given) >= self.limit:
            self._expire(now)
            if len(self._given) >= self.limit:
                self.refused += 1
                return False
        self._given[key] = now + timeout
        self.given += 1
        return True

    def _expire(self, now: float) -> None:
        # A second of slack: the kernel counts in jiffies from its own receipt.
        for key, expiry in list(self._given.items()):
            if expiry + 1.0 > now:
                break
            del self._given[key]

    def appeared(self, parent_ino: int, name: str) -> None:
        """`name` now exists in directory `parent_ino`: the kernel must forget it missing."""
        if not self._given:
            return
        key = (parent_ino, local_name(name))
        if self._given.pop(key, None) is not None:
            self._stale.add(key)

    def created_here(self, parent_ino: int, name: str) -> None:
        """A create through the kernel: its dentry is already positive."""
        key = (parent_ino, local_name(name))
        self._given.pop(key, None)
        self._stale.discard(key)

    def take_stale(self) -> list[tuple[int, str]]:
        stale, self._stale = self._stale, set()
        return sorted(stale)

    def __len__(self) -> int:
        return len(self._given)

    def statistics(self) -> NegativeStatistics:
        return NegativeStatistics(
            cached=len(self._given), given=self.given, not_cached=self.refused
        )


@dataclass(frozen=True)
class NegativeStatistics:
    """Negative entries: remembered now, handed out, answered as plain ENOENT."""

    cached: int
    given: int
    not_cached: int


class Tree:
    """Inode table of one mount, which serves one store: its root is the store's, and
    `usage` the running totals of the store's linked files (`statfs`)."""

    def __init__(self, *, uid: int, gid: int, umask: int | None = None) -> None:
        # Who every entry appears to belong to, and (--umask) the permission bits shown
        # instead of each entry's own mode (memfs/mount/fs.py, `MemFs.mode`).
        self.uid = uid
        self.gid = gid
        self.umask = umask
        self.nodes: dict[int, Node] = {}
        self.usage = Usage()  # before any node: each file counts itself in
        self.negatives = NegativeEntries()
        # Directories whose names changed and that the kernel may have a cached listing
        # of (FOPEN_CACHE_DIR): the sync task invalidates them (`take_changed_listings`).
        self._changed_listings: set[int] = set()
        self._next_ino = ROOT_INODE
        # False under zero-message opens on a writable mount (MemFs.init): the kernel
        # sends no OPEN or RELEASE, so `open_writers` stays 0 and a push cannot wait
        # for a writer's close; it waits for a quiet spell instead (Plan.ready_to_push).
        self.writers_tracked = True
        # True when, without tracked writers, a close watch still reports each writer's
        # close (memfs/mount/closewatch.py): a push waits for the close after the last
        # write, as with RELEASE; the quiet spell stays the bound when none comes.
        self.closes_seen = False
        now = time.time_ns()
        self.root = self.new_node(Kind.DIR, "", None, DIR_MODE, now)
        self.root.lookups = 1  # the kernel never forgets the root

    def new_node(
        self,
        kind: Kind,
        name: str,
        parent: Node | None,
        mode: int,
        mtime_ns: int,
    ) -> Node:
        node = Node(self._next_ino, kind, name, parent, self.usage, mode, mtime_ns)
        self._next_ino += 1
        self.nodes[node.ino] = node
        if parent is not None:
            assert parent.children is not None
            parent.children[name] = node
            self.negatives.appeared(parent.ino, name)
            self.listing_changed(parent)
        return node

    def listing_changed(self, directory: Node) -> None:
        """A name appeared in `directory` behind the kernel's back, or may have."""
        if directory.lookups > 0:  # else the kernel holds no inode, so no listing
            self._changed_listings.add(directory.ino)

    def created_here(self, parent: Node, name: str) -> None:
        """A create, mkdir or rename through the kernel: its dentry is positive, and the
        kernel dropped its own cached listing of `parent`, so neither needs invalidating
        (a push soon after would otherwise drop the listing, and the ACLs, it re-read)."""
        self.negatives.created_here(parent.ino, name)
        self._changed_listings.discard(parent.ino)

    def take_changed_listings(self) -> list[int]:
        changed, self._changed_listings = self._changed_listings, set()
        return sorted(changed)

    def get(self, ino: int) -> Node:
        node = self.nodes.get(ino)
        if node is None:
            raise FsError(errno.ENOENT, f"unknown inode {ino}")
        return node

    def forget(self, ino: int, count: int) -> None:
        node = self.nodes.get(ino)
        if node is None:
            return
        node.lookups = max(0, node.lookups - count)
        self.maybe_drop(node)

    def maybe_drop(self, node: Node) -> None:
        """Drop an inode once nothing (kernel, directory, handle) refers to it."""
        if node.lookups == 0 and node.open_handles == 0 and not node.linked:
            self.nodes.pop(node.ino, None)  # a tombstone lives on in its store's table
