"""`df`, `stat` and `ls -l` on a real mount (issue 24 item 15): the store's real usage,
and --uid/--gid/--umask for who the files appear to belong to (as rclone and sshfs); a
chown to those same ids moves `st_ctime` (issue 35 item 11)."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

from memfs.paths import MARKER_NAME
from tests.support.api import Api
from tests.support.mount import MountProcess, mount_store
from tests.support.server import ServerProcess


def _df(path: Path) -> tuple[int, int]:
    """Bytes and files used, as `df` prints them."""
    out = subprocess.run(
        ["df", "-B1", "--output=used,iused", str(path)],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    ).stdout.splitlines()[1]
    used, files = out.split()
    return int(used), int(files)


def _blocks(size: int) -> int:
    return -(-size // 512) * 512


def test_df_shows_the_memories_and_their_bytes(
    tmp_path: Path, shared_server: ServerProcess, shared_api: Api, store: dict[str, object]
) -> None:
    store_id = str(store["id"])
    a = shared_api.create_memory(store_id, "/a.md", "a" * 1000)
    shared_api.create_memory(store_id, "/d/b.md", "b" * 2000)
    shared_api.create_memory(store_id, "/d/e/c.md", "c" * 300)
    proc = mount_store(tmp_path, shared_server.url, store_id, "--sync-interval", "3600")
    root = proc.mountpoint
    assert _df(root) == (_blocks(3300), 3)  # was (0, 3): 4 KiB units hid small files
    (root / "new.md").write_text("n" * 10_000)
    assert _df(root) == (_blocks(13_300), 4)
    (root / "d" / "b.md").unlink()
    assert _df(root) == (_blocks(11_300), 3)
    shared_api.delete_memory(store_id, a["id"])
    proc.sync()
    assert _df(root) == (_blocks(10_300), 2)
    proc.stop()
    proc.start()  # the totals are rebuilt from the journal
    assert _df(root) == (_blocks(10_300), 2)


def test_uid_gid_and_umask_decide_what_stat_and_ls_show(
    tmp_path: Path, shared_server: ServerProcess, shared_api: Api, store: dict[str, object]
) -> None:
    store_id = str(store["id"])
    shared_api.create_memory(store_id, "/d/f.md", "from the store\n")
    args = ("--sync-interval", "3600", "--uid", "4321", "--gid", "8765", "--umask", "027")
    proc = mount_store(tmp_path, shared_server.url, store_id, *args)
    root = proc.mountpoint
    (root / "d" / "new.md").write_text("written here\n")

    def stat(*paths: Path) -> list[str]:
        done = subprocess.run(
            ["stat", "-c", "%u %g %A", *map(str, paths)],
            capture_output=True,
            text=True,
            check=True,
            timeout=30,
        )
        return [f"{line} {p.name}" for line, p in zip(done.stdout.splitlines(), paths, strict=True)]

    assert stat(root / "d", root / "d" / "f.md", root / "d" / "new.md", root / MARKER_NAME) == [
        "4321 8765 drwxr-x--- d",
        "4321 8765 -rw-r----- f.md",
        "4321 8765 -rw-r----- new.md",
        f"4321 8765 -r--r----- {MARKER_NAME}",
    ]
    ls = subprocess.run(
        ["ls", "-ln", str(root / "d")], capture_output=True, text=True, check=True, timeout=30
    ).stdout
    assert sorted(
        line.split()[0] + " " + " ".join(line.split()[2:4]) for line in ls.splitlines()[1:]
    ) == [
        "-rw-r----- 4321 8765",
        "-rw-r----- 4321 8765",
    ]
    chown = subprocess.run(
        ["chown", "0:0", str(root / "d" / "f.md")], capture_output=True, text=True, timeout=30
    )
    assert chown.returncode != 0 and "Operation not permitted" in chown.stderr
    assert (root / "d" / "f.md").read_text() == "from the store\n"


def test_a_chown_to_the_owners_own_ids_moves_ctime_as_on_ext4(
    tmp_path: Path, mount: MountProcess
) -> None:
    """A successful chown changes the inode: ext4 (and this test's own tmp directory)
    moves `st_ctime` even when the ids stay the same. memfs left it unchanged."""
    native = tmp_path / "native"
    native.mkdir()
    (native / "f.md").write_text("f\n")
    d = mount.mountpoint / "d"
    d.mkdir()
    (d / "f.md").write_text("f\n")
    for path in (native, native / "f.md", d, d / "f.md"):
        before = os.stat(path)
        time.sleep(0.02)
        os.chown(path, before.st_uid, before.st_gid)
        after = os.stat(path)
        assert (after.st_uid, after.st_gid) == (before.st_uid, before.st_gid)
        assert after.st_ctime_ns > before.st_ctime_ns, path
        assert after.st_mtime_ns == before.st_mtime_ns, path
