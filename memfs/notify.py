"""Kernel cache invalidation after a pull changed what the kernel may have cached.

`pyfuse3.invalidate_inode` blocks until the kernel has dropped the pages, and the
kernel may call back into this process to do so; it therefore runs in a worker thread,
never on the event loop (invariant 4 in docs/concurrency.md).
"""

from __future__ import annotations

import logging
from typing import Protocol

import pyfuse3
import trio

log = logging.getLogger("memfs.notify")


class Notifier(Protocol):
    async def invalidate_inodes(self, inodes: list[int]) -> None: ...

    def invalidate_entries(self, entries: list[tuple[int, str]]) -> None: ...


class KernelNotifier:
    async def invalidate_inodes(self, inodes: list[int]) -> None:
        if inodes:
            await trio.to_thread.run_sync(self._invalidate_inodes, inodes)

    @staticmethod
    def _invalidate_inodes(inodes: list[int]) -> None:
        for ino in inodes:
            try:
                pyfuse3.invalidate_inode(ino, False)
            except OSError:
                pass  # the kernel did not know it: nothing cached

    def invalidate_entries(self, entries: list[tuple[int, str]]) -> None:
        for parent, name in entries:
            try:
                pyfuse3.invalidate_entry_async(parent, name.encode("utf-8"),
                                               ignore_enoent=True)
            except Exception:  # the queue is best effort; the timeout bounds staleness
                log.debug("entry invalidation failed parent=%s", parent, exc_info=True)


class NullNotifier:
    """For tests without a kernel: records what would have been invalidated."""

    def __init__(self) -> None:
        self.inodes: list[int] = []
        self.entries: list[tuple[int, str]] = []

    async def invalidate_inodes(self, inodes: list[int]) -> None:
        self.inodes.extend(inodes)

    def invalidate_entries(self, entries: list[tuple[int, str]]) -> None:
        self.entries.extend(entries)
