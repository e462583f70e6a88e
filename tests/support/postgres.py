"""A real, throwaway PostgreSQL cluster for the tests (initdb + pg_ctl in a temp dir).

PostgreSQL refuses to run as root, so as root the cluster belongs to the `postgres` user
(Debian's package creates it) and every pg_* command runs through `runuser`. It listens
on 127.0.0.1 only, trusts local connections, and is removed at the end of the session.
"""

from __future__ import annotations

import glob
import itertools
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.support.server import ServerProcess, start_server

SUPERUSER = "memfs"


def bin_dir() -> Path:
    """The newest installed server's binaries (Debian keeps them off PATH)."""
    found = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(Path(p).parts[-3])
    )
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    if initdb is None:
        raise RuntimeError("PostgreSQL is not installed (scripts/install adds it)")
    return Path(initdb).parent


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class PostgresCluster:
    """One cluster; `database()` hands out a fresh, empty database per caller."""

    def __init__(self) -> None:
        self.bin = bin_dir()
        self.root = Path(tempfile.mkdtemp(prefix="memfs-pg-"))
        self.data = self.root / "data"
        self.log = self.root / "server.log"
        self.port = _free_port()
        self._names = itertools.count(1)
        self.user = "postgres" if os.geteuid() == 0 else None
        if self.user is not None:
            pw = pwd.getpwnam(self.user)
            os.chown(self.root, pw.pw_uid, pw.pw_gid)

    def _run(self, tool: str, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        cmd = [str(self.bin / tool), *args]
        if self.user is not None:
            cmd = ["runuser", "-u", self.user, "--", *cmd]
        result = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        if check and result.returncode != 0:
            raise RuntimeError(f"{tool} failed: {result.stderr.strip()}\n{self.log_tail()}")
        return result

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def init(self) -> PostgresCluster:
        self._run(
            "initdb",
            "-D",
            str(self.data),
            "-U",
            SUPERUSER,
            "--auth=trust",
            "-E",
            "UTF8",
            "--locale=C.UTF-8",
            "--no-sync",
        )
        return self.start()

    def start(self) -> PostgresCluster:
        options = (
            f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 "
            "-c fsync=off -c full_page_writes=off -c max_connections=300"
        )
        self._run(
            "pg_ctl",
            "-D",
            str(self.data),
            "-l",
            str(self.log),
            "-o",
            options,
            "-w",
            "-t",
            "60",
            "start",
        )
        return self

    def stop(self, mode: str = "fast") -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "stop", check=False)

    def restart(self) -> None:
        """Stop (every connection is cut) and start again on the same port."""
        self.stop("fast")
        self.start()

    def url(self, dbname: str = "postgres") -> str:
        return f"postgresql://{SUPERUSER}@127.0.0.1:{self.port}/{dbname}"

    def database(self, prefix: str = "t") -> str:
        """A new empty database; its URL."""
        name = f"{prefix}_{os.getpid()}_{next(self._names)}"
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def password_role(self, name: str, password: str) -> str:
        """A role that must give `password` over TCP (scram; every other role is trusted)
        owning a new database; its URL, without the password."""
        hba = self.data / "pg_hba.conf"
        rule = f"host all {name} 127.0.0.1/32 scram-sha-256\n"
        if rule not in hba.read_text():
            hba.write_text(rule + hba.read_text())  # the first matching line decides
            self._run("pg_ctl", "-D", str(self.data), "reload")
            with psycopg.connect(self.url(), autocommit=True) as conn:
                conn.execute(f"CREATE ROLE \"{name}\" LOGIN PASSWORD '{password}'")
        dbname = f"{name}_{os.getpid()}_{next(self._names)}"
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{dbname}" OWNER "{name}"')
        return f"postgresql://{name}@127.0.0.1:{self.port}/{dbname}"

    def destroy(self) -> None:
        self.stop("immediate")
        shutil.rmtree(self.root, ignore_errors=True)


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresCluster]:
    """The session's PostgreSQL cluster, started on first use."""
    cluster = PostgresCluster()
    try:
        cluster.init()
        yield cluster
    finally:
        cluster.destroy()


BACKENDS = ("sqlite", "postgresql")


def start_on(backend: str, request: pytest.FixtureRequest, tmp: Path, **kw: Any) -> ServerProcess:
    """`memfs serve` on a fresh database of `backend` (PostgreSQL: a new database on the
    session cluster); `kw` as for start_server."""
    if backend == "postgresql":
        cluster: PostgresCluster = request.getfixturevalue("postgres")
        return start_server(cluster.database(), log_path=tmp / "server.log", **kw)
    return start_server(tmp / "store.db", **kw)
