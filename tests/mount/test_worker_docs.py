"""Every example in docs/worker.md, run as written against the stand-in control plane.

Each example serves one scripted session (one `write` into a store) through the real
SDK worker and a real memfs mount; the write must reach the store and the root must be
empty afterwards. Only the host-specific paths of the systemd unit are replaced.
"""

from __future__ import annotations

import json
import os
import re
import signal
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.api import Api
from tests.support.controlplane import (
    ENV_ID,
    ENV_KEY,
    SESSION_ID,
    TOKEN,
    WORK_ID,
    Call,
    ControlPlane,
    SandboxHost,
    Script,
    work_secret,
)
from tests.support.deadline import eventually
from tests.support.files import store_files
from tests.support.mount import is_mounted, mount_store
from tests.support.server import ServerProcess, start_server
from tests.support.terminal import on_a_terminal

pytestmark = pytest.mark.fuse

DOC = Path(__file__).resolve().parents[2] / "docs" / "worker.md"
BIN = Path(sys.executable).parent


def example(name: str) -> str:
    """The fenced block right after `<!-- example: name -->` in docs/worker.md."""
    found = re.search(
        rf"<!-- example: {re.escape(name)} -->\n```[a-z]*\n(.*?)\n```", DOC.read_text(), re.S
    )
    assert found, f"docs/worker.md has no example {name!r}"
    return found.group(1) + "\n"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with start_server(
        tmp_path_factory.mktemp("worker-docs-db") / "memfs.db", api_key=TOKEN
    ) as proc:
        yield proc


class Host(SandboxHost):
    def __init__(self, tmp: Path, api: Api) -> None:
        super().__init__(tmp, "mfs-wd-")
        self.work = tmp / "work"
        self.work.mkdir()
        self.store = api.create_store("Doc Notes")["id"]
        api.create_memory(self.store, "/hello.md", "hello\n")
        self.script = Script(
            resources=[
                {
                    "type": "memory_store",
                    "memory_store_id": self.store,
                    "access": "read_write",
                    "name": "Doc Notes",
                    "mount_path": str(self.root / "doc-notes"),
                    "instructions": "",
                }
            ],
            calls=[
                Call(
                    "write",
                    {
                        "file_path": str(self.root / "doc-notes" / "from-docs.md"),
                        "content": "the example ran\n",
                    },
                )
            ],
        )

    def plane_env(self, plane: ControlPlane, **extra: str) -> dict[str, str]:
        return self.env(
            plane.url, WORKDIR=str(self.work), PATH=f"{BIN}:{os.environ.get('PATH', '')}", **extra
        )

    def check(self, api: Api, plane: ControlPlane) -> None:
        assert [r.is_error for r in plane.results] == [False], plane.results
        assert store_files(api, self.store)["from-docs.md"] == "the example ran\n"
        assert not is_mounted(self.root)
        assert os.listdir(self.root) == []


@pytest.fixture
def host(tmp_path: Path, server: ServerProcess) -> Iterator[tuple[Host, Api]]:
    with Api(server.url, TOKEN) as api:
        h = Host(tmp_path, api)
        try:
            yield h, api
        finally:
            h.cleanup()


def wait_stopped(plane: ControlPlane, proc: subprocess.Popen[bytes], bound: float = 120) -> None:
    def stopped() -> bool:
        if proc.poll() is not None:
            raise AssertionError(f"the worker exited early: {proc.returncode}")
        return plane.stopped.is_set()

    eventually(stopped, "the work item stopped", timeout=bound, interval=0.1)


