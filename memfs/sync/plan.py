"""Planning a pass: what to pull, remove and push, from the store's listing.

`Planner.plan` is synchronous: one listing and the local state in, one `Plan` out, with
nothing awaited in between (invariant 1 of docs/concurrency.md). Each pull records the
node version it was decided at, so landing can tell a file changed meanwhile.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Literal

from memfs.audit import Trail
from memfs.paths import RemoteMemory
from memfs.state.node import Kind, Node
from memfs.state.records import SyncRecords
from memfs.sync.schedule import MAX_DEFER, PassKind

# Zero-message opens (no close to wait for): a file written within this long is left
# for a later pass, so a writer's burst goes up as one version, not half of it.
WRITE_QUIET_NS = 2_000_000_000

log = logging.getLogger("memfs.sync")

PassOutcome = Literal["ok", "failed", "cut-off"]


@dataclass(frozen=True)
class ConflictCopy:
    """A conflict copy a pass kept, so `memfs sync` and `status` can name it."""

    path: str  # the file's path in the store
    copy: str  # where the losing local bytes are (the cache's conflicts/)
    at: str  # when, RFC 3339
    # Why the two sides were not merged when they could have been (their merge is over
    # the store's limit); None for a real conflict.
    why: str | None = None


@dataclass
class PassResult:
    started_at: float
    duration_s: float
    outcome: PassOutcome
    error: str | None = None
    pulled: int = 0
    pushed: int = 0
    deleted: int = 0
    conflicts: int = 0
    listed: bool = True  # False: no full listing (a probe, push or feed pass)
    kind: PassKind = "full"  # what the pass did (memfs/sync/schedule.py)
    # This pass's conflicts, so `memfs sync` can name them.
    conflict_copies: list[ConflictCopy] = field(default_factory=list)
    # The version each accepted upload made, by the path it has now (`StoreSync.push_path`).
    versions: dict[str, str] = field(default_factory=dict)
    # Uploads refused because another memory holds the path (or overlaps it): the feed
    # settles them in the next pass; `memfs sync` is exit 1 while any is left.
    unsettled: list[str] = field(default_factory=list)
    cpu_s: float = 0.0  # the daemon's CPU time (every thread) while the pass ran

    def then(self, later: PassResult) -> PassResult:
        """This pass and the `later` one that settled what it left, as one result."""
        return replace(
            later,
            started_at=self.started_at,
            duration_s=later.started_at + later.duration_s - self.started_at,
            pulled=self.pulled + later.pulled,
            pushed=self.pushed + later.pushed,
            deleted=self.deleted + later.deleted,
            conflicts=self.conflicts + later.conflicts,
            listed=self.listed or later.listed,
            conflict_copies=self.conflict_copies + later.conflict_copies,
            versions={**self.versions, **later.versions},
            cpu_s=self.cpu_s + later.cpu_s,
        )


PushOutcome = Literal[
    "pushed", "unchanged", "refused", "conflict", "changed", "missing", "unconfirmed"
]


@dataclass(frozen=True)
class PathPush:
    """What became of one file pushed on request (`StoreSync.push_path`).

    pushed: the store took it (`version`); unchanged: it had it already; refused: it
    will not take it (`why`; a transient refusal is retried later); conflict: another
    session changed the memory first and the file is the store's version now (the local
    bytes in `copy`), or the path is taken; changed: the file's content is not the one
    the caller wrote; missing: no such file; unconfirmed: the store did not answer (the
    change stays dirty and is pushed later).
    """

    outcome: PushOutcome
    path: str
    version: str | None = None
    why: str = ""
    copy: str | None = None

    @property
    def ok(self) -> bool:
        return self.outcome in ("pushed", "unchanged")


@dataclass
class Pull:
    """A remote memory to bring in, and the local file (if any) it lands on."""

    remote: RemoteMemory
    node: Node | None
    version: int
    conflict: bool = False
    # A change on each side that does not collide is merged instead of lost:
    # "move" takes the remote rename and keeps the local content (pushed after);
    # "content" takes the remote content and keeps the local rename (pushed after).
    merge: Literal["move", "content"] | None = None


@dataclass
class Plan:
    pulls: list[Pull] = field(default_factory=list)
    removals: list[tuple[Node, int]] = field(default_factory=list)
    updates: list[Node] = field(default_factory=list)
    creates: list[Node] = field(default_factory=list)
    deletes: list[Node] = field(default_factory=list)


class Planner:
    """Decides one store's passes; the state records what the listing proves."""

    def __init__(
        self, records: SyncRecords, trail: Trail, *, excluded: Callable[[Node], bool]
    ) -> None:
        self.records = records  # how a plan's settlements reach the nodes and journal
        self.state = records.state
        self.store_id = records.state.store_id
        self.excluded = excluded
        self.trail = trail  # the audit trail: what became of each local change

    def plan(
        self,
        remote: dict[str, RemoteMemory],
        *,
        final: bool,
        interval: float,
        asked: bool = False,
        files: Iterable[Node] | None = None,
    ) -> Plan:
        """What this pass pulls, removes and pushes, from one listing (no await).

        Not pure: it first records what the listing proves (a lost answer settled,
        the same change on both sides, a vim save continuing its memory). `asked`: a
        pass someone waits for (`memfs sync`), which pushes what was just written.
        `files`: the pass's scope (None: every file); `remote` then holds at least the
        memories of those files and of every tombstone.
        """
        state = self.state
        plan = Plan()
        self.pair_saves()
        self.settle_lost_creates(remote)
        known: set[str] = set(state.by_memory) | set(state.tombstones)
        now = time.monotonic()

        def ready(node: Node) -> bool:
            return self.ready_to_push(node, now, final or asked, interval, final)

        scope = list(state.walk_files() if files is None else files)
        for node in scope:
            if node.memory_id is not None:
                self._plan_known(plan, node, remote, ready)
        self._plan_tombstones(plan, remote)
        self._plan_new_files(plan, remote, known, ready, scope)
        for r in remote.values():
            if r.id not in known and r.id not in state.by_memory:
                plan.pulls.append(Pull(r, None, 0))
        return plan

    def plan_local(
        self, *, asked: bool, final: bool, interval: float, files: Iterable[Node] | None = None
    ) -> Plan:
        """A push pass's uploads, from the local state alone (no listing, no feed):
        changed or renamed files of known memories (updates, each on its baseline's
        precondition, so a remote change is caught and merged as usual) and new files
        (creates; a path the store has meanwhile is a path conflict the feed then
        settles). An upload whose answer was lost waits for the feed, which settles it."""
        plan = Plan()
        self.pair_saves()
        now = time.monotonic()
        for node in list(self.state.walk_files() if files is None else files):
            if self.excluded(node) or node.sent_sha is not None or node.sent_path is not None:
                continue
            if not self.ready_to_push(node, now, asked, interval, final):
                continue
            if node.memory_id is None:
                plan.creates.append(node)
            elif node.dirty or node.store_path() != node.base_path:
                plan.updates.append(node)
        return plan

    def _plan_known(
        self,
        plan: Plan,
        node: Node,
        remote: dict[str, RemoteMemory],
        ready: Callable[[Node], bool],
    ) -> None:
        """A file with a memory: pull, push, remove, merge or call it a conflict."""
        self.records.settle_sent(node, remote.get(node.memory_id or ""))
        r = remote.get(node.memory_id or "")
        if r is not None:
            self.records.note_listed_size(node, r)
        renamed = node.store_path() != node.base_path
        if self.excluded(node):
            return
        if r is None:
            self._plan_gone_remotely(plan, node, renamed)
            return
        remote_changed = r.content_sha256 != node.base_sha or r.path != node.base_path
        if not remote_changed:
            if (node.dirty or renamed) and ready(node):
                plan.updates.append(node)
            return
        if not node.dirty and not renamed:
            plan.pulls.append(Pull(r, node, node.version))
            return
        self._plan_both_changed(plan, node, r, renamed, ready)

    def _plan_gone_remotely(self, plan: Plan, node: Node, renamed: bool) -> None:
        """Its memory is no longer listed: remove the file, or keep a local edit."""
        state = self.state
        if not (node.dirty or (renamed and state.content(node) is not None)):
            plan.removals.append((node, node.version))
            return
        path = node.store_path()
        self.records.forget_identity(node)
        if state.read_only:
            log.warning(
                "memory deleted remotely but edited locally; keeping "
                "the file, which a read-only store cannot push "
                "memory_store_id=%s path=%s",
                self.store_id,
                path,
            )
        else:
            log.info(
                "memory deleted remotely but edited locally; re-creating "
                "it from the file memory_store_id=%s path=%s",
                self.store_id,
                path,
            )

    def _plan_both_changed(
        self,
        plan: Plan,
        node: Node,
        r: RemoteMemory,
        renamed: bool,
        ready: Callable[[Node], bool],
    ) -> None:
        """Changed on both sides: the same change, a merge, or a conflict."""
        local_sha = node.current_sha()
        if local_sha == r.content_sha256 and node.store_path() == r.path:
            self.records.mark_synced(node, r)  # the same change on both sides
            return
        local_content = node.dirty and local_sha != node.base_sha
        remote_content = r.content_sha256 != node.base_sha
        if not remote_content and not renamed:
            # Renamed remotely, edited locally: follow the rename, push the edit.
            plan.pulls.append(Pull(r, node, node.version, merge="move"))
            if ready(node):
                plan.updates.append(node)
        elif not local_content and r.path == node.base_path:
            # Edited remotely, renamed locally: take the content, push the rename.
            plan.pulls.append(Pull(r, node, node.version, merge="content"))
        else:
            plan.pulls.append(Pull(r, node, node.version, conflict=True))

    def _plan_tombstones(self, plan: Plan, remote: dict[str, RemoteMemory]) -> None:
        """Deleted locally: delete remotely, unless the remote changed (then restore)."""
        for memory_id, tomb in list(self.state.tombstones.items()):
            self.records.settle_sent(tomb, remote.get(memory_id))
            r = remote.get(memory_id)
            if r is None:
                self.records.drop_tombstone(tomb)
            elif r.content_sha256 == tomb.base_sha and r.path == tomb.base_path:
                plan.deletes.append(tomb)
            else:
                log.warning(
                    "memory deleted locally but changed remotely; restoring the "
                    "remote version memory_store_id=%s path=%s",
                    self.store_id,
                    r.path,
                )
                self.trail.outcome(
                    self.store_id,
                    "undeleted",
                    tomb.base_path,
                    why="changed remotely; the remote version is back",
                )
                self.records.drop_tombstone(tomb)
                plan.pulls.append(Pull(r, None, 0))

    def _plan_new_files(
        self,
        plan: Plan,
        remote: dict[str, RemoteMemory],
        known: set[str],
        ready: Callable[[Node], bool],
        scope: list[Node],
    ) -> None:
        """Files with no memory yet: create them, or settle a create whose answer was lost."""
        state = self.state
        by_path = {m.path: m for m in remote.values()}
        new = [n for n in scope if n.memory_id is None and not self.excluded(n)]
        for node in new:
            # Moved since its create went unanswered: the memory it made is this file's,
            # and the move is pushed as a rename (not a second memory, nor a pull).
            sent = node.sent_path
            if sent is None or node.sent_sha is None or sent == node.store_path():
                continue
            r = by_path.get(sent)
            if r is not None and r.id not in known and r.content_sha256 == node.sent_sha:
                known.add(r.id)
                self.records.adopt_own_create(node, r)
                if ready(node) and not state.read_only:
                    plan.updates.append(node)
        for node in new:
            if node.memory_id is not None:
                continue
            r = by_path.get(node.store_path())
            if r is not None and r.id not in known:
                known.add(r.id)
                self._plan_lost_create(plan, node, r, ready)
            elif not state.read_only and ready(node):
                plan.creates.append(node)

    def settle_lost_creates(self, remote: dict[str, RemoteMemory]) -> None:
        """Files unlinked while their create went unanswered: a memory listed at the path
        the create sent, with the bytes it sent, and known to no file here, is the one it
        made. A new file at that path takes it over (its bytes go up as an update);
        otherwise it is deleted like the file was. Either way it is never pulled back."""
        state = self.state
        if not state.lost_creates:
            return
        by_path = {m.path: m for m in remote.values()}
        for path, lost in list(state.lost_creates.items()):
            r = by_path.get(path)
            if (
                r is None
                or r.content_sha256 != lost.sent_sha
                or r.id in state.by_memory
                or r.id in state.tombstones
            ):
                self.records.drop_lost_create(path)  # it never landed, or is another's now
                continue
            occupant = state.node_at(path)
            if occupant is not None and occupant.kind is Kind.FILE and occupant.memory_id is None:
                self.records.drop_lost_create(path)
                self.records.adopt_own_create(occupant, r)
                continue
            log.info(
                "a create whose answer was lost made this memory after its file was "
                "deleted; deleting it memory_store_id=%s path=%s",
                self.store_id,
                path,
            )
            self.records.bury_lost_create(path, r)

    def _plan_lost_create(
        self, plan: Plan, node: Node, r: RemoteMemory, ready: Callable[[Node], bool]
    ) -> None:
        """A new file where an unknown memory is listed at the same path."""
        state = self.state
        if node.current_sha() == r.content_sha256:
            self.records.mark_synced(node, r)  # a create whose answer was lost
        elif node.sent_sha == r.content_sha256 and node.sent_path == r.path:
            # Our own create whose answer was lost, edited since: it is ours,
            # and the newer bytes are pushed as an update, not lost to a copy.
            self.records.adopt_own_create(node, r)
            if ready(node) and not state.read_only:
                plan.updates.append(node)
        else:
            plan.pulls.append(Pull(r, node, node.version, conflict=True))

    def ready_to_push(
        self, node: Node, now: float, asked: bool, interval: float, final: bool
    ) -> bool:
        """`asked`: a pass someone waits for (or the final one); `final`: the last."""
        if node.refused_sha is not None and node.refused_sha == node.current_sha():
            # Refused: permanently until it changes; transiently until its retry is due,
            # or someone asks (`memfs sync`, the final pass).
            retry_at = node.retry_at
            if retry_at is None or not (asked or final or time.time() >= retry_at):
                return False
        if final:
            return True
        if self.state.tree.writers_tracked:
            if node.open_writers == 0:
                return True
        elif asked or time.time_ns() - node.mtime_ns >= WRITE_QUIET_NS:
            return True  # no close to wait for: no write for a while stands in for it
        elif self.state.tree.closes_seen and node.closed_ns >= node.mtime_ns:
            return True  # closed since its last write (the close watch)
        # Open for write: wait for the close, but never longer than one more interval;
        # and not past MAX_DEFER for a file closed since it changed and opened again (a
        # stream of appends is open at some pass now and then: it must not miss it).
        since = node.dirty_since
        if since is None:
            return False
        reopened = node.closed_at is not None and node.closed_at >= since
        return now - since >= (min(interval, MAX_DEFER) if reopened else interval)

    def pair_saves(self) -> None:
        """A new file where a deleted memory was (vim's save) continues that memory."""
        state = self.state
        for tomb in list(state.tombstones.values()):
            if tomb.base_path is None:
                continue
            node = self.state.node_at(tomb.base_path)
            if node is None or node.kind is not Kind.FILE or node.memory_id is not None:
                continue
            self.records.continue_memory(tomb, node)
