"""Learn soon: how a mount hears that another session changed its store.

Three ways, best first (docs/sync.md, "Learning of remote changes"):

- **watch**: `memfs serve` offers a long poll on the store's newest version (its
  "watch", docs/server.md). One stays open per store; when it answers with a new head the
  pass loop wakes. While it is open, an idle mount makes no other request.
- **probe**: without the watch (the hosted API: a server that refused it once) or
  while it is broken (a restarted instance, a refusal over its bound), the pass loop
  itself probes: an idle pass is one request for the store's newest version. It runs
  `FAST` seconds apart while the mount or the store was active in the last
  `ACTIVE_WINDOW` seconds, then twice as far apart each time up to the interval. Probes
  sooner than the interval spend tokens of a bucket that refills `budget` per
  store-hour (`--probe-budget`); an empty bucket means the interval.
- **interval**: `--probe-budget 0` and no watch: a pass each interval, as before.

A broken watch is tried again after `RETRY` seconds (doubling up to `RETRY_MAX`); once
it answers the loop probes no more, and passes once if the head moved meanwhile. A watch
that answers what no watch answers (past its bound, not JSON, no usable head: a hostile
or broken server) is not tried again: the mount probes, with one warning.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Literal

import trio
from cachetools import LRUCache

from memfs.config import DEFAULT_PROBE_BUDGET
from memfs.errors import StoreError, StoreUnavailable
from memfs.store.client import StoreClient

log = logging.getLogger("memfs.sync")

Mode = Literal["watch", "probe", "interval"]

FAST = 1.0  # seconds between probes while active
ACTIVE_WINDOW = 30.0  # seconds after the last change (here or in the store) that count as active
WATCH_SECONDS = 25.0  # how long one watch request waits on the server
RETRY = 5.0  # seconds before a broken watch is tried again (doubling)
RETRY_MAX = 60.0
OWN_VERSIONS = 4096  # the own uploads' versions remembered (more only costs a pass)
UPLOAD_WAIT = 2.0  # seconds a new head waits for the running pass (its uploads) to end


@dataclass(frozen=True)
class Moved:
    """How the watch saw the head move: from `after`, through `newer` (the versions
    after it, newest first, as (id, created_at); None if the server named none)."""

    after: str | None
    newer: tuple[tuple[str, str], ...] | None
    deletes: tuple[tuple[str, str], ...] = ()  # of `newer`: (version id, memory id)

    def own_delete(self, version_id: str, deleted: Callable[[str], bool]) -> bool:
        """`version_id` is a delete of a memory `deleted` says this mount deleted."""
        return any(v == version_id and deleted(m) for v, m in self.deletes)


@dataclass(frozen=True)
class ListenStatistics:
    """How this store's mount learns of changes (`memfs status`)."""

    mode: Mode
    last_heard_at: float | None  # time.time() of the store's last answer, None: never
    probes: int  # probes sooner than the interval since the mount started
    watch_wakeups: int  # passes the watch started
    own_echoes: int  # watch answers that were this mount's own upload (no pass at once)


