"""Running the server as a service: health probes, graceful shutdown, backend choice,
schema versions, and `memfs serve copy` between backends."""

from __future__ import annotations

import json
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import httpx
import psycopg

from memfs.paths import BETA_MEMORY, sha256_hex
from memfs.server import migrations
from memfs.server.migrations import SQLITE_STEPS
from tests.support.api import Api
from tests.support.deadline import eventually
from tests.support.postgres import PostgresCluster
from tests.support.server import REPO_ROOT, ServerProcess, start_server


def serve(*args: str, cwd: Path = REPO_ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "memfs.cli", "serve", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=cwd,
    )


def test_health_probes_need_no_credentials(tmp_path: Path) -> None:
    proc = start_server(tmp_path / "s.db", api_key="sk-key")
    try:
        for path in ("/healthz", "/readyz"):
            resp = httpx.get(proc.url + path)
            assert resp.status_code == 200 and resp.json()["status"] == "ok"
        assert httpx.get(proc.url + "/v1/memory_stores").status_code == 401
    finally:
        proc.stop()


def test_readyz_follows_the_database(postgres: PostgresCluster, tmp_path: Path) -> None:
    proc = start_server(postgres.database(), log_path=tmp_path / "s.log")
    try:
        assert httpx.get(proc.url + "/readyz").status_code == 200
        postgres.stop()
        try:
            resp = httpx.get(proc.url + "/readyz", timeout=30)
            assert resp.status_code == 503 and resp.json()["status"] == "unavailable"
            assert httpx.get(proc.url + "/healthz").status_code == 200
            api = httpx.get(
                proc.url + "/v1/memory_stores", timeout=30, headers={"anthropic-beta": BETA_MEMORY}
            )
            assert api.status_code == 503, api.text  # retryable, not a crash
        finally:
            postgres.start()
        # the pool reconnects with backoff: ready again within a bounded while
        eventually(
            lambda: httpx.get(proc.url + "/readyz", timeout=30).status_code,
            "ready again after the restart",
            until=lambda code: code == 200,
            timeout=60,
            interval=0.2,
        )
        assert (
            httpx.get(
                proc.url + "/v1/memory_stores", headers={"anthropic-beta": BETA_MEMORY}
            ).status_code
            == 200
        )
        assert "not ready backend=postgresql" in proc.log_tail(200)
    finally:
        proc.stop()


def test_sigterm_finishes_the_request_in_flight(server: ServerProcess, api: Api) -> None:
    sid = api.create_store("drain")["id"]
    body = json.dumps({"path": "/in-flight.md", "content": "x" * 5000}).encode()
    head = (
        f"POST /v1/memory_stores/{sid}/memories HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        f"anthropic-beta: {BETA_MEMORY}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\n\r\n"
    ).encode()
    with socket.create_connection(("127.0.0.1", server.port)) as sock:
        sock.sendall(head + body[:100])
        time.sleep(0.3)  # let the server start reading the body
        assert server.proc is not None
        server.expect_exit(0)
        server.proc.send_signal(signal.SIGTERM)
        time.sleep(0.3)
        sock.sendall(body[100:])
        sock.settimeout(30)
        answer = b""
        while b"\r\n\r\n" not in answer:
            answer += sock.recv(65536)
    assert answer.startswith(b"HTTP/1.1 200"), answer[:200]
    assert server.proc.wait(timeout=30) == 0
    server.start()
    with Api(server.url) as again:
        assert [m["path"] for m in again.list_memories(sid)] == ["/in-flight.md"]


def test_db_urls_of_other_schemes_are_refused(tmp_path: Path) -> None:
    for db in ("mysql://u@h/db", "sqlite://x.db", "postgres2://h/db", "redis://h/0"):
        result = serve("--port", "0", "--db", db, cwd=tmp_path)
        assert result.returncode == 2, result.stderr
        assert result.stderr.count("\n") == 1
        assert "is not a database memfs speaks" in result.stderr
    assert list(tmp_path.iterdir()) == []  # no file named after a URL
    for option in (["--pool-size", "0"], ["--shutdown-timeout", "-1"]):
        result = serve("--port", "0", "--db", str(tmp_path / "x.db"), *option)
        assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr


