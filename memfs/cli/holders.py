"""What keeps a mount busy: processes with a working directory, root, open file or
mapped file inside it, and mounts nested inside it.

Read from /proc only (`readlink` of /proc/PID/{cwd,root,fd/*} and /proc/PID/maps give
path strings without touching the mount), so a scan never waits on the daemon.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from memfs.control.recovery import unescape_mount_field


@dataclass(frozen=True)
class Holder:
    pid: int
    command: str
    what: str  # "working directory", "root directory", "open file", "mapped file"
    path: str

    def __str__(self) -> str:
        return f"pid {self.pid} ({self.command}): {self.what} {self.path}"


def _inside(path: str, mountpoint: str) -> bool:
    path = path.removesuffix(" (deleted)")
    return path == mountpoint or path.startswith(mountpoint.rstrip("/") + "/")


def _link(path: str) -> str | None:
    try:
        return os.readlink(path)
    except OSError:
        return None


def holders(mountpoint: str, *, ignore: frozenset[int] = frozenset()) -> list[Holder]:
    """Every process (other than this one and `ignore`) using something inside."""
    found: list[Holder] = []
    skip = {os.getpid(), *ignore}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) not in skip:
            found += _uses(int(entry), mountpoint)
    return found


def _uses(pid: int, mountpoint: str) -> list[Holder]:
    base = f"/proc/{pid}"
    try:
        with open(f"{base}/comm") as f:
            command = f.read().strip()
    except OSError:
        return []  # gone meanwhile, or not ours to see
    paths: list[tuple[str, str | None]] = [("working directory", _link(f"{base}/cwd"))]
    root = _link(f"{base}/root")
    if root != "/":
        paths.append(("root directory", root))
    try:
        fds = os.listdir(f"{base}/fd")
    except OSError:
        fds = []
    paths += [("open file", _link(f"{base}/fd/{fd}")) for fd in fds]
    try:
        with open(f"{base}/maps") as f:
            for line in f:
                parts = line.split(maxsplit=5)
                if len(parts) == 6 and parts[5].startswith("/"):
                    paths.append(("mapped file", parts[5].rstrip("\n")))
    except OSError:
        pass
    uses: dict[tuple[str, str], Holder] = {}
    for what, path in paths:
        if path is not None and _inside(path, mountpoint):
            clean = path.removesuffix(" (deleted)")
            uses.setdefault((what, clean), Holder(pid, command, what, clean))
    return list(uses.values())


def nested_mounts(mountpoint: str) -> list[tuple[str, str]]:
    """(mount point, filesystem type) of every mount strictly inside, deepest first."""
    inside: list[tuple[str, str]] = []
    prefix = mountpoint.rstrip("/") + "/"
    try:
        with open("/proc/self/mounts") as f:
            for line in f:
                parts = line.split()
                if len(parts) > 2:
                    mp = unescape_mount_field(parts[1])
                    if mp.startswith(prefix):
                        inside.append((mp, parts[2]))
    except OSError:
        pass
    return sorted(set(inside), key=lambda m: (-m[0].count("/"), m[0]))
