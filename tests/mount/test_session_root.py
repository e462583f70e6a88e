"""A session root other users can reach: nothing under it is followed (root daemon).

`memfs session` runs as root here, as a worker host's root daemon does. A root that is a
symlink, or that other users can write without the sticky bit, is refused with the
reason; a sticky shared root (as /tmp) works. A store's directory swapped, between its
`mkdir` and the mount, for a symlink to a victim directory (think /run/sshd) or for
another user's directory leaves that directory untouched: not mounted over, not removed.
Each start is a real `memfs session` process against a real `memfs serve`; the swaps
are made while a slow proxy holds the store's listing, so they land between the two
steps every time.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from memfs.mount.storedir import unsafe_root
from tests.support.api import Api
from tests.support.files import store_contents
from tests.support.mount import MountProcess, is_mounted, lazy_unmount, one_line
from tests.support.server import ServerProcess
from tests.support.slowproxy import SlowProxy

CREDENTIALS = {"ANTHROPIC_API_KEY": "anything"}
NOBODY = 65534


@pytest.fixture
def runtime(tmp_path: Path) -> Path:
    path = tmp_path / "rt"
    path.mkdir(mode=0o700)
    return path


def spec_for(path: Path, *store_ids: str) -> Path:
    resources = [
        {"type": "memory_store", "memory_store_id": s, "access": "read_write"} for s in store_ids
    ]
    path.write_text(json.dumps({"resources": resources}))
    return path


def mounts_under(path: Path) -> list[str]:
    """Mount table lines at or below `path`."""
    with open("/proc/self/mounts") as f:
        return [
            line
            for line in f
            if line.split()[1] == str(path) or line.split()[1].startswith(f"{path}/")
        ]


def start_daemonized(
    tmp_path: Path, url: str, runtime: Path, spec: Path, root: Path
) -> subprocess.CompletedProcess[str]:
    """`memfs session --daemon`: returns once live or refused. A session that went live
    where it should have been refused is stopped again (the test then fails)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANTHROPIC_")}
    env.update(CREDENTIALS, ANTHROPIC_BASE_URL=url, XDG_RUNTIME_DIR=str(runtime))
    args = [sys.executable, "-m", "memfs.cli", "--log-level", "error"]
    result = subprocess.run(
        [
            *args,
            "session",
            str(spec),
            "--root",
            str(root),
            "--cache-dir",
            str(tmp_path / "cache"),
            "--log-file",
            str(tmp_path / "session.log"),
            "--daemon",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=90,
    )
    if result.returncode == 0:
        stopped = subprocess.run(
            [*args, "unmount", str(root)], env=env, capture_output=True, text=True, timeout=90
        )
        assert stopped.returncode == 0, stopped.stderr
    return result


def test_a_root_that_is_a_symlink_is_refused(
    tmp_path: Path, shared_server: ServerProcess, shared_api: Api, runtime: Path
) -> None:
    store_id = shared_api.create_store("Linked Root")["id"]
    target = tmp_path / "elsewhere"  # think /run: where another user's link points
    target.mkdir()
    link = tmp_path / "memory"
    link.symlink_to(target)
    os.lchown(link, NOBODY, NOBODY)  # planted by another user
    result = start_daemonized(
        tmp_path, shared_server.url, runtime, spec_for(tmp_path / "spec.json", store_id), link
    )
    one_line(result, 2, re.escape(f"memfs: {unsafe_root(str(link), 'a symlink')}"))
    assert os.listdir(target) == [] and not mounts_under(target)


def test_a_root_others_can_write_without_the_sticky_bit_is_refused(
    tmp_path: Path, shared_server: ServerProcess, shared_api: Api, runtime: Path
) -> None:
    store_id = shared_api.create_store("Open Root")["id"]
    root = tmp_path / "memory"
    root.mkdir()
    root.chmod(0o777)
    result = start_daemonized(
        tmp_path, shared_server.url, runtime, spec_for(tmp_path / "spec.json", store_id), root
    )
    reason = "writable by other users without the sticky bit (mode 777)"
    one_line(result, 2, re.escape(f"memfs: {unsafe_root(str(root), reason)}"))
    assert os.listdir(root) == [] and not mounts_under(root)


def test_a_sticky_shared_root_works_and_unmount_removes_only_what_it_made(
    tmp_path: Path, shared_server: ServerProcess, shared_api: Api, runtime: Path
) -> None:
    store_id = shared_api.create_store("Sticky Root")["id"]
    root = tmp_path / "memory"
    root.mkdir()
    root.chmod(0o1777)
    theirs = root / "theirs"  # another user's entry beside the store's directory
    theirs.mkdir()
    os.chown(theirs, NOBODY, NOBODY)
    proc = MountProcess(
        ["session", str(spec_for(tmp_path / "spec.json", store_id)), "--root", str(root)],
        root,
        url=shared_server.url,
        log_path=tmp_path / "session.log",
    )
    proc.env.update(CREDENTIALS, XDG_RUNTIME_DIR=str(runtime))
    proc.start()
    try:
        store_dir = root / "sticky-root"
        assert is_mounted(store_dir)
        (store_dir / "note.md").write_text("shared root\n")
        assert proc.stop() == 0
    finally:
        proc.cleanup()
    assert sorted(os.listdir(root)) == ["theirs"] and not mounts_under(root)
    assert store_contents(shared_api, store_id) == {"/note.md": "shared root\n"}


@pytest.fixture
def slow(shared_server: ServerProcess) -> Iterator[SlowProxy]:
    port = int(shared_server.url.rsplit(":", 1)[1])
    with SlowProxy(port) as proxy:
        yield proxy


@pytest.mark.daemon_log(r"ERROR memfs\.session: a store of the session failed to start")
@pytest.mark.parametrize("swap", ["symlink", "directory"])
def test_a_store_directory_swapped_before_the_mount_leaves_the_victim_untouched(
    tmp_path: Path,
    shared_api: Api,
    runtime: Path,
    slow: SlowProxy,
    swap: str,
) -> None:
    store_id = shared_api.create_store("Swapped")["id"]
    victim = tmp_path / "victim"  # think /run/sshd: an empty directory
    victim.mkdir()
    victim_ino = victim.stat().st_ino
    root = tmp_path / "memory"
    root.mkdir()
    name = root / "swapped"
    moved = root / "moved"
    planted = tmp_path / "planted"
    if swap == "symlink":
        planted.symlink_to(victim)
    else:  # another user's own (empty) directory, moved in under the store's name
        planted.mkdir()
        os.chown(planted, NOBODY, NOBODY)
    planted_ino = os.lstat(planted).st_ino
    swapped = threading.Event()

    def swapper() -> None:
        """The other user (root plays them: they can rename in this root): as soon as the
        store's directory appears, move it aside and put the planted entry in its place."""
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if os.path.lexists(name):
                os.rename(name, moved)
                os.rename(planted, name)
                swapped.set()
                return
            time.sleep(0.002)

    slow.delay = 1.0  # every request waits: the listing holds the mount back
    thread = threading.Thread(target=swapper, daemon=True)
    thread.start()
    proc = MountProcess(
        ["session", str(spec_for(tmp_path / "spec.json", store_id)), "--root", str(root)],
        root,
        url=slow.url,
        log_path=tmp_path / "session.log",
    )
    proc.env.update(CREDENTIALS, XDG_RUNTIME_DIR=str(runtime))
    try:
        with pytest.raises(RuntimeError) as refused:
            proc.start(timeout=60)
        thread.join(5)
        assert swapped.is_set()
        assert "memfs exited 2: " in str(refused.value), refused.value
        assert (
            f"memfs: the memory store's directory {name} (memory_store_id={store_id}) was "
            "replaced before it was mounted; memfs mounts only on a directory it made, and "
            "removes only that"
        ) in str(refused.value), refused.value
    finally:
        proc.cleanup()
        for path in (victim, name, moved):
            if is_mounted(path):
                lazy_unmount(path)
    # the victim: not mounted over, not removed
    assert victim.stat().st_ino == victim_ino
    assert os.listdir(victim) == []
    assert not mounts_under(victim) and not mounts_under(root)
    # the planted entry stays where the other user put it; memfs removed nothing of theirs
    assert os.lstat(name).st_ino == planted_ino
    assert os.path.isdir(moved)  # the directory memfs made, where the other user moved it
