"""StoreClient against a real `memfs serve` on 127.0.0.1: every call, end to end."""

from __future__ import annotations

import itertools
import json
import unicodedata
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from memfs.errors import (
    Conflict,
    NotFound,
    PathConflict,
    PreconditionFailed,
    Rejected,
    StoreAuthError,
    StoreUnavailable,
)
from memfs.paths import MAX_CONTENT_BYTES, RemoteMemory, sha256_hex
from memfs.store.client import FullMemory, MemoryPrefix, StoreClient
from memfs.store.connection import ClientConfig, make_http_client
from memfs.store.transport import RetryPolicy
from tests.support.server import ServerProcess, start_server

_names = itertools.count()


@pytest.fixture
async def client(shared_server: ServerProcess) -> AsyncIterator[StoreClient]:
    async with make_http_client(ClientConfig(shared_server.url)) as http:
        yield StoreClient(http, retry=RetryPolicy(max_attempts=2, base_delay=0.05))


@pytest.fixture
async def store_id(client: StoreClient) -> str:
    store = await client.create_store(f"test store {next(_names)}")
    return store.id


async def test_store_lifecycle(client: StoreClient) -> None:
    store = await client.create_store("Lifecycle Store", "about things", {"team": "a"})
    assert store.id.startswith("memstore_") and store.archived_at is None
    assert (store.name, store.description, store.metadata) == (
        "Lifecycle Store",
        "about things",
        {"team": "a"},
    )
    assert await client.retrieve_store(store.id) == store
    updated = await client.update_store(
        store.id, name="Renamed", description="", metadata={"team": None, "x": "y"}
    )
    assert (updated.name, updated.description, updated.metadata) == ("Renamed", "", {"x": "y"})
    assert store.id in [s.id for s in await client.list_stores()]
    archived = await client.archive_store(store.id)
    assert archived.archived_at
    assert store.id not in [s.id for s in await client.list_stores()]
    assert store.id in [s.id for s in await client.list_stores(include_archived=True)]
    with pytest.raises(Conflict):
        await client.create_memory(store.id, "/a.md", "x")
    await client.delete_store(store.id)
    with pytest.raises(NotFound) as info:
        await client.retrieve_store(store.id)
    assert info.value.request_id and info.value.request_id.startswith("req_")


async def test_list_stores_pages(client: StoreClient) -> None:
    created = {(await client.create_store(f"many {i}")).id for i in range(105)}
    listed = [s.id for s in await client.list_stores()]
    assert created <= set(listed)
    assert len(listed) == len(set(listed))


async def test_memory_crud_and_sha(client: StoreClient, store_id: str) -> None:
    content = "héllo wörld 😀\n"
    memory = await client.create_memory(store_id, "/notes/é.md", content)
    assert isinstance(memory, RemoteMemory) and memory.id.startswith("mem_")
    assert memory.content_sha256 == sha256_hex(content.encode())
    assert memory.content_size_bytes == len(content.encode())
    full = await client.retrieve_memory(store_id, memory.id)
    assert full.content == content and full.memory == memory and full.is_utf8
    assert full.content_bytes() == content.encode()

    empty = await client.create_memory(store_id, "/empty", "")
    assert (
        empty.content_size_bytes == 0
        and (await client.retrieve_memory(store_id, empty.id)).content == ""
    )

    new = await client.update_memory(
        store_id, memory.id, content="v2", precondition_sha256=memory.content_sha256
    )
    assert new.id == memory.id and new.content_sha256 == sha256_hex(b"v2")
    assert new.memory_version_id != memory.memory_version_id
    with pytest.raises(PreconditionFailed) as info:
        await client.update_memory(
            store_id, memory.id, content="v3", precondition_sha256=memory.content_sha256
        )
    assert info.value.status == 409
    # the idempotent carve-out: a stale precondition but the state already matches
    again = await client.update_memory(
        store_id, memory.id, content="v2", precondition_sha256=memory.content_sha256
    )
    assert again.content_sha256 == new.content_sha256

    renamed = await client.update_memory(store_id, memory.id, path="/archive/old.md")
    assert renamed.id == memory.id and renamed.path == "/archive/old.md"
    with pytest.raises(PathConflict) as conflict:
        await client.update_memory(store_id, memory.id, path="/empty")
    assert conflict.value.conflicting_memory_id == empty.id

    with pytest.raises(PreconditionFailed):
        await client.delete_memory(store_id, memory.id, expected_sha256="0" * 64)
    await client.delete_memory(store_id, memory.id, expected_sha256=new.content_sha256)
    with pytest.raises(NotFound):
        await client.retrieve_memory(store_id, memory.id)
    with pytest.raises(NotFound):
        await client.delete_memory(store_id, memory.id)
    await client.delete_memory(store_id, empty.id)
    assert await client.list_memories(store_id) == []


