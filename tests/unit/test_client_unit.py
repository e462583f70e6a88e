"""StoreClient against httpx.MockTransport: headers, credentials, errors, retries, paging."""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import certifi
import httpx
import pytest
import trio

from memfs.errors import (
    ConfigError,
    Conflict,
    InvalidContent,
    NotFound,
    PathConflict,
    PreconditionFailed,
    Rejected,
    StoreAuthError,
    StoreError,
    StoreUnavailable,
)
from memfs.paths import RemoteMemory, sha256_hex
from memfs.store.client import (
    FullMemory,
    MemoryPrefix,
    StoreClient,
    StoreInfo,
    WatchAnswer,
)
from memfs.store.connection import ClientConfig, decode_work_secret, make_http_client
from memfs.store.transport import RetryPolicy
from memfs.store.wire import MAX_ITEM_JSON

Handler = Callable[[httpx.Request], httpx.Response]
STORE = "memstore_test"
KEY = "sk-ant-secret-key-0123456789"
TOKEN = "sessions-token-abcdefghijklmnop"


def memory_json(
    mid: str, path: str, content: str | None = None, *, sha: str | None = None, full: bool = False
) -> dict[str, Any]:
    text = content if content is not None else ""
    try:
        data = text.encode("utf-8")
    except UnicodeEncodeError:
        data = text.encode("utf-8", "surrogatepass")
    return {
        "id": mid,
        "type": "memory",
        "memory_store_id": STORE,
        "path": path,
        "content": text if full else None,
        "content_sha256": sha or sha256_hex(data),
        "content_size_bytes": len(data),
        "memory_version_id": "memver_" + mid,
        "created_at": "2026-01-01T00:00:00Z",
        "updated_at": "2026-01-01T00:00:00Z",
    }


def store_json(sid: str = STORE, name: str = "Demo", archived: str | None = None) -> dict[str, Any]:
    return {
        "id": sid,
        "type": "memory_store",
        "name": name,
        "description": "",
        "metadata": {"k": "v"},
        "created_at": "2026-01-01T00:00:00Z",
        "updated_at": "2026-01-01T00:00:00Z",
        "archived_at": archived,
    }


def error(
    status: int,
    etype: str,
    message: str = "nope",
    *,
    request_id: str = "req_body",
    headers: dict[str, str] | None = None,
    **extra: str,
) -> httpx.Response:
    body = {
        "type": "error",
        "error": {"type": etype, "message": message, **extra},
        "request_id": request_id,
    }
    return httpx.Response(status, json=body, headers=headers)


class Recorder:
    """A scripted handler: answers come from a list (or a function), requests are kept."""

    def __init__(self, *answers: httpx.Response | Exception | Handler) -> None:
        self.answers = list(answers)
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, Exception):
            raise answer
        if isinstance(answer, httpx.Response):
            return answer
        return answer(request)


def client_for(
    handler: Handler, *, retry: RetryPolicy | None = None, config: ClientConfig | None = None
) -> StoreClient:
    config = config or ClientConfig("http://store.test", ("x-api-key", KEY), "ANTHROPIC_API_KEY")
    http = make_http_client(config, transport=httpx.MockTransport(handler))
    return StoreClient(http, retry=retry or RetryPolicy())


NO_RETRY = RetryPolicy.none()


def secret_of(payload: Any, *, pad: bool) -> str:
    text = base64.urlsafe_b64encode(json.dumps(payload).encode()).decode()
    return text if pad else text.rstrip("=")


# ------------------------------------------------------------------ configuration


def test_base_url_sources() -> None:
    assert ClientConfig.from_env(environ={}).base_url == "https://api.anthropic.com"
    env = {"ANTHROPIC_BASE_URL": "http://127.0.0.1:9/"}
    assert ClientConfig.from_env(environ=env).base_url == "http://127.0.0.1:9"
    assert ClientConfig.from_env("http://[::1]:5", environ=env).base_url == "http://[::1]:5"


@pytest.mark.parametrize("url", ["ftp://x", "not a url", "http://user:pw@host"])
def test_bad_base_url(url: str) -> None:
    with pytest.raises(ConfigError) as info:
        ClientConfig.from_env(url, environ={})
    message = str(info.value)
    assert "API URL" in message and "\n" not in message  # one clear line
    assert "pw" not in message  # a URL's credentials are never echoed


