"""`memfs session`: several stores under one root, one real FUSE mount per store.

Each test starts real `memfs session` processes against a real `memfs serve`: mount
paths, access (a read-only store is a kernel `ro` mount), the root as an ordinary
directory, `memfs status` / `sync` / `unmount` of the whole session, the final flush at
SIGTERM, a session that is all or nothing, and every refusal before anything is
mounted, with its message and exit code.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from memfs.paths import marker_content
from memfs.server.sqlite import Database
from tests.support.api import Api
from tests.support.deadline import eventually
from tests.support.files import MARKER, store_contents
from tests.support.mount import (
    MountProcess,
    is_mounted,
    lazy_unmount,
    one_line,
    require_fuse,
    unmount_from_outside,
)
from tests.support.nobody import run_cli_as_nobody
from tests.support.recovery import recover_under_a_writer
from tests.support.refusals import refused
from tests.support.server import ServerProcess, seed_bulk, start_server
from tests.support.terminal import on_a_terminal

# A refusal that waits for new content (`status --json`, refused_files).
PERMANENT = {"transient": False, "next_retry": None}

pytestmark = pytest.mark.fuse

CREDENTIALS = {"ANTHROPIC_API_KEY": "anything"}


# ----------------------------------------------------------------------------- helpers
@pytest.fixture
def runtime_dir() -> Iterator[Path]:
    """A private control-socket directory (short: Unix socket paths are limited)."""
    path = Path(tempfile.mkdtemp(prefix="mfs-rt-", dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def base_env(url: str, runtime: Path, credentials: bool = True) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANTHROPIC_")}
    env.update(ANTHROPIC_BASE_URL=url, XDG_RUNTIME_DIR=str(runtime))
    if credentials:
        env.update(CREDENTIALS)
    return env


def cli(
    env: dict[str, str], *args: str, user: bool = False, timeout: float = 60.0
) -> subprocess.CompletedProcess[str]:
    """Run the memfs CLI (optionally as `nobody`), logs kept off stderr."""
    prefix = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"] if user else []
    cmd = [*prefix, sys.executable, "-m", "memfs.cli", "--log-level", "error", *args]
    return subprocess.run(
        cmd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=Path(__file__).resolve().parents[2],
    )


def write_spec(path: Path, resources: list[dict[str, Any]], *, session: bool = True) -> Path:
    """A session object as the Sessions API returns it, or a bare {"resources": [...]}."""
    body: dict[str, Any] = {"resources": resources}
    if session:
        body = {
            "id": "sesn_011CTestSession",
            "type": "session",
            "status": "idle",
            "agent": {"id": "agent_1", "type": "agent"},
            **body,
        }
    path.write_text(json.dumps(body))
    return path


def ms(store_id: str, access: str = "read_write", **extra: Any) -> dict[str, Any]:
    return {"type": "memory_store", "memory_store_id": store_id, "access": access, **extra}


def start_session(
    tmp_path: Path,
    url: str,
    runtime: Path,
    spec: Path,
    root: Path,
    *extra: str,
    name: str = "session",
) -> MountProcess:
    args = [
        "session",
        str(spec),
        "--root",
        str(root),
        "--cache-dir",
        str(tmp_path / f"{name}-cache"),
        *extra,
    ]
    proc = MountProcess(args, root, url=url, log_path=tmp_path / f"{name}.log")
    proc.env.update(CREDENTIALS, XDG_RUNTIME_DIR=str(runtime))
    return proc.start()


def assert_nothing_mounted(root: Path, before: list[str]) -> None:
    assert not is_mounted(root)
    assert sorted(os.listdir(root)) == before
    with open("/proc/self/mounts") as f:
        assert not [line for line in f if line.split()[1].startswith(f"{root}/")]


def mount_options(path: Path) -> list[str]:
    """The mount table's options of the mount at `path` (one line, or a failure)."""
    with open("/proc/self/mounts") as f:
        [line] = [line for line in f if line.split()[1] == str(path)]
    return line.split()[3].split(",")


