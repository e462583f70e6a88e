"""Secrets stay off the command line (issue 24 item 3).

Every local user reads every process's argv (`ps`). `memfs serve` takes its admin key
from `MEMFS_SERVE_API_KEY` or `--api-key-file` (private to its user, as the cache
directory is) and the PostgreSQL password the libpq way (`PGPASSWORD`, `PGPASSFILE`, a
service file); a key or password still given in argv works, with one warning. The
clients (`mount`, `session`, `store`, history commands, `memfs-worker`) take
credentials from the environment only: no option of theirs carries a secret.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from memfs.cli.main import build_parser
from tests.support.postgres import PostgresCluster
from tests.support.server import REPO_ROOT, ServerProcess, start_server

KEY = "sk-test-ADMIN-never-in-ps"
PASSWORD = "pw-NEVER-in-ps"
KEY_WARNING = "the admin key is on the command line, where every local user can read it"
PASSWORD_WARNING = "the database password is on the command line, where every local user"


def ps_args(pid: int) -> str:
    """The whole command line `ps` shows every local user."""
    return subprocess.run(
        ["ps", "-ww", "-o", "args=", "-p", str(pid)], capture_output=True, text=True, check=True
    ).stdout


def status_with(url: str, key: str | None) -> int:
    headers = {"anthropic-version": "2023-06-01", "anthropic-beta": "managed-agents-2026-04-01"}
    if key is not None:
        headers["x-api-key"] = key
    return httpx.get(f"{url}/v1/memory_stores", headers=headers, timeout=10).status_code


def serve_refused(*args: str, env: dict[str, str] | None = None) -> list[str]:
    result = subprocess.run(
        [sys.executable, "-m", "memfs.cli", "serve", "--port", "0", *args],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=REPO_ROOT,
        env={**os.environ, **(env or {})},
    )
    assert result.returncode == 2, result
    return result.stderr.strip().splitlines()


def check_keyed(server: ServerProcess) -> str:
    """The key is required, absent from argv; the server's log so far."""
    assert server.proc is not None
    try:
        assert KEY not in ps_args(server.proc.pid)
        assert status_with(server.url, KEY) == 200
        assert status_with(server.url, "sk-wrong") == 401
    finally:
        assert server.stop() == 0
    log = server.log_path.read_text()
    assert KEY not in log
    return log


def test_the_admin_key_from_the_environment(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "s.db", env={"MEMFS_SERVE_API_KEY": KEY}).start()
    assert KEY_WARNING not in check_keyed(server)


def test_the_admin_key_from_a_private_file(tmp_path: Path) -> None:
    key_file = tmp_path / "admin.key"
    key_file.write_text(KEY + "\n")
    key_file.chmod(0o600)
    server = start_server(tmp_path / "s.db", extra_args=["--api-key-file", str(key_file)])
    assert KEY_WARNING not in check_keyed(server)


def test_a_key_file_that_is_not_private_is_refused(tmp_path: Path) -> None:
    key_file = tmp_path / "admin.key"
    key_file.write_text(KEY)
    key_file.chmod(0o640)
    lines = serve_refused("--db", str(tmp_path / "s.db"), "--api-key-file", str(key_file))
    assert lines == [
        f"memfs serve: the key file {key_file} is open to other users (mode 640); chmod 600 it"
    ]
    key_file.chmod(0o600)
    link = tmp_path / "link.key"
    link.symlink_to(key_file)
    lines = serve_refused("--db", str(tmp_path / "s.db"), "--api-key-file", str(link))
    assert lines == [f"memfs serve: the key file {link} is a symlink"]
    if os.geteuid() == 0:  # another user's file chooses the key
        os.chown(key_file, 65534, 65534)
        lines = serve_refused("--db", str(tmp_path / "s.db"), "--api-key-file", str(key_file))
        assert lines == [
            f"memfs serve: the key file {key_file} is owned by uid 65534, not by this user "
            "(uid 0) or root"
        ]
    empty = tmp_path / "empty.key"
    empty.write_text("\n")
    empty.chmod(0o600)
    lines = serve_refused("--db", str(tmp_path / "s.db"), "--api-key-file", str(empty))
    assert lines == [f"memfs serve: the key file {empty} is empty"]


def test_the_admin_key_on_the_command_line_works_with_one_warning(tmp_path: Path) -> None:
    server = start_server(tmp_path / "s.db", extra_args=["--api-key", KEY])
    assert server.proc is not None
    assert KEY in ps_args(server.proc.pid)  # what the warning is about
    assert status_with(server.url, KEY) == 200
    assert server.stop() == 0
    log = server.log_path.read_text()
    assert log.count(KEY_WARNING) == 1, log
    assert KEY not in log


