"""The command line's conventions on live mounts (issue 15), through the real CLI:
`status PATH` and `sync` name files by path, one JSON schema with RFC 3339 times for
both, `session --root` takes a relative path, and the daemon's log lines are
`key=value` (or JSON with `--log-format json`, also where `--daemon` logs by default)."""

from __future__ import annotations

import errno
import json
import os
import re
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from tests.support.api import Api
from tests.support.daemonwatch import DaemonWatch
from tests.support.deadline import eventually
from tests.support.loglines import LOG_LINE
from tests.support.mount import MountProcess, is_mounted, lazy_unmount, mount_store
from tests.support.server import REPO_ROOT, ServerProcess
from tests.support.terminal import on_a_terminal

# A refusal that waits for new content (`status --json`, refused_files).
PERMANENT = {"transient": False, "next_retry": None}

pytestmark = pytest.mark.deadline(180)

RFC3339 = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)")


def memfs_on_a_terminal(env: dict[str, str], *args: str) -> tuple[int, str]:
    """`memfs ARGS` with stdout on a pseudo-terminal: the human output."""
    code, out, _ = on_a_terminal([sys.executable, "-m", "memfs.cli", *args], env)
    return code, out


@pytest.fixture
def slow_mount(
    tmp_path: Path, shared_server: ServerProcess, store: dict[str, object]
) -> Iterator[MountProcess]:
    """A mount whose own passes never come while a test looks (1 h interval, no watch,
    no probes)."""
    proc = mount_store(
        tmp_path,
        shared_server.url,
        str(store["id"]),
        "--sync-interval",
        "3600",
        "--no-watch",
        "--probe-budget",
        "0",
        "--no-push-soon",
    )
    try:
        yield proc
    finally:
        proc.cleanup()


def _conflict(mount: MountProcess, api: Api, store_id: str) -> None:
    """/style.md changed on both sides; the next pass keeps the store's and a copy."""
    memory = api.create_memory(store_id, "/style.md", "base\n")
    mount.sync()
    (mount.mountpoint / "style.md").write_text("local edit\n")
    api.update_memory(store_id, memory["id"], content="remote edit\n")


def test_sync_names_conflicts_and_shares_the_status_schema(
    slow_mount: MountProcess, shared_api: Api, store: dict[str, object]
) -> None:
    store_id = str(store["id"])
    _conflict(slow_mount, shared_api, store_id)
    out = slow_mount.memfs("sync", str(slow_mount.mountpoint))
    lines = out.stdout.splitlines()
    assert re.fullmatch(
        rf"{store_id}: ok pulled=\d+ pushed=\d+ deleted=0 conflicts=1 "
        r"in [\d.]+s",
        lines[0],
    ), out.stdout
    assert re.fullmatch(r"  conflict: /style\.md -> /\S+", lines[1]), out.stdout
    copy = lines[1].split(" -> ", 1)[1]
    assert Path(copy).read_text() == "local edit\n"

    synced = json.loads(slow_mount.memfs("sync", str(slow_mount.mountpoint), "--json").stdout)
    status = json.loads(slow_mount.memfs("status", str(slow_mount.mountpoint), "--json").stdout)
    assert list(synced) == list(status) == ["mounts"]
    [sync_mount], [status_mount] = synced["mounts"], status["mounts"]
    assert set(sync_mount) == set(status_mount), (sync_mount, status_mount)
    assert isinstance(sync_mount["stores"], list)  # a list of stores, as `status` has
    [s], [t] = sync_mount["stores"], status_mount["stores"]
    assert set(s) == set(t) and set(s["last_pass"]) == set(t["last_pass"])
    assert s["memory_store_id"] == store_id and s["last_pass"]["outcome"] == "ok"
    assert s["last_pass"]["conflicts"] == 0  # this pass found none; the copy stays listed
    assert [c["path"] for c in t["conflict_copies"]] == ["/style.md"]
    for answer in (s, t):
        assert RFC3339.fullmatch(answer["last_pass"]["at"]), answer
        assert answer["next_pass_at"] is None or RFC3339.fullmatch(answer["next_pass_at"])
        for c in answer["conflict_copies"]:
            assert RFC3339.fullmatch(c["at"]), c
    # the times are now, in UTC
    at = datetime.fromisoformat(t["last_pass"]["at"]).timestamp()
    assert abs(at - datetime.now().timestamp()) < 120