def stop(proc: subprocess.Popen[bytes], sig: int, bound: float = 90) -> int:
    proc.send_signal(sig)
    try:
        return proc.wait(timeout=bound)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_python_poll_example(host: tuple[Host, Api], server: ServerProcess) -> None:
    h, api = host
    with ControlPlane(h.script, server.url) as plane:
        env = h.plane_env(plane, ANTHROPIC_ENVIRONMENT_ID=ENV_ID, ANTHROPIC_ENVIRONMENT_KEY=ENV_KEY)
        proc = subprocess.Popen(
            [sys.executable, "-c", example("python-poll")],
            env=env,
            stdin=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        wait_stopped(plane, proc)
        stop(proc, signal.SIGINT)
        assert "GET /v1/environments/env_standin/work/poll" in plane.requests
        h.check(api, plane)


def test_python_handle_item_example(host: tuple[Host, Api], server: ServerProcess) -> None:
    h, api = host
    with ControlPlane(h.script, server.url) as plane:
        env = h.plane_env(
            plane,
            ANTHROPIC_WORK_ID=WORK_ID,
            ANTHROPIC_SESSION_ID=SESSION_ID,
            ANTHROPIC_ENVIRONMENT_ID=ENV_ID,
            ANTHROPIC_WORK_SECRET=work_secret(),
        )
        done = subprocess.run(
            [sys.executable, "-c", example("python-handle-item")],
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=180,
        )
        assert done.returncode == 0, done.stderr.decode()[-3000:]
        assert plane.stopped.is_set()
        h.check(api, plane)


def test_on_work_script_example(host: tuple[Host, Api], server: ServerProcess) -> None:
    """As `ant beta:worker poll --on-work` runs it: ANTHROPIC_* set, the item on stdin."""
    h, api = host
    script = h.tmp / "memfs-on-work"
    script.write_text(example("on-work"))
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    with ControlPlane(h.script, server.url) as plane:
        env = h.plane_env(
            plane,
            ANTHROPIC_WORK_ID=WORK_ID,
            ANTHROPIC_SESSION_ID=SESSION_ID,
            ANTHROPIC_ENVIRONMENT_ID=ENV_ID,
            ANTHROPIC_ENVIRONMENT_KEY=ENV_KEY,
        )
        done = subprocess.run(
            [str(script)],
            env=env,
            capture_output=True,
            timeout=180,
            input=json.dumps(plane.work_item()).encode(),
        )
        assert done.returncode == 0, done.stderr.decode()[-3000:]
        assert plane.stopped.is_set()
        h.check(api, plane)


def test_systemd_unit_example(host: tuple[Host, Api], server: ServerProcess) -> None:
    """The unit's ExecStart with its EnvironmentFile, stopped with its KillSignal within
    its TimeoutStopSec (only the host's paths are replaced)."""
    h, api = host
    unit = example("systemd")
    service: dict[str, str] = {}
    section = ""
    for line in unit.splitlines():
        line = line.strip()
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1]
        elif section == "Service" and "=" in line and not line.startswith("#"):
            key, _, value = line.partition("=")
            service[key] = value
    argv = service["ExecStart"].split()
    assert argv[0] == "/usr/local/bin/memfs-worker" and argv[1] == "poll"
    argv[0] = str(BIN / "memfs-worker")
    argv = [str(h.work) if a == "/home/worker/workspace" else a for a in argv]
    assert service["KillSignal"] == "SIGTERM"
    with ControlPlane(h.script, server.url) as plane:
        env_file = {"ANTHROPIC_ENVIRONMENT_ID": ENV_ID, "ANTHROPIC_ENVIRONMENT_KEY": ENV_KEY}
        proc = subprocess.Popen(
            argv,
            env=h.plane_env(plane, **env_file),
            stdin=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        wait_stopped(plane, proc)
        code = stop(proc, signal.SIGTERM, bound=float(service["TimeoutStopSec"]))
        log = proc.stderr.read().decode() if proc.stderr else ""
        assert code == 0, log[-3000:]
        h.check(api, plane)
    # The journal gets the worker's own lines; its HTTP requests only at --log-level debug.
    assert "INFO memfs.worker: mounted memory store" in log, log[-3000:]
    assert not [line for line in log.splitlines() if "HTTP Request:" in line], log[-3000:]


def test_sighup_stops_memfs_worker_poll_as_sigterm_does(
    host: tuple[Host, Api], server: ServerProcess
) -> None:
    """A closed terminal or ssh session (SIGHUP) stops `memfs-worker poll` as the unit's
    SIGTERM does: the session's teardown, exit 0 (issue 35, item 10; before, exit -1)."""
    h, api = host
    with ControlPlane(h.script, server.url) as plane:
        proc = subprocess.Popen(
            [str(BIN / "memfs-worker"), "poll", "--workdir", str(h.work)],
            env=h.plane_env(
                plane, ANTHROPIC_ENVIRONMENT_ID=ENV_ID, ANTHROPIC_ENVIRONMENT_KEY=ENV_KEY
            ),
            stdin=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        wait_stopped(plane, proc)
        code = stop(proc, signal.SIGHUP)
        log = proc.stderr.read().decode() if proc.stderr else ""
        assert code == 0, log[-3000:]
        assert "stopping; the session gets its teardown signal=SIGHUP" in log, log[-3000:]
        h.check(api, plane)


def test_on_work_script_for_other_languages_example(
    host: tuple[Host, Api], server: ServerProcess
) -> None:
    """`memfs session --session-id` before a worker that has memory disabled: the work
    item on stdin, the stores live while it runs, the final sync when it exits."""
    h, api = host
    script = h.tmp / "memfs-mount-and-run"
    script.write_text(example("on-work-other"))
    script.chmod(0o755)
    worker = h.tmp / "worker.sh"
    worker.write_text(
        f"#!/bin/sh\nset -eu\nmountpoint -q {h.root}/doc-notes\n"
        f"echo 'the example ran' > {h.root}/doc-notes/from-docs.md\n"
    )
    worker.chmod(0o755)
    with ControlPlane(h.script, server.url) as plane:
        env = h.plane_env(
            plane,
            ANTHROPIC_WORK_ID=WORK_ID,
            ANTHROPIC_SESSION_ID=SESSION_ID,
            ANTHROPIC_ENVIRONMENT_ID=ENV_ID,
            ANTHROPIC_ENVIRONMENT_KEY=ENV_KEY,
            MEMORY_ROOT=str(h.root),
            WORKER_CMD=str(worker),
        )
        done = subprocess.run(
            [str(script)],
            env=env,
            capture_output=True,
            timeout=180,
            input=json.dumps(plane.work_item()).encode(),
        )
        assert done.returncode == 0, done.stderr.decode()[-3000:]
        assert f"GET /v1/sessions/{SESSION_ID}" in plane.requests
    assert store_files(api, h.store)["from-docs.md"] == "the example ran\n"
    assert not is_mounted(h.root)
    assert os.listdir(h.root) == []


@pytest.mark.deadline(600)
def test_wheelhouse_example_installs_the_patched_build(
    tmp_path: Path, shared_server: ServerProcess, store: dict[str, Any]
) -> None:
    """The two lines of docs/worker.md's wheelhouse example: the checkout leaves a
    wheelhouse, a fresh venv installs 'memfs[anthropic]' from it alone (no index, no
    pip configuration), and a mount run by that venv's `memfs` is on the patched
    pyfuse3 and says so in `memfs status`."""
    build, install = (line.split("#")[0].strip() for line in example("wheelhouse").splitlines())
    wheels = tmp_path / "wheels"
    repo = DOC.parents[1]
    subprocess.run(
        build.replace("/srv/memfs-wheels", str(wheels)), shell=True, cwd=repo, check=True
    )
    venv = tmp_path / "host"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    offline = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    offline["PIP_CONFIG_FILE"] = os.devnull  # nothing but the wheelhouse to install from
    subprocess.run(
        install.replace("/srv/memfs-wheels", str(wheels)).replace("pip ", f"{venv}/bin/pip ", 1),
        shell=True,
        cwd=tmp_path,
        env=offline,
        check=True,
    )
    probe = "import pyfuse3, importlib.metadata as m; print(m.version('pyfuse3'))"
    probe += "; print(hasattr(pyfuse3.FileInfo, 'noflush'))"
    version, noflush = subprocess.run(
        [venv / "bin" / "python", "-c", probe], capture_output=True, text=True, check=True
    ).stdout.split()
    assert "+memfs." in version and noflush == "True", (version, noflush)

    memfs = [str(venv / "bin" / "memfs")]
    mount = mount_store(tmp_path, shared_server.url, str(store["id"]), memfs=memfs)
    try:
        f = mount.mountpoint / "note.md"
        f.write_text("fast\n")
        before = mount.fuse_requests()
        assert f.read_text() == "fast\n"
        assert mount.fuse_requests().get("flush", 0) == before.get("flush", 0)  # noflush
        levers = mount.mount_status()["pyfuse3"]
        assert levers["version"] == version and levers["noflush_used"], levers
        code, human, err = on_a_terminal([*memfs, "status", str(mount.mountpoint)], mount.env)
        assert code == 0, err
        assert f"\n  pyfuse3 {version} (patched; in use: noflush" in human, human
    finally:
        mount.cleanup()
