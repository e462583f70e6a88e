"""What runs before routing: the gate (request id, per-request log line, auth, the beta
header, request hooks) and the health probes.

`Gate` is a plain ASGI wrapper; what it learns (the request id, the writer's actor, a
token's grant) it leaves in the ASGI scope under `REQUEST_ID`, `ACTOR` and `GRANT` for
the handlers of memfs.server.app. A refused request is answered here, with the error
envelope of spec §6, and never reaches a route.
"""

from __future__ import annotations

import hmac
import ipaddress
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import trio
from starlette.datastructures import Headers
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from memfs.paths import BETA_MANAGED_AGENTS, BETA_MEMORY
from memfs.server import errors, tokens
from memfs.server.db import DatabaseUnavailable, Storage
from memfs.server.errors import ApiError
from memfs.server.wire import Actor, api_key_id, new_id

log = logging.getLogger("memfs.server")

RequestHook = Callable[[Scope], Awaitable[None]]
"""Runs for each request after auth; may sleep, raise ApiError, or raise to drop it."""

MAX_BODY_BYTES = 1_048_576
"""Largest request body; a full-size content JSON-escaped fits with room to spare."""

SESSION_HEADER = "x-memfs-session-id"
REQUEST_ID = "memfs.request_id"
ACTOR = "memfs.actor"
GRANT = "memfs.grant"
_BETAS = (BETA_MEMORY, BETA_MANAGED_AGENTS)


class Gate:
    """Before routing: request id, timing log, auth and beta checks, request hooks."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        api_key: str | None,
        hooks: Sequence[RequestHook] = (),
        db: Storage | None = None,
        limiter: trio.CapacityLimiter | None = None,
    ) -> None:
        if api_key is not None and not api_key:
            raise ValueError("an empty admin key would let an empty credential in")
        self.app = app
        self.api_key = api_key
        self.hooks = tuple(hooks)
        self.db = db
        self.limiter = limiter
        self.tokens = tokens.TokenCheck()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request_id = new_id("req_")
        scope[REQUEST_ID] = request_id
        started = time.perf_counter()
        status = 0

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                headers = [*message.get("headers", []), (b"request-id", request_id.encode())]
                message = {**message, "headers": headers}
            await send(message)

        try:
            try:
                headers = Headers(scope=scope)
                grant = await self._token_grant(headers)
                scope[ACTOR] = self._authenticate(headers, token=grant is not None)
                if grant is not None:
                    scope[GRANT] = grant
                    tokens.authorize_request(grant, scope["method"], scope["path"])
                _check_beta(headers)
                for hook in self.hooks:
                    await hook(scope)
            except ApiError as exc:
                await drain(receive)
                await error_response(exc, request_id)(scope, receive, send_with_id)
                return
            try:
                await self.app(scope, receive, send_with_id)
            except Exception:
                # Starlette's handler already logged it and answered 500 if it could.
                if status == 0:
                    await error_response(errors.internal(), request_id)(
                        scope, receive, send_with_id
                    )
        finally:
            level = logging.WARNING if status >= 500 or status == 0 else logging.DEBUG
            if log.isEnabledFor(level):
                log.log(
                    level,
                    "request_id=%s method=%s path=%s status=%d ms=%.1f",
                    request_id,
                    scope["method"],
                    scope["path"],
                    status,
                    (time.perf_counter() - started) * 1000,
                )

    async def _token_grant(self, headers: Headers) -> tokens.Grant | None:
        """A scoped token's grant (None when the credential is not a token), or 401."""
        presented, bearer = _credentials(headers)
        token = next((c for c in (bearer, presented) if c and tokens.is_token(c)), None)
        if token is None:
            return None
        token_id = self.tokens.token_id(token)
        hit, record = self.tokens.cached(token_id)
        if not hit:
            if self.db is None:
                raise errors.unauthorized("this server does not issue tokens")
            record = await trio.to_thread.run_sync(
                self.db.token_record, token_id, limiter=self.limiter
            )
            self.tokens.remember(token_id, record)
        return self.tokens.grant(token, token_id, record)

    def _authenticate(self, headers: Headers, *, token: bool = False) -> Actor:
        """Check the key if one is configured; name the writer for version records."""
        presented, bearer = _credentials(headers)
        if self.api_key is not None and not token:
            expected = self.api_key.encode("utf-8")
            ok = any(
                cred and hmac.compare_digest(cred.encode("utf-8"), expected)
                for cred in (presented, bearer)
            )
            if not ok:
                if presented is None and bearer is None:
                    raise errors.unauthorized(
                        "missing credentials: send x-api-key or a Bearer token"
                    )
                raise errors.unauthorized("invalid API key")
        session = headers.get(SESSION_HEADER)
        if session is not None:
            if not session.startswith("sesn_") or len(session) <= len("sesn_"):
                raise errors.invalid(f"{SESSION_HEADER} must be a session id (sesn_…)")
            return ("session_actor", session)
        credential = presented if presented is not None else (bearer or "")
        return ("api_actor", api_key_id(credential))


