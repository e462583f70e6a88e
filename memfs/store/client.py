"""The one HTTP client memfs uses to talk to a Memory Store (hosted API or `memfs serve`).

Configuration and the `httpx` client (`ClientConfig`, `make_http_client`) are in
`memfs.store.connection`; this module is the calls:

- `StoreClient`: typed calls over an injected `httpx.AsyncClient`. It maps every failure
  onto `memfs.errors` (`StoreUnavailable` is the only transient class) and retries the
  transient ones with capped exponential back-off and full jitter, honouring
  `retry-after`. Lost answers are settled here where the API allows it: a retried create
  that meets its own memory (same path, same sha) succeeds, and a retried delete that
  meets a 404 counts as deleted.

Content from the wire is kept as the `str` JSON decoding gives. JSON can carry lone
surrogates (`"\\ud800"`), which no UTF-8 byte sequence represents; such content is
surfaced, never repaired: `FullMemory.content_bytes()` raises `InvalidContent` for it,
and `FullMemory.is_utf8` lets a caller check first. Never call `content.encode()`
yourself without handling `UnicodeEncodeError`.
"""

from __future__ import annotations

import json
import logging
import random
import urllib.parse
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias, TypedDict, TypeVar, Unpack

import httpx
import trio

from memfs import metrics
from memfs.errors import (
    NotFound,
    PathConflict,
    Rejected,
    StoreAuthError,
    StoreError,
    StoreUnavailable,
)
from memfs.logs import Repeated
from memfs.paths import (
    ANTHROPIC_VERSION,
    BETA_MANAGED_AGENTS,
    BETA_MEMORY,
    MAX_MEMORIES_PER_STORE,
    RemoteMemory,
    sha256_hex,
)
from memfs.store.connection import (
    BACKGROUND_FIRST_BYTE,
    CONNECT_TIMEOUT,
    CREDENTIAL_HINT,
    TRANSFER_TIMEOUT,
)
from memfs.store.wire import (
    MAX_ITEM_JSON,
    MAX_MEMORY_JSON,
    _Malformed,
    _obj,
    _page,
    _parse_full,
    _parse_head,
    _parse_memory,
    _parse_store,
    _parse_version,
    _str,
)
from memfs.store.wire import (
    FullMemory as FullMemory,
)
from memfs.store.wire import (
    MemoryItem as MemoryItem,
)
from memfs.store.wire import (
    MemoryPage as MemoryPage,
)
from memfs.store.wire import (
    MemoryPrefix as MemoryPrefix,
)
from memfs.store.wire import (
    MemoryVersion as MemoryVersion,
)
from memfs.store.wire import (
    StoreInfo as StoreInfo,
)
from memfs.store.wire import (
    WatchAnswer as WatchAnswer,
)
from memfs.store.wire import (
    error_from_response as error_from_response,
)
from memfs.store.wire import (
    parse_retry_after as parse_retry_after,
)

_T = TypeVar("_T")

log = logging.getLogger("memfs.client")

View: TypeAlias = Literal["basic", "full"]
MAX_PAGE = 100
MAX_FULL_PAGE = 20
# The most any answer may take: a full page of memories at the API's limits. A single
# memory, and a page of the basic view, are bounded tighter where they are asked for.
MAX_ANSWER_BYTES = MAX_FULL_PAGE * MAX_MEMORY_JSON + MAX_ITEM_JSON
# The most memories one listing may yield: a full store, and a page more for what
# creates and renames made while it was paged through.
MAX_LISTED = MAX_MEMORIES_PER_STORE + MAX_PAGE


# --------------------------------------------------------------------------- retries