def test_status_path_lists_dirty_refused_and_conflicted_files(
    slow_mount: MountProcess, shared_api: Api, store: dict[str, object]
) -> None:
    store_id = str(store["id"])
    _conflict(slow_mount, shared_api, store_id)
    slow_mount.sync()
    root = slow_mount.mountpoint
    (root / "notes").mkdir()
    (root / "notes" / "new.md").write_text("not pushed yet\n")
    (root / "todo.md").write_text("also waiting\n")
    with pytest.raises(OSError) as refused:
        (root / "bad.md").write_bytes(b"\xff\xfe not utf-8")
    assert refused.value.errno == errno.EILSEQ
    slow_mount.expect_exit(1)  # /bad.md is not in the store at teardown

    code, text = memfs_on_a_terminal(slow_mount.env, "status", str(root / "notes"))
    assert code == 0, text
    assert "dirty=2 conflicts=1 refused=1" in text, text
    assert "    dirty: /notes/new.md\n" in text and "    dirty: /todo.md\n" in text, text
    assert (
        "    refused: /bad.md (content is not valid UTF-8; permanent, until its content changes)\n"
        in text
    ), text
    assert re.search(r"    conflict: /style\.md -> /\S+\n", text), text

    answer = json.loads(slow_mount.memfs("status", str(root)).stdout)  # a pipe: JSON
    [s] = answer["mounts"][0]["stores"]
    assert sorted(s["dirty_files"]) == ["/notes/new.md", "/todo.md"]
    assert s["refused_files"] == [
        {"path": "/bad.md", "why": "content is not valid UTF-8", **PERMANENT}
    ]


def test_a_long_listing_says_how_many_more(slow_mount: MountProcess) -> None:
    for i in range(25):
        (slow_mount.mountpoint / f"f{i:02d}.md").write_text(f"{i}\n")
    code, text = memfs_on_a_terminal(slow_mount.env, "status", str(slow_mount.mountpoint))
    assert code == 0
    assert text.count("    dirty: /f") == 20, text
    assert "    … and 5 more dirty files (see --json)\n" in text, text


