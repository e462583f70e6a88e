"""Kernel cache invalidation, as the sync engine sees it: a protocol and a null one.

The engine queues entries and inodes a pull changed; the mount's `KernelNotifier`
(memfs/mount/notifier.py) hands them to the kernel.

`pyfuse3.invalidate_inode` and `invalidate_entry` block until the kernel has dropped
what it cached, and the kernel may call back into this process to do so; they therefore
run in a worker thread, never on the event loop (invariant 4 in docs/concurrency.md).
Entries are queued by `invalidate_entries` and dropped, together with the inodes, when
the sync task awaits `invalidate_inodes`: a pass is not reported done before the kernel
has forgotten what the pass changed, so `memfs sync; cat …` never shows stale data.
"""

from __future__ import annotations

from typing import Protocol


class Notifier(Protocol):
    async def invalidate_inodes(self, inodes: list[int]) -> None: ...

    def invalidate_entries(self, entries: list[tuple[int, str]]) -> None: ...


class NullNotifier:
    """For tests without a kernel: records what would have been invalidated."""

    def __init__(self) -> None:
        self.inodes: list[int] = []
        self.entries: list[tuple[int, str]] = []

    async def invalidate_inodes(self, inodes: list[int]) -> None:
        self.inodes.extend(inodes)

    def invalidate_entries(self, entries: list[tuple[int, str]]) -> None:
        self.entries.extend(entries)