class Listener:
    """Keeps the watch open, or paces the probing passes; one per store."""

    def __init__(
        self,
        client: StoreClient,
        store_id: str,
        wake: Callable[[str | None, Moved | None], None],
        *,
        uploads_done: Callable[[], Awaitable[None]] | None = None,
        interval: float,
        budget: int = DEFAULT_PROBE_BUDGET,
        use_watch: bool = True,
    ) -> None:
        self.client = client
        self.store_id = store_id
        self._wake = wake
        self._uploads_done = uploads_done or _nothing_in_flight
        self.interval = interval
        self.budget = budget
        self._use_watch = use_watch
        self._watching = False  # a watch answered and none failed since
        self._broken = False  # the watch broke (logged); its return is logged too
        self._tokens = float(budget)
        self._refilled: float | None = None  # trio time the bucket was last topped up
        self._active_at = -math.inf  # trio time of the last change seen on either side
        self._gap = FAST
        self._head: str | None = None
        self._heads_seen = 0
        self._last_heard: float | None = None
        self._probes = 0
        self._wakeups = 0
        # Versions this mount's own uploads made (`wrote`), newest last, bounded: the
        # watch answering with one of them is the echo of our own push.
        self._own: LRUCache[str, None] = LRUCache(maxsize=OWN_VERSIONS)
        # Memories this mount's own deletes removed (`deleted`): a delete's answer names
        # no version, so its echo is known by the memory the watch names.
        self._own_deletes: LRUCache[str, None] = LRUCache(maxsize=OWN_VERSIONS)
        self._echoes = 0

    def statistics(self) -> ListenStatistics:
        return ListenStatistics(
            self.mode, self._last_heard, self._probes, self._wakeups, self._echoes
        )

    @property
    def mode(self) -> Mode:
        if self._watching:
            return "watch"
        return "probe" if self.budget > 0 else "interval"

    # -- what the engine tells -----------------------------------------------------------
    def local_change(self) -> None:
        """The mount changed a file: probe fast for a while."""
        self._active_at = trio.current_time()
        self._gap = FAST

    def wrote(self, version_id: str) -> None:
        """An upload of this mount made `version_id` (`Pusher._pushed`)."""
        self._own[version_id] = None

    def deleted(self, memory_id: str) -> None:
        """A delete of this mount removed `memory_id` (`Pusher._push_delete`)."""
        self._own_deletes[memory_id] = None

    def _deleted_here(self, memory_id: str) -> bool:
        return memory_id in self._own_deletes

    def is_own(self, version_id: str, moved: Moved | None = None) -> bool:
        """`version_id` is a version this mount's own upload or delete made (a delete
        known by the memory `moved` names): the watch answering with it is the echo of
        our own push."""
        if not self._made_here(version_id, moved):
            return False
        self._echoes += 1
        return True

    def all_own(self, moved: Moved) -> bool:
        """Every version `moved` names is one this mount's own upload or delete made."""
        return moved.newer is not None and all(self._made_here(v, moved) for v, _ in moved.newer)

    def _made_here(self, version_id: str, moved: Moved | None) -> bool:
        return version_id in self._own or (
            moved is not None and moved.own_delete(version_id, self._deleted_here)
        )

    def heard(self, head: str | None) -> None:
        """A pass reached the store and read its newest version id ("" if unknown)."""
        self._last_heard = time.time()
        if head != self._head:
            if self._heads_seen:
                self._active_at = trio.current_time()
                self._gap = FAST
            self._head = head
            self._heads_seen += 1

    def delay(self, *, work_left: bool, failing: bool) -> float:
        """Seconds until the next pass unless something wakes the loop first.

        `work_left`: a local change waits for a pass even without news. `failing`: the
        last pass failed; the next one comes at the interval, never sooner.
        """
        if failing:
            return self.interval
        if self._watching:
            return self.interval if work_left else math.inf
        if self.budget <= 0:
            return self.interval
        now = trio.current_time()
        if now - self._active_at > ACTIVE_WINDOW:
            self._gap = min(self.interval, self._gap * 2)
        gap = min(self.interval, self._gap)
        if gap >= self.interval:
            return self.interval
        self._refill(now)
        if self._tokens < 1:
            return self.interval
        self._tokens -= 1
        self._probes += 1
        return gap

    def _refill(self, now: float) -> None:
        if self._refilled is not None:
            earned = (now - self._refilled) * self.budget / 3600
            self._tokens = min(float(self.budget), self._tokens + earned)
        self._refilled = now

    # -- the watch ------------------------------------------------------------------------
    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Keep a watch open while the server offers one; return when it does not."""
        task_status.started()
        if not self._use_watch:
            return
        retry = RETRY
        while True:
            try:
                await self._watch()
            except StoreUnavailable as e:
                if self._watching:
                    log.warning(
                        "the watch broke; probing until it is back memory_store_id=%s error=%s",
                        self.store_id,
                        e,
                    )
                    self._broken = True
                    retry = RETRY
                self._watching = False
            except StoreError as e:
                self._watching = False
                if e.status is not None and e.status >= 400:
                    # 404 (or any refusal): no watch here, as on the hosted API
                    log.info(
                        "the store offers no watch; probing for changes memory_store_id=%s "
                        "probe_budget=%d",
                        self.store_id,
                        self.budget,
                    )
                else:  # an answer it cannot be (too large, not JSON, no usable head)
                    log.warning(
                        "the store's watch answered what no watch answers; probing for "
                        "changes instead memory_store_id=%s probe_budget=%d error=%s",
                        self.store_id,
                        self.budget,
                        e,
                    )
                return
            await trio.sleep(retry)
            retry = min(RETRY_MAX, retry * 2)

    async def _watch(self) -> None:
        """One watch session: the head now, then long polls until something fails."""
        head = await self.client.watch_head(self.store_id)
        self._last_heard = time.time()
        if self._broken:
            log.info("watching for changes again memory_store_id=%s", self.store_id)
            self._broken = False
        self._watching = True
        if head != self._head:
            self._wake_pass(head)  # it changed since the last pass read it (not watching)
        while True:
            answer = await self.client.watch(self.store_id, after=head, seconds=WATCH_SECONDS)
            self._last_heard = time.time()
            if answer.head != head:
                # A running pass's upload may have made it: its answer names the version
                # (the watch often answers first), and the pass's end says whether it
                # read the feed. Both tell an echo from news.
                with trio.move_on_after(UPLOAD_WAIT):
                    await self._uploads_done()
                self._wake_pass(answer.head, Moved(head, answer.newer, answer.deletes))
                head = answer.head

    def _wake_pass(self, head: str | None, moved: Moved | None = None) -> None:
        self._wakeups += 1
        self._wake(head, moved)


async def _nothing_in_flight() -> None:
    """No uploads to wait for (a listener without an engine)."""
