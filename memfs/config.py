"""Data every layer shares: exit codes, deletion modes, excludes, interval rules, and
the specs of a mount and its store.

The exit codes are part of the command-line contract (docs/operations.md lists them):
scripts and service managers branch on them, so a code never changes meaning.
"""

from __future__ import annotations

import math
import os
import signal
import stat
from dataclasses import dataclass, field
from enum import IntEnum
from pathlib import Path
from typing import Literal

from memfs.errors import ConfigError


class ExitCode(IntEnum):
    OK = 0
    FAILED = 1  # the operation ran and failed
    USAGE = 2  # bad usage or configuration: fix the command line or environment
    UNREACHABLE = 3  # the store or server could not be reached
    INTERRUPTED = 130  # Ctrl-C (SIGINT), SIGTERM or SIGHUP before the command finished


# What stops every foreground process memfs runs (mount, session, serve, memfs-worker)
# cleanly, with its final sync and unmount: Ctrl-C, a service manager's stop, and a
# closed terminal or ssh session (SIGHUP, which libfuse's own handlers treat as SIGTERM).
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


# How a local delete reaches the store (`--deletions`).
DeletionMode = Literal["enabled", "log_only", "disabled"]
# Editor temporaries and other names that are never memories (local-only).
DEFAULT_EXCLUDES = (
    ".*.swp",
    ".*.swo",
    ".*.swx",
    "*~",
    ".#*",
    "#*#",
    "4913",
    ".nfs*",
    ".fuse_hidden*",
)
MIN_INTERVAL = 5.0
# Probes sooner than the interval a mount may make per store-hour (memfs/sync/listen.py).
DEFAULT_PROBE_BUDGET = 1200
# Microseconds the FUSE loop reads on after an answer before it sleeps (patched pyfuse3;
# docs/performance.md, "Round trips").
DEFAULT_READ_SPIN_US = 50
MAX_READ_SPIN_US = 10_000


def check_interval(value: float) -> float:
    """A sync interval the flags may set: at least MIN_INTERVAL seconds, not NaN."""
    if math.isnan(value) or value < MIN_INTERVAL:
        raise ValueError(f"the sync interval must be at least {MIN_INTERVAL:g} seconds")
    return value


@dataclass
class StoreSpec:
    store_id: str
    read_only: bool = False
    dir_name: str | None = None  # the store's directory under a session root
    name: str = ""
    instructions: str = ""


@dataclass(frozen=True)
class MountDir:
    """A session store's directory as the session made it (memfs/mount/storedir.py): the
    root's fd, the name in it, the directory's own fd (open in the store's daemon, which
    mounts through it) and its identity (st_dev, st_ino), which removal checks."""

    root_fd: int
    name: str
    fd: int
    dev: int
    ino: int


@dataclass
class MountConfig:
    mountpoint: str
    store: StoreSpec  # the one store a mount (a daemon) serves
    # The root of the `memfs session` this mount serves one store of (its mount point
    # is `<root>/<mount_path>`, made for it and removed after it); None: `memfs mount`.
    session_root: str | None = None
    mount_dir: MountDir | None = None  # a session's store: made and held by the session
    cache_dir: Path | None = None
    interval: float = 15.0
    deletions: DeletionMode = "enabled"
    excludes: tuple[str, ...] = DEFAULT_EXCLUDES
    flush_timeout: float = 30.0
    cache_max_bytes: int | None = None  # --cache-max-size: clean contents per store
    content_timeout: float = 30.0
    api_url: str | None = None
    allow_other: bool = False
    uid: int | None = None  # --uid: who the files appear to belong to (None: the user)
    gid: int | None = None  # --gid
    umask: int | None = None  # --umask: the permission bits shown (None: each file's mode)
    log_file: str | None = None  # None: stderr in the foreground, a file with --daemon
    restart: str = ""  # the command that starts this mount again (dead-mount recovery)
    metrics_addr: str | None = None  # --metrics-addr HOST:PORT (memfs/metrics.py)
    zero_message_opens: bool = True  # --open-requests turns off (docs/reliability.md §3)
    xattrs: bool = True  # --no-xattrs: xattr requests answer ENOSYS (docs/performance.md)
    deletes_when_asked: bool = False  # --deletes-when-asked (the worker adapter's sessions)
    push_soon: bool = True  # --no-push-soon: changes wait for the interval or `memfs sync`
    probe_budget: int = DEFAULT_PROBE_BUDGET  # --probe-budget (docs/sync.md)
    watch: bool = True  # --no-watch: never use memfs serve's watch, probe instead
    read_spin_us: int = DEFAULT_READ_SPIN_US  # --read-spin-us (docs/performance.md)
    environ: dict[str, str] = field(default_factory=lambda: dict(os.environ))


def default_cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    return Path(base) / "memfs"


def private_dir(path: Path, what: str) -> Path:
    """`path` as a directory only this user can change, created 0700 when missing.

    A root daemon writes logs, the audit trail and memory contents here: a directory
    another user owns or can write, or a symlink, would let them choose where those
    writes land (or get the chmod). Refused with one line naming the directory; the
    final component is never followed (mkdir, O_NOFOLLOW), its mode set through the fd.
    """
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ConfigError(f"cannot create the {what} {path}: {e.strerror}") from None
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    except OSError as e:
        raise ConfigError(f"cannot create the {what} {path}: {e.strerror}") from None
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as e:
        reason = "a symlink" if os.path.islink(path) else f"not usable ({e.strerror})"
        raise ConfigError(f"the {what} {path} is {reason}; remove it or choose another") from None
    try:
        st = os.fstat(fd)
        problem = _unsafe(st)
        if problem:
            raise ConfigError(f"the {what} {path} is {problem}; remove it or choose another")
        if stat.S_IMODE(st.st_mode) != 0o700:
            os.fchmod(fd, 0o700)  # unpushed bytes and pulled contents: the user's alone
    finally:
        os.close(fd)
    return path


def read_private_file(path: str, what: str) -> str:
    """The text of `path` (at most 64 KiB), or a ConfigError.

    Read only from a regular file, not through a symlink, owned by this user (or by root,
    as systemd's `LoadCredential=` hands them out) and closed to group and others: a
    file another user can read leaks what it holds as `ps` would, one they own or can
    write chooses it (a credential, or the server a root daemon talks to).
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as e:
        reason = "a symlink" if os.path.islink(path) else f"not readable ({e.strerror})"
        raise ConfigError(f"the {what} {path} is {reason}") from None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        mode = stat.S_IMODE(st.st_mode)
        if not stat.S_ISREG(st.st_mode):
            raise ConfigError(f"the {what} {path} is not a regular file")
        if st.st_uid not in (os.geteuid(), 0):
            raise ConfigError(
                f"the {what} {path} is owned by uid {st.st_uid}, not by this user "
                f"(uid {os.geteuid()}) or root"
            )
        if mode & 0o077:
            raise ConfigError(
                f"the {what} {path} is open to other users (mode {mode:o}); chmod 600 it"
            )
        return f.read(65536).decode("utf-8", "replace")


def read_secret_file(path: str, what: str) -> str:
    """The secret in a private file (`read_private_file`), whitespace stripped."""
    secret = read_private_file(path, what).strip()
    if not secret:
        raise ConfigError(f"the {what} {path} is empty")
    return secret


def _unsafe(st: os.stat_result) -> str | None:
    if st.st_uid != os.geteuid():
        return f"owned by uid {st.st_uid}, not by this user (uid {os.geteuid()})"
    if st.st_mode & 0o022:
        return f"writable by other users (mode {stat.S_IMODE(st.st_mode):o})"
    return None
