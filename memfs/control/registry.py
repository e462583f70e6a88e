"""Where live mounts are registered: a per-user runtime directory of sockets and entries.

Each daemon registers itself as `<key>.sock` (its control socket) and `<key>.json`
(what the mount is: mountpoint, pid, socket, stores, caches, restart command); `<key>` is
the first 20 hex digits of sha256(real mount point). The directory is
`$XDG_RUNTIME_DIR/memfs`, else `/tmp/memfs-<uid>`. Another user can pre-create that path
(in /tmp anyone can): then memfs uses `~/.local/state/memfs/run` instead, for the daemon
and the CLI alike, and says so once. A directory is used only if it is a real directory
of this user that nobody else can write or read.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import stat
from pathlib import Path
from typing import Any

from memfs.errors import ConfigError

log = logging.getLogger("memfs.control")

_warned: set[str] = set()


def _private(path: Path) -> str | None:
    """Why `path` may not serve as a private directory (created if missing), or None."""
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
    except FileExistsError:
        pass  # a file or a dangling link: the lstat below says which
    except OSError as e:
        return f"cannot create it: {e.strerror}"
    try:
        st = path.lstat()
    except OSError as e:
        return f"cannot stat it: {e.strerror}"
    if stat.S_ISLNK(st.st_mode):
        return "it is a symbolic link"
    if not stat.S_ISDIR(st.st_mode):
        return "it is not a directory"
    if st.st_uid != os.getuid():
        return f"it belongs to uid {st.st_uid}"
    if st.st_mode & 0o077:
        return f"its mode is {stat.S_IMODE(st.st_mode):04o}"
    return None


def fallback_dir() -> Path:
    """The runtime directory used when the usual one is not private."""
    return Path.home() / ".local" / "state" / "memfs" / "run"


def runtime_dir() -> Path:
    """The per-user registry of live mounts; never one someone else could plant files in."""
    base = os.environ.get("XDG_RUNTIME_DIR")
    usual = Path(base) / "memfs" if base else Path(f"/tmp/memfs-{os.getuid()}")
    why = _private(usual)
    if why is None:
        return usual
    fallback = fallback_dir()
    why_not = _private(fallback)
    if why_not is not None:
        raise ConfigError(
            f"the runtime directory {usual} is not a private directory of this user "
            f"({why}), nor is {fallback} ({why_not}); remove one or set XDG_RUNTIME_DIR"
        )
    if str(usual) not in _warned:
        _warned.add(str(usual))
        log.warning(
            "runtime directory not private; using the fallback path=%s reason=%s fallback=%s",
            usual,
            why,
            fallback,
        )
    return fallback


def mount_key(real_mountpoint: str) -> str:
    return hashlib.sha256(real_mountpoint.encode()).hexdigest()[:20]


# sun_path holds 108 bytes with its terminating NUL.
MAX_SOCKET_PATH = 107


def socket_path(real_mountpoint: str) -> Path:
    path = runtime_dir() / f"{mount_key(real_mountpoint)}.sock"
    if len(os.fsencode(path)) > MAX_SOCKET_PATH:
        raise ConfigError(
            f"the control socket path {path} is longer than the {MAX_SOCKET_PATH} bytes "
            "a Unix socket allows; set XDG_RUNTIME_DIR to a shorter directory"
        )
    return path


def publish(info: dict[str, Any]) -> Path:
    """Write a mount's entry atomically (next to its socket); returns its path."""
    path = Path(str(info["socket"])).with_suffix(".json")
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(info))
    tmp.replace(path)
    return path


def registered_mounts() -> list[dict[str, Any]]:
    """Every registered mount, `alive` or not. The entry of a killed daemon is kept
    while its dead mount is still there (it explains it); other stale ones are removed."""
    from memfs.control.recovery import is_dead_mount

    found = []
    for info_path in sorted(runtime_dir().glob("*.json")):
        try:
            info = json.loads(info_path.read_text())
            if not isinstance(info, dict):
                continue
            pid = int(info.get("pid", 0))
        except (OSError, ValueError, TypeError, AttributeError):
            continue
        info["alive"] = pid > 0 and pid_alive(pid)
        if not info["alive"] and not is_dead_mount(str(info.get("mountpoint", ""))):
            _remove_stale(info_path, pid, str(info.get("socket", "")))
            continue
        found.append(info)
    return found


def _remove_stale(info_path: Path, pid: int, sock: str) -> None:
    """Remove a stale entry and its socket, unless a new daemon at the same mount point
    took it over meanwhile (a recovery does, right before it mounts over the dead one)."""
    try:
        if int(json.loads(info_path.read_text()).get("pid", 0)) != pid:
            return
    except (OSError, ValueError, TypeError, AttributeError):
        return
    info_path.unlink(missing_ok=True)
    Path(sock).unlink(missing_ok=True)


def live_mounts() -> list[dict[str, Any]]:
    """Every registered mount whose daemon is still running."""
    return [info for info in registered_mounts() if info["alive"]]


def _containing(path: str, infos: list[dict[str, Any]]) -> dict[str, Any] | None:
    # The path as written first: resolving it stats the mount itself, which hangs while
    # its daemon is stopped (SIGSTOP) or wedged. Links are resolved only if that fails.
    return _deepest(os.path.abspath(path), infos) or _deepest(os.path.realpath(path), infos)


def _deepest(real: str, infos: list[dict[str, Any]]) -> dict[str, Any] | None:
    best: dict[str, Any] | None = None
    for info in infos:
        mp = str(info["mountpoint"])
        if (real == mp or real.startswith(mp.rstrip("/") + "/")) and (
            best is None or len(mp) > len(str(best["mountpoint"]))
        ):
            best = info
    return best


def find_mount(path: str) -> dict[str, Any] | None:
    """The live mount that contains `path` (the deepest one)."""
    return _containing(path, live_mounts())


def session_mounts(path: str, *, alive: bool = True) -> list[dict[str, Any]]:
    """The live (or dead) mounts of the session whose root is `path`, one per store."""
    roots = {os.path.abspath(path), os.path.realpath(path)}
    return [i for i in registered_mounts() if i["alive"] == alive and i.get("session") in roots]


def find_dead_mount(path: str) -> dict[str, Any] | None:
    """The registered mount containing `path` whose daemon is gone."""
    return _containing(path, [i for i in registered_mounts() if not i["alive"]])


def _proc_state(pid: int) -> str | None:
    """The one-letter state of `pid` in /proc (R, S, T, Z…), None if unreadable."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


def pid_alive(pid: int) -> bool:
    """Whether `pid` is a running process (a zombie waiting to be reaped is not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return _proc_state(pid) not in ("Z", "X")


def pid_stopped(pid: int) -> bool:
    """Whether `pid` is stopped (SIGSTOP, a debugger): it cannot answer until resumed."""
    return _proc_state(pid) in ("T", "t")
