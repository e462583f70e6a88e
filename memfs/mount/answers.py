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
from typing import Any

from memfs.control import protocol
from memfs.control.server import Handler
from memfs.errors import StoreError
from memfs.mount.fs import MemFs
from memfs.paths import NAME_MAX, local_name, may_be_alias
from memfs.state import conflicts
from memfs.state.node import Kind, Node
from memfs.state.store_state import StoreState
from memfs.store import history
from memfs.store.client import StoreClient, StoreInfo
from memfs.sync.engine import StoreSync
from memfs.sync.plan import PathPush


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


def local_json(here: Located) -> dict[str, Any]:
    node = here.node
    if node is None:
        tomb = next((t for t in here.state.tombstones.values() if t.base_path == here.path), None)
        return {
            "exists": False,
            "state": "pending-delete" if tomb else "absent",
            "memory_id": tomb.memory_id if tomb else None,
        }
    return {
        "exists": True,
        "state": node.state_name(),
        "sha": node.current_sha(),
        "memory_id": node.memory_id,
        "base_sha": node.base_sha,
        "dirty": node.state_name() in ("dirty", "refused"),
        "conflict": node.conflict,
    }


async def history_answer(
    request: protocol.History, state: StoreState, client: StoreClient
) -> dict[str, Any]:
    """A file's versions, and with `what="show"` one version's content."""
    try:
        here = locate(state, request.path)
        local = local_json(here)
        store_id = here.state.store_id
        memory_id = local.get("memory_id")
        if memory_id is None:
            # A file created here and never pushed has no history of its own; the store
            # may still keep a deleted memory's versions under the path.
            memory_id = await history.find_memory(
                client, store_id, here.path, deleted=here.node is None
            )
        versions = await history.versions_of(client, store_id, memory_id) if memory_id else []
        base = {
            "ok": True,
            "memory_store_id": store_id,
            "path": here.path,
            "memory_id": memory_id,
            "access": "read_only" if here.state.read_only else "read_write",
            "local": local,
            "versions": [history.version_json(v) for v in versions],
        }
        if request.what == "show":
            chosen = history.pick(versions, request.version)
            base["version"] = history.version_json(chosen)
            base["content"] = await history.content_of(client, store_id, chosen)
        return base
    except history.HistoryError as e:
        return {"ok": False, "error": str(e)}
    except StoreError as e:
        return {
            "ok": False,
            "error": f"the store did not answer the history request: {e}",
            "unreachable": True,
        }


def _local_path(mountpoint: str, path: str) -> str:
    """Where the mount shows store path `path` (long segments by their alias)."""
    parts = [local_name(p) for p in path.strip("/").split("/")]
    return os.path.join(mountpoint, *parts)


def _listing(sync: StoreSync, mountpoint: str) -> list[tuple[conflicts.Kept, str]]:
    kept_copies = conflicts.kept_copies(sync.store_id, sync.state.cache.conflicts)
    return [(kept, _local_path(mountpoint, kept.path)) for kept in kept_copies]


