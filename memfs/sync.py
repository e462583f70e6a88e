"""The sync engine: one `StoreSync` per store decides what to pull and push.

A pass lists the store (basic view: shas and paths, no content), compares every file
with its baseline (the memory id, sha and path at the last successful sync), pulls
what changed remotely, and pushes what changed locally. The store wins every conflict,
and the losing local bytes are kept in the cache's conflicts area. See docs/sync.md for
the state machine and every log line.

Only this task talks to the store for a mount. Between two awaits it mutates the tree
atomically; after every await it re-checks what it decided on, because FUSE handlers
may have changed the file meanwhile (invariants 1 and 3 in docs/concurrency.md).
"""

from __future__ import annotations

import fnmatch
import logging
import math
import re
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

import trio

from memfs import cachegc
from memfs.client import FullMemory, StoreClient
from memfs.errors import (
    Conflict,
    FsError,
    NotFound,
    PathConflict,
    PreconditionFailed,
    Rejected,
    StoreAuthError,
    StoreError,
    StoreUnavailable,
)
from memfs.notify import Notifier
from memfs.paths import MARKER_PATH, RemoteMemory, is_valid_memory_path, sha256_hex
from memfs.tree import Kind, Node, StoreState

log = logging.getLogger("memfs.sync")

DeletionMode = Literal["enabled", "log_only", "disabled"]
DEFAULT_EXCLUDES = (".*.swp", ".*.swo", ".*.swx", "*~", ".#*", "#*#", "4913", ".nfs*",
                    ".fuse_hidden*")
MIN_INTERVAL = 5.0
# An idle pass asks only for the store's newest version; every this many passes it lists
# the whole store anyway, as a guard against a server that changed without a version.
FULL_LISTING_EVERY = 20
# A read of content whose download just failed answers EIO at once for this long, so the
# kernel's retry of the read does not wait out the content timeout a second time.
FETCH_RETRY_AFTER = 5.0
# The object cache is collected at start and this often (memfs/cachegc.py).
GC_EVERY = 600.0


@dataclass
class PassResult:
    started_at: float
    duration_s: float
    outcome: str  # "ok" | "failed" | "cut-off"
    error: str | None = None
    pulled: int = 0
    pushed: int = 0
    deleted: int = 0
    conflicts: int = 0
    listed: bool = True  # False: nothing changed on either side, the listing was skipped


@dataclass
class _Pull:
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
class _Plan:
    pulls: list[_Pull] = field(default_factory=list)
    removals: list[tuple[Node, int]] = field(default_factory=list)
    updates: list[Node] = field(default_factory=list)
    creates: list[Node] = field(default_factory=list)
    deletes: list[Node] = field(default_factory=list)


