"""Files a pull changed that the kernel has not been told of yet, shown as they were.

A pull lands on the event loop; the kernel hears of it a thread hop later
(`Lander.flush_invalidations`, invariant 4 of docs/concurrency.md). In between, the
kernel still holds the file's old size: a READ answered with the new bytes is cut to
it (a landing one byte longer loses the last newline to a reader), and a GETATTR
answered with the new size disagrees with the pages it cached. So until the kernel is
told, the FUSE handlers answer a landed file as the kernel last saw it (its bytes and
times, a `Veil`), and the notifier drops the veil right before it invalidates the inode
(`drop`, safe from its worker thread: one dict operation). A local change drops it too:
a writer works on the file as it now is.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from memfs.state.node import Node

# At most this many files are veiled at once (each at most the store's content limit);
# a pass that changes more leaves the rest as before: new bytes, the kernel told after.
VEILED_FILES = 64


@dataclass(frozen=True, slots=True)
class Veil:
    """A file as the kernel last saw it: its bytes and times."""

    data: bytes
    mtime_ns: int
    ctime_ns: int


class Veils:
    def __init__(self) -> None:
        self._by_ino: dict[int, Veil] = {}

    def before(self, node: Node, content: Callable[[Node], bytes | None]) -> Veil | None:
        """The veil for `node`, which a pull is about to change: the one it has (the
        kernel has not seen that landing either), or, if the kernel may have cached the
        file, its `content` and times now. None when there is nothing to keep."""
        kept = self._by_ino.get(node.ino)
        if kept is not None:
            return kept
        if node.lookups == 0 or len(self._by_ino) >= VEILED_FILES:
            return None
        data = content(node)
        return None if data is None else Veil(data, node.mtime_ns, node.ctime_ns)

    def put(self, node: Node, veil: Veil | None) -> None:
        if veil is not None:
            self._by_ino[node.ino] = veil

    def get(self, ino: int) -> Veil | None:
        return self._by_ino.get(ino)

    def drop(self, ino: int) -> None:
        """The kernel is about to be told (or a writer changed the file): show it as it
        is. Called from the notifier's worker thread as well as the event loop."""
        self._by_ino.pop(ino, None)

    def __len__(self) -> int:
        return len(self._by_ino)
