"""The pyfuse3 adapter: decode names, build attributes, apply policy, map errors.

Every handler runs through `_guard`, the one place where domain errors become errno:
`FsError` keeps its errno, anything unexpected is logged with its traceback and becomes
`EIO`, so a bug answers one system call badly instead of killing the mount.

Handlers never start network I/O (invariant 2 in docs/concurrency.md). A read of a file
whose content is still on its way waits, bounded, for the sync task to bring it.

What a file handle names in each handle mode, and each mode's bookkeeping, is
`handles.py`'s (`Handles`); the `user.memfs.*` extended attributes are `xattrs.py`'s.
"""

from __future__ import annotations

import errno
import functools
import logging
import math
import os
import stat
from collections import Counter
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import Any, ParamSpec, Protocol, TypeVar, cast

import pyfuse3
import trio

from memfs import metrics
from memfs.audit import Trail, command_name
from memfs.control.protocol import Pyfuse3Build
from memfs.errors import FsError
from memfs.logs import Repeated
from memfs.mount.closewatch import CloseWatch, CloseWatchStatistics
from memfs.mount.handles import Handles
from memfs.mount.xattrs import Xattrs
from memfs.paths import (
    MAX_CONTENT_BYTES,
    MAX_MEMORIES_PER_STORE,
    NAME_MAX,
    local_name,
    may_be_alias,
)
from memfs.state.node import Kind, Node, check_length, check_name, stat_mode
from memfs.state.store_state import StoreState
from memfs.state.tree import NegativeStatistics

log = logging.getLogger("memfs.fs")

P = ParamSpec("P")
R = TypeVar("R")


# The kernel may cache names and attributes this long. Safe because every local change
# passes through this process, and the sync task invalidates what a pull changes.
CACHE_TIMEOUT = 300.0
# ... and a name as missing this long (`Tree.negatives` says which to invalidate).
NEGATIVE_TIMEOUT = CACHE_TIMEOUT

# FOPEN_NOFLUSH: a close of a read-only handle sends no FLUSH (one round trip of three
# for a warm `cat`). Only the patched pyfuse3 (scripts/pyfuse3-levers.patch) has it;
# on a stock one every close flushes, as before.
NOFLUSH = hasattr(pyfuse3.FileInfo, "noflush")
# FOPEN_CACHE_DIR + keep_cache on opendir: the kernel keeps a directory's listing, so a
# second `ls` sends no READDIR. Safe because the kernel drops it on a local change and
# the sync task invalidates a directory whose names a pull changed
# (`Tree.listing_changed`). Also only on the patched pyfuse3.
CACHE_READDIR = hasattr(pyfuse3.FileInfo, "cache_readdir")
# Zero-message opens: `open` and `opendir` answer ENOSYS, the kernel stops sending
# OPEN/RELEASE and OPENDIR/RELEASEDIR, keeps pages and listings (KEEP_CACHE,
# CACHE_DIR), and the patched pyfuse3 hands the handlers the inode in place of a file
# handle. Taken on a mount the VFS holds read-only with the kernel checking modes,
# where open-time work (refusals, writer bookkeeping, the audit trail's opener, EILSEQ
# at close) has nothing to do; FLUSH then answers ENOSYS too (reliability.md). On a
# writable mount too unless --open-requests: that work moves to WRITE and SETATTR, and
# some of it is given up (reliability.md lists what). memfs/mount/handles.py has the modes.
ZERO_MESSAGE_OPENS = hasattr(pyfuse3.Operations, "pass_inode_without_fh")
# The patched session loop reads on for the next request before it sleeps (`--read-spin-us`).
READ_SPIN = hasattr(pyfuse3, "read_spin_us")
# Untyped on purpose: the stock pyfuse3's stub knows neither keyword, the patched one's
# both, and mypy must pass on either build.
_FileInfo: Any = pyfuse3.FileInfo


class ContentWaiter(Protocol):
    """How a handler waits (bounded by the caller) for content being brought in; the
    answer is why the content cannot come now (a failed download), or None."""

    async def wait_for(self, node: Node) -> str | None: ...


