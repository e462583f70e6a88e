"""Crash recovery, start-up errors, big directories and the warm cache, on real mounts."""

from __future__ import annotations

import contextlib
import errno
import os
import re
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.api import Api
from tests.support.deadline import eventually
from tests.support.files import MARKER, store_contents
from tests.support.mount import (
    MountProcess,
    is_mounted,
    mount_store,
    one_line,
    require_fuse,
    xattrs,
)
from tests.support.server import ServerProcess, seed_bulk, start_server


def tree_of(root: Path) -> dict[str, Any]:
    """Every entry under a mount: directories with their mode, files with bytes and mode."""
    out: dict[str, Any] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for d in dirnames:
            p = Path(dirpath) / d
            out[str(p.relative_to(root))] = ("dir", stat.S_IMODE(p.stat().st_mode))
        for f in filenames:
            p = Path(dirpath) / f
            out[str(p.relative_to(root))] = (p.read_bytes(), stat.S_IMODE(p.stat().st_mode))
    return out


def test_kill_9_recovery(
    tmp_path: Path, shared_server: ServerProcess, shared_api: Api, store: dict[str, object]
) -> None:
    require_fuse()
    store_id = str(store["id"])
    ids = {
        p: shared_api.create_memory(store_id, p, c)["id"]
        for p, c in (
            ("/keep.md", "keep\n"),
            ("/edit.md", "old\n"),
            ("/move.md", "move\n"),
            ("/gone.md", "gone\n"),
            ("/dir/inside.md", "inside\n"),
        )
    }
    before = store_contents(shared_api, store_id)
    proc = mount_store(tmp_path, shared_server.url, store_id)
    try:
        root = proc.mountpoint
        (root / "edit.md").write_text("new\n")
        (root / "sub").mkdir()
        os.rename(root / "move.md", root / "sub/moved.md")
        os.unlink(root / "gone.md")
        os.rename(root / "dir", root / "renamed")
        (root / "new.md").write_text("brand new\n")
        (root / "empty").mkdir()
        os.chmod(root / "keep.md", 0o600)
        with pytest.raises(OSError) as info, open(root / "bin.md", "wb") as f:
            f.write(b"\xff\xfe not utf-8")
        assert info.value.errno == errno.EILSEQ
        fd = os.open(root / "open.md", os.O_CREAT | os.O_WRONLY, 0o644)
        os.write(fd, b"written, never closed\n")
        expected = tree_of(root)
        assert len(expected) == 11
        proc.kill()
        with contextlib.suppress(OSError):  # the flush meets a dead connection
            os.close(fd)
        with pytest.raises(OSError) as info:
            os.listdir(root)
        assert info.value.errno == errno.ENOTCONN  # never a bare directory
        assert store_contents(shared_api, store_id) == before  # nothing was pushed yet

        proc = mount_store(tmp_path, shared_server.url, store_id)  # same --cache-dir
        assert tree_of(root) == expected
        assert xattrs(root / "bin.md")["user.memfs.state"] == "refused"
        proc.sync_held_back()  # exit 1: bin.md is refused
        assert store_contents(shared_api, store_id) == {
            "/keep.md": "keep\n",
            "/edit.md": "new\n",
            "/sub/moved.md": "move\n",
            "/renamed/inside.md": "inside\n",
            "/new.md": "brand new\n",
            "/open.md": "written, never closed\n",
        }
        now = {m["path"]: m["id"] for m in shared_api.list_memories(store_id)}
        assert now["/edit.md"] == ids["/edit.md"]
        assert now["/sub/moved.md"] == ids["/move.md"]
        assert now["/renamed/inside.md"] == ids["/dir/inside.md"]
        assert "mounted over the dead mount a killed daemon left" in proc.log()
        proc.expect_exit(1)  # bin.md is not in the store: named at the stop
        assert proc.stop() == 1
        assert not is_mounted(root)
    finally:
        proc.cleanup()


