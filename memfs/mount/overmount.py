"""Recovering a dead mount without ever exposing the bare directory under it.

A killed daemon leaves its mount dead: every access answers ENOTCONN, so a writer that
keeps going (an agent's shell) fails loudly. Clearing it before the new mount is ready
would turn the mount point into a plain directory for as long as the start takes (the
journal load and the first pass): acknowledged writes would land there, hidden under
the new mount and never synced. So the new mount goes on top of the dead one: as root
(CAP_SYS_ADMIN) memfs calls mount(2) itself with its own /dev/fuse descriptor (libfuse
and fusermount3 first `stat` the mount point, which the dead mount answers ENOTCONN) and
hands libfuse the descriptor as `/dev/fd/N`. A writer sees ENOTCONN, then the new mount.
The dead mount stays underneath until the new one is unmounted cleanly; the teardown
clears it then (`clear_dead_mounts`). Without the privilege (fusermount3) the dead mount
is cleared only right before the mount, after the start's slow part: a window of one
fusermount3 call, checked for anything that landed in it.

What the dead mount hides (the directory under it) is read through a non-recursive clone
of the parent's mount (open_tree(2)): a recovery that would hide files refuses and names
them.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import select
from collections.abc import Callable

from memfs.errors import StartError
from memfs.mount.preflight import clear_dead_mount

log = logging.getLogger("memfs.daemon")

_MS_RDONLY = 1
_MS_NOSUID = 2
_MS_NODEV = 4
_MNT_DETACH = 2
_SYS_OPEN_TREE = 428  # the same number on every architecture since Linux 5.2
_OPEN_TREE_CLONE = 1
_OPEN_TREE_CLOEXEC = os.O_CLOEXEC
_KERNEL_OPTIONS = {"default_permissions", "allow_other"}  # passed on in mount(2)'s data
_NAMED = 10  # hidden entries named in a refusal
_MAX_STACKED = 16  # dead mounts cleared at one mount point, at most

_libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)


def can_mount_over() -> bool:
    """mount(2) over a dead mount needs CAP_SYS_ADMIN; fusermount3 refuses one."""
    return os.geteuid() == 0


def hidden_entries(mountpoint: str) -> list[str] | None:
    """The names in the directory under the mount(s) at `mountpoint`; None if the kernel
    cannot show it (open_tree(2) needs Linux 5.2 and CAP_SYS_ADMIN)."""
    parent, name = os.path.split(mountpoint.rstrip("/"))
    tree = _libc.syscall(
        _SYS_OPEN_TREE, -100, parent.encode() or b"/", _OPEN_TREE_CLONE | _OPEN_TREE_CLOEXEC
    )
    if tree < 0:
        log.debug(
            "cannot look under the mount mountpoint=%s error=%s",
            mountpoint,
            os.strerror(ctypes.get_errno()),
        )
        return None
    try:
        fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=tree)
        try:
            return sorted(os.listdir(fd))
        finally:
            os.close(fd)
    except OSError:
        return None
    finally:
        os.close(tree)


def refuse_hidden(mountpoint: str, names: list[str], *, cleared: bool = False) -> StartError:
    """The refusal for files a mount would hide, naming them."""
    shown = ", ".join(names[:_NAMED])
    if len(names) > _NAMED:
        shown += f" and {len(names) - _NAMED} more"
    where = (
        f"the mount point {mountpoint}, under the dead mount just cleared,"
        if cleared
        else f"the directory under the dead mount at {mountpoint}"
    )
    first = "" if cleared else f"clear the dead mount (fusermount3 -u -z {mountpoint}), "
    return StartError(
        f"{where} holds files the new mount would hide: {shown}; nothing was mounted. "
        f"They were written while nothing was mounted there: {first}move them away, "
        "then start again (and copy them into the mount if they belong to the store)",
        2,
    )


def plan_over_dead(mountpoint: str) -> bool:
    """At the start of a recovery: True to mount over the dead mount; False to clear it
    right before the mount (no privilege, or a kernel that cannot show what is under
    it). Refuses now if the directory under it holds anything."""
    if not can_mount_over():
        return False
    names = hidden_entries(mountpoint)
    if names is None:
        return False
    if names:
        raise refuse_hidden(mountpoint, names)
    return True


def check_under_dead(mountpoint: str) -> None:
    """Before mounting over a dead mount: refuse if the directory under it is not empty."""
    names = hidden_entries(mountpoint)
    if names:
        raise refuse_hidden(mountpoint, names)


def mount_over(mountpoint: str, options: set[str]) -> tuple[str, int]:
    """Mount a FUSE file system on top of the (dead) mount at `mountpoint`: the path to
    give `pyfuse3.init` (`/dev/fd/N`) and the /dev/fuse descriptor."""
    flags = _MS_NOSUID | _MS_NODEV
    source, fstype = "memfs", "fuse"
    data: list[str] = []
    for option in sorted(options):
        key, _, value = option.partition("=")
        if option == "ro":
            flags |= _MS_RDONLY
        elif key == "fsname":
            source = value
        elif key == "subtype":
            fstype = f"fuse.{value}"
        elif option in _KERNEL_OPTIONS:
            data.append(option)
        else:
            raise StartError(f"cannot mount over the dead mount with the option {option}", 2)
    fd = os.open("/dev/fuse", os.O_RDWR | os.O_CLOEXEC)
    data[:0] = [f"fd={fd}", "rootmode=40000", f"user_id={os.getuid()}", f"group_id={os.getgid()}"]
    if (
        _libc.mount(
            source.encode(), mountpoint.encode(), fstype.encode(), flags, ",".join(data).encode()
        )
        != 0
    ):
        err = ctypes.get_errno()
        os.close(fd)
        raise StartError(
            f"FUSE mount over the dead mount at {mountpoint} failed: {os.strerror(err)}", 2
        )
    log.info("mounted over the dead mount a killed daemon left mountpoint=%s", mountpoint)
    return f"/dev/fd/{fd}", fd


def target(
    mountpoint: str, options: set[str], *, dead: bool, over: bool, claim: Callable[[], None]
) -> tuple[str, int | None]:
    """Right before `pyfuse3.init`: what to give it as the mount point, and the /dev/fuse
    descriptor of a mount over the dead one (`over`, from `plan_over_dead`). A dead
    mount that cannot be mounted over is cleared now, after the start's slow part.
    `claim` takes the dead daemon's registry entry over first, while the mount still
    looks dead: once it does not, the old entry (a gone pid) would look stale, and a
    `memfs status` anywhere would remove it with the socket path the new daemon binds."""
    if dead:
        claim()
    if over:
        check_under_dead(mountpoint)  # nothing can have come since: it is still dead
        return mount_over(mountpoint, options)
    if dead:
        clear_before_mount(mountpoint)
    return mountpoint, None


def abandon(mountpoint: str, fd: int | None) -> None:
    """A mount over a dead one that libfuse then refused: take it away again."""
    if fd is not None:
        unmount_over(mountpoint, fd)
        os.close(fd)


def unmount_over(mountpoint: str, fd: int | None) -> None:
    """Unmount what `mount_over` mounted (libfuse does not: it did not mount it), unless
    it is gone already (unmounted or aborted from outside: the descriptor says POLLERR),
    as libfuse does for its own mounts. Nothing for a mount libfuse made (`fd` None)."""
    if fd is None:
        return
    poller = select.poll()
    poller.register(fd, 0)
    if any(event & select.POLLERR for _, event in poller.poll(0)):
        return
    if _libc.umount2(mountpoint.encode(), _MNT_DETACH) != 0:
        err = ctypes.get_errno()
        log.warning("unmount failed mountpoint=%s error=%s", mountpoint, os.strerror(err))


def clear_dead_mounts(mountpoint: str) -> None:
    """Clear every dead mount left under a mount that has just gone away."""
    for _ in range(_MAX_STACKED):
        if not clear_dead_mount(mountpoint):
            return


def clear_before_mount(mountpoint: str) -> None:
    """Without the privilege to mount over it: clear the dead mount now, right before
    the mount, and refuse if anything is in the directory it leaves."""
    clear_dead_mounts(mountpoint)
    try:
        names = sorted(os.listdir(mountpoint))
    except OSError as e:
        raise StartError(f"mount point {mountpoint} cannot be used: {e.strerror}", 2) from None
    if names:
        raise refuse_hidden(mountpoint, names, cleared=True)