def test_an_empty_key_is_refused_at_start(tmp_path: Path) -> None:
    """Issue 35 item 5: `--api-key "$KEY"` with KEY unset counted as a key, so a console
    on 0.0.0.0 started and an empty password logged in. Every empty form is exit 2."""
    db = str(tmp_path / "s.db")
    hint = "(an unset shell variable?): give the key, or leave it out to accept any request"
    for args in (["--api-key", ""], ["--api-key", "  "], ["--host", "0.0.0.0", "--api-key", ""]):
        assert serve_refused("--db", db, *args) == [f"memfs serve: --api-key is empty {hint}"]
    assert serve_refused("--db", db, env={"MEMFS_SERVE_API_KEY": " "}) == [
        f"memfs serve: MEMFS_SERVE_API_KEY is set but empty {hint}"
    ]
    assert not (tmp_path / "s.db").exists()  # refused before the database is made


def test_an_empty_credential_is_refused(tmp_path: Path) -> None:
    """An empty x-api-key, an empty Bearer and an empty console password are 401."""
    server = ServerProcess(tmp_path / "s.db", env={"MEMFS_SERVE_API_KEY": KEY}).start()
    try:
        assert status_with(server.url, "") == 401
        headers = {"anthropic-beta": "managed-agents-2026-04-01", "authorization": "Bearer"}
        assert httpx.get(f"{server.url}/v1/memory_stores", headers=headers).status_code == 401
        with httpx.Client(base_url=server.url + "/console", timeout=10) as console:
            form = console.get("/login")
            nonce = re.search(r'name="nonce" value="([^"]+)"', form.text)
            assert nonce is not None
            done = console.post("/login", data={"nonce": nonce.group(1), "credential": ""})
            assert done.status_code == 401 and "give the admin key or a token" in done.text
            assert console.get("/").status_code == 303  # still the login page
    finally:
        assert server.stop() == 0


def test_no_client_option_carries_a_secret() -> None:
    """Only `memfs serve --api-key` takes a secret as an argument (and warns)."""

    def options(parser: argparse.ArgumentParser, where: str) -> list[tuple[str, str]]:
        found = []
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, child in action.choices.items():
                    found += options(child, f"{where} {name}")
            found += [(where, s) for s in action.option_strings]
        return found

    every = options(build_parser(), "memfs")
    for command in ("poll", "handle-item"):
        shown = subprocess.run(
            [sys.executable, "-m", "memfs.worker", command, "--help"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout
        every += [("memfs-worker", opt) for opt in re.findall(r"--[a-z][a-z-]*", shown)]
    assert ("memfs-worker", "--cache-dir") in every  # the worker's options were read
    secret_words = ("key", "token", "secret", "password", "credential")
    carrying = {
        (where, opt)
        for where, opt in every
        if any(w in opt for w in secret_words) and not opt.endswith("-file")
    }
    assert carrying == {("memfs serve", "--api-key")}


@pytest.fixture
def password_url(postgres: PostgresCluster) -> str:
    return postgres.password_role("memfs_pw", PASSWORD)


def test_postgres_password_from_pgpassword(password_url: str, tmp_path: Path) -> None:
    server = start_server(password_url, log_path=tmp_path / "s.log", env={"PGPASSWORD": PASSWORD})
    assert server.proc is not None
    assert PASSWORD not in ps_args(server.proc.pid)
    assert status_with(server.url, "any") == 200
    assert server.stop() == 0
    assert PASSWORD_WARNING not in server.log_path.read_text()


def test_postgres_password_from_a_passfile_and_a_service_file(
    password_url: str, postgres: PostgresCluster, tmp_path: Path
) -> None:
    dbname = password_url.rsplit("/", 1)[1]
    passfile = tmp_path / "pgpass"
    passfile.write_text(f"127.0.0.1:{postgres.port}:{dbname}:memfs_pw:{PASSWORD}\n")
    passfile.chmod(0o600)  # libpq ignores a pgpass file others can read
    server = start_server(
        password_url, log_path=tmp_path / "a.log", env={"PGPASSFILE": str(passfile)}
    )
    assert status_with(server.url, "any") == 200
    assert server.stop() == 0

    services = tmp_path / "pg_service.conf"
    services.write_text(
        f"[memfs]\nhost=127.0.0.1\nport={postgres.port}\ndbname={dbname}\n"
        f"user=memfs_pw\npassword={PASSWORD}\n"
    )
    services.chmod(0o600)
    server = start_server(
        "postgresql://?service=memfs",
        log_path=tmp_path / "b.log",
        env={"PGSERVICEFILE": str(services)},
    )
    assert server.proc is not None
    assert PASSWORD not in ps_args(server.proc.pid)
    assert status_with(server.url, "any") == 200
    assert server.stop() == 0
    for log in ("a.log", "b.log"):
        assert PASSWORD_WARNING not in (tmp_path / log).read_text()


def test_postgres_password_in_the_url_works_with_one_warning(
    password_url: str, tmp_path: Path
) -> None:
    lines = serve_refused("--db", password_url, env={"PGPASSWORD": ""})
    assert len(lines) == 1 and "no password supplied" in lines[0]  # the role needs one
    in_url = password_url.replace("memfs_pw@", f"memfs_pw:{PASSWORD}@")
    server = start_server(in_url, log_path=tmp_path / "s.log")
    assert status_with(server.url, "any") == 200
    assert server.stop() == 0
    log = server.log_path.read_text()
    assert log.count(PASSWORD_WARNING) == 1, log
    assert PASSWORD not in log
