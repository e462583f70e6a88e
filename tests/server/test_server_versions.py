"""Memory version endpoints (spec §5): history, filters, retrieve and redact."""

from __future__ import annotations

import re
from typing import Any

import pytest

from memfs.paths import sha256_hex
from tests.support.api import Api, assert_error

SESSION = "sesn_011CZkZDLs7fYzm1hXNPeRjv"


@pytest.fixture
def sid(shared_api: Api) -> str:
    store_id: str = shared_api.create_store("versions")["id"]
    return store_id


def vpath(sid: str, *rest: str) -> str:
    return "/".join([f"/v1/memory_stores/{sid}/memory_versions", *rest])


def vlist(api: Api, sid: str, **params: Any) -> dict[str, Any]:
    resp = api.request("GET", vpath(sid), params=params)
    assert resp.status_code == 200, resp.text
    page: dict[str, Any] = resp.json()
    return page


def history(api: Api, sid: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A memory created, edited, renamed and deleted: four versions, newest first."""
    mem = api.create_memory(sid, "/h.md", "v1")
    api.update_memory(sid, mem["id"], content="v2")
    api.update_memory(sid, mem["id"], content="v2")  # no-op: no version
    api.update_memory(sid, mem["id"], path="/renamed.md")
    api.delete_memory(sid, mem["id"])
    return mem, vlist(api, sid, memory_id=mem["id"])["data"]


def test_history_of_a_memory(shared_api: Api, sid: str) -> None:
    mem, vs = history(shared_api, sid)
    assert [v["operation"] for v in vs] == ["deleted", "modified", "modified", "created"]
    assert [v["path"] for v in vs] == ["/renamed.md", "/renamed.md", "/h.md", "/h.md"]
    created = vs[-1]
    assert set(created) == {
        "type",
        "id",
        "memory_store_id",
        "memory_id",
        "operation",
        "path",
        "content",
        "content_sha256",
        "content_size_bytes",
        "created_by",
        "created_at",
        "redacted_at",
        "redacted_by",
    }
    assert created["type"] == "memory_version"
    assert re.match(r"^memver_[0-9A-Za-z]{24}$", created["id"])
    assert created["id"] == mem["memory_version_id"]
    assert created["memory_store_id"] == sid and created["memory_id"] == mem["id"]
    assert created["content"] is None  # list defaults to basic
    assert created["content_sha256"] == sha256_hex(b"v1")
    assert created["content_size_bytes"] == 2
    assert created["created_by"]["type"] == "api_actor"
    assert created["redacted_at"] is None and created["redacted_by"] is None
    deleted = vs[0]
    assert (deleted["content"], deleted["content_sha256"], deleted["content_size_bytes"]) == (
        None,
        None,
        None,
    )
    times = [v["created_at"] for v in vs]
    assert times == sorted(times, reverse=True)
    full = vlist(shared_api, sid, memory_id=mem["id"], view="full")["data"]
    assert [v["content"] for v in full] == [None, "v2", "v2", "v1"]


def test_retrieve_version(shared_api: Api, sid: str) -> None:
    mem = shared_api.create_memory(sid, "/r", "body")
    got = shared_api.request("GET", vpath(sid, mem["memory_version_id"])).json()
    assert got["content"] == "body"
    basic = shared_api.request(
        "GET", vpath(sid, mem["memory_version_id"]), params={"view": "basic"}
    ).json()
    assert basic["content"] is None and basic["content_sha256"] == sha256_hex(b"body")
    assert_error(shared_api.request("GET", vpath(sid, "memver_missing")), 404, "not_found_error")
    other = shared_api.create_store("other")["id"]
    assert_error(
        shared_api.request("GET", vpath(other, mem["memory_version_id"])), 404, "not_found_error"
    )


def test_filters(shared_api: Api, sid: str) -> None:
    a = shared_api.create_memory(sid, "/a", "a")
    shared_api.request(
        "POST",
        f"/v1/memory_stores/{sid}/memories",
        json={"path": "/s", "content": "s"},
        headers={"x-memfs-session-id": SESSION},
    )
    shared_api.update_memory(sid, a["id"], content="a2")
    everything = vlist(shared_api, sid)["data"]
    assert len(everything) == 3
    assert [v["operation"] for v in vlist(shared_api, sid, operation="created")["data"]] == [
        "created",
        "created",
    ]
    assert len(vlist(shared_api, sid, operation="modified")["data"]) == 1
    assert vlist(shared_api, sid, operation="deleted")["data"] == []
    by_session = vlist(shared_api, sid, session_id=SESSION)["data"]
    assert [v["path"] for v in by_session] == ["/s"]
    key_id = everything[0]["created_by"]["api_key_id"]
    assert len(vlist(shared_api, sid, api_key_id=key_id)["data"]) == 2
    assert vlist(shared_api, sid, api_key_id="apikey_other")["data"] == []
    assert vlist(shared_api, sid, service_account_id="svac_x")["data"] == []
    assert len(vlist(shared_api, sid, memory_id=a["id"])["data"]) == 2
    middle = everything[1]["created_at"]
    assert [v["id"] for v in vlist(shared_api, sid, **{"created_at[gte]": middle})["data"]] == [
        everything[0]["id"],
        everything[1]["id"],
    ]
    assert [v["id"] for v in vlist(shared_api, sid, **{"created_at[lte]": middle})["data"]] == [
        everything[1]["id"],
        everything[2]["id"],
    ]


def test_paging(shared_api: Api, sid: str) -> None:
    mem = shared_api.create_memory(sid, "/p", "0")
    for i in range(1, 25):
        shared_api.update_memory(sid, mem["id"], content=str(i))
    seen: list[str] = []
    page = vlist(shared_api, sid, limit=7)
    seen += [v["content_sha256"] for v in page["data"]]
    while page["next_page"]:
        assert page["next_page"].startswith("page_")
        page = vlist(shared_api, sid, limit=7, page=page["next_page"])
        seen += [v["content_sha256"] for v in page["data"]]
    assert seen == [sha256_hex(str(i).encode()) for i in range(24, -1, -1)]
    assert len(vlist(shared_api, sid, view="full", limit=20)["data"]) == 20


@pytest.mark.parametrize(
    "params",
    [
        {"operation": "renamed"},
        {"limit": 0},
        {"limit": 101},
        {"view": "full", "limit": 21},
        {"view": "x"},
        {"created_at[gte]": "soon"},
        {"page": "page_AAAA"},
    ],
)
def test_list_validation(shared_api: Api, sid: str, params: dict[str, Any]) -> None:
    assert_error(shared_api.request("GET", vpath(sid), params=params), 400, "invalid_request_error")


def test_list_unknown_store_is_404(shared_api: Api) -> None:
    assert_error(shared_api.request("GET", vpath("memstore_unknown")), 404, "not_found_error")


def test_redact(shared_api: Api, sid: str) -> None:
    mem = shared_api.create_memory(sid, "/secret.md", "password=hunter2")
    head = shared_api.request("POST", vpath(sid, mem["memory_version_id"], "redact"), json={})
    assert_error(head, 409, "conflict_error")
    shared_api.update_memory(sid, mem["id"], content="password=<removed>")
    resp = shared_api.request("POST", vpath(sid, mem["memory_version_id"], "redact"))
    assert resp.status_code == 200, resp.text
    red = resp.json()
    assert (red["content"], red["path"], red["content_sha256"], red["content_size_bytes"]) == (
        None,
        None,
        None,
        None,
    )
    assert red["redacted_at"] is not None
    assert red["redacted_by"]["type"] == "api_actor"
    assert red["operation"] == "created"
    assert red["created_by"]["type"] == "api_actor"
    assert red["memory_id"] == mem["id"]
    fetched = shared_api.request("GET", vpath(sid, red["id"])).json()
    assert fetched == red
    listed = vlist(shared_api, sid, memory_id=mem["id"], view="full")["data"]
    assert listed[-1] == red
    assert "hunter2" not in str(listed)
    again = shared_api.request("POST", vpath(sid, red["id"], "redact"))
    assert again.status_code == 200 and again.json() == red
    # the live memory is untouched
    assert shared_api.get_memory(sid, mem["id"])["content"] == "password=<removed>"


def test_redact_after_delete_and_unknown(shared_api: Api, sid: str) -> None:
    mem, vs = history(shared_api, sid)
    for version in vs:  # the memory is gone, so even its last content version may go
        resp = shared_api.request("POST", vpath(sid, version["id"], "redact"))
        assert resp.status_code == 200, resp.text
        assert resp.json()["path"] is None
    assert all(v["redacted_at"] for v in vlist(shared_api, sid, memory_id=mem["id"])["data"])
    assert_error(
        shared_api.request("POST", vpath(sid, "memver_missing", "redact")), 404, "not_found_error"
    )
