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
import os
import re
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass

import trio

from memfs import metrics
from memfs.audit import Trail
from memfs.config import DEFAULT_EXCLUDES, DEFAULT_PROBE_BUDGET, DeletionMode
from memfs.errors import (
    NotFound,
    Rejected,
    StoreAuthError,
    StoreError,
    StoreUnavailable,
)
from memfs.logs import Repeated
from memfs.paths import MARKER_PATH, RemoteMemory, is_valid_memory_path
from memfs.state import cachegc
from memfs.state.node import Kind, Node
from memfs.state.records import SyncRecords
from memfs.state.store_state import ChangeKind, StoreState
from memfs.store.client import StoreClient
from memfs.store.wire import MemoryVersion
from memfs.sync.feed import (
    Cursor,
    Feed,
    echoed_cursor,
    listed_cursor,
    read_feed,
    remote_view,
)
from memfs.sync.fetcher import ContentFetcher
from memfs.sync.landing import Lander
from memfs.sync.listen import Listener, Mode, Moved
from memfs.sync.notify import Notifier
from memfs.sync.plan import (
    WRITE_QUIET_NS,
    ConflictCopy,
    PassResult,
    PathPush,
    Plan,
    Planner,
)
from memfs.sync.progress import Tracker
from memfs.sync.pusher import Pusher
from memfs.sync.schedule import PassKind, Scheduler

log = logging.getLogger("memfs.sync")

# The object cache is collected at start and this often (memfs/state/cachegc.py).
GC_EVERY = 600.0
# The least wait before a pass that retries a transient refusal (pusher.RETRY_FIRST).
RETRY_GAP = 5.0
# Passes `memfs sync` runs after one that left an upload whose path was taken: the first
# brings the memory in the way (and keeps the local side as a conflict copy).
SETTLE_PASSES = 2
# Journal meta: the newest version of the store this mount has applied (feed.Cursor).
CURSOR_META = "feed_cursor"
# Tests set it: every pass checks its scope against a walk of every file (`_end_scope`).
CHECK_SCOPE = os.environ.get("MEMFS_TEST_CHECK_SCOPE") == "1"


@dataclass(frozen=True)
class RefusedFile:
    """A file the store refused: held back until its content changes (permanent), or
    retried with back-off at `next_retry` (`transient`: the store was full)."""

    path: str
    why: str
    transient: bool = False
    next_retry: float | None = None  # time.time()


@dataclass(frozen=True)
class SyncStatistics:
    """One store as `memfs status` and the metrics see it (`StoreSync.statistics`).

    The JSON of `status --json`, `sync --json` and the control socket is
    memfs/control/protocol.py's `StoreStatus`, made by memfs/mount/answers.py.
    """

    memories: int
    bytes: int
    dirty: int  # changed files waiting to be pushed (excluded, local-only ones not counted)
    refused: int
    conflicts: int
    pending_deletes: int
    missing_content: int
    offline: bool
    conflict_copies: tuple[ConflictCopy, ...]  # the copies a file still names (`conflicts`)
    refused_files: tuple[RefusedFile, ...]
    dirty_files: tuple[str, ...]
    excluded: int  # dirty files with an excluded (local-only) name
    pending_delete_paths: tuple[str | None, ...]
    last_pass: PassResult | None
    next_pass_at: float | None  # time.time(); None: when the watch fires
    learns_by: Mode  # how remote changes reach this mount (memfs/sync/listen.py)
    last_heard_at: float | None  # time.time() of the store's last answer
    passes: dict[str, int]  # passes since start, by kind (memfs/sync/schedule.py)
    feed_missed: int  # changes a full listing found that the feed had not brought


