"""The daemon's answers to control requests: one op table (`table`), one handler per op.

memfs/control/protocol.py defines each request; memfs/control/server.py parses and
dispatches. The handlers read the mount's one store (statistics, the kept conflict
copies, the file a path names) and the store's versions, and start passes. The daemon
(memfs/mount/daemon.py) hands them what they read, and how to stop it; answers know
nothing else of it. The answers keep the wire's shape for several stores (a list, or a
map by store id), which always names the one.
"""

from __future__ import annotations

import base64
import os
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from memfs.control import protocol
from memfs.control.server import Handler
from memfs.errors import StoreError
from memfs.logs import rfc3339
from memfs.paths import NAME_MAX, local_name, may_be_alias
from memfs.state import conflicts
from memfs.state.node import Kind, Node
from memfs.state.store_state import StoreState
from memfs.store import history
from memfs.store.client import StoreClient, StoreInfo
from memfs.store.wire import MemoryVersion
from memfs.sync.engine import RefusedFile, StoreSync, SyncStatistics
from memfs.sync.plan import ConflictCopy, PassResult, PathPush

if TYPE_CHECKING:  # the CLI builds history answers too, without FUSE
    from memfs.mount.fs import MemFs


@dataclass
class Located:
    """What a path inside a mount names: a store, a path in it, and the local file."""

    state: StoreState
    path: str
    node: Node | None


def locate(state: StoreState, rel: str) -> Located:
    """`rel` is relative to the mount point ('/notes/a.md'). The file need not exist
    any more."""
    parts = [p for p in rel.split("/") if p]
    if not parts:
        raise history.HistoryError("a store's directory is not a memory; name a file in it")
    node: Node | None = state.root
    names: list[str] = []
    for name in parts:
        child = _child(node, name) if node is not None else None
        names.append(child.name if child is not None else name)
        node = child
    if node is not None and node.kind is not Kind.FILE:
        raise history.HistoryError(
            "not a file" if node.kind is Kind.DIR else "the marker file is not a memory"
        )
    return Located(state, "/" + "/".join(names), node)


def _child(node: Node, name: str) -> Node | None:
    if node.children is None:
        return None
    child = node.children.get(name)
    if child is None and may_be_alias(name):  # a long store name is shown as its alias
        for real, candidate in node.children.items():
            if len(real.encode("utf-8", "surrogateescape")) > NAME_MAX and local_name(real) == name:
                return candidate
    return child


def local_file(here: Located) -> protocol.LocalFile | protocol.NoLocalFile:
    node = here.node
    if node is None:
        tomb = next((t for t in here.state.tombstones.values() if t.base_path == here.path), None)
        return protocol.NoLocalFile(
            exists=False,
            state="pending-delete" if tomb else "absent",
            memory_id=tomb.memory_id if tomb else None,
        )
    return protocol.LocalFile(
        exists=True,
        state=node.state_name(),
        sha=node.current_sha(),
        memory_id=node.memory_id,
        base_sha=node.base_sha,
        dirty=node.state_name() in ("dirty", "refused"),
        conflict=node.conflict,
    )


def version_answer(v: MemoryVersion) -> protocol.HistoryVersion:
    return protocol.HistoryVersion(
        id=v.id,
        memory_id=v.memory_id,
        operation=v.operation,
        path=v.path,
        created_at=v.created_at,
        created_by=v.created_by,
        actor=history.actor_name(v.created_by),
        content_sha256=v.content_sha256,
        content_size_bytes=v.content_size_bytes,
        redacted_at=v.redacted_at,
    )


