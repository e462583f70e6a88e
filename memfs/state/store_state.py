"""Each store's local state behind the mount, kept in step with its journal.

`StoreState` owns one store's subtree and keeps its journal in step with it: every
local change here writes the journal before returning, so the caller (a FUSE handler) can
acknowledge the system call knowing a `kill -9` loses nothing.

Synchronous and free of network I/O: FUSE handlers call in, the sync task calls in,
and code between two awaits is atomic, so no locks are needed (see
docs/concurrency.md). Each file carries a `version` that moves on every local change;
the sync task uploads a snapshot and marks the file clean only if the version has not
moved meanwhile.
"""

from __future__ import annotations

import errno
import logging
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Literal

from memfs.errors import FsError, refusal_is_transient
from memfs.paths import (
    LOCAL_ONLY_MAX_BYTES,
    MARKER_NAME,
    MAX_CONTENT_BYTES,
    join,
    marker_content,
    sha256_hex,
)
from memfs.state import extents
from memfs.state.cachedir import CacheDir
from memfs.state.journal import EntryFields, EntryRow
from memfs.state.node import DIR_MODE, FILE_MODE, Kind, Node, Usage, check_depth
from memfs.state.tree import Tree
from memfs.state.utf8 import NOT_UTF8, breaks_utf8
from memfs.state.veils import Veils

# What a local change was, for when it is pushed (memfs/sync/schedule.py): a write, a
# new file (its writer's close follows), a writer's close, or a change of the tree.
ChangeKind = Literal["write", "create", "close", "tree"]

# The logger keeps the name it had when this code lived in memfs/state/tree.py: log lines
# name it, and they do not change.
log = logging.getLogger("memfs.state")


@dataclass(frozen=True)
class StateStatistics:
    """Counts over one store's files, read in one walk (`StoreState.statistics`)."""

    memories: int  # linked files
    bytes: int  # their sizes, summed
    dirty: int  # files in state "dirty", excluded (local-only) names included
    refused: int
    conflicts: int  # files that name a conflict copy
    pending_deletes: int  # tombstones