def mount_cli(
    tmp_path: Path,
    url: str,
    store_id: str,
    mountpoint: Path,
    *extra: str,
    cache: str = "cli-cache",
    api_key: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """A `memfs mount` expected to fail at start-up."""
    env = {**os.environ, "ANTHROPIC_BASE_URL": url}
    env.pop("ANTHROPIC_API_KEY", None)
    if api_key is not None:
        env["ANTHROPIC_API_KEY"] = api_key
    cmd = [
        sys.executable,
        "-m",
        "memfs.cli",
        "--log-level",
        "error",
        "mount",
        store_id,
        str(mountpoint),
        "--cache-dir",
        str(tmp_path / cache),
        *extra,
    ]
    try:
        return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=30)
    except subprocess.TimeoutExpired:
        subprocess.run(["fusermount3", "-u", "-z", str(mountpoint)], check=False)
        raise


def test_start_up_errors_are_one_clear_line(
    tmp_path: Path, shared_server: ServerProcess, store: dict[str, object], mount: MountProcess
) -> None:
    store_id = str(store["id"])
    url = shared_server.url
    missing = tmp_path / "missing"
    one_line(
        mount_cli(tmp_path, url, store_id, missing),
        2,
        rf"memfs: mount point {re.escape(str(missing))} does not exist",
    )
    full = tmp_path / "full"
    full.mkdir()
    (full / "x").write_text("x")
    one_line(
        mount_cli(tmp_path, url, store_id, full),
        2,
        rf"memfs: mount point {re.escape(str(full))} is not empty: x",
    )
    one_line(
        mount_cli(tmp_path, url, store_id, mount.mountpoint),
        2,
        rf"memfs: mount point {re.escape(str(mount.mountpoint))} is already a mount",
    )
    empty = tmp_path / "empty"
    empty.mkdir()
    one_line(
        mount_cli(tmp_path, url, "memstore_doesnotexist", empty),
        1,
        r"memfs: memory store memstore_doesnotexist does not exist",
    )
    one_line(
        mount_cli(tmp_path, "http://127.0.0.1:9", store_id, empty),
        3,
        r"memfs: cannot reach the store at .*127\.0\.0\.1:9.*",
    )
    # Two daemons can't share one cache directory (the `mount` fixture holds mnt-cache).
    one_line(
        mount_cli(tmp_path, url, store_id, empty, cache="mnt-cache"),
        2,
        r"memfs: cache directory .*mnt-cache is in use by another memfs daemon; "
        r"give each mount its own --cache-dir",
    )
    keyed = start_server(tmp_path / "keyed.db", api_key="the-right-key")
    try:
        with Api(keyed.url, "the-right-key") as api:
            keyed_store = str(api.create_store("keyed")["id"])
        one_line(
            mount_cli(
                tmp_path, keyed.url, keyed_store, empty, cache="keyed-cache", api_key="a-wrong-key"
            ),
            2,
            r"memfs: the store refused the credentials: (?!.*the store refused).*",
        )
    finally:
        keyed.stop()
    assert os.listdir(empty) == [] and not is_mounted(empty)
    (mount.mountpoint / "still.md").write_text("the first daemon is unharmed")
    assert (mount.mountpoint / "still.md").read_text() == "the first daemon is unharmed"


def test_directory_with_5000_entries(
    tmp_path: Path, shared_server: ServerProcess, shared_api: Api, store: dict[str, object]
) -> None:
    require_fuse()
    store_id = str(store["id"])
    names = [f"note-{i:05d}.md" for i in range(5000)]
    seed_bulk(shared_server.db_path, store_id, [(f"/many/{n}", f"content of {n}\n") for n in names])
    proc = mount_store(tmp_path, shared_server.url, store_id)
    try:
        many = proc.mountpoint / "many"
        # Read right away: content still streaming in is waited for, never EIO or empty.
        for n in (names[-1], names[2500], names[0]):
            assert (many / n).read_text() == f"content of {n}\n"
        listed = os.listdir(many)
        assert sorted(listed) == names
        assert os.listdir(many) == listed  # stable across readdir calls
        ls = subprocess.run(
            ["ls", "-1", str(many)], capture_output=True, text=True, check=True
        ).stdout.split()
        assert ls == names
        with os.scandir(many) as it:
            assert sum(1 for e in it if e.is_file()) == 5000
        for n in names[::500]:
            assert (many / n).read_text() == f"content of {n}\n"
        assert sorted(os.listdir(proc.mountpoint)) == [MARKER, "many"]
    finally:
        proc.cleanup()


