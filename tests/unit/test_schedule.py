"""The pass scheduler (memfs/sync/schedule.py): every rule on a clock of our own.

No FUSE, no server, no trio: events in, the next pass out. `Loop` stands in for the
pass loop: it runs every pass the scheduler says is due, instantly, on a fake clock.
"""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memfs.sync.feed import RECONCILE_EVERY
from memfs.sync.schedule import (
    AFTER_CLOSE,
    ECHO_DEFER,
    MAX_DEFER,
    MAX_GIVE_WAY,
    MIN_GAP,
    QUIET_FOR_UPLOAD,
    Scheduler,
    give_way,
)

INTERVAL = 15.0


class Loop:
    """Runs the passes a `Scheduler` asks for, in order, up to a time."""

    def __init__(self, **options: object) -> None:
        self.s = Scheduler(interval=INTERVAL, **options)  # type: ignore[arg-type]
        self.now = 0.0
        self.passes: list[tuple[float, str]] = []
        self.until(0.0)  # the start's full listing

    def until(self, end: float, *, ok: bool = True, idle: float = math.inf) -> None:
        while True:
            due = self.s.next(self.now, idle=idle)
            if due.at > end:
                self.now = end
                return
            self.now = max(self.now, due.at)
            self.s.started(self.now, due.kind)
            self.passes.append((self.now, due.kind))
            self.s.done(self.now, due.kind, ok=ok)

    def since(self, t: float) -> list[tuple[float, str]]:
        return [p for p in self.passes if p[0] >= t]


def test_a_start_lists_then_nothing_runs_while_idle_under_a_watch() -> None:
    loop = Loop()
    assert loop.passes == [(0.0, "full")]
    loop.until(RECONCILE_EVERY - 1)
    assert loop.passes == [(0.0, "full")]
    loop.until(RECONCILE_EVERY + 1)
    assert loop.passes[-1] == (RECONCILE_EVERY, "full")  # reconciliation, on its schedule


def test_a_settled_change_is_pushed_after_close_and_a_burst_is_one_push() -> None:
    loop = Loop()
    loop.until(10)
    for t in (10.0, 10.05, 10.1):
        loop.s.changed(t)
    loop.now = 10.1
    loop.until(12)
    assert loop.since(10) == [(10.1 + AFTER_CLOSE, "push")]


def test_a_steady_stream_is_pushed_at_least_every_max_defer() -> None:
    """issue 36 item 4: each change moved the pass later, and only the interval pushed."""
    loop = Loop()
    loop.until(5)
    t = 5.0
    while t < 15:
        loop.s.changed(t)
        loop.until(t)
        t += 0.05
    pushes = [at for at, kind in loop.since(5) if kind == "push"]
    gaps = [b - a for a, b in zip([5.0, *pushes], pushes, strict=False)]
    assert len(pushes) >= 6 and max(gaps) <= MAX_DEFER + 1e-9


def test_a_file_held_open_and_written_is_pushed_within_the_interval() -> None:
    """issue 36 item 5: writes to a held-open file armed nothing under the watch."""
    loop = Loop()
    loop.until(1)
    loop.s.changed(1.0, held_open=True)
    loop.until(1 + INTERVAL - 0.1)
    assert loop.since(1) == []
    loop.until(1 + INTERVAL + 0.1)
    assert loop.since(1) == [(1 + INTERVAL, "push")]


def test_news_is_read_at_once_and_passes_are_a_second_apart_whatever_woke_them() -> None:
    """issue 35 item 9: a watch that reports a new head 40 times a second."""
    loop = Loop()
    t = 1.0
    while t < 11:
        loop.s.heard(t, own=False)
        loop.until(t)
        t += 0.025
    feeds = [at for at, kind in loop.since(1) if kind == "feed"]
    assert feeds[0] == 1.0
    assert all(b - a >= MIN_GAP for a, b in itertools.pairwise(feeds))
    assert 9 <= len(feeds) <= 11


def test_the_echo_of_an_own_upload_is_read_later_and_not_put_off_by_more_echoes() -> None:
    loop = Loop()
    loop.until(1)
    for t in (1.0, 2.0, 3.0, 3.9):
        loop.s.heard(t, own=True)
        loop.until(t)
    assert loop.since(1) == []
    loop.until(1 + ECHO_DEFER + 0.01)
    assert loop.since(1) == [(1 + ECHO_DEFER, "feed")]


def test_a_failing_store_is_tried_at_the_interval_not_at_every_event() -> None:
    loop = Loop()
    loop.until(1)
    loop.s.changed(1.0)
    loop.until(30, ok=False)
    runs = loop.since(1)
    assert [at for at, _ in runs] == [1 + AFTER_CLOSE, 1 + AFTER_CLOSE + INTERVAL]


