"""A closed terminal (or an ssh disconnect) stops every foreground memfs process as
SIGTERM does: final sync, clean unmount, exit 0 (issue 35, item 10).

Each process runs on a real pseudo-terminal that is its controlling terminal; the test
closes the terminal's other end, so the kernel hangs it up, and sends SIGHUP to the
process group as the shell in that terminal does. Before, SIGHUP killed a foreground
mount (exit 129) with no final sync and left a dead mount ("Transport endpoint is not
connected").
"""

from __future__ import annotations

import contextlib
import json
import os
import pty
import re
import select
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.api import Api
from tests.support.daemonwatch import DaemonWatch
from tests.support.files import store_contents
from tests.support.mount import is_mounted, lazy_unmount, require_fuse
from tests.support.refusals import tool_fails
from tests.support.server import ServerProcess

pytestmark = [pytest.mark.fuse, pytest.mark.deadline(180)]

REPO_ROOT = Path(__file__).resolve().parents[2]
MEMFS = [sys.executable, "-m", "memfs.cli"]


class Terminal:
    """`cmd` with a pseudo-terminal as its controlling terminal and its stdin, stdout
    and stderr (`setsid --ctty`), as a shell in a terminal window runs it."""

    def __init__(self, cmd: list[str], env: dict[str, str]) -> None:
        self.leader, follower = pty.openpty()
        try:
            self.proc = subprocess.Popen(
                ["setsid", "--ctty", *cmd],
                env=env,
                stdin=follower,
                stdout=follower,
                stderr=follower,
            )
        finally:
            os.close(follower)
        self.text = ""
        self.closed = False

    def wait_for(self, mark: str, timeout: float = 60) -> None:
        """Until a whole line with `mark` is on the terminal."""
        deadline = time.monotonic() + timeout
        while mark not in self.text or "\n" not in self.text.split(mark, 1)[1]:
            left = deadline - time.monotonic()
            assert left > 0 and self.proc.poll() is None, (self.proc.poll(), self.text)
            ready, _, _ = select.select([self.leader], [], [], min(left, 0.2))
            if ready:
                self.text += os.read(self.leader, 65536).decode(errors="replace")

    def close(self) -> None:
        """Close the terminal window: the kernel hangs up the terminal (SIGHUP to its
        session leader; writes to it fail with EIO), and the shell that ran the command
        passes SIGHUP on to the command's process group, as bash does when it hangs up."""
        if not self.closed:
            self.closed = True
            os.close(self.leader)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGHUP)

    def finish(self, timeout: float = 90) -> int:
        """Close the terminal; the exit code (bounded: killed if it hangs)."""
        self.close()
        try:
            return self.proc.wait(timeout)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()


