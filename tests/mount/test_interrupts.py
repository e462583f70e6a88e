"""A control-channel peer that times out, disconnects or is interrupted never hurts the
daemon; Ctrl-C (SIGINT to the CLI process) never prints a traceback (issue 12, item 1)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.api import Api
from tests.support.daemonwatch import unexpected
from tests.support.deadline import eventually
from tests.support.files import store_files
from tests.support.hung import HungServer
from tests.support.mount import MountProcess, is_mounted, mount_store
from tests.support.server import ServerProcess, start_server

pytestmark = pytest.mark.deadline(240)

MEMFS = [sys.executable, "-m", "memfs.cli"]


@pytest.fixture
def slow_server(tmp_path: Path) -> Iterator[ServerProcess]:
    """Every memory request waits up to 1.5 s: a pass over 40 files takes seconds."""
    proc = start_server(
        tmp_path / "slow.db", extra_args=["--faults", "latency_ms=1500,paths=memories,seed=3"]
    )
    try:
        yield proc
    finally:
        proc.stop()


def cli(env: dict[str, str], *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*MEMFS, *args],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def interrupt(proc: subprocess.Popen[str], after: float) -> tuple[int, str]:
    """Ctrl-C the CLI process `after` seconds in; its exit code and stderr."""
    time.sleep(after)
    assert proc.poll() is None, "the command ended before it could be interrupted"
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    return proc.returncode, err


def assert_one_line(err: str) -> None:
    assert "Traceback" not in err, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert "interrupted" in lines[0], err


def assert_healthy(proc: MountProcess) -> None:
    assert proc.proc is not None and proc.proc.poll() is None, proc.log()
    assert sorted(os.listdir(proc.mountpoint))  # ENOTCONN on a dead mount
    proc.sync()
    assert "crashed" not in proc.log()


def write_files(root: Path, n: int) -> dict[str, str]:
    files = {f"f{i:02}.md": f"note {i}\n" for i in range(n)}
    for name, text in files.items():
        (root / name).write_text(text)
    return files


def test_sync_timeout_leaves_the_daemon_alive(
    mount: MountProcess, shared_api: Api, store: dict[str, object]
) -> None:
    files = write_files(mount.mountpoint, 5)
    result = mount.memfs("sync", str(mount.mountpoint), "--timeout", "0.001", check=False)
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    # The next sync waits for a pass that starts after the abandoned one ends, whose
    # answer meets the closed socket; the fixture's log watch sees any error it caused.
    assert_healthy(mount)
    assert store_files(shared_api, str(store["id"])) == files


def test_garbage_and_silent_peers_leave_the_daemon_alive(mount: MountProcess) -> None:
    import json
    import socket

    info = next(
        json.loads(p.read_text())
        for p in runtime_entries()
        if str(mount.mountpoint) in p.read_text()
    )
    for payload in (b"\xff\xfe not json\n", b"[1,2]\n", b'{"op": 7}\n', b"x" * 70000, b""):
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.connect(info["socket"])
            sock.sendall(payload)
            sock.shutdown(socket.SHUT_WR) if payload.endswith(b"0") else None
    # A peer that asks for a sync and hangs up at once.
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.connect(info["socket"])
        sock.sendall(b'{"op": "sync"}\n')
    assert_healthy(mount)  # its sync runs after the abandoned one (see above)


def runtime_entries() -> list[Path]:
    base = os.environ.get("XDG_RUNTIME_DIR")
    root = Path(base) / "memfs" if base else Path(f"/tmp/memfs-{os.getuid()}")
    return sorted(root.glob("*.json"))


def test_ctrl_c_on_a_slow_sync_leaves_the_pass_running(
    tmp_path: Path, slow_server: ServerProcess
) -> None:
    with Api(slow_server.url) as api:
        store_id = str(api.create_store("slow")["id"])
        proc = mount_store(tmp_path, slow_server.url, store_id, "--sync-interval", "300")
        try:
            files = write_files(proc.mountpoint, 40)
            code, err = interrupt(cli(proc.env, "sync", str(proc.mountpoint)), after=2.0)
            assert code == 130, err
            assert_one_line(err)
            assert_healthy(proc)  # this sync waits for the interrupted pass, then its own
            assert store_files(api, store_id) == files
        finally:
            proc.cleanup()


def test_ctrl_c_on_unmount_during_a_long_flush_finishes_the_unmount(
    tmp_path: Path, slow_server: ServerProcess
) -> None:
    with Api(slow_server.url) as api:
        store_id = str(api.create_store("slow")["id"])
        # Without push soon: the 40 files must still be unpushed when the unmount starts
        # (push soon pushes a stream of writes every MAX_DEFER at the latest).
        proc = mount_store(
            tmp_path,
            slow_server.url,
            store_id,
            "--sync-interval",
            "300",
            "--flush-timeout",
            "120",
            "--no-push-soon",
        )
        try:
            files = write_files(proc.mountpoint, 40)
            code, err = interrupt(cli(proc.env, "unmount", str(proc.mountpoint)), after=2.0)
            assert code == 130, err
            assert_one_line(err)
            assert proc.wait(timeout=150) == 0, proc.log()
            assert not is_mounted(proc.mountpoint)
            assert "crashed" not in proc.log()
            assert store_files(api, store_id) == files
        finally:
            proc.cleanup()


def no_process_mentions(text: str) -> bool:
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if text.encode() in cmdline:
            return False
    return True


def test_ctrl_c_on_mount_daemon_against_a_hung_server_aborts_cleanly(tmp_path: Path) -> None:
    mountpoint = tmp_path / "mnt"
    mountpoint.mkdir()
    with HungServer() as hung:
        env = {**os.environ, "ANTHROPIC_BASE_URL": hung.url}
        proc = cli(
            env,
            "mount",
            "memstore_hung",
            str(mountpoint),
            "--daemon",
            "--cache-dir",
            str(tmp_path / "cache"),
        )
        code, err = interrupt(proc, after=1.5)
        assert code == 130, err
        assert_one_line(err)
        assert not is_mounted(mountpoint)
        eventually(
            lambda: no_process_mentions(str(mountpoint)),
            "the background daemon gone",
            timeout=10,
            interval=0.1,
        )
        assert not is_mounted(mountpoint)
        assert not any(str(mountpoint) in p.read_text() for p in runtime_entries())


@pytest.mark.parametrize(
    "command",
    [
        ["mount", "memstore_hung", "{mnt}", "--cache-dir", "{tmp}/cache"],
        ["session", "{tmp}/spec.json", "--root", "{mnt}", "--cache-dir", "{tmp}/cache"],
        ["store", "list"],
        ["store", "show", "memstore_hung"],
        ["store", "export", "memstore_hung", "{tmp}/out"],
        ["store", "import", "memstore_hung", "{tmp}"],
    ],
)
def test_ctrl_c_against_a_hung_server_prints_one_line(tmp_path: Path, command: list[str]) -> None:
    (tmp_path / "mnt").mkdir()
    (tmp_path / "spec.json").write_text(
        '{"resources": [{"type": "memory_store", "memory_store_id": "memstore_hung"}]}'
    )
    args = [a.format(tmp=tmp_path, mnt=tmp_path / "mnt") for a in command]
    with HungServer() as hung:
        env = {**os.environ, "ANTHROPIC_BASE_URL": hung.url, "ANTHROPIC_API_KEY": "k"}
        code, err = interrupt(cli(env, *args), after=1.5)
    assert code == 130, err
    assert_one_line(err)
    assert not is_mounted(tmp_path / "mnt")


def test_ctrl_c_on_serve_prints_no_traceback(tmp_path: Path) -> None:
    proc = cli(dict(os.environ), "serve", "--port", "0", "--db", str(tmp_path / "db"))
    code, err = interrupt(proc, after=3.0)
    assert "Traceback" not in err, err
    assert unexpected(err, []) == [], err  # its log is its stderr: no ERROR line either
    assert code in (0, 130), err


def test_ctrl_c_on_commands_waiting_for_a_silent_daemon(tmp_path: Path) -> None:
    """A registered mount whose control socket accepts and never answers."""
    import json
    import socket

    mountpoint = tmp_path / "mnt"
    mountpoint.mkdir()
    runtime = tmp_path / "run"
    runtime.mkdir(mode=0o700)
    (runtime / "memfs").mkdir(mode=0o700)
    sock_path = runtime / "memfs" / "silent.sock"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(sock_path))
    listener.listen(16)
    sleeper = subprocess.Popen(["sleep", "120"])  # the "daemon" pid that stays alive
    try:
        (runtime / "memfs" / "silent.json").write_text(
            json.dumps(
                {
                    "mountpoint": str(mountpoint),
                    "pid": sleeper.pid,
                    "socket": str(sock_path),
                    "mode": "single",
                    "stores": ["memstore_x"],
                }
            )
        )
        env = {**os.environ, "XDG_RUNTIME_DIR": str(runtime)}
        for args in (
            ["sync", str(mountpoint)],
            ["status", str(mountpoint)],
            ["status"],
            ["unmount", str(mountpoint)],
        ):
            code, err = interrupt(cli(env, *args), after=1.5)
            assert code == 130, (args, err)
            assert_one_line(err)
    finally:
        sleeper.kill()
        sleeper.wait()
        listener.close()