def _session_env(url: str, runtime: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANTHROPIC_")}
    env.update(ANTHROPIC_BASE_URL=url, ANTHROPIC_API_KEY="local", XDG_RUNTIME_DIR=str(runtime))
    return env


def test_session_root_may_be_relative(
    tmp_path: Path, shared_server: ServerProcess, shared_api: Api
) -> None:
    store_id = shared_api.create_store("Relative Root")["id"]
    (tmp_path / "spec.json").write_text(
        json.dumps({"resources": [{"type": "memory_store", "memory_store_id": store_id}]})
    )
    (tmp_path / "memory").mkdir()
    runtime = tmp_path / "rt"
    runtime.mkdir()
    env = _session_env(shared_server.url, runtime)
    root = tmp_path / "memory"
    try:
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "memfs.cli",
                "session",
                "spec.json",
                "--root",
                "memory",
                "--daemon",
                "--cache-dir",
                "cache",
            ],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert out.returncode == 0, out.stderr
        assert f"-> {root}/relative-root [read_write]" in out.stderr, out.stderr
        assert is_mounted(root / "relative-root") and not is_mounted(root)
        assert os.listdir(root) == ["relative-root"]
        down = subprocess.run(
            [sys.executable, "-m", "memfs.cli", "unmount", "memory"],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert down.returncode == 0, down.stderr
        assert not is_mounted(root / "relative-root") and os.listdir(root) == []
    finally:
        lazy_unmount(root / "relative-root")


def _records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_daemon_log_lines_are_key_value_or_json(
    tmp_path: Path, shared_server: ServerProcess, shared_api: Api
) -> None:
    """A mount's life (start, writes, a conflict, a refused file, a failed pass against
    a dead server, stop), logged in both formats: every line splits into fields."""
    for fmt in ("text", "json"):
        store_id = shared_api.create_store(f"Logged {fmt}")["id"]
        proc = MountProcess(
            [
                "--log-format",
                fmt,
                "mount",
                store_id,
                str(tmp_path / f"mnt-{fmt}"),
                "--cache-dir",
                str(tmp_path / f"cache-{fmt}"),
                "--sync-interval",
                "3600",
            ],
            tmp_path / f"mnt-{fmt}",
            url=shared_server.url,
            log_path=tmp_path / f"{fmt}.log",
        )
        proc.start()
        try:
            _conflict(proc, shared_api, store_id)
            with pytest.raises(OSError):
                (proc.mountpoint / "bad name.md").write_bytes(b"\xff")
            proc.sync_held_back()  # exit 1: the store refused a file
            proc.expect_exit(1)  # the refused file is named at the stop
            assert proc.stop() == 1
        finally:
            proc.cleanup()
        if fmt == "text":
            lines = proc.log().splitlines()
            assert any("memory changed both locally and remotely" in x for x in lines)
            assert any('path="/bad name.md"' in x for x in lines), proc.log()
            for line in lines:
                assert LOG_LINE.fullmatch(line), line
        else:
            records = _records(proc.log_path)
            conflict = next(
                r
                for r in records
                if r["message"].startswith("memory changed both locally and remotely")
            )
            assert (conflict["memory_store_id"], conflict["path"]) == (store_id, "/style.md")
            assert conflict["level"] == "warning" and RFC3339.fullmatch(conflict["time"])
            refused = next(r for r in records if r.get("path") == "/bad name.md")
            assert "not valid UTF-8" in refused.get("why", refused["message"])
            mounted = next(r for r in records if r["message"] == "mounted memory")
            assert isinstance(mounted["memories"], int)
            for r in records:
                assert "=" not in r["message"], r


def test_a_daemon_mount_logs_json_to_its_cache_dir(
    tmp_path: Path, shared_server: ServerProcess, store: dict[str, object]
) -> None:
    """`--daemon` without --log-file logs to memfs.log in the cache directory (what
    docs/operations.md says), in the --log-format given."""
    mnt, cache = tmp_path / "mnt", tmp_path / "cache"
    mnt.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANTHROPIC_")}
    env["ANTHROPIC_BASE_URL"] = shared_server.url
    try:
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "memfs.cli",
                "mount",
                str(store["id"]),
                str(mnt),
                "--cache-dir",
                str(cache),
                "--daemon",
                "--log-format",
                "json",
            ],
            env=env,
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert out.returncode == 0, out.stderr
        assert f"logs: {cache / 'memfs.log'}" in out.stderr, out.stderr
        down = subprocess.run(
            [sys.executable, "-m", "memfs.cli", "unmount", str(mnt)],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert down.returncode == 0, down.stderr
    finally:
        lazy_unmount(mnt)
    records = _records(cache / "memfs.log")
    messages = [r["message"] for r in records]
    assert "mounted memory" in messages and "unmounted" in messages, messages


def _daemon_mount(env: dict[str, str], mnt: Path, *args: str) -> str:
    """`memfs ARGS --daemon` that mounts at `mnt`, then `memfs unmount`; the start's
    stderr."""
    cli = [sys.executable, "-m", "memfs.cli"]
    mnt.mkdir()
    try:
        out = subprocess.run(
            [*cli, *args, "--daemon"], env=env, capture_output=True, text=True, timeout=60
        )
        assert out.returncode == 0, out.stderr
        down = subprocess.run(
            [*cli, "unmount", str(mnt)], env=env, capture_output=True, text=True, timeout=120
        )
        assert down.returncode == 0, down.stderr
    finally:
        lazy_unmount(mnt)
    return out.stderr


def test_logs_and_caches_go_where_the_help_and_operations_md_say(
    tmp_path: Path, shared_server: ServerProcess, store: dict[str, object]
) -> None:
    """`--daemon` logs to memfs.log in --cache-dir, else in the cache root next to the
    stores' directories; `memfs mount --cache-dir DIR` keeps the store in DIR itself,
    `memfs session --cache-dir DIR` in DIR/STORE_ID: the --log-file help, the man page
    and docs/operations.md say so, and a real mount does it."""
    store_id = str(store["id"])
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "XDG_CACHE"))}
    env.update(ANTHROPIC_BASE_URL=shared_server.url, ANTHROPIC_API_KEY="local", HOME=str(home))
    a = tmp_path / "a"
    said = _daemon_mount(env, a, "mount", store_id, str(a))
    root = home / ".cache" / "memfs"
    assert f"logs: {root / 'memfs.log'}" in said, said
    assert (root / "memfs.log").is_file() and (root / store_id / "journal.sqlite").is_file()

    mine = tmp_path / "mine"
    b = tmp_path / "b"
    said = _daemon_mount(env, b, "mount", store_id, str(b), "--cache-dir", str(mine))
    assert f"logs: {mine / 'memfs.log'}" in said, said
    assert (mine / "memfs.log").is_file() and (mine / "journal.sqlite").is_file()

    spec = tmp_path / "spec.json"
    spec.write_text(
        json.dumps(
            {"resources": [{"type": "memory_store", "memory_store_id": store_id, "name": "s"}]}
        )
    )
    shared = tmp_path / "shared"
    c = tmp_path / "c"
    said = _daemon_mount(env, c, "session", str(spec), "--root", str(c), "--cache-dir", str(shared))
    assert f"logs: {shared / 'memfs.log'}" in said, said
    assert (shared / "memfs.log").is_file() and (shared / store_id / "journal.sqlite").is_file()

    def flat(text: str) -> str:
        return " ".join(text.split())

    help_text = flat(
        subprocess.run(
            [sys.executable, "-m", "memfs.cli", "mount", "--help"],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        ).stdout
    )
    assert "with --daemon, memfs.log in --cache-dir, default ~/.cache/memfs/memfs.log" in help_text
    ops = flat((REPO_ROOT / "docs" / "operations.md").read_text())
    assert "`memfs mount --cache-dir DIR` uses `DIR` itself as the store's cache directory" in ops
    assert (
        "`memfs session --cache-dir DIR` (and `memfs-worker --cache-dir DIR`) is a cache "
        "root that puts each store at `DIR/<store_id>`"
    ) in ops
    page = flat(
        subprocess.run(
            [sys.executable, "-m", "memfs.cli", "--print-manpage"],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        ).stdout
    )
    assert "~/.cache/memfs/memfs.log" in page


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _new_terminal_env(home: Path) -> dict[str, str]:
    """What a new login terminal has: no memfs on PATH, none of a test's variables."""
    home.mkdir(parents=True, exist_ok=True)
    return {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": str(home),
        "USER": "root",
        "LANG": "C.UTF-8",
        "XDG_RUNTIME_DIR": str(home / "run"),
    }


