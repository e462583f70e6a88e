"""The mount's open files and directories: what a file handle (`fh`) names in each of
the three modes a mount runs in, and the bookkeeping each mode keeps. `MemFs` handlers
ask `Handles` and run one path in all three.

- Open requests (`--open-requests`, a stock pyfuse3, or a kernel that cannot skip OPEN):
  OPEN, CREATE and OPENDIR hand out handles numbered here, RELEASE and RELEASEDIR drop
  them; a `FileHandle` says what was opened, how, and by whom.
- Zero-message opens on a mount the VFS holds read-only: OPEN, OPENDIR and FLUSH answer
  ENOSYS once, after which the kernel sends none of them (nor RELEASE, RELEASEDIR), and
  the patched pyfuse3 hands READ and READDIR the inode in place of the file handle 0.
  Nothing is tracked.
- Zero-message opens on a writable mount (the default there): as above, and WRITE gets
  the inode too (a CREATE answers file handle 0: the kernel sends no RELEASE without
  OPEN). What an open told comes with each WRITE instead: its flags (O_APPEND), its
  sender (the audit trail's writer, again after each close and once per burst of one
  process) and, from the close watch, the writer's close (`writer_closed`).
"""

from __future__ import annotations

import errno
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple

import pyfuse3
from cachetools import LRUCache

from memfs.audit import command_name
from memfs.errors import FsError
from memfs.state.node import Kind, Node
from memfs.state.store_state import StoreState

# Zero-message writes: writes of one process to one file this close together are one
# "write" line in the audit trail (what one open's writes were).
WRITER_BURST_S = 1.0


@dataclass(eq=False)
class FileHandle:
    node: Node
    writable: bool
    append: bool
    # Who opened it for writing: pyfuse3 gives `write` no request context, so the
    # audit trail names the opener (memfs/audit.py); `wrote` coalesces writes per open.
    pid: int = 0
    uid: int = 0
    comm: str = ""
    wrote: bool = False


@dataclass(eq=False)
class DirHandle:
    node: Node
    names: list[str] = field(default_factory=list)


class Write(NamedTuple):
    """Where a WRITE lands, as its handle (or the inode and the WRITE's flags) says."""

    node: Node
    offset: int
    handle: FileHandle | None  # None: zero-message opens, no open behind the write
    moved: bool  # an O_APPEND write moved to memfs's end: the kernel's size was stale


# Who the audit trail names for a write: pid, uid, command name.
Writer = tuple[int, int, str]


def listing(node: Node) -> list[str]:
    """A directory's names as READDIR hands them out, offset by offset."""
    assert node.children is not None
    return [
        ".",
        "..",
        *sorted(node.children, key=lambda n: n.encode("utf-8", "surrogateescape")),
    ]