@dataclass(frozen=True)
class RetryPolicy:
    """How transient failures (`StoreUnavailable`) are retried.

    `max_attempts` counts the first try; `deadline` bounds the whole call in seconds
    (a back-off that would end past it is not started). The delay before retry *n* is
    uniform in [0, min(max_delay, base_delay * 2**(n-1))] ("full jitter", so many
    clients don't retry in lockstep), or the server's `retry-after` capped at
    `max_delay`.
    """

    max_attempts: int = 5
    base_delay: float = 0.5
    max_delay: float = 20.0
    deadline: float = 60.0
    # False: a server that accepted but did not answer in time is reported at once
    # (someone is waiting); refused connections and 5xx are still retried.
    retry_timeouts: bool = True

    @classmethod
    def none(cls) -> RetryPolicy:
        return cls(max_attempts=1)

    def delay(self, attempt: int, retry_after: float | None) -> float:
        """Seconds to wait after failed attempt number `attempt` (1-based)."""
        if retry_after is not None:
            return max(0.0, min(retry_after, self.max_delay))
        ceiling = min(self.max_delay, self.base_delay * (2 ** (attempt - 1)))
        return random.uniform(0.0, ceiling)


# --------------------------------------------------------------------------- client


class VersionFilters(TypedDict, total=False):
    """The filters of `GET /v1/memory_stores/{id}/memory_versions` (None: not filtered)."""

    memory_id: str | None
    operation: str | None
    session_id: str | None
    api_key_id: str | None
    created_at_gte: str | None
    created_at_lte: str | None
    view: View


class _Retry:
    """Sentinel a settle hook returns to ask for another attempt."""


_RETRY = _Retry()
Settle: TypeAlias = Callable[[StoreError], Awaitable[Any]]


def _seg(value: str, what: str) -> str:
    """One URL path segment from an opaque id; never lets an id escape its route."""
    if not isinstance(value, str) or value in ("", ".", ".."):
        raise Rejected(f"invalid {what} {value!r}")
    try:
        return urllib.parse.quote(value, safe="")
    except UnicodeEncodeError:
        raise Rejected(f"invalid {what} {value!r}: not UTF-8") from None


