"""The HTTP face of the store server: routes, request parsing, the error envelope.

Layout: behind the gate (memfs.server.gate: request id, auth, the beta header, request
hooks, health probes), Starlette routes each request to a handler that validates its
input and calls one `Storage` method on a worker thread. The routes are the actions of
memfs.server.actions, each with what a scoped token needs for it. Every error leaves as the
envelope of spec §6 with the request's id.

Fault-injection seam: `create_app(..., hooks=[...])` takes async callables run for every
request after auth and before routing. A hook may sleep (latency), raise `ApiError`
(an injected error response) or raise anything else (a dropped request). None are
installed by default; a later test option plugs its hooks in here.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, TypeVar

import trio
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp

from memfs.paths import (
    MAX_CONTENT_BYTES,
    PathRejected,
    check_memory_path,
)
from memfs.server import actions, errors
from memfs.server.db import Storage
from memfs.server.errors import ApiError
from memfs.server.gate import (
    ACTOR,
    GRANT,
    MAX_BODY_BYTES,
    REQUEST_ID,
    Gate,
    Health,
    RequestHook,
    error_response,
)
from memfs.server.watch import DEFAULT_TIMEOUT, MAX_TIMEOUT, WATCH_NEWER, WatchHub
from memfs.server.wire import Actor, new_id, parse_timestamp

log = logging.getLogger("memfs.server")

_T = TypeVar("_T")


def _request_id(request: Request) -> str:
    value = request.scope.get(REQUEST_ID)
    return value if isinstance(value, str) else new_id("req_")


async def _on_api_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiError)
    return error_response(exc, _request_id(request))


async def _on_http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    if exc.status_code in (404, 405):
        error = errors.not_found(f"no route for {request.method} {request.url.path}")
    else:
        error = ApiError(exc.status_code, "invalid_request_error", str(exc.detail))
    return error_response(error, _request_id(request))


async def _on_disconnect(request: Request, exc: Exception) -> Response:
    # a client killed or timed out while sending its body: nothing was done, nobody
    # reads the answer; not a server error
    assert isinstance(exc, ClientDisconnect)
    log.info(
        "client went away before its request was read request_id=%s method=%s path=%s",
        _request_id(request),
        request.method,
        request.url.path,
    )
    return error_response(errors.invalid("client disconnected"), _request_id(request))


async def _on_crash(request: Request, exc: Exception) -> Response:
    log.error(
        "unhandled error request_id=%s method=%s path=%s",
        _request_id(request),
        request.method,
        request.url.path,
        exc_info=exc,
    )
    return error_response(errors.internal(), _request_id(request))


# ------------------------------------------------------------ input parsing


async def _read_json(request: Request, *, required: bool = True) -> dict[str, Any]:
    """The body as a JSON object; 413 past MAX_BODY_BYTES, 400 when malformed."""
    length = request.headers.get("content-length")
    if length is not None and length.isdigit() and int(length) > MAX_BODY_BYTES:
        raise errors.too_large(f"request body is larger than {MAX_BODY_BYTES} bytes")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            raise errors.too_large(f"request body is larger than {MAX_BODY_BYTES} bytes")
        chunks.append(chunk)
    raw = b"".join(chunks)
    if not raw.strip():
        if required:
            raise errors.invalid("request body must be a JSON object")
        return {}
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        raise errors.invalid("request body is not valid JSON") from None
    if not isinstance(body, dict):
        raise errors.invalid("request body must be a JSON object")
    return body


def _only(body: dict[str, Any], allowed: Sequence[str]) -> None:
    for key in body:
        if key not in allowed:
            raise errors.invalid(f"{key}: unexpected field")


def _text(value: Any, name: str) -> str:
    """A JSON string that is valid Unicode text (no lone surrogates)."""
    if not isinstance(value, str):
        raise errors.invalid(f"{name} must be a string")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise errors.invalid(f"{name} is not valid UTF-8 text") from None
    return value


def _optional_text(body: dict[str, Any], name: str) -> str | None:
    value = body.get(name)
    return None if value is None else _text(value, name)


def _store_name(value: Any) -> str:
    name = _text(value, "name")
    if not 1 <= len(name) <= 255:
        raise errors.invalid("name must be 1 to 255 characters")
    if any(ord(ch) < 0x20 or 0x7F <= ord(ch) < 0xA0 for ch in name):
        raise errors.invalid("name must not contain control characters")
    return name


def _description(value: Any) -> str:
    description = _text(value, "description")
    if len(description) > 1024:
        raise errors.invalid("description must be at most 1024 characters")
    if "\x00" in description:  # PostgreSQL text cannot hold NUL: refused on every backend
        raise errors.invalid("description must not contain NUL characters")
    return description


def _metadata(value: Any, *, patch: bool) -> dict[str, str | None]:
    if not isinstance(value, dict):
        raise errors.invalid("metadata must be an object of strings")
    if len(value) > 16:
        raise errors.invalid("metadata can hold at most 16 pairs")
    result: dict[str, str | None] = {}
    for key, item in value.items():
        if not 1 <= len(key) <= 64:
            raise errors.invalid("metadata keys must be 1 to 64 characters")
        _text(key, "metadata key")
        if item is None and patch:
            result[key] = None
            continue
        text = _text(item, f"metadata[{key}]")
        if len(text) > 512:
            raise errors.invalid("metadata values must be at most 512 characters")
        result[key] = text
    return result


def _content(value: Any) -> str:
    content = _text(value, "content")
    if len(content) > MAX_CONTENT_BYTES // 4 and len(content.encode("utf-8")) > MAX_CONTENT_BYTES:
        raise errors.invalid(f"content is larger than {MAX_CONTENT_BYTES} bytes")
    return content


def _precondition(value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, dict) or value.get("type") != "content_sha256":
        raise errors.invalid("precondition must be {type: content_sha256, content_sha256: …}")
    _only(value, ("type", "content_sha256"))
    return _sha_value(value.get("content_sha256"), "precondition.content_sha256")


def _sha_value(value: Any, name: str) -> str:
    if not isinstance(value, str) or len(value) != 64:
        raise errors.invalid(f"{name} must be 64 hex characters")
    lowered = value.lower()
    if any(ch not in "0123456789abcdef" for ch in lowered):
        raise errors.invalid(f"{name} must be 64 hex characters")
    return lowered


def _view(request: Request, default: str) -> bool:
    """True for view=full."""
    view = request.query_params.get("view", default) or default
    if view not in ("basic", "full"):
        raise errors.invalid("view must be basic or full")
    return view == "full"


def _limit(request: Request, full: bool) -> int:
    raw = request.query_params.get("limit")
    if raw is None or raw == "":
        return 20
    try:
        limit = int(raw)
    except ValueError:
        raise errors.invalid("limit must be an integer") from None
    if not 1 <= limit <= 100:
        raise errors.invalid("limit must be between 1 and 100")
    if full and limit > 20:
        raise errors.invalid("limit must be at most 20 with view=full")
    return limit


def _page(request: Request) -> str | None:
    return request.query_params.get("page") or None


def _created_range(request: Request) -> tuple[str | None, str | None]:
    gte = request.query_params.get("created_at[gte]")
    lte = request.query_params.get("created_at[lte]")
    return (
        parse_timestamp(gte, "created_at[gte]") if gte else None,
        parse_timestamp(lte, "created_at[lte]") if lte else None,
    )


def _bool(request: Request, name: str) -> bool:
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return False
    lowered = raw.lower()
    if lowered in ("true", "1"):
        return True
    if lowered in ("false", "0"):
        return False
    raise errors.invalid(f"{name} must be true or false")


def _actor(request: Request) -> Actor:
    actor: Actor = request.scope[ACTOR]
    return actor


def _ok(payload: dict[str, Any]) -> Response:
    return JSONResponse(payload)


def _page_response(items: list[dict[str, Any]], next_page: str | None) -> Response:
    return JSONResponse({"data": items, "next_page": next_page})


async def _cancel_on_disconnect(request: Request, scope: trio.CancelScope) -> None:
    """Cancel `scope` when the client disconnects (its request body is read already)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass
    scope.cancel()


