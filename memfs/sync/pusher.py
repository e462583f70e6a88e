"""Pushing a pass's local changes to the store, with preconditions.

Every upload snapshots `(bytes, sha, version)` synchronously, and after the answer the
file is marked clean only if it did not change meanwhile (`SyncRecords.record_pushed`).
A lost race is settled by retrieving the memory and landing it (the store wins).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import trio

from memfs.audit import Trail
from memfs.config import DeletionMode
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
from memfs.logs import Repeated
from memfs.paths import RemoteMemory, sha256_hex
from memfs.state.node import Node
from memfs.state.records import SyncRecords
from memfs.store.client import StoreClient
from memfs.sync.fetcher import ContentFetcher
from memfs.sync.landing import Lander
from memfs.sync.plan import PassResult, Plan
from memfs.sync.progress import Tracker
from memfs.sync.schedule import give_way

log = logging.getLogger("memfs.sync")


# A merged upload that loses the race again is merged and pushed again, this often in
# one pass; a merge past that waits, a local change, for the next pass to push it (only
# a real conflict, which no merge resolves, gives the store's side and a conflict copy).
MERGE_RETRIES = 3
# A transient refusal (the store is full) is retried after this many seconds, doubling
# each time it is refused again, up to RETRY_MAX; a restart or `memfs sync` retries now.
RETRY_FIRST = 15.0
RETRY_MAX = 600.0


def delete_cap(baseline: int) -> int:
    """The reference worker's per-pass delete cap."""
    return max(8, min(50, baseline // 4))


class Pusher:
    """Sends one store's creates, updates, renames and deletes."""

    def __init__(
        self,
        records: SyncRecords,
        client: StoreClient,
        lander: Lander,
        fetcher: ContentFetcher,
        progress: Tracker,
        trail: Trail,
        *,
        concurrency: int,
        deletions: DeletionMode,
    ) -> None:
        self.records = records  # how what the store answered reaches the nodes and journal
        self.state = records.state
        self.client = client
        self.lander = lander
        self.fetcher = fetcher
        self.progress = progress  # "pushing N of M" (memfs/sync/progress.py)
        self.store_id = records.state.store_id
        self.deletions: DeletionMode = deletions
        # 8 uploads in flight: the store serialises writes anyway, and more concurrent
        # requests cost the client more CPU than they save (2,000-file flush: 32 -> 17.5 s,
        # 8 -> 9.0 s, 4 -> 8.0 s, measured side by side on the same server).
        self.limit = trio.CapacityLimiter(concurrency)
        # When the mount answered its last FUSE request (trio's clock; set by the
        # daemon): an upload gives way to a busy mount (`schedule.give_way`).
        self.last_request: Callable[[], float] = lambda: -math.inf
        self.trail = trail  # the audit trail: pushes, refusals, deletes
        self.deletes_held = 0  # > 0: flushes in progress that send no deletes
        # Told of every version an accepted upload made (the listener knows its echo).
        self.written: Callable[[str], None] = lambda _version_id: None
        self.deleted: Callable[[str], None] = lambda _memory_id: None  # a delete it sent
        self._log_only_said: set[str] = set()
        self._renames_to_retry: list[Node] = []  # stepped aside this pass (_step_aside)
        self._held = Repeated(  # once per file until it is pushed (`_pushed`)
            log,
            "the store refused this memory file for now, so it is retried later "
            "memory_store_id=%s path=%s rejection=%s retry_in_s=%d",
        )
        # Failures a server can repeat at every pass: once per path and cause.
        self._move_failed = Repeated(
            log, "failed to move memory aside memory_store_id=%s path=%s error=%s"
        )
        self._delete_failed = Repeated(
            log, "failed to delete memory memory_store_id=%s path=%s error=%s"
        )
        self._path_taken = Repeated(
            log,
            "failed to upload memory: the path is taken in the store; will "
            "retry memory_store_id=%s path=%s taken_by=%s",
        )
        self._create_taken = Repeated(
            log,
            "failed to upload memory: the path is taken in the store; the next "
            "pass settles it memory_store_id=%s path=%s taken_by=%s",
        )

    async def push(self, plan: Plan, result: PassResult) -> None:
        """Deletes, then updates (renames that stepped aside retried), then creates."""
        await self.lander.flush_invalidations()
        deletes = len(plan.deletes) if self.deletions == "enabled" and not self.deletes_held else 0
        total = (
            min(deletes, delete_cap(len(self.state.by_memory) + len(self.state.tombstones)))
            + len(plan.updates)
            + len(plan.creates)
        )
        if total:
            self.progress.begin("pushing", total)
        else:
            self.progress.end()
        await self._push_deletes(plan.deletes, result)
        self._renames_to_retry = []
        async with trio.open_nursery() as nursery:
            for node in plan.updates:
                nursery.start_soon(self._counted, self._push_update, node, result)
        retry, self._renames_to_retry = self._renames_to_retry, []
        async with trio.open_nursery() as nursery:  # those that stepped aside, now freed
            for node in retry:
                nursery.start_soon(self._push_update, node, result)
        async with trio.open_nursery() as nursery:
            for node in plan.creates:
                nursery.start_soon(self._counted, self._push_create, node, result)
        await self.lander.flush_invalidations()

    @asynccontextmanager
    async def _slot(self) -> AsyncIterator[None]:
        """An upload slot, used once the mount is quiet (or it has waited long enough)."""
        async with self.limit:
            ready = trio.current_time()
            # Not an Event: every request the mount answers moves the time to wait for.
            while True:
                wait = give_way(trio.current_time(), self.last_request(), ready)
                if not wait:
                    break
                await trio.sleep(wait)
            yield

    async def _counted(
        self, push: Callable[[Node, PassResult], Awaitable[None]], node: Node, result: PassResult
    ) -> None:
        await push(node, result)
        self.progress.advance()

    async def _step_aside(self, node: Node, e: PathConflict) -> bool:
        """A rename blocked by another of our own memories that is itself moving away
        (a local swap: `mv a t; mv b a; mv t b`) would wait forever, each blocking the
        other. Park this memory at a unique path so the other can move; it takes its
        final path in the retry round of the same pass."""
        other = self.state.by_memory.get(e.conflicting_memory_id)
        if (
            other is None
            or other is node
            or node.memory_id is None
            or other.base_path != e.conflicting_path
            or other.store_path() == other.base_path
        ):
            return False
        parked = f"/.memfs-moving-{node.memory_id}"
        # Recorded first: a daemon killed before the answer lands finds the parked path
        # settled as its own move at the next start, not pulled as a remote rename.
        self.records.record_sent(node, None, parked)
        try:
            memory = await self.client.update_memory(
                self.store_id, node.memory_id, path=parked, precondition_sha256=node.base_sha
            )
        except StoreError as err:
            self.records.record_sent(node, None, None)
            cause = (node.base_path, type(err), err.status)
            self._move_failed.warning(cause, self.store_id, node.base_path, err)
            return False
        self.records.set_base_path(node, memory.path)
        self.records.record_sent(node, None, None)
        log.debug(
            "moved memory aside to free a path memory_store_id=%s path=%s parked=%s",
            self.store_id,
            e.conflicting_path,
            parked,
        )
        return True

    async def _push_deletes(self, tombs: list[Node], result: PassResult) -> None:
        if not tombs or self.deletions == "disabled":
            return
        if self.deletions == "enabled" and self.deletes_held:
            return  # a push-only flush (StoreSync.flush_writes): they wait in the journal
        if self.deletions == "log_only":
            for tomb in tombs:
                if tomb.memory_id not in self._log_only_said:
                    self._log_only_said.add(tomb.memory_id or "")
                    log.info(
                        "log-only: sync would delete this memory on the server "
                        "memory_store_id=%s path=%s",
                        self.store_id,
                        tomb.base_path,
                    )
                    self.trail.outcome(
                        self.store_id, "kept", tomb.base_path, why="--deletions log_only"
                    )
            return
        cap = delete_cap(len(self.state.by_memory) + len(self.state.tombstones))
        if len(tombs) > cap:
            log.warning(
                "delete cap reached; the held deletes go out in later syncs "
                "memory_store_id=%s sent=%d held=%d",
                self.store_id,
                cap,
                len(tombs) - cap,
            )
        async with trio.open_nursery() as nursery:
            for tomb in tombs[:cap]:
                nursery.start_soon(self._counted, self._push_delete, tomb, result)

    async def _push_delete(self, tomb: Node, result: PassResult) -> None:
        assert tomb.memory_id is not None
        memory_id = tomb.memory_id
        async with self._slot():
            try:
                await self.client.delete_memory(
                    self.store_id, memory_id, expected_sha256=tomb.base_sha
                )
            except NotFound:
                pass
            except (PreconditionFailed, Conflict):
                log.warning(
                    "memory deleted locally but changed remotely; keeping the remote "
                    "version memory_store_id=%s path=%s",
                    self.store_id,
                    tomb.base_path,
                )
                self.trail.outcome(
                    self.store_id,
                    "undeleted",
                    tomb.base_path,
                    why="changed remotely; the remote version is back",
                )
                self.records.drop_tombstone(tomb)
                await self._pull_one(memory_id, result)
                return
            except (StoreUnavailable, StoreAuthError):
                raise
            except StoreError as e:
                cause = (tomb.base_path, type(e), e.status)
                self._delete_failed.warning(cause, self.store_id, tomb.base_path, e)
                return
        self.deleted(memory_id)
        if self.state.tombstones.get(memory_id) is tomb:
            self.records.drop_tombstone(tomb)
            result.deleted += 1
            log.info(
                "propagated local deletion memory_store_id=%s path=%s",
                self.store_id,
                tomb.base_path,
            )
            self.trail.outcome(self.store_id, "deleted", tomb.base_path, memory_id=memory_id)

    async def _pull_one(
        self, memory_id: str, result: PassResult, *, merge: bool = False
    ) -> bool | None:
        """Bring one memory's current remote state in now (after a lost race); True when
        it merged (`merge`) with the local change, which is then to be pushed again;
        None when its file is being written (`Lander.busy`): the next pass merges."""
        try:
            full = await self.client.retrieve_memory(self.store_id, memory_id)
        except NotFound:
            return False
        self.fetcher.store(full)
        return self.lander.land_retrieved(full.memory, result, merge=merge)

    async def _lost_race(
        self, memory_id: str, path: str, result: PassResult, *, merge: bool
    ) -> bool | None:
        """An update refused on its precondition: True when it merged with the winner;
        None when the file is being written meanwhile (the next pass merges)."""
        landed = await self._pull_one(memory_id, result, merge=merge)
        if landed is None or landed:
            return landed
        log.warning(
            "memory changed both locally and remotely; the upload was "
            "refused and the local edit loses memory_store_id=%s path=%s",
            self.store_id,
            path,
        )
        return False

    def _snapshot(self, node: Node) -> tuple[bytes, str, int] | None:
        data = self.state.content(node)
        if data is None:
            if node.sha is not None and node.memory_id is not None:
                # Evicted clean content of a renamed file: bring it in for the next pass.
                self.fetcher.want(node.sha, node.memory_id)
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

    async def _push_update(
        self, node: Node, result: PassResult, *, merges: int = 0, merge: bool = True
    ) -> None:
        """`merges`: how often this pass already merged it after losing a race.
        `merge=False` (the worker's write): a lost race is not merged; the store's side
        wins and the local bytes go to a conflict copy."""
        assert node.memory_id is not None
        memory_id = node.memory_id
        if not node.linked:
            return  # gone since the plan: a tombstone now, or its memory went to an heir
        snap = self._snapshot(node)
        if snap is None:
            return
        data, sha, version = snap
        path = node.store_path()
        send_content = sha != node.base_sha
        send_path = path != node.base_path
        if not send_content and not send_path:
            self.records.record_pushed(node, sha, path, version)
            return
        self.records.record_sent(node, sha if send_content else None, path if send_path else None)
        merged = False
        async with self._slot():
            try:
                memory = await self.client.update_memory(
                    self.store_id,
                    memory_id,
                    content=data.decode("utf-8") if send_content else None,
                    path=path if send_path else None,
                    precondition_sha256=node.base_sha,
                )
            except PreconditionFailed:
                # Another session pushed first: merge with its version, or lose to it.
                outcome = await self._lost_race(memory_id, path, result, merge=merge)
                if outcome is None:  # being written: its close brings a pass that merges
                    self.records.record_sent(node, None, None)
                    return
                if not outcome:
                    return
                merged = True
            except NotFound:
                log.info(
                    "memory deleted remotely but edited locally; re-creating it from "
                    "the file memory_store_id=%s path=%s",
                    self.store_id,
                    path,
                )
                if node.linked:
                    self.records.forget_identity(node)
                    await self._push_create(node, result, locked=True)
                return
            except Rejected as e:
                self._refuse(node, sha, e)
                return
            except PathConflict as e:
                if await self._step_aside(node, e):
                    self._renames_to_retry.append(node)
                    return
                taken = (path, e.conflicting_path)
                self._path_taken.warning(taken, self.store_id, path, e.conflicting_path)
                result.unsettled.append(path)  # the feed settles it
                return
        if merged:  # the merge is the file now: push it on top of the version that won
            # Told now, not at the end of the push (and with no upload slot held): a
            # writer that reads the file's times meanwhile (vim's check before it writes)
            # must see the merge, or it writes its older buffer over it, and the next
            # merge of that reverted line conflicts (tests/mount/test_races.py).
            await self.lander.flush_invalidations()
            if merges < MERGE_RETRIES:
                await self._push_update(node, result, merges=merges + 1)
            # else it stays dirty: the pass leaves it pending, and the next one pushes it
            return
        self._pushed(memory, result)
        # A path we did not send that came back different: a remote rename raced this
        # upload. The old base path stays, so the next listing follows the rename
        # instead of taking it for a local one and moving the memory back.
        moved = not send_path and memory.path != path
        self.records.record_pushed(
            node,
            sha,
            memory.path,
            version,
            base_sha=memory.content_sha256,
            base_path=None if moved else memory.path,
            data=data,
        )

    def _pushed(self, memory: RemoteMemory, result: PassResult) -> None:
        """Count an upload the store accepted, and say so in the audit trail."""
        result.pushed += 1
        if memory.memory_version_id:
            result.versions[memory.path] = memory.memory_version_id
            self.written(memory.memory_version_id)
        self._held.forget(memory.path)
        self.trail.outcome(
            self.store_id,
            "pushed",
            memory.path,
            memory_id=memory.id,
            version=memory.memory_version_id or None,
        )

    async def _push_create(self, node: Node, result: PassResult, *, locked: bool = False) -> None:
        snap = self._snapshot(node)
        if snap is None or not node.linked or node.memory_id is not None:
            return  # (renamed over another memory since the plan: the next pass updates it)
        data, sha, version = snap
        path = node.store_path()
        self.records.record_sent(node, sha, path)
        try:
            if locked:
                memory = await self.client.create_memory(self.store_id, path, data.decode("utf-8"))
            else:
                async with self._slot():
                    memory = await self.client.create_memory(
                        self.store_id, path, data.decode("utf-8")
                    )
        except Rejected as e:
            self._refuse(node, sha, e)
            return
        except PathConflict as e:
            if await self._settle_own_create(node, (data, sha, version), path, e, result):
                return
            if node.memory_id is None:
                self.records.record_sent(node, None, None)  # made nothing: not ours to claim
            taken = (path, e.conflicting_path)
            self._create_taken.warning(taken, self.store_id, path, e.conflicting_path)
            result.unsettled.append(path)  # the feed settles it
            return
        self._pushed(memory, result)
        if node.memory_id is not None:
            # Renamed over another memory while this create was in flight: the file is
            # that memory now, and the one just made stands for nothing local.
            self.records.bury_orphan(memory)
            return
        self.state.adopt_identity(node, memory.id, memory.content_sha256, memory.path)
        if not node.linked:
            # Unlinked during its own upload: the memory now exists, so delete it later.
            self.records.bury_unlinked_create(node, memory.id)
            return
        self.records.record_pushed(node, sha, memory.path, version, data=data)

    async def _settle_own_create(
        self,
        node: Node,
        snap: tuple[bytes, str, int],
        path: str,
        e: PathConflict,
        result: PassResult,
    ) -> bool:
        """A create refused because its path is taken by a memory no file here knows,
        holding these very bytes: an earlier create of this file whose answer was lost (a
        pass cancelled mid-upload, a lost connection), landed after the store was last
        read. It is this file's memory; say so now instead of at the next pass, which at
        unmount never comes."""
        data, sha, version = snap
        memory_id = e.conflicting_memory_id
        if (
            e.conflicting_path != path
            or not memory_id
            or memory_id in self.state.by_memory
            or memory_id in self.state.tombstones
        ):
            return False
        try:
            full = await self.client.retrieve_memory(self.store_id, memory_id)
        except NotFound:
            return False
        r = full.memory
        if r.content_sha256 != sha or r.path != path or not node.linked:
            return False
        if node.memory_id is not None:  # claimed meanwhile (a rename onto it)
            return False
        self.fetcher.store(full)
        self.state.adopt_identity(node, r.id, r.content_sha256, r.path)
        self.records.record_pushed(node, sha, r.path, version, data=data)
        log.info(
            "a create whose answer was lost had made this memory; taking it over "
            "memory_store_id=%s path=%s",
            self.store_id,
            path,
        )
        self._pushed(r, result)
        return True

    def _refuse(self, node: Node, sha: str, e: StoreError) -> None:
        if isinstance(e, Rejected) and e.transient:
            self._hold(node, sha, e)
            return
        self.records.refuse(node, sha, e.message)
        self.trail.outcome(self.store_id, "refused", node.store_path(), why=e.message)
        log.warning(
            "the server rejected this memory file, so it stays un-synced until its "
            "content changes memory_store_id=%s path=%s rejection=%s",
            self.store_id,
            node.store_path(),
            e.message,
        )

    def _hold(self, node: Node, sha: str, e: StoreError) -> None:
        """A refusal whose cause passes (the store is full): retried with back-off, from
        RETRY_FIRST doubling up to RETRY_MAX, sooner when someone asks (`memfs sync`)."""
        delay = min(RETRY_FIRST * 2**node.retries, RETRY_MAX)
        self.records.refuse(node, sha, e.message, retry_at=time.time() + delay)
        path = node.store_path()
        self._held.warning(path, self.store_id, path, e.message, delay)
