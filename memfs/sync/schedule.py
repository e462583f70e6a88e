"""Push soon: a local change starts a pass about a second after it settles.

Without this a change waits for the next interval (15 s by default) before another
session can see it. `StoreState` tells `PushSoon.changed` of every local change (its
`on_change` hook) and this decides when the change has settled:

- at the writer's close (or a change no close follows: a rename, an unlink), after
  `AFTER_CLOSE` seconds, so a tool that writes several files in a row is one pass;
- a write to a file still open for write: nothing, its close will come (the interval
  stays the fallback for a file held open);
- without tracked writers (zero-message opens: no close is seen), once no write came
  for the planner's quiet spell (`plan.WRITE_QUIET_NS`), which is when it pushes.

Every further change moves the pass later (coalesced), and passes started here are at
least `MIN_GAP` seconds apart: a steady stream of small writes costs at most one pass
(one head request, a listing, the uploads) per `MIN_GAP`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import trio

from memfs.state.node import Node
from memfs.state.store_state import ChangeKind
from memfs.sync.plan import WRITE_QUIET_NS

AFTER_CLOSE = 0.2  # seconds from a settled change to its pass
MIN_GAP = 1.0  # seconds between two passes started by local changes


@dataclass(frozen=True)
class PushSoonStatistics:
    changes: int  # local changes heard of
    passes: int  # passes started for them


class PushSoon:
    """Decides when local changes have settled, and wakes the pass loop then."""

    def __init__(self, wake: Callable[[], None], *, writers_tracked: Callable[[], bool]) -> None:
        self._wake = wake
        self._writers_tracked = writers_tracked
        self._due: float | None = None  # trio time of the next pass, None: nothing waits
        self._armed = trio.Event()
        self._last_pass = -MIN_GAP
        self._changes = 0
        self._passes = 0

    def statistics(self) -> PushSoonStatistics:
        return PushSoonStatistics(self._changes, self._passes)

    def changed(self, node: Node | None, kind: ChangeKind) -> None:
        """A local change (called from FUSE handlers, on the event loop; never awaits)."""
        tracked = self._writers_tracked()
        if kind in ("write", "create") and tracked and (kind == "create" or node_open(node)):
            return  # the writer's close says when it is done
        if kind in ("write", "create") and not tracked:
            delay = WRITE_QUIET_NS / 1e9 + 0.05
        else:
            delay = AFTER_CLOSE
        self._changes += 1
        self._due = trio.current_time() + delay
        self._armed.set()

    def recheck(self) -> None:
        """A pass owed to no local change (the watch echoed our own upload, and another
        session's change may hide behind it): the same settling and gap as a change,
        and not counted as one."""
        now = trio.current_time()
        self._due = max(self._due or now, now + AFTER_CLOSE)
        self._armed.set()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        while True:
            await self._armed.wait()
            while True:  # until no change moved the pass later meanwhile
                due = self._due
                assert due is not None
                await trio.sleep_until(max(due, self._last_pass + MIN_GAP))
                if self._due == due:
                    break
            self._armed = trio.Event()
            self._due = None
            self._last_pass = trio.current_time()
            self._passes += 1
            self._wake()


def node_open(node: Node | None) -> bool:
    return node is not None and node.open_writers > 0
