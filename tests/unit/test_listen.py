"""The probe's pace (memfs/sync/listen.py): fast while active, backing off to the
interval when idle, and never more fast probes than the budget per store-hour."""

from __future__ import annotations

from typing import cast

import trio
import trio.testing

from memfs.store.client import StoreClient
from memfs.sync.listen import ACTIVE_WINDOW, FAST, Listener


def listener(budget: int = 1200, interval: float = 15.0) -> Listener:
    no_client = cast(StoreClient, None)  # the pacing never calls the store
    return Listener(no_client, "memstore_x", lambda: None, interval=interval, budget=budget)


async def gaps(one: Listener, seconds: float) -> list[float]:
    """The delays the pass loop would wait over `seconds`, each slept in full."""
    out: list[float] = []
    end = trio.current_time() + seconds
    while trio.current_time() < end:
        gap = one.delay(work_left=False, failing=False)
        out.append(gap)
        await trio.sleep(gap)
    return out


async def test_fast_while_active_then_back_to_the_interval(
    autojump_clock: trio.testing.MockClock,
) -> None:
    one = listener()
    assert await gaps(one, 60) == [2, 4, 8, 15, 15, 15, 15]  # idle from the start
    one.local_change()
    active = await gaps(one, ACTIVE_WINDOW)
    assert set(active) == {FAST} and len(active) == ACTIVE_WINDOW / FAST
    assert (await gaps(one, 60))[:5] == [FAST, 2, 4, 8, 15]  # the window's last, then back off
    one.heard("memver_1")  # the first head is no news
    assert one.delay(work_left=False, failing=False) == 15
    one.heard("memver_2")  # a new head is: the store is active
    assert one.delay(work_left=False, failing=False) == FAST
    assert one.delay(work_left=False, failing=True) == 15  # a failing store: the interval
    assert one.mode == "probe" and one.statistics().last_heard_at is not None


async def test_the_budget_bounds_fast_probes_per_hour(
    autojump_clock: trio.testing.MockClock,
) -> None:
    one = listener(budget=100)
    fast = 0
    end = trio.current_time() + 3600
    while trio.current_time() < end:
        one.local_change()  # active all hour long
        gap = one.delay(work_left=False, failing=False)
        fast += gap < 15
        await trio.sleep(gap)
    # The bucket starts full (100) and refills 100 over the hour.
    assert 100 <= fast <= 200
    assert one.statistics().probes == fast


async def test_no_budget_is_the_interval(autojump_clock: trio.testing.MockClock) -> None:
    one = listener(budget=0)
    one.local_change()
    assert one.mode == "interval"
    assert await gaps(one, 60) == [15, 15, 15, 15]
