"""The watch: a memfs-only extension that tells a client as soon as a store changes.

`GET /v1/memory_stores/{id}/memfs/watch?after=HEAD&timeout=S` answers with the store's
newest version id (its "head") as soon as that differs from `after`, or with `after`
unchanged once S seconds pass (docs/server.md, "The watch"). A mount keeps one open per
store and starts a pass when it fires, instead of waiting for its interval.

Wake-ups come from the storage (`Storage.follow_changes`): on SQLite right after a
store's write commits; on PostgreSQL through LISTEN/NOTIFY, the NOTIFY sent in the
write's own transaction, so every instance on the database hears every commit and a
rolled-back write wakes nobody. A waiting watch sleeps on an event: it reads the head
once when it starts and once per wake-up, never on a timer. Watchers are bounded per
instance, and a scoped token to its share of the bound (`WATCHES_PER_STORE`); one over
either gets 429 and its client probes instead. A watch whose client went away (a killed
mount) leaves at once: the handler listens for the disconnect.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import NoReturn, TypeAlias

import trio

from memfs.server import errors
from memfs.server.db import Storage

log = logging.getLogger("memfs.server")

DEFAULT_TIMEOUT = 25.0  # seconds a watch waits when the client names no timeout
MAX_TIMEOUT = 60.0  # below every proxy's and client's idle bound
DEFAULT_MAX_WATCHERS = 1000
WATCH_NEWER = 16  # versions after `after` an answer names at most (more: none named)
WATCHES_PER_STORE = 4
"""A scoped token's share: this many watches per store of its scope (a mount keeps one
per store; the rest is room for a restart's overlap), and never more than a tenth of
the instance's bound, so one token cannot push every other mount back to probing."""

HeadOf: TypeAlias = Callable[[str], Awaitable[str | None]]
"""Reads a store's newest version id (None: it has none) without blocking the loop."""


@dataclass(frozen=True)
class WatchStatistics:
    watchers: int  # watches waiting now
    refused: int  # watches refused over the bound since start
    wakeups: int  # store changes heard of since start


class WatchHub:
    """The watches waiting in this instance, one event per watched store."""

    def __init__(self, storage: Storage, *, max_watchers: int = DEFAULT_MAX_WATCHERS) -> None:
        self.storage = storage
        self.max_watchers = max_watchers
        self._events: dict[str, trio.Event] = {}
        self._everything = trio.Event()  # set on close: every watch answers at once
        self._token: trio.lowlevel.TrioToken | None = None
        self._watchers = 0
        self._by_token: dict[str, int] = {}
        self._refused = 0
        self._wakeups = 0

    def statistics(self) -> WatchStatistics:
        return WatchStatistics(self._watchers, self._refused, self._wakeups)

    def changed(self, store_id: str | None) -> None:
        """A store's write committed (None: any store may have changed). Any thread."""
        token = self._token
        if token is None:
            return  # no watch has waited yet: nobody to wake
        try:
            token.run_sync_soon(self._fire, store_id)
        except trio.RunFinishedError:
            pass  # the server is gone; so are its watchers

    def _fire(self, store_id: str | None) -> None:
        self._wakeups += 1
        if store_id is None:
            woken, self._events = list(self._events.values()), {}
        else:
            event = self._events.pop(store_id, None)
            woken = [] if event is None else [event]
        for event in woken:
            event.set()

    def close(self) -> None:
        """Answer every waiting watch now (the server is stopping) and every later one."""
        self._everything.set()
        self._fire(None)

    def _start(self) -> None:
        if self._token is None:
            self._token = trio.lowlevel.current_trio_token()
            self.storage.follow_changes(self.changed)

    def token_share(self, stores: int) -> int:
        """The watches one scoped token of `stores` stores may hold at once."""
        return max(1, min(WATCHES_PER_STORE * stores, self.max_watchers // 10))

    @contextmanager
    def admit(self, token_id: str | None = None, share: int = 0) -> Iterator[None]:
        """A place for one watch while the block runs; 429 when every place is taken, or
        when the scoped token `token_id` holds its `share` already (the admin key and a
        keyless server's clients have no share of their own: the instance's bound)."""
        held = 0 if token_id is None else self._by_token.get(token_id, 0)
        if self._watchers >= self.max_watchers:
            self._refuse(f"this server has {self.max_watchers} watches open; probe instead")
        if token_id is not None and held >= share:
            self._refuse(
                f"this token holds {held} watches, its share of this server's "
                f"{self.max_watchers}; probe instead",
                token_id,
            )
        self._watchers += 1
        if token_id is not None:
            self._by_token[token_id] = held + 1
        try:
            yield
        finally:
            self._watchers -= 1
            if token_id is not None:
                left = self._by_token.pop(token_id) - 1
                if left:
                    self._by_token[token_id] = left

    def _refuse(self, message: str, token_id: str | None = None) -> NoReturn:
        if token_id is not None:  # the token's own doing: the server is not short of places
            log.debug("watch refused: the token holds its share token_id=%s", token_id)
            raise errors.ApiError(429, "rate_limit_error", message)
        self._refused += 1
        if self._refused == 1 or self._refused % 100 == 0:
            log.warning(
                "watch refused: too many watchers max_watchers=%d refused=%d",
                self.max_watchers,
                self._refused,
            )
        raise errors.ApiError(429, "rate_limit_error", message)

    async def wait(
        self, store_id: str, after: str | None, head_of: HeadOf, seconds: float
    ) -> str | None:
        """The store's head once it is not `after`, else `after` once `seconds` pass (the
        caller admits the watch); `after` at once when the server is stopping.

        The head is always read once, whatever `seconds`: `timeout=0` answers the head
        now, not the client's own `after` (a bound around the whole wait cancelled that
        read before it returned)."""
        self._start()
        deadline = trio.current_time() + seconds
        while not self._everything.is_set():
            event = self._events.setdefault(store_id, trio.Event())
            head = await head_of(store_id)
            if head != after:
                return head
            if trio.current_time() >= deadline:
                break  # timeout=0: the head now, no wait
            log.debug("watch waiting memory_store_id=%s watchers=%d", store_id, self._watchers)
            with trio.move_on_at(deadline):
                await event.wait()
            if not event.is_set():
                break  # the timeout: no change was heard
        return after
