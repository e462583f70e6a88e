"""What long work is doing, as plain data: a pass reports into a `Tracker`.

The sync engine owns one per store and never draws it; whoever faces a terminal does
(memfs.mount.display: the foreground daemon, or the CLI through the daemon's
`progress` op).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class Tracker:
    """What one piece of work is doing: `phase` ("" when idle), `done` of `total`."""

    phase: str = ""
    done: int = 0
    total: int | None = None
    watchers: list[Callable[[Tracker], None]] = field(default_factory=list, repr=False)
    last: Tracker | None = None  # where the phase that ended last ended (no watchers)

    def begin(self, phase: str, total: int | None = None) -> None:
        self.phase, self.done, self.total = phase, 0, total
        self._tell()

    def advance(self, n: int = 1) -> None:
        if self.phase:
            self.done += n
            self._tell()

    def end(self) -> None:
        if self.phase:
            self.last = Tracker(self.phase, self.done, self.total)
            self._tell(ended=True)
            self.phase, self.done, self.total = "", 0, None

    def _tell(self, *, ended: bool = False) -> None:
        for watch in list(self.watchers):
            watch(self if not ended else Tracker("", self.done, self.total))