def _encode_body(op: str, body: Mapping[str, Any] | None) -> bytes | None:
    """The request body as UTF-8 JSON; text the API would refuse is refused here."""
    if body is None:
        return None
    try:
        return json.dumps(body, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        raise Rejected(
            f"{op}: the request holds text that is not valid UTF-8 "
            "(lone surrogates); the API would refuse it"
        ) from None


class StoreClient:
    """Typed calls of the Memory Stores API over an injected `httpx.AsyncClient`.

    The http client supplies the base URL and the credential (see `make_http_client`);
    this class sets `anthropic-version` and exactly one `anthropic-beta` value on every
    request itself, replacing whatever defaults the http client has. Every method
    raises only `StoreError` subclasses (plus `ValueError` for a programming error).
    """

    def __init__(
        self,
        http: httpx.AsyncClient,
        *,
        retry: RetryPolicy = RetryPolicy(),
        first_byte_timeout: float = BACKGROUND_FIRST_BYTE,
    ) -> None:
        self._http = http
        self.retry = retry
        self.first_byte_timeout = first_byte_timeout
        secrets = []
        for name in ("x-api-key", "authorization"):
            value = http.headers.get(name)
            if value:
                secrets.append(value)
                secrets.extend(part for part in value.split() if len(part) >= 8)
        self._secrets = sorted(set(secrets), key=len, reverse=True)
        self._has_credentials = bool(secrets)
        self._retrying = Repeated(
            log,
            "retrying store request op=%s memory_store_id=%s path=%s "
            "attempt=%d delay=%.2f error=%s",
        )
        # A listing repeats every pass: its bad records are logged once per cause.
        self._malformed = Repeated(
            log,
            "the server listed a malformed memory; skipping it "
            "memory_store_id=%s memory_id=%s error=%s",
        )
        self._duplicate = Repeated(
            log,
            "the server listed a memory id twice; skipping all but the first "
            "memory_store_id=%s memory_id=%s path=%s",
        )

    # ---------------------------------------------------------------- plumbing

    def _scrub(self, text: str) -> str:
        for secret in self._secrets:
            text = text.replace(secret, "[redacted]")
        return text

    def _headers(self, has_body: bool, beta: str = BETA_MEMORY) -> dict[str, str]:
        headers = {"anthropic-version": ANTHROPIC_VERSION, "anthropic-beta": beta}
        if has_body:
            headers["content-type"] = "application/json"
        return headers

    def _where(self) -> str:
        return str(self._http.base_url).rstrip("/") or "the store"

    def _transport_error(self, exc: httpx.RequestError) -> StoreError:
        name = type(exc).__name__
        detail = self._scrub(str(exc))
        if isinstance(exc, httpx.ConnectTimeout):
            detail = f"it did not accept a connection within {CONNECT_TIMEOUT:g}s"
        elif isinstance(exc, httpx.TimeoutException):
            detail = f"it stopped answering for {TRANSFER_TIMEOUT:g}s mid-transfer"
        # The detail alone: "ConnectError: all attempts to connect … failed" says it twice.
        text = f"cannot reach the store at {self._where()}: {detail or name}"
        if isinstance(exc, httpx.UnsupportedProtocol | httpx.LocalProtocolError):
            return StoreError(text)
        if isinstance(exc, httpx.TransportError):
            return StoreUnavailable(text)
        return StoreError(text)

    def _decorate(self, error: StoreError) -> StoreError:
        if isinstance(error, StoreAuthError):
            if self._has_credentials:
                error.message += f" (check the credential; {CREDENTIAL_HINT})"
            else:
                error.message += f" (no credentials were sent; {CREDENTIAL_HINT})"
        return error

    async def _request(
        self,
        method: str,
        url: str,
        *,
        op: str,
        store_id: str | None = None,
        memory_path: str | None = None,
        params: Mapping[str, Any] | None = None,
        body: Mapping[str, Any] | None = None,
        settle: Settle | None = None,
        beta: str = BETA_MEMORY,
        max_body: int = MAX_ANSWER_BYTES,
    ) -> Any:
        """Send with retries; return the decoded JSON body of a 2xx answer (refused
        past `max_body` bytes).

        `settle` is asked about a permanent error met on a *retry* (the first attempt
        may have been applied before its answer was lost): it returns a result, `_RETRY`,
        or None to let the error stand.
        """
        content = _encode_body(op, body)
        clean_params = {k: v for k, v in (params or {}).items() if v is not None}
        started = trio.current_time()
        attempt = 0
        while True:
            attempt += 1
            result, error, timed_out = await self._attempt(
                method, url, clean_params, content, op=op, beta=beta, max_body=max_body
            )
            if error is None:
                return result
            if not isinstance(error, StoreUnavailable):
                if settle is None or attempt == 1:
                    raise error
                outcome = await settle(error)
                if outcome is None:
                    raise error
                if not isinstance(outcome, _Retry):
                    return outcome
            if timed_out and not self.retry.retry_timeouts:
                raise error
            delay = self._retry_delay(error, attempt, started, op, store_id, memory_path)
            await trio.sleep(delay)

    async def _attempt(
        self,
        method: str,
        url: str,
        params: dict[str, Any],
        content: bytes | None,
        *,
        op: str,
        beta: str,
        max_body: int,
    ) -> tuple[Any, StoreError | None, bool]:
        """One try: (the decoded body, None, False), or (None, the error, timed out?).

        A 2xx answer whose body is not JSON raises at once: retrying cannot mend it.
        """
        sent = len(content or b"")
        try:
            response = await self._send(
                method, url, params, content, beta, op=op, max_body=max_body
            )
        except httpx.RequestError as exc:
            timed_out = isinstance(exc, httpx.TimeoutException)
            metrics.store_request(op, "timeout" if timed_out else "error", sent, 0)
            return None, self._transport_error(exc), timed_out
        except trio.TooSlowError:
            metrics.store_request(op, "timeout", sent, 0)
            slow = StoreUnavailable(
                f"cannot reach the store at {self._where()}: it did not answer within "
                f"{self.first_byte_timeout:g}s (it accepted the connection)"
            )
            return None, slow, True
        metrics.store_request(op, str(response.status_code), sent, len(response.content))
        if not response.is_success:
            error = self._decorate(error_from_response(response, scrub=self._scrub))
            return None, error, False
        try:
            return (json.loads(response.content) if response.content else {}), None, False
        except ValueError:
            raise StoreError(
                f"{op}: the store answered {response.status_code} with a body that is not JSON",
                status=response.status_code,
                request_id=response.headers.get("request-id"),
            ) from None

    def _retry_delay(
        self,
        error: StoreError,
        attempt: int,
        started: float,
        op: str,
        store_id: str | None,
        memory_path: str | None,
    ) -> float:
        """How long to wait before the next attempt; raises `error` when out of tries."""
        retry_after = error.retry_after if isinstance(error, StoreUnavailable) else None
        delay = self.retry.delay(attempt, retry_after)
        elapsed = trio.current_time() - started
        if attempt >= self.retry.max_attempts or elapsed + delay > self.retry.deadline:
            if self.retry.max_attempts > 1:  # the caller reports the error itself
                log.debug(
                    "giving up on store request op=%s memory_store_id=%s path=%s "
                    "attempt=%d elapsed=%.1f error=%s",
                    op,
                    store_id,
                    memory_path,
                    attempt,
                    elapsed,
                    error,
                )
            raise error
        if attempt == 1:
            log.debug(
                "retrying store request op=%s memory_store_id=%s path=%s "
                "attempt=%d delay=%.2f error=%s",
                op,
                store_id,
                memory_path,
                attempt,
                delay,
                error,
            )
        else:  # a server down for hours repeats these every pass: once per cause
            cause = (op, store_id, type(error), error.status)
            self._retrying.warning(cause, op, store_id, memory_path, attempt, delay, error)
        return delay

    async def _send(
        self,
        method: str,
        url: str,
        params: dict[str, Any],
        content: bytes | None,
        beta: str = BETA_MEMORY,
        *,
        op: str,
        max_body: int,
    ) -> httpx.Response:
        """One request: its status line must arrive within the first-byte bound; the
        body then only has the transfer bound (`TRANSFER_TIMEOUT`) between bytes.

        The body is read as it streams in and refused past `max_body` bytes (the most
        the API's limits allow for this answer): a hostile server cannot make the
        daemon hold more, whatever it announces or sends.
        """
        request = self._http.build_request(
            method,
            url,
            params=params,
            content=content,
            headers=self._headers(content is not None, beta),
        )
        with trio.fail_after(self.first_byte_timeout):
            response = await self._http.send(request, stream=True)
        await self._read_bounded(response, op, max_body)
        return response

    async def _read_bounded(self, response: httpx.Response, op: str, max_body: int) -> None:
        """Read a streamed answer's body into `response.content`, refusing it
        (`StoreError`) past `max_body` bytes, announced or received; closes it."""
        try:
            too_large = StoreError(
                f"{op}: the store's answer is over {max_body} bytes, more than the API's "
                "limits allow; it was not read further",
                status=response.status_code,
                request_id=response.headers.get("request-id"),
            )
            announced = response.headers.get("content-length", "")
            if announced.isdigit() and int(announced) > max_body:
                raise too_large
            chunks: list[bytes] = []
            received = 0
            async for chunk in response.aiter_bytes():  # decoded: counts what is held
                received += len(chunk)
                if received > max_body:
                    raise too_large
                chunks.append(chunk)
            response._content = b"".join(chunks)
        finally:
            await response.aclose()

    def _parse(self, op: str, parser: Callable[[Any], _T], data: Any) -> _T:
        try:
            return parser(data)
        except _Malformed as exc:
            raise StoreError(f"{op}: malformed answer from the store: {exc}") from None

    # ---------------------------------------------------------------- sessions

    async def retrieve_session(self, session_id: str) -> dict[str, Any]:
        """The session object: `memfs session --session-id` mounts its resources."""
        data = await self._request(
            "GET",
            f"/v1/sessions/{_seg(session_id, 'session id')}",
            op="retrieve_session",
            beta=BETA_MANAGED_AGENTS,
        )
        if not isinstance(data, dict):
            raise StoreError(
                "retrieve_session: malformed answer from the server: not a JSON object"
            )
        return data

    # ---------------------------------------------------------------- stores

    async def retrieve_store(self, store_id: str) -> StoreInfo:
        data = await self._request(
            "GET",
            f"/v1/memory_stores/{_seg(store_id, 'store id')}",
            op="retrieve_store",
            store_id=store_id,
        )
        return self._parse("retrieve_store", _parse_store, data)

    async def may_write(self, store_id: str) -> bool:
        """Whether the credential may change this store, asked without changing it.

        The API has no call that names a credential's access, so this asks the store's
        own check: a create with neither path nor content, which no server accepts. A
        read-only credential (a `memfs serve` token scoped `:ro`) is refused before the
        body is read, 403 `permission_error`; a writable one gets 400 for the body.
        """
        try:
            await self._request(
                "POST",
                f"/v1/memory_stores/{_seg(store_id, 'store id')}/memories",
                op="probe_access",
                store_id=store_id,
                body={},
            )
        except StoreAuthError as e:
            if e.status == 403 and e.error_type == "permission_error":
                return False
            raise
        except Rejected:
            return True
        return True

    async def list_stores(self, *, include_archived: bool = False) -> list[StoreInfo]:
        """Every store (all pages), newest first."""
        stores: list[StoreInfo] = []
        page: str | None = None
        while True:
            data = await self._request(
                "GET",
                "/v1/memory_stores",
                op="list_stores",
                params={
                    "limit": MAX_PAGE,
                    "page": page,
                    "include_archived": "true" if include_archived else None,
                },
            )
            items, page = self._parse("list_stores", _page, data)
            stores.extend(self._parse("list_stores", _parse_store, item) for item in items)
            if page is None:
                return stores

    async def create_store(
        self, name: str, description: str = "", metadata: Mapping[str, str] | None = None
    ) -> StoreInfo:
        body: dict[str, Any] = {"name": name}
        if description:
            body["description"] = description
        if metadata:
            body["metadata"] = dict(metadata)
        data = await self._request("POST", "/v1/memory_stores", op="create_store", body=body)
        return self._parse("create_store", _parse_store, data)

    async def update_store(
        self,
        store_id: str,
        *,
        name: str | None = None,
        description: str | None = None,
        metadata: Mapping[str, str | None] | None = None,
    ) -> StoreInfo:
        """Patch a store; in `metadata` a None value deletes that key."""
        body: dict[str, Any] = {}
        if name is not None:
            body["name"] = name
        if description is not None:
            body["description"] = description
        if metadata is not None:
            body["metadata"] = dict(metadata)
        data = await self._request(
            "POST",
            f"/v1/memory_stores/{_seg(store_id, 'store id')}",
            op="update_store",
            store_id=store_id,
            body=body,
        )
        return self._parse("update_store", _parse_store, data)

    async def archive_store(self, store_id: str) -> StoreInfo:
        data = await self._request(
            "POST",
            f"/v1/memory_stores/{_seg(store_id, 'store id')}/archive",
            op="archive_store",
            store_id=store_id,
        )
        return self._parse("archive_store", _parse_store, data)

    async def delete_store(self, store_id: str) -> None:
        """Delete a store and everything in it; a retry that meets 404 counts as done."""

        async def settle(error: StoreError) -> Any:
            return {} if isinstance(error, NotFound) else None

        await self._request(
            "DELETE",
            f"/v1/memory_stores/{_seg(store_id, 'store id')}",
            op="delete_store",
            store_id=store_id,
            settle=settle,
        )

    # ---------------------------------------------------------------- memories

    def _memories_url(self, store_id: str, memory_id: str | None = None) -> str:
        url = f"/v1/memory_stores/{_seg(store_id, 'store id')}/memories"
        if memory_id is not None:
            url += "/" + _seg(memory_id, "memory id")
        return url

    async def list_memories_page(
        self,
        store_id: str,
        *,
        page: str | None = None,
        view: View = "basic",
        path_prefix: str | None = None,
        depth: int | None = None,
        limit: int = MAX_PAGE,
    ) -> MemoryPage:
        """One page of a listing. `limit` is capped at 100 (20 with view="full")."""
        limit = max(1, min(limit, MAX_FULL_PAGE if view == "full" else MAX_PAGE))
        data = await self._request(
            "GET",
            self._memories_url(store_id),
            op="list_memories",
            store_id=store_id,
            memory_path=path_prefix,
            params={
                "view": view,
                "limit": limit,
                "page": page,
                "path_prefix": path_prefix,
                "depth": depth,
            },
            max_body=limit * (MAX_MEMORY_JSON if view == "full" else MAX_ITEM_JSON) + 4096,
        )
        items, next_page = self._parse("list_memories", _page, data)
        if len(items) > limit:
            raise StoreError(
                f"list_memories: the store sent {len(items)} items for a page of at most "
                f"{limit}; refused"
            )
        out: list[MemoryItem] = []
        for raw in items:
            if not isinstance(raw, dict):
                # One bad record must not stop a whole store from syncing.
                self._malformed.warning(
                    (store_id, None), store_id, None, "a list item is not a JSON object"
                )
                continue
            item: dict[str, Any] = raw
            kind = item.get("type", "memory")
            if kind == "memory_prefix":
                if depth == 1:
                    out.append(
                        MemoryPrefix(self._parse("list_memories", lambda o: _str(o, "path"), item))
                    )
            elif kind == "memory":
                parser = _parse_full if view == "full" else _parse_memory
                try:
                    out.append(parser(item))
                except _Malformed as e:
                    memory_id = str(item.get("id"))[:80]
                    self._malformed.warning((store_id, memory_id), store_id, memory_id, e)
            else:
                log.debug("skipping unknown list item type=%s memory_store_id=%s", kind, store_id)
        return MemoryPage(out, next_page)

    async def iter_memories(
        self,
        store_id: str,
        *,
        view: View = "basic",
        path_prefix: str | None = None,
        depth: int | None = None,
        page_size: int = MAX_PAGE,
    ) -> AsyncIterator[MemoryItem]:
        """Stream a listing page by page: `RemoteMemory` (basic), `FullMemory` (full;
        page size capped at 20), and `MemoryPrefix` roll-ups only when depth=1.
        The server may list the reserved marker path; callers skip it. A memory id
        listed again is skipped: two files cannot be one memory."""
        page: str | None = None
        seen: set[str] = set()
        listed = 0
        while True:
            result = await self.list_memories_page(
                store_id,
                page=page,
                view=view,
                path_prefix=path_prefix,
                depth=depth,
                limit=page_size,
            )
            listed += len(result.items)
            if listed > MAX_LISTED:  # each held by the caller: bound them
                raise StoreError(
                    f"list_memories: the store listed more than {MAX_LISTED} memories "
                    f"(a store holds at most {MAX_MEMORIES_PER_STORE}); refused"
                )
            for item in result.items:
                memory = item.memory if isinstance(item, FullMemory) else item
                if isinstance(memory, RemoteMemory):
                    if memory.id in seen:
                        self._duplicate.warning(
                            (store_id, memory.id), store_id, memory.id, memory.path
                        )
                        continue
                    seen.add(memory.id)
                yield item
            if result.next_page is None:
                return
            page = result.next_page

    async def list_memories(self, store_id: str) -> list[RemoteMemory]:
        """The whole store, basic view, 100 per page (the cheap diffing listing)."""
        return [
            item async for item in self.iter_memories(store_id) if isinstance(item, RemoteMemory)
        ]

    async def retrieve_memory(self, store_id: str, memory_id: str) -> FullMemory:
        data = await self._request(
            "GET",
            self._memories_url(store_id, memory_id),
            op="retrieve_memory",
            store_id=store_id,
            params={"view": "full"},
            max_body=MAX_MEMORY_JSON,
        )
        return self._parse("retrieve_memory", lambda v: _parse_full(_obj(v, "memory")), data)

    async def _retrieve_basic(self, store_id: str, memory_id: str) -> dict[str, Any]:
        data = await self._request(
            "GET",
            self._memories_url(store_id, memory_id),
            op="retrieve_memory",
            store_id=store_id,
            params={"view": "basic"},
        )
        return self._parse("retrieve_memory", lambda v: _obj(v, "memory"), data)

    async def create_memory(self, store_id: str, path: str, content: str) -> RemoteMemory:
        """Create a memory; never overwrites (`PathConflict` if the path is taken).

        If an attempt's answer was lost and the retry meets a path conflict on the same
        path with the same sha, the first attempt succeeded: that memory is returned.
        """
        try:
            sha = sha256_hex(content.encode("utf-8"))
        except UnicodeEncodeError:
            raise Rejected("create_memory: content is not valid UTF-8 (lone surrogates)") from None

        async def settle(error: StoreError) -> Any:
            if not isinstance(error, PathConflict) or error.conflicting_path != path:
                return None
            if not error.conflicting_memory_id:
                return _RETRY  # the docs say: retry when the id is unknown
            try:
                found = await self._retrieve_basic(store_id, error.conflicting_memory_id)
            except NotFound:
                return _RETRY  # deleted meanwhile: the path may be free now
            if found.get("path") == path and found.get("content_sha256") == sha:
                log.info(
                    "create settled by sha after a lost answer memory_store_id=%s "
                    "path=%s memory_id=%s",
                    store_id,
                    path,
                    error.conflicting_memory_id,
                )
                return found
            return None

        with metrics.push_timer("create"):
            data = await self._request(
                "POST",
                self._memories_url(store_id),
                op="create_memory",
                store_id=store_id,
                memory_path=path,
                params={"view": "basic"},
                body={"path": path, "content": content},
                settle=settle,
            )
        return self._parse("create_memory", lambda v: _parse_memory(_obj(v, "memory")), data)

    async def update_memory(
        self,
        store_id: str,
        memory_id: str,
        *,
        content: str | None = None,
        path: str | None = None,
        precondition_sha256: str | None = None,
    ) -> RemoteMemory:
        """Change content and/or path (a rename keeps the id).

        With `precondition_sha256` the update applies only if the stored sha matches
        (`PreconditionFailed` otherwise). Retrying after a lost answer is safe: the
        server answers 200 when the stored state already equals the request.
        """
        if content is None and path is None:
            raise ValueError("update_memory needs content or path")
        body: dict[str, Any] = {}
        if content is not None:
            body["content"] = content
        if path is not None:
            body["path"] = path
        if precondition_sha256 is not None:
            body["precondition"] = {"type": "content_sha256", "content_sha256": precondition_sha256}
        with metrics.push_timer("update"):
            data = await self._request(
                "POST",
                self._memories_url(store_id, memory_id),
                op="update_memory",
                store_id=store_id,
                memory_path=path,
                params={"view": "basic"},
                body=body,
            )
        return self._parse("update_memory", lambda v: _parse_memory(_obj(v, "memory")), data)

    async def delete_memory(
        self, store_id: str, memory_id: str, *, expected_sha256: str | None = None
    ) -> None:
        """Delete a memory (only if its sha is `expected_sha256`, when given).

        A 404 on the first attempt is `NotFound`; on a retry it means the lost first
        attempt deleted it, so it counts as success.
        """

        async def settle(error: StoreError) -> Any:
            return {} if isinstance(error, NotFound) else None

        with metrics.push_timer("delete"):
            await self._request(
                "DELETE",
                self._memories_url(store_id, memory_id),
                op="delete_memory",
                store_id=store_id,
                params={"expected_content_sha256": expected_sha256},
                settle=settle,
            )

    # ---------------------------------------------------------------- versions

    async def iter_versions(
        self, store_id: str, *, page_size: int = MAX_PAGE, **filters: Unpack[VersionFilters]
    ) -> AsyncIterator[MemoryVersion]:
        """Stream versions, newest first, page by page."""
        view = filters.get("view", "basic")
        limit = max(1, min(page_size, MAX_FULL_PAGE if view == "full" else MAX_PAGE))
        url = f"/v1/memory_stores/{_seg(store_id, 'store id')}/memory_versions"
        params: dict[str, Any] = {
            "memory_id": filters.get("memory_id"),
            "operation": filters.get("operation"),
            "session_id": filters.get("session_id"),
            "api_key_id": filters.get("api_key_id"),
            "created_at[gte]": filters.get("created_at_gte"),
            "created_at[lte]": filters.get("created_at_lte"),
            "view": view,
            "limit": limit,
        }
        page: str | None = None
        while True:
            data = await self._request(
                "GET", url, op="list_versions", store_id=store_id, params={**params, "page": page}
            )
            items, page = self._parse("list_versions", _page, data)
            for item in items:
                yield self._parse("list_versions", _parse_version, item)
            if page is None:
                return

    async def list_versions(
        self, store_id: str, *, limit: int | None = None, **filters: Unpack[VersionFilters]
    ) -> list[MemoryVersion]:
        """Versions newest first; `limit` caps how many are returned (None: all)."""
        out: list[MemoryVersion] = []
        if limit is not None and limit <= 0:
            return out
        page_size = MAX_PAGE if limit is None else min(limit, MAX_PAGE)
        async for version in self.iter_versions(store_id, page_size=page_size, **filters):
            out.append(version)
            if limit is not None and len(out) >= limit:
                break
        return out

    async def watch_head(self, store_id: str) -> str | None:
        """The store's newest version id through memfs serve's watch, at once: where a
        watch starts, and whether the server has one (`NotFound`: it has not)."""
        return (await self._watch(store_id, {})).head

    async def watch(self, store_id: str, *, after: str | None, seconds: float) -> WatchAnswer:
        """memfs serve's watch (docs/server.md, "The watch"): the store's newest version
        id once it is not `after` (with the versions after `after` if the server names
        them), or `after` when `seconds` pass. One attempt: the caller falls back to
        probing on any error."""
        return await self._watch(store_id, {"after": after or "", "timeout": f"{seconds:g}"})

    async def _watch(self, store_id: str, params: dict[str, Any]) -> WatchAnswer:
        seconds = float(params.get("timeout", 0))
        data = await self._long_poll(
            f"/v1/memory_stores/{_seg(store_id, 'store id')}/memfs/watch", params, seconds
        )
        return self._parse("watch", _parse_head, data)

    async def _long_poll(self, url: str, params: dict[str, Any], seconds: float) -> Any:
        """One GET whose answer may take `seconds` on purpose: no retry, and its answer
        is awaited that long plus the usual first-byte bound. The answer is one id
        (`{"head": ...}`), so it is refused past the most one listed memory may take
        (`MAX_ITEM_JSON`): a hostile server cannot make the daemon hold more."""
        timeout = httpx.Timeout(
            TRANSFER_TIMEOUT, connect=CONNECT_TIMEOUT, read=seconds + self.first_byte_timeout
        )
        try:
            request = self._http.build_request(
                "GET", url, params=params, headers=self._headers(False), timeout=timeout
            )
            response = await self._http.send(request, stream=True)
            await self._read_bounded(response, "watch", MAX_ITEM_JSON)
        except httpx.RequestError as exc:
            metrics.store_request("watch", "error", 0, 0)
            raise self._transport_error(exc) from None
        metrics.store_request("watch", str(response.status_code), 0, len(response.content))
        if not response.is_success:
            raise self._decorate(error_from_response(response, scrub=self._scrub))
        try:
            return json.loads(response.content)
        except ValueError:
            raise StoreError("watch: the store answered with a body that is not JSON") from None

    async def retrieve_version(self, store_id: str, version_id: str) -> MemoryVersion:
        data = await self._request(
            "GET",
            f"/v1/memory_stores/{_seg(store_id, 'store id')}/memory_versions/"
            f"{_seg(version_id, 'version id')}",
            op="retrieve_version",
            store_id=store_id,
            params={"view": "full"},
        )
        return self._parse("retrieve_version", _parse_version, data)

    async def redact_version(self, store_id: str, version_id: str) -> MemoryVersion:
        data = await self._request(
            "POST",
            f"/v1/memory_stores/{_seg(store_id, 'store id')}/memory_versions/"
            f"{_seg(version_id, 'version id')}/redact",
            op="redact_version",
            store_id=store_id,
            body={},
        )
        return self._parse("redact_version", _parse_version, data)
