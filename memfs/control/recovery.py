"""A mount whose daemon is gone: what is left of it and the command that brings it back.

A killed daemon (SIGKILL, OOM) leaves its mount dead (every access answers ENOTCONN)
and its registry entry behind; the entry names the cache directories and the command
that started it, so `memfs status` can say what the journal still holds and how to
recover. Nothing here touches the dead mount itself except `statvfs` (which fails at
once) and /proc/self/mounts.
"""

from __future__ import annotations

import errno
import fnmatch
import os
import shlex
import sqlite3
from pathlib import Path
from typing import Any

from memfs.logs import plural

# A row the next start still has to push: changed, new, renamed, or an upload whose
# answer may have been lost. Tombstones (path NULL) are pending deletes. A refused row
# (content the store refused, or not UTF-8) waits for new content instead: listed apart.
_UNPUSHED = """
SELECT path, base_path, memory_id, refused_why FROM entries
WHERE kind = 'file' AND (
    (path IS NOT NULL AND (dirty = 1 OR memory_id IS NULL OR sent_sha IS NOT NULL
                           OR sent_path IS NOT NULL OR base_path IS NOT path
                           OR refused_sha IS NOT NULL))
    OR (path IS NULL AND memory_id IS NOT NULL))
"""


def fuse_mounts() -> dict[str, str]:
    """Mount point -> filesystem type of every FUSE mount this process can see."""
    found: dict[str, str] = {}
    try:
        with open("/proc/self/mounts") as f:
            for line in f:
                parts = line.split()
                if len(parts) > 2 and parts[2].startswith("fuse"):
                    found[unescape_mount_field(parts[1])] = parts[2]
    except OSError:
        pass
    return found


def fuse_mount_count(mountpoint: str) -> int:
    """How many FUSE mounts are stacked at `mountpoint` (a recovery mounts over the dead
    one a killed daemon left)."""
    count = 0
    try:
        with open("/proc/self/mounts") as f:
            for line in f:
                parts = line.split()
                if len(parts) > 2 and parts[2].startswith("fuse"):
                    count += unescape_mount_field(parts[1]) == mountpoint
    except OSError:
        pass
    return count


def unescape_mount_field(field: str) -> str:
    """/proc/self/mounts escapes space, tab, newline and backslash as octal."""
    for code, char in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
        field = field.replace(code, char)
    return field


def is_dead_mount(mountpoint: str) -> bool:
    """A FUSE mount whose daemon is gone: listed in the mount table, `statvfs` fails
    with ENOTCONN (the kernel may still answer `stat` from its cache)."""
    if mountpoint not in fuse_mounts():
        return False
    try:
        os.statvfs(mountpoint)
    except OSError as e:
        return e.errno == errno.ENOTCONN
    return False


def dead_mount_at(path: str) -> str | None:
    """The dead FUSE mount that contains `path` (the deepest), if any."""
    real = os.path.abspath(path)
    best: str | None = None
    for mp in fuse_mounts():
        if (real == mp or real.startswith(mp.rstrip("/") + "/")) and (
            best is None or len(mp) > len(best)
        ):
            best = mp
    return best if best is not None and is_dead_mount(best) else None


def unpushed(cache_dir: str, excludes: list[str]) -> tuple[list[str], list[dict[str, str]]] | None:
    """Store paths the journal still has to push (deletes as `-/path`), and the files
    the store refused (`path`, `why`); None if the journal cannot be read. Read-only:
    the dead daemon's lock no longer matters."""
    db_path = Path(cache_dir) / "journal.sqlite"
    if not db_path.exists():
        return None
    try:
        db = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True, timeout=2)
    except sqlite3.Error:
        return None
    try:
        rows = db.execute(_UNPUSHED).fetchall()
    except sqlite3.Error:
        return None
    finally:
        db.close()

    def excluded(p: str | None) -> bool:
        return p is not None and any(fnmatch.fnmatchcase(p.rsplit("/", 1)[-1], x) for x in excludes)

    paths: list[str] = []
    refused: list[dict[str, str]] = []
    for path, base_path, memory_id, why in rows:
        if path is None:
            paths.append(f"-{base_path}")
        elif excluded(path) and (memory_id is None or not excluded(base_path)):
            continue  # local-only; an excluded name the store has is a memory (engine rule)
        elif why is not None:
            refused.append({"path": path, "why": why})
        else:
            paths.append(path)
    return sorted(paths), sorted(refused, key=lambda r: r["path"])


def describe_dead(info: dict[str, Any] | None, mountpoint: str) -> dict[str, Any]:
    """The `status` answer for a dead mount: what is left and the recovery command."""
    answer: dict[str, Any] = {
        "ok": False,
        "state": "dead",
        "mountpoint": mountpoint,
        "pid": None,
        "unpushed": {},
        "refused": {},
        "recover": None,
    }
    clear = f"fusermount3 -u -z {shlex.quote(mountpoint)}"
    if info is None:
        answer["error"] = (
            "not in this user's registry of mounts (another user, or "
            "another XDG_RUNTIME_DIR): clear it, then run the memfs "
            "command that started it again"
        )
        answer["unpushed"] = answer["refused"] = None
        answer["recover"] = clear
        return answer
    answer["pid"] = info.get("pid")
    excludes = [str(p) for p in info.get("excludes") or []]
    for store_id, cache_dir in (info.get("caches") or {}).items():
        left = unpushed(str(cache_dir), excludes)
        if left is not None:
            answer["unpushed"][store_id] = left[0]
            if left[1]:
                answer["refused"][store_id] = left[1]
    # The start command pushes the journal first, then mounts over the dead mount.
    answer["recover"] = info.get("restart") or clear
    return answer


def dead_summary(answer: dict[str, Any]) -> str:
    """The lines `status` prints for a dead mount (stderr)."""
    mp = answer["mountpoint"]
    pid = f" (pid {answer['pid']})" if answer.get("pid") else ""
    lines = [
        f"memfs: the mount at {mp} is dead: its daemon{pid} is gone, and every "
        "access answers 'Transport endpoint is not connected' (ENOTCONN)"
    ]
    if answer["unpushed"] is None:
        lines.append(f"memfs: {answer['error']}")
        lines.append(f"memfs: recover with: {answer['recover']}")
        return "\n".join(lines)
    counts = {k: len(v) for k, v in answer["unpushed"].items()}
    total = sum(counts.values())
    if total:
        files = "1 changed file is" if total == 1 else f"{total} changed files are"
        lines.append(
            f"memfs: {files} in the journal, not yet pushed "
            f"({', '.join(f'{k}: {n}' for k, n in counts.items())}); nothing is "
            "lost, the next start pushes them"
        )
    elif answer["unpushed"]:
        lines.append("memfs: the journal holds no unpushed changes")
    else:
        lines.append("memfs: the journal could not be read; it is kept as it is")
    refused = [f for found in answer.get("refused", {}).values() for f in found]
    if refused:
        named = ", ".join(f"{f['path']} ({f['why']})" for f in refused[:10])
        more = f" and {len(refused) - 10} more" if len(refused) > 10 else ""
        lines.append(
            f"memfs: {plural(len(refused), 'file')} the store refused, only in the cache: "
            f"the next start does not push them until their content changes: {named}{more}"
        )
    lines.append(f"memfs: recover with: {answer['recover']}")
    return "\n".join(lines)