def test_unreachable_postgres_is_refused_at_start(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    result = serve("--port", "0", "--db", f"postgresql://u:secret@127.0.0.1:{port}/db")
    assert result.returncode == 2
    assert result.stderr.startswith("memfs serve: cannot use the database postgresql://u:***@")
    assert "secret" not in result.stderr


def test_sqlite_migrates_a_first_release_file_and_refuses_a_newer_one(tmp_path: Path) -> None:
    db = tmp_path / "old.db"
    conn = sqlite3.connect(db)
    conn.executescript(SQLITE_STEPS[0] + ";")
    conn.execute("INSERT INTO meta VALUES ('schema_version', '1')")
    conn.execute(
        "INSERT INTO stores (id, name, description, metadata, created_at, updated_at)"
        " VALUES ('memstore_old', 'old', '', '{}', '2026-01-01T00:00:00.000000Z',"
        " '2026-01-01T00:00:00.000000Z')"
    )
    conn.commit()
    conn.close()
    proc = start_server(db)
    try:
        with Api(proc.url) as api:
            mem = api.create_memory("memstore_old", "/new.md", "n")
            assert mem["memory_store_id"] == "memstore_old"
    finally:
        proc.stop()
    conn = sqlite3.connect(db)
    version = conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()[0]
    assert int(version) == migrations.LATEST
    conn.execute(
        "UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(migrations.LATEST + 1),)
    )
    conn.commit()
    conn.close()
    result = serve("--port", "0", "--db", str(db))
    assert result.returncode == 2 and result.stderr.count("\n") == 1
    assert "newer than this memfs" in result.stderr


def _fill(api: Api) -> None:
    """Stores, memories, versions, a redaction, an archive and odd content."""
    for n in range(3):
        sid = api.create_store(f"store {n}")["id"]
        for i in range(20):
            mem = api.create_memory(sid, f"/d{i % 4}/m{i}.md", f"{n}/{i} \x00 é 😀\r\n")
            if i % 3 == 0:
                api.update_memory(sid, mem["id"], content=f"edited {i}")
            if i % 5 == 0:
                api.delete_memory(sid, mem["id"])
        first = api.request(
            "GET", f"/v1/memory_stores/{sid}/memory_versions", params={"limit": 100}
        ).json()["data"][-1]
        api.request("POST", f"/v1/memory_stores/{sid}/memory_versions/{first['id']}/redact")
    api.request("POST", f"/v1/memory_stores/{sid}/archive")


def _everything(url: str) -> list[object]:
    """The whole API view of a server: stores, memories with contents, versions."""
    out: list[object] = []
    with Api(url) as api:
        stores = api.request(
            "GET", "/v1/memory_stores", params={"include_archived": "true", "limit": 100}
        ).json()["data"]
        for store in stores:
            sid = store["id"]
            mems = [api.get_memory(sid, m["id"]) for m in api.list_memories(sid)]
            assert all(sha256_hex(m["content"].encode()) == m["content_sha256"] for m in mems)
            versions = api.request(
                "GET",
                f"/v1/memory_stores/{sid}/memory_versions",
                params={"limit": 20, "view": "full"},
            ).json()["data"]
            out.append((store, mems, versions))
    return out


def test_copy_sqlite_to_postgres_and_back_keeps_everything(
    postgres: PostgresCluster, tmp_path: Path
) -> None:
    src = tmp_path / "src.db"
    proc = start_server(src)
    with Api(proc.url) as api:
        _fill(api)
    before = _everything(proc.url)
    proc.stop()
    token = serve(
        "token", "create", "--db", str(src), "--store", str(before[0][0]["id"]) + ":ro"
    ).stdout.strip()  # type: ignore[index]
    pg = postgres.database("copy")
    back = tmp_path / "back.db"
    for frm, to in ((str(src), pg), (pg, str(back))):
        result = serve("copy", "--from", frm, "--to", to)
        assert result.returncode == 0, result.stderr
        # per store: 20 created, 7 edited, 4 deleted
        assert "copied 3 stores, 48 memories, 93 versions, 1 token" in result.stdout
        assert "verified sha256=" in result.stdout
    for db, log in ((pg, tmp_path / "pg.log"), (str(back), None)):
        copy = start_server(db, log_path=log)
        try:
            assert _everything(copy.url) == before
            sid = str(before[0][0]["id"])  # type: ignore[index]
            got = httpx.get(
                f"{copy.url}/v1/memory_stores/{sid}/memories",
                headers={"authorization": f"Bearer {token}", "anthropic-beta": BETA_MEMORY},
            )
            assert got.status_code == 200  # tokens travel too
        finally:
            copy.stop()
    again = serve("copy", "--from", str(src), "--to", pg)
    assert again.returncode == 1 and "not empty" in again.stderr
    with psycopg.connect(pg) as conn:
        row = conn.execute("SELECT count(*) FROM stores").fetchone()
        assert row is not None and row[0] == 3
