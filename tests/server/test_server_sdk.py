"""The official `anthropic` SDK, unmodified, drives `client.beta.memory_stores` on the server."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import anthropic
import pytest
from anthropic.types.beta.memory_stores import BetaManagedAgentsMemory

from memfs.paths import sha256_hex
from tests.support.postgres import BACKENDS, start_on
from tests.support.server import ServerProcess

KEY = "sk-ant-test-sdk-key"


@pytest.fixture(scope="module", params=BACKENDS)
def sdk_server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    proc = start_on(request.param, request, tmp_path_factory.mktemp("sdk"), api_key=KEY)
    yield proc
    proc.stop()


@pytest.fixture
def client(sdk_server: ServerProcess) -> Iterator[anthropic.Anthropic]:
    with anthropic.Anthropic(api_key=KEY, base_url=sdk_server.url, max_retries=0) as c:
        yield c


def test_sdk_stores(client: anthropic.Anthropic) -> None:
    stores = client.beta.memory_stores
    before = datetime.now().astimezone() - timedelta(seconds=1)
    made = [
        stores.create(name=f"SDK Store {i}", description="for the sdk", metadata={"i": str(i)})
        for i in range(5)
    ]
    assert made[0].id.startswith("memstore_")
    assert made[0].type == "memory_store"
    assert made[0].archived_at is None
    assert isinstance(made[0].created_at, datetime)
    got = stores.retrieve(made[0].id)
    assert got == made[0]
    updated = stores.update(made[0].id, name="Renamed", metadata={"i": None, "new": "yes"})
    assert updated.name == "Renamed"
    assert updated.metadata == {"new": "yes"}
    archived = stores.archive(made[1].id)
    assert archived.archived_at is not None
    listed = [s.id for s in stores.list(limit=2, created_at_gte=before)]
    assert listed == [m.id for m in reversed(made) if m.id != made[1].id]
    with_archived = [s.id for s in stores.list(include_archived=True, created_at_gte=before)]
    assert made[1].id in with_archived
    page = stores.list(limit=2, created_at_gte=before)
    assert page.next_page is not None and page.next_page.startswith("page_")
    deleted = stores.delete(made[2].id)
    assert deleted.id == made[2].id and deleted.type == "memory_store_deleted"
    with pytest.raises(anthropic.NotFoundError):
        stores.retrieve(made[2].id)
    with pytest.raises(anthropic.ConflictError):
        client.beta.memory_stores.memories.create(made[1].id, path="/x", content="x")


def test_sdk_memories_and_versions(client: anthropic.Anthropic) -> None:
    store = client.beta.memory_stores.create(name="sdk memories")
    memories = client.beta.memory_stores.memories
    sid = store.id
    created = memories.create(sid, path="/notes/todo.md", content="- one\n")
    assert created.type == "memory" and created.content is None
    assert created.content_sha256 == sha256_hex(b"- one\n")
    full = memories.create(sid, path="/notes/ideas.md", content="idea", view="full")
    assert full.content == "idea"
    for i in range(25):
        memories.create(sid, path=f"/bulk/{i:02d}.md", content=str(i))
    memories.create(sid, path="/top.md", content="")

    # views and paging
    all_basic = list(memories.list(sid, limit=7))
    assert len(all_basic) == 28
    paths = [m.path for m in all_basic]
    assert paths == sorted(paths)
    assert all(
        m.type == "memory" and m.content is None
        for m in all_basic
        if isinstance(m, BetaManagedAgentsMemory)
    )
    assert all(isinstance(m, BetaManagedAgentsMemory) for m in all_basic)
    all_full = list(memories.list(sid, view="full", limit=20))
    assert [
        m.content
        for m in all_full
        if isinstance(m, BetaManagedAgentsMemory) and m.path.startswith("/bulk/")
    ] == [str(i) for i in range(25)]
    top = list(memories.list(sid, depth=1, limit=2))
    assert [(m.type, m.path) for m in top] == [
        ("memory_prefix", "/bulk/"),
        ("memory_prefix", "/notes/"),
        ("memory", "/top.md"),
    ]
    inside = list(memories.list(sid, path_prefix="/notes/", depth=1))
    assert [m.path for m in inside] == ["/notes/ideas.md", "/notes/todo.md"]
    with pytest.raises(anthropic.BadRequestError):
        memories.list(sid, depth=2)
    with pytest.raises(anthropic.BadRequestError):
        memories.list(sid, view="full", limit=50)

    # retrieve
    got = memories.retrieve(created.id, memory_store_id=sid)
    assert got.content == "- one\n"
    assert memories.retrieve(created.id, memory_store_id=sid, view="basic").content is None

    # preconditions, carve-out, rename
    pre = {"type": "content_sha256", "content_sha256": created.content_sha256}
    two = memories.update(
        created.id, memory_store_id=sid, content="- one\n- two\n", precondition=pre
    )  # type: ignore[arg-type]
    assert two.memory_version_id != created.memory_version_id
    with pytest.raises(anthropic.ConflictError) as stale:
        memories.update(created.id, memory_store_id=sid, content="- three\n", precondition=pre)  # type: ignore[arg-type]
    assert stale.value.status_code == 409
    same = memories.update(
        created.id, memory_store_id=sid, content="- one\n- two\n", precondition=pre
    )  # type: ignore[arg-type]
    assert same.memory_version_id == two.memory_version_id
    renamed = memories.update(created.id, memory_store_id=sid, path="/notes/done.md", view="full")
    assert renamed.id == created.id and renamed.path == "/notes/done.md"
    assert renamed.content == "- one\n- two\n"
    with pytest.raises(anthropic.ConflictError):
        memories.create(sid, path="/notes/done.md", content="dup")
    with pytest.raises(anthropic.BadRequestError):
        memories.create(sid, path="/bad//path", content="x")

    # conditional delete
    with pytest.raises(anthropic.ConflictError):
        memories.delete(created.id, memory_store_id=sid, expected_content_sha256="0" * 64)
    deleted = memories.delete(
        created.id, memory_store_id=sid, expected_content_sha256=renamed.content_sha256
    )
    assert deleted.id == created.id and deleted.type == "memory_deleted"
    with pytest.raises(anthropic.NotFoundError):
        memories.delete(created.id, memory_store_id=sid)
    with pytest.raises(anthropic.NotFoundError):
        memories.retrieve(created.id, memory_store_id=sid)

    # versions and redact
    versions = client.beta.memory_stores.memory_versions
    history = list(versions.list(sid, memory_id=created.id))
    assert [v.operation for v in history] == ["deleted", "modified", "modified", "created"]
    assert history[0].created_by is not None and history[0].created_by.type == "api_actor"
    assert len(list(versions.list(sid, operation="created", limit=5))) == 28
    assert len(list(versions.list(sid, view="full", limit=20))) == 31
    first = versions.retrieve(history[-1].id, memory_store_id=sid)
    assert first.content == "- one\n" and first.path == "/notes/todo.md"
    redacted = versions.redact(history[-1].id, memory_store_id=sid)
    assert redacted.redacted_at is not None and redacted.redacted_by is not None
    assert redacted.content is None and redacted.path is None
    assert redacted.content_sha256 is None and redacted.content_size_bytes is None
    assert redacted.operation == "created" and redacted.created_by == first.created_by
    assert versions.retrieve(history[-1].id, memory_store_id=sid).redacted_at is not None
    head = memories.retrieve(full.id, memory_store_id=sid)
    with pytest.raises(anthropic.ConflictError):
        versions.redact(head.memory_version_id, memory_store_id=sid)


def test_sdk_with_the_other_beta_and_bad_key(sdk_server: ServerProcess, tmp_path: Path) -> None:
    with anthropic.Anthropic(
        api_key=KEY,
        base_url=sdk_server.url,
        max_retries=0,
        default_headers={"anthropic-beta": "managed-agents-2026-04-01"},
    ) as c:
        store = c.beta.memory_stores.create(
            name="old beta", extra_headers={"anthropic-beta": "managed-agents-2026-04-01"}
        )
        assert store.id.startswith("memstore_")
    with anthropic.Anthropic(api_key="wrong", base_url=sdk_server.url, max_retries=0) as bad:
        with pytest.raises(anthropic.AuthenticationError):
            bad.beta.memory_stores.list()
