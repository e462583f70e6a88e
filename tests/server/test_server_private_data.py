"""`memfs serve` keeps its data from other local users (issue 24 item 2).

The SQLite database holds every memory in the clear. Created by memfs it is 0600 (its
`-wal` and `-shm` too) in directories created 0700; an existing one that others can
open is served with one warning naming the fix. Where it matters the file is read as
the `nobody` user, the other local user of the threat model (docs/reliability.md).
"""

from __future__ import annotations

import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from memfs.server.sqlite import Database
from tests.support.api import Api
from tests.support.daemonwatch import DaemonWatch
from tests.support.server import REPO_ROOT, start_server

WARNING = "other users can read the database; chmod 600 its files"


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A directory every user may enter (pytest's tmp_path is private to root)."""
    base = Path(tempfile.mkdtemp(prefix="mfs-private-db-", dir="/tmp"))
    base.chmod(0o755)
    try:
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def nobody_reads(path: Path) -> subprocess.CompletedProcess[str]:
    """`cat PATH` as the `nobody` user (needs root to switch user)."""
    return subprocess.run(
        ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "cat", str(path)],
        capture_output=True,
        text=True,
        timeout=30,
    )


def write_a_secret(url: str) -> None:
    with Api(url) as api:
        store = api.create_store("private")
        api.create_memory(store["id"], "/secret.md", "the launch code is 0000\n")


def test_a_new_database_and_its_wal_are_private(shared_dir: Path) -> None:
    db = shared_dir / "store.db"
    server = start_server(db)
    try:
        write_a_secret(server.url)
        files = [db, db.with_name("store.db-wal"), db.with_name("store.db-shm")]
        assert {f.name: oct(mode(f)) for f in files} == {f.name: "0o600" for f in files}
        if os.geteuid() == 0:
            for f in files:
                result = nobody_reads(f)
                assert result.returncode != 0 and "Permission denied" in result.stderr, f
                assert "launch code" not in result.stdout
    finally:
        assert server.stop() == 0
    assert WARNING not in server.log_path.read_text()


def test_the_default_data_directory_is_created_private(
    shared_dir: Path, tmp_path: Path, daemons: DaemonWatch
) -> None:
    env = {**os.environ, "XDG_DATA_HOME": str(shared_dir / "xdg")}
    log = tmp_path / "serve.log"
    daemons.watch_log(log)  # no ServerProcess owns this server (it has no --db)
    with log.open("wb") as stderr:
        proc = subprocess.Popen(
            [sys.executable, "-m", "memfs.cli", "serve", "--port", "0"],
            stdout=subprocess.PIPE,
            stderr=stderr,
            env=env,
            cwd=REPO_ROOT,
        )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().decode()
        assert line.startswith("memfs serve: listening on "), line
        write_a_secret(line.split()[-1])
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=10)
    assert proc.returncode == 0, log.read_text()
    assert mode(shared_dir / "xdg") == 0o700
    assert mode(shared_dir / "xdg" / "memfs") == 0o700
    assert mode(shared_dir / "xdg" / "memfs" / "store.db") == 0o600
    if os.geteuid() == 0:
        result = nobody_reads(shared_dir / "xdg" / "memfs" / "store.db")
        assert result.returncode != 0 and "Permission denied" in result.stderr


def test_an_existing_database_others_can_read_is_served_with_one_warning(
    shared_dir: Path,
) -> None:
    db = shared_dir / "old.db"
    Database.open(db).close()
    db.chmod(0o644)  # the default before issue 24
    server = start_server(db)
    try:
        write_a_secret(server.url)
    finally:
        assert server.stop() == 0
    warnings = [line for line in server.log_path.read_text().splitlines() if WARNING in line]
    assert len(warnings) == 1, warnings
    assert f"db={db} files=old.db:644" in warnings[0]
    assert mode(db) == 0o644  # warned about, left as the operator set it


def test_a_private_database_gets_no_warning(shared_dir: Path) -> None:
    db = shared_dir / "fine.db"
    Database.open(db).close()
    server = start_server(db)
    assert server.stop() == 0
    assert WARNING not in server.log_path.read_text()
