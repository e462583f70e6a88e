"""The sync half of `StoreState`: every change a pass makes to nodes and the journal.

`SyncRecords` works on one `StoreState` (memfs/state/store_state.py), whose tables and
journal it writes: the two stay the only writers of a store's nodes and of its journal.
The FUSE side changes files through `StoreState`'s methods, the sync engine (which holds
a `SyncRecords` beside its state) records what the store said through these. Each method changes
the node and its journal row together and never awaits (invariant 1 of
docs/concurrency.md): between two of them the tree and the journal agree.

Decisions (what to pull, what won a conflict, what to log) stay in memfs/sync/engine.py; only
the bookkeeping is here.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

from memfs.paths import RemoteMemory
from memfs.state.journal import EntryFields
from memfs.state.node import FILE_MODE, Kind, Node
from memfs.state.store_state import StoreState
from memfs.state.veils import Veil

# (parent inode, name) pairs whose kernel dentries a batch must invalidate.
Entries = list[tuple[int, str]]


class SyncRecords:
    """Bookkeeping of sync results on one store's state, which owns the fields."""

    def __init__(self, state: StoreState) -> None:
        self.state = state
        self.tree = state.tree
        self.cache = state.cache
        self.journal = state.journal
        self.objects = state.objects

    @contextmanager
    def batch(self) -> Iterator[None]:
        """One journal transaction for many records (a cold start lands thousands)."""
        with self.journal.transaction():
            yield

    # -- identities and baselines ---------------------------------------------------
    def settle_sent(self, node: Node, r: RemoteMemory | None) -> None:
        """An upload whose answer was lost counts as ours if the store shows its sha."""
        if r is None or (node.sent_sha is None and node.sent_path is None):
            return
        changed: EntryFields = {}
        if node.sent_sha is not None and r.content_sha256 == node.sent_sha:
            node.base_sha = r.content_sha256
            changed["base_sha"] = r.content_sha256
            if node.linked and node.current_sha() == r.content_sha256:
                node.dirty = False
                changed["dirty"] = 0
        if node.sent_path is not None and r.path == node.sent_path:
            node.base_path = r.path
            changed["base_path"] = r.path
        node.sent_sha = node.sent_path = None
        changed["sent_sha"] = changed["sent_path"] = None
        if node.entry_id is not None:
            self.journal.update(node.entry_id, **changed)

    def note_listed_size(self, node: Node, r: RemoteMemory) -> None:
        """A file whose content is not local shows its listed size: after a restart the
        journal knows only the sha, and such a file showed as empty (issue 24 item 12)."""
        if node.data is None and node.sha == r.content_sha256 and not self.objects.has(node.sha):
            node.size = r.content_size_bytes

    def mark_synced(self, node: Node, r: RemoteMemory) -> None:
        """The file equals memory `r`: it takes `r`'s identity and is clean."""
        if node.memory_id != r.id:
            self.state.adopt_identity(node, r.id, r.content_sha256, r.path)
        node.base_sha, node.base_path = r.content_sha256, r.path
        self.make_clean(node, r.content_sha256)

    def adopt_own_create(self, node: Node, r: RemoteMemory) -> None:
        """Our own create whose answer was lost, edited since: the memory is ours."""
        self.state.adopt_identity(node, r.id, r.content_sha256, r.path)
        node.sent_sha = node.sent_path = None
        if node.entry_id is not None:
            self.journal.update(node.entry_id, sent_sha=None, sent_path=None)

    def make_clean(self, node: Node, sha: str) -> None:
        """Content equal to the baseline moves from the journal to the object store."""
        if node.data is not None:
            self.objects.put(bytes(node.data), sha)
            if node.open_handles == 0:
                node.data = None
        node.sha = sha
        node.dirty = False
        node.dirty_since = None
        # The store has this content now: no refusal stands (a transient one retried).
        node.refused_sha = node.refused_why = node.retry_at = None
        node.retries = 0
        if node.entry_id is not None:
            self.journal.update(
                node.entry_id,
                sha=sha,
                data=None,
                dirty=0,
                refused_sha=None,
                refused_why=None,
                base_sha=node.base_sha,
                base_path=node.base_path,
                memory_id=node.memory_id,
                sent_sha=None,
                sent_path=None,
                mtime_ns=node.mtime_ns,  # the last write's, which only its extent held
            )

    def forget_identity(self, node: Node) -> None:
        """The file is no memory any more: the next pass creates it anew."""
        if node.memory_id is not None and self.state.by_memory.get(node.memory_id) is node:
            del self.state.by_memory[node.memory_id]
        node.memory_id = node.base_sha = node.base_path = None
        node.sent_sha = node.sent_path = None
        node.dirty = True
        if node.entry_id is not None:
            self.journal.update(
                node.entry_id,
                memory_id=None,
                base_sha=None,
                base_path=None,
                sent_sha=None,
                sent_path=None,
                dirty=1,
            )

    def set_base_path(self, node: Node, path: str) -> None:
        """The store now has the memory at `path` (a merged move, a memory parked)."""
        node.base_path = path
        if node.entry_id is not None:
            self.journal.update(node.entry_id, base_path=path)

    # -- tombstones -----------------------------------------------------------------
    def drop_tombstone(self, tomb: Node) -> None:
        if tomb.memory_id is not None and self.state.tombstones.get(tomb.memory_id) is tomb:
            del self.state.tombstones[tomb.memory_id]
        if tomb.entry_id is not None:
            self.journal.delete(tomb.entry_id)
            tomb.entry_id = None

    def continue_memory(self, tomb: Node, node: Node) -> None:
        """A new file where a deleted memory was (vim's save) continues that memory."""
        assert tomb.memory_id is not None
        self.drop_tombstone(tomb)
        self.state.adopt_identity(
            node, tomb.memory_id, tomb.base_sha, tomb.base_path, tomb.sent_sha, tomb.sent_path
        )

    def drop_lost_create(self, path: str) -> None:
        """The listing settled a lost create (it never landed, or is someone's now)."""
        node = self.state.lost_creates.pop(path, None)
        if node is not None and node.entry_id is not None:
            self.journal.delete(node.entry_id)
            node.entry_id = None

    def bury_lost_create(self, path: str, r: RemoteMemory) -> None:
        """The memory a lost create made, its file long unlinked: delete it like any
        file deleted locally (the tombstone goes through the deletion mode)."""
        node = self.state.lost_creates.pop(path)
        if node.entry_id is not None:  # bury writes the tombstone's row anew
            self.journal.delete(node.entry_id)
            node.entry_id = None
        node.memory_id = r.id
        node.base_sha, node.base_path = r.content_sha256, r.path
        node.sent_sha = node.sent_path = None
        self.state.bury(node)

    def bury_orphan(self, r: RemoteMemory) -> None:
        """A memory our own create made for a file that took another memory's identity
        meanwhile (a rename over it): nothing local stands for it, so it is deleted."""
        tomb = self.tree.new_node(Kind.FILE, "", None, FILE_MODE, time.time_ns())
        tomb.linked = False
        tomb.memory_id = r.id
        tomb.base_sha, tomb.base_path = r.content_sha256, r.path
        self.state.bury(tomb)

    def bury_unlinked_create(self, node: Node, memory_id: str) -> None:
        """A file unlinked during its own upload: the memory exists now, delete it later."""
        self.state.by_memory.pop(memory_id, None)
        self.state.bury(node)

    # -- conflicts ------------------------------------------------------------------
    def keep_conflict(self, node: Node, path: str, local: bytes) -> str:
        """Save the local bytes a pull replaces in the conflicts area; the copy's path."""
        copy = str(self.cache.save_conflict(path, local))
        node.conflict = copy
        if node.entry_id is not None:
            self.journal.update(node.entry_id, conflict=copy)
        return copy

    def clear_conflict(self, node: Node) -> None:
        """The file no longer names a conflict copy (it was dropped)."""
        node.conflict = None
        if node.entry_id is not None:
            self.journal.update(node.entry_id, conflict=None)

    # -- the shape of the tree --------------------------------------------------------
    def detach(self, node: Node, entries: Entries) -> None:
        """Take a file out of its directory for a moment (it is re-placed before any await)."""
        assert node.parent is not None and node.parent.children is not None
        entries.append((node.parent.ino, node.name))
        del node.parent.children[node.name]
        if node.entry_id is not None:  # a unique placeholder: paths are UNIQUE
            self.journal.update(node.entry_id, path=f"\0{node.entry_id}")

    def reattach(self, node: Node) -> None:
        """Put a detached file back where it was, or drop it (its content is safe)."""
        parent = node.parent
        assert parent is not None and parent.children is not None
        if node.name not in parent.children:
            parent.children[node.name] = node
            self.tree.negatives.appeared(parent.ino, node.name)
            self.tree.listing_changed(parent)
            if node.entry_id is not None:
                self.journal.update(node.entry_id, path=node.store_path())
            return
        # Its old name was taken meanwhile: the store has it elsewhere; the next pass
        # brings it back as a new arrival. A dirty file's bytes were kept as a conflict.
        node.linked = False
        if node.memory_id is not None and self.state.by_memory.get(node.memory_id) is node:
            del self.state.by_memory[node.memory_id]
        if node.entry_id is not None:
            self.journal.delete(node.entry_id)
            node.entry_id = None
        self.tree.maybe_drop(node)

    def remove_empty_dir(self, node: Node, entries: Entries) -> None:
        assert node.parent is not None and node.parent.children is not None
        entries.append((node.parent.ino, node.name))
        del node.parent.children[node.name]
        node.linked = False
        if node.entry_id is not None:
            self.journal.delete(node.entry_id)
            node.entry_id = None
        self.tree.maybe_drop(node)

    def place(self, node: Node, parent: Node, name: str, entries: Entries) -> None:
        """Link a linked (or detached) file as `parent/name`, journal included."""
        old = node.parent
        assert old is not None and old.children is not None and parent.children is not None
        if old.children.get(node.name) is node:
            if old is parent and node.name == name:
                return
            entries.append((old.ino, node.name))
            del old.children[node.name]
        node.parent = parent
        node.name = name
        parent.children[name] = node
        self.tree.negatives.appeared(parent.ino, name)
        self.tree.listing_changed(parent)
        node.ctime_ns = time.time_ns()
        if node.entry_id is not None:
            self.journal.update(node.entry_id, path=node.store_path())

    # -- content from the store -------------------------------------------------------
    def take_content(self, node: Node, r: RemoteMemory, inodes: list[int]) -> None:
        """Remote content into a file that keeps its local path (a merged pull)."""
        shown = self.state.veils.before(node, self.state.content)
        node.base_sha = r.content_sha256
        node.data = None
        node.sha = r.content_sha256
        node.size = r.content_size_bytes
        node.mtime_ns = node.ctime_ns = time.time_ns()
        node.dirty = False
        node.dirty_since = None
        node.version += 1
        self._changed_under_kernel(node, shown, inodes)
        if node.entry_id is not None:
            self.journal.update(
                node.entry_id,
                base_sha=r.content_sha256,
                sha=r.content_sha256,
                data=None,
                dirty=0,
                mtime_ns=node.mtime_ns,
            )

    def take_merge(self, node: Node, r: RemoteMemory, merged: bytes, inodes: list[int]) -> None:
        """Both sides' changes merged: `r` becomes the base and the merge a local change,
        pushed next with `r`'s sha as its precondition (memfs/sync/merge.py)."""
        node.base_sha = r.content_sha256
        node.sent_sha = node.sent_path = None
        if node.entry_id is not None:
            self.journal.update(
                node.entry_id, base_sha=r.content_sha256, sent_sha=None, sent_path=None
            )
        if merged == self.objects.get(r.content_sha256):
            self.take_content(node, r, inodes)  # nothing of ours is missing from `r`
            return
        shown = self.state.veils.before(node, self.state.content)
        self.state.set_content(node, bytearray(merged))  # a change: drops the veil
        self._changed_under_kernel(node, shown, inodes)

    def _changed_under_kernel(self, node: Node, shown: Veil | None, inodes: list[int]) -> None:
        """A pull changed `node`'s content: the kernel is told at the next flush, and
        until then the handlers show it as `shown` (memfs/state/veils.py)."""
        self.state.veils.put(node, shown)
        inodes.append(node.ino)

    def land(
        self, r: RemoteMemory, node: Node | None, parent: Node, name: str, inodes: list[int]
    ) -> Node:
        """Make `parent/name` show remote memory `r` (content, identity); `node`, if
        given, is already placed there. Returns the file."""
        fresh = node is None
        if node is None:
            node = self.state.new_file(parent, name)
        if node.memory_id is not None and node.memory_id != r.id:
            self.state.by_memory.pop(node.memory_id, None)
        node.memory_id = r.id
        self.state.by_memory[r.id] = node
        node.base_sha, node.base_path = r.content_sha256, r.path
        if node.sha != r.content_sha256 or node.data is not None:
            shown = None if fresh else self.state.veils.before(node, self.state.content)
            node.data = None
            node.sha = r.content_sha256
            node.size = r.content_size_bytes
            node.mtime_ns = node.ctime_ns = time.time_ns()
            if not fresh:  # the kernel cannot have cached a node it never saw
                self._changed_under_kernel(node, shown, inodes)
        node.dirty = False
        node.dirty_since = None
        node.version += 1
        node.sent_sha = node.sent_path = None
        if fresh:  # one insert with every field (a cold start lands thousands)
            node.entry_id = self.journal.insert(
                path=r.path,
                kind="file",
                mode=node.mode,
                mtime_ns=node.mtime_ns,
                memory_id=r.id,
                base_sha=r.content_sha256,
                base_path=r.path,
                sha=r.content_sha256,
                dirty=0,
            )
        elif node.entry_id is not None:
            self.journal.update(
                node.entry_id,
                memory_id=r.id,
                base_sha=r.content_sha256,
                base_path=r.path,
                sha=r.content_sha256,
                data=None,
                dirty=0,
                sent_sha=None,
                sent_path=None,
                mtime_ns=node.mtime_ns,
            )
        return node

    # -- uploads ----------------------------------------------------------------------
    def record_sent(self, node: Node, sha: str | None, path: str | None) -> None:
        """Before an upload: what it sends, so a lost answer can be settled (settle_sent)."""
        node.sent_sha, node.sent_path = sha, path
        if node.entry_id is not None:
            self.journal.update(node.entry_id, sent_sha=sha, sent_path=path)

    def record_pushed(
        self,
        node: Node,
        sha: str,
        path: str,
        version: int,
        *,
        base_sha: str | None = None,
        base_path: str | None = None,
        data: bytes | None = None,
    ) -> None:
        """After an upload the store accepted: the new baseline (`base_*`, when given),
        and clean if the file did not change meanwhile (same version, path, linked).
        `data`, the bytes sent: kept as the baseline's object when the file changed
        meanwhile, so the next three-way merge has its base at hand (without it, a
        change on both sides after such an upload fell back to store-wins)."""
        if base_sha is not None and node.memory_id is not None:
            self._pass_on_baseline(node, node.memory_id, base_sha, base_path)
        if base_sha is not None:
            node.base_sha = base_sha
        if base_path is not None:
            node.base_path = base_path
        node.sent_sha = node.sent_path = None
        if node.version == version and node.store_path() == path and node.linked:
            if node.conflict is not None:  # a new local edit reached the store: resolved
                node.conflict = None
                if node.entry_id is not None:
                    self.journal.update(node.entry_id, conflict=None)
            self.make_clean(node, sha)
            return
        if data is not None and node.base_sha == sha and not self.objects.has(sha):
            self.objects.put(data, sha)
        if node.entry_id is not None:
            self.journal.update(
                node.entry_id,
                base_sha=node.base_sha,
                base_path=node.base_path,
                sent_sha=None,
                sent_path=None,
            )

    def _pass_on_baseline(
        self, node: Node, memory_id: str, base_sha: str, base_path: str | None
    ) -> None:
        """The file that uploaded gave its memory away meanwhile (renamed over by another
        file, which took the identity, or buried): the memory's holder now has the
        baseline the store accepted, or its next upload fails its precondition on our
        own write and its bytes end in a conflict copy."""
        for holder in (self.state.by_memory.get(memory_id), self.state.tombstones.get(memory_id)):
            if holder is None or holder is node or holder.base_sha != node.base_sha:
                continue
            holder.base_sha = base_sha
            if base_path is not None:
                holder.base_path = base_path
            if holder.linked and not holder.dirty and holder.current_sha() != base_sha:
                # Its content was the baseline: it is a change now, to be pushed.
                holder.dirty = True
                holder.dirty_since = time.monotonic()
            if holder.entry_id is not None:
                self.journal.update(
                    holder.entry_id,
                    base_sha=holder.base_sha,
                    base_path=holder.base_path,
                    dirty=int(holder.dirty),
                )

    def refuse(self, node: Node, sha: str, why: str, *, retry_at: float | None = None) -> None:
        """The store rejected this content (400/413): held back until it changes, or,
        for a transient cause, until `retry_at`. Only a permanent refusal is journalled:
        a restart retries a transient one at once."""
        node.refused_sha = sha
        node.refused_why = why
        node.retry_at = retry_at
        node.retries = 0 if retry_at is None else node.retries + 1
        if node.entry_id is not None:
            if retry_at is None:
                self.journal.update(
                    node.entry_id, refused_sha=sha, refused_why=why, sent_sha=None, sent_path=None
                )
            else:
                self.journal.update(node.entry_id, sent_sha=None, sent_path=None)
        node.sent_sha = node.sent_path = None
