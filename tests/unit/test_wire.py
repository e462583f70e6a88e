"""The wire parser against hostile answers (issue 24 item 12 and its fuzz test).

Every answer goes through the real `StoreClient` over `httpx.MockTransport`: a bad
record is skipped and logged per memory, never a failed listing, and whatever JSON a
server sends, a call either returns objects that keep the API's rules or raises
`StoreError` (a whole-listing failure only for a page that is not a page at all).
"""

from __future__ import annotations

import json
import logging
from typing import Any

import httpx
import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memfs.errors import StoreError, StoreUnavailable
from memfs.logs import Repeated
from memfs.paths import MAX_CONTENT_BYTES, RemoteMemory, is_sha256_hex
from memfs.store.client import FullMemory, MemoryVersion
from tests.unit.test_client_unit import (
    NO_RETRY,
    STORE,
    Handler,
    Recorder,
    client_for,
    error,
    memory_json,
)


def listing(*pages: list[Any]) -> Handler:
    """A listing served as `pages`, chained by their index."""

    def answer(request: httpx.Request) -> httpx.Response:
        at = int(request.url.params.get("page") or 0)
        more = str(at + 1) if at + 1 < len(pages) else None
        return httpx.Response(200, json={"data": pages[at], "next_page": more})

    return answer


@pytest.mark.parametrize("size", [2**63, 2**64 + 1, -5, -1, MAX_CONTENT_BYTES + 1, 10**30])
async def test_an_impossible_size_skips_that_memory_only(
    size: int, caplog: pytest.LogCaptureFixture
) -> None:
    """2^63 made a whole directory EIO and -5 made stat EIO: no content is ever larger
    than the API's limit, so such a record is invalid."""
    bad = {**memory_json("mem_bad", "/d/bad.md", "x"), "content_size_bytes": size}
    good = memory_json("mem_ok", "/d/ok.md", "fine")
    client = client_for(listing([bad, good]), retry=NO_RETRY)
    with caplog.at_level(logging.WARNING, "memfs.client"):
        got = await client.list_memories(STORE)
    assert [m.id for m in got] == ["mem_ok"]
    assert "skipping it memory_store_id=memstore_test memory_id=mem_bad" in caplog.text
    assert "content_size_bytes is outside 0..102400" in caplog.text


@pytest.mark.parametrize("size", [0, MAX_CONTENT_BYTES])
async def test_sizes_at_the_limits_are_kept(size: int) -> None:
    record = {**memory_json("mem_1", "/a.md", "x"), "content_size_bytes": size}
    client = client_for(listing([record]), retry=NO_RETRY)
    assert [m.content_size_bytes for m in await client.list_memories(STORE)] == [size]


async def test_a_duplicate_id_is_skipped_across_pages(caplog: pytest.LogCaptureFixture) -> None:
    """Two files cannot be one memory: the first listed keeps it, the rest are logged."""
    first = memory_json("mem_1", "/a.md", "aaa")
    again = memory_json("mem_1", "/b.md", "bbb")
    other = memory_json("mem_2", "/c.md", "ccc")
    client = client_for(listing([first, other], [again, dict(first)]), retry=NO_RETRY)
    with caplog.at_level(logging.WARNING, "memfs.client"):
        got = await client.list_memories(STORE)
    assert [(m.id, m.path) for m in got] == [("mem_1", "/a.md"), ("mem_2", "/c.md")]
    assert caplog.text.count("the server listed a memory id twice") == 1
    assert "memory_id=mem_1 path=/b.md" in caplog.text


