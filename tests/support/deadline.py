"""A per-test deadline for suites that make system calls on FUSE mounts directly.

SIGALRM interrupts a system call blocked in FUSE (the kernel sends INTERRUPT and the
call fails), and the handler turns it into a test failure, so a hung mount fails the
test instead of hanging CI. Only the main thread gets the signal; threads and child
processes have their own timeouts.
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType


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
