"""The audit trail: every change a mount accepted, who made it, and what sync did with it.

One trail per store, in its cache directory: `audit.jsonl`, append-only JSON lines,
rotated at `max_bytes` to `audit.jsonl.1` … `.KEEP` (the oldest is dropped), so a store
keeps at most (KEEP + 1) × max_bytes of history. A line never holds file contents: a
change names its path, the operation and the process (pid, command name and uid from
the FUSE request context); a sync line names what became of the changes to a path
(pushed as version X, refused, lost a conflict, deleted in the store).

A change's line is written with one write(2) before the handler answers the kernel, so
a `kill -9` of the daemon loses no acknowledged change (the kernel holds the bytes);
like the journal's WAL it is not fsync'd, except when the agent calls fsync. Writes are
coalesced per open: the first write through a handle is a line, later ones are not.
`memfs audit` (`read_trail`, `outcomes`) reads the files directly and never asks the
daemon, so it works for a dead mount and after unmount (`--cache-dir`).
"""

from __future__ import annotations

import errno
import fnmatch
import json
import logging
import os
import re
import time
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

log = logging.getLogger("memfs.audit")

TRAIL_NAME = "audit.jsonl"
MAX_BYTES = 4 * 1024 * 1024
KEEP = 3
# Changes to these never reach the store, so no sync line will ever follow them.
LOCAL_OPS = frozenset({"mkdir", "rmdir"})


def now_iso() -> str:
    t = time.time()
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int(t % 1 * 1e6):06d}Z"