def parent_pid(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return int(next(line for line in f if line.startswith("PPid:")).split()[1])


# --------------------------------------------------------------- a three-store session
@dataclass
class Three:
    proc: MountProcess
    root: Path
    prefs: str  # "User Preferences", read_write, name from the spec, slugged
    team: str  # "Team NOTES 2026", read_only, name fetched from the store, slugged
    scratch: str  # "Scratch Pad", read_write, explicit mount_path
    runtime: Path

    def memfs(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return self.proc.memfs(*args, check=check)


def start_three(tmp_path: Path, url: str, api: Api, runtime: Path, *extra: str) -> Three:
    require_fuse()
    prefs = api.create_store("User Preferences")["id"]
    team = api.create_store("Team NOTES 2026")["id"]
    scratch = api.create_store("Scratch Pad")["id"]
    api.create_memory(prefs, "/style.md", "be concise\n")
    api.create_memory(prefs, "/projects/memfs.md", "a FUSE filesystem\n")
    api.create_memory(team, "/onboarding.md", "welcome\n")
    api.create_memory(team, "/deep/a/b.md", "deep\n")
    api.create_memory(scratch, "/todo.md", "- test sessions\n")
    root = tmp_path / "memory"
    root.mkdir()
    spec = write_spec(
        tmp_path / "spec.json",
        [
            {
                "id": "sesrsc_01",
                **ms(
                    prefs, name="User Preferences", instructions="the user's standing preferences"
                ),
            },
            {"type": "file", "id": "sesrsc_02", "file_id": "file_011", "mount_path": "/mnt/x"},
            {"id": "sesrsc_03", **ms(team, "read_only")},
            {"id": "sesrsc_04", **ms(scratch, mount_path=f"{root}/scratch")},
        ],
    )
    proc = start_session(tmp_path, url, runtime, spec, root, *extra)
    return Three(proc, root, prefs, team, scratch, runtime)


@pytest.fixture
def three(
    tmp_path: Path, shared_server: ServerProcess, shared_api: Api, runtime_dir: Path
) -> Iterator[Three]:
    """A fresh three-store session, for tests that change it and then look before a
    pass runs (no push soon)."""
    session = start_three(
        tmp_path,
        shared_server.url,
        shared_api,
        runtime_dir,
        "--no-push-soon",
        "--no-watch",
        "--probe-budget",
        "0",
    )
    try:
        yield session
    finally:
        session.proc.cleanup()


@pytest.fixture(scope="module")
def three_shared(
    tmp_path_factory: pytest.TempPathFactory, shared_server: ServerProcess
) -> Iterator[Three]:
    """One three-store session for the tests that only look and get refused."""
    tmp_path = tmp_path_factory.mktemp("three")
    runtime = Path(tempfile.mkdtemp(prefix="mfs-rt-", dir="/tmp"))
    with Api(shared_server.url) as api:
        session = start_three(tmp_path, shared_server.url, api, runtime)
    try:
        yield session
    finally:
        session.proc.cleanup()
        shutil.rmtree(runtime, ignore_errors=True)


def test_layout_mount_paths_and_ignored_resources(three_shared: Three) -> None:
    three = three_shared
    root = three.root
    assert sorted(os.listdir(root)) == ["scratch", "team-notes-2026", "user-preferences"]
    for dir_name, store_id in (
        ("user-preferences", three.prefs),
        ("team-notes-2026", three.team),
        ("scratch", three.scratch),
    ):
        assert (root / dir_name / MARKER).read_bytes() == marker_content(store_id)
    assert (root / "user-preferences/style.md").read_text() == "be concise\n"
    assert (root / "user-preferences/projects/memfs.md").read_text() == "a FUSE filesystem\n"
    assert (root / "team-notes-2026/deep/a/b.md").read_text() == "deep\n"
    assert (root / "scratch/todo.md").read_text() == "- test sessions\n"
    # the root is an ordinary directory; each store is a mount of its own, the read-only
    # one `ro`, and the kernel checks every mode (`default_permissions`)
    assert not is_mounted(root)
    for dir_name in ("user-preferences", "team-notes-2026", "scratch"):
        options = mount_options(root / dir_name)
        assert "default_permissions" in options, options
        assert ("ro" in options) == (dir_name == "team-notes-2026"), options
    assert os.stat(root / "team-notes-2026").st_mode & 0o222 == 0
    assert os.stat(root / "user-preferences").st_mode & 0o200
    log = three.proc.log()
    assert re.search(
        r"INFO memfs\.session: ignoring a session resource that is not a "
        r"memory store type=file id=sesrsc_02",
        log,
    ), log


def test_the_root_is_an_ordinary_directory_and_each_store_a_mount(
    three_shared: Three, tmp_path: Path
) -> None:
    root = three_shared.root
    prefs = root / "user-preferences"
    outside = tmp_path / "outside.md"
    outside.write_text("outside\n")
    # memfs does not mount the root: what is written there is the host's business
    (root / "host-file").write_text("not a memory\n")
    os.unlink(root / "host-file")
    # between stores, and in or out of one, the kernel answers before memfs is asked
    refused(errno.EXDEV, os.rename, prefs / "style.md", root / "scratch" / "style.md")
    refused(errno.EXDEV, os.rename, prefs / "style.md", root / "style.md")
    refused(errno.EXDEV, os.rename, prefs, root / "scratch" / "moved")
    refused(errno.EXDEV, os.rename, outside, prefs / "outside.md")
    refused(errno.EXDEV, os.link, prefs / "style.md", root / "hard.md")
    # a store's directory is a mount point: it can't be removed or moved away
    refused(errno.EBUSY, os.rmdir, root / "team-notes-2026")
    refused(errno.EBUSY, os.rmdir, root / "scratch")
    refused(errno.EBUSY, os.rename, prefs, root / "renamed")
    refused(errno.EISDIR, os.unlink, prefs)
    # a shell sees the same
    result = subprocess.run(
        ["rm", "-rf", str(root / "team-notes-2026")], capture_output=True, text=True, timeout=10
    )
    assert result.returncode != 0 and "Read-only file system" in result.stderr
    assert sorted(os.listdir(root)) == ["scratch", "team-notes-2026", "user-preferences"]


def test_read_only_store_refuses_every_mutation_even_for_root(
    three_shared: Three, shared_api: Api
) -> None:
    three = three_shared
    assert os.getuid() == 0
    team = three.root / "team-notes-2026"
    a = team / "deep/a/b.md"
    before = store_contents(shared_api, three.team)
    for flags in (os.O_WRONLY, os.O_RDWR, os.O_RDONLY | os.O_TRUNC, os.O_WRONLY | os.O_APPEND):
        refused(errno.EROFS, os.open, a, flags)
    refused(errno.EROFS, os.open, team / "new.md", os.O_CREAT | os.O_WRONLY, 0o644)
    refused(errno.EROFS, os.mkdir, team / "dir")
    refused(errno.EROFS, os.unlink, team / "onboarding.md")
    refused(errno.EROFS, os.rmdir, team / "deep/a")
    refused(errno.EROFS, os.rename, a, team / "deep/a/c.md")
    refused(errno.EROFS, os.rename, team / "deep", team / "shallow")
    refused(errno.EXDEV, os.rename, a, three.root / "scratch/stolen.md")
    refused(errno.EXDEV, os.rename, three.root / "scratch/todo.md", team / "todo.md")
    refused(errno.EROFS, os.chmod, a, 0o600)
    refused(errno.EROFS, os.utime, a, None)
    refused(errno.EROFS, os.truncate, a, 0)
    refused(errno.EROFS, os.link, a, team / "hard.md")
    refused(errno.EROFS, os.symlink, "b.md", team / "sym")
    refused(errno.EROFS, os.mknod, team / "node.md", stat.S_IFREG | 0o644)
    refused(errno.EROFS, os.setxattr, a, "user.x", b"1")
    result = subprocess.run(
        ["sed", "-i", "s/deep/shallow/", str(a)], capture_output=True, text=True, timeout=10
    )
    assert result.returncode != 0
    assert a.read_text() == "deep\n"
    three.memfs("sync", str(three.root))
    assert store_contents(shared_api, three.team) == before


@pytest.mark.pyfuse3_builds
def test_a_read_only_store_answers_warm_reads_with_no_request(three_shared: Three) -> None:
    """Its own `ro` mount: on the patched pyfuse3 the kernel keeps pages, listings and
    attributes and sends not even an OPEN, so a warm `grep -r` costs the daemon nothing."""
    team = three_shared.root / "team-notes-2026"

    def mount() -> dict[str, Any]:
        [found] = json.loads(three_shared.memfs("status", str(team), "--json").stdout)["mounts"]
        assert found["mountpoint"] == str(team)
        return found

    def grep() -> None:
        found = subprocess.run(
            ["grep", "-rlx", "-e", "welcome", "-e", "deep", str(team)],
            capture_output=True,
            text=True,
            check=True,
        )
        assert sorted(found.stdout.split()) == [
            str(team / "deep/a/b.md"),
            str(team / "onboarding.md"),
        ]

    grep()  # warm
    before = mount()
    grep()
    after = mount()
    spent = {
        k: n - before["fuse_requests"].get(k, 0)
        for k, n in after["fuse_requests"].items()
        if n != before["fuse_requests"].get(k, 0)
    }
    if after["pyfuse3"]["zero_message_opens_used"]:
        assert spent == {}, spent
    else:  # a stock pyfuse3: one OPEN (and FLUSH, RELEASE) per file read
        assert spent.get("open", 0) >= 2, spent


@pytest.mark.pyfuse3_builds
def test_a_session_s_writable_stores_open_with_no_message_and_show_no_xattrs(
    tmp_path: Path, shared_server: ServerProcess, shared_api: Api, runtime_dir: Path
) -> None:
    """Each store is a single-store mount of its own, with zero-message opens (the
    default) and, in a session, no xattrs unless --xattrs; --open-requests restores
    the requests."""
    require_fuse()
    notes = shared_api.create_store("Fast Notes")["id"]
    for extra, opens_sent, xattrs in (
        ((), False, False),
        (("--open-requests", "--xattrs"), True, True),
    ):
        root = tmp_path / f"memory{len(extra)}"
        root.mkdir()
        spec = write_spec(tmp_path / f"spec{len(extra)}.json", [ms(notes)])
        proc = start_session(
            tmp_path, shared_server.url, runtime_dir, spec, root, *extra, name=f"s{len(extra)}"
        )
        try:
            f = root / "fast-notes" / "n.md"
            f.write_text("fast\n")
            assert f.read_text() == "fast\n"

            def opens(proc: MountProcess = proc, root: Path = root) -> tuple[bool, int, bool]:
                [mount] = json.loads(proc.memfs("status", str(root), "--json").stdout)["mounts"]
                return (
                    mount["pyfuse3"]["zero_message_opens_used"],
                    mount["fuse_requests"].get("open", 0),
                    mount["xattrs"],
                )

            used, before, shown = opens()
            assert shown is xattrs
            if not xattrs:
                with pytest.raises(OSError) as info:
                    os.getxattr(f, "user.memfs.state")
                assert info.value.errno == errno.EOPNOTSUPP
            for _ in range(5):
                assert f.read_text() == "fast\n"
            _, after, _ = opens()
            if used:  # the patched pyfuse3: not one OPEN more
                assert not opens_sent and after == before
            else:  # --open-requests, or a stock build: one OPEN a read
                assert after >= before + 5
                if not opens_sent:
                    assert "zero-message opens are not available" in proc.log()
            proc.sync()
            assert store_contents(shared_api, notes) == {"/n.md": "fast\n"}
        finally:
            proc.cleanup()


def test_writable_stores_behave_normally_and_sync_covers_every_store(
    three: Three, shared_api: Api
) -> None:
    prefs = three.root / "user-preferences"
    scratch = three.root / "scratch"
    (prefs / "new.md").write_text("new preference\n")
    subprocess.run(["sed", "-i", "s/concise/brief/", str(prefs / "style.md")], check=True)
    (prefs / "notes").mkdir()
    os.rename(prefs / "projects/memfs.md", prefs / "notes/memfs.md")
    os.unlink(scratch / "todo.md")
    (scratch / "done.md").write_text("- sessions tested\n")
    refused(errno.EXDEV, os.rename, prefs / "new.md", scratch / "new.md")
    # a change in the store arrives at the next pass too
    shared_api.create_memory(three.team, "/remote.md", "from elsewhere\n")
    result = three.memfs("sync", str(three.root))
    lines = result.stdout.strip().splitlines()
    assert sorted(line.split(":")[0] for line in lines) == sorted(
        [three.prefs, three.team, three.scratch]
    )
    assert all(": ok " in line for line in lines), lines
    assert store_contents(shared_api, three.prefs) == {
        "/new.md": "new preference\n",
        "/style.md": "be brief\n",
        "/notes/memfs.md": "a FUSE filesystem\n",
    }
    assert store_contents(shared_api, three.scratch) == {"/done.md": "- sessions tested\n"}
    assert (three.root / "team-notes-2026/remote.md").read_text() == "from elsewhere\n"


def _status_json(three: Three, *args: str) -> dict[str, Any]:
    result = three.memfs("status", *args, "--json")
    data: dict[str, Any] = json.loads(result.stdout)
    return data


def _status_on_a_terminal(env: dict[str, str], path: str) -> str:
    """`memfs status PATH` with stdout on a pseudo-terminal (the human table)."""
    code, out, err = on_a_terminal(
        [sys.executable, "-m", "memfs.cli", "status", path], env, timeout=30
    )
    assert code == 0, err
    return out


def test_status_shows_every_store_in_json_and_on_a_terminal(three: Three, shared_api: Api) -> None:
    root = three.root
    prefs, scratch = root / "user-preferences", root / "scratch"
    # a conflict: the same file changed on both sides; the store wins, the copy is kept
    (prefs / "style.md").write_text("local edit\n")
    style = next(m for m in shared_api.list_memories(three.prefs) if m["path"] == "/style.md")
    shared_api.update_memory(three.prefs, style["id"], content="remote edit\n")
    three.memfs("sync", str(root))  # also restarts every store's interval timer
    assert (prefs / "style.md").read_text() == "remote edit\n"
    # a refused file (not UTF-8), a dirty file and a pending delete, before the next pass
    with pytest.raises(OSError) as info:
        with open(scratch / "bad.md", "wb") as f:
            f.write(b"\xff\xfe not utf-8")
    assert info.value.errno == errno.EILSEQ
    three.proc.expect_exit(1)  # /bad.md is not in the store: named at the stop
    (scratch / "new.md").write_text("not pushed yet\n")
    os.unlink(prefs / "projects/memfs.md")
    now = time.time()

    data = _status_json(three, str(root))
    # no PATH: every live mount, the session's among them
    every = {m["mountpoint"] for m in _status_json(three)["mounts"]}
    assert every == {m["mountpoint"] for m in data["mounts"]}
    assert len(data["mounts"]) == 3  # one mount, and one daemon of the session, per store
    stores = {}
    for mount in data["mounts"]:
        [store] = mount["stores"]
        assert mount["ok"] and mount["mountpoint"] == store["mount_path"]
        assert parent_pid(mount["pid"]) == three.proc.pid
        stores[store["memory_store_id"]] = store
    assert set(stores) == {three.prefs, three.team, three.scratch}
    [alone] = _status_json(three, str(root / "scratch" / "todo.md"))["mounts"]
    assert alone["mountpoint"] == f"{root}/scratch"  # a path in a store: that store's mount
    p, t, s = stores[three.prefs], stores[three.team], stores[three.scratch]
    assert (p["mount_path"], p["access"]) == (f"{root}/user-preferences", "read_write")
    assert (t["mount_path"], t["access"]) == (f"{root}/team-notes-2026", "read_only")
    assert (s["mount_path"], s["access"]) == (f"{root}/scratch", "read_write")
    assert (p["memories"], p["bytes"]) == (1, len("remote edit\n"))
    assert (t["memories"], t["bytes"]) == (2, len("welcome\n") + len("deep\n"))
    assert s["memories"] == 3
    # bad.md holds nothing: its one write was refused as it came (EILSEQ at the write)
    assert s["bytes"] == len("- test sessions\n") + len("not pushed yet\n")
    assert (p["dirty"], t["dirty"], s["dirty"]) == (0, 0, 1)
    assert s["dirty_files"] == ["/new.md"]
    assert p["conflicts"] == 1 and t["conflicts"] == 0 and s["conflicts"] == 0
    [copy] = p["conflict_copies"]
    assert copy["path"] == "/style.md"
    assert Path(copy["copy"]).read_text() == "local edit\n"
    assert (s["refused"], s["refused_files"]) == (
        1,
        [{"path": "/bad.md", "why": "content is not valid UTF-8", **PERMANENT}],
    )
    assert (p["pending_deletes"], p["pending_delete_paths"]) == (1, ["/projects/memfs.md"])
    assert t["pending_deletes"] == 0 and s["pending_deletes"] == 0
    for store in (p, t, s):
        lp = store["last_pass"]
        assert lp["outcome"] == "ok" and lp["error"] is None
        at = datetime.fromisoformat(lp["at"]).timestamp()  # RFC 3339
        assert now - 30 < at <= now + 0.001 and 0 <= lp["duration_s"] < 10
        assert now < datetime.fromisoformat(store["next_pass_at"]).timestamp() <= now + 16
        assert store["learns_by"] == "interval"  # --no-watch --probe-budget 0
        assert now - 30 < datetime.fromisoformat(store["last_heard_at"]).timestamp() <= now + 1

    text = _status_on_a_terminal(three.proc.env, str(root))
    assert not text.lstrip().startswith("{"), text
    for mount in data["mounts"]:
        assert f"{mount['mountpoint']} (pid {mount['pid']})" in text
    assert re.search(
        rf"{re.escape(str(root))}/user-preferences  {three.prefs}  read_write"
        r"  \(User Preferences\)",
        text,
    ), text
    assert re.search(rf"{re.escape(str(root))}/team-notes-2026  {three.team}  read_only", text), (
        text
    )
    assert re.search(rf"{re.escape(str(root))}/scratch  {three.scratch}  read_write", text)
    assert (
        f"memories=3 bytes={s['bytes']} dirty=1 conflicts=0 refused=1 pending_deletes=0"
    ) in text
    assert "memories=1 bytes=12 dirty=0 conflicts=1 refused=0 pending_deletes=1" in text
    assert re.search(
        r"last pass: \d\d:\d\d:\d\d ok [0-9.]+s; next pass: \d\d:\d\d:\d\d "
        r"\(in \d+s\)\n    learns of changes by: interval; "
        r"last heard from the store: \d\d:\d\d:\d\d \(\d+s ago\)",
        text,
    ), text
    assert f"conflict: /style.md -> {copy['copy']}" in text
    assert (
        "refused: /bad.md (content is not valid UTF-8; permanent, until its content changes)"
        in text
    )
    assert "pending delete: /projects/memfs.md" in text

    gone = three.memfs("status", str(three.root.parent / "elsewhere"), check=False)
    assert gone.returncode == 1
    assert f"no live memfs mount at {three.root.parent / 'elsewhere'}" in gone.stderr


def test_sigterm_final_sync_then_unmount(three: Three, shared_api: Api) -> None:
    (three.root / "user-preferences/late.md").write_text("written just before stop\n")
    (three.root / "scratch/late.md").write_text("and here\n")
    os.unlink(three.root / "scratch/todo.md")  # the final sync waives any delete wait
    assert three.proc.stop(timeout=45) == 0
    assert not is_mounted(three.root)
    assert os.listdir(three.root) == []  # the store directories are gone
    assert store_contents(shared_api, three.prefs)["/late.md"] == "written just before stop\n"
    assert store_contents(shared_api, three.scratch) == {"/late.md": "and here\n"}
    assert list(three.runtime.glob("memfs/*")) == []  # the control socket is gone
    log = three.proc.log()
    assert "stopping on signal=SIGTERM" in log and "unmounted mountpoint=" in log
    assert three.memfs("status", "--json").stdout.strip() == json.dumps({"mounts": []}, indent=2)


def test_unmount_command_final_sync_then_exit_zero(three: Three, shared_api: Api) -> None:
    (three.root / "scratch/late.md").write_text("via memfs unmount\n")
    t0 = time.monotonic()
    result = three.memfs("unmount", str(three.root / "scratch"), check=False)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    assert time.monotonic() - t0 < 10
    assert three.proc.wait(timeout=10) == 0
    assert not is_mounted(three.root)
    assert os.listdir(three.root) == []
    assert store_contents(shared_api, three.scratch)["/late.md"] == "via memfs unmount\n"
    again = three.memfs("unmount", str(three.root), check=False)
    assert again.returncode == 1 and "no live memfs mount at" in again.stderr


# ------------------------------------------------------------------ lifecycle failures
def test_final_flush_that_cannot_push_exits_non_zero_and_a_restart_pushes(
    tmp_path: Path, server: ServerProcess, api: Api, runtime_dir: Path
) -> None:
    require_fuse()
    notes = api.create_store("Notes")["id"]
    ref = api.create_store("Reference")["id"]
    api.create_memory(notes, "/a.md", "a\n")
    root = tmp_path / "memory"
    root.mkdir()
    spec = write_spec(tmp_path / "spec.json", [ms(notes), ms(ref, "read_only")], session=False)
    proc = start_session(tmp_path, server.url, runtime_dir, spec, root, "--flush-timeout", "2")
    try:
        (root / "notes/unpushed.md").write_text("keep me\n")
        (root / "notes/a.md").write_text("a, edited\n")
        server.stop()
        t0 = time.monotonic()
        proc.expect_exit(1)  # unpushed files
        code = proc.stop(timeout=30)
        assert code == 1
        assert time.monotonic() - t0 < 10  # the flush is bounded by --flush-timeout
        assert proc.proc is not None and proc.proc.stderr is not None
        stderr = proc.proc.stderr.read().decode()
        assert re.search(
            rf"memfs: 2 changed files of {notes} could not be pushed; they "
            r"stay in the journal for the next start: (/a\.md, /unpushed\.md|"
            r"/unpushed\.md, /a\.md)",
            stderr,
        ), stderr
        assert ref not in stderr  # a read-only store has nothing to push
        log = proc.log()
        assert re.search(
            rf"WARNING memfs\.daemon: memory flush left changed files "
            rf"un-pushed; they stay in the journal for the next start "
            rf"memory_store_id={notes} files=2 paths=",
            log,
        ), log
        assert not is_mounted(root) and os.listdir(root) == []
    finally:
        proc.cleanup()
    server.start()
    again = start_session(
        tmp_path, server.url, runtime_dir, spec, root, "--flush-timeout", "2", name="session"
    )
    try:
        # the journal is pushed during start-up, before the mount goes live
        assert store_contents(api, notes) == {"/a.md": "a, edited\n", "/unpushed.md": "keep me\n"}
        assert (root / "notes/unpushed.md").read_text() == "keep me\n"
        assert again.stop() == 0
    finally:
        again.cleanup()


def test_a_killed_session_is_cleared_and_its_journal_pushed_at_the_next_start(
    tmp_path: Path, shared_server: ServerProcess, shared_api: Api, runtime_dir: Path
) -> None:
    require_fuse()
    store_id = shared_api.create_store("Crash Test")["id"]
    root = tmp_path / "memory"
    root.mkdir()
    spec = write_spec(tmp_path / "spec.json", [ms(store_id)])
    proc = start_session(tmp_path, shared_server.url, runtime_dir, spec, root)
    try:
        (root / "crash-test/survivor.md").write_text("outlives SIGKILL\n")
        store_pid = next(
            m["pid"] for m in json.loads(proc.memfs("status", "--json").stdout)["mounts"]
        )
        proc.kill()  # its store daemons die with it (PR_SET_PDEATHSIG)
        eventually(
            lambda: not os.path.exists(f"/proc/{store_pid}"), "the store daemon gone", timeout=10
        )
        assert is_mounted(root / "crash-test")  # a dead mount (ENOTCONN), never a bare dir
        refused(errno.ENOTCONN, os.listdir, root / "crash-test")
        dead = proc.memfs("status", str(root), check=False)  # the session's root explains it
        assert dead.returncode == 1, dead.stderr
        assert f"memfs: the mount at {root}/crash-test is dead" in dead.stderr, dead.stderr
        assert f"memfs session {spec} --root {root}" in dead.stderr, dead.stderr
    finally:
        proc.kill()
    again = start_session(tmp_path, shared_server.url, runtime_dir, spec, root)
    try:
        assert store_contents(shared_api, store_id) == {"/survivor.md": "outlives SIGKILL\n"}
        (root / "crash-test/after.md").write_text("pushed at SIGINT\n")
        assert again.proc is not None
        again.proc.send_signal(signal.SIGINT)  # Ctrl-C ends a session like SIGTERM
        assert again.wait(timeout=45) == 0
        assert "stopping on signal=SIGINT" in again.log()
        assert store_contents(shared_api, store_id)["/after.md"] == "pushed at SIGINT\n"
        assert not is_mounted(root) and os.listdir(root) == []
    finally:
        again.cleanup()
        proc.cleanup()


def test_recovering_a_killed_session_never_exposes_a_bare_store_directory(
    tmp_path: Path, shared_server: ServerProcess, shared_api: Api, runtime_dir: Path
) -> None:
    """Issue 35.1 for a session: the printed command mounts each store over its dead
    mount; a writer that keeps going sees ENOTCONN, then the store, never a plain
    directory."""
    require_fuse()
    store_id = shared_api.create_store("Window")["id"]
    root = tmp_path / "memory"
    root.mkdir()
    spec = write_spec(tmp_path / "spec.json", [ms(store_id)])
    proc = start_session(tmp_path, shared_server.url, runtime_dir, spec, root)
    store_dir = root / "window"
    try:
        (store_dir / "log.md").write_text("before\n")
        proc.sync()
        store_pid = next(
            m["pid"] for m in json.loads(proc.memfs("status", "--json").stdout)["mounts"]
        )
        proc.kill()  # its store daemons die with it (PR_SET_PDEATHSIG)
        eventually(
            lambda: not os.path.exists(f"/proc/{store_pid}"), "the store daemon gone", timeout=10
        )

        def status() -> dict[str, Any]:
            answer: dict[str, Any] = json.loads(
                proc.memfs("status", str(store_dir), check=False).stdout
            )
            return answer

        writer, recovered = recover_under_a_writer(store_dir, status, proc.env)
        assert recovered.returncode == 0, recovered.stderr
        assert writer.errors["ENOTCONN"] > 0 and writer.acked, (writer.errors, writer.acked)
        assert set(writer.errors) == {"ENOTCONN"}, writer.errors
        proc.memfs("sync", str(root))
        assert store_contents(shared_api, store_id) == {
            "/log.md": "before\n" + "".join(writer.acked)
        }
        proc.memfs("unmount", str(root))
        assert not is_mounted(store_dir)
        assert os.listdir(root) == []  # the store's directory went, with nothing in it
    finally:
        proc.cleanup()
        for _ in range(4):
            lazy_unmount(store_dir)


def test_an_outside_fusermount_unmount_still_runs_the_final_sync(
    tmp_path: Path, shared_server: ServerProcess, shared_api: Api, runtime_dir: Path
) -> None:
    require_fuse()
    store_id = shared_api.create_store("Outside")["id"]
    root = tmp_path / "memory"
    root.mkdir()
    spec = write_spec(tmp_path / "spec.json", [ms(store_id)])
    proc = start_session(tmp_path, shared_server.url, runtime_dir, spec, root)
    try:
        (root / "outside/late.md").write_text("pushed after fusermount3 -u\n")
        done = unmount_from_outside("fusermount3", "-u", str(root / "outside"))
        assert done.returncode == 0, done.stderr
        assert proc.wait(timeout=45) == 0
        assert "the mount was unmounted from outside (umount or fusermount3 -u)" in proc.log()
        assert store_contents(shared_api, store_id) == {"/late.md": "pushed after fusermount3 -u\n"}
        assert not is_mounted(root) and os.listdir(root) == []
    finally:
        proc.cleanup()


def test_a_store_failing_mid_start_fails_the_session_and_nothing_stays_mounted(
    tmp_path: Path, runtime_dir: Path
) -> None:
    require_fuse()
    db_path = tmp_path / "faulty.db"
    db = Database.open(db_path)
    good = db.create_store("Good", "", {})["id"]
    bad = db.create_store("Bad", "", {})["id"]
    db.close()
    # every listing of `bad` fails (transient 5xx, retried, then given up: exit 3, as for
    # an unreachable store); the store
    # itself can be looked up, so the spec checks pass and the daemon starts
    server = start_server(db_path)
    server.stop()
    server.extra_args = ["--faults", f"error=1,paths={bad}/memories"]
    server.start()
    try:
        root = tmp_path / "memory"
        root.mkdir()
        spec = write_spec(tmp_path / "spec.json", [ms(good), ms(bad)])
        result = cli(
            base_env(server.url, runtime_dir),
            "session",
            str(spec),
            "--root",
            str(root),
            "--cache-dir",
            str(tmp_path / "cache"),
        )
        assert result.returncode == 3, result.stderr  # the store failed: "unreachable"
        lines = result.stderr.strip().splitlines()
        assert lines[-1].startswith(
            f"memfs: failed to download memory store memory_store_id={bad}: "
        ), lines
        # which store, and that the other is stopped: never half a session
        assert lines[-2] == (
            f"memfs: memory store {bad} at {root}/bad did not start; the session's other "
            "store is stopped"
        ), lines
        assert_nothing_mounted(root, [])
        # the cache directory of the good store is not left locked (the bad store may
        # fail before the good one's daemon has made it)
        (tmp_path / "cache" / good).mkdir(parents=True, exist_ok=True)
        with open(tmp_path / "cache" / good / "lock", "w") as f:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    finally:
        server.stop()


def test_a_store_whose_cache_is_locked_fails_the_session(
    tmp_path: Path, shared_server: ServerProcess, shared_api: Api, runtime_dir: Path
) -> None:
    require_fuse()
    first = shared_api.create_store("First")["id"]
    second = shared_api.create_store("Second")["id"]
    root = tmp_path / "memory"
    root.mkdir()
    spec = write_spec(tmp_path / "spec.json", [ms(first), ms(second)])
    cache = tmp_path / "cache"
    (cache / second).mkdir(parents=True)
    with open(cache / second / "lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)  # "another daemon" holds it
        result = cli(
            base_env(shared_server.url, runtime_dir),
            "session",
            str(spec),
            "--root",
            str(root),
            "--cache-dir",
            str(cache),
        )
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        f"memfs: cache directory {cache / second} is in use by another memfs daemon; "
        "give each mount its own --cache-dir"
    )
    assert_nothing_mounted(root, [])


# ------------------------------------------------------------ refusals before mounting
Case = tuple[dict[str, str], list[str], int, str]  # env, CLI args, exit code, line regex


def expect_refusals(cases: list[Case], *, user: bool = False) -> None:
    """Run refused starts as real processes, side by side; each must fail with exactly
    its one line and exit code."""
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda c: cli(c[0], *c[1], user=user), cases))
    for (_, args, code, pattern), result in zip(cases, results, strict=True):
        one_line(result, code, pattern, context=" ".join(args))


