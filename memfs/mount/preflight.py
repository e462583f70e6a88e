"""What is checked before a mount starts: FUSE, the mount point, the store.

Each refusal is a `StartError` with the exit code a user can act on; a dead FUSE mount
a killed daemon left at the mount point (ENOTCONN) is kept until the new mount is ready
(`overmount.py`).
"""

from __future__ import annotations

import errno
import logging
import os
import shutil
import stat
import subprocess
from pathlib import Path

from memfs.config import ExitCode
from memfs.control.recovery import is_dead_mount
from memfs.errors import NotFound, StartError, StoreAuthError, StoreUnavailable, missing_store
from memfs.store.client import StoreClient, StoreInfo
from memfs.store.transport import RetryPolicy

log = logging.getLogger("memfs.daemon")


def check_fuse() -> None:
    if not os.path.exists("/dev/fuse"):
        raise StartError(
            "FUSE is unavailable: /dev/fuse does not exist (load the fuse "
            "module, or give the container --device /dev/fuse)",
            2,
        )
    if not os.access("/dev/fuse", os.R_OK | os.W_OK):
        raise StartError(
            "FUSE is unavailable: /dev/fuse is not readable and writable by this user", 2
        )
    if os.getuid() != 0 and shutil.which("fusermount3") is None:
        raise StartError(
            "FUSE is unavailable: fusermount3 is not installed (apt-get install fuse3)", 2
        )


def _dead_memfs_mount(path: str) -> bool:
    try:
        with open("/proc/self/mounts") as f:
            for line in f:
                parts = line.split()
                if len(parts) > 2 and parts[1] == path and parts[2].startswith("fuse"):
                    return True
    except OSError:
        pass
    return False


def clear_dead_mount(path: str) -> bool:
    """Clear a dead FUSE mount (its daemon was killed) at `path`; True if one was cleared.

    The kernel may still answer `stat` from its attribute cache, so ask `statvfs`, which
    always reaches the (gone) daemon and fails with ENOTCONN.
    """
    real = os.path.realpath(path)
    try:
        os.statvfs(real)
        return False
    except OSError as e:
        if e.errno != errno.ENOTCONN or not _dead_memfs_mount(real):
            return False
    subprocess.run(["fusermount3", "-u", "-z", real], check=False, capture_output=True)
    if os.path.ismount(real):
        subprocess.run(["umount", "-l", real], check=False, capture_output=True)
    if os.path.ismount(real):
        return False
    log.info("cleared a dead mount left by a killed daemon mountpoint=%s", real)
    return True


def prepare_mountpoint(path: str) -> tuple[str, bool]:
    """Refuse a mount point memfs can't use: the real path, and whether a dead mount a
    killed daemon left is there (kept: the new mount goes over it, `overmount.py`)."""
    real = os.path.realpath(path)
    if is_dead_mount(real):
        return real, True
    try:
        st = os.stat(real)
    except FileNotFoundError:
        raise StartError(f"mount point {path} does not exist", 2) from None
    except OSError as e:
        raise StartError(f"mount point {path} cannot be used: {e.strerror}", 2) from None
    if not stat.S_ISDIR(st.st_mode):
        raise StartError(f"mount point {path} is not a directory", 2)
    if os.path.ismount(real):
        raise StartError(f"mount point {path} is already a mount", 2)
    names = sorted(os.listdir(real))
    if names:
        shown = ", ".join(names[:10]) + (f" and {len(names) - 10} more" if len(names) > 10 else "")
        raise StartError(f"mount point {path} is not empty: {shown}", 2)
    return real, False


def check_outside(mountpoint: str, what: str, path: Path) -> None:
    """The daemon writes its cache and control files itself: inside its own mount that
    would be a request to itself from the event loop, a deadlock."""
    real = os.path.realpath(path)
    if real == mountpoint or real.startswith(mountpoint.rstrip("/") + "/"):
        raise StartError(
            f"the {what} {path} is inside the mount point {mountpoint}; choose one outside it", 2
        )


async def lookup_store(client: StoreClient, store_id: str) -> StoreInfo:
    """The store's record, or the start-up error a user can act on."""
    try:
        return await client.retrieve_store(store_id)
    except NotFound:
        raise StartError(missing_store(store_id)) from None
    except StoreUnavailable as e:
        raise StartError(
            f"{e} (is the server running? check --api-url or ANTHROPIC_BASE_URL)",
            ExitCode.UNREACHABLE,
        ) from None
    except StoreAuthError as e:
        raise StartError(str(e), 2) from None


# Someone waits for a mount to start: a hung or down server is reported in seconds
# (one first-byte bound; refused connections and 5xx get four retries whose back-off
# sums to at most 3.75 s), not a minute. Three attempts were too few for a server that
# fails 30% of its answers: a cold mount failed about one start in ten.
START_RETRY = RetryPolicy(
    max_attempts=5, base_delay=0.25, max_delay=2.0, deadline=10.0, retry_timeouts=False
)
