"""Another local user prepares the directories a (root) mount will use: symlinks for
`memfs.log`, `audit.jsonl`, `objects` or the cache directory itself, a cache directory
they own, or one they can write. memfs refuses with one clear line and writes nothing
through any of them (issue 24, item 1)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support.api import Api
from tests.support.mount import is_mounted, lazy_unmount, require_fuse
from tests.support.server import ServerProcess

pytestmark = [pytest.mark.fuse, pytest.mark.deadline(120)]


@pytest.fixture
def base(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path
    for mp in tmp_path.glob("mnt*"):
        if is_mounted(mp):
            lazy_unmount(mp)


def mount_daemon(
    base: Path, url: str, store_id: str, cache: Path
) -> subprocess.CompletedProcess[str]:
    """`memfs mount --daemon` without --log-file: the child logs to the cache root."""
    mp = base / "mnt"
    mp.mkdir(exist_ok=True)
    env = {**os.environ, "ANTHROPIC_BASE_URL": url}
    env.pop("ANTHROPIC_API_KEY", None)
    cmd = [sys.executable, "-m", "memfs.cli", "mount", store_id, str(mp)]
    return subprocess.run(
        [*cmd, "--cache-dir", str(cache), "--daemon"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def plant_log(cache: Path, target: Path) -> None:
    cache.mkdir(mode=0o700)
    (cache / "memfs.log").symlink_to(target)


def plant_trail(cache: Path, target: Path) -> None:
    cache.mkdir(mode=0o700)
    (cache / "audit.jsonl").symlink_to(target)


def plant_objects(cache: Path, target: Path) -> None:
    cache.mkdir(mode=0o700)
    (cache / "objects").symlink_to(target, target_is_directory=True)


def plant_cache(cache: Path, target: Path) -> None:
    cache.symlink_to(target, target_is_directory=True)


def foreign_owner(cache: Path, target: Path) -> None:
    cache.mkdir(mode=0o755)
    os.chown(cache, 65534, 65534)


def group_writable(cache: Path, target: Path) -> None:
    cache.mkdir()
    os.chmod(cache, 0o770)


CASES: dict[str, tuple[Callable[[Path, Path], None], str]] = {
    "memfs.log": (plant_log, r"the log file \S+/memfs\.log is a symlink; .*"),
    "audit.jsonl": (plant_trail, r"cannot use cache directory \S+: \S+/audit\.jsonl is a symlink"),
    "objects": (plant_objects, r"the object directory \S+/objects is a symlink; .*"),
    "cache dir": (plant_cache, r"the cache directory \S+ is a symlink; .*"),
    "foreign owner": (
        foreign_owner,
        r"the cache directory \S+ is owned by uid 65534, not by this user .*",
    ),
    "group-writable": (
        group_writable,
        r"the cache directory \S+ is writable by other users \(mode 770\); .*",
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_planted_cache_directory_is_refused_and_nothing_is_written_through_it(
    case: str, base: Path, shared_server: ServerProcess, shared_api: Api
) -> None:
    require_fuse()
    sid = str(shared_api.create_store(f"planted {case}")["id"])
    shared_api.create_memory(sid, "/secret.md", "pulled secret\n")
    victim = base / "victim"
    victim.mkdir(mode=0o755)
    (victim / "file").write_text("untouched\n")
    target = victim if case in ("objects", "cache dir") else victim / "file"
    plant, message = CASES[case]
    cache = base / "cache"
    plant(cache, target)
    before = {p: (p.read_bytes(), p.stat().st_mode) for p in victim.iterdir()}
    mode_before = victim.stat().st_mode

    result = mount_daemon(base, shared_server.url, sid, cache)

    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("memfs: ")
    assert re.fullmatch(message, lines[0][len("memfs: ") :]), lines[0]
    assert not is_mounted(base / "mnt")
    assert {p: (p.read_bytes(), p.stat().st_mode) for p in victim.iterdir()} == before
    assert victim.stat().st_mode == mode_before, "the target was chmodded"


def test_cache_directories_are_created_private_whatever_the_umask(
    base: Path, shared_server: ServerProcess, shared_api: Api
) -> None:
    """Created 0700 (the root, the store's directory, objects/), files 0600."""
    require_fuse()
    sid = str(shared_api.create_store("fresh cache")["id"])
    shared_api.create_memory(sid, "/a.md", "a\n")
    root = base / "root"
    old = os.umask(0)
    try:
        result = mount_daemon(base, shared_server.url, sid, root / "nested")
    finally:
        os.umask(old)
    assert result.returncode == 0, result.stderr
    try:
        assert (base / "mnt" / "a.md").read_text() == "a\n"
    finally:
        subprocess.run(
            [sys.executable, "-m", "memfs.cli", "unmount", str(base / "mnt")],
            capture_output=True,
            timeout=60,
        )
    nested = root / "nested"
    for d in [nested, nested / "objects"]:
        assert d.lstat().st_mode & 0o777 == 0o700, d
    for f in [nested / "memfs.log", nested / "audit.jsonl", nested / "lock"]:
        assert f.lstat().st_mode & 0o777 == 0o600, f
    objects = [p for p in (nested / "objects").rglob("*") if p.is_file()]
    assert objects and all(p.stat().st_mode & 0o077 == 0 for p in objects)