async def history_answer(
    request: protocol.History, state: StoreState, client: StoreClient
) -> protocol.HistoryAnswer | protocol.ErrorAnswer:
    """A file's versions, and with `what="show"` one version's content."""
    try:
        here = locate(state, request.path)
        local = local_file(here)
        store_id = here.state.store_id
        memory_id = local.memory_id
        if memory_id is None:
            # A file created here and never pushed has no history of its own; the store
            # may still keep a deleted memory's versions under the path.
            memory_id = await history.find_memory(
                client, store_id, here.path, deleted=here.node is None
            )
        versions = await history.versions_of(client, store_id, memory_id) if memory_id else []
        answer = protocol.HistoryAnswer(
            ok=True,
            memory_store_id=store_id,
            path=here.path,
            memory_id=memory_id,
            access="read_only" if here.state.read_only else "read_write",
            local=local,
            versions=[version_answer(v) for v in versions],
        )
        if request.what == "show":
            chosen = history.pick(versions, request.version)
            answer.version = version_answer(chosen)
            answer.content = await history.content_of(client, store_id, chosen)
        return answer
    except history.HistoryError as e:
        return protocol.error(str(e))
    except StoreError as e:
        return protocol.ErrorAnswer(
            ok=False,
            error=f"the store did not answer the history request: {e}",
            unreachable=True,
        )


def _local_path(mountpoint: str, path: str) -> str:
    """Where the mount shows store path `path` (long segments by their alias)."""
    parts = [local_name(p) for p in path.strip("/").split("/")]
    return os.path.join(mountpoint, *parts)


def _listing(sync: StoreSync, mountpoint: str) -> list[tuple[conflicts.Kept, str]]:
    kept_copies = conflicts.kept_copies(sync.store_id, sync.state.cache.conflicts)
    return [(kept, _local_path(mountpoint, kept.path)) for kept in kept_copies]


def kept_copy(kept: conflicts.Kept, local_path: str | None = None) -> protocol.KeptCopy:
    # protocol.KeptCopy declares Kept's fields again (control/ imports nothing of
    # state/); tests/unit/test_control_protocol.py keeps the two in step
    return protocol.KeptCopy(**asdict(kept), local_path=local_path)


def conflicts_answer(
    request: protocol.Conflicts, sync: StoreSync, mountpoint: str
) -> protocol.ConflictsAnswer | protocol.ErrorAnswer:
    """The kept copies (`list`); one by id prefix (`get`), marked restored, or dropped."""
    listing = _listing(sync, mountpoint)
    what = request.what
    if what == "list":
        return protocol.ConflictsAnswer(
            ok=True,
            mountpoint=mountpoint,
            conflicts=[kept_copy(k, lp) for k, lp in listing],
        )
    wanted = request.id
    matches = [item for item in listing if wanted and item[0].id.startswith(wanted)]
    if not matches:
        return protocol.ErrorAnswer(
            ok=False, error=f"no conflict copy {wanted!r} here", missing=True
        )
    if len(matches) > 1:
        return protocol.error(f"{wanted!r} names {len(matches)} conflict copies; give more digits")
    kept, local_path = matches[0]
    state = sync.state
    if what == "get":
        try:
            data = Path(kept.copy).read_bytes()
        except OSError as e:
            return protocol.error(f"cannot read {kept.copy}: {e.strerror}")
        node = state.node_at(kept.path)
        local: protocol.CopyTarget | protocol.NoCopyTarget = (
            protocol.NoCopyTarget(exists=False)
            if node is None
            else protocol.CopyTarget(
                exists=True,
                state=node.state_name(),
                sha=node.current_sha(),
                dirty=node.state_name() in ("dirty", "refused"),
            )
        )
        return protocol.ConflictsAnswer(
            ok=True,
            conflict=kept_copy(kept, local_path),
            content_b64=base64.b64encode(data).decode(),
            local=local,
            access="read_only" if state.read_only else "read_write",
        )
    if what == "restored":
        kept.restored_at = conflicts._now()
        conflicts._write(kept)
        return protocol.ConflictsAnswer(ok=True, conflict=kept_copy(kept))
    # what == "drop" (the protocol admits no other word)
    Path(kept.copy).unlink(missing_ok=True)
    conflicts._meta(Path(kept.copy)).unlink(missing_ok=True)
    node = state.node_at(kept.path)
    if node is not None and node.conflict == kept.copy:
        sync.records.clear_conflict(node)  # status and user.memfs.* stop naming it
    sync.conflict_copies[:] = [c for c in sync.conflict_copies if c.copy != kept.copy]
    return protocol.ConflictsAnswer(ok=True, dropped=kept_copy(kept))