@pytest.mark.parametrize("pad", [True, False])
def test_work_secret_padded_and_unpadded(pad: bool) -> None:
    # a payload length that needs padding
    secret = secret_of({"sessions_token": TOKEN, "api_base_url": "x"}, pad=pad)
    assert pad == secret.endswith("=")
    config = ClientConfig.from_env(
        environ={"ANTHROPIC_WORK_SECRET": secret, "ANTHROPIC_API_KEY": KEY}
    )
    assert config.auth_header == ("authorization", f"Bearer {TOKEN}")
    assert config.credential_source == "ANTHROPIC_WORK_SECRET"
    assert TOKEN not in repr(config) and TOKEN not in str(config)
    assert secret not in repr(config)


@pytest.mark.parametrize(
    "secret",
    [
        "%%%not-base64%%%",
        base64.urlsafe_b64encode(b"not json").decode(),
        base64.urlsafe_b64encode(b"\xff\xfe").decode(),
        secret_of(["list"], pad=True),
        secret_of({"other": 1}, pad=False),
        secret_of({"sessions_token": ""}, pad=False),
        secret_of({"sessions_token": 5}, pad=False),
    ],
)
def test_bad_work_secret_is_config_error(secret: str) -> None:
    with pytest.raises(ConfigError) as info:
        ClientConfig.from_env(environ={"ANTHROPIC_WORK_SECRET": secret, "ANTHROPIC_API_KEY": KEY})
    message = str(info.value)
    assert "ANTHROPIC_WORK_SECRET" in message
    assert secret not in message and KEY not in message


def test_secret_without_token_names_the_field() -> None:
    with pytest.raises(ConfigError, match="sessions_token"):
        decode_work_secret(secret_of({"api_base_url": "x"}, pad=True))


def test_auth_token_then_api_key_then_none() -> None:
    config = ClientConfig.from_env(
        environ={"ANTHROPIC_AUTH_TOKEN": TOKEN, "ANTHROPIC_API_KEY": KEY}
    )
    assert config.auth_header == ("authorization", f"Bearer {TOKEN}")
    assert config.credential_source == "ANTHROPIC_AUTH_TOKEN"
    config = ClientConfig.from_env(
        environ={"ANTHROPIC_API_KEY": KEY, "ANTHROPIC_WORK_SECRET": "  "}
    )
    assert config.auth_header == ("x-api-key", KEY)
    assert KEY not in repr(config)
    assert "ANTHROPIC_API_KEY" in repr(config)
    config = ClientConfig.from_env(environ={"ANTHROPIC_API_KEY": ""})
    assert config.auth_header is None and config.credential_source is None
    assert "none" in repr(config)


# ------------------------------------------------------------------ headers


@pytest.mark.parametrize(
    "env,name,value",
    [
        ({"ANTHROPIC_API_KEY": KEY}, "x-api-key", KEY),
        ({"ANTHROPIC_AUTH_TOKEN": TOKEN}, "authorization", f"Bearer {TOKEN}"),
        (
            {"ANTHROPIC_WORK_SECRET": secret_of({"sessions_token": TOKEN}, pad=False)},
            "authorization",
            f"Bearer {TOKEN}",
        ),
        ({}, None, None),
    ],
)
async def test_headers(env: dict[str, str], name: str | None, value: str | None) -> None:
    rec = Recorder(lambda r: httpx.Response(200, json=memory_json("mem_1", "/a", "x")))
    config = ClientConfig.from_env("http://store.test", environ=env)
    client = client_for(rec, config=config)
    await client.create_memory(STORE, "/a", "x")
    request = rec.requests[0]
    assert request.headers.get_list("anthropic-beta") == ["agent-memory-2026-07-22"]
    assert request.headers["anthropic-version"] == "2023-06-01"
    assert request.headers["content-type"] == "application/json"
    assert json.loads(request.content) == {"path": "/a", "content": "x"}
    for header in ("x-api-key", "authorization"):
        assert request.headers.get(header) == (value if header == name else None)


async def test_exactly_one_beta_even_over_foreign_defaults() -> None:
    rec = Recorder(httpx.Response(200, json={"data": [], "next_page": None}))
    http = httpx.AsyncClient(
        base_url="http://store.test",
        transport=httpx.MockTransport(rec),
        headers={"anthropic-beta": "managed-agents-2026-04-01", "anthropic-version": "old"},
    )
    await StoreClient(http).list_memories(STORE)
    request = rec.requests[0]
    assert request.headers.get_list("anthropic-beta") == ["agent-memory-2026-07-22"]
    assert request.headers.get_list("anthropic-version") == ["2023-06-01"]
    assert "content-type" not in request.headers  # no body, no content type


async def test_archive_sends_no_body() -> None:
    rec = Recorder(httpx.Response(200, json=store_json(archived="2026-02-02T00:00:00Z")))
    info = await client_for(rec).archive_store(STORE)
    assert info.archived_at == "2026-02-02T00:00:00Z"
    assert rec.requests[0].method == "POST"
    assert rec.requests[0].url.path == f"/v1/memory_stores/{STORE}/archive"
    assert rec.requests[0].content == b""


