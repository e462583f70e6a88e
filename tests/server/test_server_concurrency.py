"""Races against the real server: preconditions and creates are atomic, paging is stable."""

from __future__ import annotations

import random
import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx

from memfs.paths import sha256_hex
from tests.support.api import Api

N = 16


def race(api: Api, calls: list[tuple[str, str, dict[str, Any]]]) -> list[httpx.Response]:
    """Fire all calls at once from separate threads (released together by a barrier)."""
    barrier = threading.Barrier(len(calls))

    def one(call: tuple[str, str, dict[str, Any]]) -> httpx.Response:
        method, url, kw = call
        barrier.wait()
        return api.request(method, url, **kw)

    with ThreadPoolExecutor(len(calls)) as pool:
        return list(pool.map(one, calls))


def test_concurrent_updates_with_one_precondition(shared_api: Api) -> None:
    sid = shared_api.create_store("race-update")["id"]
    mem = shared_api.create_memory(sid, "/r.md", "base")
    pre = {"type": "content_sha256", "content_sha256": sha256_hex(b"base")}
    url = f"/v1/memory_stores/{sid}/memories/{mem['id']}"
    calls = [
        ("POST", url, {"json": {"content": f"writer {i}", "precondition": pre}}) for i in range(N)
    ]
    results = race(shared_api, calls)
    codes = Counter(r.status_code for r in results)
    assert codes == {200: 1, 409: N - 1}
    assert {r.json()["error"]["type"] for r in results if r.status_code == 409} == {
        "memory_precondition_failed_error"
    }
    winner = next(r.json() for r in results if r.status_code == 200)
    assert shared_api.get_memory(sid, mem["id"])["content_sha256"] == winner["content_sha256"]
    listed = shared_api.request(
        "GET", f"/v1/memory_stores/{sid}/memory_versions", params={"memory_id": mem["id"]}
    ).json()["data"]
    assert [v["operation"] for v in listed] == ["modified", "created"]


def test_concurrent_creates_of_one_path(shared_api: Api) -> None:
    sid = shared_api.create_store("race-create")["id"]
    url = f"/v1/memory_stores/{sid}/memories"
    calls = [("POST", url, {"json": {"path": "/same.md", "content": f"{i}"}}) for i in range(N)]
    results = race(shared_api, calls)
    assert Counter(r.status_code for r in results) == {200: 1, 409: N - 1}
    winner = next(r.json() for r in results if r.status_code == 200)
    for r in results:
        if r.status_code == 409:
            err = r.json()["error"]
            assert err["type"] == "memory_path_conflict_error"
            assert err["conflicting_memory_id"] == winner["id"]
            assert err["conflicting_path"] == "/same.md"
    assert [m["id"] for m in shared_api.list_memories(sid)] == [winner["id"]]


def test_concurrent_creates_of_overlapping_paths(shared_api: Api) -> None:
    sid = shared_api.create_store("race-overlap")["id"]
    url = f"/v1/memory_stores/{sid}/memories"
    paths = ["/x", "/x/y", "/x/y/z", "/x/q"] * 3
    results = race(shared_api, [("POST", url, {"json": {"path": p, "content": ""}}) for p in paths])
    made = sorted(m["path"] for m in shared_api.list_memories(sid))
    assert sum(r.status_code == 200 for r in results) == len(made)
    for a in made:
        for b in made:
            assert a == b or not (a.startswith(b + "/") or b.startswith(a + "/"))
    assert made in (["/x"], ["/x/y"], ["/x/y/z"], ["/x/q"], ["/x/q", "/x/y"], ["/x/q", "/x/y/z"])


def test_paging_is_stable_under_creates_and_deletes(shared_api: Api) -> None:
    """Memories present for the whole listing appear exactly once, in order."""
    sid = shared_api.create_store("stable")["id"]
    rng = random.Random(7)
    stable = {f"/s/{i:04d}" for i in range(0, 200, 2)}
    churn = [f"/s/{i:04d}" for i in range(1, 200, 2)]
    ids: dict[str, str] = {}
    for p in sorted(stable | set(churn)):
        ids[p] = shared_api.create_memory(sid, p, p)["id"]
    live_churn = set(churn)
    for depth in (0, 1):
        seen: list[str] = []
        params: dict[str, Any] = {"limit": 13, "depth": depth}
        if depth:
            params["path_prefix"] = "/s/"
        while True:
            page = shared_api.request(
                "GET", f"/v1/memory_stores/{sid}/memories", params=params
            ).json()
            seen += [m["path"] for m in page["data"]]
            # between pages: delete some churn paths, create new ones before and after
            for _ in range(3):
                if live_churn:
                    victim = rng.choice(sorted(live_churn))
                    shared_api.delete_memory(sid, ids.pop(victim))
                    live_churn.discard(victim)
                new = f"/s/{rng.randrange(200):04d}.{rng.randrange(10**6)}"
                ids[new] = shared_api.create_memory(sid, new, "")["id"]
            if not page["next_page"]:
                break
            params["page"] = page["next_page"]
        counts = Counter(seen)
        assert all(counts[p] == 1 for p in stable), [p for p in stable if counts[p] != 1]
        assert max(counts.values()) == 1
        assert seen == sorted(seen, key=lambda p: p.encode())