async def test_a_bad_record_is_logged_once_per_cause_over_passes(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Issue 24 item 5: the same bad listing every pass does not grow the log."""
    bad = [{**memory_json(f"mem_{i}", f"/{i}.md", "x"), "content_size_bytes": -1} for i in range(3)]
    client = client_for(listing(bad), retry=NO_RETRY)
    with caplog.at_level(logging.WARNING, "memfs.client"):
        for _ in range(100):
            assert await client.list_memories(STORE) == []
    lines = caplog.text.splitlines()
    assert sum("skipping it memory_store_id=" in line for line in lines) == 3
    counts = [line for line in lines if "a warning repeated" in line]
    # 297 repeats: told at 10 and 100, never once a pass
    assert [c.split("count=")[1].split()[0] for c in counts] == ["10", "100"]
    assert counts[0].endswith("warning=the server listed a malformed memory; skipping it")


async def test_a_server_that_stays_down_logs_its_retries_once(
    autojump_clock: trio.abc.Clock, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 24 item 5: each pass against a down server retried with a warning a try;
    now the first warning of a cause, then counts."""
    client = client_for(Recorder(error(503, "api_error")))
    with caplog.at_level(logging.WARNING, "memfs.client"):
        for _ in range(40):  # 40 passes, each warned at retries 2, 3 and 4
            with pytest.raises(StoreUnavailable):
                await client.list_memories(STORE)
    lines = caplog.text.splitlines()
    assert sum("retrying store request op=list_memories" in line for line in lines) == 1
    counts = [line.split("count=")[1].split()[0] for line in lines if "a warning repeated" in line]
    assert counts == ["10", "100"]  # 3 x 40 - 1 repeats


def test_repeated_bounds_lines_for_any_number_of_causes(caplog: pytest.LogCaptureFixture) -> None:
    log = logging.getLogger("memfs.test")
    repeated = Repeated(log, "bad thing memory_store_id=%s path=%s", lines=5, remember=50)
    with caplog.at_level(logging.WARNING, "memfs.test"):
        for _ in range(10):
            for i in range(1000):
                repeated.warning(i, "s", f"/{i}")
    lines = caplog.text.splitlines()
    assert len([line for line in lines if "bad thing" in line and "repeated" not in line]) == 5
    assert len(lines) == 5 + 3  # the count at 10, 100 and 1000
    assert repeated.silenced == 10_000 - 5
    repeated.forget(0)
    with caplog.at_level(logging.WARNING, "memfs.test"):
        caplog.clear()
        repeated.warning(0, "s", "/0")
    assert "bad thing" not in caplog.text  # its line budget is spent: only counted


# ------------------------------------------------------------------ fuzz

_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False)
    | st.text(max_size=30)
    | st.sampled_from(["", "/", "/..", "/a.md", "a" * 64, "../../etc/passwd", "\ud800"])
)
_json = st.recursive(
    _scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
_MEMORY_KEYS = (
    "type",
    "id",
    "path",
    "content",
    "content_sha256",
    "content_size_bytes",
    "memory_version_id",
    "created_at",
    "updated_at",
)


@st.composite
def hostile_memory(draw: st.DrawFn) -> Any:
    """A record near a valid memory: a valid one with some fields replaced or dropped,
    or anything at all."""
    base = memory_json(
        draw(st.sampled_from(["mem_1", "mem_2", "mem_3", "mem_\ud800", "..", ""])),
        draw(st.sampled_from(["/a.md", "/d/b.md", "/a.md/"])),
        draw(st.text(max_size=20)),
        full=True,
    )
    if draw(st.integers(0, 9)) == 0:
        return draw(_json)
    for key in draw(st.lists(st.sampled_from(_MEMORY_KEYS), max_size=3)):
        if draw(st.booleans()):
            base.pop(key, None)
        else:
            base[key] = draw(_json)
    return base


_page = st.fixed_dictionaries(
    {"data": st.lists(hostile_memory(), max_size=8)},
    optional={"next_page": st.none() | st.just("x") | _scalars},
)
_body = _page | _json


def _serve(bodies: list[Any]) -> Handler:
    """Each request gets the next body, then an empty last page: how long a cursor may
    run is the listing bound's business (issue 24 item 4), not the parser's."""
    served = iter(bodies)

    def answer(request: httpx.Request) -> httpx.Response:
        body = next(served, {"data": [], "next_page": None})
        # JSON escapes carry lone surrogates through, as a hostile server would send them
        return httpx.Response(200, content=json.dumps(body).encode())

    return answer


def _check_memory(m: RemoteMemory) -> None:
    assert isinstance(m.path, str)
    m.id.encode("utf-8")  # it goes back in URLs
    assert is_sha256_hex(m.content_sha256)
    assert 0 <= m.content_size_bytes <= MAX_CONTENT_BYTES


async def _list(bodies: list[Any], view: str) -> None:
    client = client_for(_serve(bodies), retry=NO_RETRY)
    ids: list[str] = []
    try:
        with trio.fail_after(5):
            async for item in client.iter_memories(STORE, view=view):  # type: ignore[arg-type]
                memory = item.memory if isinstance(item, FullMemory) else item
                assert isinstance(memory, RemoteMemory)
                _check_memory(memory)
                ids.append(memory.id)
    except StoreError:
        return
    assert len(ids) == len(set(ids))


@given(st.lists(_body, min_size=1, max_size=4), st.sampled_from(["basic", "full"]))
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_fuzz_listings(bodies: list[Any], view: str) -> None:
    trio.run(_list, bodies, view)


async def _retrieve(body: Any) -> None:
    client = client_for(_serve([body]), retry=NO_RETRY)
    try:
        full = await client.retrieve_memory(STORE, "mem_1")
    except StoreError:
        return
    _check_memory(full.memory)
    assert isinstance(full.content, str)


@given(hostile_memory())
@settings(max_examples=300, deadline=None)
def test_fuzz_memories(body: Any) -> None:
    trio.run(_retrieve, body)


_VERSION_KEYS = (
    "id",
    "memory_id",
    "operation",
    "path",
    "content",
    "content_sha256",
    "content_size_bytes",
    "created_by",
    "redacted_by",
    "redacted_at",
)


@st.composite
def hostile_version(draw: st.DrawFn) -> Any:
    base: dict[str, Any] = {
        "type": "memory_version",
        "id": "memver_1",
        "memory_id": "mem_1",
        "memory_store_id": STORE,
        "operation": "created",
        "path": "/a.md",
        "content": "x",
        "content_sha256": "a" * 64,
        "content_size_bytes": 1,
        "created_at": "2026-01-01T00:00:00Z",
        "created_by": {"type": "api_actor"},
        "redacted_at": None,
        "redacted_by": None,
    }
    if draw(st.integers(0, 9)) == 0:
        return draw(_json)
    for key in draw(st.lists(st.sampled_from(_VERSION_KEYS), max_size=3)):
        base[key] = draw(_json)
    return base


async def _versions(bodies: list[Any]) -> None:
    client = client_for(_serve(bodies), retry=NO_RETRY)
    try:
        with trio.fail_after(5):
            got = await client.list_versions(STORE, limit=50)
    except StoreError:
        return
    for v in got:
        assert isinstance(v, MemoryVersion)
        v.id.encode("utf-8")
        v.memory_id.encode("utf-8")
        assert v.content_sha256 is None or is_sha256_hex(v.content_sha256)
        assert v.content_size_bytes is None or 0 <= v.content_size_bytes <= MAX_CONTENT_BYTES


@given(
    st.lists(
        st.fixed_dictionaries(
            {"data": st.lists(hostile_version(), max_size=5)},
            optional={"next_page": st.none() | _scalars},
        )
        | _json,
        min_size=1,
        max_size=3,
    )
)
@settings(max_examples=300, deadline=None)
def test_fuzz_versions(bodies: list[Any]) -> None:
    trio.run(_versions, bodies)