# -- the status schema ------------------------------------------------------------------


def _conflict_copy(c: ConflictCopy) -> protocol.ConflictCopy:
    return protocol.ConflictCopy(path=c.path, copy=c.copy, at=c.at, why=c.why)


def _refused_file(r: RefusedFile) -> protocol.RefusedFile:
    return protocol.RefusedFile(
        path=r.path,
        why=r.why,
        transient=r.transient,
        next_retry=rfc3339(r.next_retry) if r.next_retry is not None else None,
    )


def last_pass(p: PassResult) -> protocol.LastPass:
    """A pass as `status --json` and `sync --json` show it (times in RFC 3339)."""
    return protocol.LastPass(
        at=rfc3339(p.started_at),
        duration_s=round(p.duration_s, 3),
        cpu_ms=round(p.cpu_s * 1000, 1),
        outcome=p.outcome,
        error=p.error,
        pulled=p.pulled,
        pushed=p.pushed,
        deleted=p.deleted,
        conflicts=p.conflicts,
        conflict_copies=[_conflict_copy(c) for c in p.conflict_copies],
        listed=p.listed,
        kind=p.kind,
        unsettled=list(p.unsettled),
    )


def store_status(
    sync: StoreSync, stats: SyncStatistics, name: str, mount_path: str
) -> protocol.StoreStatus:
    """One store of `memfs status`: what it is, then its statistics."""
    return protocol.StoreStatus(
        memory_store_id=sync.store_id,
        name=name,
        mount_path=mount_path,
        access="read_only" if sync.state.read_only else "read_write",
        interval_s=sync.interval,
        deletions=sync.deletions,
        memories=stats.memories,
        bytes=stats.bytes,
        dirty=stats.dirty,
        refused=stats.refused,
        conflicts=stats.conflicts,
        pending_deletes=stats.pending_deletes,
        missing_content=stats.missing_content,
        offline=stats.offline,
        conflict_copies=[_conflict_copy(c) for c in stats.conflict_copies],
        refused_files=[_refused_file(r) for r in stats.refused_files],
        dirty_files=list(stats.dirty_files),
        excluded=stats.excluded,
        pending_delete_paths=list(stats.pending_delete_paths),
        last_pass=last_pass(stats.last_pass) if stats.last_pass else None,
        next_pass_at=rfc3339(stats.next_pass_at) if stats.next_pass_at else None,
        learns_by=stats.learns_by,
        last_heard_at=rfc3339(stats.last_heard_at) if stats.last_heard_at else None,
        passes=dict(stats.passes),
        feed_missed=stats.feed_missed,
    )


# -- the op table -----------------------------------------------------------------------


