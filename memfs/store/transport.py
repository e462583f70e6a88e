"""How memfs sends a request to a Memory Store: the transport under `StoreClient`.

`Transport` sends one call over an injected `httpx.AsyncClient` and maps every failure
onto `memfs.errors` (`StoreUnavailable` is the only transient class). It retries the
transient ones with capped exponential back-off and full jitter (`RetryPolicy`),
honouring `retry-after`; a call may pass a settle hook that decides what a permanent
error met on a retry means (the first attempt may have been applied before its answer
was lost). Answers are read as they stream in and refused past the most the API's
limits allow; credentials are scrubbed from every message.

The typed calls (what each request is and what its answer means) are in
`memfs.store.client`.
"""

from __future__ import annotations

import json
import logging
import random
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeAlias, TypeVar

import httpx
import trio

from memfs import metrics
from memfs.errors import Rejected, StoreAuthError, StoreError, StoreUnavailable
from memfs.logs import Repeated
from memfs.paths import ANTHROPIC_VERSION, BETA_MEMORY
from memfs.store.connection import (
    BACKGROUND_FIRST_BYTE,
    CONNECT_TIMEOUT,
    CREDENTIAL_HINT,
    TRANSFER_TIMEOUT,
)
from memfs.store.wire import (
    MAX_ANSWER_BYTES,
    MAX_ITEM_JSON,
    _Malformed,
    error_from_response,
)

_T = TypeVar("_T")

log = logging.getLogger("memfs.client")


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


DEFAULT_RETRY = RetryPolicy()


class _Retry:
    """Sentinel a settle hook returns to ask for another attempt."""


RETRY = _Retry()
Settle: TypeAlias = Callable[[StoreError], Awaitable[Any]]


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


class Transport:
    """Sends the calls of the Memory Stores API over an injected `httpx.AsyncClient`.

    The http client supplies the base URL and the credential (see `make_http_client`);
    this class sets `anthropic-version` and exactly one `anthropic-beta` value on every
    request itself, replacing whatever defaults the http client has. It raises only
    `StoreError` subclasses.
    """

    def __init__(
        self,
        http: httpx.AsyncClient,
        *,
        retry: RetryPolicy = DEFAULT_RETRY,
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

    async def request(
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
        may have been applied before its answer was lost): it returns a result, `RETRY`,
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

    def parse(self, op: str, parser: Callable[[Any], _T], data: Any) -> _T:
        try:
            return parser(data)
        except _Malformed as exc:
            raise StoreError(f"{op}: malformed answer from the store: {exc}") from None

    async def long_poll(self, url: str, params: dict[str, Any], seconds: float) -> Any:
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
