"""The shipped units run as systemd would run them: ExecStartPre and ExecStart as written
(only the host's paths replaced), in the environment systemd gives (its EnvironmentFile,
Environment= and a NOTIFY_SOCKET), ready on READY=1, stopped with their KillSignal within
their TimeoutStopSec. The env file of memfs@ is the one the docs' printf line writes."""

from __future__ import annotations

import getpass
import json
import os
import signal
import subprocess
from pathlib import Path

import pytest

from tests.support.api import Api
from tests.support.files import store_files
from tests.support.mount import is_mounted, lazy_unmount
from tests.support.server import ServerProcess
from tests.support.units import (
    BIN,
    STANDARD_PATH,
    UNITS,
    NotifySocket,
    command,
    escape_path,
    example,
    parse_unit,
    read_env_file,
    values,
)

pytestmark = pytest.mark.deadline(240)


class Host:
    """The host paths of the units, moved under tmp_path."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.moves = {
            "/usr/local/bin/": f"{BIN}/",
            "/etc/memfs/": f"{tmp}/etc-memfs/",
            "/var/cache/": f"{tmp}/var-cache/",
            "/run/": f"{tmp}/run/",
            "/mnt/memory": f"{tmp}/mnt-memory",
        }
        for target in self.moves.values():
            if target.startswith(str(tmp)):
                Path(target).mkdir(parents=True, exist_ok=True)

    def unit(self, name: str, **words: str) -> dict[str, list[tuple[str, str]]]:
        text = (UNITS / name).read_text()
        for old, new in [*self.moves.items(), *words.items()]:
            text = text.replace(old, new)
        return parse_unit(text)

    def directories(self, unit: dict[str, list[tuple[str, str]]], instance: str) -> dict[str, str]:
        """What systemd creates before ExecStartPre (CacheDirectory=, RuntimeDirectory=),
        and the variables it passes their paths in ($CACHE_DIRECTORY…)."""
        made = {}
        for key, base in (("CacheDirectory", "var-cache"), ("RuntimeDirectory", "run")):
            for name in values(unit, "Service", key):
                path = self.tmp / base / name.replace("%i", instance)
                path.mkdir(parents=True, exist_ok=True)
                made[key.replace("Directory", "").upper() + "_DIRECTORY"] = str(path)
        return made


def run_service(
    host: Host, unit: dict[str, list[tuple[str, str]]], env: dict[str, str], instance: str = ""
) -> tuple[subprocess.Popen[bytes], NotifySocket]:
    env = {**env, **host.directories(unit, instance)}
    for line in values(unit, "Service", "ExecStartPre"):
        flags, argv = command(line, env, instance)
        done = subprocess.run(argv, env=env, capture_output=True, timeout=30)
        assert done.returncode == 0 or "-" in flags, done.stderr
    assert values(unit, "Service", "Type") == ["notify"]
    notify = NotifySocket(host.tmp / "notify.sock")
    (line,) = values(unit, "Service", "ExecStart")
    _, argv = command(line, env, instance)
    proc = subprocess.Popen(
        argv,
        env={**env, "NOTIFY_SOCKET": str(notify.path)},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    return proc, notify


def stop_service(unit: dict[str, list[tuple[str, str]]], proc: subprocess.Popen[bytes]) -> int:
    (kill,) = values(unit, "Service", "KillSignal")
    proc.send_signal(getattr(signal, kill))
    code = proc.wait(timeout=float(values(unit, "Service", "TimeoutStopSec")[0]))
    if proc.stderr is not None:
        proc.stderr.close()
    return code


def service_env(
    host: Host, unit: dict[str, list[tuple[str, str]]], instance: str = ""
) -> dict[str, str]:
    """systemd's environment for a system service: its own PATH, no HOME (no User=),
    then EnvironmentFile= and Environment=."""
    env = {"PATH": STANDARD_PATH, "LANG": "C.UTF-8"}
    for path in values(unit, "Service", "EnvironmentFile"):
        env.update(read_env_file(Path(path.replace("%i", instance))))
    for assignment in values(unit, "Service", "Environment"):
        key, _, value = assignment.partition("=")
        env[key] = value.replace("%i", instance)
    return env


def test_memfs_at_service(tmp_path: Path, shared_server: ServerProcess, shared_api: Api) -> None:
    store = shared_api.create_store("Prefs via systemd")["id"]
    shared_api.create_memory(store, "/style.md", "terse\n")
    host = Host(tmp_path)
    mountpoint = tmp_path / "prefs"
    instance = escape_path(str(mountpoint))
    # The docs' setup writes the env file with printf; run that printf as written.
    setup = example("memfs@ setup").replace("\\\n", " ")
    (printf,) = [line for line in setup.splitlines() if line.startswith("printf ")]
    printf = (
        printf.split(" | sudo tee ")[0]
        .replace("memstore_01…", store)
        .replace("https://memory.example.com", shared_server.url)
    )
    env_text = subprocess.run(
        ["bash", "-c", printf], capture_output=True, text=True, check=True, env={"KEY": "anything"}
    ).stdout
    (tmp_path / "etc-memfs" / f"{instance}.env").write_text(env_text)
    assert "systemd-escape --path /mnt/prefs" in setup
    assert escape_path("/mnt/prefs") == "mnt-prefs"

    unit = host.unit("memfs@.service")
    env = service_env(host, unit, instance)
    proc, notify = run_service(host, unit, env, instance)
    try:
        messages = notify.wait_for("READY=1", timeout=60)
        assert f"STATUS=mounted at {mountpoint}" in "\n".join(messages)
        assert is_mounted(mountpoint)
        assert (mountpoint / "style.md").read_text() == "terse\n"
        # the docs' status command from a root shell that sets XDG_RUNTIME_DIR
        status = subprocess.run(
            ["bash", "-c", f"XDG_RUNTIME_DIR= memfs status {mountpoint} --json"],
            capture_output=True,
            text=True,
            timeout=30,
            env={"PATH": f"{BIN}:{STANDARD_PATH}", "XDG_RUNTIME_DIR": "/run/user/0"},
        )
        assert status.returncode == 0, status.stderr
        assert json.loads(status.stdout)["mounts"][0]["stores"][0]["memory_store_id"] == store
        (mountpoint / "added.md").write_text("via the unit\n")
        code = stop_service(unit, proc)
        assert code == 0
        assert not is_mounted(mountpoint)
        assert store_files(shared_api, store) == {
            "style.md": "terse\n",
            "added.md": "via the unit\n",
        }
        cache = tmp_path / "var-cache" / "memfs" / instance
        assert (cache / "journal.sqlite").exists()
    finally:
        notify.close()
        if proc.poll() is None:
            proc.kill()
        lazy_unmount(mountpoint)


def test_memfs_session_service(
    tmp_path: Path, shared_server: ServerProcess, shared_api: Api
) -> None:
    store = shared_api.create_store("Agent Notes")["id"]
    host = Host(tmp_path)
    assert values(host.unit("memfs-session.service"), "Service", "User") == ["agent"]
    me = getpass.getuser()  # the test runs the unit as its own user, not `agent`
    unit = host.unit(
        "memfs-session.service", **{"User=agent": f"User={me}", "-o agent ": f"-o {me} "}
    )
    (tmp_path / "etc-memfs" / "session.json").write_text(
        json.dumps(
            {
                "resources": [
                    {"type": "memory_store", "memory_store_id": store, "access": "read_write"}
                ]
            }
        )
    )
    (tmp_path / "etc-memfs" / "session.env").write_text(
        f"ANTHROPIC_API_KEY=anything\nANTHROPIC_BASE_URL={shared_server.url}\n"
    )
    env = service_env(host, unit)
    proc, notify = run_service(host, unit, env)
    root = tmp_path / "mnt-memory"
    try:
        notify.wait_for("READY=1", timeout=60)
        (root / "agent-notes" / "n.md").write_text("noted\n")
        status = subprocess.run(
            [str(BIN / "memfs"), "status", str(root), "--json"],
            env=env,
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert status.returncode == 0, status.stderr
        [mount] = json.loads(status.stdout)["mounts"]  # the session's one store
        assert mount["mountpoint"] == str(root / "agent-notes")
        assert stop_service(unit, proc) == 0
        assert not is_mounted(root) and not os.listdir(root)
        assert store_files(shared_api, store) == {"n.md": "noted\n"}
    finally:
        notify.close()
        if proc.poll() is None:
            proc.kill()
        lazy_unmount(root / "agent-notes")