async def test_path_conflicts(client: StoreClient, store_id: str) -> None:
    a = await client.create_memory(store_id, "/a", "x")
    with pytest.raises(PathConflict) as same:
        await client.create_memory(store_id, "/a", "x")
    assert (same.value.conflicting_memory_id, same.value.conflicting_path) == (a.id, "/a")
    with pytest.raises(PathConflict) as below:
        await client.create_memory(store_id, "/a/b.md", "x")
    assert below.value.conflicting_path == "/a" and below.value.error_type == (
        "memory_path_conflict_error"
    )


@pytest.mark.parametrize(
    "path,content",
    [
        ("/too-big", "x" * (MAX_CONTENT_BYTES + 1)),
        ("/a/../b", "x"),
        ("/a//b", "x"),
        ("relative", "x"),
        ("/" + unicodedata.normalize("NFD", "é"), "x"),
        ("/ctl\x01", "x"),
        ("/" + "/".join(["d"] * 21), "x"),
    ],
)
async def test_rejections(client: StoreClient, store_id: str, path: str, content: str) -> None:
    with pytest.raises(Rejected) as info:
        await client.create_memory(store_id, path, content)
    assert info.value.status in (400, 413)


async def test_limits_are_inclusive(client: StoreClient, store_id: str) -> None:
    big = "é" * (MAX_CONTENT_BYTES // 2)
    memory = await client.create_memory(store_id, "/big", big)
    assert memory.content_size_bytes == MAX_CONTENT_BYTES
    assert (await client.retrieve_memory(store_id, memory.id)).content == big


async def test_listing_pages_views_and_depth(client: StoreClient, store_id: str) -> None:
    paths = [f"/d{i % 3}/f{i:03}.md" for i in range(250)] + ["/top.md", "/deep/a/b/c.md"]
    for path in paths:
        await client.create_memory(store_id, path, f"content of {path}")
    listed = await client.list_memories(store_id)
    assert sorted(m.path for m in listed) == sorted(paths)
    assert [m.path for m in listed] == sorted(m.path for m in listed)  # stable path order

    page = await client.list_memories_page(store_id, limit=100)
    assert len(page.items) == 100 and page.next_page is not None
    page2 = await client.list_memories_page(store_id, page=page.next_page, limit=100)
    assert {getattr(i, "path", None) for i in page.items}.isdisjoint(
        {getattr(i, "path", None) for i in page2.items}
    )

    full = [i async for i in client.iter_memories(store_id, view="full", path_prefix="/d1/")]
    assert len(full) == sum(p.startswith("/d1/") for p in paths)
    assert all(
        isinstance(f, FullMemory) and f.content == f"content of {f.memory.path}" for f in full
    )

    top = [i async for i in client.iter_memories(store_id, path_prefix="/", depth=1)]
    prefixes = sorted(i.path for i in top if isinstance(i, MemoryPrefix))
    files = [i.path for i in top if isinstance(i, RemoteMemory)]
    assert prefixes == ["/d0/", "/d1/", "/d2/", "/deep/"] and files == ["/top.md"]
    deep = [i async for i in client.iter_memories(store_id, path_prefix="/deep/", depth=1)]
    assert deep == [MemoryPrefix("/deep/a/")]
    with pytest.raises(Rejected):
        await client.list_memories_page(store_id, depth=2)
    with pytest.raises(Rejected):
        await client.list_memories_page(store_id, path_prefix="/d1")  # must end with '/'


async def test_versions(client: StoreClient, store_id: str) -> None:
    m = await client.create_memory(store_id, "/v.md", "one")
    await client.update_memory(store_id, m.id, content="two")
    await client.update_memory(store_id, m.id, path="/w.md")
    other = await client.create_memory(store_id, "/other", "x")
    await client.delete_memory(store_id, m.id)
    versions = await client.list_versions(store_id, memory_id=m.id)
    assert [v.operation for v in versions] == ["deleted", "modified", "modified", "created"]
    assert versions[0].content_sha256 is None and versions[-1].path == "/v.md"
    assert versions[-1].created_by.get("type")
    full = await client.list_versions(store_id, memory_id=m.id, view="full")
    assert [v.content for v in full] == [None, "two", "two", "one"]
    created = await client.list_versions(store_id, operation="created")
    assert {v.memory_id for v in created} == {m.id, other.id}
    assert len(await client.list_versions(store_id, limit=2)) == 2
    everything = [v async for v in client.iter_versions(store_id)]
    assert len(everything) == 5
    newest = everything[0].created_at
    recent = await client.list_versions(store_id, created_at_gte=newest)
    assert recent and all(v.created_at >= newest for v in recent)
    assert await client.list_versions(store_id, created_at_lte="2000-01-01T00:00:00Z") == []
    one = await client.retrieve_version(store_id, versions[-1].id)
    assert one.content == "one"
    redacted = await client.redact_version(store_id, versions[-1].id)
    assert redacted.redacted_at and redacted.content is None and redacted.path is None
    head = (await client.list_versions(store_id, memory_id=other.id))[0]
    with pytest.raises(Conflict):
        await client.redact_version(store_id, head.id)


async def test_not_found(client: StoreClient, store_id: str) -> None:
    with pytest.raises(NotFound):
        await client.retrieve_store("memstore_doesnotexist")
    with pytest.raises(NotFound):
        await client.retrieve_memory(store_id, "mem_doesnotexist")
    with pytest.raises(NotFound):
        await client.update_memory(store_id, "mem_doesnotexist", content="x")
    with pytest.raises(NotFound):
        await client.list_memories("memstore_doesnotexist")


async def test_credentials(tmp_path: Path) -> None:
    key = "sk-test-secret-key-42"
    with start_server(tmp_path / "auth.db", api_key=key) as server:
        environs: list[dict[str, str]] = [
            {"ANTHROPIC_API_KEY": key},
            {"ANTHROPIC_AUTH_TOKEN": key},
        ]
        for env in environs:
            config = ClientConfig.from_env(server.url, environ=env)
            async with make_http_client(config) as http:
                assert (await StoreClient(http).create_store("authed")).name == "authed"
        for env, hint in [
            ({}, "no credentials were sent"),
            ({"ANTHROPIC_API_KEY": "sk-wrong-key-xyz"}, "check the credential"),
        ]:
            config = ClientConfig.from_env(server.url, environ=env)
            async with make_http_client(config) as http:
                with pytest.raises(StoreAuthError) as info:
                    await StoreClient(http).list_stores()
            assert hint in str(info.value) and "ANTHROPIC_API_KEY" in str(info.value)
            assert "sk-wrong-key-xyz" not in str(info.value) and key not in str(info.value)


async def test_unreachable_server(tmp_path: Path) -> None:
    server = start_server(tmp_path / "gone.db")
    server.stop()
    async with make_http_client(ClientConfig(server.url)) as http:
        client = StoreClient(http, retry=RetryPolicy(max_attempts=2, base_delay=0.01))
        with pytest.raises(StoreUnavailable, match="cannot reach the store"):
            await client.list_stores()


class LoseAnswers(httpx.AsyncBaseTransport):
    """Forwards to the real server, then drops the answer of the first matching request."""

    def __init__(self, method: str) -> None:
        self.inner = httpx.AsyncHTTPTransport()
        self.method = method
        self.lost = 0
        self.seen: list[tuple[str, int]] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self.inner.handle_async_request(request)
        await response.aread()
        self.seen.append((request.method, response.status_code))
        if request.method == self.method and self.lost == 0:
            self.lost += 1
            raise httpx.ReadError("connection reset after the server committed")
        return response

    async def aclose(self) -> None:
        await self.inner.aclose()


async def _lossy_client(url: str, method: str) -> tuple[httpx.AsyncClient, LoseAnswers]:
    transport = LoseAnswers(method)
    return make_http_client(ClientConfig(url), transport=transport), transport


async def test_lost_create_is_settled_by_sha(
    shared_server: ServerProcess, client: StoreClient, store_id: str
) -> None:
    http, transport = await _lossy_client(shared_server.url, "POST")
    async with http:
        lossy = StoreClient(http, retry=RetryPolicy(base_delay=0.01))
        memory = await lossy.create_memory(store_id, "/lost.md", "payload")
    assert transport.seen[:3] == [("POST", 200), ("POST", 409), ("GET", 200)]
    assert [m.id for m in await client.list_memories(store_id)] == [memory.id]
    assert memory.content_sha256 == sha256_hex(b"payload")


async def test_lost_create_with_other_content_conflicts(
    shared_server: ServerProcess, client: StoreClient, store_id: str
) -> None:
    http, _ = await _lossy_client(shared_server.url, "POST")
    async with http:
        lossy = StoreClient(http, retry=RetryPolicy(base_delay=0.01))
        await client.create_memory(store_id, "/taken.md", "theirs")
        # the first POST (ours) meets the existing memory: its 409 answer is "lost";
        # the retry's 409 names a memory with another sha, so it is a real conflict
        with pytest.raises(PathConflict):
            await lossy.create_memory(store_id, "/taken.md", "mine")


async def test_lost_delete_counts_as_deleted(
    shared_server: ServerProcess, client: StoreClient, store_id: str
) -> None:
    memory = await client.create_memory(store_id, "/gone.md", "x")
    http, transport = await _lossy_client(shared_server.url, "DELETE")
    async with http:
        lossy = StoreClient(http, retry=RetryPolicy(base_delay=0.01))
        await lossy.delete_memory(store_id, memory.id, expected_sha256=memory.content_sha256)
    assert transport.seen == [("DELETE", 200), ("DELETE", 404)]


async def test_lost_update_is_idempotent(
    shared_server: ServerProcess, client: StoreClient, store_id: str
) -> None:
    memory = await client.create_memory(store_id, "/u.md", "old")
    http, transport = await _lossy_client(shared_server.url, "POST")
    async with http:
        lossy = StoreClient(http, retry=RetryPolicy(base_delay=0.01))
        new = await lossy.update_memory(
            store_id,
            memory.id,
            content="new",
            path="/u2.md",
            precondition_sha256=memory.content_sha256,
        )
    assert transport.seen == [("POST", 200), ("POST", 200)]
    assert (new.path, new.content_sha256) == ("/u2.md", sha256_hex(b"new"))
    versions = await client.list_versions(store_id, memory_id=memory.id)
    assert [v.operation for v in versions] == ["modified", "created"]


async def test_server_refuses_lone_surrogates(
    client: StoreClient, store_id: str, shared_server: ServerProcess
) -> None:
    # The client refuses to send them; a raw request shows the server refuses them too.
    with pytest.raises(Rejected):
        await client.create_memory(store_id, "/s", "a\ud800")
    body: dict[str, Any] = {"path": "/s", "content": "a\ud800"}
    raw = json.dumps(body).encode()  # ASCII escapes: "\ud800"
    async with make_http_client(ClientConfig(shared_server.url)) as http:
        response = await http.post(
            f"/v1/memory_stores/{store_id}/memories",
            content=raw,
            headers={"content-type": "application/json"},
        )
    assert response.status_code == 400
