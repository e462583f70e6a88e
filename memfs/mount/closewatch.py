"""A writer's close on a mount with zero-message opens, where no RELEASE comes.

The kernel sends no OPEN, RELEASE or FLUSH once `open` answered ENOSYS, but it still
reports each close of a file opened for writing to fanotify (`FAN_CLOSE_WRITE`, with
the closing process), at no FUSE request once the first OPEN and FLUSH were answered
ENOSYS: the event's descriptor is then opened without an OPEN and closed without a
FLUSH. The kernel opens it inside read(2), so the queue is read in a worker thread. The
daemon marks its own mount and hands each close to `MemFs.writer_closed`, which settles
the change as a RELEASE did: push soon sends it 0.2 s later (docs/sync.md).

fanotify with a mount mark needs CAP_SYS_ADMIN (a daemon running as root, as on the
worker path). Without it the watch says so once and the mount keeps the quiet spell
(`plan.WRITE_QUIET_NS`) as the only sign that a write is done (docs/reliability.md §3).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import select
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import trio

from memfs.logs import Repeated

log = logging.getLogger(__name__)

FAN_CLOEXEC = 0x01
FAN_NONBLOCK = 0x02
FAN_CLASS_NOTIF = 0x00
FAN_MARK_ADD = 0x01
FAN_MARK_MOUNT = 0x10
FAN_CLOSE_WRITE = 0x08
FAN_Q_OVERFLOW = 0x4000
AT_FDCWD = -100
# struct fanotify_event_metadata: event_len, vers, reserved, metadata_len, mask, fd, pid
_EVENT = struct.Struct("=IBBHQii")
_READ_SIZE = 64 * 1024
DRAIN_READS = 64  # reads a drain takes at most (each up to _READ_SIZE of events)
FAILED_READ_PAUSE = 0.1  # seconds after a failed read before the next
JOIN_TIMEOUT = 2.0  # seconds the teardown waits for the reader thread

_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
_libc.fanotify_init.argtypes = [ctypes.c_uint, ctypes.c_uint]
_libc.fanotify_init.restype = ctypes.c_int
_libc.fanotify_mark.argtypes = [
    ctypes.c_int,
    ctypes.c_uint,
    ctypes.c_uint64,
    ctypes.c_int,
    ctypes.c_char_p,
]
_libc.fanotify_mark.restype = ctypes.c_int


@dataclass(frozen=True)
class CloseWatchStatistics:
    active: bool  # the mount is marked: each writer's close is seen
    closes: int  # closes of a writer seen
    overflows: int  # times the kernel's queue overflowed (closes lost; the quiet spell holds)


def _check(result: int, what: str) -> int:
    if result < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")
    return result


def parse(buf: bytes) -> list[tuple[int, int, int]]:
    """The events in one read: (mask, fd, pid) each; fd is -1 for an overflow."""
    events = []
    at = 0
    while at + _EVENT.size <= len(buf):
        length, _vers, _res, _meta_len, mask, fd, pid = _EVENT.unpack_from(buf, at)
        if length < _EVENT.size:
            break  # malformed: never from a kernel that speaks this version
        events.append((mask, fd, pid))
        at += length
    return events


def inode_of(fd: int) -> int | None:
    """The inode of an event's descriptor, from procfs: no FUSE request (an fstat
    would ask the daemon for the attributes the write made stale)."""
    try:
        with open(f"/proc/self/fdinfo/{fd}", "rb") as f:
            for line in f:
                if line.startswith(b"ino:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return None


class CloseWatch:
    """Reads `FAN_CLOSE_WRITE` for one mount and calls `on_close(inode)` on the loop."""

    def __init__(self, mountpoint: str, on_close: Callable[[int], None]) -> None:
        self.mountpoint = mountpoint
        self.on_close = on_close
        self._fd = -1
        self._closes = 0
        self._overflows = 0
        self._lock = threading.Lock()  # one reader of the queue at a time (`drain`)
        self._overflowed = Repeated(
            log,
            "close watch queue overflowed; those writes are pushed after a quiet spell "
            "mountpoint=%s",
        )

    def statistics(self) -> CloseWatchStatistics:
        return CloseWatchStatistics(self._fd >= 0, self._closes, self._overflows)

    def _open(self) -> int:
        fd = _check(
            _libc.fanotify_init(FAN_CLASS_NOTIF | FAN_CLOEXEC | FAN_NONBLOCK, os.O_RDONLY),
            "fanotify_init",
        )
        try:
            # In a thread (the caller's): the path walk may ask this daemon for the root.
            _check(
                _libc.fanotify_mark(
                    fd,
                    FAN_MARK_ADD | FAN_MARK_MOUNT,
                    FAN_CLOSE_WRITE,
                    AT_FDCWD,
                    os.fsencode(self.mountpoint),
                ),
                "fanotify_mark",
            )
        except BaseException:
            os.close(fd)
            raise
        return fd

    async def run(self, *, task_status: trio.TaskStatus[bool] = trio.TASK_STATUS_IGNORED) -> None:
        """Started when the mount exists; `started(False)` when the kernel refuses."""
        try:
            self._fd = await trio.to_thread.run_sync(self._open)
        except OSError as e:
            log.warning(
                "no close watch; a write is pushed after a quiet spell, not at its "
                "close mountpoint=%s error=%s",
                self.mountpoint,
                e.strerror,
            )
            task_status.started(False)
            return
        task_status.started(True)
        try:
            await self._read_loop()
        finally:
            os.close(self._fd)
            self._fd = -1

    async def _read_loop(self) -> None:
        """A thread of its own blocks on the queue: the kernel opens each event's file
        inside read(2), which may ask this daemon (an OPEN, until it has been answered
        ENOSYS once) and a close may flush it, so neither can run on the loop; and a
        thread that waits for the kernel costs each close one wake-up of the loop, where
        a worker thread per read cost three."""
        token = trio.lowlevel.current_trio_token()
        wake_r, wake_w = os.pipe()
        thread = threading.Thread(
            target=self._reader, args=(token, wake_r), name="memfs-close-watch", daemon=True
        )
        thread.start()
        try:
            await trio.sleep_forever()
        finally:
            os.write(wake_w, b"x")
            with trio.CancelScope(shield=True):  # it may wait for this loop to answer
                await trio.to_thread.run_sync(thread.join, JOIN_TIMEOUT)
            os.close(wake_r)
            os.close(wake_w)

    def _reader(self, token: trio.lowlevel.TrioToken, wake: int) -> None:
        while True:
            ready, _, _ = select.select([self._fd, wake], [], [])
            if wake in ready:
                return
            with self._lock:
                closes, overflows, read = _read_events(self._fd)
                if closes or overflows:
                    token.run_sync_soon(self._deliver, closes, overflows)
            if read is None:
                time.sleep(FAILED_READ_PAUSE)  # not a busy loop while it fails

    async def drain(self) -> None:
        """Take every close queued now: a close(2) queues its event before it returns,
        so a pass someone asks for after it (`memfs sync`) sees it (`StoreSync.sync_now`).
        Under the reader's lock: a batch it read earlier has been handed to the loop
        already, and is delivered before this (the loop runs them in order)."""
        if self._fd >= 0:
            closes, overflows = await trio.to_thread.run_sync(self._drain)
            self._deliver(closes, overflows)

    def _drain(self) -> tuple[list[int], int]:
        closes: list[int] = []
        overflows = 0
        with self._lock:
            for _ in range(DRAIN_READS):
                more, lost, read = _read_events(self._fd)
                closes += more
                overflows += lost
                if not read:
                    break
        return closes, overflows

    def _deliver(self, closes: list[int], overflows: int) -> None:
        """On the loop: each close to `on_close`."""
        if overflows:
            self._overflows += overflows
            self._overflowed.warning("overflow", self.mountpoint)
        for ino in closes:
            self._closes += 1
            self.on_close(ino)


def _read_events(fanotify_fd: int) -> tuple[list[int], int, bool | None]:
    """One read of the queue (in a worker thread): the inodes closed, overflows, and
    whether anything was read (None: the read failed). Each event's descriptor is
    closed here too (a close may send FLUSH, until answered ENOSYS once)."""
    try:
        buf = os.read(fanotify_fd, _READ_SIZE)
    except BlockingIOError:
        return [], 0, False
    except OSError:
        # The kernel could not open an event's file (the connection is gone: ENOTCONN
        # at an abort): that event is dropped. A close lost so is pushed after the
        # quiet spell.
        return [], 0, None
    closes, overflows = [], 0
    for mask, fd, _pid in parse(buf):
        if mask & FAN_Q_OVERFLOW:
            overflows += 1
        if fd < 0:
            continue
        try:
            ino = inode_of(fd)
        finally:
            os.close(fd)
        if ino is not None and mask & FAN_CLOSE_WRITE:
            closes.append(ino)
    return closes, overflows, True