def _guard(fn: Callable[P, Coroutine[Any, Any, R]]) -> Callable[P, Coroutine[Any, Any, R]]:
    name = fn.__name__

    @functools.wraps(fn)
    async def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        fs = cast("MemFs", args[0])
        # Requests by handler: what a gain in round trips shows, on a noisy box too.
        fs.requests[name] += 1
        fs.last_request = trio.current_time()  # `last_answered`
        try:
            result = await fn(*args, **kwargs)
        except Exception as e:
            error = _fuse_error(name, e)
            metrics.fuse_op(name, error.errno)
            raise error from None
        metrics.fuse_op(name, 0)
        return result

    return wrapper


def _fuse_error(handler: str, e: Exception) -> pyfuse3.FUSEError:
    if isinstance(e, FsError):
        return pyfuse3.FUSEError(e.errno)
    if isinstance(e, pyfuse3.FUSEError):
        return e
    if isinstance(e, OSError) and e.errno in _CACHE_DISK_ERRNOS:
        # The cache disk: full (ENOSPC, EDQUOT) or failing (EIO). Nothing changed.
        log.warning(
            "cache disk error handler=%s errno=%s error=%s",
            handler,
            errno.errorcode.get(e.errno, e.errno),
            e.strerror or e,
        )
        return pyfuse3.FUSEError(e.errno)
    return _unexpected(handler)


_CACHE_DISK_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EIO)