def test_pool_and_timeouts() -> None:
    http = make_http_client(ClientConfig("http://127.0.0.1:1"), max_connections=7)
    assert http.timeout.connect is not None and http.timeout.read is not None
    pool = http._transport._pool  # type: ignore[attr-defined]
    assert pool._max_connections == 7 and pool._max_keepalive_connections == 7


def test_clients_share_one_tls_context(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A session's store daemons, forked after its first client, load no CA bundle of
    their own; SSL_CERT_FILE still picks the bundle, as httpx's own context does."""

    def context_of(url: str) -> object:
        return make_http_client(ClientConfig(url))._transport._pool._ssl_context  # type: ignore[attr-defined]

    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    first = context_of("https://api.example.com")
    assert context_of("https://other.example.com") is first
    assert context_of("http://127.0.0.1:1") is not first  # no trust_env for loopback
    bundle = tmp_path / "ca.pem"
    bundle.write_text(Path(certifi.where()).read_text())
    monkeypatch.setenv("SSL_CERT_FILE", str(bundle))
    assert context_of("https://api.example.com") is not first


# ------------------------------------------------------------------ error mapping


@pytest.mark.parametrize(
    "response,kind",
    [
        (error(400, "invalid_request_error"), Rejected),
        (httpx.Response(413, text="<html>too large</html>"), Rejected),
        (error(413, "request_too_large"), Rejected),
        (error(401, "authentication_error"), StoreAuthError),
        (error(403, "permission_error"), StoreAuthError),
        (error(404, "not_found_error"), NotFound),
        (error(409, "memory_precondition_failed_error"), PreconditionFailed),
        (error(412, "precondition_failed"), PreconditionFailed),
        (error(409, "conflict_error"), Conflict),
        (error(402, "billing_error"), StoreError),
        (error(429, "rate_limit_error"), StoreUnavailable),
        (error(500, "api_error"), StoreUnavailable),
        (httpx.Response(502, text="bad gateway"), StoreUnavailable),
        (error(503, "api_error"), StoreUnavailable),
        (error(504, "timeout_error"), StoreUnavailable),
        (error(529, "overloaded_error"), StoreUnavailable),
        (httpx.Response(500, json=["not", "an", "object"]), StoreUnavailable),
        (httpx.Response(400, json={"error": "a string"}), Rejected),
    ],
)
async def test_error_mapping(response: httpx.Response, kind: type[StoreError]) -> None:
    client = client_for(Recorder(response), retry=NO_RETRY)
    with pytest.raises(StoreError) as info:
        await client.retrieve_memory(STORE, "mem_1")
    assert type(info.value) is kind
    assert info.value.status == response.status_code
    assert KEY not in str(info.value)


async def test_error_fields_and_request_id() -> None:
    client = client_for(
        Recorder(error(404, "not_found_error", "no such memory", request_id="req_b")),
        retry=NO_RETRY,
    )
    with pytest.raises(NotFound) as info:
        await client.retrieve_memory(STORE, "mem_1")
    assert info.value.error_type == "not_found_error"
    assert info.value.request_id == "req_b"
    assert "request_id=req_b" in str(info.value) and "no such memory" in str(info.value)
    client = client_for(
        Recorder(
            error(404, "not_found_error", request_id="req_b", headers={"request-id": "req_h"})
        ),
        retry=NO_RETRY,
    )
    with pytest.raises(NotFound) as info:
        await client.retrieve_memory(STORE, "mem_1")
    assert info.value.request_id == "req_h"


async def test_path_conflict_fields() -> None:
    client = client_for(
        Recorder(
            error(
                409,
                "memory_path_conflict_error",
                conflicting_memory_id="mem_9",
                conflicting_path="/a",
            )
        ),
        retry=NO_RETRY,
    )
    with pytest.raises(PathConflict) as info:
        await client.create_memory(STORE, "/a/b", "x")
    assert info.value.conflicting_memory_id == "mem_9"
    assert info.value.conflicting_path == "/a"


async def test_retry_after_is_parsed() -> None:
    client = client_for(
        Recorder(error(429, "rate_limit_error", headers={"retry-after": "12"})), retry=NO_RETRY
    )
    with pytest.raises(StoreUnavailable) as info:
        await client.list_memories(STORE)
    assert info.value.retry_after == 12.0
    client = client_for(
        Recorder(error(529, "overloaded_error", headers={"retry-after-ms": "1500"})), retry=NO_RETRY
    )
    with pytest.raises(StoreUnavailable) as info:
        await client.list_memories(STORE)
    assert info.value.retry_after == 1.5


async def test_auth_errors_say_what_to_set_and_hide_the_key() -> None:
    rec = Recorder(error(401, "authentication_error", f"invalid x-api-key {KEY}"))
    with pytest.raises(StoreAuthError) as info:
        await client_for(rec, retry=NO_RETRY).list_stores()
    text = str(info.value)
    assert KEY not in text and "[redacted]" in text
    assert "ANTHROPIC_API_KEY" in text and "ANTHROPIC_WORK_SECRET" in text
    config = ClientConfig("http://store.test")
    with pytest.raises(StoreAuthError, match="no credentials were sent"):
        await client_for(rec, config=config, retry=NO_RETRY).list_stores()


@pytest.mark.parametrize(
    "exc",
    [
        httpx.ConnectError("connection refused"),
        httpx.ReadTimeout("timed out"),
        httpx.RemoteProtocolError("server disconnected"),
        httpx.PoolTimeout("pool"),
    ],
)
async def test_transport_errors_are_unavailable(exc: Exception) -> None:
    client = client_for(Recorder(exc), retry=NO_RETRY)
    with pytest.raises(StoreUnavailable, match=r"cannot reach the store at http://store\.test"):
        await client.retrieve_store(STORE)


@pytest.mark.parametrize(
    "body",
    [
        b"<html>oops</html>",
        b'{"data": 5}',
        b'{"next_page": null}',
        b'{"data": [], "next_page": 12}',
        b'["a list"]',
        b"\xff\xfe garbage",
    ],
)
async def test_garbage_success_bodies(body: bytes) -> None:
    client = client_for(Recorder(httpx.Response(200, content=body)), retry=NO_RETRY)
    with pytest.raises(StoreError) as info:
        await client.list_memories(STORE)
    assert type(info.value) is StoreError
    assert "store" in str(info.value)


@pytest.mark.parametrize(
    "record",
    [
        "nope",
        None,
        {"id": "mem_1", "type": "memory"},
        {"id": "mem_1", "path": "/a", "content_sha256": "x", "content_size_bytes": "12"},
        {
            "id": "mem_1",
            "path": "/a",
            "content_sha256": "../../etc/passwd",
            "content_size_bytes": 12,
        },
        {"id": "mem_1", "path": "/a", "content_sha256": "/tmp/victim", "content_size_bytes": 1},
    ],
)
async def test_malformed_records_are_skipped_with_a_warning(
    record: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """One bad record must not stop a store from syncing; its sha names a cache file,
    so anything but 64 hex characters is never let through."""
    good = memory_json("mem_2", "/ok.md", "fine")
    body = {"data": [record, good], "next_page": None}
    client = client_for(Recorder(httpx.Response(200, json=body)), retry=NO_RETRY)
    with caplog.at_level(logging.WARNING, "memfs.client"):
        got = await client.list_memories(STORE)
    assert [m.id for m in got] == ["mem_2"]
    assert "the server listed a malformed memory; skipping it" in caplog.text


async def test_garbage_store_and_memory() -> None:
    client = client_for(Recorder(httpx.Response(200, json={"id": 3})), retry=NO_RETRY)
    with pytest.raises(StoreError, match="malformed"):
        await client.retrieve_store(STORE)
    with pytest.raises(StoreError, match="malformed"):
        await client.retrieve_memory(STORE, "mem_1")
    basic = memory_json("mem_1", "/a", "x")  # content null: not a full view
    client = client_for(Recorder(httpx.Response(200, json=basic)), retry=NO_RETRY)
    with pytest.raises(StoreError, match="content"):
        await client.retrieve_memory(STORE, "mem_1")


# ------------------------------------------------------------------ retries


async def test_transient_then_success(autojump_clock: trio.abc.Clock) -> None:
    ok = httpx.Response(200, json=store_json())
    rec = Recorder(
        error(503, "api_error"), httpx.ConnectError("refused"), error(529, "overloaded_error"), ok
    )
    info = await client_for(rec).retrieve_store(STORE)
    assert isinstance(info, StoreInfo) and info.metadata == {"k": "v"}
    assert len(rec.requests) == 4


async def test_retry_after_honoured(autojump_clock: trio.abc.Clock) -> None:
    rec = Recorder(
        error(429, "rate_limit_error", headers={"retry-after": "7"}),
        httpx.Response(200, json=store_json()),
    )
    start = trio.current_time()
    await client_for(rec, retry=RetryPolicy(base_delay=0.01)).retrieve_store(STORE)
    assert 7.0 <= trio.current_time() - start < 7.5


async def test_retry_after_capped(autojump_clock: trio.abc.Clock) -> None:
    rec = Recorder(
        error(503, "api_error", headers={"retry-after": "3600"}),
        httpx.Response(200, json=store_json()),
    )
    start = trio.current_time()
    await client_for(rec, retry=RetryPolicy(max_delay=4, deadline=100)).retrieve_store(STORE)
    assert 4.0 <= trio.current_time() - start < 4.5


async def test_backoff_is_bounded_exponential(autojump_clock: trio.abc.Clock) -> None:
    rec = Recorder(error(500, "api_error"))
    policy = RetryPolicy(max_attempts=4, base_delay=1.0, max_delay=100, deadline=1000)
    start = trio.current_time()
    with pytest.raises(StoreUnavailable):
        await client_for(rec, retry=policy).retrieve_store(STORE)
    assert len(rec.requests) == 4
    assert trio.current_time() - start <= 1 + 2 + 4 + 0.5


async def test_give_up_after_max_attempts(
    autojump_clock: trio.abc.Clock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="memfs.client")
    rec = Recorder(error(503, "api_error", request_id="req_x"))
    with pytest.raises(StoreUnavailable) as info:
        await client_for(rec, retry=RetryPolicy(max_attempts=3)).create_memory(
            STORE, "/notes/a.md", "hello"
        )
    assert len(rec.requests) == 3
    assert info.value.request_id == "req_x"
    lines = [r.getMessage() for r in caplog.records]
    assert any(
        "memory_store_id=memstore_test" in m and "path=/notes/a.md" in m and "attempt=1" in m
        for m in lines
    )
    assert any("giving up" in m and "attempt=3" in m for m in lines)
    assert all(KEY not in m for m in lines)


async def test_give_up_at_deadline(autojump_clock: trio.abc.Clock) -> None:
    rec = Recorder(error(503, "api_error", headers={"retry-after": "3"}))
    policy = RetryPolicy(max_attempts=100, max_delay=10, deadline=10)
    start = trio.current_time()
    with pytest.raises(StoreUnavailable):
        await client_for(rec, retry=policy).retrieve_store(STORE)
    assert len(rec.requests) == 4  # t=0, 3, 6, 9; the next wait would end past 10
    assert trio.current_time() - start <= 10


@pytest.mark.parametrize(
    "response",
    [
        error(400, "invalid_request_error"),
        error(401, "authentication_error"),
        error(404, "not_found_error"),
        error(409, "memory_precondition_failed_error"),
        error(
            409, "memory_path_conflict_error", conflicting_memory_id="mem_1", conflicting_path="/a"
        ),
        error(413, "request_too_large"),
    ],
)
async def test_no_retry_on_4xx(response: httpx.Response) -> None:
    rec = Recorder(response)
    with pytest.raises(StoreError):
        await client_for(rec).create_memory(STORE, "/a", "x")
    assert len(rec.requests) == 1


async def test_backoff_is_cancellable(autojump_clock: trio.abc.Clock) -> None:
    rec = Recorder(error(503, "api_error", headers={"retry-after": "30"}))
    with trio.move_on_after(5) as scope:
        await client_for(rec, retry=RetryPolicy(max_delay=30)).retrieve_store(STORE)
    assert scope.cancelled_caught
    assert len(rec.requests) == 1


class LostAnswerStore:
    """Applies the first create, then loses its answer; later creates conflict."""

    def __init__(self, stored_content: str, conflicting_id: list[str]) -> None:
        self.stored = memory_json("mem_lost", "/a/b.md", stored_content)
        self.ids = conflicting_id
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        if request.method == "GET":
            assert request.url.params["view"] == "basic"
            if request.url.path.endswith("/mem_lost"):
                return httpx.Response(200, json=self.stored)
            return error(404, "not_found_error")
        if len(self.requests) == 1:
            raise httpx.ReadTimeout("answer lost", request=request)
        cid = self.ids.pop(0) if len(self.ids) > 1 else self.ids[0]
        return error(
            409, "memory_path_conflict_error", conflicting_memory_id=cid, conflicting_path="/a/b.md"
        )


async def test_lost_create_settled_by_sha(autojump_clock: trio.abc.Clock) -> None:
    store = LostAnswerStore("hello", ["mem_lost"])
    memory = await client_for(store).create_memory(STORE, "/a/b.md", "hello")
    assert isinstance(memory, RemoteMemory)
    assert memory.id == "mem_lost" and memory.content_sha256 == sha256_hex(b"hello")
    assert [r.method for r in store.requests] == ["POST", "POST", "GET"]


async def test_lost_create_with_other_sha_is_a_conflict(autojump_clock: trio.abc.Clock) -> None:
    store = LostAnswerStore("someone else's", ["mem_lost"])
    with pytest.raises(PathConflict) as info:
        await client_for(store).create_memory(STORE, "/a/b.md", "hello")
    assert info.value.conflicting_memory_id == "mem_lost"


async def test_lost_create_with_unknown_id_retries(autojump_clock: trio.abc.Clock) -> None:
    store = LostAnswerStore("hello", ["", "", "mem_lost"])
    memory = await client_for(store).create_memory(STORE, "/a/b.md", "hello")
    assert memory.id == "mem_lost"
    assert [r.method for r in store.requests] == ["POST", "POST", "POST", "POST", "GET"]


async def test_first_attempt_path_conflict_is_not_settled() -> None:
    rec = Recorder(
        error(
            409, "memory_path_conflict_error", conflicting_memory_id="mem_1", conflicting_path="/a"
        )
    )
    with pytest.raises(PathConflict):
        await client_for(rec).create_memory(STORE, "/a", "x")
    assert len(rec.requests) == 1


async def test_lost_delete_then_404_is_success(autojump_clock: trio.abc.Clock) -> None:
    rec = Recorder(httpx.ReadTimeout("lost"), error(404, "not_found_error"))
    await client_for(rec).delete_memory(STORE, "mem_1", expected_sha256="ab" * 32)
    assert len(rec.requests) == 2
    assert rec.requests[0].method == "DELETE"
    assert rec.requests[0].url.params["expected_content_sha256"] == "ab" * 32


async def test_first_attempt_delete_404_is_not_found() -> None:
    with pytest.raises(NotFound):
        await client_for(Recorder(error(404, "not_found_error"))).delete_memory(STORE, "m")


async def test_lost_update_is_retried(autojump_clock: trio.abc.Clock) -> None:
    ok = httpx.Response(200, json=memory_json("mem_1", "/b", "new"))
    rec = Recorder(httpx.ReadTimeout("lost"), ok)
    memory = await client_for(rec).update_memory(
        STORE, "mem_1", content="new", path="/b", precondition_sha256="cd" * 32
    )
    assert memory.path == "/b"
    bodies = [json.loads(r.content) for r in rec.requests]
    assert (
        bodies[0]
        == bodies[1]
        == {
            "content": "new",
            "path": "/b",
            "precondition": {"type": "content_sha256", "content_sha256": "cd" * 32},
        }
    )


# ------------------------------------------------------------------ paging and shapes


def paged(items: list[dict[str, Any]], size: int) -> Handler:
    def handle(request: httpx.Request) -> httpx.Response:
        start = int(request.url.params.get("page", "page_0")[5:])
        limit = int(request.url.params["limit"])
        assert limit <= size
        chunk = items[start : start + limit]
        nxt = f"page_{start + limit}" if start + limit < len(items) else None
        return httpx.Response(200, json={"data": chunk, "next_page": nxt})

    return handle


async def test_list_memories_all_pages() -> None:
    items = [memory_json(f"mem_{i}", f"/f{i:03}", str(i)) for i in range(250)]
    rec = Recorder(paged(items, 100))
    memories = await client_for(rec).list_memories(STORE)
    assert [m.path for m in memories] == [f"/f{i:03}" for i in range(250)]
    assert len(rec.requests) == 3
    params = [dict(r.url.params) for r in rec.requests]
    assert params[0] == {"view": "basic", "limit": "100"}
    assert params[1]["page"] == "page_100" and params[2]["page"] == "page_200"


async def test_iter_full_caps_page_size() -> None:
    items = [memory_json(f"mem_{i}", f"/f{i}", f"c{i}", full=True) for i in range(45)]
    rec = Recorder(paged(items, 20))
    got = [item async for item in client_for(rec).iter_memories(STORE, view="full", page_size=100)]
    assert len(got) == 45 and all(isinstance(g, FullMemory) for g in got)
    first = got[0]
    assert isinstance(first, FullMemory)
    assert first.content == "c0" and first.content_bytes() == b"c0"
    assert {r.url.params["limit"] for r in rec.requests} == {"20"}


async def test_depth_one_yields_prefixes() -> None:
    items = [
        memory_json("mem_1", "/a.md", "x"),
        {"type": "memory_prefix", "path": "/dir/"},
        {"type": "something_new", "path": "/z"},
    ]
    rec = Recorder(paged(items, 100))
    got = [i async for i in client_for(rec).iter_memories(STORE, path_prefix="/", depth=1)]
    assert got[1] == MemoryPrefix("/dir/") and len(got) == 2
    assert rec.requests[0].url.params["depth"] == "1"
    assert rec.requests[0].url.params["path_prefix"] == "/"
    page = await client_for(rec).list_memories_page(STORE, page="page_0", limit=2)
    assert page.next_page == "page_2" and len(page.items) == 1  # prefix dropped, no depth=1


async def test_list_stores_pages_and_archived() -> None:
    items = [store_json(f"memstore_{i}", f"s{i}") for i in range(130)]
    rec = Recorder(paged(items, 100))
    stores = await client_for(rec).list_stores(include_archived=True)
    assert len(stores) == 130
    assert rec.requests[0].url.params["include_archived"] == "true"
    rec = Recorder(paged(items[:3], 100))
    await client_for(rec).list_stores()
    assert "include_archived" not in rec.requests[0].url.params


async def test_store_calls() -> None:
    rec = Recorder(lambda r: httpx.Response(200, json=store_json(name="N")))
    client = client_for(rec)
    await client.create_store("N", "desc", {"a": "b"})
    await client.update_store(STORE, name="M", metadata={"a": None})
    assert json.loads(rec.requests[0].content) == {
        "name": "N",
        "description": "desc",
        "metadata": {"a": "b"},
    }
    assert json.loads(rec.requests[1].content) == {"name": "M", "metadata": {"a": None}}
    rec2 = Recorder(httpx.Response(200, json={"id": STORE, "type": "memory_store_deleted"}))
    await client_for(rec2).delete_store(STORE)
    assert rec2.requests[0].method == "DELETE"


async def test_versions() -> None:
    version = {
        "id": "memver_1",
        "type": "memory_version",
        "memory_store_id": STORE,
        "memory_id": "mem_1",
        "operation": "created",
        "path": "/a",
        "content": None,
        "content_sha256": "0" * 64,
        "content_size_bytes": 1,
        "created_by": {"type": "api_actor", "api_key_id": "apikey_1"},
        "created_at": "2026-01-01T00:00:00Z",
        "redacted_at": None,
        "redacted_by": None,
    }
    items = [dict(version, id=f"memver_{i}") for i in range(150)]
    rec = Recorder(paged(items, 100))
    client = client_for(rec)
    got = await client.list_versions(
        STORE,
        memory_id="mem_1",
        operation="created",
        created_at_gte="2026-01-01T00:00:00Z",
        limit=120,
    )
    assert len(got) == 120 and got[0].created_by["type"] == "api_actor"
    params = rec.requests[0].url.params
    assert params["memory_id"] == "mem_1" and params["operation"] == "created"
    assert params["created_at[gte]"] == "2026-01-01T00:00:00Z"
    assert "created_at[lte]" not in params
    everything = [v async for v in client.iter_versions(STORE)]
    assert len(everything) == 150
    redacted = dict(
        version,
        path=None,
        content_sha256=None,
        content_size_bytes=None,
        redacted_at="2026-02-01T00:00:00Z",
        redacted_by={"type": "user_actor"},
    )
    one = await client_for(Recorder(httpx.Response(200, json=redacted))).retrieve_version(
        STORE, "memver_1"
    )
    assert one.path is None and one.redacted_at


# ------------------------------------------------------------------ content and ids


async def test_lone_surrogates_are_surfaced_not_crashing() -> None:
    body = json.dumps(memory_json("mem_1", "/bad", "a\ud800b", full=True)).encode()
    assert b"\\ud800" in body
    client = client_for(Recorder(httpx.Response(200, content=body)), retry=NO_RETRY)
    memory = await client.retrieve_memory(STORE, "mem_1")
    assert memory.content == "a\ud800b" and not memory.is_utf8
    with pytest.raises(InvalidContent, match="not valid UTF-8"):
        memory.content_bytes()
    assert isinstance(InvalidContent("x"), StoreError)


async def test_unencodable_content_is_refused_locally() -> None:
    rec = Recorder(httpx.Response(200, json={}))
    client = client_for(rec)
    with pytest.raises(Rejected):
        await client.create_memory(STORE, "/a", "x\udcff")
    with pytest.raises(Rejected):
        await client.update_memory(STORE, "mem_1", content="x\udcff")
    with pytest.raises(Rejected):
        await client.create_memory(STORE, "/\udcff", "x")
    assert rec.requests == []
    with pytest.raises(ValueError):
        await client.update_memory(STORE, "mem_1")


async def test_ids_cannot_escape_their_route() -> None:
    rec = Recorder(httpx.Response(200, json=store_json()))
    client = client_for(rec)
    await client.retrieve_store("a/../b")
    assert rec.requests[0].url.raw_path == b"/v1/memory_stores/a%2F..%2Fb"
    for bad in ("", ".", ".."):
        with pytest.raises(Rejected):
            await client.retrieve_store(bad)


async def test_non_ascii_content_round_trips_on_the_wire() -> None:
    rec = Recorder(lambda r: httpx.Response(200, json=memory_json("m", "/é", "ü😀")))
    await client_for(rec).create_memory(STORE, "/é", "ü😀")
    assert json.loads(rec.requests[0].content.decode("utf-8")) == {"path": "/é", "content": "ü😀"}


# ------------------------------------------------------------------ the watch


class Streamed:
    """A watch answer `{"head": "aaa…"}` of `mib` MiB, made as it is read (issue 35
    item 4): `sent` counts the bytes the client pulled from it."""

    def __init__(self, mib: int, *, announce: bool) -> None:
        self.mib, self.announce, self.sent = mib, announce, 0

    def __call__(self, request: httpx.Request) -> httpx.Response:
        size = len(b'{"head": ""}') + (self.mib << 20)
        headers = {"content-length": str(size)} if self.announce else {}
        return httpx.Response(200, headers=headers, content=self.body())

    async def body(self) -> Any:
        yield b'{"head": "'
        self.sent += 10
        for _ in range(self.mib):
            self.sent += 1 << 20
            yield b"a" * (1 << 20)
        yield b'"}'


@pytest.mark.parametrize("announce", [False, True])
async def test_the_watch_answer_is_refused_past_one_item(announce: bool) -> None:
    """Before, the watch read its whole answer: a server sending 300 MB answers took
    the daemon to 4.3 GB. Now it stops at MAX_ITEM_JSON, announced or received."""
    huge = Streamed(300, announce=announce)
    client = client_for(huge)
    too_large = f"watch: the store's answer is over {MAX_ITEM_JSON} bytes"
    with pytest.raises(StoreError, match=too_large):
        await client.watch(STORE, after="memver_1", seconds=25)
    assert huge.sent <= (0 if announce else 2 << 20), huge.sent
    with pytest.raises(StoreError, match="over"):
        await client.watch_head(STORE)


@pytest.mark.parametrize(
    "body",
    [b"[]", b'"memver_1"', b'{"head": 5}', b'{"head": "\\ud800"}', b"not json"],
)
async def test_a_watch_answer_that_is_no_head_is_refused(body: bytes) -> None:
    client = client_for(Recorder(httpx.Response(200, content=body)))
    with pytest.raises(StoreError) as refused:
        await client.watch(STORE, after="memver_1", seconds=25)
    assert not isinstance(refused.value, StoreUnavailable)
    assert refused.value.status in (None, 200)


async def test_the_watch_answers_its_head() -> None:
    client = client_for(Recorder(httpx.Response(200, json={"head": "memver_2"})))
    assert await client.watch(STORE, after="memver_1", seconds=25) == WatchAnswer("memver_2")
    client = client_for(Recorder(httpx.Response(200, json={"head": None})))
    assert await client.watch_head(STORE) is None


@pytest.mark.parametrize(
    ("newer", "used"),
    [
        ([{"id": "memver_3", "created_at": "t3"}, {"id": "memver_2", "created_at": "t2"}], True),
        ([{"id": "memver_2", "created_at": "t2"}], False),  # its first is not the head
        ([{"id": "memver_3"}], False),  # no time
        ([{"id": 3, "created_at": "t3"}], False),
        ("memver_3", False),
        ([], False),
    ],
)
async def test_the_watch_names_what_came_after_only_when_it_makes_sense(
    newer: Any, used: bool
) -> None:
    """The versions after `after` let a mount see its own upload's echo whole
    (docs/server.md); anything but a list of versions headed by the head is not used."""
    body = {"head": "memver_3", "newer": newer}
    client = client_for(Recorder(httpx.Response(200, json=body)))
    answer = await client.watch(STORE, after="memver_1", seconds=25)
    assert answer.head == "memver_3"
    expected = (("memver_3", "t3"), ("memver_2", "t2")) if used else None
    assert answer.newer == expected


async def test_the_watch_names_its_deletes_by_memory() -> None:
    """A delete's own answer names no version: the watch's deletes, by memory, let a
    mount know the echo of its own delete."""
    newer = [
        {"id": "memver_3", "created_at": "t3", "memory_id": "mem_a", "operation": "deleted"},
        {"id": "memver_2", "created_at": "t2", "memory_id": "mem_b", "operation": "modified"},
        {"id": "memver_1", "created_at": "t1", "memory_id": 5, "operation": "deleted"},
    ]
    body = {"head": "memver_3", "newer": newer}
    client = client_for(Recorder(httpx.Response(200, json=body)))
    answer = await client.watch(STORE, after="memver_0", seconds=25)
    assert answer.deletes == (("memver_3", "mem_a"),)