async def drain(receive: Receive) -> None:
    """Read a refused request's body (bounded) before answering, so the connection stays
    usable: a client that reuses it must not find it closed under its next request."""
    size = 0
    while size <= MAX_BODY_BYTES:
        message = await receive()
        if message["type"] != "http.request":
            return
        size += len(message.get("body", b""))
        if not message.get("more_body", False):
            return


def _credentials(headers: Headers) -> tuple[str | None, str | None]:
    """(x-api-key, bearer token) as presented."""
    auth = headers.get("authorization", "")
    scheme, _, token = auth.partition(" ")
    bearer = token.strip() if scheme.lower() == "bearer" and token.strip() else None
    return headers.get("x-api-key"), bearer


def _check_beta(headers: Headers) -> None:
    values = {
        part.strip() for value in headers.getlist("anthropic-beta") for part in value.split(",")
    }
    present = [beta for beta in _BETAS if beta in values]
    if not present:
        raise errors.invalid(
            f"this endpoint is in beta: send anthropic-beta: {BETA_MEMORY} "
            f"(or {BETA_MANAGED_AGENTS})"
        )
    if len(present) > 1:
        raise errors.invalid(
            f"send exactly one of {BETA_MEMORY} and {BETA_MANAGED_AGENTS} in anthropic-beta, "
            "not both"
        )


def error_response(exc: ApiError, request_id: str) -> Response:
    return JSONResponse(exc.body(request_id), status_code=exc.status)


def host_name(value: str) -> str:
    """A Host header's name: no port, no brackets, lowercase, no final dot."""
    value = value.strip().lower()
    if value.startswith("["):
        name = value[1:].partition("]")[0]
    else:
        name, _, port = value.rpartition(":")
        if not name or not port.isdigit():
            name = value
    return name.rstrip(".") if name != "." else name


def names_this_host(name: str) -> bool:
    """`localhost`, a name under `.localhost` (browsers answer it with loopback without
    asking DNS) or an IP address: no page can reach us under such a Host through DNS
    rebinding, which needs a name whose DNS answer the attacker controls."""
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


class HostCheck:
    """A server without an admin key answers only requests whose Host is this machine's
    own (`names_this_host`) or a name given with `--allowed-host`; other Hosts get 421.

    Without a key any request is served, so a web page under a name that resolves to
    127.0.0.1 (DNS rebinding) could read every store and edit memories from a browser on
    this host: the browser sends that name as Host, which this refuses. With a key every
    API request needs it, and the console's cookie is SameSite=Strict and host-only,
    so no check is needed (or made)."""

    def __init__(self, app: ASGIApp, allowed: Sequence[str] = ()) -> None:
        self.app = app
        self.allowed = frozenset(host_name(name) for name in allowed)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            host = Headers(scope=scope).get("host")
            name = None if host is None else host_name(host)
            if name is not None and name not in self.allowed and not names_this_host(name):
                log.debug("request refused: a host name not allowed host=%s", name)
                error = ApiError(
                    421,
                    "invalid_request_error",
                    f"this server has no API key, so it answers only requests to localhost "
                    f"or an IP address, not to {name!r} (a page under another name could "
                    f"be a DNS rebinding attack): start it with --allowed-host {name} to "
                    "serve that name, or require a key",
                )
                await drain(receive)
                await error_response(error, new_id("req_"))(scope, receive, send)
                return
        await self.app(scope, receive, send)


class Health:
    """`/healthz` (the process answers) and `/readyz` (the database answers), before the
    gate: a load balancer probes them without credentials or beta headers."""

    def __init__(self, app: ASGIApp, db: Storage, limiter: trio.CapacityLimiter | None) -> None:
        self.app = app
        self.db = db
        self.limiter = limiter

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path") if scope["type"] == "http" else None
        if path not in ("/healthz", "/readyz") or scope["method"] not in ("GET", "HEAD"):
            await self.app(scope, receive, send)
            return
        body: dict[str, Any] = {"status": "ok"}
        status = 200
        if path == "/readyz":
            try:
                await trio.to_thread.run_sync(self.db.ping, limiter=self.limiter)
                body["database"] = "ok"
            except DatabaseUnavailable as exc:
                log.warning("not ready backend=%s reason=%s", self.db.backend, exc)
                status, body = 503, {"status": "unavailable", "database": str(exc)}
        await JSONResponse(body, status_code=status)(scope, receive, send)