def _readme_usage_block() -> str:
    text = (REPO_ROOT / "README.md").read_text()
    section = text[text.index("## Using it") :]
    start = section.index("```sh\n") + len("```sh\n")
    return section[start : section.index("\n```", start)]


def test_the_readme_commands_run_in_a_new_terminal(tmp_path: Path) -> None:
    """The README's "Using it" block, run as pasted into a new terminal in the clone's
    directory after `scripts/install`: every memfs is `.venv/bin/memfs`, and the
    commands work in order. Only the port, /mnt/memory and `sudo` are replaced."""
    block = _readme_usage_block()
    for line in block.splitlines():
        code = line.split("#", 1)[0]
        assert not re.search(r"(^|[;&|(]|\$\(|\s)memfs\s", " " + code), line
    clone = tmp_path / "clone"
    clone.mkdir()
    (clone / ".venv").symlink_to(REPO_ROOT / ".venv")
    root = tmp_path / "mnt-memory"
    script = (
        block.replace("8765", str(_free_port()))
        .replace("/mnt/memory", str(root))
        .replace("sudo ", "")
    )
    env = _new_terminal_env(tmp_path / "home")
    (tmp_path / "home" / "run").mkdir()
    wrapped = "set -euo pipefail\ntrap 'kill $(jobs -p) 2>/dev/null || true' EXIT\n" + script
    try:
        out = subprocess.run(
            ["bash", "-c", wrapped], cwd=clone, env=env, capture_output=True, text=True, timeout=150
        )
        assert out.returncode == 0, out.stdout + out.stderr
        assert '"dirty": 0' in out.stdout, out.stdout  # `status` on a pipe: JSON
        assert "team-notes\nuser-preferences\n" in out.stdout, out.stdout  # the session
        prefs = tmp_path / "home" / "prefs"
        assert not is_mounted(prefs) and not is_mounted(root)
        exported = (clone / "backup" / "preferences.md").read_text()
        assert exported == "- prefers short answers\n"
    finally:
        for path in (tmp_path / "home" / "prefs", root):
            lazy_unmount(path)