def _env(url: str, runtime: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANTHROPIC_")}
    env.update(ANTHROPIC_BASE_URL=url, ANTHROPIC_API_KEY="local", XDG_RUNTIME_DIR=str(runtime))
    return env


def _append(path: Path, text: str) -> None:
    with open(path, "a") as f:
        f.write(text)


def test_a_closed_terminal_stops_a_foreground_mount_with_its_final_sync(
    tmp_path: Path, shared_server: ServerProcess, shared_api: Api, store: dict[str, object]
) -> None:
    require_fuse()
    store_id = str(store["id"])
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    log = tmp_path / "mount.log"
    # No pass before the stop: only the final sync can push the appended line.
    term = Terminal(
        [
            *MEMFS,
            "--log-level",
            "debug",
            "--log-file",
            str(log),
            "mount",
            store_id,
            str(mnt),
            "--cache-dir",
            str(tmp_path / "cache"),
            "--sync-interval",
            "300",
            "--no-push-soon",
        ],
        _env(shared_server.url, tmp_path / "rt"),
    )
    try:
        term.wait_for("memfs: mounted at")
        _append(mnt / "notes.md", "- appended 0.1 s before the terminal closed\n")
        time.sleep(0.1)
        assert term.finish() == 0, log.read_text()[-3000:]
        assert store_contents(shared_api, store_id) == {
            "/notes.md": "- appended 0.1 s before the terminal closed\n"
        }
        assert not is_mounted(mnt) and os.listdir(mnt) == []
        text = log.read_text()
        assert "stopping on signal=SIGHUP" in text and "Traceback" not in text, text[-3000:]
    finally:
        term.finish()
        lazy_unmount(mnt)


def test_a_closed_terminal_stops_a_foreground_session_with_its_final_sync(
    tmp_path: Path, shared_server: ServerProcess, shared_api: Api
) -> None:
    require_fuse()
    store_id = shared_api.create_store("Hangup")["id"]
    root = tmp_path / "memory"
    root.mkdir()
    spec = tmp_path / "spec.json"
    spec.write_text(
        json.dumps(
            {"resources": [{"type": "memory_store", "memory_store_id": store_id}]},
        )
    )
    log = tmp_path / "session.log"
    term = Terminal(
        [
            *MEMFS,
            "--log-level",
            "debug",
            "--log-file",
            str(log),
            "session",
            str(spec),
            "--root",
            str(root),
            "--cache-dir",
            str(tmp_path / "cache"),
            "--sync-interval",
            "300",
            "--no-push-soon",
        ],
        _env(shared_server.url, tmp_path / "rt"),
    )
    try:
        term.wait_for("memfs: mounted at")
        _append(root / "hangup" / "notes.md", "- written in a session\n")
        time.sleep(0.1)
        assert term.finish() == 0, log.read_text()[-3000:]
        assert store_contents(shared_api, store_id) == {"/notes.md": "- written in a session\n"}
        assert not is_mounted(root / "hangup") and os.listdir(root) == []
        text = log.read_text()
        assert "stopping on signal=SIGHUP" in text and "Traceback" not in text, text[-3000:]
    finally:
        term.finish()
        lazy_unmount(root / "hangup")


def test_a_closed_terminal_with_a_refused_file_exits_1_without_a_crash(
    tmp_path: Path, shared_server: ServerProcess, shared_api: Api
) -> None:
    """What the final sync left is said on stderr, which is the closed terminal now:
    the lines are lost with it, not the exit code (1, as documented) or the teardown."""
    require_fuse()
    store_id = shared_api.create_store("Refused")["id"]
    root = tmp_path / "memory"
    root.mkdir()
    spec = tmp_path / "spec.json"
    spec.write_text(
        json.dumps({"resources": [{"type": "memory_store", "memory_store_id": store_id}]})
    )
    log = tmp_path / "session.log"
    term = Terminal(
        [
            *MEMFS,
            "--log-level",
            "debug",
            "--log-file",
            str(log),
            "session",
            str(spec),
            "--root",
            str(root),
            "--cache-dir",
            str(tmp_path / "cache"),
        ],
        _env(shared_server.url, tmp_path / "rt"),
    )
    try:
        term.wait_for("memfs: mounted at")
        (root / "refused" / "kept.md").write_text("kept\n")
        binary = tmp_path / "bin"
        binary.write_bytes(b"\xff\xfe not utf-8")
        tool_fails("cp", str(binary), str(root / "refused" / "bin.md"), message="Invalid")
        assert term.finish() == 1, log.read_text()[-3000:]
        assert store_contents(shared_api, store_id) == {"/kept.md": "kept\n"}
        assert not is_mounted(root / "refused") and os.listdir(root) == []
        text = log.read_text()
        assert "stopping on signal=SIGHUP" in text, text[-3000:]
        assert "crashed" not in text and "Traceback" not in text, text[-3000:]
    finally:
        term.finish()
        lazy_unmount(root / "refused")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_closed_terminal_stops_memfs_serve_cleanly(tmp_path: Path, daemons: DaemonWatch) -> None:
    log = tmp_path / "serve.log"
    daemons.watch_log(log)
    term = Terminal(
        [
            *MEMFS,
            "--log-file",
            str(log),
            "serve",
            "--db",
            str(tmp_path / "store.db"),
            "--port",
            str(_free_port()),
        ],
        {**os.environ},
    )
    try:
        term.wait_for("listening on")
        assert term.finish() == 0, log.read_text()[-3000:]
        text = log.read_text()
        assert "stopping on signal=SIGHUP" in text and "Traceback" not in text, text[-3000:]
    finally:
        term.finish()


def test_a_closed_terminal_stops_the_demo_with_its_final_sync(
    tmp_path: Path, daemons: DaemonWatch
) -> None:
    """scripts/demo, the main job: the mount's final sync, then the server stops."""
    require_fuse()
    daemons.watch_log(tmp_path / "demo" / "serve.log")  # the demo's server
    restarted_log = tmp_path / "restarted.log"
    daemons.watch_log(restarted_log)
    mnt = tmp_path / "demo-mount"
    port = _free_port()
    env = {
        **os.environ,
        "MEMFS_DEMO_DIR": str(tmp_path / "demo"),
        "MEMFS_DEMO_PORT": str(port),
        "MEMFS_DEMO_MOUNT": str(mnt),
    }
    env.pop("ANTHROPIC_BASE_URL", None)
    term = Terminal(["bash", str(REPO_ROOT / "scripts" / "demo")], env)
    try:
        term.wait_for("memfs: mounted at", timeout=120)
        _append(mnt / "preferences.md", "- likes tea\n")
        time.sleep(0.1)
        assert term.finish() == 0, term.text
        assert not is_mounted(mnt) and os.listdir(mnt) == []
        # The server stopped after the final sync; the line is in its database.
        with restarted_log.open("wb") as stderr:
            restarted = subprocess.Popen(
                [*MEMFS, "serve", "--db", str(tmp_path / "demo" / "store.db"), "--port", str(port)],
                stdout=subprocess.PIPE,
                stderr=stderr,
            )
        try:
            assert restarted.stdout is not None
            assert "listening on" in restarted.stdout.readline().decode()
            found = re.search(r"memfs demo: store (\S+) ", term.text)
            assert found, term.text
            with Api(f"http://127.0.0.1:{port}") as api:
                preferences = store_contents(api, found.group(1))["/preferences.md"]
            assert preferences.endswith("- likes tea\n"), preferences
        finally:
            restarted.send_signal(signal.SIGTERM)
            assert restarted.wait(30) == 0
    finally:
        term.finish()
        lazy_unmount(mnt)
