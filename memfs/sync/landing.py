"""Landing a pass's pulls and removals in the local tree, and telling the kernel.

Synchronous between the pass's awaits: the kernel never sees a half-applied pass. What
changed is queued for invalidation (`notify`) and sent, off the event loop, by
`flush_invalidations` (invariant 4 of docs/concurrency.md). The bookkeeping itself is
`SyncRecords`' (memfs/state/records.py); this module decides where things go and what a
conflict keeps.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

from cachetools import LRUCache

from memfs.audit import Trail
from memfs.errors import FsError
from memfs.logs import Repeated, rfc3339
from memfs.paths import MAX_CONTENT_BYTES, RemoteMemory, sha256_hex
from memfs.state import conflicts
from memfs.state.node import Kind, Node
from memfs.state.records import SyncRecords
from memfs.sync.merge import merge_text, replay_text
from memfs.sync.notify import Notifier
from memfs.sync.plan import WRITE_QUIET_NS, ConflictCopy, PassResult, Plan, Pull

log = logging.getLogger("memfs.sync")

# The bytes of files' last landings kept for `Lander._rebased` (the content before it,
# and what landed), least recently landed dropped first.
LANDINGS_KEPT_BYTES = 1 << 20
# A clean file's landing is kept only if a writer rewrote it in place (truncated it)
# this recently: an editor's buffer may still hold what was there before.
REWRITTEN_RECENTLY_NS = 60 * 1_000_000_000


class Lander:
    """Applies one store's pulls and removals; keeps the conflict copies it made."""

    def __init__(self, records: SyncRecords, notifier: Notifier, trail: Trail) -> None:
        self.records = records  # how what lands reaches the nodes and journal
        self.state = records.state
        self.notifier = notifier
        self.store_id = records.state.store_id
        self.conflict_copies: list[ConflictCopy] = []
        self._pending_inodes: list[int] = []
        self.trail = trail  # the audit trail: conflicts lost
        self.merged: list[Node] = []  # merged this pass: they are pushed in it
        # Conflict copies of local files the store's other shape displaced (`_displace`).
        self.displaced: list[ConflictCopy] = []
        # Files whose clean merge the store could not hold, and why: their local side
        # goes to a conflict copy that says so (`keep_losing_bytes`).
        self._unheld: dict[int, str] = {}
        # By inode: the content a file had before a pull last changed it, what landed,
        # and the file's version just after (`_rebased`).
        self._landed_over: LRUCache[int, tuple[bytes, bytes, int]] = LRUCache(
            LANDINGS_KEPT_BYTES, getsizeof=lambda kept: len(kept[0]) + len(kept[1])
        )
        # A blocked path is retried, and was warned about, every pass: once per cause.
        self._entry_in_way = Repeated(
            log,
            "a local entry is in the way of a remote memory; will retry memory_store_id=%s path=%s",
        )
        self._file_in_way = Repeated(
            log,
            "a local file is in the way of a remote memory's directory; will "
            "retry memory_store_id=%s path=%s",
        )

    def merge(self, node: Node, r: RemoteMemory, inodes: list[int]) -> bool:
        """Both sides changed `node`'s content: merge the two three ways (memfs/sync/
        merge.py). True when the merge is now the file, to be pushed on top of `r`;
        False (a real conflict, a side not at hand, or a merge the store cannot hold:
        over its limit) leaves it to store-wins."""
        state = self.state
        if (
            not node.linked
            or node.memory_id != r.id
            or node.base_sha is None
            or r.path != node.base_path
        ):
            return False
        base = state.objects.get(node.base_sha)
        local = state.content(node)
        remote = state.objects.get(r.content_sha256)
        if base is None or local is None or remote is None:
            return False
        merged = merge_text(base, local, remote)
        if merged is None:
            merged = self._rebased(node, base, local, remote)
        if merged is None:
            return False
        if len(merged) > MAX_CONTENT_BYTES:
            # Pushed, it would be refused and held back while the store keeps the other
            # side: the store wins instead, and the local side is kept as a copy.
            self._unheld[node.ino] = (
                f"the merge of both sides is {len(merged)} bytes, over the store's limit "
                f"of {MAX_CONTENT_BYTES}"
            )
            return False
        before = self._before_landings(node, local)
        self.records.take_merge(node, r, merged, inodes)
        self._keep_landing(node, before, merged)
        if node.dirty:
            self.merged.append(node)
        log.info(
            "memory changed both locally and remotely; merged the two "
            "memory_store_id=%s path=%s version=%s",
            self.store_id,
            node.store_path(),
            r.memory_version_id,
        )
        return True

    def _rebased(self, node: Node, base: bytes, local: bytes, remote: bytes) -> bytes | None:
        """A conflict that is a writer's older buffer saved over a landing it did not
        see: vim loaded the file, a pull changed it, and vim's check of the file's times
        came before the kernel heard, so vim wrote its buffer, the landing's lines
        reverted, over it. Its own change, taken against what it had loaded and made
        again on the landing (`replay_text`: only when the two changed stretches apart),
        merges with `remote`; None when it does not either. A writer that did see the
        landing and kept it has nothing to replay, and the conflict stands."""
        over = self._landed_over.get(node.ino)
        if over is None:
            return None
        before, landed, _version = over
        replayed = replay_text(before, local, landed)
        if replayed is None or replayed == local:
            return None
        merged = merge_text(base, replayed, remote)
        if merged is not None:
            log.info(
                "memory rewritten over a landing it had not seen; its change was "
                "replayed onto the landing memory_store_id=%s path=%s",
                self.store_id,
                node.store_path(),
            )
        return merged

    def _keep_landing(self, node: Node, before: bytes, landed: bytes) -> None:
        """Keep `node`'s landing for `_rebased`; a quarter of the bound at most (the
        store's limit is far below it, a local file need not be)."""
        if len(before) + len(landed) <= LANDINGS_KEPT_BYTES // 4:
            self._landed_over[node.ino] = (before, landed, node.version)
        else:
            self._landed_over.pop(node.ino, None)

    def _before_landings(self, node: Node, before: bytes) -> bytes:
        """What `node` had before the landing about to change it from `before`: the
        content before the first of the landings with no local write between them."""
        over = self._landed_over.get(node.ino)
        return over[0] if over is not None and over[2] == node.version else before

    def busy(self, node: Node) -> bool:
        """A writer has the file open, truncated it in the last `WRITE_QUIET_NS` and its
        change is not pushed: a rewrite may be half done (vim's O_TRUNC, then write), so
        a pull onto it waits (merged at the pass after its close, or once quiet) rather
        than merge with, or lose to the store over, a half-written file. An appender
        never truncates: it is never busy. Without counted opens (zero-message opens)
        "open" is "not closed since the truncate" (the close watch), or, with no close
        seen at all, the quiet spell alone."""
        if self.state.tree.writers_tracked:
            open_ = node.open_writers > 0
        else:
            open_ = node.closed_ns < node.truncated_ns
        return (
            node.linked
            and open_
            and node.dirty
            and time.time_ns() - node.truncated_ns < WRITE_QUIET_NS
        )

    def land_retrieved(
        self, memory: RemoteMemory, result: PassResult, *, merge: bool
    ) -> bool | None:
        """Land one memory retrieved after a lost race (its content is already local);
        True when it merged (`merge`) with the local change, which is then pushed again;
        None when its file is being written (`busy`): nothing landed, the next pass
        merges."""
        node = self.state.by_memory.get(memory.id)
        if node is not None and self.busy(node):
            return None
        inodes: list[int] = []
        entries: list[tuple[int, str]] = []
        if merge and node is not None and self._moved_here_only(node, memory):
            # Renamed here, its content changed there: take the content, keep the rename
            # (it goes up again on the new precondition), never move the file back.
            self.records.take_content(node, memory, inodes)
            result.pulled += 1
            self.notify(inodes, entries)
            return True
        if merge and node is not None and node.dirty and self.merge(node, memory, inodes):
            self.notify(inodes, entries)
            return node.dirty
        if node is not None and self.keep_losing_bytes(
            node, memory.content_sha256, memory.path, memory.memory_version_id
        ):
            result.conflicts += 1
            result.conflict_copies.append(self.conflict_copies[-1])
        self.land(memory, node, inodes, entries)
        self.notify(inodes, entries)
        return False

    def _moved_here_only(self, node: Node, memory: RemoteMemory) -> bool:
        """`node` was only renamed here (its content is its baseline's) and `memory` only
        changed in content there (still at the path both started from)."""
        return (
            not node.dirty
            and node.base_path is not None
            and node.store_path() != node.base_path
            and memory.path == node.base_path
            and node.current_sha() == node.base_sha
            and self.state.objects.has(memory.content_sha256)
        )

    def apply_pulls(self, plan: Plan, result: PassResult, *, require_content: bool) -> bool:
        """Land every pull; synchronous, so the kernel never sees a half-applied pass.
        True when a pull waits for its content (the fetch failed) or for its path (a
        local entry in the way): the next pass must read the same changes again, since
        the store's head will not move to say so."""
        # One journal transaction for the batch: a cold start of 10,000 memories is
        # one commit, not 10,000 (measured: 2.8 s -> 0.23 s at 5,000).
        self.merged = []
        with self.records.batch():
            deferred = self._land_pulls(plan, result, require_content=require_content)
        plan.updates.extend(n for n in self.merged if n not in plan.updates)
        return deferred

    def _land_pulls(self, plan: Plan, result: PassResult, *, require_content: bool) -> bool:
        inodes: list[int] = []
        entries: list[tuple[int, str]] = []
        todo: list[tuple[RemoteMemory, Node | None]] = []
        deferred = False
        for pull in plan.pulls:
            # A pull onto a local change waits for its content even at start: without
            # it the merge cannot be made and the store would win.
            needed = require_content or pull.conflict
            if needed and not self.state.objects.has(pull.remote.content_sha256):
                deferred = True  # fetch failed; the next pass tries again
                continue
            if pull.node is None:
                todo.append((pull.remote, None))
                continue
            if self.busy(pull.node):
                deferred = True  # being written: landed (merged) after its close
                continue
            landing = self._settle_local(pull, pull.node, result, inodes, entries)
            if landing is not None:
                todo.append(landing)
        # Files that trade places (a remote swap or rotation) leave their old names
        # first, so that none of them finds another still in its way.
        targets = {r.path for r, _ in todo}
        detached: set[int] = set()
        for r, node in todo:
            if node is not None and node.store_path() != r.path and node.store_path() in targets:
                self.records.detach(node, entries)
                detached.add(node.ino)
        for r, node in todo:
            target = self.land(r, node, inodes, entries)
            if target is not None:
                result.pulled += 1
            else:
                # Blocked: the feed moves on, so the cursor must not (it is read again).
                deferred = True
                if node is not None and node.ino in detached:
                    self.records.reattach(node)
        displaced, self.displaced = self.displaced, []
        result.conflicts += len(displaced)
        result.conflict_copies.extend(displaced)
        self.notify(inodes, entries)
        return deferred

    def _settle_local(
        self,
        pull: Pull,
        node: Node,
        result: PassResult,
        inodes: list[int],
        entries: list[tuple[int, str]],
    ) -> tuple[RemoteMemory, Node | None] | None:
        """A pull onto a local file: merge it now, or keep the losing bytes and say what
        lands where; None when there is nothing (more) to land."""
        r = pull.remote
        if (not node.linked or node.version != pull.version) and not pull.conflict:
            return None  # changed locally meanwhile: decide again next pass
        if pull.merge == "move":
            if self._move(node, r.path, entries):
                self.records.set_base_path(node, r.path)
                result.pulled += 1
            return None
        if pull.merge == "content":
            self.records.take_content(node, r, inodes)
            result.pulled += 1
            return None
        if pull.conflict and node.dirty and self.merge(node, r, inodes):
            result.pulled += 1
            return None
        if pull.conflict or node.dirty:
            if self.keep_losing_bytes(node, r.content_sha256, r.path, r.memory_version_id):
                result.conflicts += 1
                result.conflict_copies.append(self.conflict_copies[-1])
        return r, (node if node.linked else None)

    def keep_losing_bytes(
        self,
        node: Node,
        remote_sha: str | None,
        remote_path: str,
        remote_version: str = "",
        *,
        why: str | None = None,
    ) -> bool:
        """Save the local bytes a pull is about to replace; True if a conflict was kept."""
        state = self.state
        why = self._unheld.pop(node.ino, None) or why
        local = state.content(node)
        path = node.store_path()
        if local is None:
            return False
        local_sha = sha256_hex(local)
        if local_sha == remote_sha:
            return False
        if node.memory_id is not None and local_sha == node.base_sha:
            # Nothing local is lost but a rename: the remote path wins.
            log.warning(
                "memory moved both locally and remotely; keeping the remote version "
                "memory_store_id=%s path=%s remote_path=%s",
                self.store_id,
                path,
                remote_path,
            )
            return False
        copy = self.records.keep_conflict(node, path, local)
        conflicts.record(
            self.store_id,
            Path(copy),
            path=path,
            memory_id=node.memory_id,
            local_sha=local_sha,
            size=len(local),
            remote_sha=remote_sha,
            remote_version=remote_version,
        )
        self.conflict_copies.append(ConflictCopy(path, copy, rfc3339(time.time()), why))
        self.trail.outcome(
            self.store_id,
            "conflict",
            path,
            copy=copy,
            version=remote_version or None,
            memory_id=node.memory_id,
            why=why,
        )
        log.warning(
            "memory changed both locally and remotely; keeping the remote version "
            "memory_store_id=%s path=%s conflict_copy=%s why=%s",
            self.store_id,
            path,
            copy,
            why,
        )
        return True

    def _clear_way(
        self, path: str, node: Node | None, entries: list[tuple[int, str]], remote_sha: str | None
    ) -> bool:
        """Make `path` free for `node` (or a new file); False if something must stay."""
        occupant = self.state.node_at(path)
        if occupant is None or occupant is node:
            return True
        if occupant.kind is Kind.FILE and occupant.memory_id is None:
            self.keep_losing_bytes(occupant, remote_sha, path)
            self._unlink_local(occupant, entries)
            return True
        if occupant.kind is Kind.DIR and not occupant.children:
            self.records.remove_empty_dir(occupant, entries)
            return True
        if occupant.kind is Kind.DIR and node is None and self._displace(occupant, entries):
            return True
        if (
            occupant.kind is Kind.FILE
            and occupant.base_path is not None
            and occupant.store_path() != occupant.base_path
            and self.state.node_at(occupant.base_path) is None
        ):
            # Renamed locally onto a path the store gave another memory: the store wins
            # the path, and the local file goes back to where its memory is.
            log.warning(
                "memory renamed locally onto a path the store gave another memory; "
                "moving it back memory_store_id=%s path=%s to=%s",
                self.store_id,
                path,
                occupant.base_path,
            )
            return self._move(occupant, occupant.base_path, entries)
        self._entry_in_way.warning(path, self.store_id, path)
        return False

    def _place(
        self,
        node: Node | None,
        path: str,
        entries: list[tuple[int, str]],
        remote_sha: str | None = None,
    ) -> tuple[Node, str] | None:
        """The directory and name `path` needs, with the way cleared; None if blocked."""
        if not self._clear_way(path, node, entries, remote_sha):
            return None
        parent_path, name = path.rsplit("/", 1)
        try:
            parent = self.state.ensure_dirs(parent_path or "/")
        except FsError:
            blocker = self._file_above(parent_path)
            if blocker is None or not self._displace(blocker, entries):
                self._file_in_way.warning(path, self.store_id, path)
                return None
            parent = self.state.ensure_dirs(parent_path)
        return parent, name

    def _file_above(self, path: str) -> Node | None:
        """The local file where `path` (a directory the store has) needs a directory."""
        node = self.state.root
        for name in path[1:].split("/"):
            assert node.children is not None
            child = node.children.get(name)
            if child is None or child.kind is Kind.FILE:
                return child
            node = child
        return None

    def _displace(self, local: Node, entries: list[tuple[int, str]]) -> bool:
        """A file where the store has a directory, or a directory where it has a file:
        another mount gave the path the other shape first, and the store takes no
        memory that overlaps another's (spec §4), so every upload of the local side
        was refused. The store's shape wins: each local file in the way goes to a
        conflict copy (none is lost) and leaves the tree. False, and nothing changed,
        if a file in the way is a memory of the store's (the pass is then retried)."""
        files = [local] if local.kind is Kind.FILE else list(self.state.walk_files(local))
        if any(f.memory_id is not None for f in files):
            return False
        path = local.store_path()
        if local.kind is Kind.FILE:
            log.warning(
                "a local file is where the store has a directory; keeping the store's and "
                "the local file as a conflict copy memory_store_id=%s path=%s",
                self.store_id,
                path,
            )
        else:
            log.warning(
                "a local directory is where the store has a file; keeping the store's and "
                "the local files as conflict copies memory_store_id=%s path=%s files=%d",
                self.store_id,
                path,
                len(files),
            )
        for f in files:
            if self.keep_losing_bytes(
                f, None, f.store_path(), why="the store has the other shape at " + path
            ):
                self.displaced.append(self.conflict_copies[-1])
            self._unlink_local(f, entries)
        if local.kind is Kind.DIR:
            self._remove_dirs(local, entries)
        return True

    def _remove_dirs(self, d: Node, entries: list[tuple[int, str]]) -> None:
        """Remove a directory left with no files in it, its empty subdirectories first."""
        assert d.children is not None
        for child in list(d.children.values()):
            if child.is_dir:
                self._remove_dirs(child, entries)
        self.records.remove_empty_dir(d, entries)

    def _move(self, node: Node, path: str, entries: list[tuple[int, str]]) -> bool:
        """Move a linked (or detached) file to `path`, journal included."""
        placed = self._place(node, path, entries)
        if placed is None:
            return False
        parent, name = placed
        self.records.place(node, parent, name, entries)
        return True

    def land(
        self, r: RemoteMemory, node: Node | None, inodes: list[int], entries: list[tuple[int, str]]
    ) -> Node | None:
        """Make the local tree show remote memory `r` (content, path, identity)."""
        placed = self._place(node, r.path, entries, r.content_sha256)
        if placed is None:
            return None
        parent, name = placed
        if node is not None and not self._move(node, r.path, entries):
            return None
        kept = self._rewritten_before(node, r)
        landed = self.records.land(r, node, parent, name, inodes)
        if kept is not None:
            self._keep_landing(landed, *kept)
        return landed

    def _rewritten_before(self, node: Node | None, r: RemoteMemory) -> tuple[bytes, bytes] | None:
        """A clean file's content, and `r`'s, when `r` replaces it and a writer rewrote
        the file in place lately (its buffer may be the content before): for `_rebased`."""
        if (
            node is None
            or node.dirty
            or node.sha == r.content_sha256
            or time.time_ns() - node.truncated_ns > REWRITTEN_RECENTLY_NS
        ):
            return None
        before = self.state.content(node)
        landed = self.state.objects.get(r.content_sha256)
        if before is None or landed is None:
            return None
        return self._before_landings(node, before), landed

    def _unlink_local(self, node: Node, entries: list[tuple[int, str]]) -> None:
        assert node.parent is not None
        entries.append((node.parent.ino, node.name))
        self.state.remove_file(node, local=False)

    def apply_removals(self, plan: Plan) -> None:
        entries: list[tuple[int, str]] = []
        for node, version in plan.removals:
            if node.linked and node.version == version and not node.dirty:
                log.debug(
                    "memory deleted remotely; removing it memory_store_id=%s path=%s",
                    self.store_id,
                    node.store_path(),
                )
                self._unlink_local(node, entries)
        self.notify([], entries)

    def notify(self, inodes: list[int], entries: list[tuple[int, str]]) -> None:
        if entries:
            self.notifier.invalidate_entries(entries)
            # The directories those names left: a cached listing (FOPEN_CACHE_DIR) is
            # dropped with its inode; an entry invalidation alone misses a name the
            # kernel has a listing, but no dentry, for.
            tree = self.state.tree
            for parent, _name in entries:
                node = tree.nodes.get(parent)
                if node is not None:
                    tree.listing_changed(node)
        self._pending_inodes.extend(inodes)

    async def flush_invalidations(self) -> None:
        tree = self.state.tree
        # Names the kernel was told are missing and that a pull (or a move) brought.
        self.notify([], tree.negatives.take_stale())
        self._pending_inodes.extend(tree.take_changed_listings())
        inodes, self._pending_inodes = self._pending_inodes, []
        await self.notifier.invalidate_inodes(inodes, self.state.veils.drop)