def conflicts_answer(
    request: protocol.Conflicts, sync: StoreSync, mountpoint: str
) -> dict[str, Any]:
    """The kept copies (`list`); one by id prefix (`get`), marked restored, or dropped."""
    listing = _listing(sync, mountpoint)
    what = request.what
    if what == "list":
        return {
            "ok": True,
            "mountpoint": mountpoint,
            "conflicts": [{**asdict(k), "local_path": lp} for k, lp in listing],
        }
    wanted = request.id
    matches = [item for item in listing if wanted and item[0].id.startswith(wanted)]
    if not matches:
        return {"ok": False, "missing": True, "error": f"no conflict copy {wanted!r} here"}
    if len(matches) > 1:
        return {
            "ok": False,
            "error": f"{wanted!r} names {len(matches)} conflict copies; give more digits",
        }
    kept, local_path = matches[0]
    state = sync.state
    if what == "get":
        try:
            data = Path(kept.copy).read_bytes()
        except OSError as e:
            return {"ok": False, "error": f"cannot read {kept.copy}: {e.strerror}"}
        node = state.node_at(kept.path)
        local: dict[str, Any] = {"exists": node is not None}
        if node is not None:
            local.update(
                state=node.state_name(),
                sha=node.current_sha(),
                dirty=node.state_name() in ("dirty", "refused"),
            )
        return {
            "ok": True,
            "conflict": {**asdict(kept), "local_path": local_path},
            "content_b64": base64.b64encode(data).decode(),
            "local": local,
            "access": "read_only" if state.read_only else "read_write",
        }
    if what == "restored":
        kept.restored_at = conflicts._now()
        conflicts._write(kept)
        return {"ok": True, "conflict": asdict(kept)}
    # what == "drop" (the protocol admits no other word)
    Path(kept.copy).unlink(missing_ok=True)
    conflicts._meta(Path(kept.copy)).unlink(missing_ok=True)
    node = state.node_at(kept.path)
    if node is not None and node.conflict == kept.copy:
        sync.records.clear_conflict(node)  # status and user.memfs.* stop naming it
    sync.conflict_copies[:] = [c for c in sync.conflict_copies if c.copy != kept.copy]
    return {"ok": True, "dropped": asdict(kept)}


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
        store = {
            "memory_store_id": sync.store_id,
            "name": info.name if info else "",
            "mount_path": self._mountpoint,
            "access": "read_only" if sync.state.read_only else "read_write",
            "interval_s": sync.interval,
            "deletions": sync.deletions,
            **sync.statistics().as_json(),
        }
        answer: protocol.StatusAnswer = {
            "ok": True,
            "mountpoint": self._mountpoint,
            "pid": os.getpid(),
            "stores": [store],
        }
        answer.update(self._fs.statistics().as_json())  # type: ignore[typeddict-item]
        return answer

    async def status(self, _: protocol.Status) -> protocol.StatusAnswer:
        return self._status()

    async def sync(self, request: protocol.Sync) -> protocol.StatusAnswer:
        result = await self._sync.sync_now(full=request.full)
        answer = self._status()
        answer["stores"][0]["last_pass"] = result.to_json()
        answer["ok"] = result.outcome == "ok"
        return answer

    async def push(self, request: protocol.Push) -> protocol.PushAnswer:
        sync = self._sync
        try:
            here = locate(sync.state, request.path)
        except history.HistoryError as e:
            done = PathPush("missing", request.path, why=str(e))
        else:
            done = await sync.push_path(here.path, merge=request.merge, sha=request.sha)
        return {
            "ok": done.ok,
            "outcome": done.outcome,
            "path": done.path,
            "version": done.version,
            "why": done.why,
            "copy": done.copy,
        }

    async def flush(self, _: protocol.Flush) -> protocol.FlushAnswer:
        sync = self._sync
        flushed: dict[str, dict[str, Any]] = {}
        if not sync.state.read_only:
            r = await sync.flush_writes()
            flushed[sync.store_id] = {"outcome": r.outcome, "error": r.error, "pushed": r.pushed}
        return {"ok": all(r["outcome"] == "ok" for r in flushed.values()), "stores": flushed}

    async def restore(self, request: protocol.Restore) -> protocol.RestoreAnswer:
        sync = self._sync
        restored: dict[str, int] = {}
        if not sync.state.read_only:
            restored[sync.store_id] = await sync.restore_missing()
        if request.sync and restored.get(sync.store_id):
            await sync.sync_now()
        return {"ok": True, "restored": restored}

    async def history(self, request: protocol.History) -> dict[str, Any]:
        return await history_answer(request, self._sync.state, self._client())

    async def conflicts(self, request: protocol.Conflicts) -> dict[str, Any]:
        return conflicts_answer(request, self._sync, self._mountpoint)

    async def progress(self, _: protocol.Progress) -> protocol.ProgressAnswer:
        sync = self._sync
        stores = [{"memory_store_id": sync.store_id, "label": "", **sync.progress.snapshot()}]
        return {"ok": True, "closing": self._stopping(), "stores": stores}

    async def unmount(self, _: protocol.Unmount) -> protocol.UnmountAnswer:
        return await self._unmount()
