"""Memory endpoints (spec §4): path rules, views, listing, updates, preconditions, deletes."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from memfs.paths import sha256_hex
from tests.support.api import Api, assert_error
from tests.support.postgres import BACKENDS, start_on

MEM_ID = re.compile(r"^mem_[0-9A-Za-z]{24}$")
VER_ID = re.compile(r"^memver_[0-9A-Za-z]{24}$")


@pytest.fixture
def sid(shared_api: Api) -> str:
    store_id: str = shared_api.create_store("memories")["id"]
    return store_id


def mpath(sid: str, *rest: str) -> str:
    return "/".join([f"/v1/memory_stores/{sid}/memories", *rest])


def versions(api: Api, sid: str, **params: Any) -> list[dict[str, Any]]:
    resp = api.request(
        "GET", f"/v1/memory_stores/{sid}/memory_versions", params={"limit": 100, **params}
    )
    assert resp.status_code == 200, resp.text
    data: list[dict[str, Any]] = resp.json()["data"]
    return data


# ------------------------------------------------------------------ create


def test_create_returns_the_memory(shared_api: Api, sid: str) -> None:
    content = "héllo wörld ✓\n"
    resp = shared_api.request("POST", mpath(sid), json={"path": "/notes/hi.md", "content": content})
    assert resp.status_code == 200
    mem = resp.json()
    assert set(mem) == {
        "type",
        "id",
        "memory_store_id",
        "path",
        "content",
        "content_sha256",
        "content_size_bytes",
        "memory_version_id",
        "created_at",
        "updated_at",
    }
    assert mem["type"] == "memory"
    assert MEM_ID.match(mem["id"])
    assert VER_ID.match(mem["memory_version_id"])
    assert mem["memory_store_id"] == sid
    assert mem["path"] == "/notes/hi.md"
    assert mem["content"] is None
    assert mem["content_sha256"] == sha256_hex(content.encode())
    assert mem["content_size_bytes"] == len(content.encode())
    assert mem["created_at"] == mem["updated_at"]
    full = shared_api.request(
        "POST",
        mpath(sid),
        params={"view": "full"},
        json={"path": "/notes/other.md", "content": content},
    ).json()
    assert full["content"] == content


def test_content_is_stored_unnormalized(shared_api: Api, sid: str) -> None:
    content = "a\r\nb\x00c\te\u0301 \ufeff"
    mem = shared_api.create_memory(sid, "/raw", content)
    got = shared_api.get_memory(sid, mem["id"])
    assert got["content"] == content
    assert got["content_sha256"] == sha256_hex(content.encode())


def test_empty_content_and_size_limit(shared_api: Api, sid: str) -> None:
    empty = shared_api.create_memory(sid, "/empty", "")
    assert empty["content_size_bytes"] == 0
    assert empty["content_sha256"] == sha256_hex(b"")
    assert shared_api.create_memory(sid, "/max", "x" * 102_400)["content_size_bytes"] == 102_400
    multibyte = "é" * 51_200
    assert shared_api.create_memory(sid, "/max2", multibyte)["content_size_bytes"] == 102_400
    for path, content in (("/over", "x" * 102_401), ("/over2", "é" * 51_200 + "x")):
        assert_error(
            shared_api.request("POST", mpath(sid), json={"path": path, "content": content}),
            400,
            "invalid_request_error",
        )
    assert [m["path"] for m in shared_api.list_memories(sid)] == ["/empty", "/max", "/max2"]


@pytest.mark.parametrize(
    "body",
    [
        {"path": "/a"},
        {"path": "/a", "content": None},
        {"content": "x"},
        {"path": 3, "content": "x"},
        {"path": "/a", "content": 3},
        {"path": "/a", "content": "\ud800"},
    ],
)
def test_create_body_validation(shared_api: Api, sid: str, body: dict[str, Any]) -> None:
    raw = json.dumps(body).encode()  # ASCII escapes, so a lone surrogate can be sent
    resp = shared_api.request(
        "POST", mpath(sid), content=raw, headers={"content-type": "application/json"}
    )
    assert_error(resp, 400, "invalid_request_error")


BAD_PATHS = [
    "a",
    "",
    "/",
    "//a",
    "/a//b",
    "/a/",
    "/./a",
    "/a/.",
    "/a/../b",
    "/..",
    "/a\x00b",
    "/a\nb",
    "/a\x7f",
    "/a\u200bb",
    "/a\ufeff",
    "/a\u2028b",
    "/a\u2029",
    "/e\u0301",  # not NFC
    "/" + "/".join(["s"] * 21),
    "/" + "x" * 1024,
    "/" + "é" * 512,
]


@pytest.mark.parametrize("path", BAD_PATHS)
def test_path_rules(shared_api: Api, sid: str, path: str) -> None:
    resp = shared_api.request("POST", mpath(sid), json={"path": path, "content": "x"})
    assert_error(resp, 400, "invalid_request_error")


@pytest.mark.parametrize(
    "path",
    [
        "/" + "/".join(["s"] * 20),
        "/" + "x" * 1023,
        "/a b/ç/日本語.md",
        "/.hidden/..dots/...",
        "/.anthropic-memory-store",
        "/\u00e9",
    ],
)
def test_valid_paths(shared_api: Api, sid: str, path: str) -> None:
    assert shared_api.create_memory(sid, path, "x")["path"] == path


def test_create_never_overwrites_and_overlaps_conflict(shared_api: Api, sid: str) -> None:
    mem = shared_api.create_memory(sid, "/a/b.md", "1")
    for path, blocker in (
        ("/a/b.md", "/a/b.md"),
        ("/a", "/a/b.md"),
        ("/a/b.md/c", "/a/b.md"),
        ("/a/b.md/c/d", "/a/b.md"),
    ):
        resp = shared_api.request("POST", mpath(sid), json={"path": path, "content": "2"})
        body = assert_error(resp, 409, "memory_path_conflict_error")
        assert body["error"]["conflicting_memory_id"] == mem["id"]
        assert body["error"]["conflicting_path"] == blocker
    for path in ("/a/b", "/a/b.md2", "/a.md", "/A/b.md", "/a/c", "/a-b"):
        shared_api.create_memory(sid, path, "ok")
    assert shared_api.get_memory(sid, mem["id"])["content"] == "1"


def test_create_in_unknown_store_is_404(shared_api: Api) -> None:
    assert_error(
        shared_api.request("POST", mpath("memstore_unknown"), json={"path": "/a", "content": ""}),
        404,
        "not_found_error",
    )


@pytest.fixture(params=BACKENDS)
def capped(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Api]:
    proc = start_on(request.param, request, tmp_path, extra_args=["--max-memories", "3"])
    with Api(proc.url) as api:
        yield api
    proc.stop()


def test_memory_cap(capped: Api) -> None:
    sid = capped.create_store("capped")["id"]
    first = capped.create_memory(sid, "/1", "1")
    capped.create_memory(sid, "/2", "2")
    capped.create_memory(sid, "/3", "3")
    assert_error(
        capped.request("POST", mpath(sid), json={"path": "/4", "content": "4"}),
        400,
        "invalid_request_error",
    )
    conflict = capped.request("POST", mpath(sid), json={"path": "/1", "content": "1"})
    assert_error(conflict, 409, "memory_path_conflict_error")  # a lost-answer retry stays 409
    capped.update_memory(sid, first["id"], content="edited", path="/one")
    capped.delete_memory(sid, first["id"])
    capped.create_memory(sid, "/4", "4")
    other = capped.create_store("other")["id"]
    capped.create_memory(other, "/1", "per store")


# -------------------------------------------------------------- retrieve


def test_retrieve_views(shared_api: Api, sid: str) -> None:
    mem = shared_api.create_memory(sid, "/r.md", "content")
    full = shared_api.request("GET", mpath(sid, mem["id"])).json()
    assert full["content"] == "content"
    assert {k: v for k, v in full.items() if k != "content"} == {
        k: v for k, v in mem.items() if k != "content"
    }
    basic = shared_api.request("GET", mpath(sid, mem["id"]), params={"view": "basic"}).json()
    assert basic["content"] is None
    assert_error(
        shared_api.request("GET", mpath(sid, mem["id"]), params={"view": "all"}),
        400,
        "invalid_request_error",
    )
    assert_error(shared_api.request("GET", mpath(sid, "mem_unknown")), 404, "not_found_error")
    other = shared_api.create_store("other")["id"]
    assert_error(shared_api.request("GET", mpath(other, mem["id"])), 404, "not_found_error")


# ------------------------------------------------------------------ list


def list_page(api: Api, sid: str, **params: Any) -> dict[str, Any]:
    resp = api.request("GET", mpath(sid), params=params)
    assert resp.status_code == 200, resp.text
    page: dict[str, Any] = resp.json()
    return page


def list_all(api: Api, sid: str, **params: Any) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    page = list_page(api, sid, **params)
    items.extend(page["data"])
    while page["next_page"]:
        page = list_page(api, sid, **params, page=page["next_page"])
        items.extend(page["data"])
    return items


def test_list_is_in_path_byte_order_with_paging(shared_api: Api, sid: str) -> None:
    paths = ["/b", "/B", "/a/z", "/a.md", "/a-b", "/é", "/z/y/x", "/_", "/~", "/0"]
    for p in paths:
        shared_api.create_memory(sid, p, p)
    expected = sorted(paths, key=lambda p: p.encode())
    assert [m["path"] for m in list_all(shared_api, sid)] == expected
    for limit in (1, 3, 10):
        got = list_all(shared_api, sid, limit=limit)
        assert [m["path"] for m in got] == expected
        assert all(m["content"] is None for m in got)
    page = list_page(shared_api, sid, limit=3)
    assert len(page["data"]) == 3 and page["next_page"].startswith("page_")
    last = list_page(shared_api, sid, limit=10)
    assert last["next_page"] is None
    full = list_all(shared_api, sid, view="full", limit=4)
    assert [m["content"] for m in full] == expected


@pytest.mark.parametrize(
    "params",
    [
        {"limit": 0},
        {"limit": 101},
        {"limit": "x"},
        {"view": "full", "limit": 21},
        {"view": "nope"},
        {"depth": 2},
        {"depth": -1},
        {"depth": "one"},
        {"path_prefix": "/notes"},
        {"path_prefix": "notes/"},
        {"path_prefix": "/a//"},
        {"path_prefix": "/../"},
        {"page": "page_!!"},
    ],
)
def test_list_validation(shared_api: Api, sid: str, params: dict[str, Any]) -> None:
    assert_error(shared_api.request("GET", mpath(sid), params=params), 400, "invalid_request_error")


def test_list_limits_accepted(shared_api: Api, sid: str) -> None:
    list_page(shared_api, sid, limit=100)
    list_page(shared_api, sid, limit=20, view="full")
    assert_error(shared_api.request("GET", mpath("memstore_unknown")), 404, "not_found_error")


def test_prefix_matches_whole_segments(shared_api: Api, sid: str) -> None:
    for p in ("/notes/todo.md", "/notes/deep/x.md", "/notes-archive/x", "/notes.md", "/notesx/y"):
        shared_api.create_memory(sid, p, "")
    got = [m["path"] for m in list_all(shared_api, sid, path_prefix="/notes/")]
    assert got == ["/notes/deep/x.md", "/notes/todo.md"]
    assert [m["path"] for m in list_all(shared_api, sid, path_prefix="/notes/deep/")] == [
        "/notes/deep/x.md"
    ]
    assert list_all(shared_api, sid, path_prefix="/nothing/") == []
    assert len(list_all(shared_api, sid, path_prefix="/")) == 5


def test_depth_one_rolls_up_prefixes(shared_api: Api, sid: str) -> None:
    for p in ("/a.md", "/a/1", "/a/2/deep", "/b", "/c/x/y/z", "/c-d", "/z.md"):
        shared_api.create_memory(sid, p, p)
    top = list_all(shared_api, sid, depth=1)
    assert [(i["type"], i["path"]) for i in top] == [
        ("memory", "/a.md"),
        ("memory_prefix", "/a/"),
        ("memory", "/b"),
        ("memory", "/c-d"),
        ("memory_prefix", "/c/"),
        ("memory", "/z.md"),
    ]
    assert top[1] == {"type": "memory_prefix", "path": "/a/"}
    for limit in (1, 2, 4):
        assert list_all(shared_api, sid, depth=1, limit=limit) == top
    inner = list_all(shared_api, sid, depth=1, path_prefix="/a/")
    assert [(i["type"], i["path"]) for i in inner] == [
        ("memory", "/a/1"),
        ("memory_prefix", "/a/2/"),
    ]
    drill = list_all(shared_api, sid, depth=1, path_prefix="/c/")
    assert drill == [{"type": "memory_prefix", "path": "/c/x/"}]
    assert list_all(shared_api, sid, depth=0, path_prefix="/c/")[0]["path"] == "/c/x/y/z"
    full = list_all(shared_api, sid, depth=1, view="full", limit=2)
    assert [i.get("content") for i in full if i["type"] == "memory"] == [
        "/a.md",
        "/b",
        "/c-d",
        "/z.md",
    ]
    one = list_page(shared_api, sid, depth=1, limit=6)
    assert len(one["data"]) == 6 and one["next_page"] is None


# ---------------------------------------------------------------- update


def test_update_content_and_rename(shared_api: Api, sid: str) -> None:
    mem = shared_api.create_memory(sid, "/old/name.md", "v1")
    changed = shared_api.update_memory(sid, mem["id"], content="v2")
    assert changed["content"] is None
    assert changed["content_sha256"] == sha256_hex(b"v2")
    assert changed["memory_version_id"] != mem["memory_version_id"]
    assert changed["updated_at"] > mem["updated_at"]
    assert changed["created_at"] == mem["created_at"]
    renamed = shared_api.request(
        "POST", mpath(sid, mem["id"]), params={"view": "full"}, json={"path": "/new/name.md"}
    ).json()
    assert renamed["id"] == mem["id"]
    assert renamed["path"] == "/new/name.md"
    assert renamed["content"] == "v2"
    both = shared_api.update_memory(sid, mem["id"], path="/n", content="v3")
    assert (both["path"], both["content_sha256"]) == ("/n", sha256_hex(b"v3"))
    assert [m["path"] for m in shared_api.list_memories(sid)] == ["/n"]
    ops = [v["operation"] for v in versions(shared_api, sid, memory_id=mem["id"])]
    assert ops == ["modified", "modified", "modified", "created"]


def test_rename_conflicts_and_rules(shared_api: Api, sid: str) -> None:
    a = shared_api.create_memory(sid, "/a/b/c", "a")
    d = shared_api.create_memory(sid, "/d", "d")
    for path, blocker in (("/a/b/c", "/a/b/c"), ("/a", "/a/b/c"), ("/a/b/c/e", "/a/b/c")):
        body = assert_error(
            shared_api.request("POST", mpath(sid, d["id"]), json={"path": path}),
            409,
            "memory_path_conflict_error",
        )
        assert body["error"]["conflicting_memory_id"] == a["id"]
        assert body["error"]["conflicting_path"] == blocker
    assert_error(
        shared_api.request("POST", mpath(sid, d["id"]), json={"path": "/x/"}),
        400,
        "invalid_request_error",
    )
    up = shared_api.update_memory(sid, a["id"], path="/a")  # onto its own ancestor
    assert up["path"] == "/a"
    down = shared_api.update_memory(sid, a["id"], path="/a/deeper")  # below its own path
    assert down["path"] == "/a/deeper"


def test_no_op_update_writes_no_version(shared_api: Api, sid: str) -> None:
    mem = shared_api.create_memory(sid, "/same", "same")
    for body in ({"content": "same"}, {"path": "/same"}, {"content": "same", "path": "/same"}, {}):
        got = shared_api.update_memory(sid, mem["id"], **body)
        assert got["memory_version_id"] == mem["memory_version_id"]
        assert got["updated_at"] == mem["updated_at"]
    assert len(versions(shared_api, sid, memory_id=mem["id"])) == 1


def test_precondition(shared_api: Api, sid: str) -> None:
    mem = shared_api.create_memory(sid, "/p", "one")
    pre = {"type": "content_sha256", "content_sha256": sha256_hex(b"one")}
    two = shared_api.update_memory(sid, mem["id"], content="two", precondition=pre)
    assert two["content_sha256"] == sha256_hex(b"two")
    stale = shared_api.request(
        "POST", mpath(sid, mem["id"]), json={"content": "three", "precondition": pre}
    )
    assert_error(stale, 409, "memory_precondition_failed_error")
    assert shared_api.get_memory(sid, mem["id"])["content"] == "two"
    # Carve-out: the stored state already equals the request, so a retry is a 200 no-op.
    again = shared_api.update_memory(sid, mem["id"], content="two", precondition=pre)
    assert again["memory_version_id"] == two["memory_version_id"]
    rename_pre = shared_api.update_memory(
        sid,
        mem["id"],
        path="/q",
        precondition={"type": "content_sha256", "content_sha256": two["content_sha256"]},
    )
    retried = shared_api.update_memory(sid, mem["id"], path="/q", content="two", precondition=pre)
    assert retried["memory_version_id"] == rename_pre["memory_version_id"]
    assert_error(
        shared_api.request(
            "POST", mpath(sid, mem["id"]), json={"path": "/other", "precondition": pre}
        ),
        409,
        "memory_precondition_failed_error",
    )
    assert_error(
        shared_api.request("POST", mpath(sid, mem["id"]), json={"precondition": pre}),
        409,
        "memory_precondition_failed_error",
    )
    assert len(versions(shared_api, sid, memory_id=mem["id"])) == 3


def test_update_check_order(shared_api: Api, sid: str) -> None:
    mem = shared_api.create_memory(sid, "/order", "x")
    shared_api.create_memory(sid, "/taken", "t")
    wrong = {"type": "content_sha256", "content_sha256": "0" * 64}
    # 404 comes first
    assert_error(
        shared_api.request(
            "POST", mpath(sid, "mem_missing"), json={"path": "bad", "precondition": wrong}
        ),
        404,
        "not_found_error",
    )
    # then the precondition, before path validation and the overlap rule
    for path in ("bad", "/taken"):
        assert_error(
            shared_api.request(
                "POST", mpath(sid, mem["id"]), json={"path": path, "precondition": wrong}
            ),
            409,
            "memory_precondition_failed_error",
        )
    right = {"type": "content_sha256", "content_sha256": sha256_hex(b"x")}
    assert_error(
        shared_api.request(
            "POST", mpath(sid, mem["id"]), json={"path": "bad", "precondition": right}
        ),
        400,
        "invalid_request_error",
    )
    assert_error(
        shared_api.request(
            "POST", mpath(sid, mem["id"]), json={"path": "/taken", "precondition": right}
        ),
        409,
        "memory_path_conflict_error",
    )


@pytest.mark.parametrize(
    "body",
    [
        {"precondition": {"type": "not_exists"}},
        {"precondition": {"type": "content_sha256"}},
        {"precondition": {"type": "content_sha256", "content_sha256": "abc"}},
        {"precondition": {"type": "content_sha256", "content_sha256": "g" * 64}},
        {"precondition": "sha"},
        {"content": 5},
        {"content": "x" * 102_401},
        {"path": 5},
        {"other": 1},
    ],
)
def test_update_body_validation(shared_api: Api, sid: str, body: dict[str, Any]) -> None:
    mem = shared_api.create_memory(sid, "/v", "x")
    assert_error(
        shared_api.request("POST", mpath(sid, mem["id"]), json=body), 400, "invalid_request_error"
    )


# ---------------------------------------------------------------- delete


def test_delete(shared_api: Api, sid: str) -> None:
    mem = shared_api.create_memory(sid, "/d.md", "bye")
    resp = shared_api.request("DELETE", mpath(sid, mem["id"]))
    assert resp.status_code == 200
    assert resp.json() == {"id": mem["id"], "type": "memory_deleted"}
    assert_error(shared_api.request("GET", mpath(sid, mem["id"])), 404, "not_found_error")
    assert_error(shared_api.request("DELETE", mpath(sid, mem["id"])), 404, "not_found_error")
    assert_error(
        shared_api.request("POST", mpath(sid, mem["id"]), json={"content": "x"}),
        404,
        "not_found_error",
    )
    assert shared_api.list_memories(sid) == []
    again = shared_api.create_memory(sid, "/d.md", "back")
    assert again["id"] != mem["id"]


def test_conditional_delete(shared_api: Api, sid: str) -> None:
    mem = shared_api.create_memory(sid, "/c.md", "v1")
    stale = shared_api.request(
        "DELETE", mpath(sid, mem["id"]), params={"expected_content_sha256": sha256_hex(b"v0")}
    )
    assert_error(stale, 409, "memory_precondition_failed_error")
    assert shared_api.get_memory(sid, mem["id"])["content"] == "v1"
    assert_error(
        shared_api.request(
            "DELETE", mpath(sid, mem["id"]), params={"expected_content_sha256": "xyz"}
        ),
        400,
        "invalid_request_error",
    )
    ok = shared_api.request(
        "DELETE", mpath(sid, mem["id"]), params={"expected_content_sha256": sha256_hex(b"v1")}
    )
    assert ok.status_code == 200
    gone = shared_api.request(
        "DELETE", mpath(sid, mem["id"]), params={"expected_content_sha256": sha256_hex(b"v1")}
    )
    assert_error(gone, 404, "not_found_error")
