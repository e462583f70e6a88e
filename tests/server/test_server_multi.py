"""Several `memfs serve` processes on one PostgreSQL database, clients spread across them:
every rule that holds on one server holds across instances."""

from __future__ import annotations

import itertools
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from memfs.paths import sha256_hex
from memfs.server import migrations
from tests.support.api import Api
from tests.support.postgres import PostgresCluster
from tests.support.server import ServerProcess, start_server

N = 24


class Fleet:
    """Instances on one database and one client per instance."""

    def __init__(self, cluster: PostgresCluster, tmp: Path, n: int, *extra: str) -> None:
        self.url = cluster.database("fleet")
        self.procs: list[ServerProcess] = []
        for i in range(n):
            self.procs.append(
                start_server(self.url, extra_args=extra, log_path=tmp / f"server{i}.log")
            )
        self.apis = [Api(p.url) for p in self.procs]

    def api(self, i: int) -> Api:
        return self.apis[i % len(self.apis)]

    def close(self) -> None:
        for api in self.apis:
            api.close()
        for proc in self.procs:
            proc.stop()


@pytest.fixture
def fleet(postgres: PostgresCluster, tmp_path: Path) -> Iterator[Fleet]:
    f = Fleet(postgres, tmp_path, 3, "--max-memories", "30")
    try:
        yield f
    finally:
        f.close()


def race(fleet: Fleet, calls: list[tuple[str, str, dict[str, Any]]]) -> list[httpx.Response]:
    """All calls at once (one barrier), call i sent to instance i mod n."""
    barrier = threading.Barrier(len(calls))

    def one(i: int) -> httpx.Response:
        method, url, kw = calls[i]
        barrier.wait()
        return fleet.api(i).request(method, url, **kw)

    with ThreadPoolExecutor(len(calls)) as pool:
        return list(pool.map(one, range(len(calls))))


def test_one_precondition_one_winner_across_instances(fleet: Fleet) -> None:
    sid = fleet.api(0).create_store("race")["id"]
    for round_ in range(3):
        mem = fleet.api(round_).create_memory(sid, f"/r{round_}.md", "base")
        pre = {"type": "content_sha256", "content_sha256": sha256_hex(b"base")}
        url = f"/v1/memory_stores/{sid}/memories/{mem['id']}"
        results = race(
            fleet,
            [("POST", url, {"json": {"content": f"w{i}", "precondition": pre}}) for i in range(N)],
        )
        codes = Counter(r.status_code for r in results)
        assert codes == {200: 1, 409: N - 1}, codes
        loser_types = {r.json()["error"]["type"] for r in results if r.status_code == 409}
        assert loser_types == {"memory_precondition_failed_error"}
        winner = next(r.json() for r in results if r.status_code == 200)
        for i in range(3):  # every instance reads the winner's content
            assert (
                fleet.api(i).get_memory(sid, mem["id"])["content_sha256"]
                == winner["content_sha256"]
            )


def test_one_path_one_creator_across_instances(fleet: Fleet) -> None:
    sid = fleet.api(0).create_store("race")["id"]
    for path in ("/same.md", "/deep/er/same.md"):
        results = race(
            fleet,
            [
                (
                    "POST",
                    f"/v1/memory_stores/{sid}/memories",
                    {"json": {"path": path, "content": f"c{i}"}},
                )
                for i in range(N)
            ],
        )
        codes = Counter(r.status_code for r in results)
        assert codes == {200: 1, 409: N - 1}, codes
    # overlapping paths raced from different instances: a file and a directory of one name
    results = race(
        fleet,
        [
            (
                "POST",
                f"/v1/memory_stores/{sid}/memories",
                {"json": {"path": "/x" if i % 2 else "/x/y", "content": "c"}},
            )
            for i in range(N)
        ],
    )
    assert Counter(r.status_code for r in results)[200] == 1
    paths = [m["path"] for m in fleet.api(2).list_memories(sid)]
    assert {"/same.md", "/deep/er/same.md"} <= set(paths)
    assert len([p for p in paths if p in ("/x", "/x/y")]) == 1


def test_cap_is_exact_under_concurrent_creates_across_instances(fleet: Fleet) -> None:
    sid = fleet.api(0).create_store("cap")["id"]
    fleet.api(0).create_memory(sid, "/seed", "s")
    results = race(
        fleet,
        [
            (
                "POST",
                f"/v1/memory_stores/{sid}/memories",
                {"json": {"path": f"/m{i}", "content": "c"}},
            )
            for i in range(45)
        ],
    )
    codes = Counter(r.status_code for r in results)
    assert codes == {200: 29, 400: 16}, codes
    assert len(fleet.api(1).list_memories(sid)) == 30


def _all_versions(api: Api, sid: str) -> list[str]:
    ids: list[str] = []
    params: dict[str, Any] = {"limit": 100}
    while True:
        page = api.request("GET", f"/v1/memory_stores/{sid}/memory_versions", params=params)
        assert page.status_code == 200, page.text
        body = page.json()
        ids.extend(v["id"] for v in body["data"])
        if not body["next_page"]:
            return ids
        params["page"] = body["next_page"]