def command_name(pid: int) -> str:
    """The process's command name (`/proc/PID/comm`), or '?' once it is gone."""
    if pid <= 0:
        return "?"
    try:  # os.open, not open(): 3 syscalls instead of 7 (no fstat, isatty, lseek)
        fd = os.open(f"/proc/{pid}/comm", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return "?"
    try:
        raw = os.read(fd, 64)
    except OSError:
        return "?"
    finally:
        os.close(fd)
    return raw.decode("utf-8", "replace").strip() or "?"


class AuditLog:
    """One store's trail file: append a line, rotate by size."""

    def __init__(
        self, directory: Path, store_id: str, *, max_bytes: int = MAX_BYTES, keep: int = KEEP
    ) -> None:
        self.path = directory / TRAIL_NAME
        self.store_id = store_id
        self.max_bytes = max_bytes
        self.keep = keep
        self._fd = -1
        self._size = 0
        self._failing = False
        self._open()

    def _open(self) -> None:
        # Never through a link planted in the cache directory (a root daemon appending
        # to a file of someone else's choice).
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW
        self._fd = os.open(self.path, flags, 0o600)
        self._size = os.fstat(self._fd).st_size

    def append(self, record: dict[str, Any]) -> None:
        """One line, one write(2). A failing cache disk must not fail the system call
        whose change it records: it is logged (once until it works again) and dropped."""
        data = (
            json.dumps({"at": now_iso(), "store": self.store_id, **record}, separators=(",", ":"))
            + "\n"
        ).encode()
        try:
            if self._size + len(data) > self.max_bytes and self._size > 0:
                self._rotate()
            view = memoryview(data)
            while view:
                view = view[os.write(self._fd, view) :]
            self._size += len(data)
            self._failing = False
        except OSError as e:
            if not self._failing:
                self._failing = True
                log.warning(
                    "audit trail write failed; changes go unrecorded until it "
                    "works again memory_store_id=%s trail=%s error=%s",
                    self.store_id,
                    self.path,
                    errno.errorcode.get(e.errno or 0, e),
                )

    def _rotate(self) -> None:
        os.close(self._fd)
        self._fd = -1
        for n in range(self.keep - 1, 0, -1):
            older = self.path.with_name(f"{TRAIL_NAME}.{n}")
            if older.exists():
                os.replace(older, self.path.with_name(f"{TRAIL_NAME}.{n + 1}"))
        if self.keep > 0:
            os.replace(self.path, self.path.with_name(f"{TRAIL_NAME}.1"))
        else:
            self.path.unlink(missing_ok=True)
        self._open()

    def sync_to_disk(self) -> None:
        if self._fd >= 0:
            try:
                os.fsync(self._fd)
            except OSError:
                pass

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


class Trail:
    """A mount's trails by store id, for the hooks in fs.py, sync.py and daemon.py.
    Without a log for a store (tests, a store not opened yet) every call is a no-op."""

    def __init__(self) -> None:
        self.logs: dict[str, AuditLog] = {}

    def open(self, store_id: str, directory: Path) -> None:
        try:
            self.logs[store_id] = AuditLog(directory, store_id)
        except OSError as e:
            log.warning(
                "cannot open the audit trail; this mount records no changes "
                "memory_store_id=%s dir=%s error=%s",
                store_id,
                directory,
                e,
            )

    def change(
        self, store_id: str, op: str, path: str, pid: int, uid: int, comm: str = "", **extra: Any
    ) -> None:
        trail = self.logs.get(store_id)
        if trail is not None:
            trail.append(
                {
                    "kind": "change",
                    "op": op,
                    "path": path,
                    "pid": pid,
                    "comm": comm or command_name(pid),
                    "uid": uid,
                    **extra,
                }
            )

    def outcome(self, store_id: str, op: str, path: str | None, **extra: Any) -> None:
        trail = self.logs.get(store_id)
        if trail is not None:
            trail.append(
                {
                    "kind": "sync",
                    "op": op,
                    "path": path,
                    **{k: v for k, v in extra.items() if v is not None},
                }
            )

    def mount(self, op: str, places: dict[str, str]) -> None:
        """`places`: where each store shows in the mount (how `memfs audit` turns store
        paths back into the paths a person typed)."""
        for store_id, trail in self.logs.items():
            trail.append(
                {"kind": "mount", "op": op, "pid": os.getpid(), "mount_path": places.get(store_id)}
            )

    def sync_to_disk(self, store_id: str) -> None:
        trail = self.logs.get(store_id)
        if trail is not None:
            trail.sync_to_disk()

    def close(self) -> None:
        for trail in self.logs.values():
            trail.close()
        self.logs.clear()


# --------------------------------------------------------------------------- reading


def trail_files(directory: Path) -> list[Path]:
    """A store's trail files, oldest first."""
    rotated = []
    for p in directory.glob(f"{TRAIL_NAME}.*"):
        suffix = p.name[len(TRAIL_NAME) + 1 :]
        if suffix.isdigit():
            rotated.append((int(suffix), p))
    files = [p for _, p in sorted(rotated, reverse=True)]
    current = directory / TRAIL_NAME
    return files + ([current] if current.exists() else [])


def read_trail(directories: Iterable[Path]) -> list[dict[str, Any]]:
    """Every record of these stores' trails, in time order (a torn last line, left by
    a killed daemon mid-write, is skipped)."""
    records: list[dict[str, Any]] = []
    for directory in directories:
        for path in trail_files(directory):
            try:
                lines = path.read_bytes().splitlines()
            except OSError:
                continue
            for line in lines:
                try:
                    record = json.loads(line)
                except ValueError:
                    continue
                if isinstance(record, dict) and isinstance(record.get("at"), str):
                    records.append(record)
    records.sort(key=lambda r: str(r["at"]))
    return records


def _under(path: str | None, prefix: str) -> bool:
    return path is not None and (path == prefix or path.startswith(prefix.rstrip("/") + "/"))


def outcomes(records: list[dict[str, Any]], excludes: Iterable[str] = ()) -> list[dict[str, Any]]:
    """`records`, each change with `outcome`: what the first later sync line for its path says
    became of it. A rename carries a path's waiting changes to the new path (an atomic
    save's temporary file becomes the saved file); changes still waiting at the end
    under an excluded name are local only, the others are not pushed yet."""
    patterns = tuple(excludes)
    waiting: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in records:
        store, path = str(r.get("store")), r.get("path")
        if r.get("kind") == "change" and isinstance(path, str):
            r["outcome"] = None
            if r.get("op") in LOCAL_OPS:
                r["outcome"] = {"op": "local", "why": "directories are not stored"}
                continue
            if r.get("op") == "unlink":
                for earlier in waiting.pop((store, path), []):
                    earlier["outcome"] = {"op": "removed", "why": "removed before it was pushed"}
            if r.get("op") == "rename" and isinstance(r.get("to"), str):
                _carry(waiting, store, path, str(r["to"]))
                path = str(r["to"])
            waiting.setdefault((store, path), []).append(r)
        elif r.get("kind") == "sync" and isinstance(path, str):
            result = {k: v for k, v in r.items() if k not in ("kind", "store")}
            for change in waiting.pop((store, path), []):
                change["outcome"] = result
    for (_, path), changes in waiting.items():
        name = path.rsplit("/", 1)[-1]
        if any(fnmatch.fnmatchcase(name, p) for p in patterns):
            for change in changes:
                change["outcome"] = {"op": "local", "why": "excluded from sync"}
    return records


def _carry(
    waiting: dict[tuple[str, str], list[dict[str, Any]]], store: str, old: str, new: str
) -> None:
    for key in [k for k in waiting if k[0] == store and _under(k[1], old)]:
        moved = waiting.pop(key)
        target = (store, new + key[1][len(old) :])
        waiting.setdefault(target, []).extend(moved)


_RELATIVE = re.compile(r"(\d+(?:\.\d+)?)\s*([smhdw])")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_since(text: str, now: datetime | None = None) -> str:
    """'10m', '2h', '1d' (ago) or an ISO date/time -> the ISO stamp records compare to."""
    now = now or datetime.now(UTC)
    match = _RELATIVE.fullmatch(text.strip())
    if match:
        at = now - timedelta(seconds=float(match[1]) * _UNITS[match[2]])
    else:
        try:
            at = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
        except ValueError:
            raise ValueError(
                f"--since: not a time: {text!r} (e.g. 30m, 2h, 1d or 2026-01-31T12:00)"
            ) from None
        if at.tzinfo is None:
            at = at.astimezone()  # a local time, as a person types it
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def place(records: list[dict[str, Any]]) -> None:
    """Give each change `local_path` (and `local_to`): its path in the mount, from the
    latest `mounted` line of its store before it."""
    where: dict[str, str] = {}
    for r in records:
        store = str(r.get("store"))
        if r.get("kind") == "mount" and isinstance(r.get("mount_path"), str):
            where[store] = str(r["mount_path"]).rstrip("/")
        elif r.get("kind") == "change" and store in where:
            r["local_path"] = where[store] + str(r.get("path"))
            if isinstance(r.get("to"), str):
                r["local_to"] = where[store] + str(r["to"])
            outcome = r.get("outcome")
            if isinstance(outcome, dict) and isinstance(outcome.get("path"), str):
                outcome["local_path"] = where[store] + outcome["path"]


def select(
    records: list[dict[str, Any]], *, since: str | None = None, paths: tuple[str, ...] = ()
) -> Iterator[dict[str, Any]]:
    """Records at or after `since`; with `paths` (paths in the mount, or store paths),
    only the changes to one of them or below it, or that became one of them (the
    temporary file of an atomic save, a file renamed there before it was pushed)."""
    for r in records:
        if since is not None and str(r["at"]) < since:
            continue
        if paths:
            outcome = r.get("outcome")
            if not isinstance(outcome, dict):
                outcome = {}
            values = [r.get(k) for k in ("local_path", "local_to", "path", "to")]
            values += [outcome.get(k) for k in ("local_path", "path")]
            if not any(_under(v, p) for p in paths for v in values):
                continue
        yield r
