"""Fault injection for tests: `memfs serve --faults SPEC` (off by default).

SPEC is comma-separated `key=value`:

    error=0.1        answer this share of requests with a transient error (500, 429,
                     503 or 529, with `retry-after: 0`) before doing anything
    drop_before=0.05 cut this share of connections before the request is handled
    drop_after=0.05  handle the request (a write commits), then cut the connection
                     before the answer is complete: the client's "lost answer"
    latency_ms=20    add a random delay of up to this many milliseconds
    seed=1           make the sequence of faults repeatable
    paths=memories   only requests whose path contains this text are touched

Every injected fault is logged at info as `fault=KIND method=… path=…`, so a test can
tell which requests failed and why.
"""

from __future__ import annotations

import json
import logging
import random
from dataclasses import dataclass

import trio
from starlette.types import ASGIApp, Message, Receive, Scope, Send

log = logging.getLogger("memfs.server.faults")

_TRANSIENT = (
    (500, "api_error"),
    (429, "rate_limit_error"),
    (503, "api_error"),
    (529, "overloaded_error"),
)


@dataclass
class FaultSpec:
    error: float = 0.0
    drop_before: float = 0.0
    drop_after: float = 0.0
    latency_ms: float = 0.0
    seed: int | None = None
    paths: str = ""

    @classmethod
    def parse(cls, text: str) -> FaultSpec:
        spec = cls()
        for part in filter(None, (p.strip() for p in text.split(","))):
            key, sep, value = part.partition("=")
            if not sep or key not in cls.__dataclass_fields__:
                raise ValueError(f"unknown fault setting {part!r}")
            if key == "seed":
                spec.seed = int(value)
            elif key == "paths":
                spec.paths = value
            else:
                number = float(value)
                if number < 0 or (key != "latency_ms" and number > 1):
                    raise ValueError(f"fault setting {key} out of range: {value}")
                setattr(spec, key, number)
        return spec


class _Dropped(Exception):
    """Ends the ASGI call without a complete answer: the server closes the connection."""


class FaultInjector:
    """An ASGI wrapper that makes the store misbehave on purpose."""

    def __init__(self, app: ASGIApp, spec: FaultSpec) -> None:
        self.app = app
        self.spec = spec
        self.rng = random.Random(spec.seed)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or self.spec.paths not in scope.get("path", ""):
            await self.app(scope, receive, send)
            return
        spec, rng = self.spec, self.rng
        method, path = scope["method"], scope["path"]
        if spec.latency_ms:
            await trio.sleep(rng.uniform(0, spec.latency_ms) / 1000)
        roll = rng.random()
        if roll < spec.error:
            status, kind = rng.choice(_TRANSIENT)
            log.info("fault=error status=%d method=%s path=%s", status, method, path)
            body = json.dumps(
                {"type": "error", "error": {"type": kind, "message": "injected fault"}}
            ).encode()
            await send(
                {
                    "type": "http.response.start",
                    "status": status,
                    "headers": [(b"content-type", b"application/json"), (b"retry-after", b"0")],
                }
            )
            await send({"type": "http.response.body", "body": body})
            return
        roll -= spec.error
        if roll < spec.drop_before:
            log.info("fault=drop_before method=%s path=%s", method, path)
            await _cut(send)
            return
        roll -= spec.drop_before
        if roll < spec.drop_after:
            log.info("fault=drop_after method=%s path=%s", method, path)

            async def swallow(message: Message) -> None:
                return None

            await self.app(scope, receive, swallow)  # the write commits, the answer is lost
            await _cut(send)
            return
        await self.app(scope, receive, send)


async def _cut(send: Send) -> None:
    """Promise a body, send part of it, and stop: the client sees a broken answer."""
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [(b"content-type", b"application/json"), (b"content-length", b"1000")],
        }
    )
    await send({"type": "http.response.body", "body": b'{"type":', "more_body": True})
    raise _Dropped("injected connection drop")