def test_newest_version_never_skips_a_commit_of_another_instance(fleet: Fleet) -> None:
    """Writers on every instance; a reader asks any instance for the newest version, then
    lists. What lies at or below that head must stay exactly that set for ever (an idle
    pass that saw the head trusts it); a write acknowledged before the ask is at or below
    it; a write sent after the answer is above it."""
    sid = fleet.api(0).create_store("newest")["id"]
    mems = [fleet.api(0).create_memory(sid, f"/n{i}.md", "0")["id"] for i in range(6)]
    stop = threading.Event()
    writes: list[tuple[float, float, str]] = []  # (sent, acknowledged, version id)
    observations: list[tuple[float, float, str, frozenset[str]]] = []
    lock = threading.Lock()

    def writer(w: int) -> None:
        for i in itertools.count():
            if stop.is_set():
                return
            sent = time.monotonic()
            mem = fleet.api(w).update_memory(sid, mems[w], content=f"{w}-{i}")
            with lock:
                writes.append((sent, time.monotonic(), mem["memory_version_id"]))

    def reader(r: int) -> None:
        for i in range(25):
            api = fleet.api(r + i)
            sent = time.monotonic()
            page = api.request(
                "GET", f"/v1/memory_stores/{sid}/memory_versions", params={"limit": 1}
            ).json()
            got = time.monotonic()
            head = page["data"][0]["id"]
            listing = _all_versions(fleet.api(r + i + 1), sid)
            below = frozenset(listing[listing.index(head) :])
            with lock:
                observations.append((sent, got, head, below))

    with ThreadPoolExecutor(8) as pool:
        writers = [pool.submit(writer, w) for w in range(6)]
        readers = [pool.submit(reader, r) for r in range(2)]
        for f in readers:
            f.result()
        stop.set()
        for f in writers:
            f.result()
    final = _all_versions(fleet.api(0), sid)
    rank = {vid: len(final) - i for i, vid in enumerate(final)}  # higher is newer
    assert len(rank) == len(final)
    assert len(observations) == 50 and len(writes) > 50
    for sent, got, head, below in observations:
        assert frozenset(final[final.index(head) :]) == below, "a commit sorted below a head"
        for w_sent, w_acked, vid in writes:
            if w_acked < sent:
                assert rank[vid] <= rank[head], "the newest version went backwards"
            if w_sent > got:
                assert rank[vid] > rank[head], "a later commit sorted below the head"


def test_pages_stay_stable_while_other_instances_write(fleet: Fleet) -> None:
    """Every memory that exists for the whole listing is listed exactly once, while
    other instances create and delete around it."""
    sid = fleet.api(0).create_store("pages")["id"]
    stable = {fleet.api(0).create_memory(sid, f"/s/{i:02d}", "s")["path"] for i in range(25)}
    stop = threading.Event()

    def churn(w: int) -> None:
        for i in itertools.count():
            if stop.is_set():
                return
            api = fleet.api(w)
            mem = api.create_memory(sid, f"/s/{i % 25:02d}-{w}-{i}", "c")
            api.delete_memory(sid, mem["id"])

    with ThreadPoolExecutor(2) as pool:
        jobs = [pool.submit(churn, w) for w in (1, 2)]
        try:
            for _ in range(8):
                seen: list[str] = []
                params: dict[str, Any] = {"limit": 3}
                while True:
                    body = (
                        fleet.api(0)
                        .request("GET", f"/v1/memory_stores/{sid}/memories", params=params)
                        .json()
                    )
                    seen.extend(m["path"] for m in body["data"])
                    if not body["next_page"]:
                        break
                    params["page"] = body["next_page"]
                assert Counter(p for p in seen if p in stable) == Counter(stable)
                assert seen == sorted(seen)
        finally:
            stop.set()
        for job in jobs:
            job.result()


def test_instances_migrate_once_and_refuse_a_newer_schema(
    postgres: PostgresCluster, tmp_path: Path
) -> None:
    """Three instances started at once on an empty database: one migrates, all serve.
    A database from a newer memfs is refused at start-up, clearly."""
    url = postgres.database("migrate")
    procs = [ServerProcess(url, log_path=tmp_path / f"s{i}.log") for i in range(3)]
    with ThreadPoolExecutor(3) as pool:
        list(pool.map(lambda p: p.start(), procs))
    try:
        with psycopg.connect(url) as conn:
            row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
            assert row is not None and int(row[0]) == migrations.LATEST
    finally:
        for p in procs:
            p.stop()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "UPDATE meta SET value = %s WHERE key = 'schema_version'", (str(migrations.LATEST + 1),)
        )
    result = subprocess.run(
        [sys.executable, "-m", "memfs.cli", "serve", "--port", "0", "--db", url],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1
    assert "newer than this memfs" in result.stderr