class StoreState:
    """One store's subtree, its journal and its content, kept in step.

    The only writer of the store's nodes and journal, with its sync half: local changes
    through the methods here, sync results through those of `SyncRecords`
    (memfs/state/records.py), which the sync engine holds beside it.
    """

    def __init__(
        self,
        tree: Tree,
        store_id: str,
        cache: CacheDir,
        *,
        read_only: bool,
    ) -> None:
        self.tree = tree
        self.store_id = store_id
        self.read_only = read_only
        self.usage: Usage = tree.usage  # the tree serves this one store
        self.cache = cache
        self.journal = cache.journal
        self.objects = cache.objects
        self.by_memory: dict[str, Node] = {}  # linked files with a memory id
        self.tombstones: dict[str, Node] = {}  # unlinked files with a memory id
        # Unlinked files whose create was sent and never answered: the memory it may
        # have made is ours (deleted or taken over at the next listing), never a
        # remote file to pull back. Keyed by the path the create sent.
        self.lost_creates: dict[str, Node] = {}
        # Files and directories changed here since sync last took them (`take_touched`):
        # what a pass must look at beside what the store changed, so that a pass after
        # one change costs that change, not a walk of every file.
        self.touched: set[Node] = set()
        # Files a pull changed that the kernel has not been told of yet: the handlers
        # show them as the kernel last saw them (memfs/state/veils.py).
        self.veils = Veils()
        now = time.time_ns()
        self.root = tree.root  # a mount serves one store: its root is the store's
        self.marker = tree.new_node(Kind.MARKER, MARKER_NAME, self.root, 0o444, now)
        marker = marker_content(store_id)
        self.marker.data = bytearray(marker)
        self.marker.size = len(marker)
        # Names the sync never pushes (editor swap files...; StoreSync sets its rules):
        # a new file with such a name is not a memory, so the content rules do not
        # apply to it (`is_local_only`).
        self.local_only: Callable[[str], bool] = _nothing_local
        # Told of every local change, for a push soon after it settles (StoreSync sets
        # it to memfs/sync/schedule.py's PushSoon.changed while its pass loop runs).
        self.on_change: Callable[[Node | None, ChangeKind], None] = _no_change

    # -- loading ------------------------------------------------------------------
    def load_journal(self) -> int:
        """Rebuild the subtree from the journal; returns how many rows were loaded."""
        count = 0
        for row in self.journal.rows():
            count += 1
            if row.path is None:
                node = self._node_from_row(row, None)
                node.linked = False
                if row.memory_id:
                    self.tombstones[row.memory_id] = node
                elif row.sent_path is not None and row.sent_sha is not None:
                    self.lost_creates[row.sent_path] = node
                continue
            parent = self.ensure_dirs(row.path.rsplit("/", 1)[0] or "/", journal=False)
            name = row.path.rsplit("/", 1)[1]
            if row.kind == "dir":
                existing = parent.children.get(name) if parent.children else None
                if existing is not None and existing.is_dir:
                    existing.entry_id = row.entry_id
                    existing.mode = row.mode
                    continue
            self._node_from_row(row, parent)
        return count

    def _node_from_row(self, row: EntryRow, parent: Node | None) -> Node:
        kind = Kind.DIR if row.kind == "dir" else Kind.FILE
        name = row.path.rsplit("/", 1)[1] if row.path else ""
        node = self.tree.new_node(kind, name, parent, row.mode, row.mtime_ns)
        node.entry_id = row.entry_id
        if kind is Kind.FILE:
            node.memory_id = row.memory_id
            node.base_sha = row.base_sha
            node.base_path = row.base_path
            node.sent_sha = row.sent_sha
            node.sent_path = row.sent_path
            if row.refused_why is None or not refusal_is_transient(row.refused_why):
                # (an older memfs journalled a full store's refusal: retried now)
                node.refused_sha, node.refused_why = row.refused_sha, row.refused_why
            node.conflict = row.conflict
            node.dirty = row.dirty
            if row.data is not None:
                node.data = bytearray(row.data)
                node.size = len(row.data)
            else:
                node.sha = row.sha
                node.size = self._size_of(row.sha)
            if node.dirty:
                node.dirty_since = time.monotonic()
            if node.memory_id and parent is not None:
                self.by_memory[node.memory_id] = node
        return node

    def _size_of(self, sha: str | None) -> int:
        if sha is None:
            return 0
        data = self.objects.get(sha, touch=False)
        if data is None:  # evicted by the collector, or not downloaded yet
            return self.objects.evicted.get(sha, 0)
        return len(data)

    def ensure_dirs(self, path: str, *, journal: bool = True) -> Node:
        """The directory at `path`, creating missing ones (implied by memory paths)."""
        node = self.root
        if path == "/":
            return node
        for name in path[1:].split("/"):
            assert node.children is not None
            child = node.children.get(name)
            if child is None:
                now = time.time_ns()
                child = self.tree.new_node(Kind.DIR, name, node, self.dir_mode(), now)
                if journal:
                    child.entry_id = self.journal.insert(
                        path=child.store_path(), kind="dir", mode=child.mode, mtime_ns=now
                    )
            elif not child.is_dir:
                raise FsError(errno.ENOTDIR, f"{child.store_path()} is a file")
            node = child
        return node

    def dir_mode(self) -> int:
        return 0o555 if self.read_only else DIR_MODE

    def node_at(self, path: str) -> Node | None:
        """The linked node at store path `path`, if any."""
        node = self.root
        for name in path[1:].split("/"):
            if node.children is None:
                return None
            child = node.children.get(name)
            if child is None:
                return None
            node = child
        return node

    def meta(self, key: str) -> str | None:
        """A value the sync keeps in the journal across restarts (the feed's cursor)."""
        return self.journal.get_meta(key)

    def set_meta(self, key: str, value: str) -> None:
        self.journal.set_meta(key, value)

    def tell_changes(self, hook: Callable[[Node | None, ChangeKind], None] | None) -> None:
        """Who hears of each local change (the sync's push-soon scheduler); None: nobody."""
        self.on_change = hook or _no_change

    def set_local_only(self, rule: Callable[[str], bool]) -> None:
        """Names the sync never pushes (its excludes): not memories, no content rules."""
        self.local_only = rule

    def is_local_only(self, node: Node) -> bool:
        """A file the sync leaves alone: an excluded name the store does not have.

        Excludes decide only about local files. A memory the store has under such a
        name (`x~` created elsewhere) is synced like any other; a memory renamed
        locally to one (vim's backup `mv x x~` before it writes the new `x`) is held
        where the store has it, so the editor's save can continue it.
        """
        if not self.local_only(node.name):
            return False
        base = node.base_path if node.memory_id is not None else None
        return base is None or not self.local_only(base.rsplit("/", 1)[-1])

    def new_file(self, parent: Node, name: str) -> Node:
        """A file node arriving from the store (its journal row is the caller's)."""
        return self.tree.new_node(Kind.FILE, name, parent, self.file_mode(), time.time_ns())

    def file_mode(self) -> int:
        return 0o444 if self.read_only else FILE_MODE

    # -- reading ------------------------------------------------------------------
    def content(self, node: Node) -> bytes | None:
        """The node's bytes, or None while they are still on their way from the store."""
        if node.data is not None:
            return bytes(node.data)
        if node.sha is None:
            return b""
        return self.objects.get(node.sha)

    def walk_files(self, node: Node | None = None) -> Iterator[Node]:
        stack = [node or self.root]
        while stack:
            cur = stack.pop()
            if cur.children is None:
                continue
            for child in cur.children.values():
                if child.kind is Kind.FILE:
                    yield child
                elif child.is_dir:
                    stack.append(child)

    # -- local mutations (called by FUSE handlers; policy already applied) ----------
    def _local_change(self, node: Node | None, kind: ChangeKind) -> None:
        """Every local change a pass may have to push: `on_change` tells the scheduler."""
        if node is not None:
            self.touched.add(node)
        self.on_change(node, kind)

    def take_touched(self) -> set[Node]:
        """The nodes changed here since the last call (for sync's pass scope)."""
        touched, self.touched = self.touched, set()
        return touched

    def writable(self) -> None:
        if self.read_only:
            raise FsError(errno.EROFS, "read-only memory store")

    def create_file(self, parent: Node, name: str, mode: int) -> Node:
        self._local_change(None, "create")
        self.writable()
        path = join(parent.store_path(), name)
        check_depth(path, is_dir=False)
        now = time.time_ns()
        mode = (mode & 0o777) | 0o600
        # The row first: a create the journal cannot hold (a full disk) leaves nothing.
        entry_id = self.journal.insert(
            path=path, kind="file", mode=mode, mtime_ns=now, data=b"", dirty=1
        )
        node = self.tree.new_node(Kind.FILE, name, parent, mode, now)
        node.entry_id = entry_id
        node.data = bytearray()
        node.dirty = True
        node.dirty_since = time.monotonic()
        self.touched.add(node)
        self._touch_dir(parent, now)
        return node

    def mkdir(self, parent: Node, name: str, mode: int) -> Node:
        self._local_change(None, "tree")
        self.writable()
        path = join(parent.store_path(), name)
        check_depth(path, is_dir=True)
        now = time.time_ns()
        mode = (mode & 0o777) | 0o700
        entry_id = self.journal.insert(path=path, kind="dir", mode=mode, mtime_ns=now)
        node = self.tree.new_node(Kind.DIR, name, parent, mode, now)
        node.entry_id = entry_id
        self._touch_dir(parent, now)
        return node

    def load_for_write(self, node: Node) -> bytearray:
        """Make the node's content authoritative in memory before a change."""
        if node.data is None:
            content = self.content(node)
            if content is None:
                raise FsError(errno.EIO, "content not yet downloaded")
            node.data = bytearray(content)
        return node.data

    def size_limit(self, node: Node) -> int:
        """Memories hold 100 KiB; a local-only file (a swap file) may be larger."""
        return LOCAL_ONLY_MAX_BYTES if self.is_local_only(node) else MAX_CONTENT_BYTES

    def write(self, node: Node, offset: int, buf: bytes) -> int:
        self.writable()
        end = offset + len(buf)
        limit = self.size_limit(node)
        if end > limit:
            self.refuse_write(node, f"a write past {limit} bytes was refused (File too large)")
            raise FsError(errno.EFBIG, f"memories are limited to {limit} bytes")
        if not self.is_local_only(node) and breaks_utf8(self.load_for_write(node), offset, buf):
            # Refused as it is written (docs/reliability.md §3): nothing of it lands.
            self.refuse_write(node, NOT_UTF8)
            raise FsError(errno.EILSEQ, NOT_UTF8)
        try:
            if not self._log_change(node, offset, buf):
                data = bytearray(self.load_for_write(node))
                extents.apply(data, offset, buf)
                self.set_content(node, data)
        except OSError as e:  # the cache disk (ENOSPC): the write did not happen
            self.refuse_write(node, f"a write was refused ({os.strerror(e.errno or 0)})")
            raise
        return len(buf)

    def refuse_write(self, node: Node, why: str) -> None:
        """Hold back what a refused write left behind (nothing, or a partial copy).

        The file keeps its bytes locally but is not pushed (state `refused`) until a
        write or truncate succeeds: the store never receives content that exists only
        because a write was refused (`cp big.txt DIR/` leaves an empty file).
        """
        if node.kind is not Kind.FILE or self.is_local_only(node) or not node.dirty:
            return  # a clean file is what the store already has: nothing to hold back
        sha = node.current_sha()
        if node.refused_sha == sha and node.refused_why == why:
            return
        node.refused_sha, node.refused_why = sha, why
        if node.entry_id is not None:
            try:
                self.journal.update(node.entry_id, refused_sha=sha, refused_why=why)
            except OSError:
                pass  # a full cache disk: held back in memory, for this daemon's life
        log.warning(
            "a write was refused, so the file is held back from the store until a "
            "write or truncate succeeds memory_store_id=%s path=%s why=%s",
            self.store_id,
            node.store_path(),
            why,
        )

    def truncate(self, node: Node, size: int) -> None:
        self.writable()
        limit = self.size_limit(node)
        if size > limit:
            raise FsError(errno.EFBIG, f"memories are limited to {limit} bytes")
        node.truncated_ns = time.time_ns()
        if self._log_change(node, size, None):
            return
        data = (
            bytearray() if node.data is None and size == 0 else bytearray(self.load_for_write(node))
        )
        extents.apply(data, size, None)
        self.set_content(node, data)

    def _log_change(self, node: Node, offset: int, payload: bytes | None) -> bool:
        """Apply a change to a dirty file in place, logged as one record in the extent
        log after the base in its journal row (memfs/state/extents.py, `Journal.append`):
        a write costs what it writes, not the file's size, and no SQLite commit. Journal
        first, as in `_changed`. False when the change must rewrite the whole content
        instead: the file is clean or refused (its row holds no base, or a refusal to
        end), or its records are due for compaction."""
        data = node.data
        if data is None or node.sha is not None or node.refused_sha is not None or not node.dirty:
            return False
        now = time.time_ns()
        if node.entry_id is not None:  # an unlinked file still open has no row
            logged = self.journal.logged(node.entry_id)
            if logged is None or not extents.fits(logged, extents.cost(payload), len(data)):
                return False
            self.journal.append(node.entry_id, offset, payload, now)
        extents.apply(data, offset, payload)
        self._touched(node, now)
        return True

    def set_content(self, node: Node, data: bytearray) -> None:
        """Install `data` as the node's content, journal first: a change the journal
        cannot hold (a full cache disk) changes nothing. A successful change ends a
        refusal (`refuse_write`, the store's 400/413); non-UTF-8 is checked again at
        close. The journal row's base becomes `data`; its older records are ignored."""
        now = time.time_ns()
        fields: EntryFields = {"data": bytes(data), "dirty": 1, "sha": None, "mtime_ns": now}
        if node.refused_sha is not None:
            fields["refused_sha"] = fields["refused_why"] = None
        if node.entry_id is not None:
            self.journal.update(node.entry_id, **fields)
        node.data = data
        node.refused_sha = node.refused_why = node.retry_at = None
        node.retries = 0
        node.sha = None
        if not node.dirty:
            node.dirty = True
            node.dirty_since = time.monotonic()
        self._touched(node, now)

    def _touched(self, node: Node, now: int) -> None:
        """What every content change moves: sizes, times, the version a push compares."""
        assert node.data is not None
        node.size = len(node.data)
        node.mtime_ns = node.ctime_ns = now
        node.version += 1
        self.veils.drop(node.ino)
        self._local_change(node, "write")

    def set_mode(self, node: Node, mode: int) -> None:
        self.writable()
        node.mode = mode & 0o7777
        node.ctime_ns = time.time_ns()
        if node.entry_id is not None:
            self.journal.update(node.entry_id, mode=node.mode)

    def set_times(self, node: Node, atime_ns: int | None, mtime_ns: int | None) -> None:
        self.writable()
        if atime_ns is not None:
            node.atime_ns = atime_ns
        if mtime_ns is not None:
            node.mtime_ns = mtime_ns
            if node.entry_id is not None:
                self.journal.update(node.entry_id, mtime_ns=mtime_ns)
        node.ctime_ns = time.time_ns()
        self.veils.drop(node.ino)

    def unlink(self, parent: Node, name: str) -> Node:
        self.writable()
        assert parent.children is not None
        node = parent.children.get(name)
        if node is None:
            raise FsError(errno.ENOENT)
        if node.is_dir:
            raise FsError(errno.EISDIR)
        if node.kind is Kind.MARKER:
            raise FsError(errno.EPERM, "the marker file cannot be removed")
        self.remove_file(node)
        self._touch_dir(parent, time.time_ns())
        return node

    def remove_file(self, node: Node, *, local: bool = True) -> None:
        """Unlink a file. A local unlink of a synced file leaves a tombstone the next pass
        deletes; `local=False` (the store already deleted it) leaves nothing behind."""
        assert node.parent is not None and node.parent.children is not None
        del node.parent.children[node.name]
        node.linked = False
        synced = False
        if node.memory_id is not None and self.by_memory.get(node.memory_id) is node:
            del self.by_memory[node.memory_id]
            synced = True
        if local:
            self._local_change(node, "tree")
        if synced and local:
            self.bury(node)
        elif local and node.memory_id is None and node.sent_path and node.sent_sha:
            self.keep_lost_create(node)
        elif node.entry_id is not None:
            self.journal.delete(node.entry_id)
            node.entry_id = None
        self.tree.maybe_drop(node)

    def bury(self, node: Node) -> None:
        assert node.memory_id is not None
        for path, lost in list(self.lost_creates.items()):
            if lost is node:  # its create was answered after all
                del self.lost_creates[path]
        # unlinked before its memory existed, the tombstone gets a row of its own
        self._row_without_path(
            self.tombstones,
            node.memory_id,
            node,
            {},
            {"memory_id": node.memory_id, "base_sha": node.base_sha, "base_path": node.base_path},
        )

    def keep_lost_create(self, node: Node) -> None:
        """A file unlinked while its create is unanswered (in flight, or its answer
        lost): remember what it sent, so the memory it may have made is recognised as
        ours at the next listing (`Planner.settle_lost_creates`)."""
        path = node.sent_path
        assert path is not None and node.sent_sha is not None
        self._row_without_path(
            self.lost_creates,
            path,
            node,
            {"data": None, "dirty": 0, "sent_path": path},
            {"sent_sha": node.sent_sha, "sent_path": path},
        )

    def _row_without_path(
        self,
        table: dict[str, Node],
        key: str,
        node: Node,
        update: EntryFields,
        insert: EntryFields,
    ) -> None:
        """File `node` under `key` in `table` (tombstones, lost creates): a node no path
        names, kept in a journal row whose path is NULL. The row of a node it replaces
        goes; the node's own row is updated with `update`, or written with `insert`."""
        old = table.get(key)
        if old is not None and old is not node and old.entry_id is not None:
            self.journal.delete(old.entry_id)
            old.entry_id = None
        table[key] = node
        if node.entry_id is not None:
            fields: EntryFields = {"path": None}
            fields.update(update)
            self.journal.update(node.entry_id, **fields)
        else:
            fields = {"path": None, "mode": node.mode, "mtime_ns": node.mtime_ns}
            fields.update(insert)
            node.entry_id = self.journal.insert(kind="file", **fields)

    def rmdir(self, parent: Node, name: str) -> Node:
        self._local_change(None, "tree")
        self.writable()
        assert parent.children is not None
        node = parent.children.get(name)
        if node is None:
            raise FsError(errno.ENOENT)
        if not node.is_dir:
            raise FsError(errno.ENOTDIR)
        assert node.children is not None
        if node.children:
            raise FsError(errno.ENOTEMPTY)
        del parent.children[name]
        node.linked = False
        if node.entry_id is not None:
            self.journal.delete(node.entry_id)
            node.entry_id = None
        self._touch_dir(parent, time.time_ns())
        self.tree.maybe_drop(node)
        return node

    def rename(
        self, old_parent: Node, old_name: str, new_parent: Node, new_name: str, *, noreplace: bool
    ) -> Node | None:
        """Move an entry; returns the node it replaced, if any.

        Replacing a synced file with a new one (an editor's atomic save) hands the
        replaced file's memory id to the new one, so the memory keeps its history.
        """
        self._local_change(None, "tree")
        self.writable()
        assert old_parent.children is not None and new_parent.children is not None
        node = old_parent.children.get(old_name)
        if node is None:
            raise FsError(errno.ENOENT)
        if node.kind is Kind.MARKER:
            raise FsError(errno.EPERM, "the marker file cannot be renamed")
        if node is new_parent or (node.is_dir and _is_ancestor(node, new_parent)):
            raise FsError(errno.EINVAL, "cannot move a directory into itself")
        target = new_parent.children.get(new_name)
        if target is node:
            return None
        new_path = join(new_parent.store_path(), new_name)
        check_depth(new_path, is_dir=node.is_dir)
        if node.is_dir:
            self._check_subtree_depth(node, new_path)
        if target is not None:
            if noreplace:
                raise FsError(errno.EEXIST)
            if target.kind is Kind.MARKER:
                raise FsError(errno.EPERM, "the marker file cannot be replaced")
            if target.is_dir and not node.is_dir:
                raise FsError(errno.EISDIR)
            if node.is_dir and not target.is_dir:
                raise FsError(errno.ENOTDIR)
            if target.is_dir:
                assert target.children is not None
                if target.children:
                    raise FsError(errno.ENOTEMPTY)
        now = time.time_ns()
        with self.journal.transaction():
            if target is not None:
                if target.is_dir:
                    self.rmdir(new_parent, new_name)
                else:
                    self._replace_file(node, target)
            del old_parent.children[old_name]
            node.name = new_name
            node.parent = new_parent
            new_parent.children[new_name] = node
            self.tree.negatives.appeared(new_parent.ino, new_name)
            node.ctime_ns = now
            self._rejournal_paths(node)
        self.touched.add(node)  # a directory: every file under it moved
        self._touch_dir(old_parent, now)
        self._touch_dir(new_parent, now)
        return target

    def _replace_file(self, node: Node, target: Node) -> None:
        inherit = node.kind is Kind.FILE and node.memory_id is None and target.memory_id is not None
        memory_id, base_sha, base_path = target.memory_id, target.base_sha, target.base_path
        sent_sha, sent_path = target.sent_sha, target.sent_path
        self.remove_file(target)
        if inherit:
            assert memory_id is not None
            old = self.tombstones.pop(memory_id, None)
            if old is not None and old.entry_id is not None:
                self.journal.delete(old.entry_id)
                old.entry_id = None
            self.adopt_identity(node, memory_id, base_sha, base_path, sent_sha, sent_path)

    def adopt_identity(
        self,
        node: Node,
        memory_id: str,
        base_sha: str | None,
        base_path: str | None,
        sent_sha: str | None = None,
        sent_path: str | None = None,
    ) -> None:
        """Give a new local file an existing memory's identity (keeps id and history)."""
        node.memory_id = memory_id
        node.base_sha = base_sha
        node.base_path = base_path
        node.sent_sha, node.sent_path = sent_sha, sent_path
        if node.linked:
            self.by_memory[memory_id] = node
        if not node.dirty and node.current_sha() != base_sha:
            node.dirty = True
            node.dirty_since = time.monotonic()
        self.touched.add(node)
        if node.entry_id is not None:
            self.journal.update(
                node.entry_id,
                memory_id=memory_id,
                base_sha=base_sha,
                base_path=base_path,
                sent_sha=sent_sha,
                sent_path=sent_path,
                dirty=int(node.dirty),
            )

    def _check_subtree_depth(self, node: Node, new_path: str) -> None:
        old_prefix = node.store_path()
        for child in self._walk(node):
            if child is node:
                continue
            check_depth(new_path + child.store_path()[len(old_prefix) :], is_dir=child.is_dir)

    def _walk(self, node: Node) -> Iterator[Node]:
        stack = [node]
        while stack:
            cur = stack.pop()
            yield cur
            if cur.children:
                stack.extend(cur.children.values())

    def _rejournal_paths(self, node: Node) -> None:
        changes: list[tuple[int, EntryFields]] = []
        for cur in self._walk(node):
            if cur.entry_id is not None:
                # Two-step to dodge transient UNIQUE collisions inside the subtree.
                changes.append((cur.entry_id, {"path": f"\0{cur.entry_id}"}))
        for cur in self._walk(node):
            if cur.entry_id is not None:
                changes.append((cur.entry_id, {"path": cur.store_path()}))
        for entry_id, fields in changes:
            self.journal.update(entry_id, **fields)

    def _touch_dir(self, node: Node, now: int) -> None:
        node.mtime_ns = node.ctime_ns = now

    # -- flushing -------------------------------------------------------------------
    def checkpoint(self) -> None:
        """Make the journal durable against power loss too: fsync the extent log and fold
        SQLite's write-ahead log back (the agent's fsync(2))."""
        self.journal.checkpoint()

    # -- open files -----------------------------------------------------------------
    def opened(self, node: Node, *, writing: bool) -> None:
        """A handle on `node`: while one is open, its bytes stay in RAM (`make_clean`)."""
        node.open_handles += 1
        if writing:
            node.open_writers += 1

    def closed(self, node: Node, *, writing: bool) -> None:
        node.open_handles -= 1
        if writing:
            node.open_writers -= 1
            if node.dirty:
                node.closed_at = time.monotonic()
                self.on_change(node, "close")
        if (
            node.open_handles == 0
            and not node.dirty
            and node.data is not None
            and node.sha is not None
        ):
            node.data = None  # clean content lives in the object store, not in RAM

    def writer_closed(self, node: Node) -> None:
        """A writer's close seen by the close watch (no open is counted): a dirty
        file's change has settled, as at the last writer's RELEASE."""
        node.closed_ns = time.time_ns()
        if node.dirty:
            node.closed_at = time.monotonic()
            self.on_change(node, "close")

    # -- validation of what a handler flushes ---------------------------------------
    def check_utf8(self, node: Node) -> None:
        """Refuse (EILSEQ) and hold back content the store could never accept.

        A local-only file is never pushed, so it may hold anything: the check runs
        again (at push time) if it is renamed to a name that is synced.
        """
        if node.kind is not Kind.FILE or node.data is None or self.is_local_only(node):
            return
        try:
            bytes(node.data).decode("utf-8")
        except UnicodeDecodeError:
            sha = sha256_hex(bytes(node.data))
            if node.refused_sha != sha:
                node.refused_sha = sha
                node.refused_why = NOT_UTF8
                if node.entry_id is not None:
                    self.journal.update(
                        node.entry_id, refused_sha=sha, refused_why=node.refused_why
                    )
                log.warning(
                    "the file is not valid UTF-8, so it stays un-synced until its content "
                    "changes memory_store_id=%s path=%s",
                    self.store_id,
                    node.store_path(),
                )
            raise FsError(errno.EILSEQ, NOT_UTF8) from None

    def statistics(self) -> StateStatistics:
        files = dirty = refused = conflicts = total = 0
        for node in self.walk_files():
            files += 1
            total += node.size
            state = node.state_name()
            dirty += state == "dirty"
            refused += state == "refused"
            conflicts += node.conflict is not None
        return StateStatistics(
            memories=files,
            bytes=total,
            dirty=dirty,
            refused=refused,
            conflicts=conflicts,
            pending_deletes=len(self.tombstones),
        )


def _nothing_local(name: str) -> bool:
    return False


def _no_change(node: Node | None, kind: ChangeKind) -> None:
    pass


def _is_ancestor(node: Node, other: Node) -> bool:
    cur: Node | None = other
    while cur is not None:
        if cur is node:
            return True
        cur = cur.parent
    return False