class Answers:
    """One daemon's handlers, one per op; `table` is what its control server serves.

    What they read: the store's sync (and through it the state), what the store said
    of itself at start (`info`, None when it started offline), the mount point, the
    FUSE side's statistics, a client for the store's versions; `stopping` and
    `unmount` are the daemon's teardown (memfs/mount/daemon.py)."""

    def __init__(
        self,
        sync: StoreSync,
        *,
        info: StoreInfo | None,
        mountpoint: str,
        fs: MemFs,
        client: Callable[[], StoreClient],
        stopping: Callable[[], bool],
        unmount: Callable[[], Awaitable[protocol.UnmountAnswer]],
    ) -> None:
        self._sync = sync
        self._info = info
        self._mountpoint = mountpoint
        self._fs = fs
        self._client = client
        self._stopping = stopping
        self._unmount = unmount

    def table(self) -> Mapping[str, Handler]:
        return {
            "status": self.status,
            "sync": self.sync,
            "push": self.push,
            "flush": self.flush,
            "restore": self.restore,
            "history": self.history,
            "conflicts": self.conflicts,
            "progress": self.progress,
            "unmount": self.unmount,
        }

    def _status(self) -> protocol.StatusAnswer:
        """The mount and its store's statistics; `sync` answers with the same schema."""
        sync, info = self._sync, self._info
        store = store_status(sync, sync.statistics(), info.name if info else "", self._mountpoint)
        fuse = self._fs.statistics()
        return protocol.StatusAnswer(
            ok=True,
            mountpoint=self._mountpoint,
            pid=os.getpid(),
            stores=[store],
            fuse_requests=fuse.fuse_requests,
            pyfuse3=fuse.pyfuse3,
            negative_entries=asdict(fuse.negative_entries),
            xattrs=fuse.xattrs,
            close_watch=None if fuse.close_watch is None else asdict(fuse.close_watch),
        )

    async def status(self, _: protocol.Status) -> protocol.StatusAnswer:
        return self._status()

    async def sync(self, request: protocol.Sync) -> protocol.StatusAnswer:
        result = await self._sync.sync_now(full=request.full)
        answer = self._status()
        answer.stores[0].last_pass = last_pass(result)
        answer.ok = result.outcome == "ok"
        return answer

    async def push(self, request: protocol.Push) -> protocol.PushAnswer:
        sync = self._sync
        try:
            here = locate(sync.state, request.path)
        except history.HistoryError as e:
            done = PathPush("missing", request.path, why=str(e))
        else:
            done = await sync.push_path(here.path, merge=request.merge, sha=request.sha)
        return protocol.PushAnswer(
            ok=done.ok,
            outcome=done.outcome,
            path=done.path,
            version=done.version,
            why=done.why,
            copy=done.copy,
        )

    async def flush(self, _: protocol.Flush) -> protocol.FlushAnswer:
        sync = self._sync
        flushed: dict[str, protocol.Flushed] = {}
        if not sync.state.read_only:
            r = await sync.flush_writes()
            flushed[sync.store_id] = protocol.Flushed(
                outcome=r.outcome, error=r.error, pushed=r.pushed
            )
        return protocol.FlushAnswer(
            ok=all(f.outcome == "ok" for f in flushed.values()), stores=flushed
        )

    async def restore(self, request: protocol.Restore) -> protocol.RestoreAnswer:
        sync = self._sync
        restored: dict[str, int] = {}
        if not sync.state.read_only:
            restored[sync.store_id] = await sync.restore_missing()
        if request.sync and restored.get(sync.store_id):
            await sync.sync_now()
        return protocol.RestoreAnswer(ok=True, restored=restored)

    async def history(
        self, request: protocol.History
    ) -> protocol.HistoryAnswer | protocol.ErrorAnswer:
        return await history_answer(request, self._sync.state, self._client())

    async def conflicts(
        self, request: protocol.Conflicts
    ) -> protocol.ConflictsAnswer | protocol.ErrorAnswer:
        return conflicts_answer(request, self._sync, self._mountpoint)

    async def progress(self, _: protocol.Progress) -> protocol.ProgressAnswer:
        sync = self._sync
        t = sync.progress
        ended = t.last if t.phase == "" else None
        store = protocol.StoreProgress(
            memory_store_id=sync.store_id,
            label="",
            phase=t.phase,
            done=t.done,
            total=t.total,
            last=None
            if ended is None
            else protocol.PhaseEnded(ended.phase, ended.done, ended.total),
        )
        return protocol.ProgressAnswer(ok=True, closing=self._stopping(), stores=[store])

    async def unmount(self, _: protocol.Unmount) -> protocol.UnmountAnswer:
        return await self._unmount()
