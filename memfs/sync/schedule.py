"""When a pass runs, and what kind: one pure decision over an injected clock.

The pass loop (`StoreSync.run`) tells the `Scheduler` what happened and asks it when the
next pass is due and what it does; nothing here awaits, sleeps or reads a clock of its
own, so every rule is tested in milliseconds (tests/unit/test_schedule.py). Times are
the caller's clock (trio's in the daemon), in seconds.

Kinds of pass, cheapest first (docs/sync.md, "Passes"):

- `probe`: one request for the store's newest version, when nothing else is owed and
  the mount learns of changes by probing; if the head moved, the pass reads the feed.
- `push`: local changes only, each with its precondition; no listing, no feed.
- `feed`: the versions since the cursor, applied; then every local change pushed.
- `full`: the whole listing (reconciliation): at start, when the feed cannot answer,
  every `feed.RECONCILE_EVERY`, and when asked (`memfs sync --full`).

What makes a pass due:

- a local change settles (`changed`): its writer's close or a change no close follows,
  `AFTER_CLOSE` later; each further change moves that later, but never past
  `MAX_DEFER` after the first change still waiting: a steady stream of writes gets a
  push at least that often;
- a file written while held open: the interval after its first such write (its close
  may never come);
- news (`heard`): another writer's version, at once; the echo of this mount's own upload
  `ECHO_DEFER` after the first such echo (a version of another writer may hide behind
  it), not moved later by further echoes;
- someone asks (`asked`, `memfs sync`): at once, exempt from the gap;
- a pass that left work (`done(left_over=True)`) or failed: the interval after it;
- a transient refusal's retry time (`retry_at`).

Passes are at least `MIN_GAP` apart whatever woke them (but an asked one), also the
first pass after a start (the start's own pass counts).

Within a pass, an upload gives way to the mount's own requests (`give_way`): once it
has its slot it starts when the mount has been quiet `QUIET_FOR_UPLOAD`, or after
`MAX_GIVE_WAY` however busy the mount is. An upload costs the daemon about 1.5 ms of CPU
on the thread that answers FUSE requests; uploads started in the middle of a burst of
writes made every write of it wait (docs/sync.md, "Uploads give way to the mount").
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from memfs.sync.feed import RECONCILE_EVERY

# The kinds of pass, cheapest first.
PassKind = Literal["probe", "push", "feed", "full"]

_RANK: dict[PassKind, int] = {"probe": 0, "push": 1, "feed": 2, "full": 3}

AFTER_CLOSE = 0.2  # seconds from a settled local change to its push
MAX_DEFER = 1.0  # a waiting local change is pushed at most this long after it came
MIN_GAP = 1.0  # seconds between the starts of two passes (an asked one excepted)
ECHO_DEFER = 3.0  # seconds from the echo of an own upload to the feed pass it owes
QUIET_FOR_UPLOAD = 0.002  # seconds without a FUSE request before an upload starts
MAX_GIVE_WAY = 0.25  # ... or this long after it was ready, however busy the mount is


def give_way(now: float, last_request: float, ready: float) -> float:
    """How much longer an upload ready since `ready` waits when the mount answered its
    last FUSE request at `last_request` (0: start now)."""
    wait = min(last_request + QUIET_FOR_UPLOAD, ready + MAX_GIVE_WAY) - now
    return wait if wait > 0 else 0.0


@dataclass(frozen=True)
class Due:
    """The next pass: when (the caller's clock; inf: nothing due), what kind, and why."""

    at: float
    kind: PassKind
    why: str
    asked: bool = False


@dataclass(frozen=True)
class SchedulerStatistics:
    changes: int  # local changes heard of
    passes: dict[str, int]  # passes started, by kind
    news: int  # heads heard that were another writer's
    echoes: int  # heads heard that were this mount's own upload


class Scheduler:
    """One store's pass schedule. Feed it events; ask `next` after each."""

    def __init__(
        self, *, interval: float, push_soon: bool = True, reconcile_every: float = RECONCILE_EVERY
    ) -> None:
        self.interval = interval
        self.push_soon = push_soon  # --no-push-soon: local changes wait for the interval
        self.reconcile_every = reconcile_every
        self._start = -math.inf  # when the last pass started
        self._last_full = -math.inf
        # Each kind of reason: when the first still owed came (None: none owed), and
        # when the last came (a pass clears what came before it started).
        self._change: tuple[float, float] | None = None
        self._settles = -math.inf  # the last change settles then
        self._held: tuple[float, float] | None = None
        self._news: tuple[float, float] | None = None
        self._echo: tuple[float, float] | None = None
        self._asked: float | None = None
        self._full = True  # a start lists the whole store first
        self._retry: float | None = None
        self._left_over: float | None = None  # a pass left work: the interval after it
        self._failed: float | None = None  # the last pass failed: nothing before this
        self._changes = 0
        self._news_count = 0
        self._echo_count = 0
        self._passes: dict[str, int] = {}

    def statistics(self) -> SchedulerStatistics:
        return SchedulerStatistics(
            self._changes, dict(self._passes), self._news_count, self._echo_count
        )

    # -- events -----------------------------------------------------------------------
    def changed(self, now: float, *, held_open: bool = False, quiet: float = 0.0) -> None:
        """A local change. `held_open`: a write to a file its writer keeps open (its
        close will say when it settled; the interval is the bound). `quiet`: seconds
        with no further write after which it counts as settled (no close is seen)."""
        self._changes += 1
        if held_open:
            self._held = _owed(self._held, now)
            return
        self._change = _owed(self._change, now)
        self._settles = now + max(AFTER_CLOSE, quiet)

    def heard(self, now: float, *, own: bool) -> None:
        """The store's head moved: `own`, to a version this mount's upload made."""
        if own:
            self._echo_count += 1
            self._echo = _owed(self._echo, now)
        else:
            self._news_count += 1
            self._news = _owed(self._news, now)

    def asked(self, now: float, *, full: bool = False) -> None:
        """Someone waits for a pass (`memfs sync`; `full`: `memfs sync --full`)."""
        self._asked = now
        self._full = self._full or full

    def reconcile(self) -> None:
        """The next pass lists the whole store (the feed could not answer, or the
        local state forgot memories the store still has)."""
        self._full = True

    def retry_at(self, at: float | None) -> None:
        """A transient refusal is due again at `at` (None: none waits)."""
        self._retry = at

    # -- a pass -------------------------------------------------------------------------
    def started(self, now: float, kind: PassKind) -> None:
        self._start = now
        self._passes[kind] = self._passes.get(kind, 0) + 1

    def done(self, now: float, kind: PassKind, *, ok: bool, left_over: bool = False) -> None:
        """A pass ended: what came before it started is served (a feed or full pass
        serves news; any pass but a probe serves local changes)."""
        start = self._start
        self._failed = now + self.interval if not ok else None
        if not ok:
            return
        self._left_over = now + self.interval if left_over else None
        if kind != "probe":
            self._change = _served(self._change, start)
            self._held = _served(self._held, start)
            if self._asked is not None and self._asked <= start:
                self._asked = None
        if kind in ("feed", "full"):
            self._news = _served(self._news, start)
            self._echo = _served(self._echo, start)
        if kind == "full":
            self._full = False
            self._last_full = now

    # -- the decision -----------------------------------------------------------------
    def next(self, now: float, *, idle: float = math.inf) -> Due:
        """The next pass. `idle`: seconds until the listener wants a probe (probing or
        interval mode; inf while a watch is open)."""
        if self._asked is not None:
            return Due(now, "full" if self._full else "feed", "asked", asked=True)
        wants: list[tuple[float, PassKind, str]] = []
        if self._full:
            wants.append((now, "full", "listing the whole store"))
        if self._news is not None:
            wants.append((self._news[0], "feed", "another writer changed the store"))
        if self._echo is not None:
            wants.append((self._echo[0] + ECHO_DEFER, "feed", "an own upload's echo"))
        if self._change is not None:
            first = self._change[0]
            at = min(self._settles, first + MAX_DEFER) if self.push_soon else first + self.interval
            wants.append((at, "push", "local changes settled"))
        if self._held is not None:
            wants.append((self._held[0] + self.interval, "push", "a held-open file was written"))
        if self._retry is not None:
            wants.append((self._retry, "push", "a refused upload is due again"))
        if self._left_over is not None:
            wants.append((self._left_over, "feed", "the last pass left work"))
        wants.append((self._last_full + self.reconcile_every, "full", "reconciling"))
        if idle < math.inf:
            wants.append((now + idle, "probe", "probing for changes"))
        at, kind, why = min(wants, key=lambda w: w[0])
        # Whatever else is due by then rides along: the widest kind does it all.
        for w_at, w_kind, w_why in wants:
            if w_at <= at and _RANK[w_kind] > _RANK[kind]:
                kind, why = w_kind, w_why
        if self._failed is not None:
            at = max(at, self._failed)  # a failing store is tried again at the interval
        return Due(max(at, self._start + MIN_GAP), kind, why)


def _owed(owed: tuple[float, float] | None, now: float) -> tuple[float, float]:
    """(first, last) of a reason owed, with one more event at `now`."""
    return (now, now) if owed is None else (owed[0], now)


def _served(owed: tuple[float, float] | None, start: float) -> tuple[float, float] | None:
    """What is still owed after a pass that started at `start`: the events after it
    (as one that came at the pass's start), or nothing."""
    if owed is None or owed[1] < start:
        return None
    return (max(owed[0], start), owed[1])
