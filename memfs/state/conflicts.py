"""The conflict copies a mount keeps: what each one is, and the daemon's side of
`memfs conflicts` (list, show, restore, drop).

The store wins every conflict and the losing local bytes go to `conflicts/` in the
store's cache directory (CacheDir.save_conflict). Next to each copy, `record` writes a
hidden `.<copy>.json` with what a person needs to decide: the path, when, the local
sha and size, and the remote version that won. `memfs conflicts` lists the records: a
copy whose record could not be written stays on disk and is named in the log. A
restore is a new local change made through the mount by the CLI (history_commands.py),
so the next pass pushes it with a precondition: it can lose again, and is then kept again.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path

log = logging.getLogger("memfs.conflicts")


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
            "could not describe a conflict copy; memfs conflicts cannot list it, the "
            "copy stays on disk "
            "memory_store_id=%s path=%s copy=%s error=%s",
            store_id,
            path,
            copy,
            e,
        )


def _write(kept: Kept) -> None:
    target = _meta(Path(kept.copy))
    tmp = target.with_suffix(".tmp")
    tmp.unlink(missing_ok=True)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    with open(os.open(tmp, flags, 0o600), "w") as f:
        json.dump(asdict(kept), f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, target)


def kept_copies(store_id: str, directory: Path) -> list[Kept]:
    """Every described copy in a store's `conflicts/`, oldest first."""
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
        try:
            found.append(Kept(**json.loads(_meta(directory / name).read_text())))
        except (OSError, ValueError, TypeError):
            continue  # no record (its writing failed and was logged): not listed
    return found
