"""Bounds in time: a per-test deadline, and the one polling wait every test uses.

`deadline`: SIGALRM interrupts a system call blocked in FUSE (the kernel sends INTERRUPT
and the call fails), and the handler turns it into a test failure, so a hung mount fails
the test instead of hanging CI. Only the main thread gets the signal; threads and child
processes have their own timeouts.

`eventually`: look again and again until something holds, bounded; past the bound the
failure names what was awaited and the last thing seen.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import TypeVar

T = TypeVar("T")


class DeadlineExceeded(AssertionError):
    pass


@contextmanager
def deadline(
    seconds: int, what: str = "test", on_expiry: Callable[[], None] | None = None
) -> Iterator[None]:
    def expired(signum: int, frame: FrameType | None) -> None:
        if on_expiry is not None:
            on_expiry()
        raise DeadlineExceeded(f"{what} still running after {seconds}s: a system call hung")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def _holds(value: object) -> bool:
    return bool(value)


def eventually(
    probe: Callable[[], T],
    what: str,
    *,
    timeout: float,
    interval: float = 0.05,
    until: Callable[[T], bool] = _holds,
    ignoring: tuple[type[Exception], ...] = (),
) -> T:
    """Call `probe` every `interval` seconds until `until` holds for what it returns
    (by default: until it is truthy), and return that. It is called at least once, and
    once more at the bound; an exception of a type in `ignoring` counts as not yet.
    Past `timeout` seconds: AssertionError naming `what`, the bound, and the last value
    or exception seen."""
    end = time.monotonic() + timeout
    while True:
        try:
            value = probe()
        except ignoring as e:
            last = f"the last look raised {type(e).__name__}: {e}"
        else:
            if until(value):
                return value
            last = f"the last look saw {_short(value)}"
        left = end - time.monotonic()
        if left <= 0:
            raise AssertionError(f"not within {timeout:g}s: {what}; {last}")
        time.sleep(min(interval, left))


def _short(value: object, limit: int = 3000) -> str:
    text = repr(value)
    return text if len(text) <= limit else f"{text[: limit // 2]} … {text[-limit // 2 :]}"