def test_asked_runs_now_and_widens_to_a_full_listing_on_request() -> None:
    loop = Loop()
    loop.until(0.5)
    loop.s.asked(0.5)
    due = loop.s.next(0.5)
    assert (due.at, due.kind, due.asked) == (0.5, "feed", True)  # not held to the gap
    loop.s.asked(0.5, full=True)
    assert loop.s.next(0.5).kind == "full"


def test_probing_paces_by_the_listener_and_widens_to_what_is_owed() -> None:
    loop = Loop()
    loop.until(10, idle=2.0)
    probes = [at for at, kind in loop.since(0.1)]
    assert probes == [2.0, 4.0, 6.0, 8.0, 10.0]
    loop.s.heard(10.5, own=False)
    assert loop.s.next(10.5, idle=2.0).kind == "feed"


def test_a_change_during_a_pass_is_owed_another() -> None:
    s = Scheduler(interval=INTERVAL)
    s.started(0.0, "full")
    s.done(0.0, "full", ok=True)
    s.changed(5.0)
    s.started(5.2, "push")
    s.changed(5.3)  # while the push ran
    s.done(5.4, "push", ok=True)
    due = s.next(5.4)
    assert due.kind == "push" and due.at == 5.2 + MIN_GAP


def test_an_upload_gives_way_to_a_busy_mount_but_not_for_long() -> None:
    q, cap = QUIET_FOR_UPLOAD, MAX_GIVE_WAY
    assert give_way(10.0, -math.inf, 10.0) == 0  # a mount that answered nothing yet
    assert give_way(10.0, 10.0 - q, 10.0) == 0  # quiet long enough
    # Busy: until the mount has been quiet `q`, measured from its last request.
    assert give_way(10.0, 10.0, 10.0) == pytest.approx(q)
    assert give_way(10.0 + q / 2, 10.0, 10.0) == pytest.approx(q / 2)
    # A mount that never goes quiet holds an upload `cap` at most, from when it was ready.
    assert give_way(10.0 + cap - q / 4, 10.0 + cap - q / 4, 10.0) == pytest.approx(q / 4)
    assert give_way(10.0 + cap, 10.0 + cap, 10.0) == 0
    assert give_way(99.0, 99.0, 10.0) == 0


@given(
    ready=st.floats(0, 100),
    busy=st.lists(st.floats(0, 1), max_size=50),
)
def test_an_upload_waits_only_while_requests_come_and_never_past_the_cap(
    ready: float, busy: list[float]
) -> None:
    """Requests at `ready + b`: the upload starts at the first moment the mount has been
    quiet QUIET_FOR_UPLOAD, or at ready + MAX_GIVE_WAY."""
    requests = sorted(ready + b for b in busy)
    now = ready
    for _ in range(10_000):
        last = max((r for r in requests if r <= now), default=-math.inf)
        wait = give_way(now, last, ready)
        if wait == 0:
            break
        now += wait
    else:
        raise AssertionError("the upload never started")
    assert now <= ready + MAX_GIVE_WAY + 1e-9
    last = max((r for r in requests if r <= now), default=-math.inf)
    assert now - last >= QUIET_FOR_UPLOAD - 1e-9 or now >= ready + MAX_GIVE_WAY - 1e-9


def test_no_push_soon_waits_for_the_interval() -> None:
    loop = Loop(push_soon=False)
    loop.until(1)
    loop.s.changed(1.0)
    loop.until(1 + INTERVAL + 1)
    assert loop.since(1) == [(1 + INTERVAL, "push")]


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.floats(min_value=0.0, max_value=0.5),
            st.sampled_from(["change", "held", "news", "echo", "asked"]),
        ),
        max_size=60,
    )
)
def test_passes_are_a_gap_apart_and_nothing_owed_is_left_behind(
    events: list[tuple[float, str]],
) -> None:
    """Any stream of events: passes start at least MIN_GAP apart (but asked ones), and
    once the events stop, everything they owed is served within bounded time."""
    loop = Loop()
    t = 1.0
    for gap, event in events:
        t += gap
        loop.until(t)
        if event == "change":
            loop.s.changed(t)
        elif event == "held":
            loop.s.changed(t, held_open=True)
        elif event == "asked":
            loop.s.asked(t)
        else:
            loop.s.heard(t, own=event == "echo")
    loop.until(t)
    end = t + INTERVAL + ECHO_DEFER + 2 * MIN_GAP
    loop.until(end)
    due = loop.s.next(loop.now)
    assert due.at >= RECONCILE_EVERY or due.at > end, due
    starts = [at for at, _ in loop.passes]
    asked_free = all(b - a >= MIN_GAP - 1e-9 for a, b in itertools.pairwise(starts))
    assert asked_free or any(e == "asked" for _, e in events)
