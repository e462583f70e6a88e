"""The probe's pace (memfs/sync/listen.py): fast while active, backing off to the
interval when idle, and never more fast probes than the budget per store-hour; a watch
that answers what no watch answers falls back to probing, with one warning."""

from __future__ import annotations

import logging
from typing import cast

import httpx
import pytest
import trio
import trio.testing

from memfs.store.client import StoreClient
from memfs.store.connection import ClientConfig, make_http_client
from memfs.store.wire import MAX_ITEM_JSON
from memfs.sync.listen import ACTIVE_WINDOW, FAST, Listener


def listener(budget: int = 1200, interval: float = 15.0) -> Listener:
    no_client = cast(StoreClient, None)  # the pacing never calls the store
    return Listener(
        no_client, "memstore_x", lambda _head, _moved: None, interval=interval, budget=budget
    )


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


def watching(answers: list[httpx.Response]) -> tuple[Listener, list[str]]:
    """A listener whose store answers the watch with `answers`, in turn (the last
    again), through a real StoreClient; and the passes it woke."""

    def answer(request: httpx.Request) -> httpx.Response:
        assert request.url.path.endswith("/memfs/watch")
        return answers.pop(0) if len(answers) > 1 else answers[0]

    config = ClientConfig("http://store.test", ("x-api-key", "sk-test-0123456789"), "test")
    client = StoreClient(make_http_client(config, transport=httpx.MockTransport(answer)))
    woke: list[str] = []
    one = Listener(client, "memstore_x", lambda _head, _moved: woke.append("pass"), interval=15.0)
    return one, woke


HUGE_HEAD = b'{"head": "' + b"a" * (1 << 20) + b'"}'


async def test_a_watch_answering_past_its_bound_falls_back_to_probing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    one, woke = watching(
        [httpx.Response(200, json={"head": "memver_1"}), httpx.Response(200, content=HUGE_HEAD)]
    )
    with trio.fail_after(5):
        await one.run()  # returns: the watch is not tried again
    assert one.mode == "probe" and woke == ["pass"]  # the first head only
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, warnings
    assert "the store's watch answered what no watch answers; probing" in warnings[0]
    assert f"over {MAX_ITEM_JSON} bytes" in warnings[0]


async def test_a_store_without_a_watch_probes_without_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    missing = {"type": "error", "error": {"type": "not_found_error", "message": "no"}}
    caplog.set_level(logging.INFO, "memfs.sync")
    one, _ = watching([httpx.Response(404, json=missing)])
    with trio.fail_after(5):
        await one.run()
    assert one.mode == "probe"
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert any("the store offers no watch" in r.getMessage() for r in caplog.records)
