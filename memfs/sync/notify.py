"""Kernel cache invalidation, as the sync engine sees it: a protocol and a null one.

The engine queues entries and inodes a pull changed; the mount's `KernelNotifier`
(memfs/mount/notifier.py) hands them to the kernel.

`pyfuse3.invalidate_inode` and `invalidate_entry` block until the kernel has dropped
what it cached, and the kernel may call back into this process to do so; they therefore
run in a worker thread, never on the event loop (invariant 4 in docs/concurrency.md).
Entries are queued by `invalidate_entries` and dropped, together with the inodes, when
the sync task awaits `invalidate_inodes`: a pass is not reported done before the kernel
has forgotten what the pass changed, so `memfs sync; cat …` never shows stale data.
Until then a changed file is shown as the kernel last saw it; `unveil` ends that for
each inode right before the kernel is told (memfs/state/veils.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

# Called with each inode right before the kernel is told of it: the state stops showing
# the file as the kernel last saw it (`Veils.drop`, memfs/state/veils.py).
Unveil = Callable[[int], None]


class Notifier(Protocol):
    async def invalidate_inodes(self, inodes: list[int], unveil: Unveil) -> None: ...

    def invalidate_entries(self, entries: list[tuple[int, str]]) -> None: ...


class NullNotifier:
    """For tests without a kernel: records what would have been invalidated."""

    def __init__(self) -> None:
        self.inodes: list[int] = []
        self.entries: list[tuple[int, str]] = []

    async def invalidate_inodes(self, inodes: list[int], unveil: Unveil) -> None:
        for ino in inodes:
            unveil(ino)
        self.inodes.extend(inodes)

    def invalidate_entries(self, entries: list[tuple[int, str]]) -> None:
        self.entries.extend(entries)