class StoreSync:
    """Keeps one store's subtree and the store itself in step."""

    def __init__(
        self,
        state: StoreState,
        client: StoreClient,
        notifier: Notifier,
        *,
        interval: float = 15.0,
        deletions: DeletionMode = "enabled",
        excludes: Iterable[str] = DEFAULT_EXCLUDES,
        fetch_concurrency: int = 16,
        push_concurrency: int = 8,
        flush_timeout: float = 30.0,
        cache_max_bytes: int | None = None,
        trail: Trail | None = None,
        deletes_when_asked: bool = False,
        push_soon: bool = True,
        probe_budget: int = DEFAULT_PROBE_BUDGET,
        watch: bool = True,
    ) -> None:
        self.state = state
        # The audit trail (memfs/audit.py): what became of each local change; one
        # for the engine's parts, the daemon's (a no-op trail when none is given).
        self.trail = trail if trail is not None else Trail()
        self.client = client
        self.notifier = notifier
        self.interval = interval
        self.flush_timeout = flush_timeout
        # --deletes-when-asked (the worker adapter's sessions): only a pass someone asked
        # for, and the final one, send deletes; push soon and the interval push new and
        # changed files. A stopped tool call's half-done `mv` must not delete a memory.
        self.deletes_when_asked = deletes_when_asked
        self.push_soon_enabled = push_soon  # --no-push-soon: the interval or `memfs sync`
        self.cache_max_bytes = cache_max_bytes
        self.excludes = tuple(excludes)
        # One compiled pattern: an idle pass checks every file name against it.
        self._exclude_re = re.compile(
            "|".join(f"(?:{fnmatch.translate(p)})" for p in self.excludes) or r"(?!)"
        )
        state.set_local_only(self._excluded_name)
        self.fetcher = ContentFetcher(state, client, concurrency=fetch_concurrency)
        # The sync half of the state: every change a pass makes to nodes and the journal.
        self.records = SyncRecords(state)
        self.planner = Planner(self.records, self.trail, excluded=self._excluded)
        self.lander = Lander(self.records, notifier, self.trail)
        self.progress = Tracker()  # what the running pass is doing (memfs/sync/progress.py)
        self.pusher = Pusher(
            self.records,
            client,
            self.lander,
            self.fetcher,
            self.progress,
            self.trail,
            concurrency=push_concurrency,
            deletions=deletions,
        )
        self.store_id = state.store_id
        # When a pass runs and what kind: one pure decision (memfs/sync/schedule.py).
        self.scheduler = Scheduler(interval=interval, push_soon=push_soon)
        # What must be seen before a pass someone asks for: the writers' closes already
        # queued (the mount's close watch, under zero-message opens).
        self.before_asked: Callable[[], Awaitable[None]] = _nothing
        # How remote changes reach this mount: the watch, or probing passes (listen.py).
        self.listener = Listener(
            client,
            state.store_id,
            self._heard,
            uploads_done=self._pass_ended,
            interval=interval,
            budget=probe_budget,
            use_watch=watch,
        )
        self.pusher.written = self.listener.wrote
        self.pusher.deleted = self.listener.deleted
        self.last_pass: PassResult | None = None
        self.next_pass_at: float | None = None
        self.offline = False  # the last pass could not reach the store (or none yet)
        # Warnings a server can make recur every pass: once per cause.
        self._pass_failed = Repeated(log, "memory sync failed memory_store_id=%s error=%s")
        self._marker_listed = Repeated(
            log, "the server listed the reserved marker path; skipping path=%s memory_store_id=%s"
        )
        self._invalid_path = Repeated(
            log, "the server listed a path no memory can have; skipping memory_store_id=%s path=%s"
        )
        self._invalid_head = Repeated(
            log,
            "the store's newest version is unusable; listing instead memory_store_id=%s error=%s",
        )
        self._feed_missed = Repeated(
            log,
            "the full listing found changes the feed had not brought memory_store_id=%s missed=%d",
        )
        self._wake = trio.Event()
        self._started_seq = 0
        self._completed_seq = 0
        self._completed = trio.Event()
        self._last_cause: BaseException | None = None  # of the last failed pass
        self._pass_lock = trio.Lock()
        # The change feed (memfs/sync/feed.py): the newest version applied, kept in the
        # journal across restarts; None until a full listing set it.
        self._cursor: Cursor | None = None
        self._feed_supported = True  # False: the store has no versions list; every pass lists
        self._missed = 0  # changes full listings found that the feed had missed
        self._left_over = False  # the last pass left work a later one must do
        # The pass scope (docs/sync.md, "What a pass looks at"): files that may have
        # something to push; every file is walked instead after a start, in a full
        # pass and in the final one. `check_scope` (tests: MEMFS_TEST_CHECK_SCOPE=1) walks
        # every file after each pass too and fails if the scope missed one.
        self._pending: set[Node] = set()
        self._walk_all = True
        self.check_scope = CHECK_SCOPE
        self._left_over_pulls = False  # a pull of the last pass waits for its content
        self._probe_at = math.inf  # trio time of the next probe (probing or interval mode)
        self._next_retry: float | None = None  # time.time() a transient refusal is due

    @property
    def deletions(self) -> DeletionMode:
        return self.pusher.deletions

    @deletions.setter
    def deletions(self, mode: DeletionMode) -> None:
        self.pusher.deletions = mode

    @property
    def conflict_copies(self) -> list[ConflictCopy]:
        return self.lander.conflict_copies

    # -- public verbs ---------------------------------------------------------------
    def request_sync(self, *, full: bool = False) -> None:
        """A pass now, as `memfs sync` asks (`full`: a full listing)."""
        self.scheduler.asked(trio.current_time(), full=full)
        self._wake.set()

    def _heard(self, head: str | None, moved: Moved | None = None) -> None:
        """The watch answered with a new head: another writer's version (a feed pass at
        once), or the echo of this mount's own upload. An echo the watch shows whole
        moves the cursor at no cost (`_echo_only`); any other owes a feed pass later
        (`schedule.ECHO_DEFER`: another writer's version may hide behind ours)."""
        own = head is not None and self.listener.is_own(head, moved)
        if own and self._echo_only(moved):
            return
        self.scheduler.heard(trio.current_time(), own=own)
        self._wake.set()

    async def _pass_ended(self) -> None:
        """Until the running pass (if any) ends: its uploads' answers are in."""
        if self._pass_lock.locked():
            async with self._pass_lock:
                pass

    def _echo_only(self, moved: Moved | None) -> bool:
        """The watch moved from the cursor's head through versions that are all this
        mount's own uploads: the feed has nothing to bring, so the cursor goes to the new
        head without reading it, those versions among the ones it has seen (`Cursor.seen`:
        the next read passes over them). Not while a pass runs (its feed read sets the
        cursor)."""
        cursor = self._cursor
        if moved is None or moved.newer is None or cursor is None or not self._feed_supported:
            return False
        if moved.after != cursor.head or self._pass_lock.locked() or self._left_over_pulls:
            return False
        if not self.listener.all_own(moved):
            return False
        self._advance(echoed_cursor(cursor, moved.newer))
        return True

    async def sync_now(self, *, full: bool = False) -> PassResult:
        """Run a pass that starts after this call, and return its result. An upload that
        found its path taken (another writer's memory there, or one that overlaps it) is
        settled by the feed in the next pass: up to `SETTLE_PASSES` more run, and what
        is still unsettled after them is in the result (`memfs sync` is then exit 1)."""
        await self.before_asked()
        result = await self._one_pass(full=full)
        for _ in range(SETTLE_PASSES):
            if not result.unsettled or result.outcome != "ok":
                break
            result = result.then(await self._one_pass(full=False))
        return result

    async def _one_pass(self, *, full: bool) -> PassResult:
        target = self._started_seq + 1
        self.request_sync(full=full)
        while self._completed_seq < target:
            await self._completed.wait()
        assert self.last_pass is not None
        return self.last_pass

    async def flush_writes(self) -> PassResult:
        """A pass that pushes and pulls but sends no deletes: the worker's push-only flush.

        A session that ends on an error or cancel may have removed files it meant to put
        back; its deletions wait in the journal (tombstones) instead of reaching the store.
        """
        # A count, not a saved mode: overlapping flushes must not leave deletes off.
        self.pusher.deletes_held += 1
        try:
            return await self.sync_now()
        finally:
            self.pusher.deletes_held -= 1

    async def push_path(self, path: str, *, merge: bool = True, sha: str | None = None) -> PathPush:
        """Push the file at store path `path` now, outside the pass schedule, and say what
        became of it (`PathPush`): `memfs sync FILE` and the SDK worker's `write_file`.

        `merge=False` (the worker): a change another session made first is not merged
        with this one; the store's version wins, the local bytes go to a conflict copy,
        as the SDK's own engine answers a 409. `sha`: the content the caller wrote; if
        the file holds other content now, nothing is sent (`changed`).
        """
        async with self._pass_lock:
            node = self.state.node_at(path)
            if node is None or node.kind is not Kind.FILE:
                return PathPush("missing", path, why="no such file in the mount")
            if self.state.read_only:
                return PathPush("refused", path, why="the memory store is read-only")
            if self._excluded(node):
                return PathPush("refused", path, why="a local-only name, never synced")
            if sha is not None and node.current_sha() != sha:
                return PathPush("changed", path, why="the file changed since it was written")
            state = node.state_name()
            if state in ("clean", "conflict"):
                return PathPush("unchanged", path)
            if state == "refused" and node.retry_at is None:
                return PathPush("refused", path, why=node.refused_why or "")
            if self.state.content(node) is None:  # evicted: the next pass brings it in
                return PathPush("unconfirmed", path, why="the file's content is not local")
            result = PassResult(time.time(), 0.0, "ok")
            try:
                if node.memory_id is None:
                    await self.pusher._push_create(node, result)
                else:
                    await self.pusher._push_update(node, result, merge=merge)
                self._settle_taken(result)
                await self.lander.flush_invalidations()
            except Exception as e:
                cause = _expected_failure(e)
                if cause is None:
                    raise  # a bug: end the mount; the journal keeps every dirty byte
                if isinstance(cause, StoreUnavailable | OSError):
                    return PathPush("unconfirmed", path, why=str(cause))
                return PathPush("refused", path, why=str(cause))
            done = self._path_pushed(node, path, result)
        if done.outcome == "conflict" and done.copy is None:
            await self.sync_now()  # the path is taken: a pass lands the store's memory
        return done

    def _path_pushed(self, node: Node, path: str, result: PassResult) -> PathPush:
        """What `push_path`'s upload did to `node`, read off the node and the result."""
        now = node.store_path() if node.linked else path
        if result.conflict_copies:
            return PathPush("conflict", now, copy=result.conflict_copies[-1].copy)
        state = node.state_name()
        if state == "refused":
            return PathPush("refused", now, why=node.refused_why or "")
        if result.pushed and state in ("clean", "conflict"):
            return PathPush("pushed", now, version=result.versions.get(now))
        if node.memory_id is None and node.sent_sha is None:
            return PathPush("conflict", now, why="the path is taken in the memory store")
        return PathPush("unconfirmed", now, why="the upload did not finish")

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
                if tomb.base_path is not None and self.state.node_at(tomb.base_path) is not None:
                    continue
                self.records.drop_tombstone(tomb)
                restored += 1
            for node in list(state.walk_files()):
                if (
                    node.memory_id is None
                    or node.base_path is None
                    or node.store_path() == node.base_path
                    or self.state.node_at(node.base_path) is not None
                ):
                    continue
                self.records.forget_identity(node)
                restored += 1
            if restored:
                # The local state forgot memories the store has: only a listing finds them.
                self.scheduler.reconcile()
                log.info(
                    "restoring files a stopped tool call left missing memory_store_id=%s paths=%d",
                    self.store_id,
                    restored,
                )
        return restored

    async def wait_content(self, node: Node) -> str | None:
        """Wait until `node`'s content is local (the caller bounds the wait); why not."""
        return await self.fetcher.wait(node)

    async def run_pass(
        self, *, final: bool = False, kind: PassKind = "feed", asked: bool = False
    ) -> PassResult:
        """One pass now, in the caller's task (tests and tools; the mount uses `run`),
        as a timer's pass would run (`asked`: as `memfs sync`'s)."""
        return await self._pass(kind, final=final, asked=asked)

    def statistics(self) -> SyncStatistics:
        """What `memfs status` and the metrics show of this store, read in one go."""
        counts = self.state.statistics()
        refused: list[RefusedFile] = []
        dirty: list[str] = []
        excluded = 0
        named: set[str] = set()
        for n in self.state.walk_files():
            if n.conflict:
                named.add(n.conflict)
            name = n.state_name()
            if name == "refused":
                refused.append(
                    RefusedFile(
                        n.store_path(), n.refused_why or "", n.retry_at is not None, n.retry_at
                    )
                )
            elif name == "dirty":
                if self._excluded(n):
                    excluded += 1  # local-only by design: never "waiting to be pushed"
                else:
                    dirty.append(n.store_path())
        return SyncStatistics(
            memories=counts.memories,
            bytes=counts.bytes,
            dirty=len(dirty),
            refused=counts.refused,
            conflicts=counts.conflicts,
            pending_deletes=counts.pending_deletes,
            missing_content=self.fetcher.statistics().missing_content,
            offline=self.offline,
            # A copy restored (and pushed) or dropped is no longer a conflict: listed
            # only while its file names it, as `conflicts` counts.
            conflict_copies=tuple(c for c in self.conflict_copies if c.copy in named),
            refused_files=tuple(refused),
            dirty_files=tuple(dirty),
            excluded=excluded,
            pending_delete_paths=tuple(n.base_path for n in self.state.tombstones.values()),
            last_pass=self.last_pass,
            next_pass_at=self.next_pass_at,
            learns_by=self.listener.mode,
            last_heard_at=self.listener.statistics().last_heard_at,
            passes=self.scheduler.statistics().passes,
            feed_missed=self._missed,
        )

    # -- lifetime -------------------------------------------------------------------
    async def start(self, *, offline: bool = False) -> None:
        """Load the journal and merge the store's listing: the mount can go live after.

        Content is not awaited here; it streams in behind the mount (`run`), but for
        a memory changed both here and there, which is merged in this pass. `offline`
        (the store is unreachable, the journal warm): the journal alone is the tree
        until a pass reaches the store.
        """
        loaded = self.state.load_journal()
        log.debug("journal loaded memory_store_id=%s rows=%d", self.store_id, loaded)
        self._cursor = Cursor.loads(self.state.meta(CURSOR_META))
        if offline:
            self.offline = True
            return
        result = await self._pass("full", initial=True)
        if result.outcome != "ok":
            # The cause itself, so start-up can tell unreachable (exit 3) and refused
            # credentials (exit 2) from other failures.
            cause = self._last_cause
            if isinstance(cause, StoreError):
                raise cause
            raise StoreError(result.error or "the first sync failed")

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        try:
            async with trio.open_nursery() as nursery:
                await nursery.start(self.fetcher.run)
                await nursery.start(self.listener.run)
                self.state.tell_changes(self._local_change)
                nursery.start_soon(self._collector)
                task_status.started()
                self._plan_probe()
                while True:
                    now = trio.current_time()
                    due = self.scheduler.next(now, idle=self._probe_at - now)
                    if due.at > now:
                        wait = due.at - now
                        self.next_pass_at = time.time() + wait if wait < math.inf else None
                        with trio.move_on_at(due.at):
                            await self._wake.wait()
                        self._wake = trio.Event()
                        continue  # something may have moved the next pass: decide again
                    await self._pass(due.kind, asked=due.asked)
        finally:
            self.state.tell_changes(None)  # no pass loop to wake any more

    def _local_change(self, node: Node | None, kind: ChangeKind) -> None:
        """A local change (from FUSE handlers, on the event loop; never awaits)."""
        self.listener.local_change()
        now = trio.current_time()
        tracked = self.state.tree.writers_tracked
        if kind in ("write", "create") and tracked:
            if kind == "create" or (node is not None and node.open_writers > 0):
                # Its writer's close says when it is done; the interval is the bound.
                self.scheduler.changed(now, held_open=True)
                return
        # Without tracked writers (zero-message opens) no close is seen: a write settles
        # once no other came for the planner's quiet spell.
        untracked = kind in ("write", "create") and not tracked
        quiet = WRITE_QUIET_NS / 1e9 + 0.05 if untracked else 0.0
        self.scheduler.changed(now, quiet=quiet)
        self._wake.set()

    def _plan_probe(self) -> None:
        """When the listener wants the next probe (inf while the watch is open)."""
        failing = self.offline or (self.last_pass is not None and self.last_pass.outcome != "ok")
        wait = self.listener.delay(work_left=False, failing=failing)
        self._probe_at = trio.current_time() + wait

    async def collect_garbage(self) -> cachegc.Collected:
        """Clean the object cache between passes (see memfs/state/cachegc.py)."""
        found = await trio.to_thread.run_sync(self.state.objects.scan)
        async with self._pass_lock:
            return cachegc.collect(self.state, found, max_clean_bytes=self.cache_max_bytes)

    async def _collector(self) -> None:
        """At start, then every GC_EVERY seconds; a failure only waits for the next."""
        while True:
            try:
                await self.collect_garbage()
            except OSError as e:
                log.warning(
                    "object cache collection failed memory_store_id=%s error=%s", self.store_id, e
                )
            await trio.sleep(GC_EVERY)

    async def final_sync(self) -> PassResult:
        """The last pass at unmount, bounded: what changed goes up first, without a
        listing (a big store on a slow server takes longer to list than the bound), then
        a full pass (list, pull, the rest) in what is left of it. What is left stays in
        the journal."""
        timeout = self.flush_timeout
        with trio.move_on_after(timeout) as scope:
            pushed = await self._push_first()
            result = await self._pass("feed", final=True)
            result.pushed += pushed
            return result
        self.progress.end()
        metrics.sync_pass(self.store_id, "cut-off", 0)
        left = self.statistics().dirty
        log.warning(
            "final memory sync cut off; changed files that had not finished "
            "uploading stay in the journal memory_store_id=%s files=%d after_ms=%d",
            self.store_id,
            left,
            int(timeout * 1000),
        )
        assert scope.cancelled_caught
        return PassResult(time.time(), timeout, "cut-off", "final sync cut off")

    async def _push_first(self) -> int:
        """The final sync's uploads before any listing (`Planner.plan_local`); how many
        the store took. A failure is left to the full pass after it, which says so."""
        if self.state.read_only:
            return 0
        result = PassResult(time.time(), 0.0, "ok")
        async with self._pass_lock:
            plan = self.planner.plan_local(asked=True, final=True, interval=self.interval)
            if not plan.updates and not plan.creates:
                return 0
            try:
                await self.pusher.push(plan, result)
            except Exception as e:
                if _expected_failure(e) is None:
                    raise  # a bug: end the mount; the journal keeps every dirty byte
            finally:
                self.progress.end()
        return result.pushed

    # -- one pass -------------------------------------------------------------------
    async def _pass(
        self, kind: PassKind, *, initial: bool = False, final: bool = False, asked: bool = False
    ) -> PassResult:
        async with self._pass_lock:
            self._started_seq += 1
            seq = self._started_seq
            started = time.time()
            t0, cpu0 = time.monotonic(), time.process_time()
            self.scheduler.started(trio.current_time(), kind)
            result = PassResult(started, 0.0, "ok", kind=kind)
            try:
                await self._run_pass(result, kind, initial=initial, final=final, asked=asked)
            except Exception as e:
                cause = _expected_failure(e)
                if cause is None:
                    raise  # a bug: end the mount; the journal keeps every dirty byte
                result.outcome, result.error = "failed", str(cause)
                self._last_cause = cause
                self._pass_failed.warning((self.store_id, type(cause)), self.store_id, cause)
                self.offline = isinstance(cause, StoreUnavailable)
            else:
                if self.offline:
                    log.info("memory store reachable again memory_store_id=%s", self.store_id)
                if self._last_cause is not None:
                    self._pass_failed.forget((self.store_id, type(self._last_cause)))
                self.offline = False
            finally:
                self.progress.end()
            result.duration_s = time.monotonic() - t0
            result.cpu_s = time.process_time() - cpu0
            now = trio.current_time()
            self.scheduler.done(
                now, result.kind, ok=result.outcome == "ok", left_over=self._left_over
            )
            if self._next_retry is not None:
                self.scheduler.retry_at(now + max(RETRY_GAP, self._next_retry - time.time()))
            else:
                self.scheduler.retry_at(None)
            self._plan_probe()
            metrics.sync_pass(
                self.store_id,
                "idle" if result.outcome == "ok" and result.kind == "probe" else result.outcome,
                result.conflicts,
            )
            self.last_pass = result
            self._completed_seq = seq
            done, self._completed = self._completed, trio.Event()
            done.set()
            log.debug(
                "sync pass done memory_store_id=%s kind=%s outcome=%s ms=%d cpu_ms=%.1f "
                "pulled=%d pushed=%d",
                self.store_id,
                result.kind,
                result.outcome,
                int(result.duration_s * 1000),
                result.cpu_s * 1000,
                result.pulled,
                result.pushed,
            )
            return result

    async def _store_head(self) -> MemoryVersion | bool | None:
        """The store's newest version (every create, change and delete appends one);
        None if the store has none; False if its answer was unusable (this pass lists and
        keeps its cursor). `_feed_supported` goes False where the store has no versions
        list: then every pass lists."""
        try:
            versions = await self.client.list_versions(self.store_id, limit=1)
        except (NotFound, Rejected):
            self._feed_supported = False
            return None
        except (StoreUnavailable, StoreAuthError):
            raise
        except StoreError as e:
            self._invalid_head.warning(self.store_id, self.store_id, e)
            return False
        return versions[0] if versions else None

    async def _run_pass(
        self, result: PassResult, kind: PassKind, *, initial: bool, final: bool, asked: bool
    ) -> None:
        if self._cursor is None or not self._feed_supported:
            kind = "full"  # nothing to read the feed from: list
        if kind == "probe":
            head = await self._store_head()
            if isinstance(head, bool):
                head, kind = None, "full"
            self.listener.heard(head.id if head is not None else None)
            cursor = self._cursor
            if not self._feed_supported or kind == "full":
                kind = "full"
            elif cursor is None or (head.id if head is not None else "") == cursor.head:
                result.listed = False
                result.kind = "probe"
                return
            else:
                kind = "feed"  # the head moved: read what moved it
        if kind == "push":
            result.listed = False
            await self._push_pass(result, asked=asked)
            return
        feed: Feed | None = None
        if self._cursor is not None and self._feed_supported and not initial:
            feed = await self._read_feed()
        if kind == "feed" and feed is not None and feed.complete:
            result.kind, result.listed = "feed", False
            files = self._scope(feed, whole=final)
            remote = self._remote_from(feed, files)
            await self._apply(result, remote, files, initial=initial, final=final, asked=asked)
            self._advance(feed.cursor)
            return
        result.kind = "full"
        await self._full_pass(result, feed, initial=initial, final=final, asked=asked)

    async def _read_feed(self) -> Feed | None:
        """The versions since the cursor (memfs/sync/feed.py); None where the store has
        no versions list."""
        assert self._cursor is not None
        self.progress.begin("reading changes")
        try:
            feed = await read_feed(self.client, self.store_id, self._cursor)
        except (NotFound, Rejected):
            self._feed_supported = False
            return None
        except (StoreUnavailable, StoreAuthError):
            raise
        except StoreError as e:  # garbage where versions should be: list instead
            feed = Feed(cursor=self._cursor, complete=False, why=f"its answer is unusable: {e}")
        for full in feed.contents:
            self.fetcher.store(full)
        if feed.cursor.head:
            self.listener.heard(feed.cursor.head)
        if not feed.complete:
            log.info(
                "the change feed cannot answer; listing the store memory_store_id=%s why=%s",
                self.store_id,
                feed.why,
            )
        return feed

    def _remote_from(self, feed: Feed, files: set[Node] | None = None) -> dict[str, RemoteMemory]:
        """The store as a listing would show it: what this mount last saw of every
        memory it knows, with the feed's changes laid over. With `files` (the pass's
        scope, which holds the files of the memories the feed names), only their
        memories and every tombstone's: a memory outside it is as this mount last saw
        it, which is nothing to do."""
        baseline: dict[str, RemoteMemory] = {}
        holders: list[Iterable[tuple[str, Node]]] = [self.state.tombstones.items()]
        if files is None:
            holders.append(self.state.by_memory.items())
        else:
            holders.append((n.memory_id, n) for n in files if n.memory_id is not None)
        for holder in holders:
            for memory_id, node in holder:
                if node.base_sha is not None and node.base_path is not None:
                    baseline[memory_id] = RemoteMemory(
                        memory_id, node.base_path, node.base_sha, node.size, ""
                    )
        remote, invalid = remote_view(baseline, feed)
        for path in invalid:
            if path == MARKER_PATH:
                self._marker_listed.warning(self.store_id, path, self.store_id)
            else:
                self._invalid_path.warning((self.store_id, path), self.store_id, path)
        return remote

    def _advance(self, cursor: Cursor) -> None:
        """The feed up to `cursor` is applied: keep it (unless a pull still waits for its
        content; then the same versions are read again)."""
        if self._left_over_pulls or cursor == self._cursor:
            return
        self._cursor = cursor
        self.state.set_meta(CURSOR_META, cursor.dumps())

    async def _full_pass(
        self, result: PassResult, feed: Feed | None, *, initial: bool, final: bool, asked: bool
    ) -> None:
        """List the whole store and plan from it: at start, when the feed cannot answer,
        and on the reconciliation schedule. Changes the listing shows that the feed read
        just before it did not (`feed`) are counted: the feed missed them."""
        head = await self._store_head() if self._feed_supported else None
        known = not isinstance(head, bool)
        if isinstance(head, bool):
            head = None
        self.listener.heard(head.id if head is not None else None)
        remote: dict[str, RemoteMemory] = {}
        self.progress.begin("listing")
        async for memory in self.client.iter_memories(self.store_id):
            if not isinstance(memory, RemoteMemory):
                continue
            self.progress.advance()
            if memory.path == MARKER_PATH:
                self._marker_listed.warning(self.store_id, memory.path, self.store_id)
                continue
            if not is_valid_memory_path(memory.path):
                self._invalid_path.warning((self.store_id, memory.path), self.store_id, memory.path)
                continue
            remote[memory.id] = memory
        self.progress.end()
        if feed is not None and feed.complete and not initial:
            self._count_missed(self._remote_from(feed), remote)
        await self._apply(
            result, remote, self._scope(None, whole=True), initial=initial, final=final, asked=asked
        )
        if self._feed_supported and known:
            self._advance(listed_cursor(head, feed, remote.values()))

    def _count_missed(
        self, expected: dict[str, RemoteMemory], listed: dict[str, RemoteMemory]
    ) -> None:
        missed = sum(
            1
            for memory_id in expected.keys() | listed.keys()
            if (e := expected.get(memory_id)) is None
            or (r := listed.get(memory_id)) is None
            or (e.path, e.content_sha256) != (r.path, r.content_sha256)
        )
        if missed:
            self._missed += missed
            metrics.feed_missed(self.store_id, missed)
            self._feed_missed.warning(self.store_id, self.store_id, missed)

    async def _apply(
        self,
        result: PassResult,
        remote: dict[str, RemoteMemory],
        files: set[Node] | None,
        *,
        initial: bool,
        final: bool,
        asked: bool,
    ) -> None:
        """Plan from the store's state (a listing, or the feed over the baseline), bring
        in what changed there, push what changed here."""
        asked = asked or final
        plan = self.planner.plan(
            remote, final=final, interval=self.interval, asked=asked, files=files
        )
        # At start, content streams in behind the mount, except for a pull onto a file
        # changed here too: it merges with the local change now (landing.merge needs
        # both sides), or the store won and the lines a kill -9 left unpushed went to a
        # conflict copy.
        await self.fetcher.fetch([p.remote for p in plan.pulls if not initial or p.conflict])
        # Removals first: a remotely deleted file may be in the way of a pulled one.
        self.lander.apply_removals(plan)
        # A pull whose content did not arrive: the same changes are read again next time.
        self._left_over_pulls = self.lander.apply_pulls(plan, result, require_content=not initial)
        # Before pushing, and for read-only stores too: the kernel must forget what the
        # pulls changed before this pass is reported done.
        await self.lander.flush_invalidations()
        await self._push(plan, result, asked=asked)
        self._end_scope(files)
        self._left_over = self._has_left_over() or self._left_over_pulls

    async def _push_pass(self, result: PassResult, *, asked: bool) -> None:
        """Local changes only, each on its precondition: no listing, no feed. What the
        store answers decides: a lost race is merged or lost to the store's version, a
        path taken makes the next pass read the feed."""
        files = self._scope(None, whole=False)
        plan = self.planner.plan_local(
            asked=asked, final=False, interval=self.interval, files=files
        )
        plan.deletes.extend(self.state.tombstones.values())
        await self._push(plan, result, asked=asked)
        self._end_scope(files)
        self._left_over = self._has_left_over()

    async def _push(self, plan: Plan, result: PassResult, *, asked: bool) -> None:
        if self.state.read_only:
            return
        hold = self.deletes_when_asked and not asked
        self.pusher.deletes_held += hold
        try:
            await self.pusher.push(plan, result)
        finally:
            self.pusher.deletes_held -= hold
        self._settle_taken(result)

    def _settle_taken(self, result: PassResult) -> None:
        """An upload found its path taken in the store: the feed settles it, at once."""
        if result.unsettled:
            self.scheduler.heard(trio.current_time(), own=False)

    def _scope(self, feed: Feed | None, *, whole: bool) -> set[Node] | None:
        """The files this pass looks at: those changed here since a pass last looked,
        those an earlier pass left with something to push, and those whose memories
        the feed names. None: every file (`whole`, and the first pass after a start)."""
        touched = self.state.take_touched()
        if whole or self._walk_all:
            self._walk_all = True
            return None
        pending = self._pending  # kept as it grows: a pass that fails loses nothing
        for node in touched:
            if node.kind is Kind.FILE:
                pending.add(node)
            elif node.is_dir and node.linked:
                pending.update(self.state.walk_files(node))  # moved: its files moved
        files = {node for node in pending if node.linked}
        if feed is not None:
            by_memory = self.state.by_memory
            files.update(n for mid in feed.newest if (n := by_memory.get(mid)) is not None)
        return files

    def _needs_push(self, node: Node) -> bool:
        """Something of this file a later pass may have to push (refused ones too: a
        change or a retry sends them again)."""
        if self._excluded(node):
            return False
        return bool(
            node.memory_id is None
            or node.dirty
            or node.sent_sha
            or node.sent_path
            or (node.base_path is not None and node.base_path != node.store_path())
        )

    def _end_scope(self, files: set[Node] | None) -> None:
        """After a pass that looked at `files` (None: every file): what is still
        pending. Changes made during the pass wait in `state.touched`."""
        walked = files is None
        seen = self.state.walk_files() if files is None else files
        self._pending = {n for n in seen if n.linked and self._needs_push(n)}
        if walked:
            self._walk_all = False
        elif self.check_scope:
            late = {n for n in self.state.touched if n.kind is Kind.FILE}
            for d in (n for n in self.state.touched if n.is_dir):
                late.update(self.state.walk_files(d))
            missed = [
                n.store_path()
                for n in self.state.walk_files()
                if self._needs_push(n) and n not in self._pending and n not in late
            ]
            if missed:
                raise AssertionError(f"the pass scope missed files: {missed[:10]}")

    def _has_left_over(self) -> bool:
        """Anything a later pass still has to push, even with no new local change; and
        `_next_retry`: when the first transient refusal is due again (`_idle`)."""
        state = self.state
        self._next_retry = None
        if state.read_only:
            return False
        left = self.deletions == "enabled" and bool(state.tombstones)
        for node in self._pending:  # each has something to push (`_needs_push`)
            unsent = node.memory_id is None or node.dirty or node.sent_sha or node.sent_path
            if not unsent or node.refused_sha is None or node.refused_sha != node.current_sha():
                left = True  # a rename, or content not refused as it stands
            elif node.retry_at is not None:
                self._next_retry = min(node.retry_at, self._next_retry or node.retry_at)
        return left

    def _excluded(self, node: Node) -> bool:
        return self.state.is_local_only(node)

    def _excluded_name(self, name: str) -> bool:
        return self._exclude_re.fullmatch(name) is not None


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


async def _nothing() -> None:
    """`StoreSync.before_asked` of a mount with nothing to wait for."""
