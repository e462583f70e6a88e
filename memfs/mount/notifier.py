"""The kernel side of `memfs.sync.notify.Notifier`: pyfuse3's invalidation calls.

They block until the kernel has dropped what it cached, and the kernel may call back into
this process to do so; they therefore run in a worker thread, never on the event loop
(invariant 4 in docs/concurrency.md).
"""

from __future__ import annotations

import pyfuse3
import trio

from memfs.paths import local_name
from memfs.sync.notify import Unveil


class KernelNotifier:
    def __init__(self) -> None:
        self._entries: list[tuple[int, str]] = []

    def invalidate_entries(self, entries: list[tuple[int, str]]) -> None:
        self._entries.extend(entries)

    async def invalidate_inodes(self, inodes: list[int], unveil: Unveil) -> None:
        entries, self._entries = self._entries, []
        if inodes or entries:
            await trio.to_thread.run_sync(self._invalidate, entries, inodes, unveil)

    @staticmethod
    def _invalidate(entries: list[tuple[int, str]], inodes: list[int], unveil: Unveil) -> None:
        for parent, name in entries:
            try:
                # The kernel knows a long name by its alias only.
                pyfuse3.invalidate_entry(parent, local_name(name).encode("utf-8"))
            except OSError:
                pass  # the kernel had no dentry for it: nothing cached
        for ino in inodes:
            # The new bytes from now on, then the kernel drops the old size and pages:
            # a read in between meets new bytes cut to the old size, for microseconds
            # (the other order could let the kernel cache the old bytes anew).
            unveil(ino)
            try:
                pyfuse3.invalidate_inode(ino, False)
            except OSError:
                pass  # the kernel did not know it: nothing cached