# ---------------------------------------------------------------- handlers


class Handlers:
    """One method per route; each validates, then makes one Database call off-thread."""

    def __init__(self, db: Storage, threads: int = 8, watch: WatchHub | None = None) -> None:
        self.db = db
        self.watch = watch if watch is not None else WatchHub(db)
        # threads=0: every call inline, for tests whose mock clock must not jump while
        # a worker thread writes (`memfs serve` refuses a pool size below 1).
        self.limiter = trio.CapacityLimiter(threads) if threads else None

    async def _run(self, fn: Callable[..., _T], *args: Any, **kwargs: Any) -> _T:
        """Writes go to a worker thread: they wait for SQLite's lock and an fsync."""
        if self.limiter is None:
            await trio.lowlevel.checkpoint()
            return fn(*args, **kwargs)
        return await trio.to_thread.run_sync(partial(fn, *args, **kwargs), limiter=self.limiter)

    async def _read(self, fn: Callable[..., _T], *args: Any, **kwargs: Any) -> _T:
        """On SQLite reads run inline: WAL readers never wait for writers, and a read is
        far shorter than a thread hand-off (which would double a listing's latency).
        A networked database's read waits on a socket, so it goes to a thread."""
        if not self.db.inline_reads:
            return await self._run(fn, *args, **kwargs)
        await trio.lowlevel.checkpoint()
        return fn(*args, **kwargs)

    # stores

    async def create_store(self, request: Request) -> Response:
        body = await _read_json(request)
        _only(body, ("name", "description", "metadata"))
        if "name" not in body:
            raise errors.invalid("name: field required")
        name = _store_name(body["name"])
        description = "" if body.get("description") is None else _description(body["description"])
        metadata = {} if body.get("metadata") is None else _metadata(body["metadata"], patch=False)
        clean = {k: v for k, v in metadata.items() if v is not None}
        return _ok(await self._run(self.db.create_store, name, description, clean))

    async def list_stores(self, request: Request) -> Response:
        gte, lte = _created_range(request)
        grant = request.scope.get(GRANT)
        only = None if grant is None else sorted(grant.scopes)
        items, next_page = await self._read(
            self.db.list_stores,
            only=only,
            limit=_limit(request, False),
            page=_page(request),
            include_archived=_bool(request, "include_archived"),
            created_gte=gte,
            created_lte=lte,
        )
        return _page_response(items, next_page)

    async def get_store(self, request: Request) -> Response:
        return _ok(await self._read(self.db.get_store, request.path_params["store_id"]))

    async def update_store(self, request: Request) -> Response:
        body = await _read_json(request, required=False)
        _only(body, ("name", "description", "metadata"))
        name = None if body.get("name") is None else _store_name(body["name"])
        description = None if body.get("description") is None else _description(body["description"])
        patch = None if body.get("metadata") is None else _metadata(body["metadata"], patch=True)
        return _ok(
            await self._run(
                self.db.update_store,
                request.path_params["store_id"],
                name=name,
                description=description,
                metadata_patch=patch,
            )
        )

    async def archive_store(self, request: Request) -> Response:
        return _ok(await self._run(self.db.archive_store, request.path_params["store_id"]))

    async def delete_store(self, request: Request) -> Response:
        return _ok(await self._run(self.db.delete_store, request.path_params["store_id"]))

    # memories

    async def create_memory(self, request: Request) -> Response:
        full = _view(request, "basic")
        body = await _read_json(request)
        _only(body, ("path", "content"))
        if "path" not in body:
            raise errors.invalid("path: field required")
        if body.get("content") is None:
            raise errors.invalid('content: field required (pass "" for an empty memory)')
        path = _text(body["path"], "path")
        content = _content(body["content"])
        return _ok(
            await self._run(
                self.db.create_memory,
                request.path_params["store_id"],
                path,
                content,
                _actor(request),
                full=full,
            )
        )

    async def list_memories(self, request: Request) -> Response:
        full = _view(request, "basic")
        limit = _limit(request, full)
        prefix = request.query_params.get("path_prefix") or None
        if prefix is not None:
            if not prefix.startswith("/") or not prefix.endswith("/"):
                raise errors.invalid("path_prefix must start and end with '/'")
            if prefix != "/":
                try:
                    check_memory_path(prefix[:-1])
                except PathRejected as exc:
                    raise errors.invalid(f"invalid path_prefix: {exc.reason}") from None
        depth_raw = request.query_params.get("depth") or "0"
        if depth_raw not in ("0", "1"):
            raise errors.invalid("depth must be 0 or 1")
        items, next_page = await self._read(
            self.db.list_memories,
            request.path_params["store_id"],
            path_prefix=prefix,
            depth=int(depth_raw),
            limit=limit,
            page=_page(request),
            full=full,
        )
        return _page_response(items, next_page)

    async def get_memory(self, request: Request) -> Response:
        full = _view(request, "full")
        return _ok(
            await self._read(
                self.db.get_memory,
                request.path_params["store_id"],
                request.path_params["memory_id"],
                full=full,
            )
        )

    async def update_memory(self, request: Request) -> Response:
        full = _view(request, "basic")
        body = await _read_json(request, required=False)
        _only(body, ("path", "content", "precondition"))
        content = None if body.get("content") is None else _content(body["content"])
        path = _optional_text(body, "path")
        precondition = _precondition(body.get("precondition"))
        return _ok(
            await self._run(
                self.db.update_memory,
                request.path_params["store_id"],
                request.path_params["memory_id"],
                content=content,
                path=path,
                precondition_sha=precondition,
                actor=_actor(request),
                full=full,
            )
        )

    async def delete_memory(self, request: Request) -> Response:
        raw = request.query_params.get("expected_content_sha256") or None
        expected = None if raw is None else _sha_value(raw, "expected_content_sha256")
        return _ok(
            await self._run(
                self.db.delete_memory,
                request.path_params["store_id"],
                request.path_params["memory_id"],
                expected_sha=expected,
                actor=_actor(request),
            )
        )

    # the watch (memfs only: memfs/server/watch.py)

    async def watch_store(self, request: Request) -> Response:
        """The head once it is not `after` (at once without `after`), else `after`."""
        store_id = request.path_params["store_id"]
        raw = request.query_params.get("timeout") or ""
        try:
            timeout = float(raw) if raw else DEFAULT_TIMEOUT
        except ValueError:
            raise errors.invalid("timeout must be a number of seconds") from None
        if not 0 <= timeout <= MAX_TIMEOUT:
            raise errors.invalid(f"timeout must be between 0 and {MAX_TIMEOUT:g} seconds")
        after = request.query_params.get("after")
        if after is None:
            head = await self._head(store_id)
        else:
            grant = request.scope.get(GRANT)
            token_id = None if grant is None else grant.token_id
            share = 0 if grant is None else self.watch.token_share(len(grant.scopes))
            with self.watch.admit(token_id, share):
                head = await self._wait(request, store_id, after or None, timeout)
        answer: dict[str, Any] = {"type": "memfs_watch", "head": head}
        if after and head is not None and head != after:
            # What came after `after`: a client that made every one of them itself
            # has nothing to read (its own upload's echo, docs/server.md).
            newer = await self._read(self.db.newer, store_id, after, WATCH_NEWER)
            if newer:
                answer["head"] = newer[0][0]
                answer["newer"] = [
                    {"id": i, "created_at": at, "memory_id": mid, "operation": op}
                    for i, at, mid, op in newer
                ]
        return _ok(answer)

    async def _wait(
        self, request: Request, store_id: str, after: str | None, seconds: float
    ) -> str | None:
        """The watch's wait, ended early by the client going away (a killed mount frees
        its place at once). An API error (the store is gone) leaves as itself."""
        head = after
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_cancel_on_disconnect, request, nursery.cancel_scope)
                head = await self.watch.wait(store_id, after, self._head, seconds)
                nursery.cancel_scope.cancel()
        except BaseExceptionGroup as group:
            if len(group.exceptions) == 1 and isinstance(group.exceptions[0], ApiError):
                raise group.exceptions[0] from None
            raise
        return head

    async def _head(self, store_id: str) -> str | None:
        return await self._read(self.db.head, store_id)

    # versions

    async def list_versions(self, request: Request) -> Response:
        full = _view(request, "basic")
        limit = _limit(request, full)
        q = request.query_params
        operation = q.get("operation") or None
        if operation is not None and operation not in ("created", "modified", "deleted"):
            raise errors.invalid("operation must be created, modified or deleted")
        actors: list[Actor] = []
        for param, actor_type in (
            ("session_id", "session_actor"),
            ("api_key_id", "api_actor"),
            ("service_account_id", "service_account_actor"),
        ):
            value = q.get(param)
            if value:
                actors.append((actor_type, value))
        gte, lte = _created_range(request)
        items, next_page = await self._read(
            self.db.list_versions,
            request.path_params["store_id"],
            memory_id=q.get("memory_id") or None,
            operation=operation,
            actor_filters=actors,
            created_gte=gte,
            created_lte=lte,
            limit=limit,
            page=_page(request),
            full=full,
        )
        return _page_response(items, next_page)

    async def get_version(self, request: Request) -> Response:
        full = _view(request, "full")
        return _ok(
            await self._read(
                self.db.get_version,
                request.path_params["store_id"],
                request.path_params["version_id"],
                full=full,
            )
        )

    async def redact_version(self, request: Request) -> Response:
        await _read_json(request, required=False)
        return _ok(
            await self._run(
                self.db.redact_version,
                request.path_params["store_id"],
                request.path_params["version_id"],
                _actor(request),
            )
        )


def create_app(
    db: Storage,
    *,
    api_key: str | None = None,
    hooks: Sequence[RequestHook] = (),
    threads: int = 8,
    console: bool = True,
    watch: WatchHub | None = None,
) -> ASGIApp:
    """The whole server as one ASGI app (routes of spec §3–§5 behind the gate), with the
    web console at /console unless `console` is False (docs/console.md)."""
    h = Handlers(db, threads, watch)
    # --max-watchers 0: no watch, as on the hosted API (404)
    routed = [a for a in actions.ACTIONS if a is not actions.WATCH_STORE or h.watch.max_watchers]
    routes = [Route(a.route, getattr(h, a.name), methods=[a.method]) for a in routed]
    inner = Starlette(
        routes=routes,
        exception_handlers={
            ApiError: _on_api_error,
            HTTPException: _on_http_error,
            ClientDisconnect: _on_disconnect,
            Exception: _on_crash,
        },
    )
    inner.router.redirect_slashes = False
    gate: ASGIApp = Gate(inner, api_key=api_key, hooks=hooks, db=db, limiter=h.limiter)
    if console:
        from memfs.server.console.app import with_console

        gate = with_console(gate, db, api_key=api_key, limiter=h.limiter)
    return Health(gate, db, h.limiter)
