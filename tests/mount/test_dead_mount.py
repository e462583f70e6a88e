"""A mount whose daemon was killed: `memfs status` says it is dead, what the journal
still holds, and the one command that recovers it, and that command works (issue 12,
item 2)."""

from __future__ import annotations

import errno
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.api import Api
from tests.support.deadline import eventually
from tests.support.files import local_files, store_contents, store_files
from tests.support.mount import is_mounted, lazy_unmount, mount_store
from tests.support.recovery import recover, recover_under_a_writer
from tests.support.server import ServerProcess

pytestmark = pytest.mark.deadline(180)


def test_status_explains_a_dead_mount_and_the_command_that_recovers_it(
    tmp_path: Path, shared_server: ServerProcess, shared_api: Api, store: dict[str, object]
) -> None:
    store_id = str(store["id"])
    # No push soon: the two changes below must still be unpushed when the daemon dies.
    proc = mount_store(
        tmp_path, shared_server.url, store_id, "--sync-interval", "300", "--no-push-soon"
    )
    root = proc.mountpoint
    try:
        (root / "kept.md").write_text("kept\n")
        (root / "edited.md").write_text("first\n")
        (root / "sub").mkdir()
        proc.sync()
        (root / "edited.md").write_text("second\n")
        (root / "sub" / "new.md").write_text("new\n")
        expected = local_files(root)
        proc.kill()
        with pytest.raises(OSError) as dead:
            os.listdir(root)
        assert dead.value.errno == errno.ENOTCONN

        for where in (root, root / "sub"):
            result = proc.memfs("status", str(where), check=False)
            assert result.returncode == 1, result.stderr
            assert "Traceback" not in result.stderr
            (answer,) = json.loads(result.stdout)["mounts"]
            assert answer["state"] == "dead" and answer["mountpoint"] == str(root)
            assert sorted(answer["unpushed"][store_id]) == ["/edited.md", "/sub/new.md"]
            assert "dead" in result.stderr and "2 changed files" in result.stderr
            assert f"recover with: {answer['recover']}" in result.stderr
        listing = json.loads(proc.memfs("status").stdout)["mounts"]
        assert [m["state"] for m in listing if m["mountpoint"] == str(root)] == ["dead"]

        command = shlex.split(answer["recover"])
        assert command[0] == "memfs"
        recovered = subprocess.run(
            [sys.executable, "-m", "memfs.cli", *command[1:]],
            env=proc.env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert recovered.returncode == 0, recovered.stderr
        assert local_files(root) == expected
        proc.sync()
        assert store_files(shared_api, store_id) == expected
        alive = json.loads(proc.memfs("status", str(root)).stdout)["mounts"][0]
        assert alive["ok"] and alive["stores"][0]["dirty"] == 0
        proc.memfs("unmount", str(root))
        assert not is_mounted(root)
    finally:
        proc.cleanup()


# ------------------------------------------------------ the recovery window (issue 35.1)
def test_recovery_never_exposes_the_bare_directory_to_a_writer(
    tmp_path: Path, shared_server: ServerProcess, shared_api: Api, store: dict[str, object]
) -> None:
    store_id = str(store["id"])
    proc = mount_store(tmp_path, shared_server.url, store_id, "--sync-interval", "300")
    root = proc.mountpoint
    try:
        (root / "log.md").write_text("before\n")
        proc.sync()
        proc.kill()

        def status() -> dict[str, Any]:
            result = proc.memfs("status", str(root), check=False)
            assert result.returncode == 1, result.stderr
            answer: dict[str, Any] = json.loads(result.stdout)
            return answer

        writer, recovered = recover_under_a_writer(root, status, proc.env)
        assert recovered.returncode == 0, recovered.stderr
        # The writer saw the dead mount, then the new one: never a plain directory.
        assert writer.errors["ENOTCONN"] > 0 and writer.acked, (writer.errors, writer.acked)
        assert set(writer.errors) == {"ENOTCONN"}, writer.errors
        proc.sync()
        assert store_contents(shared_api, store_id) == {
            "/log.md": "before\n" + "".join(writer.acked)
        }
        proc.memfs("unmount", str(root))
        assert not is_mounted(root)
        assert os.listdir(root) == []  # nothing landed in the directory under the mount
    finally:
        proc.cleanup()
        for _ in range(4):  # a dead mount, and one it went over
            lazy_unmount(root)


def _plant_under(mountpoint: Path, names: dict[str, str]) -> None:
    """Write files into the directory under the mount at `mountpoint`, through a
    non-recursive bind mount of its parent (it shows no mount on top)."""
    peek = Path(tempfile.mkdtemp(prefix="mfs-peek-"))
    subprocess.run(["mount", "--bind", str(mountpoint.parent), str(peek)], check=True)
    try:
        for name, text in names.items():
            (peek / mountpoint.name / name).write_text(text)
    finally:
        subprocess.run(["umount", str(peek)], check=True)
        peek.rmdir()


def test_a_recovery_that_would_hide_files_refuses_and_names_them(
    tmp_path: Path, shared_server: ServerProcess, store: dict[str, object]
) -> None:
    proc = mount_store(tmp_path, shared_server.url, str(store["id"]))
    root = proc.mountpoint
    try:
        proc.kill()
        _plant_under(root, {"landed.md": "written while nothing was mounted\n", "x.txt": ""})
        answer = json.loads(proc.memfs("status", str(root), check=False).stdout)["mounts"][0]
        recovered = recover(answer["recover"], proc.env)
        assert recovered.returncode == 2, recovered.stderr
        assert "would hide: landed.md, x.txt; nothing was mounted" in recovered.stderr
        # Refused without clearing the dead mount: a writer still gets ENOTCONN.
        refused = subprocess.run(["touch", str(root / "new.md")], capture_output=True, text=True)
        assert "Transport endpoint is not connected" in refused.stderr, refused
        lazy_unmount(root)
        assert sorted(os.listdir(root)) == ["landed.md", "x.txt"]
    finally:
        proc.cleanup()
        for _ in range(4):  # a dead mount, and one it went over
            lazy_unmount(root)


def test_a_mount_over_a_dead_one_unmounted_from_outside_syncs_and_clears_both(
    tmp_path: Path, shared_server: ServerProcess, shared_api: Api, store: dict[str, object]
) -> None:
    """The recovered mount sits on top of the dead one: `fusermount3 -u` from outside
    takes the top one away; the daemon says so (not "aborted"), runs its final sync,
    and clears the dead mount under it, so nothing is left mounted."""
    store_id = str(store["id"])
    proc = mount_store(tmp_path, shared_server.url, store_id)
    root = proc.mountpoint
    try:
        proc.kill()
        answer = json.loads(proc.memfs("status", str(root), check=False).stdout)["mounts"][0]
        recovered = recover(answer["recover"], proc.env)
        assert recovered.returncode == 0, recovered.stderr
        pid = json.loads(proc.memfs("status", str(root)).stdout)["mounts"][0]["pid"]
        (root / "late.md").write_text("pushed after fusermount3 -u\n")
        # The close watch holds the closed file open for a moment (fanotify hands the
        # daemon a descriptor per close): an unmount right then is EBUSY, as with any
        # reader of the mount, and a retry succeeds (docs/reliability.md §3).
        for attempt in range(20):
            unmount = subprocess.run(
                ["fusermount3", "-u", str(root)], capture_output=True, text=True, timeout=10
            )
            if unmount.returncode == 0 or "busy" not in unmount.stderr or attempt == 19:
                break
            time.sleep(0.05)
        assert unmount.returncode == 0, unmount.stderr
        eventually(lambda: not os.path.exists(f"/proc/{pid}"), f"daemon {pid} gone", timeout=60)
        log = proc.log()
        assert "the mount was unmounted from outside (umount or fusermount3 -u)" in log, log
        assert "cleared a dead mount left by a killed daemon" in log, log
        assert store_files(shared_api, store_id) == {"late.md": "pushed after fusermount3 -u\n"}
        assert not is_mounted(root) and os.listdir(root) == []
    finally:
        proc.cleanup()
        for _ in range(4):
            lazy_unmount(root)


def test_without_root_the_dead_mount_is_cleared_only_right_before_the_mount(
    tmp_path: Path, shared_server: ServerProcess, store: dict[str, object], monkeypatch: Any
) -> None:
    """Without the privilege to mount over a dead mount (fusermount3 refuses one), the
    start keeps it through its slow part and clears it right before the mount; what is
    in the directory then is refused by name, not hidden (run in this process, on a
    real dead mount, as a user who is not root)."""
    from memfs.errors import StartError
    from memfs.mount import overmount

    proc = mount_store(tmp_path, shared_server.url, str(store["id"]))
    root = proc.mountpoint
    try:
        proc.kill()
        _plant_under(root, {"landed.md": "written while nothing was mounted\n"})
        monkeypatch.setattr(overmount.os, "geteuid", lambda: 1000)
        assert overmount.plan_over_dead(str(root)) is False
        assert is_mounted(root)  # still dead: kept through the start
        claimed: list[bool] = []
        with pytest.raises(StartError) as refused:
            overmount.target(
                str(root), set(), dead=True, over=False, claim=lambda: claimed.append(True)
            )
        assert claimed == [True]
        assert (
            f"the mount point {root}, under the dead mount just cleared, holds files the "
            "new mount would hide: landed.md; nothing was mounted"
        ) in str(refused.value)
        assert not is_mounted(root)
        (root / "landed.md").unlink()
        assert overmount.target(str(root), set(), dead=False, over=False, claim=lambda: None) == (
            str(root),
            None,
        )
    finally:
        proc.cleanup()
        for _ in range(4):
            lazy_unmount(root)
