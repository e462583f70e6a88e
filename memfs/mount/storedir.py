"""A session's root and its stores' directories: made, mounted and removed by fd.

A root daemon's `memfs session` may run under a root other users can write in, and a
name there can be swapped between two system calls (the store's new directory for a
symlink to `/run/sshd`, say). So no name under the root is ever followed:

- the root is opened once, `O_DIRECTORY|O_NOFOLLOW`; a root that is a symlink, or that
  other users can write without the sticky bit (they could rename what memfs makes in
  it), is refused (`unsafe_root`);
- each store's directory is made (`mkdirat`) and opened (`openat`, `O_NOFOLLOW`) from the
  root's fd, and must then be this user's and empty;
- right before the mount, the name must still hold that very directory (st_dev,
  st_ino), and a root daemon mounts through `/proc/self/fd/N`: mount(2) takes the
  directory the fd holds, whatever its name has become meanwhile (another user's daemon
  mounts by path through fusermount3, which checks that user's own access);
- it is removed through the root's fd, and only while the name still holds that
  directory, empty.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import stat
from dataclasses import dataclass
from types import TracebackType

from memfs.config import ExitCode, MountDir
from memfs.errors import StartError
from memfs.mount.preflight import clear_dead_mount

log = logging.getLogger("memfs.session")

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def unsafe_root(root: str, reason: str) -> StartError:
    """The refusal of a session root another user could redirect the mounts through."""
    return StartError(
        f"the session root {root} is {reason}; another user could redirect the memory "
        "stores' mounts: give a directory that is not a symlink and that other users "
        "cannot write, or that has the sticky bit (chmod +t), as /tmp has",
        ExitCode.USAGE,
    )


def _open_to_others(st: os.stat_result) -> str | None:
    mode = stat.S_IMODE(st.st_mode)
    if mode & stat.S_IWOTH and not mode & stat.S_ISVTX:
        return f"writable by other users without the sticky bit (mode {mode:o})"
    return None


@dataclass
class SessionRoot:
    """The session root, held open; `path` is where the fd really is."""

    path: str
    fd: int

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self.fd)

    def __enter__(self) -> SessionRoot:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def open_root(root: str) -> SessionRoot:
    """The session root, opened without following a link; every refusal a user can act
    on. It is never mounted (each store is, below it); any filesystem may hold it."""
    try:
        fd = os.open(root, DIR_FLAGS)
    except FileNotFoundError:
        raise StartError(
            f"the session root {root} does not exist; prepare the host with: "
            f'sudo mkdir -p {root} && sudo chown "$USER" {root}',
            ExitCode.USAGE,
        ) from None
    except OSError as e:
        if os.path.islink(root):
            raise unsafe_root(root, "a symlink") from None
        if e.errno == errno.ENOTDIR:
            raise StartError(f"the session root {root} is not a directory", 2) from None
        raise StartError(f"the session root {root} cannot be used: {e.strerror}", 2) from None
    try:
        problem = _open_to_others(os.fstat(fd))
        if problem:
            raise unsafe_root(root, problem)
        if not os.access(".", os.W_OK | os.X_OK, dir_fd=fd):
            raise StartError(
                f"cannot create the memory store's folder under {root}: "
                "permission denied; the worker host must make this mount path "
                f'writable (sudo chown "$USER" {root})',
                ExitCode.USAGE,
            )
        return SessionRoot(os.readlink(f"/proc/self/fd/{fd}"), fd)
    except BaseException:
        os.close(fd)
        raise


def lstat_at(root: SessionRoot, name: str) -> os.stat_result | None:
    """What is at `name` in the root, not followed; None if nothing is."""
    try:
        return os.stat(name, dir_fd=root.fd, follow_symlinks=False)
    except FileNotFoundError:
        return None


def clear_left_dir(root: SessionRoot, name: str) -> None:
    """A killed session's store directory: its dead mount cleared, then removed (memfs
    made it, and mounted it). A symlink there is left alone, for the caller to refuse."""
    try:
        st = os.stat(name, dir_fd=root.fd, follow_symlinks=False)
    except FileNotFoundError:
        return
    except OSError:
        st = None  # a dead mount may answer ENOTCONN; a mount point cannot be renamed
    if st is not None and not stat.S_ISDIR(st.st_mode):
        return
    if clear_dead_mount(os.path.join(root.path, name)):
        with contextlib.suppress(OSError):
            os.rmdir(name, dir_fd=root.fd)


def already_there(path: str, store_id: str) -> StartError:
    return StartError(
        f"something already exists at the memory store's path: {path} "
        f"(memory_store_id={store_id}); it must not exist when the session starts",
        ExitCode.USAGE,
    )


def replaced(path: str, store_id: str) -> StartError:
    return StartError(
        f"the memory store's directory {path} (memory_store_id={store_id}) was replaced "
        "before it was mounted; memfs mounts only on a directory it made, and removes "
        "only that",
        ExitCode.USAGE,
    )


def make_store_dir(root: SessionRoot, name: str, store_id: str) -> MountDir:
    """Make `name` in the root and hold it open; never through a link."""
    path = os.path.join(root.path, name)
    try:
        os.mkdir(name, 0o755, dir_fd=root.fd)
    except FileExistsError:
        raise already_there(path, store_id) from None
    except OSError as e:
        raise StartError(
            f"cannot create the memory store's folder: {path} (memory_store_id="
            f"{store_id}): {e.strerror}",
            ExitCode.USAGE,
        ) from None
    try:
        fd = os.open(name, DIR_FLAGS, dir_fd=root.fd)
    except OSError:
        raise replaced(path, store_id) from None  # a symlink now, or gone
    st = os.fstat(fd)
    made = MountDir(root.fd, name, fd, st.st_dev, st.st_ino)
    if st.st_uid != os.geteuid() or os.listdir(fd):
        close_store_dir(made)
        raise replaced(path, store_id)
    return made


def check_store_dir(made: MountDir, path: str, store_id: str) -> None:
    """Right before the mount: the name still holds the directory made, empty and not a
    mount (a mount over it would show another st_dev)."""
    try:
        st = os.stat(made.name, dir_fd=made.root_fd, follow_symlinks=False)
        empty = not os.listdir(made.fd)
    except OSError:
        raise replaced(path, store_id) from None
    if (st.st_dev, st.st_ino) != (made.dev, made.ino) or not empty:
        raise replaced(path, store_id)


def mount_target(made: MountDir, path: str, store_id: str) -> str:
    """What to hand pyfuse3.init for a session's store: checked again, and for a root
    daemon the fd's magic link (mount(2) follows it to the very directory made; the
    mount table shows the real path, and unmounting by either works)."""
    check_store_dir(made, path, store_id)
    if os.geteuid() != 0:
        return path  # fusermount3 mounts, and checks this user's access itself
    os.set_inheritable(made.fd, True)  # were mount(2) refused, fusermount3 resolves it
    return f"/proc/self/fd/{made.fd}"


def remove_store_dir(made: MountDir) -> None:
    """The store's directory, once unmounted and empty, and only while its name still
    holds the directory made (a dead mount stays: nothing may write underneath)."""
    try:
        st = os.stat(made.name, dir_fd=made.root_fd, follow_symlinks=False)
    except OSError:
        return  # gone, or a dead mount (ENOTCONN)
    if (st.st_dev, st.st_ino) != (made.dev, made.ino):
        log.debug("store directory left in place: not the one made name=%s", made.name)
        return
    try:
        os.rmdir(made.name, dir_fd=made.root_fd)
    except FileNotFoundError:
        pass
    except OSError as e:
        log.debug("store directory left in place name=%s error=%s", made.name, e.strerror)


def close_store_dir(made: MountDir) -> None:
    with contextlib.suppress(OSError):
        os.close(made.fd)