def delete_cap(baseline: int) -> int:
    """The reference worker's per-pass delete cap."""
    return max(8, min(50, baseline // 4))


class StoreSync:
    """Keeps one store's subtree and the store itself in step."""

    def __init__(self, state: StoreState, client: StoreClient, notifier: Notifier, *,
                 interval: float = 15.0, deletions: DeletionMode = "enabled",
                 excludes: Iterable[str] = DEFAULT_EXCLUDES, fetch_concurrency: int = 16,
                 push_concurrency: int = 8, flush_timeout: float = 30.0,
                 cache_max_bytes: int | None = None) -> None:
        self.state = state
        self.client = client
        self.notifier = notifier
        self.interval = interval
        self.flush_timeout = flush_timeout
        self.cache_max_bytes = cache_max_bytes
        self.deletions = deletions
        self.excludes = tuple(excludes)
        # One compiled pattern: an idle pass checks every file name against it.
        self._exclude_re = re.compile("|".join(
            f"(?:{fnmatch.translate(p)})" for p in self.excludes) or r"(?!)")
        state.local_only = self._excluded_name
        self.fetch_limit = trio.CapacityLimiter(fetch_concurrency)
        # 8 uploads in flight: the store serialises writes anyway, and more concurrent
        # requests cost the client more CPU than they save (2,000-file flush: 32 -> 17.5 s,
        # 8 -> 9.0 s, 4 -> 8.0 s, measured side by side on the same server).
        self.push_limit = trio.CapacityLimiter(push_concurrency)
        self.store_id = state.store_id
        self.last_pass: PassResult | None = None
        self.next_pass_at: float | None = None
        self.conflict_copies: list[dict[str, str]] = []
        self.offline = False  # the last pass could not reach the store (or none yet)
        self._wake = trio.Event()
        self._started_seq = 0
        self._completed_seq = 0
        self._completed = trio.Event()
        self._pass_lock = trio.Lock()
        self._arrived: dict[str, trio.Event] = {}
        self._log_only_said: set[str] = set()
        self._missing: dict[str, str] = {}  # sha -> memory id, content not yet local
        self._pending_inodes: list[int] = []
        self._renames_to_retry: list[Node] = []  # stepped aside this pass (_step_aside)
        self._failed: dict[str, float] = {}  # sha -> when its download last failed
        # The idle-pass shortcut (see _idle): what the last full pass saw.
        self._head_supported = True
        self._listed_head: str | None = ""
        self._listed_generation = -1
        self._left_over = True
        self._lean_passes = 0
        self._urgent_send, self._urgent_recv = trio.open_memory_channel[tuple[str, str]](
            10_000)

    # -- public verbs ---------------------------------------------------------------
    def request_sync(self) -> None:
        self._wake.set()

    async def sync_now(self) -> PassResult:
        """Run a pass that starts after this call, and return its result."""
        target = self._started_seq + 1
        self.request_sync()
        while self._completed_seq < target:
            await self._completed.wait()
        assert self.last_pass is not None
        return self.last_pass

    async def flush_writes(self) -> PassResult:
        """A pass that pushes and pulls but sends no deletes: the worker's push-only flush.

        A session that ends on an error or cancel may have removed files it meant to put
        back; its deletions wait in the journal (tombstones) instead of reaching the store.
        """
        saved = self.deletions
        if saved == "enabled":
            self.deletions = "disabled"
        try:
            return await self.sync_now()
        finally:
            self.deletions = saved

    async def restore_missing(self) -> int:
        """Bring back every synced file that is missing now instead of deleting it remotely.

        A tool call that was stopped may have moved files away (`mv`, a rename-based
        rewrite) and not put them back. A local delete not pushed yet is forgotten, so the
        next pass pulls the memory again; a file moved to a new path whose old path is
        free becomes a new file there, and the memory is pulled back at its old path (a
        move turns into a copy). A new file written where a deleted one was is a save in
        place and is left alone. Returns how many paths come back.
        """
        restored = 0
        async with self._pass_lock:  # never between a pass's plan and its deletes
            state = self.state
            for tomb in list(state.tombstones.values()):
                if tomb.base_path is not None and self._node_at(tomb.base_path) is not None:
                    continue
                self._drop_tombstone(tomb)
                restored += 1
            for node in list(state.walk_files()):
                if (node.memory_id is None or node.base_path is None
                        or node.store_path() == node.base_path
                        or self._node_at(node.base_path) is not None):
                    continue
                self._forget_identity(node)
                restored += 1
            if restored:
                state.generation += 1  # defeat the idle shortcut: the next pass lists
                log.info("restoring files a stopped tool call left missing "
                         "memory_store_id=%s paths=%d", self.store_id, restored)
        return restored

    async def wait_content(self, node: Node) -> None:
        """Wait until `node`'s content is local (the caller bounds the wait)."""
        sha = node.sha
        if sha is None or self.state.objects.has(sha):
            return
        failed_at = self._failed.get(sha)
        if failed_at is not None and time.monotonic() - failed_at < FETCH_RETRY_AFTER:
            return  # it just failed: answer now (EIO) instead of waiting out the bound
        event = self._arrived.setdefault(sha, trio.Event())
        if node.memory_id is not None:
            self._missing[sha] = node.memory_id
        try:
            self._urgent_send.send_nowait((sha, node.memory_id or ""))
        except trio.WouldBlock:
            pass  # the background download brings it anyway
        try:
            await event.wait()
        except trio.Cancelled:
            # The reader's bound ran out (a store that never answers): the kernel's
            # retry of the same read gets EIO at once instead of a second full wait.
            self._failed[sha] = time.monotonic()
            raise

    def statistics(self) -> dict[str, Any]:
        stats: dict[str, Any] = dict(self.state.statistics())
        stats["missing_content"] = len(self._missing)
        stats["offline"] = self.offline
        stats["conflict_copies"] = list(self.conflict_copies)
        refused: list[dict[str, str]] = []
        dirty: list[str] = []
        excluded = 0
        for n in self.state.walk_files():
            name = n.state_name()
            if name == "refused":
                refused.append({"path": n.store_path(), "why": n.refused_why or ""})
            elif name == "dirty":
                if self._excluded(n):
                    excluded += 1  # local-only by design: never "waiting to be pushed"
                else:
                    dirty.append(n.store_path())
        stats["refused_files"] = refused
        stats["dirty_files"] = dirty
        stats["dirty"] = len(dirty)
        stats["excluded"] = excluded
        stats["pending_delete_paths"] = [n.base_path for n in self.state.tombstones.values()]
        if self.last_pass is not None:
            lp = self.last_pass
            stats["last_pass"] = {"at": lp.started_at, "duration_s": round(lp.duration_s, 3),
                                  "outcome": lp.outcome, "error": lp.error,
                                  "pulled": lp.pulled, "pushed": lp.pushed,
                                  "deleted": lp.deleted, "conflicts": lp.conflicts,
                                  "listed": lp.listed}
        else:
            stats["last_pass"] = None
        stats["next_pass_at"] = self.next_pass_at
        return stats

    # -- lifetime -------------------------------------------------------------------
    async def start(self, *, offline: bool = False) -> None:
        """Load the journal and merge the store's listing: the mount can go live after.

        Content is not awaited here; it streams in behind the mount (`run`). `offline`
        (the store is unreachable, the journal warm): the journal alone is the tree
        until a pass reaches the store.
        """
        loaded = self.state.load_journal()
        log.debug("journal loaded memory_store_id=%s rows=%d", self.store_id, loaded)
        if offline:
            self.offline = True
            return
        result = await self._pass(initial=True)
        if result.outcome != "ok":
            raise StoreError(result.error or "the first sync failed")

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                  ) -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._urgent_fetcher)
            nursery.start_soon(self._background_fetch)
            nursery.start_soon(self._collector)
            task_status.started()
            while True:
                self.next_pass_at = time.time() + self.interval
                with trio.move_on_after(self.interval):
                    await self._wake.wait()
                self._wake = trio.Event()
                await self._pass(initial=False)

    async def collect_garbage(self) -> cachegc.Collected:
        """Clean the object cache between passes (see memfs/cachegc.py)."""
        found = await trio.to_thread.run_sync(self.state.objects.scan)
        async with self._pass_lock:
            return cachegc.collect(self.state, found, max_clean_bytes=self.cache_max_bytes)

    async def _collector(self) -> None:
        """At start, then every GC_EVERY seconds; a failure only waits for the next."""
        while True:
            try:
                await self.collect_garbage()
            except OSError as e:
                log.warning("object cache collection failed memory_store_id=%s: %s",
                            self.store_id, e)
            await trio.sleep(GC_EVERY)

    async def final_sync(self) -> PassResult:
        """The last pass at unmount, bounded; what is left stays in the journal."""
        timeout = self.flush_timeout
        with trio.move_on_after(timeout) as scope:
            return await self._pass(initial=False, final=True)
        left = self.statistics()["dirty"]
        log.warning("final memory sync cut off after %dms; %d changed files had not "
                    "finished uploading and stay in the journal memory_store_id=%s",
                    int(timeout * 1000), left, self.store_id)
        assert scope.cancelled_caught
        return PassResult(time.time(), timeout, "cut-off", "final sync cut off")

    # -- one pass -------------------------------------------------------------------
    async def _pass(self, *, initial: bool, final: bool = False) -> PassResult:
        async with self._pass_lock:
            self._started_seq += 1
            seq = self._started_seq
            started = time.time()
            t0 = time.monotonic()
            result = PassResult(started, 0.0, "ok")
            try:
                await self._run_pass(result, initial=initial, final=final)
            except Exception as e:
                cause = _expected_failure(e)
                if cause is None:
                    raise  # a bug: end the mount; the journal keeps every dirty byte
                result.outcome, result.error = "failed", str(cause)
                log.warning("memory sync failed memory_store_id=%s: %s", self.store_id, cause)
                self.offline = isinstance(cause, StoreUnavailable)
            else:
                if self.offline:
                    log.info("memory store reachable again memory_store_id=%s",
                             self.store_id)
                self.offline = False
            result.duration_s = time.monotonic() - t0
            self.last_pass = result
            self._completed_seq = seq
            done, self._completed = self._completed, trio.Event()
            done.set()
            log.debug("sync pass done memory_store_id=%s outcome=%s ms=%d pulled=%d pushed=%d",
                      self.store_id, result.outcome, int(result.duration_s * 1000),
                      result.pulled, result.pushed)
            return result

    async def _store_head(self) -> str | None:
        """The store's newest version id: every create, change and delete appends one.

        Asked before the listing, so a change made while listing shows up as a newer
        head next time. "" when the store cannot say (then every pass lists).
        """
        if not self._head_supported:
            return ""
        try:
            versions = await self.client.list_versions(self.store_id, limit=1)
        except (NotFound, Rejected):
            self._head_supported = False
            return ""
        return versions[0].id if versions else None

    def _idle(self, head: str | None) -> bool:
        """Nothing changed on either side since the last full pass: skip the listing."""
        return (head != "" and head == self._listed_head
                and self.state.generation == self._listed_generation
                and not self._left_over
                and self._lean_passes < FULL_LISTING_EVERY)

    async def _run_pass(self, result: PassResult, *, initial: bool, final: bool) -> None:
        head = await self._store_head()
        if not initial and self._idle(head):
            self._lean_passes += 1
            result.listed = False
            return
        generation = self.state.generation
        remote: dict[str, RemoteMemory] = {}
        for memory in await self.client.list_memories(self.store_id):
            if memory.path == MARKER_PATH:
                log.warning("the server listed the reserved marker path; skipping path=%s "
                            "memory_store_id=%s", memory.path, self.store_id)
                continue
            if not is_valid_memory_path(memory.path):
                log.warning("the server listed a path no memory can have; skipping "
                            "memory_store_id=%s path=%r", self.store_id, memory.path)
                continue
            remote[memory.id] = memory
        plan = self._plan(remote, final=final)
        if not initial:
            await self._fetch([p.remote for p in plan.pulls])
        # Removals first: a remotely deleted file may be in the way of a pulled one.
        self._apply_removals(plan)
        self._apply_pulls(plan, result, require_content=not initial)
        # Before pushing, and for read-only stores too: the kernel must forget what the
        # pulls changed before this pass is reported done.
        await self.flush_invalidations()
        if not self.state.read_only:
            await self._push(plan, result)
        self._listed_head, self._listed_generation = head, generation
        self._lean_passes = 0
        self._left_over = self._has_left_over()

    def _has_left_over(self) -> bool:
        """Anything a later pass still has to push, even with no new local change."""
        state = self.state
        if state.read_only:
            return False
        if self.deletions == "enabled" and state.tombstones:
            return True
        for node in state.walk_files():
            if self._excluded(node):
                continue
            if node.memory_id is None or node.dirty or node.sent_sha or node.sent_path:
                if node.refused_sha is None or node.refused_sha != node.current_sha():
                    return True
            elif node.base_path is not None and node.base_path != node.store_path():
                return True
        return False

    # -- deciding -------------------------------------------------------------------
    def _excluded(self, node: Node) -> bool:
        return self._excluded_name(node.name)

    def _excluded_name(self, name: str) -> bool:
        return self._exclude_re.fullmatch(name) is not None

    def _plan(self, remote: dict[str, RemoteMemory], *, final: bool) -> _Plan:
        state = self.state
        plan = _Plan()
        self._pair_saves()
        by_path = {m.path: m for m in remote.values()}
        known: set[str] = set(state.by_memory) | set(state.tombstones)
        now = time.monotonic()

        for node in list(state.walk_files()):
            if node.memory_id is None:
                continue
            self._settle_sent(node, remote.get(node.memory_id))
            r = remote.get(node.memory_id)
            path = node.store_path()
            renamed = path != node.base_path
            if self._excluded(node):
                continue
            if r is None:
                if node.dirty or renamed:
                    self._forget_identity(node)
                    if state.read_only:
                        log.warning("memory deleted remotely but edited locally; keeping "
                                    "the file, which a read-only store cannot push "
                                    "memory_store_id=%s path=%s", self.store_id, path)
                    else:
                        log.info("memory deleted remotely but edited locally; re-creating "
                                 "it from the file memory_store_id=%s path=%s",
                                 self.store_id, path)
                else:
                    plan.removals.append((node, node.version))
                continue
            remote_changed = r.content_sha256 != node.base_sha or r.path != node.base_path
            if not remote_changed:
                if (node.dirty or renamed) and self._ready_to_push(node, now, final):
                    plan.updates.append(node)
                continue
            if not node.dirty and not renamed:
                plan.pulls.append(_Pull(r, node, node.version))
                continue
            local_sha = node.current_sha()
            if local_sha == r.content_sha256 and path == r.path:
                self._mark_synced(node, r)  # the same change on both sides
                continue
            local_content = node.dirty and local_sha != node.base_sha
            remote_content = r.content_sha256 != node.base_sha
            if not remote_content and not renamed:
                # Renamed remotely, edited locally: follow the rename, push the edit.
                plan.pulls.append(_Pull(r, node, node.version, merge="move"))
                if self._ready_to_push(node, now, final):
                    plan.updates.append(node)
            elif not local_content and r.path == node.base_path:
                # Edited remotely, renamed locally: take the content, push the rename.
                plan.pulls.append(_Pull(r, node, node.version, merge="content"))
            else:
                plan.pulls.append(_Pull(r, node, node.version, conflict=True))

        for memory_id, tomb in list(state.tombstones.items()):
            self._settle_sent(tomb, remote.get(memory_id))
            r = remote.get(memory_id)
            if r is None:
                self._drop_tombstone(tomb)
            elif r.content_sha256 == tomb.base_sha and r.path == tomb.base_path:
                plan.deletes.append(tomb)
            else:
                log.warning("memory deleted locally but changed remotely; restoring the "
                            "remote version memory_store_id=%s path=%s", self.store_id, r.path)
                self._drop_tombstone(tomb)
                plan.pulls.append(_Pull(r, None, 0))

        for node in list(state.walk_files()):
            if node.memory_id is not None or self._excluded(node):
                continue
            path = node.store_path()
            r = by_path.get(path)
            if r is not None and r.id not in known:
                known.add(r.id)
                if node.current_sha() == r.content_sha256:
                    self._mark_synced(node, r)  # a create whose answer was lost
                elif node.sent_sha == r.content_sha256 and node.sent_path == r.path:
                    # Our own create whose answer was lost, edited since: it is ours,
                    # and the newer bytes are pushed as an update, not lost to a copy.
                    state.adopt_identity(node, r.id, r.content_sha256, r.path)
                    node.sent_sha = node.sent_path = None
                    if self._ready_to_push(node, now, final) and not state.read_only:
                        plan.updates.append(node)
                else:
                    plan.pulls.append(_Pull(r, node, node.version, conflict=True))
                continue
            if state.read_only or not self._ready_to_push(node, now, final):
                continue
            plan.creates.append(node)

        for r in remote.values():
            if r.id not in known and r.id not in state.by_memory:
                plan.pulls.append(_Pull(r, None, 0))
        return plan

    def _ready_to_push(self, node: Node, now: float, final: bool) -> bool:
        if node.refused_sha is not None and node.refused_sha == node.current_sha():
            return False
        if final or node.open_writers == 0:
            return True
        # Open for write: wait for the close, but never longer than one more interval.
        return node.dirty_since is not None and now - node.dirty_since >= self.interval

    def _pair_saves(self) -> None:
        """A new file where a deleted memory was (vim's save) continues that memory."""
        state = self.state
        for memory_id, tomb in list(state.tombstones.items()):
            if tomb.base_path is None:
                continue
            node = self._node_at(tomb.base_path)
            if node is None or node.kind is not Kind.FILE or node.memory_id is not None:
                continue
            del state.tombstones[memory_id]
            if tomb.entry_id is not None:
                state.journal.delete(tomb.entry_id)
                tomb.entry_id = None
            state.adopt_identity(node, memory_id, tomb.base_sha, tomb.base_path, tomb.sent_sha)

    def _node_at(self, path: str) -> Node | None:
        node = self.state.root
        for name in path[1:].split("/"):
            if node.children is None:
                return None
            child = node.children.get(name)
            if child is None:
                return None
            node = child
        return node

    def _settle_sent(self, node: Node, r: RemoteMemory | None) -> None:
        """An upload whose answer was lost counts as ours if the store shows its sha."""
        if r is None or (node.sent_sha is None and node.sent_path is None):
            return
        changed: dict[str, object] = {}
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
        changed.update(sent_sha=None, sent_path=None)
        if node.entry_id is not None:
            self.state.journal.update(node.entry_id, **changed)

    def _mark_synced(self, node: Node, r: RemoteMemory) -> None:
        state = self.state
        if node.memory_id != r.id:
            state.adopt_identity(node, r.id, r.content_sha256, r.path)
        node.base_sha, node.base_path = r.content_sha256, r.path
        self._make_clean(node, r.content_sha256)

    def _make_clean(self, node: Node, sha: str) -> None:
        """Content equal to the baseline moves from the journal to the object store."""
        state = self.state
        if node.data is not None:
            state.objects.put(bytes(node.data), sha)
            if node.open_handles == 0:
                node.data = None
        node.sha = sha
        node.dirty = False
        node.dirty_since = None
        if node.entry_id is not None:
            state.journal.update(node.entry_id, sha=sha, data=None, dirty=0,
                                 base_sha=node.base_sha, base_path=node.base_path,
                                 memory_id=node.memory_id, sent_sha=None, sent_path=None)

    def _forget_identity(self, node: Node) -> None:
        state = self.state
        if node.memory_id is not None and state.by_memory.get(node.memory_id) is node:
            del state.by_memory[node.memory_id]
        node.memory_id = node.base_sha = node.base_path = None
        node.sent_sha = node.sent_path = None
        node.dirty = True
        if node.entry_id is not None:
            state.journal.update(node.entry_id, memory_id=None, base_sha=None,
                                 base_path=None, sent_sha=None, sent_path=None, dirty=1)

    def _drop_tombstone(self, tomb: Node) -> None:
        state = self.state
        if tomb.memory_id is not None and state.tombstones.get(tomb.memory_id) is tomb:
            del state.tombstones[tomb.memory_id]
        if tomb.entry_id is not None:
            state.journal.delete(tomb.entry_id)
            tomb.entry_id = None

    # -- content --------------------------------------------------------------------
    async def _fetch(self, memories: list[RemoteMemory]) -> None:
        """Bring the contents of `memories` into the object store before applying."""
        needed = [m for m in memories if not self.state.objects.has(m.content_sha256)]
        if not needed:
            return
        async with trio.open_nursery() as nursery:
            for memory in needed:
                nursery.start_soon(self._fetch_one, memory.id, memory.content_sha256)

    async def _fetch_one(self, memory_id: str, sha: str) -> FullMemory | None:
        async with self.fetch_limit:
            if self.state.objects.has(sha):
                self._arrive(sha)
                return None
            try:
                full = await self.client.retrieve_memory(self.store_id, memory_id)
            except NotFound:
                self._give_up(sha)  # deleted since the listing; the next pass removes it
                return None
            except StoreError as e:
                log.warning("failed to fetch memory content memory_store_id=%s memory_id=%s: "
                            "%s", self.store_id, memory_id, e)
                self._give_up(sha)
                return None
            try:
                self._store_content(full)
            except OSError as e:  # the cache disk: readers get EIO, a later pass retries
                self._cannot_keep(e)
                self._give_up(sha)
                return None
            if not self.state.objects.has(sha):
                self._give_up(sha)  # unusable, or changed since the listing
            return full

    def _cannot_keep(self, e: OSError) -> None:
        log.warning("cannot keep memory contents in the cache directory memory_store_id=%s: "
                    "%s", self.store_id, e.strerror or e)

    def _encoded(self, full: FullMemory) -> bytes | None:
        try:
            return full.content.encode("utf-8")
        except UnicodeEncodeError:
            log.warning("the server sent content that is not valid UTF-8; ignoring it "
                        "memory_store_id=%s path=%s", self.store_id, full.memory.path)
            return None

    def _store_content(self, full: FullMemory) -> None:
        data = self._encoded(full)
        if data is None:
            return
        sha = sha256_hex(data)
        self.state.objects.put(data, sha)
        self._arrived_content(full, sha)

    def _arrived_content(self, full: FullMemory, sha: str) -> None:
        self._arrive(sha)
        if sha != full.memory.content_sha256:
            log.warning("the server's sha does not match its content; trusting the content "
                        "memory_store_id=%s path=%s", self.store_id, full.memory.path)
        self._arrive(full.memory.content_sha256)

    def _give_up(self, sha: str) -> None:
        """Wake the readers waiting for `sha` now; they answer EIO instead of waiting."""
        self._failed[sha] = time.monotonic()
        event = self._arrived.pop(sha, None)
        if event is not None:
            event.set()

    def _arrive(self, sha: str) -> None:
        self._failed.pop(sha, None)
        self._missing.pop(sha, None)
        event = self._arrived.pop(sha, None)
        if event is not None:
            event.set()

    async def _urgent_fetcher(self) -> None:
        async with trio.open_nursery() as nursery:
            async for sha, memory_id in self._urgent_recv:
                if memory_id and not self.state.objects.has(sha):
                    nursery.start_soon(self._fetch_one, memory_id, sha)
                elif self.state.objects.has(sha):
                    self._arrive(sha)

    async def _background_fetch(self) -> None:
        """Stream every missing content in after start-up, full-view pages first."""
        groups: Counter[str] = Counter()
        for n in self.state.walk_files():
            if (n.sha is not None and n.memory_id is not None and n.data is None
                    and not self.state.objects.has(n.sha)
                    and n.sha not in self.state.objects.evicted):  # on demand only
                self._missing[n.sha] = n.memory_id
                path = n.store_path()
                groups[path[:path.index("/", 1) + 1] if path.count("/") > 1 else ""] += 1
        if not self._missing:
            return
        t0 = time.monotonic()
        count = len(self._missing)
        if count > 64:
            # Full-view pages (20 memories a request) beat single retrieves; several
            # top-level directories stream side by side, since one cursor is sequential.
            prefixes = sorted(p for p, k in groups.items() if p and k >= 20)
            streams: list[str | None] = list(prefixes) if len(prefixes) > 1 else [None]
            limit = trio.CapacityLimiter(4)
            async with trio.open_nursery() as nursery:
                for prefix in streams:
                    nursery.start_soon(self._stream_contents, prefix, limit)
        async with trio.open_nursery() as nursery:
            for sha, memory_id in list(self._missing.items()):
                nursery.start_soon(self._fetch_one, memory_id, sha)
        log.info("downloaded %d memories memory_store_id=%s ms=%d", count, self.store_id,
                 int((time.monotonic() - t0) * 1000))

    async def _stream_contents(self, prefix: str | None, limit: trio.CapacityLimiter) -> None:
        async with limit:
            batch: list[FullMemory] = []
            try:
                async for item in self.client.iter_memories(self.store_id, view="full",
                                                            path_prefix=prefix):
                    if (isinstance(item, FullMemory)
                            and item.memory.content_sha256 in self._missing):
                        batch.append(item)
                    if len(batch) >= 20:
                        await self._store_batch(batch)
                        batch = []
                await self._store_batch(batch)
            except StoreError as e:
                log.warning("failed to download memory contents memory_store_id=%s: %s",
                            self.store_id, e)
            except OSError as e:  # the cache disk is full: what is missing is read on demand
                self._cannot_keep(e)

    async def _store_batch(self, batch: list[FullMemory]) -> None:
        """Write a page of contents from a worker thread: creating thousands of object
        files on the event loop delayed every FUSE request behind them (a cold mount of
        10,000 memories spent ~1 s of loop time in open())."""
        ready: list[tuple[FullMemory, bytes, str]] = []
        for full in batch:
            data = self._encoded(full)
            if data is not None:
                ready.append((full, data, sha256_hex(data)))
        objects = self.state.objects
        await trio.to_thread.run_sync(objects.write_files, [(sha, d) for _, d, sha in ready])
        for full, data, sha in ready:
            objects.put(data, sha)  # already on disk: only remembered
            self._arrived_content(full, sha)

    # -- applying pulls ---------------------------------------------------------------
    def _apply_pulls(self, plan: _Plan, result: PassResult, *, require_content: bool) -> None:
        """Land every pull; synchronous, so the kernel never sees a half-applied pass."""
        # One journal transaction for the batch: a cold start of 10,000 memories is
        # one commit, not 10,000 (measured: 2.8 s -> 0.23 s at 5,000).
        with self.state.journal.transaction():
            self._land_pulls(plan, result, require_content=require_content)

    def _land_pulls(self, plan: _Plan, result: PassResult, *, require_content: bool) -> None:
        inodes: list[int] = []
        entries: list[tuple[int, str]] = []
        todo: list[tuple[RemoteMemory, Node | None]] = []
        for pull in plan.pulls:
            r = pull.remote
            if require_content and not self.state.objects.has(r.content_sha256):
                continue  # fetch failed; the next pass tries again
            node = pull.node
            if node is not None:
                if not node.linked or node.version != pull.version:
                    if not pull.conflict:
                        continue  # changed locally meanwhile: decide again next pass
                if pull.merge == "move":
                    if self._move(node, r.path, entries):
                        node.base_path = r.path
                        if node.entry_id is not None:
                            self.state.journal.update(node.entry_id, base_path=r.path)
                        result.pulled += 1
                    continue
                if pull.merge == "content":
                    self._take_content(node, r, inodes)
                    result.pulled += 1
                    continue
                if pull.conflict or node.dirty:
                    if self._keep_losing_bytes(node, r.content_sha256, r.path):
                        result.conflicts += 1
                if not node.linked:
                    node = None
            todo.append((r, node))
        # Files that trade places (a remote swap or rotation) leave their old names
        # first, so that none of them finds another still in its way.
        targets = {r.path for r, _ in todo}
        detached: set[int] = set()
        for r, node in todo:
            if node is not None and node.store_path() != r.path and \
                    node.store_path() in targets:
                self._detach(node, entries)
                detached.add(node.ino)
        for r, node in todo:
            target = self._land(r, node, inodes, entries)
            if target is not None:
                result.pulled += 1
            elif node is not None and node.ino in detached:
                self._reattach(node, entries)
        self._notify(inodes, entries)

    def _keep_losing_bytes(self, node: Node, remote_sha: str | None, remote_path: str
                           ) -> bool:
        """Save the local bytes a pull is about to replace; True if a conflict was kept."""
        state = self.state
        local = state.content(node)
        path = node.store_path()
        if local is None:
            return False
        local_sha = sha256_hex(local)
        if local_sha == remote_sha:
            return False
        if node.memory_id is not None and local_sha == node.base_sha:
            # Nothing local is lost but a rename: the remote path wins.
            log.warning("memory moved both locally and remotely; keeping the remote version "
                        "memory_store_id=%s path=%s remote_path=%s", self.store_id, path,
                        remote_path)
            return False
        copy = state.cache.save_conflict(path, local)
        node.conflict = str(copy)
        if node.entry_id is not None:
            state.journal.update(node.entry_id, conflict=str(copy))
        self.conflict_copies.append({"path": path, "copy": str(copy), "at": _now_iso()})
        log.warning("memory changed both locally and remotely; keeping the remote version "
                    "memory_store_id=%s path=%s conflict_copy=%s", self.store_id, path, copy)
        return True

    def _detach(self, node: Node, entries: list[tuple[int, str]]) -> None:
        """Take a file out of its directory for a moment (it is re-placed before any await)."""
        assert node.parent is not None and node.parent.children is not None
        entries.append((node.parent.ino, node.name))
        del node.parent.children[node.name]
        if node.entry_id is not None:  # a unique placeholder: paths are UNIQUE
            self.state.journal.update(node.entry_id, path=f"\0{node.entry_id}")

    def _reattach(self, node: Node, entries: list[tuple[int, str]]) -> None:
        """Put a detached file back where it was, or drop it (its content is safe)."""
        parent = node.parent
        assert parent is not None and parent.children is not None
        if node.name not in parent.children:
            parent.children[node.name] = node
            self.state.tree.negatives.appeared(parent.ino, node.name)
            self.state.tree.listing_changed(parent)
            if node.entry_id is not None:
                self.state.journal.update(node.entry_id, path=node.store_path())
            return
        # Its old name was taken meanwhile: the store has it elsewhere; the next pass
        # brings it back as a new arrival. A dirty file's bytes were kept as a conflict.
        node.linked = False
        if node.memory_id is not None and self.state.by_memory.get(node.memory_id) is node:
            del self.state.by_memory[node.memory_id]
        if node.entry_id is not None:
            self.state.journal.delete(node.entry_id)
            node.entry_id = None
        self.state.tree.maybe_drop(node)

    def _clear_way(self, path: str, node: Node | None, entries: list[tuple[int, str]],
                   remote_sha: str | None) -> bool:
        """Make `path` free for `node` (or a new file); False if something must stay."""
        occupant = self._node_at(path)
        if occupant is None or occupant is node:
            return True
        if occupant.kind is Kind.FILE and occupant.memory_id is None:
            self._keep_losing_bytes(occupant, remote_sha, path)
            self._unlink_local(occupant, entries)
            return True
        if occupant.kind is Kind.DIR and not occupant.children:
            self._remove_empty_dir(occupant, entries)
            return True
        if (occupant.kind is Kind.FILE and occupant.base_path is not None
                and occupant.store_path() != occupant.base_path
                and self._node_at(occupant.base_path) is None):
            # Renamed locally onto a path the store gave another memory: the store wins
            # the path, and the local file goes back to where its memory is.
            log.warning("memory renamed locally onto a path the store gave another memory; "
                        "moving it back memory_store_id=%s path=%s to=%s", self.store_id,
                        path, occupant.base_path)
            return self._move(occupant, occupant.base_path, entries)
        log.warning("a local entry is in the way of a remote memory; will retry "
                    "memory_store_id=%s path=%s", self.store_id, path)
        return False

    def _remove_empty_dir(self, node: Node, entries: list[tuple[int, str]]) -> None:
        assert node.parent is not None and node.parent.children is not None
        entries.append((node.parent.ino, node.name))
        del node.parent.children[node.name]
        node.linked = False
        if node.entry_id is not None:
            self.state.journal.delete(node.entry_id)
            node.entry_id = None
        self.state.tree.maybe_drop(node)

    def _place(self, node: Node | None, path: str, entries: list[tuple[int, str]],
               remote_sha: str | None = None) -> tuple[Node, str] | None:
        """The directory and name `path` needs, with the way cleared; None if blocked."""
        if not self._clear_way(path, node, entries, remote_sha):
            return None
        parent_path, name = path.rsplit("/", 1)
        try:
            parent = self.state.ensure_dirs(parent_path or "/")
        except FsError:
            log.warning("a local file is in the way of a remote memory's directory; will "
                        "retry memory_store_id=%s path=%s", self.store_id, path)
            return None
        return parent, name

    def _move(self, node: Node, path: str, entries: list[tuple[int, str]]) -> bool:
        """Move a linked (or detached) file to `path`, journal included."""
        placed = self._place(node, path, entries)
        if placed is None:
            return False
        parent, name = placed
        old = node.parent
        assert old is not None and old.children is not None and parent.children is not None
        if old.children.get(node.name) is node:
            if old is parent and node.name == name:
                return True
            entries.append((old.ino, node.name))
            del old.children[node.name]
        node.parent = parent
        node.name = name
        parent.children[name] = node
        self.state.tree.negatives.appeared(parent.ino, name)
        self.state.tree.listing_changed(parent)
        node.ctime_ns = time.time_ns()
        if node.entry_id is not None:
            self.state.journal.update(node.entry_id, path=path)
        return True

    def _take_content(self, node: Node, r: RemoteMemory, inodes: list[int]) -> None:
        """Remote content into a file that keeps its local path (a merged pull)."""
        node.base_sha = r.content_sha256
        node.data = None
        node.sha = r.content_sha256
        node.size = r.content_size_bytes
        node.mtime_ns = node.ctime_ns = time.time_ns()
        node.dirty = False
        node.dirty_since = None
        node.version += 1
        inodes.append(node.ino)
        if node.entry_id is not None:
            self.state.journal.update(node.entry_id, base_sha=r.content_sha256,
                                      sha=r.content_sha256, data=None, dirty=0)

    def _land(self, r: RemoteMemory, node: Node | None, inodes: list[int],
              entries: list[tuple[int, str]]) -> Node | None:
        """Make the local tree show remote memory `r` (content, path, identity)."""
        state = self.state
        placed = self._place(node, r.path, entries, r.content_sha256)
        if placed is None:
            return None
        parent, name = placed
        fresh = node is None
        if node is None:
            node = state.tree.new_node(Kind.FILE, name, parent, state, state.file_mode(),
                                       time.time_ns())
        elif not self._move(node, r.path, entries):
            return None
        if node.memory_id is not None and node.memory_id != r.id:
            state.by_memory.pop(node.memory_id, None)
        node.memory_id = r.id
        state.by_memory[r.id] = node
        node.base_sha, node.base_path = r.content_sha256, r.path
        if node.sha != r.content_sha256 or node.data is not None:
            node.data = None
            node.sha = r.content_sha256
            node.size = r.content_size_bytes
            node.mtime_ns = node.ctime_ns = time.time_ns()
            if not fresh:  # the kernel cannot have cached a node it never saw
                inodes.append(node.ino)
        node.dirty = False
        node.dirty_since = None
        node.version += 1
        node.sent_sha = node.sent_path = None
        if fresh:  # one insert with every field (a cold start lands thousands)
            node.entry_id = state.journal.insert(
                path=r.path, kind="file", mode=node.mode, mtime_ns=node.mtime_ns,
                memory_id=r.id, base_sha=r.content_sha256, base_path=r.path,
                sha=r.content_sha256, dirty=0)
        elif node.entry_id is not None:
            state.journal.update(node.entry_id, memory_id=r.id, base_sha=r.content_sha256,
                                 base_path=r.path, sha=r.content_sha256, data=None, dirty=0,
                                 sent_sha=None, sent_path=None, mtime_ns=node.mtime_ns)
        return node

    def _unlink_local(self, node: Node, entries: list[tuple[int, str]]) -> None:
        assert node.parent is not None
        entries.append((node.parent.ino, node.name))
        self.state.remove_file(node, local=False)

    def _apply_removals(self, plan: _Plan) -> None:
        entries: list[tuple[int, str]] = []
        for node, version in plan.removals:
            if node.linked and node.version == version and not node.dirty:
                log.debug("memory deleted remotely; removing it memory_store_id=%s path=%s",
                          self.store_id, node.store_path())
                self._unlink_local(node, entries)
        self._notify([], entries)

    def _notify(self, inodes: list[int], entries: list[tuple[int, str]]) -> None:
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
        self._notify([], tree.negatives.take_stale())
        self._pending_inodes.extend(tree.take_changed_listings())
        inodes, self._pending_inodes = self._pending_inodes, []
        await self.notifier.invalidate_inodes(inodes)

    # -- pushing --------------------------------------------------------------------
    async def _push(self, plan: _Plan, result: PassResult) -> None:
        await self.flush_invalidations()
        await self._push_deletes(plan.deletes, result)
        self._renames_to_retry = []
        async with trio.open_nursery() as nursery:
            for node in plan.updates:
                nursery.start_soon(self._push_update, node, result)
        retry, self._renames_to_retry = self._renames_to_retry, []
        async with trio.open_nursery() as nursery:  # those that stepped aside, now freed
            for node in retry:
                nursery.start_soon(self._push_update, node, result)
        async with trio.open_nursery() as nursery:
            for node in plan.creates:
                nursery.start_soon(self._push_create, node, result)
        await self.flush_invalidations()

    async def _step_aside(self, node: Node, e: PathConflict) -> bool:
        """A rename blocked by another of our own memories that is itself moving away
        (a local swap: `mv a t; mv b a; mv t b`) would wait forever, each blocking the
        other. Park this memory at a unique path so the other can move; it takes its
        final path in the retry round of the same pass."""
        other = self.state.by_memory.get(e.conflicting_memory_id)
        if (other is None or other is node or node.memory_id is None
                or other.base_path != e.conflicting_path
                or other.store_path() == other.base_path):
            return False
        parked = f"/.memfs-moving-{node.memory_id}"
        try:
            memory = await self.client.update_memory(
                self.store_id, node.memory_id, path=parked,
                precondition_sha256=node.base_sha)
        except StoreError as err:
            log.warning("failed to move memory aside memory_store_id=%s path=%s: %s",
                        self.store_id, node.base_path, err)
            return False
        node.base_path = memory.path
        if node.entry_id is not None:
            self.state.journal.update(node.entry_id, base_path=memory.path)
        log.debug("moved memory aside to free a path memory_store_id=%s path=%s parked=%s",
                  self.store_id, e.conflicting_path, parked)
        return True

    async def _push_deletes(self, tombs: list[Node], result: PassResult) -> None:
        if not tombs or self.deletions == "disabled":
            return
        if self.deletions == "log_only":
            for tomb in tombs:
                if tomb.memory_id not in self._log_only_said:
                    self._log_only_said.add(tomb.memory_id or "")
                    log.info("log-only: sync would delete this memory on the server "
                             "memory_store_id=%s path=%s", self.store_id, tomb.base_path)
            return
        cap = delete_cap(len(self.state.by_memory) + len(self.state.tombstones))
        if len(tombs) > cap:
            log.warning("delete cap reached: sent %d deletes, held %d for later syncs "
                        "memory_store_id=%s", cap, len(tombs) - cap, self.store_id)
        async with trio.open_nursery() as nursery:
            for tomb in tombs[:cap]:
                nursery.start_soon(self._push_delete, tomb, result)

    async def _push_delete(self, tomb: Node, result: PassResult) -> None:
        assert tomb.memory_id is not None
        memory_id = tomb.memory_id
        async with self.push_limit:
            try:
                await self.client.delete_memory(self.store_id, memory_id,
                                                expected_sha256=tomb.base_sha)
            except NotFound:
                pass
            except (PreconditionFailed, Conflict):
                log.warning("memory deleted locally but changed remotely; keeping the remote "
                            "version memory_store_id=%s path=%s", self.store_id, tomb.base_path)
                self._drop_tombstone(tomb)
                await self._pull_one(memory_id, result)
                return
            except (StoreUnavailable, StoreAuthError):
                raise
            except StoreError as e:
                log.warning("failed to delete memory memory_store_id=%s path=%s: %s",
                            self.store_id, tomb.base_path, e)
                return
        if self.state.tombstones.get(memory_id) is tomb:
            self._drop_tombstone(tomb)
            result.deleted += 1
            log.info("propagated local deletion memory_store_id=%s path=%s", self.store_id,
                     tomb.base_path)

    async def _pull_one(self, memory_id: str, result: PassResult) -> None:
        """Bring one memory's current remote state in now (after a lost race)."""
        try:
            full = await self.client.retrieve_memory(self.store_id, memory_id)
        except NotFound:
            return
        self._store_content(full)
        node = self.state.by_memory.get(memory_id)
        inodes: list[int] = []
        entries: list[tuple[int, str]] = []
        if node is not None and self._keep_losing_bytes(
                node, full.memory.content_sha256, full.memory.path):
            result.conflicts += 1
        self._land(full.memory, node, inodes, entries)
        self._notify(inodes, entries)

    def _snapshot(self, node: Node) -> tuple[bytes, str, int] | None:
        data = self.state.content(node)
        if data is None:
            if node.sha is not None and node.memory_id is not None:
                # Evicted clean content of a renamed file: bring it in for the next pass.
                self._missing[node.sha] = node.memory_id
                try:
                    self._urgent_send.send_nowait((node.sha, node.memory_id))
                except trio.WouldBlock:
                    pass
            return None
        try:
            data.decode("utf-8")
        except UnicodeDecodeError:
            try:
                self.state.check_utf8(node)  # marks it refused and says so, once
            except FsError:
                pass
            return None
        return data, sha256_hex(data), node.version

    async def _push_update(self, node: Node, result: PassResult) -> None:
        assert node.memory_id is not None
        memory_id = node.memory_id
        snap = self._snapshot(node)
        if snap is None:
            return
        data, sha, version = snap
        path = node.store_path()
        send_content = sha != node.base_sha
        send_path = path != node.base_path
        if not send_content and not send_path:
            self._mark_synced_after_push(node, sha, path, version)
            return
        node.sent_sha = sha if send_content else None
        node.sent_path = path if send_path else None
        if node.entry_id is not None:
            self.state.journal.update(node.entry_id, sent_sha=node.sent_sha,
                                      sent_path=node.sent_path)
        async with self.push_limit:
            try:
                memory = await self.client.update_memory(
                    self.store_id, memory_id,
                    content=data.decode("utf-8") if send_content else None,
                    path=path if send_path else None,
                    precondition_sha256=node.base_sha)
            except PreconditionFailed:
                log.warning("memory changed both locally and remotely; the upload was "
                            "refused and the local edit loses memory_store_id=%s path=%s",
                            self.store_id, path)
                await self._pull_one(memory_id, result)
                return
            except NotFound:
                log.info("memory deleted remotely but edited locally; re-creating it from "
                         "the file memory_store_id=%s path=%s", self.store_id, path)
                if node.linked:
                    self._forget_identity(node)
                    await self._push_create(node, result, locked=True)
                return
            except Rejected as e:
                self._refuse(node, sha, e)
                return
            except PathConflict as e:
                if await self._step_aside(node, e):
                    self._renames_to_retry.append(node)
                    return
                log.warning("failed to upload memory memory_store_id=%s path=%s: the path is "
                            "taken in the store (%s); will retry", self.store_id, path,
                            e.conflicting_path)
                return
        node.base_sha, node.base_path = memory.content_sha256, memory.path
        result.pushed += 1
        self._mark_synced_after_push(node, sha, memory.path, version)

    def _mark_synced_after_push(self, node: Node, sha: str, path: str, version: int) -> None:
        node.sent_sha = node.sent_path = None
        if node.version == version and node.store_path() == path and node.linked:
            if node.conflict is not None:  # a new local edit reached the store: resolved
                node.conflict = None
                if node.entry_id is not None:
                    self.state.journal.update(node.entry_id, conflict=None)
            self._make_clean(node, sha)
        elif node.entry_id is not None:
            self.state.journal.update(node.entry_id, base_sha=node.base_sha,
                                      base_path=node.base_path, sent_sha=None, sent_path=None)

    async def _push_create(self, node: Node, result: PassResult, *, locked: bool = False
                           ) -> None:
        snap = self._snapshot(node)
        if snap is None or not node.linked:
            return
        data, sha, version = snap
        path = node.store_path()
        node.sent_sha, node.sent_path = sha, path
        if node.entry_id is not None:
            self.state.journal.update(node.entry_id, sent_sha=sha, sent_path=path)
        try:
            if locked:
                memory = await self.client.create_memory(self.store_id, path,
                                                         data.decode("utf-8"))
            else:
                async with self.push_limit:
                    memory = await self.client.create_memory(self.store_id, path,
                                                             data.decode("utf-8"))
        except Rejected as e:
            self._refuse(node, sha, e)
            return
        except PathConflict as e:
            log.warning("failed to upload memory memory_store_id=%s path=%s: the path is "
                        "taken in the store (%s); the next pass settles it", self.store_id,
                        path, e.conflicting_path)
            return
        result.pushed += 1
        if node.memory_id is not None:  # adopted meanwhile (should not happen)
            return
        self.state.adopt_identity(node, memory.id, memory.content_sha256, memory.path)
        if not node.linked:
            # Unlinked during its own upload: the memory now exists, so delete it later.
            self.state.by_memory.pop(memory.id, None)
            self.state.bury(node)
            return
        self._mark_synced_after_push(node, sha, memory.path, version)

    def _refuse(self, node: Node, sha: str, e: StoreError) -> None:
        node.refused_sha = sha
        node.refused_why = e.message
        if node.entry_id is not None:
            self.state.journal.update(node.entry_id, refused_sha=sha, refused_why=e.message,
                                      sent_sha=None, sent_path=None)
        node.sent_sha = node.sent_path = None
        log.warning("the server rejected this memory file, so it stays un-synced until its "
                    "content changes memory_store_id=%s path=%s rejection=%r",
                    self.store_id, node.store_path(), e.message)


def _expected_failure(e: BaseException) -> BaseException | None:
    """The store or disk failure `e` stands for, or None if `e` holds anything else.

    In an exception group every member must be expected: a bug raised beside a network
    error must still end the mount (invariant 5), not pass as a failed pass.
    """
    if isinstance(e, BaseExceptionGroup):
        found = [_expected_failure(inner) for inner in e.exceptions]
        if not found or any(f is None for f in found):
            return None
        return found[0]
    return e if isinstance(e, (StoreError, OSError)) else None


def _now_iso() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def check_interval(value: float) -> float:
    if math.isnan(value) or value < MIN_INTERVAL:
        raise ValueError(f"the sync interval must be at least {MIN_INTERVAL:g} seconds")
    return value