@functools.cache
def _pyfuse3_version() -> str:
    """Read from the package metadata once: `statistics()` runs on every status call."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("pyfuse3")
    except PackageNotFoundError:
        return "unknown"


def _unexpected(handler: str) -> pyfuse3.FUSEError:
    """Log the exception being handled (a bug) with its traceback; EIO for the caller."""
    log.exception("unexpected error in handler; answering EIO handler=%s", handler)
    return pyfuse3.FUSEError(errno.EIO)


class MemFs(pyfuse3.Operations):
    supports_dot_lookup = False
    enable_writeback_cache = False

    def __init__(
        self,
        state: StoreState,
        waiter: ContentWaiter,
        *,
        content_timeout: float = 30.0,
        negative_timeout: float = NEGATIVE_TIMEOUT,
        read_only_vfs: bool = False,
        zero_message_writes: bool = False,
        xattrs: bool = True,
        read_spin_us: int = 0,
    ) -> None:
        super().__init__()
        self.state = state  # the mount's one store
        self.tree = state.tree
        self.negative_timeout = negative_timeout
        self.noflush = NOFLUSH
        self.cache_readdir = CACHE_READDIR
        # FUSE_POSIX_ACL (read by pyfuse3 at INIT): the kernel keeps each inode's
        # (absent) ACLs, so `ls -l` asks GETXATTR system.posix_acl_* once per inode
        # instead of at every listing (`ls -la` of 20 files: 49 requests -> 27; the
        # rest is security.selinux, which no cache holds). memfs stores no ACLs:
        # setting one stays ENOTSUP. It turns on the kernel's mode checks, which
        # every memfs mount has anyway (`default_permissions`).
        self.enable_acl = True
        self.xattrs = Xattrs(state, enabled=xattrs, mutable=self._mutable)
        # Set on pyfuse3 before its main loop starts (`start_loop`); 0 on a stock build.
        self.read_spin_us = read_spin_us if READ_SPIN else 0
        # Asked of the patched pyfuse3 at INIT (`init` below says whether it is used).
        # Read-only mounts always; writable ones unless --open-requests, trading what
        # OPEN carried (docs/reliability.md, "Zero-message opens").
        self.zero_message_writes = zero_message_writes
        self.pass_inode_without_fh = (read_only_vfs or zero_message_writes) and ZERO_MESSAGE_OPENS
        self.write_context = self.pass_inode_without_fh  # `write` names its writer
        # ... and gets the WRITE's file flags: O_APPEND without an OPEN (the patched
        # pyfuse3 hands over libfuse's fi->flags, which the kernel fills at each WRITE).
        self.write_flags = self.pass_inode_without_fh and not read_only_vfs
        # The kernel keeps a file's pages when a GETATTR shows a new mtime (patched
        # pyfuse3 clears FUSE_CAP_AUTO_INVAL_DATA): memfs invalidates every change the
        # kernel did not make itself (a pull, a merge, an append it moved), so `cat`,
        # `echo >>`, `cat` reads the file once.
        self.auto_inval_data = False
        # Set by the daemon: drop the kernel's pages and attributes of an inode, after
        # the answer (an O_APPEND write memfs moved to its own end of the file).
        self.stale_inode: Callable[[int], None] = lambda ino: None
        # Set by the daemon when it watches writers' closes (memfs/mount/closewatch.py).
        self.close_watch: CloseWatch | None = None
        # Open files and directories, in the mode `init` picks (memfs/mount/handles.py).
        self.handles = Handles(
            state, read_only_vfs=read_only_vfs, mutable=self._mutable, directory=self._dir
        )
        self.waiter = waiter
        # Each read of content that cannot come would say so again: once per cause.
        self._unavailable = Repeated(
            log,
            "memory content unavailable; the read fails with EIO "
            "memory_store_id=%s path=%s error=%s",
        )
        self.content_timeout = content_timeout
        self.closing = False  # set at unmount: writes fail with EROFS while we flush
        self.trail = Trail()  # the daemon's audit trails (none: nothing is recorded)
        # FUSE requests answered, by handler (`forget_inodes`: inodes the kernel dropped).
        # Requests libfuse answers itself (INIT, ENOSYS for ioctl, ...) are not here.
        self.requests: Counter[str] = Counter()
        self.last_request = -math.inf  # when the last one came (trio's clock)

    def last_answered(self) -> float:
        """When the mount last answered a request, for the uploads that give way to a
        busy mount (memfs/sync/schedule.py, `give_way`); an unmount asks them not to
        wait."""
        return -math.inf if self.closing else self.last_request

    def start_loop(self) -> None:
        """Before `pyfuse3.main`: what the session loop reads when its tasks start."""
        if READ_SPIN:
            setattr(pyfuse3, "read_spin_us", self.read_spin_us)  # noqa: B010 (stock stub)

    def init(self) -> None:
        """At the kernel's INIT (pyfuse3 has read what the kernel can do by now)."""
        handles = self.handles
        handles.files_by_inode = self.pass_inode_without_fh and bool(
            getattr(pyfuse3, "no_open_support", False)
        )
        handles.dirs_by_inode = self.pass_inode_without_fh and bool(
            getattr(pyfuse3, "no_opendir_support", False)
        )
        if handles.writes_by_inode:
            self.tree.writers_tracked = False  # no OPEN or RELEASE will say who writes
        elif self.zero_message_writes and not handles.read_only_vfs:
            why = "the kernel cannot skip OPEN" if ZERO_MESSAGE_OPENS else "a stock pyfuse3"
            log.info(
                "zero-message opens are not available; opens cost requests as with "
                "--open-requests memory_store_id=%s reason=%s",
                self.state.store_id,
                why,
            )

    # -- helpers --------------------------------------------------------------------
    def attrs(self, node: Node) -> pyfuse3.EntryAttributes:
        a = pyfuse3.EntryAttributes()
        a.st_ino = node.ino
        a.generation = 0
        a.entry_timeout = CACHE_TIMEOUT
        a.attr_timeout = CACHE_TIMEOUT
        a.st_mode = self.mode(node)
        # Directories report 1 link, as btrfs does ("not counted"; find and ls cope):
        # counting subdirectories made every getattr of a large directory O(children).
        a.st_nlink = 1 if node.is_dir else (1 if node.linked else 0)
        a.st_uid = self.tree.uid
        a.st_gid = self.tree.gid
        a.st_rdev = 0
        a.st_size = 4096 if node.is_dir else node.size
        a.st_blksize = 4096
        a.st_atime_ns = node.atime_ns
        a.st_mtime_ns = node.mtime_ns
        a.st_ctime_ns = node.ctime_ns
        veil = self.state.veils.get(node.ino)
        if veil is not None:  # a pull's change the kernel has not heard of yet
            a.st_size = len(veil.data)
            a.st_mtime_ns, a.st_ctime_ns = veil.mtime_ns, veil.ctime_ns
        a.st_blocks = (a.st_size + 511) // 512
        return a

    def mode(self, node: Node) -> int:
        mode = stat_mode(node)
        if self.tree.umask is not None:  # --umask, as rclone's: 0666/0777 minus the mask
            shown = 0o777 if node.is_dir else 0o444 if node.kind is Kind.MARKER else 0o666
            mode = (mode & ~0o7777) | (shown & ~self.tree.umask)
        if self.state.read_only:
            mode &= ~0o222  # 0444/0555 whatever the journal remembers from a writable mount
        return mode

    def _mutable(self) -> StoreState:
        """The store a mutation goes to, or the errno that refuses it."""
        store = self.state
        store.writable()
        if self.closing:
            raise FsError(errno.EROFS, "the mount is being unmounted")
        return store

    def _dir(self, ino: int) -> Node:
        node = self.tree.get(ino)
        if not node.is_dir:
            raise FsError(errno.ENOTDIR)
        return node

    def _child(self, parent: Node, name: str) -> Node:
        node = self._find(parent, name)
        if node is None:
            raise FsError(errno.ENOENT)
        return node

    @staticmethod
    def _find(parent: Node, name: str) -> Node | None:
        """The child shown as `name`: a store segment longer than NAME_MAX is shown
        under its `local_name` alias (docs/reliability.md, "Long names")."""
        assert parent.children is not None
        node = parent.children.get(name)
        if node is None and may_be_alias(name):
            for real, child in parent.children.items():
                if (
                    len(real.encode("utf-8", "surrogateescape")) > NAME_MAX
                    and local_name(real) == name
                ):
                    return child
        return node

    @staticmethod
    def _name(raw: bytes) -> str:
        """A name the kernel hands us for an existing entry; NAME_MAX like any local fs."""
        check_length(raw)
        return raw.decode("utf-8", "surrogateescape")

    async def _content(self, node: Node) -> bytes:
        store = self.state
        data = store.content(node)
        if data is None:
            why: str | None = None
            with trio.move_on_after(self.content_timeout):
                why = await self.waiter.wait_for(node)
            data = store.content(node)
            if data is None and why is not None:
                path = node.store_path()
                self._unavailable.warning((store.store_id, path, why), store.store_id, path, why)
                raise FsError(errno.EIO, "content not available")
            if data is None:
                log.error(
                    "content did not arrive in time memory_store_id=%s path=%s timeout_s=%s",
                    store.store_id,
                    node.store_path(),
                    self.content_timeout,
                )
                raise FsError(errno.EIO, "content not available")
        return data

    def _lookup_ref(self, node: Node) -> pyfuse3.EntryAttributes:
        node.lookups += 1
        return self.attrs(node)

    # -- namespace ------------------------------------------------------------------
    @_guard
    async def lookup(
        self, parent_inode: int, name: bytes, ctx: pyfuse3.RequestContext
    ) -> pyfuse3.EntryAttributes:
        parent = self._dir(parent_inode)
        if name == b".":
            return self._lookup_ref(parent)
        if name == b"..":
            return self._lookup_ref(parent.parent or parent)
        check_length(name)
        try:
            text = name.decode("utf-8")
        except UnicodeDecodeError:  # can never exist here: cached as missing too
            return self._missing(parent, name.decode("utf-8", "surrogateescape"))
        node = self._find(parent, text)
        if node is None:
            return self._missing(parent, text)
        return self._lookup_ref(node)

    def _missing(self, parent: Node, shown: str) -> pyfuse3.EntryAttributes:
        """A negative entry the kernel may keep, or ENOENT when it must not."""
        if self.negative_timeout <= 0 or not self.tree.negatives.answer(
            parent.ino, shown, self.negative_timeout
        ):
            raise FsError(errno.ENOENT)
        a = pyfuse3.EntryAttributes()
        a.st_ino = 0  # "no such name", cached for entry_timeout
        a.entry_timeout = self.negative_timeout
        return a

    @_guard
    async def forget(self, inode_list: Sequence[tuple[int, int]]) -> None:
        self.requests["forget_inodes"] += len(inode_list)
        for ino, count in inode_list:
            self.tree.forget(ino, count)

    @_guard
    async def getattr(self, inode: int, ctx: pyfuse3.RequestContext) -> pyfuse3.EntryAttributes:
        return self.attrs(self.tree.get(inode))

    @_guard
    async def setattr(
        self,
        inode: int,
        attr: pyfuse3.EntryAttributes,
        fields: pyfuse3.SetattrFields,
        fh: int | None,
        ctx: pyfuse3.RequestContext,
    ) -> pyfuse3.EntryAttributes:
        node = self.tree.get(inode)
        store = self._mutable()
        if node.kind is Kind.MARKER:
            raise FsError(errno.EPERM, "the marker file is read-only")
        if fields.update_uid and attr.st_uid != self.tree.uid:
            raise FsError(errno.EPERM, "owners are fixed to the mounting user")
        if fields.update_gid and attr.st_gid != self.tree.gid:
            raise FsError(errno.EPERM, "groups are fixed to the mounting user's")
        if fields.update_uid or fields.update_gid:
            # A chown to the ids a file already has still changes its inode: only the
            # change time moves, as on ext4 (set_times with no time to set does that).
            store.set_times(node, None, None)
        if fields.update_size:
            if node.is_dir:
                raise FsError(errno.EISDIR)
            if node.data is None and attr.st_size > 0:
                await self._content(node)  # like a write: wait for content on its way
                store = self._mutable()  # re-check after the await
            store.truncate(node, attr.st_size)
            self.trail.change(
                store.store_id, "truncate", node.store_path(), ctx.pid, ctx.uid, size=attr.st_size
            )
        if fields.update_mode:
            store.set_mode(node, attr.st_mode)
        if fields.update_atime or fields.update_mtime:
            store.set_times(
                node,
                attr.st_atime_ns if fields.update_atime else None,
                attr.st_mtime_ns if fields.update_mtime else None,
            )
        return self.attrs(node)

    @_guard
    async def readlink(self, inode: int, ctx: pyfuse3.RequestContext) -> bytes:
        raise pyfuse3.FUSEError(errno.EINVAL)

    @_guard
    async def mknod(
        self, parent_inode: int, name: bytes, mode: int, rdev: int, ctx: pyfuse3.RequestContext
    ) -> pyfuse3.EntryAttributes:
        parent = self._dir(parent_inode)
        self._name(name)  # ENAMETOOLONG first, as the kernel's own lookup would answer
        store = self._mutable()
        if not stat.S_ISREG(mode):
            raise FsError(errno.EPERM, "only regular files can live in a memory store")
        node = self._new_file(store, parent, name, mode)
        return self._lookup_ref(node)

    def _new_file(self, store: StoreState, parent: Node, raw: bytes, mode: int) -> Node:
        name = check_name(raw)
        if self._find(parent, name) is not None:
            raise FsError(errno.EEXIST)
        node = store.create_file(parent, name, mode)
        self.tree.created_here(parent, name)
        return node

    @_guard
    async def mkdir(
        self, parent_inode: int, name: bytes, mode: int, ctx: pyfuse3.RequestContext
    ) -> pyfuse3.EntryAttributes:
        parent = self._dir(parent_inode)
        store = self._mutable()
        text = check_name(name)
        if self._find(parent, text) is not None:
            raise FsError(errno.EEXIST)
        node = store.mkdir(parent, text, mode)
        self.trail.change(store.store_id, "mkdir", node.store_path(), ctx.pid, ctx.uid)
        self.tree.created_here(parent, text)
        return self._lookup_ref(node)

    @_guard
    async def unlink(self, parent_inode: int, name: bytes, ctx: pyfuse3.RequestContext) -> None:
        parent = self._dir(parent_inode)
        text = self._name(name)
        store = self._mutable()
        node = self._child(parent, text)
        path = node.store_path()
        store.unlink(parent, node.name)
        self.trail.change(store.store_id, "unlink", path, ctx.pid, ctx.uid)

    @_guard
    async def rmdir(self, parent_inode: int, name: bytes, ctx: pyfuse3.RequestContext) -> None:
        parent = self._dir(parent_inode)
        node = self._child(parent, self._name(name))
        if node is self.tree.root:
            raise FsError(errno.EROFS, "a store's directory cannot be removed")
        store = self._mutable()
        path = node.store_path()
        store.rmdir(parent, node.name)
        self.trail.change(store.store_id, "rmdir", path, ctx.pid, ctx.uid)

    @_guard
    async def symlink(
        self, parent_inode: int, name: bytes, target: bytes, ctx: pyfuse3.RequestContext
    ) -> pyfuse3.EntryAttributes:
        return self._refuse_link(parent_inode, name, ctx)

    @_guard
    async def link(
        self, inode: int, new_parent_inode: int, new_name: bytes, ctx: pyfuse3.RequestContext
    ) -> pyfuse3.EntryAttributes:
        return self._refuse_link(new_parent_inode, new_name, ctx)

    def _refuse_link(
        self, parent_inode: int, name: bytes, ctx: pyfuse3.RequestContext
    ) -> pyfuse3.EntryAttributes:
        self._dir(parent_inode)  # ENOENT, ENOTDIR first
        self._name(name)  # ENAMETOOLONG, then EROFS, then EPERM: Linux's order
        self._mutable()
        raise FsError(errno.EPERM, "links cannot live in a memory store")

    @_guard
    async def rename(
        self,
        parent_inode_old: int,
        name_old: bytes,
        parent_inode_new: int,
        name_new: bytes,
        flags: int,
        ctx: pyfuse3.RequestContext,
    ) -> None:
        old_parent = self._dir(parent_inode_old)
        new_parent = self._dir(parent_inode_new)
        old_name = self._name(name_old)
        check_length(name_new)
        store = self._mutable()  # one store a mount: EXDEV is the kernel's
        if flags & pyfuse3.RENAME_EXCHANGE:
            raise FsError(errno.EINVAL, "RENAME_EXCHANGE is not supported")
        node = self._child(old_parent, old_name)
        if node is store.root:
            raise FsError(errno.EROFS)
        new_name = check_name(name_new)
        target = self._find(new_parent, new_name)
        if target is not None:
            new_name = target.name  # replacing a file shown under its alias
        old_path = node.store_path()
        store.rename(
            old_parent,
            node.name,
            new_parent,
            new_name,
            noreplace=bool(flags & pyfuse3.RENAME_NOREPLACE),
        )
        self.trail.change(
            store.store_id, "rename", old_path, ctx.pid, ctx.uid, to=node.store_path()
        )
        self.tree.created_here(new_parent, new_name)

    # -- files (what a handle names in each mode: memfs/mount/handles.py) ------------
    @_guard
    async def open(self, inode: int, flags: int, ctx: pyfuse3.RequestContext) -> pyfuse3.FileInfo:
        self.handles.refuse_open()  # with zero-message opens: the kernel stops asking
        node = self.tree.get(inode)
        if node.is_dir:
            raise FsError(errno.EISDIR)
        writing = (flags & os.O_ACCMODE) != os.O_RDONLY or bool(flags & os.O_TRUNC)
        append = bool(flags & os.O_APPEND)
        if not writing:
            fh = self.handles.open(node, writing=False, append=append, writer=None)
            if self.noflush:
                # flush() does nothing for a reader: nothing is given up by skipping it.
                info: pyfuse3.FileInfo = _FileInfo(fh=fh, keep_cache=True, noflush=True)
                return info
            return pyfuse3.FileInfo(fh=fh, keep_cache=True)
        store = self._mutable()
        if node.kind is Kind.MARKER:
            raise FsError(errno.EPERM, "the marker file is read-only")
        writer = (ctx.pid, ctx.uid, command_name(ctx.pid))
        if flags & os.O_TRUNC:
            store.truncate(node, 0)
            self.trail.change(store.store_id, "truncate", node.store_path(), *writer, size=0)
        fh = self.handles.open(node, writing=True, append=append, writer=writer)
        return pyfuse3.FileInfo(fh=fh, keep_cache=True)

    @_guard
    async def create(
        self, parent_inode: int, name: bytes, mode: int, flags: int, ctx: pyfuse3.RequestContext
    ) -> tuple[pyfuse3.FileInfo, pyfuse3.EntryAttributes]:
        parent = self._dir(parent_inode)
        store = self._mutable()
        node = self._new_file(store, parent, name, mode)
        writer = (ctx.pid, ctx.uid, command_name(ctx.pid))
        self.trail.change(store.store_id, "create", node.store_path(), *writer)
        fh = self.handles.create(node, append=bool(flags & os.O_APPEND), writer=writer)
        return pyfuse3.FileInfo(fh=fh, keep_cache=True), self._lookup_ref(node)

    @_guard
    async def read(self, fh: int, off: int, size: int) -> bytes:
        node = self.handles.reading(fh)
        # A pull's change the kernel has not heard of yet is shown as it saw the file.
        veil = self.state.veils.get(node.ino)
        data = veil.data if veil is not None else await self._content(node)
        return data[off : off + size]

    @_guard
    async def write(
        self,
        fh: int,
        off: int,
        buf: bytes,
        ctx: pyfuse3.RequestContext | None = None,
        flags: int | None = None,
    ) -> int:
        write = self.handles.write(fh, off, flags)
        node = write.node
        store, written = await self._store_write(node, write.offset, buf)
        if write.moved:
            self.stale_inode(node.ino)
        writer = self.handles.writer(write, ctx)
        if writer is not None:  # before the write is answered
            self.trail.change(store.store_id, "write", node.store_path(), *writer)
        return written

    def writer_closed(self, ino: int) -> None:
        """A writer closed the file (the close watch, on a mount with zero-message
        opens: what RELEASE told)."""
        self.handles.writer_closed(ino)

    async def _store_write(self, node: Node, off: int, buf: bytes) -> tuple[StoreState, int]:
        store = self._mutable()
        if node.data is None:
            await self._content(node)  # a write into content still downloading waits
            store = self._mutable()  # re-check after the await
        return store, store.write(node, off, buf)

    @_guard
    async def flush(self, fh: int) -> None:
        node = self.handles.flushing(fh)
        if node is not None:
            self.state.check_utf8(node)

    @_guard
    async def fsync(self, fh: int, datasync: bool) -> None:
        node = self.handles.syncing(fh)
        if node is not None:
            store = self.state
            store.check_utf8(node)
            store.checkpoint()
            self.trail.sync_to_disk(store.store_id)

    @_guard
    async def release(self, fh: int) -> None:
        self.handles.release(fh)

    # -- directories ----------------------------------------------------------------
    @_guard
    async def opendir(self, inode: int, ctx: pyfuse3.RequestContext) -> Any:
        """A handle, or (patched pyfuse3) a FileInfo that lets the kernel keep the
        listing; `Any` because the stock stub says int."""
        fh = self.handles.opendir(inode)
        if self.cache_readdir:
            return _FileInfo(fh=fh, keep_cache=True, cache_readdir=True)
        return fh

    @_guard
    async def readdir(self, fh: int, start_id: int, token: pyfuse3.ReaddirToken) -> None:
        node, names = self.handles.listing(fh, start_id)
        for index in range(start_id, len(names)):
            name = names[index]
            dots = name in (".", "..")
            if dots:
                child = node if name == "." else (node.parent or node)
            else:
                # What the name means now: an entry removed since opendir is skipped
                # (never handed to the kernel as a live dentry); a replaced one shows
                # its replacement. Either way no other entry moves.
                current = (node.children or {}).get(name)
                if current is None:
                    continue
                child = current
            shown = name if dots else local_name(name)
            if not pyfuse3.readdir_reply(
                token, shown.encode("utf-8", "surrogateescape"), self.attrs(child), index + 1
            ):
                return
            if not dots:  # the kernel takes no reference for . and ..
                child.lookups += 1
        self.handles.listed(fh)

    @_guard
    async def releasedir(self, fh: int) -> None:
        self.handles.releasedir(fh)

    @_guard
    async def fsyncdir(self, fh: int, datasync: bool) -> None:
        if self.handles.syncs_dir(fh):
            self.state.checkpoint()

    @_guard
    async def statfs(self, ctx: pyfuse3.RequestContext) -> pyfuse3.StatvfsData:
        """The store's limits as the size, its memories as the use: running totals
        (`Tree.usage`), in 512-byte units so that small memories show (in 4 KiB
        ones, `df` said 0 used for any store of small files)."""
        s = pyfuse3.StatvfsData()
        used_files = self.tree.usage.files
        used_bytes = self.tree.usage.bytes
        capacity = MAX_MEMORIES_PER_STORE
        s.f_bsize = 4096
        s.f_frsize = 512
        s.f_blocks = capacity * MAX_CONTENT_BYTES // 512
        used = -(-used_bytes // 512)
        s.f_bfree = s.f_bavail = max(0, s.f_blocks - used)
        s.f_files = capacity
        s.f_ffree = s.f_favail = max(0, capacity - used_files)
        s.f_namemax = 255
        return s

    def statistics(self) -> FuseStatistics:
        """What `memfs status` shows of the FUSE side (mount-wide)."""
        return FuseStatistics(
            fuse_requests=dict(sorted(self.requests.items())),
            pyfuse3=Pyfuse3Build(
                version=_pyfuse3_version(),
                noflush=NOFLUSH,
                cache_readdir=CACHE_READDIR,
                zero_message_opens=ZERO_MESSAGE_OPENS,
                noflush_used=self.noflush,
                cache_readdir_used=self.cache_readdir,
                zero_message_opens_used=self.handles.files_by_inode,
                read_spin=READ_SPIN,
                read_spin_us=self.read_spin_us,
            ),
            negative_entries=self.tree.negatives.statistics(),
            xattrs=self.xattrs.enabled,
            close_watch=None if self.close_watch is None else self.close_watch.statistics(),
        )

    # -- xattrs (memfs/mount/xattrs.py) ------------------------------------------------
    @_guard
    async def getxattr(self, inode: int, name: bytes, ctx: pyfuse3.RequestContext) -> bytes:
        return self.xattrs.get(inode, name)

    @_guard
    async def listxattr(self, inode: int, ctx: pyfuse3.RequestContext) -> Sequence[bytes]:
        return self.xattrs.names(inode)

    @_guard
    async def setxattr(
        self, inode: int, name: bytes, value: bytes, ctx: pyfuse3.RequestContext
    ) -> None:
        self.xattrs.set(inode)

    @_guard
    async def removexattr(self, inode: int, name: bytes, ctx: pyfuse3.RequestContext) -> None:
        self.xattrs.remove(inode, name)


@dataclass(frozen=True)
class FuseStatistics:
    """The FUSE side of `memfs status` (`MemFs.statistics`); memfs/mount/answers.py puts
    it in the `status` answer."""

    fuse_requests: dict[str, int]  # handler name -> requests, sorted by name
    pyfuse3: Pyfuse3Build
    negative_entries: NegativeStatistics
    xattrs: bool  # False with --no-xattrs: every xattr request answers ENOSYS
    close_watch: CloseWatchStatistics | None  # zero-message opens on a writable mount