def _must_not_mount(configs: Any, *, daemonize: bool) -> int:
    raise AssertionError(f"a refused session went on to mount {configs[0].mountpoint}")


@pytest.fixture
def expect_refusals_in_process(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> Callable[[list[Case]], None]:
    """The same checks through `memfs.cli.commands.session` in this process: the parser, the
    command and every check are the real ones, only the interpreter start-up (about a
    second each on a busy host) is saved. Mounting is made impossible."""
    from memfs.cli import commands
    from memfs.cli import main as memfs_cli
    from memfs.mount import launch

    # `commands` imports `launch_session` from memfs.mount.launch when it runs.
    monkeypatch.setattr(launch, "launch_session", _must_not_mount)

    def run(cases: list[Case]) -> None:
        for env, args, code, pattern in cases:
            with monkeypatch.context() as m:
                for key in [k for k in os.environ if k.startswith("ANTHROPIC_")]:
                    m.delenv(key)
                for key, value in env.items():
                    if key.startswith("ANTHROPIC_"):
                        m.setenv(key, value)
                parsed = memfs_cli.build_parser().parse_args(args)
                got = commands.session(parsed)
            err = capsys.readouterr().err
            one_line(
                subprocess.CompletedProcess(args, got, "", err),
                code,
                pattern,
                context=" ".join(args),
            )

    return run


@pytest.fixture
def refusal_env(shared_server: ServerProcess, runtime_dir: Path) -> dict[str, str]:
    return base_env(shared_server.url, runtime_dir)


def test_spec_problems_are_refused(
    tmp_path: Path,
    refusal_env: dict[str, str],
    shared_api: Api,
    expect_refusals_in_process: Callable[[list[Case]], None],
) -> None:
    root = tmp_path / "memory"
    root.mkdir()
    twice = shared_api.create_store("Twice")["id"]
    cases: list[Case] = []

    def case(name: str, body: Any, code: int, message: str, *extra: str) -> None:
        spec = tmp_path / f"{name}.json"
        if body is not None:
            spec.write_text(body if isinstance(body, str) else json.dumps(body))
        cases.append(
            (
                refusal_env,
                ["session", str(spec), "--root", str(root), *extra],
                code,
                re.escape(f"memfs: {message}"),
            )
        )

    case(
        "nine",
        {"resources": [ms(f"memstore_{i:02d}") for i in range(9)]},
        2,
        "a session can attach at most 8 memory stores; this one attaches 9",
    )
    case(
        "twice",
        {"resources": [ms(twice), ms(twice, "read_only")]},
        2,
        f"memory store {twice} is attached twice",
    )
    case(
        "missing",
        None,
        2,
        f"cannot read the session spec {tmp_path / 'missing.json'}: No such file or directory",
    )
    case(
        "shape",
        {"id": "sesn_1", "type": "session"},
        2,
        'the session spec must be a JSON object with a "resources" list',
    )
    case("list", [ms(twice)], 2, 'the session spec must be a JSON object with a "resources" list')
    case("item", {"resources": [1]}, 2, "resource #0 of the session spec is not an object")
    case("noid", {"resources": [{"type": "memory_store"}]}, 2, "resource #0 has no memory_store_id")
    case(
        "access",
        {"resources": [ms("memstore_x", "write")]},
        2,
        "memory store memstore_x has an unknown access 'write' (read_write or read_only)",
    )
    case(
        "mpath",
        {"resources": [ms("memstore_x", mount_path=7)]},
        2,
        "memory store memstore_x has a mount_path that is not a string",
    )
    case(
        "none",
        {"type": "session", "resources": [{"type": "file", "file_id": "f"}]},
        2,
        "the session attaches no memory stores; nothing to mount",
    )
    case(
        "interval",
        {"resources": [ms(twice)]},
        2,
        "the sync interval must be at least 5 seconds",
        "--sync-interval",
        "1",
    )
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    cases.append(
        (
            refusal_env,
            ["session", str(bad), "--root", str(root)],
            2,
            re.escape(f"memfs: the session spec {bad} is not valid JSON: ") + ".+",
        )
    )
    expect_refusals(cases[:3])  # as real processes: exit codes and nothing else on stderr
    expect_refusals_in_process(cases)
    assert_nothing_mounted(root, [])


def test_mount_path_problems_and_clashes_are_refused(
    tmp_path: Path,
    refusal_env: dict[str, str],
    shared_api: Api,
    expect_refusals_in_process: Callable[[list[Case]], None],
) -> None:
    store_id = shared_api.create_store("Paths")["id"]
    a = shared_api.create_store("Shared Notes")["id"]
    b = shared_api.create_store("shared-notes")["id"]
    root = tmp_path / "memory"
    root.mkdir()
    cases: list[Case] = []
    for n, template in enumerate(
        [
            "{root}/../x",
            "relative/x",
            "{root}/a/b",
            "/mnt/memory/x",
            "{root}/",
            "{root}",
            "{root}/./x",
            "{root}//x",
            "{root}/..",
            "{root}/x\u0007",
            "{root}/" + "n" * 256,
            str(tmp_path / "other-root" / "x"),
        ]
    ):
        path = template.format(root=root)
        spec = write_spec(tmp_path / f"unclean-{n}.json", [ms(store_id, mount_path=path)])
        cases.append(
            (
                refusal_env,
                ["session", str(spec), "--root", str(root)],
                2,
                re.escape(
                    f"memfs: memory store mount_path is not a clean absolute path: '{path}' "
                    f"(memory_store_id={store_id}); it must be {root}/<name>"
                ),
            )
        )

    def clash(
        name: str, resources: list[dict[str, Any]], first: str, second: str, shared: str
    ) -> None:
        spec = write_spec(tmp_path / f"{name}.json", resources)
        cases.append(
            (
                refusal_env,
                ["session", str(spec), "--root", str(root)],
                2,
                re.escape(
                    f"memfs: memory stores {first} and {second} would share the mount path "
                    f"{root}/{shared} (paths may not differ only in case)"
                ),
            )
        )

    clash("slug", [ms(a), ms(b)], a, b, "shared-notes")  # two names, one slug
    clash(
        "same",
        [ms(a, mount_path=f"{root}/notes"), ms(b, mount_path=f"{root}/notes")],
        a,
        b,
        "notes",
    )
    clash(
        "case",
        [ms(a, mount_path=f"{root}/Notes"), ms(b, mount_path=f"{root}/notes")],
        a,
        b,
        "notes",
    )
    clash(
        "mixed",
        [ms(a), ms(store_id, mount_path=f"{root}/Shared-Notes")],
        a,
        store_id,
        "Shared-Notes",
    )
    expect_refusals([cases[0], cases[-4]])
    expect_refusals_in_process(cases)
    assert_nothing_mounted(root, [])


def test_something_already_at_a_store_path_is_refused(
    tmp_path: Path,
    refusal_env: dict[str, str],
    shared_api: Api,
    expect_refusals_in_process: Callable[[list[Case]], None],
) -> None:
    fresh = shared_api.create_store("Fresh")["id"]
    left = shared_api.create_store("Left Over")["id"]
    cases: list[Case] = []
    roots = []
    for kind in ("dir", "file", "symlink"):
        root = tmp_path / kind / "memory"
        root.mkdir(parents=True)
        target = root / "left-over"
        if kind == "dir":
            target.mkdir()
            (target / "old-edit.md").write_text("from a killed session")
        elif kind == "file":
            target.write_text("x")
        else:
            target.symlink_to(tmp_path / "nowhere")
        roots.append(root)
        spec = write_spec(tmp_path / f"{kind}.json", [ms(fresh), ms(left)])
        cases.append(
            (
                refusal_env,
                ["session", str(spec), "--root", str(root)],
                2,
                re.escape(
                    f"memfs: something already exists at the memory store's path: "
                    f"{root}/left-over (memory_store_id={left}); it must not exist when the "
                    "session starts"
                ),
            )
        )
    expect_refusals(cases[:1])
    expect_refusals_in_process(cases[1:])
    for root in roots:
        assert_nothing_mounted(root, ["left-over"])
    assert (roots[0] / "left-over/old-edit.md").read_text() == "from a killed session"


def test_root_problems_are_refused(
    tmp_path: Path,
    refusal_env: dict[str, str],
    shared_api: Api,
    expect_refusals_in_process: Callable[[list[Case]], None],
) -> None:
    store_id = shared_api.create_store("Rooted")["id"]
    spec = write_spec(tmp_path / "spec.json", [ms(store_id)])
    missing = tmp_path / "missing"
    a_file = tmp_path / "a-file"
    a_file.write_text("")

    def case(root: str, message: str) -> Case:
        return (
            refusal_env,
            ["session", str(spec), "--root", root],
            2,
            re.escape(f"memfs: {message}"),
        )

    expect_refusals_in_process(
        [
            case(
                str(missing),
                f"the session root {missing} does not exist; prepare the "
                f'host with: sudo mkdir -p {missing} && sudo chown "$USER" {missing}',
            ),
            case(str(a_file), f"the session root {a_file} is not a directory"),
            case("/", "the session root '/' is not a clean absolute path"),
        ]
    )
    expect_refusals([case(str(a_file), f"the session root {a_file} is not a directory")])
    assert not missing.exists()


def test_a_root_the_user_cannot_write_is_refused(
    shared_server: ServerProcess, shared_api: Api
) -> None:
    store_id = shared_api.create_store("Not Mine")["id"]
    base = Path(tempfile.mkdtemp(prefix="mfs-nobody-", dir="/tmp"))
    try:
        base.chmod(0o755)
        root = base / "memory"
        root.mkdir(mode=0o755)  # owned by root: `nobody` can't create anything in it
        spec = write_spec(base / "spec.json", [ms(store_id)])
        spec.chmod(0o644)
        runtime = base / "run"
        runtime.mkdir(mode=0o777)
        env = base_env(shared_server.url, runtime)
        env["HOME"] = str(base)
        result = run_cli_as_nobody(["session", str(spec), "--root", str(root)], env)
        one_line(
            result,
            2,
            re.escape(
                f"memfs: cannot create the memory store's folder under {root}: permission "
                "denied; the worker host must make this mount path writable "
                f'(sudo chown "$USER" {root})'
            ),
        )
        assert_nothing_mounted(root, [])
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_stores_without_credentials_are_refused(
    tmp_path: Path,
    shared_server: ServerProcess,
    runtime_dir: Path,
    shared_api: Api,
    expect_refusals_in_process: Callable[[list[Case]], None],
) -> None:
    store_id = shared_api.create_store("No Token")["id"]
    root = tmp_path / "memory"
    root.mkdir()
    spec = write_spec(tmp_path / "spec.json", [ms(store_id)])
    args = ["session", str(spec), "--root", str(root)]
    bare = base_env(shared_server.url, runtime_dir, credentials=False)
    no_token = re.escape(
        f"memfs: no credentials for the store server at {shared_server.url}: set "
        "ANTHROPIC_API_KEY (a `memfs serve` started without --api-key accepts any value, "
        "e.g. ANTHROPIC_API_KEY=local)"
    )
    expect_refusals([(bare, args, 2, no_token)])
    expect_refusals_in_process(
        [
            (bare, args, 2, no_token),
            # an environment key alone is not a credential for the memory endpoints
            (
                {**bare, "ANTHROPIC_ENVIRONMENT_KEY": "envkey", "ANTHROPIC_API_KEY": ""},
                args,
                2,
                no_token,
            ),
            (
                {**bare, "ANTHROPIC_WORK_SECRET": "%%% not base64 %%%"},
                args,
                2,
                re.escape(
                    "memfs: ANTHROPIC_WORK_SECRET is not a valid work-item secret (expected "
                    "base64url-encoded JSON)"
                ),
            ),
        ]
    )
    assert_nothing_mounted(root, [])


def test_a_store_that_does_not_exist_or_cannot_be_reached_is_refused(
    tmp_path: Path, refusal_env: dict[str, str], shared_api: Api, runtime_dir: Path
) -> None:
    real = shared_api.create_store("Real")["id"]
    root = tmp_path / "memory"
    root.mkdir()
    spec = write_spec(tmp_path / "spec.json", [ms(real), ms("memstore_doesnotexist")])
    args = ["session", str(spec), "--root", str(root)]
    expect_refusals(
        [
            (refusal_env, args, 1, "memfs: memory store memstore_doesnotexist does not exist"),
            (
                base_env("http://127.0.0.1:9", runtime_dir),
                args,
                3,
                r"memfs: cannot reach the store at .*127\.0\.0\.1:9.*",
            ),
        ]
    )
    assert_nothing_mounted(root, [])


def test_an_archived_store_mounts_read_only_with_a_warning(
    tmp_path: Path, shared_server: ServerProcess, shared_api: Api, runtime_dir: Path
) -> None:
    require_fuse()
    live = shared_api.create_store("Live")["id"]
    old = shared_api.create_store("Old Archive")["id"]
    shared_api.create_memory(old, "/history.md", "kept\n")
    archived = shared_api.request("POST", f"/v1/memory_stores/{old}/archive")
    assert archived.status_code == 200, archived.text
    root = tmp_path / "memory"
    root.mkdir()
    spec = write_spec(tmp_path / "spec.json", [ms(live), ms(old)])  # asked read_write
    env = base_env(shared_server.url, runtime_dir)
    log_path = tmp_path / "daemon.log"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "memfs.cli",
            "--log-file",
            str(log_path),
            "session",
            str(spec),
            "--root",
            str(root),
            "--cache-dir",
            str(tmp_path / "cache"),
            "--daemon",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    try:
        assert result.returncode == 0, result.stderr
        assert f"memfs: {old} (Old Archive) -> {root}/old-archive [read_only]" in (result.stderr)
        assert f"memfs: mounted at {root}/live, {root}/old-archive (pid " in result.stderr
        assert re.search(
            r"WARNING memfs\.session: memory store is archived; mounting it "
            rf"read-only memory_store_id={old}",
            log_path.read_text(),
        )
        assert (root / "old-archive/history.md").read_text() == "kept\n"
        refused(errno.EROFS, os.open, root / "old-archive/new.md", os.O_CREAT | os.O_WRONLY, 0o644)
        refused(errno.EROFS, os.unlink, root / "old-archive/history.md")
        (root / "live/ok.md").write_text("fine\n")
        status = json.loads(cli(env, "status", str(root), "--json").stdout)
        access = {
            m["stores"][0]["memory_store_id"]: m["stores"][0]["access"] for m in status["mounts"]
        }
        assert access == {live: "read_write", old: "read_only"}
        done = cli(env, "unmount", str(root))
        assert done.returncode == 0, done.stderr
        assert_nothing_mounted(root, [])
        assert store_contents(shared_api, live) == {"/ok.md": "fine\n"}
    finally:
        if is_mounted(root):
            with contextlib.suppress(Exception):
                cli(env, "unmount", str(root), timeout=30)
            subprocess.run(["fusermount3", "-u", "-z", str(root)], check=False)


# ---------------------------------------------------------------------- a big session
def test_eight_stores_of_1000_memories_are_ready_and_tear_down_cleanly(
    tmp_path: Path, runtime_dir: Path
) -> None:
    require_fuse()
    db_path = tmp_path / "big.db"
    db = Database.open(db_path)
    ids = [db.create_store(f"Big Store {i}", "", {})["id"] for i in range(8)]
    db.close()

    def seed(i: int) -> None:
        seed_bulk(
            db_path,
            ids[i],
            [(f"/d{j % 10}/note-{j:04d}.md", f"store {i} note {j}\n") for j in range(1000)],
        )

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(seed, range(8)))
    server = start_server(db_path)
    try:
        root = tmp_path / "memory"
        root.mkdir()
        spec = write_spec(
            tmp_path / "spec.json",
            [
                ms(store_id, "read_only" if i % 4 == 3 else "read_write")
                for i, store_id in enumerate(ids)
            ],
        )
        t0 = time.monotonic()
        proc = start_session(tmp_path, server.url, runtime_dir, spec, root)
        try:
            ready_s = time.monotonic() - t0
            assert sorted(os.listdir(root)) == [f"big-store-{i}" for i in range(8)]
            for i in (0, 7):
                d = root / f"big-store-{i}"
                assert sorted(os.listdir(d / "d3"))[:2] == ["note-0003.md", "note-0013.md"]
                assert len(os.listdir(d / "d9")) == 100
                assert (d / "d9/note-0999.md").read_text() == f"store {i} note 999\n"
            (root / "big-store-0/new.md").write_text("one more\n")
            status = json.loads(proc.memfs("status", str(root), "--json").stdout)
            mounts = sorted(status["mounts"], key=lambda m: m["mountpoint"])
            stores = [m["stores"][0] for m in mounts]
            assert [s["memories"] for s in stores] == [1001] + [1000] * 7
            assert [s["access"] for s in stores] == ["read_write"] * 3 + ["read_only"] + [
                "read_write"
            ] * 3 + ["read_only"]
            t1 = time.monotonic()
            assert proc.stop(timeout=45) == 0
            stop_s = time.monotonic() - t1
            assert not is_mounted(root) and os.listdir(root) == []
            with Api(server.url) as api:
                assert len(api.list_memories(ids[0])) == 1001
            assert ready_s < 20 and stop_s < 15, (ready_s, stop_s)
        finally:
            proc.cleanup()
    finally:
        server.stop()


@pytest.fixture(autouse=True)
def _no_stray_mounts(tmp_path: Path) -> Iterator[None]:
    yield
    with open("/proc/self/mounts") as f:
        stray = [line.split()[1] for line in f if line.split()[1].startswith(str(tmp_path))]
    for path in stray:
        subprocess.run(["fusermount3", "-u", "-z", path], check=False, capture_output=True)
        subprocess.run(["umount", "-l", path], check=False, capture_output=True)
    assert not stray, f"left mounted: {stray}"
