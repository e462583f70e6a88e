"""The daemon's answers to the history and conflicts control requests.

They read a mount's state (which store a path names, the local file, the kept conflict
copies) and the store's versions; the daemon (`Daemon._control`) routes requests here.
"""

from __future__ import annotations

import base64
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from memfs.errors import StoreError
from memfs.paths import NAME_MAX, local_name, may_be_alias
from memfs.state import conflicts
from memfs.state.node import Kind, Node
from memfs.state.store_state import StoreState
from memfs.store import history
from memfs.store.client import StoreClient
from memfs.sync.engine import StoreSync


@dataclass
class Located:
    """What a path inside a mount names: a store, a path in it, and the local file."""

    state: StoreState
    path: str
    node: Node | None


def locate(states: list[StoreState], single: bool, rel: str) -> Located:
    """`rel` is relative to the mount point ('/notes/a.md'; in a session the first
    segment is the store's directory). The file need not exist any more."""
    parts = [p for p in rel.split("/") if p]
    if single:
        state = states[0]
    else:
        if not parts:
            raise history.HistoryError("the session root is not a memory; name a file in a store")
        by_dir = {s.root.name: s for s in states}
        found = by_dir.get(parts[0])
        if found is None:
            raise history.HistoryError(f"no store of this session is mounted at {parts[0]!r}")
        state, parts = found, parts[1:]
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
    request: dict[str, Any], states: list[StoreState], single: bool, client: StoreClient
) -> dict[str, Any]:
    """The daemon's side of `{"op": "history", "what": "log" | "show", "path": REL}`."""
    try:
        here = locate(states, single, str(request.get("path", "")))
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
        if request.get("what") == "show":
            chosen = history.pick(versions, request.get("version"))
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


def _local_path(mountpoint: str, single: bool, state: StoreState, path: str) -> str:
    """Where the mount shows store path `path` (long segments by their alias)."""
    parts = [local_name(p) for p in path.strip("/").split("/")]
    base = mountpoint if single else os.path.join(mountpoint, state.root.name)
    return os.path.join(base, *parts)


def _listing(
    syncs: list[StoreSync], mountpoint: str, single: bool
) -> list[tuple[StoreSync, conflicts.Kept, str]]:
    out = []
    for sync in syncs:
        state = sync.state
        for kept in conflicts.kept_copies(sync.store_id, state.cache.conflicts):
            out.append((sync, kept, _local_path(mountpoint, single, state, kept.path)))
    return out


def conflicts_answer(
    request: dict[str, Any], syncs: list[StoreSync], mountpoint: str, single: bool
) -> dict[str, Any]:
    """`{"op": "conflicts", "what": "list" | "get" | "restored" | "drop", "id": …}`."""
    listing = _listing(syncs, mountpoint, single)
    what = request.get("what", "list")
    if what == "list":
        return {
            "ok": True,
            "mountpoint": mountpoint,
            "conflicts": [{**asdict(k), "local_path": lp} for _, k, lp in listing],
        }
    wanted = str(request.get("id", ""))
    matches = [item for item in listing if wanted and item[1].id.startswith(wanted)]
    if not matches:
        return {"ok": False, "missing": True, "error": f"no conflict copy {wanted!r} here"}
    if len(matches) > 1:
        return {
            "ok": False,
            "error": f"{wanted!r} names {len(matches)} conflict copies; give more digits",
        }
    sync, kept, local_path = matches[0]
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
    if what == "drop":
        Path(kept.copy).unlink(missing_ok=True)
        conflicts._meta(Path(kept.copy)).unlink(missing_ok=True)
        node = state.node_at(kept.path)
        if node is not None and node.conflict == kept.copy:
            state.clear_conflict(node)  # status and user.memfs.* stop naming it
        sync.conflict_copies[:] = [c for c in sync.conflict_copies if c.copy != kept.copy]
        return {"ok": True, "dropped": asdict(kept)}
    return {"ok": False, "error": f"unknown conflicts request {what!r}"}
