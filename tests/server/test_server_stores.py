"""Memory store endpoints (spec §3): create, list, retrieve, update, archive, delete."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

import pytest

from tests.support.api import Api, assert_error

STORE_ID = re.compile(r"^memstore_[0-9A-Za-z]{24}$")
PAGE = re.compile(r"^page_[0-9A-Za-z_\-]+$")


def rfc3339(value: str) -> datetime:
    assert re.match(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)$", value), value
    return datetime.fromisoformat(value)


def test_create_returns_the_store_object(shared_api: Api) -> None:
    resp = shared_api.request(
        "POST", "/v1/memory_stores", json={"name": "User Preferences", "metadata": {"owner": "u1"}}
    )
    assert resp.status_code == 200
    store = resp.json()
    assert set(store) == {
        "type",
        "id",
        "name",
        "description",
        "metadata",
        "created_at",
        "updated_at",
        "archived_at",
    }
    assert store["type"] == "memory_store"
    assert STORE_ID.match(store["id"])
    assert store["name"] == "User Preferences"
    assert store["description"] == ""
    assert store["metadata"] == {"owner": "u1"}
    assert store["archived_at"] is None
    assert rfc3339(store["created_at"]) == rfc3339(store["updated_at"])
    assert shared_api.request("GET", f"/v1/memory_stores/{store['id']}").json() == store


def test_names_need_not_be_unique(shared_api: Api) -> None:
    a = shared_api.create_store("same")
    b = shared_api.create_store("same")
    assert a["id"] != b["id"]


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"name": ""},
        {"name": "x" * 256},
        {"name": "tab\there"},
        {"name": "nul\x00"},
        {"name": 5},
        {"name": "ok", "description": "d" * 1025},
        {"name": "ok", "description": "nul\x00"},
        {"name": "ok", "description": 3},
        {"name": "ok", "metadata": {f"k{i}": "v" for i in range(17)}},
        {"name": "ok", "metadata": {"k" * 65: "v"}},
        {"name": "ok", "metadata": {"": "v"}},
        {"name": "ok", "metadata": {"k": "v" * 513}},
        {"name": "ok", "metadata": {"k": 1}},
        {"name": "ok", "metadata": ["k"]},
    ],
)
def test_create_validation(shared_api: Api, body: dict[str, Any]) -> None:
    assert_error(
        shared_api.request("POST", "/v1/memory_stores", json=body), 400, "invalid_request_error"
    )


def test_create_accepts_the_limits(shared_api: Api) -> None:
    body = {
        "name": "n" * 255,
        "description": "d" * 1024,
        "metadata": {("k" * 63) + str(i % 10): "v" * 512 for i in range(16)},
    }
    resp = shared_api.request("POST", "/v1/memory_stores", json=body)
    assert resp.status_code == 200, resp.text


def test_retrieve_unknown_is_404(shared_api: Api) -> None:
    assert_error(
        shared_api.request("GET", "/v1/memory_stores/memstore_000000000000000000000000"),
        404,
        "not_found_error",
    )


def test_list_newest_first_with_paging_and_filters(api: Api) -> None:
    made = [api.create_store(f"s{i}") for i in range(7)]
    api.request("POST", f"/v1/memory_stores/{made[3]['id']}/archive")
    page = api.request("GET", "/v1/memory_stores", params={"limit": 4}).json()
    assert set(page) == {"data", "next_page"}
    assert [s["name"] for s in page["data"]] == ["s6", "s5", "s4", "s2"]
    assert PAGE.match(page["next_page"])
    rest = api.request(
        "GET", "/v1/memory_stores", params={"limit": 4, "page": page["next_page"]}
    ).json()
    assert [s["name"] for s in rest["data"]] == ["s1", "s0"]
    assert rest["next_page"] is None

    everything = api.request(
        "GET", "/v1/memory_stores", params={"include_archived": "true", "limit": 100}
    ).json()
    assert [s["name"] for s in everything["data"]] == [f"s{i}" for i in range(6, -1, -1)]
    assert everything["next_page"] is None

    default = api.request("GET", "/v1/memory_stores").json()
    assert len(default["data"]) == 6

    window = api.request(
        "GET",
        "/v1/memory_stores",
        params={
            "created_at[gte]": made[1]["created_at"],
            "created_at[lte]": made[4]["created_at"],
            "include_archived": "true",
        },
    ).json()
    assert [s["name"] for s in window["data"]] == ["s4", "s3", "s2", "s1"]

    offset = rfc3339(made[5]["created_at"]).astimezone().isoformat()
    later = api.request("GET", "/v1/memory_stores", params={"created_at[gte]": offset}).json()
    assert [s["name"] for s in later["data"]] == ["s6", "s5"]


@pytest.mark.parametrize(
    "params",
    [
        {"limit": 0},
        {"limit": 101},
        {"limit": "ten"},
        {"page": "page_garbage"},
        {"page": "nope"},
        {"include_archived": "maybe"},
        {"created_at[gte]": "yesterday"},
    ],
)
def test_list_validation(shared_api: Api, params: dict[str, Any]) -> None:
    assert_error(
        shared_api.request("GET", "/v1/memory_stores", params=params), 400, "invalid_request_error"
    )


def test_update_patches_metadata(shared_api: Api) -> None:
    store = shared_api.request(
        "POST",
        "/v1/memory_stores",
        json={"name": "n", "description": "d", "metadata": {"a": "1", "b": "2"}},
    ).json()
    url = f"/v1/memory_stores/{store['id']}"
    same = shared_api.request("POST", url, json={}).json()
    assert same == store
    updated = shared_api.request(
        "POST", url, json={"name": "n2", "metadata": {"a": "one", "b": None, "c": "3"}}
    ).json()
    assert updated["name"] == "n2"
    assert updated["description"] == "d"
    assert updated["metadata"] == {"a": "one", "c": "3"}
    assert updated["updated_at"] > store["updated_at"]
    assert updated["created_at"] == store["created_at"]
    cleared = shared_api.request("POST", url, json={"description": ""}).json()
    assert cleared["description"] == ""
    assert cleared["metadata"] == {"a": "one", "c": "3"}
    assert shared_api.request("GET", url).json() == cleared


def test_update_validation_and_metadata_cap(shared_api: Api) -> None:
    store = shared_api.request(
        "POST",
        "/v1/memory_stores",
        json={"name": "n", "metadata": {f"k{i}": "v" for i in range(16)}},
    ).json()
    url = f"/v1/memory_stores/{store['id']}"
    assert_error(
        shared_api.request("POST", url, json={"metadata": {"new": "v"}}),
        400,
        "invalid_request_error",
    )
    ok = shared_api.request("POST", url, json={"metadata": {"k0": None, "new": "v"}})
    assert ok.status_code == 200
    assert len(ok.json()["metadata"]) == 16
    assert_error(shared_api.request("POST", url, json={"name": ""}), 400, "invalid_request_error")
    assert_error(
        shared_api.request("POST", "/v1/memory_stores/memstore_nope", json={}),
        404,
        "not_found_error",
    )


def test_archive_makes_the_store_read_only(shared_api: Api) -> None:
    store = shared_api.create_store("arch")
    sid = store["id"]
    keep = shared_api.create_memory(sid, "/keep.md", "keep")
    gone = shared_api.create_memory(sid, "/gone.md", "gone")
    shared_api.update_memory(sid, keep["id"], content="keep v2")
    archived = shared_api.request("POST", f"/v1/memory_stores/{sid}/archive").json()
    assert archived["archived_at"] is not None
    rfc3339(archived["archived_at"])
    again = shared_api.request("POST", f"/v1/memory_stores/{sid}/archive").json()
    assert again == archived

    refusals = [
        shared_api.request(
            "POST", f"/v1/memory_stores/{sid}/memories", json={"path": "/new.md", "content": ""}
        ),
        shared_api.request(
            "POST", f"/v1/memory_stores/{sid}/memories/{keep['id']}", json={"content": "changed"}
        ),
        shared_api.request(
            "POST", f"/v1/memory_stores/{sid}/memories/{keep['id']}", json={"path": "/moved.md"}
        ),
        shared_api.request("POST", f"/v1/memory_stores/{sid}", json={"name": "renamed"}),
    ]
    for resp in refusals:
        assert_error(resp, 409, "conflict_error")

    assert shared_api.get_memory(sid, keep["id"])["content"] == "keep v2"
    assert len(shared_api.list_memories(sid)) == 2
    shared_api.delete_memory(sid, gone["id"])  # deletes stay allowed, as in the hosted API
    versions = shared_api.request(
        "GET", f"/v1/memory_stores/{sid}/memory_versions", params={"memory_id": keep["id"]}
    ).json()["data"]
    old = versions[-1]
    assert (
        shared_api.request(
            "POST", f"/v1/memory_stores/{sid}/memory_versions/{old['id']}/redact"
        ).status_code
        == 200
    )
    assert shared_api.request("GET", f"/v1/memory_stores/{sid}").json()["archived_at"]


def test_delete_removes_store_memories_and_versions(shared_api: Api) -> None:
    sid = shared_api.create_store("doomed")["id"]
    mem = shared_api.create_memory(sid, "/a.md", "a")
    resp = shared_api.request("DELETE", f"/v1/memory_stores/{sid}")
    assert resp.status_code == 200
    assert resp.json() == {"id": sid, "type": "memory_store_deleted"}
    for path in (
        f"/v1/memory_stores/{sid}",
        f"/v1/memory_stores/{sid}/memories",
        f"/v1/memory_stores/{sid}/memories/{mem['id']}",
        f"/v1/memory_stores/{sid}/memory_versions",
        f"/v1/memory_stores/{sid}/memory_versions/{mem['memory_version_id']}",
    ):
        assert_error(shared_api.request("GET", path), 404, "not_found_error")
    assert_error(shared_api.request("DELETE", f"/v1/memory_stores/{sid}"), 404, "not_found_error")
    assert_error(
        shared_api.request("POST", f"/v1/memory_stores/{sid}/archive"), 404, "not_found_error"
    )
