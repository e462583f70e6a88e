"""The server as a process: durability across kill -9, start-up refusals, signals, speed."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from memfs.server.sqlite import Database
from tests.support.api import Api
from tests.support.daemonwatch import DaemonWatch
from tests.support.nobody import run_cli_as_nobody
from tests.support.postgres import BACKENDS, start_on
from tests.support.server import REPO_ROOT, ServerProcess, start_server


def serve_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "memfs.cli", "serve", *args]


def run_refused(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        serve_cmd(*args), capture_output=True, text=True, timeout=30, cwd=REPO_ROOT
    )


@pytest.mark.parametrize("backend", BACKENDS)
def test_acknowledged_writes_survive_kill_9(
    backend: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """Writers run flat out; SIGKILL lands mid-stream; every answered write is there."""
    proc = start_on(backend, request, tmp_path)
    api = Api(proc.url, timeout=5)
    sid = api.create_store("durable")["id"]
    acked: dict[str, tuple[str, str]] = {}  # memory id -> (path, content) last acknowledged
    deleted: set[str] = set()
    deleting: set[str] = set()  # delete sent, its answer maybe lost
    lock = threading.Lock()
    stop = threading.Event()

    def writer(n: int) -> None:
        i = 0
        while not stop.is_set():
            i += 1
            try:
                mem = api.create_memory(sid, f"/w{n}/{i}", f"c{n}-{i}")
                with lock:
                    acked[mem["id"]] = (mem["path"], f"c{n}-{i}")
                api.update_memory(sid, mem["id"], content=f"u{n}-{i}")
                with lock:
                    acked[mem["id"]] = (mem["path"], f"u{n}-{i}")
                if i % 3 == 0:
                    with lock:  # sent: it may land even if its answer never comes
                        deleting.add(mem["id"])
                    api.delete_memory(sid, mem["id"])
                    with lock:
                        deleted.add(mem["id"])
            except Exception:
                return  # the server died under us: the rest is unacknowledged

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    time.sleep(1.0)
    proc.kill()
    stop.set()
    for t in threads:
        t.join(timeout=10)
    api.close()
    assert len(acked) > 20

    proc.start()
    try:
        with Api(proc.url) as after:
            live = {m["id"]: m for m in after.list_memories(sid)}
            for memory_id, (path, content) in acked.items():
                if memory_id in deleted:
                    assert memory_id not in live
                    continue
                if memory_id in deleting and memory_id not in live:
                    continue  # its delete committed; only the answer was lost
                assert memory_id in live, f"acknowledged memory {path} lost"
                got = after.get_memory(sid, memory_id)
                assert got["path"] == path
                # the update may have landed without its answer arriving: never older
                assert got["content"] in (content, "u" + content[1:])
    finally:
        proc.stop()


def test_restart_keeps_data_and_port(tmp_path: Path) -> None:
    proc = start_server(tmp_path / "store.db")
    try:
        with Api(proc.url) as api:
            sid = api.create_store("restart")["id"]
            api.create_memory(sid, "/kept", "kept")
        url = proc.url
        assert proc.stop() == 0
        proc.start()
        assert proc.url == url
        with Api(proc.url) as api:
            assert [m["path"] for m in api.list_memories(sid)] == ["/kept"]
    finally:
        proc.stop()


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_signals_exit_zero(tmp_path: Path, signum: int) -> None:
    proc = start_server(tmp_path / "store.db")
    assert proc.proc is not None
    proc.expect_exit(0)
    proc.proc.send_signal(signum)
    assert proc.proc.wait(timeout=10) == 0
    proc.stop()


def test_port_taken_is_refused(tmp_path: Path) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        result = run_refused("--port", str(port), "--db", str(tmp_path / "s.db"))
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "memfs serve:" in lines[0] and str(port) in lines[0] and "in use" in lines[0]
    assert result.stdout == ""


def test_second_server_on_same_port_is_refused(server: ServerProcess, tmp_path: Path) -> None:
    result = run_refused("--port", str(server.port), "--db", str(tmp_path / "other.db"))
    assert result.returncode == 2
    assert "in use" in result.stderr


def unwritable_cases(tmp_path: Path) -> list[Path]:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    directory = tmp_path / "a-dir"
    directory.mkdir()
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"this is not a database" * 100)
    return [blocker / "store.db", directory, garbage]


def test_unwritable_database_is_refused(tmp_path: Path) -> None:
    for db in unwritable_cases(tmp_path):
        result = run_refused("--port", "0", "--db", str(db))
        assert result.returncode == 2, (db, result.stderr)
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1, result.stderr
        assert lines[0].startswith("memfs serve: cannot use the database")
        assert result.stdout == ""


@pytest.mark.deadline(60)  # a database wrongly accepted would serve forever
def test_read_only_database_is_refused() -> None:
    """Run as `nobody` when the test runs as root (as CI does): root writes anyway."""
    base = Path(tempfile.mkdtemp(prefix="mfs-ro-db-", dir="/tmp"))
    try:
        base.chmod(0o755)  # `nobody` may look in, not write
        db = base / "ro" / "store.db"
        Database.open(db).close()
        db.chmod(0o444)
        db.parent.chmod(0o555)
        argv = ["serve", "--port", "0", "--db", str(db)]
        if os.geteuid() == 0:
            result = run_cli_as_nobody(argv, {"PATH": os.environ.get("PATH", "")})
        else:
            result = run_refused(*argv[1:])
    finally:
        (base / "ro").chmod(0o755)
        shutil.rmtree(base, ignore_errors=True)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("memfs serve: cannot use the database"), lines


def test_default_database_location(tmp_path: Path, daemons: DaemonWatch) -> None:
    env = {**os.environ, "XDG_DATA_HOME": str(tmp_path / "xdg")}
    log = tmp_path / "serve.log"
    daemons.watch_log(log)  # no ServerProcess owns this server (it has no --db)
    with log.open("wb") as stderr:
        proc = subprocess.Popen(
            serve_cmd("--port", "0"), stdout=subprocess.PIPE, stderr=stderr, env=env, cwd=REPO_ROOT
        )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().decode()
        assert line.startswith("memfs serve: listening on http://127.0.0.1:")
        assert (tmp_path / "xdg" / "memfs" / "store.db").exists()
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
        if proc.stdout:
            proc.stdout.close()


def test_listing_10000_memories_pages_through_all(tmp_path: Path) -> None:
    """Every one of 10,000 memories, once, across 100 pages. How fast is measured by
    scripts/bench (timing targets live in the benchmark, not in tests)."""
    db_path = tmp_path / "big.db"
    db = Database.open(db_path)
    store = db.create_store("big", "", {})
    db.bulk_create_memories(
        store["id"],
        ((f"/dir{i % 50:02d}/note-{i:05d}.md", f"content {i}\n" * 3) for i in range(10_000)),
        ("api_actor", "apikey_seed"),
    )
    db.close()
    proc = start_server(db_path)
    try:
        with Api(proc.url) as api:
            items = api.list_memories(store["id"])
    finally:
        proc.stop()
    assert len(items) == 10_000
    assert len({m["id"] for m in items}) == 10_000
    assert [m["path"] for m in items] == sorted(m["path"] for m in items)
