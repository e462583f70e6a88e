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

import hashlib
import json
import logging
import os
import re
import time
from dataclasses import asdict, dataclass
from pathlib import Path

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


def record(
    store_id: str,
    copy: Path,
    *,
    path: str,
    memory_id: str | None,
    local_sha: str,
    size: int,
    remote_sha: str | None,
    remote_version: str,
) -> None:
    """Describe a copy just saved (fsync'd like the copy: a conflict is rare). Best
    effort: the copy itself is what must not be lost, and it is already on disk."""
    kept = Kept(
        conflict_id(store_id, copy.name),
        store_id,
        path,
        _now(),
        str(copy),
        size,
        memory_id,
        local_sha,
        remote_sha,
        remote_version or None,
    )
    try:
        _write(kept)
    except OSError as e:
        log.warning(
            "could not describe a conflict copy; it is listed by its name only "
            "memory_store_id=%s path=%s copy=%s error=%s",
            store_id,
            path,
            copy,
            e,
        )


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
        names = sorted(
            e.name
            for e in os.scandir(directory)
            if not e.name.startswith(".") and e.is_file(follow_symlinks=False)
        )
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
        at = (
            (f"{stamp[:4]}-{stamp[4:6]}-{stamp[6:8]}T{stamp[9:11]}:{stamp[11:13]}:{stamp[13:15]}Z")
            if stamp
            else ""
        )
        try:
            size = copy.stat().st_size
        except OSError:
            continue
        found.append(
            Kept(
                conflict_id(store_id, name),
                store_id,
                "/" + flat.replace("__", "/"),
                at,
                str(copy),
                size,
            )
        )
    return found
