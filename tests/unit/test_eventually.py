"""`eventually` (tests/support/deadline.py), the one polling wait of the suites."""

from __future__ import annotations

import itertools
import time

import pytest

from tests.support.deadline import eventually


def test_it_returns_the_first_value_that_holds() -> None:
    counter = itertools.count()
    assert eventually(lambda: next(counter), "the third look", timeout=5, interval=0) == 1
    looks = itertools.count()
    got = eventually(
        lambda: next(looks), "five looks", until=lambda n: n >= 5, timeout=5, interval=0
    )
    assert got == 5


def test_past_the_bound_it_names_what_and_the_last_value() -> None:
    started = time.monotonic()
    with pytest.raises(AssertionError) as caught:
        eventually(lambda: ["a.md"], "b.md to appear", timeout=0.2, until=lambda v: "b.md" in v)
    waited = time.monotonic() - started
    assert 0.2 <= waited < 2, waited
    assert str(caught.value) == "not within 0.2s: b.md to appear; the last look saw ['a.md']"


def test_ignored_exceptions_are_not_yet_and_others_fail_at_once() -> None:
    looks = itertools.count()

    def flaky() -> int:
        n = next(looks)
        if n < 3:
            raise FileNotFoundError(f"look {n}")
        return n

    assert eventually(flaky, "the file", ignoring=(OSError,), timeout=5, interval=0) == 3

    def gone() -> None:
        raise FileNotFoundError("gone")

    with pytest.raises(AssertionError, match=r"the last look raised FileNotFoundError: gone$"):
        eventually(gone, "x", ignoring=(OSError,), timeout=0.1)
    with pytest.raises(ZeroDivisionError):
        eventually(lambda: 1 // 0, "a number", timeout=5)