def _retrieves(server: ServerProcess, store_id: str, since: int) -> list[str]:
    """Memory ids whose content the server handed out since log offset `since`."""
    text = server.log_path.read_bytes()[since:].decode(errors="replace")
    return re.findall(rf"method=GET path=/v1/memory_stores/{store_id}/memories/(\S+) ", text)


def test_warm_cache_remount_downloads_nothing(
    tmp_path: Path, shared_server: ServerProcess, shared_api: Api, store: dict[str, object]
) -> None:
    require_fuse()
    store_id = str(store["id"])
    for i in range(10):
        shared_api.create_memory(store_id, f"/m{i}.md", f"memory {i}\n")
    mark = shared_server.log_path.stat().st_size
    proc = mount_store(tmp_path, shared_server.url, store_id)
    try:
        for i in range(10):
            assert (proc.mountpoint / f"m{i}.md").read_text() == f"memory {i}\n"
        assert proc.stop() == 0
    finally:
        proc.cleanup()
    ids = {m["path"]: m["id"] for m in shared_api.list_memories(store_id)}
    assert set(_retrieves(shared_server, store_id, mark)) == set(ids.values())  # cold
    shared_api.update_memory(store_id, ids["/m3.md"], content="changed remotely\n")
    mark = shared_server.log_path.stat().st_size
    proc = mount_store(tmp_path, shared_server.url, store_id)
    try:
        contents = {i: (proc.mountpoint / f"m{i}.md").read_text() for i in range(10)}
        assert contents[3] == "changed remotely\n"
        assert all(contents[i] == f"memory {i}\n" for i in range(10) if i != 3)
        eventually(  # the background download reports when it is done
            lambda: "downloaded memory contents memory_store_id=" in proc.log(),
            "the background download done",
            timeout=10,
        )
        # only what changed is downloaded again
        assert set(_retrieves(shared_server, store_id, mark)) == {ids["/m3.md"]}
        assert re.search(r"downloaded memory contents memory_store_id=\S+ memories=1 ", proc.log())
    finally:
        proc.cleanup()


def test_daemon_mode_and_unmount_command(
    tmp_path: Path, shared_server: ServerProcess, shared_api: Api, store: dict[str, object]
) -> None:
    require_fuse()
    store_id = str(store["id"])
    mountpoint = tmp_path / "dmn"
    mountpoint.mkdir()
    env = {**os.environ, "ANTHROPIC_BASE_URL": shared_server.url}
    env.pop("ANTHROPIC_API_KEY", None)
    cli = [sys.executable, "-m", "memfs.cli"]
    try:
        started = subprocess.run(
            [
                *cli,
                "--log-file",
                str(tmp_path / "dmn.log"),
                "mount",
                store_id,
                str(mountpoint),
                "--cache-dir",
                str(tmp_path / "dmn-cache"),
                "--daemon",
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert started.returncode == 0, started.stderr
        assert started.stderr.startswith(f"memfs: mounted at {mountpoint}")
        assert is_mounted(mountpoint)  # live as soon as the command returns
        (mountpoint / "d.md").write_text("written in daemon mode\n")
        stopped = subprocess.run(
            [*cli, "unmount", str(mountpoint)], env=env, capture_output=True, text=True, timeout=60
        )
        assert stopped.returncode == 0, stopped.stderr
        assert not is_mounted(mountpoint) and os.listdir(mountpoint) == []
        assert store_contents(shared_api, store_id) == {"/d.md": "written in daemon mode\n"}
    finally:
        if is_mounted(mountpoint):
            subprocess.run(["fusermount3", "-u", "-z", str(mountpoint)], check=False)
