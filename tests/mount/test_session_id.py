"""`memfs session --session-id`: the stores of a session read from the Sessions API.

A stand-in control plane on 127.0.0.1 serves the session object (and passes the memory
endpoints through to a real `memfs serve`); real `memfs session` processes mount it.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.api import Api
from tests.support.controlplane import (
    SESSION_ID,
    TOKEN,
    ControlPlane,
    SandboxHost,
    Script,
    work_secret,
)
from tests.support.files import store_files
from tests.support.mount import is_mounted
from tests.support.server import ServerProcess, start_server

pytestmark = pytest.mark.fuse


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with start_server(tmp_path_factory.mktemp("session-id-db") / "memfs.db", api_key=TOKEN) as proc:
        yield proc


class Host(SandboxHost):
    def __init__(self, tmp: Path, api: Api) -> None:
        super().__init__(tmp, "mfs-si-")
        self.notes = api.create_store("Notes")["id"]
        self.ref = api.create_store("Reference")["id"]
        api.create_memory(self.notes, "/a.md", "alpha\n")
        api.create_memory(self.ref, "/facts.md", "the sky is blue\n")
        self.script = Script(
            calls=[],
            resources=[
                {
                    "type": "memory_store",
                    "memory_store_id": self.notes,
                    "access": "read_write",
                    "name": "Notes",
                    "mount_path": str(self.root / "notes"),
                    "instructions": "",
                },
                {
                    "type": "memory_store",
                    "memory_store_id": self.ref,
                    "access": "read_only",
                    "name": "Reference",
                    "instructions": "",
                },
                {"type": "file", "file_id": "file_1", "mount_path": "/workspace/x"},
            ],
        )

    def memfs(
        self, url: str, *args: str, timeout: float = 90, **env: str
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "memfs.cli", *args],
            env=self.env(url, **env),
            capture_output=True,
            text=True,
            timeout=timeout,
        )


@pytest.fixture
def host(tmp_path: Path, server: ServerProcess) -> Iterator[tuple[Host, Api]]:
    with Api(server.url, TOKEN) as api:
        h = Host(tmp_path, api)
        try:
            yield h, api
        finally:
            h.cleanup()


def test_the_session_named_by_the_environment_is_mounted_with_its_access(
    host: tuple[Host, Api], server: ServerProcess
) -> None:
    h, api = host
    with ControlPlane(h.script, server.url) as plane:
        started = h.memfs(
            plane.url,
            "session",
            "--root",
            str(h.root),
            "--daemon",
            ANTHROPIC_SESSION_ID=SESSION_ID,
            ANTHROPIC_WORK_SECRET=work_secret(),
        )
        assert started.returncode == 0, started.stderr
        try:
            assert f"GET /v1/sessions/{SESSION_ID}" in plane.requests
            assert sorted(os.listdir(h.root)) == ["notes", "reference"]
            assert (h.root / "reference" / "facts.md").read_text() == "the sky is blue\n"
            with pytest.raises(OSError) as refused:
                (h.root / "reference" / "new.md").write_text("no\n")
            assert refused.value.strerror == "Read-only file system"
            (h.root / "notes" / "b.md").write_text("beta\n")
        finally:
            done = h.memfs(plane.url, "unmount", str(h.root), ANTHROPIC_WORK_SECRET=work_secret())
        assert done.returncode == 0, done.stderr
    assert store_files(api, h.notes) == {"a.md": "alpha\n", "b.md": "beta\n"}
    assert not is_mounted(h.root) and os.listdir(h.root) == []


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_session_id_refusals_say_what_is_wrong_and_mount_nothing(
    host: tuple[Host, Api], server: ServerProcess, tmp_path: Path
) -> None:
    h, _ = host
    spec = tmp_path / "spec.json"
    spec.write_text('{"resources": []}')
    root = ["--root", str(h.root)]
    with ControlPlane(h.script, server.url) as plane:
        cases = [
            (
                h.memfs(plane.url, "session", *root, ANTHROPIC_WORK_SECRET=work_secret()),
                2,
                "no session to mount: give SPEC.json, --session-id ID, or set ANTHROPIC_SESSION_ID",
            ),
            (
                h.memfs(
                    plane.url,
                    "session",
                    "--session-id",
                    "sesn_nope",
                    *root,
                    ANTHROPIC_WORK_SECRET=work_secret(),
                ),
                2,
                "session sesn_nope does not exist",
            ),
            (
                h.memfs(
                    plane.url,
                    "session",
                    "--session-id",
                    SESSION_ID,
                    *root,
                    ANTHROPIC_AUTH_TOKEN="sk-ant-wrong",
                ),
                2,
                "the sessions API refused the credentials",
            ),
            (
                h.memfs(
                    plane.url,
                    "session",
                    str(spec),
                    "--session-id",
                    SESSION_ID,
                    *root,
                    ANTHROPIC_WORK_SECRET=work_secret(),
                ),
                2,
                "give either SPEC.json or --session-id, not both",
            ),
            (
                h.memfs(plane.url, "session", "--session-id", SESSION_ID, *root),
                2,
                "no credentials for the store server at",
            ),
            (
                h.memfs(
                    f"http://127.0.0.1:{_closed_port()}",
                    "session",
                    "--session-id",
                    SESSION_ID,
                    *root,
                    ANTHROPIC_WORK_SECRET=work_secret(),
                ),
                3,
                "cannot reach the store at",
            ),
        ]
    for done, code, message in cases:
        assert (done.returncode, message in done.stderr) == (code, True), done.stderr
        assert "sk-ant-wrong" not in done.stderr and TOKEN not in done.stderr
    assert not is_mounted(h.root) and os.listdir(h.root) == []
