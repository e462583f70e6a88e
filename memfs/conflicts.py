"""The conflict copies a mount keeps: what each one is, and the daemon's side of
`memfs conflicts` (list, show, restore, drop).

The store wins every conflict and the losing local bytes go to `conflicts/` in the
store's cache directory (CacheDir.save_conflict). Next to each copy, `record` writes a
hidden `.<copy>.json` with what a person needs to decide: the path, when, the local
sha and size, and the remote version that won. Copies made before these records
existed are listed too, from their file names. A restore is a new local change made
through the mount by the CLI (historycli.py), so the next pass pushes it with a
precondition: it can lose again, and is then kept again.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import os
import re
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memfs.paths import local_name

if TYPE_CHECKING:
    from memfs.state import StoreState
    from memfs.sync import StoreSync

log = logging.getLogger("memfs.conflicts")

_STAMP = re.compile(r"(\d{8}T\d{6})-(?:\d+-)?(.*)")


@dataclass
class Kept:
    """One conflict copy. `id` is short and stable: 8 hex digits of store and name."""

    id: str
    memory_store_id: str
    path: str
    at: str
    copy: str
    size: int
    memory_id: str | None = None
    local_sha256: str | None = None
    remote_sha256: str | None = None
    remote_version: str | None = None  # the version that won, when known
    restored_at: str | None = None


def _meta(copy: Path) -> Path:
    return copy.with_name(f".{copy.name}.json")


def conflict_id(store_id: str, name: str) -> str:
    return hashlib.sha256(f"{store_id}/{name}".encode()).hexdigest()[:8]


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def record(store_id: str, copy: Path, *, path: str, memory_id: str | None,
           local_sha: str, size: int, remote_sha: str | None, remote_version: str) -> None:
    """Describe a copy just saved (fsync'd like the copy: a conflict is rare). Best
    effort: the copy itself is what must not be lost, and it is already on disk."""
    kept = Kept(conflict_id(store_id, copy.name), store_id, path, _now(), str(copy), size,
                memory_id, local_sha, remote_sha, remote_version or None)
    try:
        _write(kept)
    except OSError as e:
        log.warning("could not describe a conflict copy; it is listed by its name only "
                    "memory_store_id=%s path=%s copy=%s error=%s", store_id, path, copy, e)


def _write(kept: Kept) -> None:
    target = _meta(Path(kept.copy))
    tmp = target.with_suffix(".tmp")
    with open(tmp, "w") as f:
        json.dump(asdict(kept), f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, target)


def kept_copies(store_id: str, directory: Path) -> list[Kept]:
    """Every copy in a store's `conflicts/`, oldest first."""
    try:
        names = sorted(e.name for e in os.scandir(directory)
                       if not e.name.startswith(".") and e.is_file(follow_symlinks=False))
    except FileNotFoundError:
        return []
    found = []
    for name in names:
        copy = directory / name
        try:
            data = json.loads(_meta(copy).read_text())
            found.append(Kept(**data))
            continue
        except (OSError, ValueError, TypeError):
            pass
        # A copy from before records: its name says when and (flattened) where.
        match = _STAMP.fullmatch(name)
        stamp, flat = (match[1], match[2]) if match else ("", name)
        at = (f"{stamp[:4]}-{stamp[4:6]}-{stamp[6:8]}T{stamp[9:11]}:{stamp[11:13]}:"
              f"{stamp[13:15]}Z") if stamp else ""
        try:
            size = copy.stat().st_size
        except OSError:
            continue
        found.append(Kept(conflict_id(store_id, name), store_id,
                          "/" + flat.replace("__", "/"), at, str(copy), size))
    return found


# --------------------------------------------------------------------------- the daemon


def _local_path(mountpoint: str, single: bool, state: StoreState, path: str) -> str:
    """Where the mount shows store path `path` (long segments by their alias)."""
    parts = [local_name(p) for p in path.strip("/").split("/")]
    base = mountpoint if single else os.path.join(mountpoint, state.root.name)
    return os.path.join(base, *parts)


def _listing(syncs: list[StoreSync], mountpoint: str, single: bool
             ) -> list[tuple[StoreSync, Kept, str]]:
    out = []
    for sync in syncs:
        state = sync.state
        for kept in kept_copies(sync.store_id, state.cache.conflicts):
            out.append((sync, kept, _local_path(mountpoint, single, state, kept.path)))
    return out


def answer(request: dict[str, Any], syncs: list[StoreSync], mountpoint: str,
           single: bool) -> dict[str, Any]:
    """`{"op": "conflicts", "what": "list" | "get" | "restored" | "drop", "id": …}`."""
    listing = _listing(syncs, mountpoint, single)
    what = request.get("what", "list")
    if what == "list":
        return {"ok": True, "mountpoint": mountpoint,
                "conflicts": [{**asdict(k), "local_path": lp} for _, k, lp in listing]}
    wanted = str(request.get("id", ""))
    matches = [item for item in listing if wanted and item[1].id.startswith(wanted)]
    if not matches:
        return {"ok": False, "missing": True, "error": f"no conflict copy {wanted!r} here"}
    if len(matches) > 1:
        return {"ok": False, "error": f"{wanted!r} names {len(matches)} conflict copies; "
                "give more digits"}
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
            local.update(state=node.state_name(), sha=node.current_sha(),
                         dirty=node.state_name() in ("dirty", "refused"))
        return {"ok": True, "conflict": {**asdict(kept), "local_path": local_path},
                "content_b64": base64.b64encode(data).decode(), "local": local,
                "access": "read_only" if state.read_only else "read_write"}
    if what == "restored":
        kept.restored_at = _now()
        _write(kept)
        return {"ok": True, "conflict": asdict(kept)}
    if what == "drop":
        Path(kept.copy).unlink(missing_ok=True)
        _meta(Path(kept.copy)).unlink(missing_ok=True)
        node = state.node_at(kept.path)
        if node is not None and node.conflict == kept.copy:
            state.clear_conflict(node)  # status and user.memfs.* stop naming it
        sync.conflict_copies[:] = [c for c in sync.conflict_copies
                                   if c.copy != kept.copy]
        return {"ok": True, "dropped": asdict(kept)}
    return {"ok": False, "error": f"unknown conflicts request {what!r}"}