class Handles:
    """The handle table and the per-mode decisions of the file and directory handlers.

    `mutable` is the store a mutation goes to or the errno that refuses it, `directory`
    the directory an inode names or ENOENT/ENOTDIR (both `MemFs`'s)."""

    def __init__(
        self,
        state: StoreState,
        *,
        read_only_vfs: bool,
        mutable: Callable[[], StoreState],
        directory: Callable[[int], Node],
    ) -> None:
        self.state = state
        self.tree = state.tree
        self.read_only_vfs = read_only_vfs
        self._mutable = mutable
        self._directory = directory
        self.files_by_inode = False  # OPEN answers ENOSYS; fh is the inode
        self.dirs_by_inode = False  # OPENDIR answers ENOSYS; fh is the inode
        self._handles: dict[int, FileHandle | DirHandle] = {}
        self._next_fh = 1
        # Zero-message writes: the last writer the trail named per inode, and when it
        # last wrote (one "write" line per burst of one process, as per open before).
        # Bounded: an inode dropped from it only costs one more "write" line.
        self._writers: LRUCache[int, tuple[int, float]] = LRUCache(maxsize=4096)
        # Zero-message readdir: the names of a listing, taken when it starts at offset 0,
        # so offsets stay stable across its READDIRs (what a DirHandle keeps otherwise).
        self._listings: dict[int, list[str]] = {}

    @property
    def writes_by_inode(self) -> bool:
        """Writes come with no open behind them: no OPEN or RELEASE says who writes."""
        return self.files_by_inode and not self.read_only_vfs

    def _add(self, handle: FileHandle | DirHandle) -> int:
        fh = self._next_fh
        self._next_fh += 1
        self._handles[fh] = handle
        return fh

    def _file(self, fh: int) -> FileHandle:
        handle = self._handles.get(fh)
        if not isinstance(handle, FileHandle):
            raise FsError(errno.EBADF)
        return handle

    # -- files ----------------------------------------------------------------------
    def refuse_open(self) -> None:
        """ENOSYS with zero-message opens: the kernel stops sending OPEN."""
        if self.files_by_inode:
            raise FsError(errno.ENOSYS, "zero-message opens")

    def open(self, node: Node, *, writing: bool, append: bool, writer: Writer | None) -> int:
        """A handle on `node`, opened by `writer` (None for a reader)."""
        handle = FileHandle(node, writing, append)
        if writer is not None:
            handle.pid, handle.uid, handle.comm = writer
        self.state.opened(node, writing=writing)
        return self._add(handle)

    def create(self, node: Node, *, append: bool, writer: Writer) -> int:
        """The handle of a file just created, opened for writing."""
        if self.files_by_inode:
            # fh 0, like every other open here: the kernel sends no RELEASE without
            # OPEN, so a handle would never be closed. Writes then carry the inode.
            return 0
        self.state.opened(node, writing=True)
        return self._add(FileHandle(node, True, append, *writer))

    def reading(self, fh: int) -> Node:
        """The file a READ reads."""
        return self.tree.get(fh) if self.files_by_inode else self._file(fh).node

    def write(self, fh: int, off: int, flags: int | None) -> Write:
        """Where a WRITE lands, or why it may not: a handle opened for reading only is
        EBADF; with no open behind the write, what `open` refused is refused here and
        an O_APPEND write (its flags say so) lands at memfs's end of the file."""
        if not self.files_by_inode:
            handle = self._file(fh)
            if not handle.writable:
                raise FsError(errno.EBADF)
            node = handle.node
            return Write(node, node.size if handle.append else off, handle, False)
        node = self.tree.get(fh)
        if node.kind is Kind.MARKER:
            self._mutable()  # EROFS first, as `open` answered
            raise FsError(errno.EPERM, "the marker file is read-only")
        moved = False
        if flags is not None and flags & os.O_APPEND:
            # The kernel wrote at its size, which a pull since its last GETATTR left
            # stale: the append goes to the end memfs has, and the kernel forgets the
            # pages and size it guessed.
            moved, off = off != node.size, node.size
        return Write(node, off, None, moved)

    def writer(self, write: Write, ctx: pyfuse3.RequestContext | None) -> Writer | None:
        """Who the audit trail names for a write done, or None when it named them
        already: once per open, or with no open behind it (the WRITE's sender), once
        per burst of one process and again after each close."""
        handle = write.handle
        if handle is not None:
            if handle.wrote:
                return None
            handle.wrote = True  # one line per open, before the first write is answered
            return handle.pid, handle.uid, handle.comm
        if ctx is None:
            return None
        ino = write.node.ino
        now = time.monotonic()
        last = self._writers.get(ino)
        named = None
        if last is None or last[0] != ctx.pid or now - last[1] >= WRITER_BURST_S:
            named = ctx.pid, ctx.uid, command_name(ctx.pid)
        self._writers[ino] = (ctx.pid, now)
        return named

    def writer_closed(self, ino: int) -> None:
        """A writer closed the file (the close watch, with zero-message opens): its
        change settles now, and the next write is a new open's, which the trail names
        again."""
        self._writers.pop(ino, None)
        node = self.tree.nodes.get(ino)
        if node is not None and node.kind is Kind.FILE:
            self.state.writer_closed(node)

    def flushing(self, fh: int) -> Node | None:
        """The file whose content a FLUSH checks (a writer's), None for a reader's;
        ENOSYS with zero-message opens."""
        if self.files_by_inode:
            # Once ENOSYS, the kernel sends no FLUSH again: a close costs nothing, and
            # EILSEQ moves from close to fsync and the push (docs/reliability.md).
            raise FsError(errno.ENOSYS, "zero-message opens: no flush")
        handle = self._file(fh)
        return handle.node if handle.writable else None

    def syncing(self, fh: int) -> Node | None:
        """The file whose changes an FSYNC makes durable, None when the handle has
        nothing of its own to sync (a reader's, or any on a read-only VFS)."""
        if self.files_by_inode:
            node = self.tree.get(fh)
            ours = not self.read_only_vfs and node.dirty  # nothing of its own otherwise
        else:
            handle = self._file(fh)
            node, ours = handle.node, handle.writable
        return node if ours else None

    def release(self, fh: int) -> None:
        handle = self._handles.pop(fh, None)
        if not isinstance(handle, FileHandle):
            return
        node = handle.node
        self.state.closed(node, writing=handle.writable)
        self.tree.maybe_drop(node)

    # -- directories ----------------------------------------------------------------
    def opendir(self, inode: int) -> int:
        """A handle on the directory `inode`; ENOSYS with zero-message opens."""
        if self.dirs_by_inode:
            raise FsError(errno.ENOSYS, "zero-message opens")  # the kernel stops asking
        node = self._directory(inode)
        # A snapshot of the names makes offsets stable for the life of the handle.
        return self._add(DirHandle(node, listing(node)))

    def listing(self, fh: int, start_id: int) -> tuple[Node, list[str]]:
        """The directory a READDIR lists and the names its offsets index."""
        if self.dirs_by_inode:
            node = self._directory(fh)
            if start_id == 0 or fh not in self._listings:
                self._listings[fh] = listing(node)
            return node, self._listings[fh]
        handle = self._handles.get(fh)
        if not isinstance(handle, DirHandle):
            raise FsError(errno.EBADF)
        return handle.node, handle.names

    def listed(self, fh: int) -> None:
        """A READDIR handed out the listing's last name."""
        if self.dirs_by_inode:
            self._listings.pop(fh, None)  # the listing is complete

    def releasedir(self, fh: int) -> None:
        self._handles.pop(fh, None)

    def syncs_dir(self, fh: int) -> bool:
        """An FSYNCDIR has something to make durable (not on a read-only VFS)."""
        if self.dirs_by_inode:
            self.tree.get(fh)  # ENOENT for an inode unknown here
            known = True
        else:
            known = isinstance(self._handles.get(fh), DirHandle)
        return known and not self.read_only_vfs