def test_the_demo_hints_work_from_another_terminal(tmp_path: Path, daemons: DaemonWatch) -> None:
    daemons.watch_log(tmp_path / "demo" / "serve.log")  # the demo's server
    mnt = tmp_path / "demo-mount"
    env = {
        **os.environ,
        "MEMFS_DEMO_DIR": str(tmp_path / "demo"),
        "MEMFS_DEMO_PORT": str(_free_port()),
        "MEMFS_DEMO_MOUNT": str(mnt),
    }
    env.pop("ANTHROPIC_BASE_URL", None)
    demo = subprocess.Popen(
        ["bash", str(REPO_ROOT / "scripts" / "demo")],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    assert demo.stdout is not None and demo.stderr is not None
    try:
        hints = []
        for raw in demo.stdout:
            line = raw.decode()
            if line.startswith("    "):
                hints.append(line.strip())
            if line.startswith("memfs demo: stop with Ctrl-C"):
                break
        assert len(hints) == 3, hints
        # the mount goes live after the hints are printed
        eventually(lambda: is_mounted(mnt), "the demo's mount live", timeout=30)
        other = _new_terminal_env(tmp_path / "other-home")
        other["XDG_RUNTIME_DIR"] = os.environ.get("XDG_RUNTIME_DIR", "")
        if not other["XDG_RUNTIME_DIR"]:
            del other["XDG_RUNTIME_DIR"]  # the same control-socket directory as the demo
        for hint in hints:
            assert ".venv/bin/memfs" not in hint or f"{REPO_ROOT}/.venv/bin/memfs" in hint
            out = subprocess.run(
                ["bash", "-c", hint], cwd="/", env=other, capture_output=True, text=True, timeout=60
            )
            assert out.returncode == 0, (hint, out.stdout, out.stderr)
    finally:
        os.killpg(demo.pid, signal.SIGINT)
        try:
            demo.wait(timeout=60)
        finally:
            if demo.poll() is None:
                os.killpg(demo.pid, signal.SIGKILL)
                demo.wait()
            lazy_unmount(mnt)
    err = demo.stderr.read().decode()
    assert "importing" not in err and "Traceback" not in err, err
    assert not is_mounted(mnt)
