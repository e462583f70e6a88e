"""A read-only mount serves opens with no round trip when the installed pyfuse3 and the
kernel can (zero-message opens: OPEN and OPENDIR answer ENOSYS once, then the kernel
sends neither them nor RELEASE, RELEASEDIR or FLUSH). Whatever the build, reads,
listings and pulls behave as on a writable mount, and every write is EROFS."""

from __future__ import annotations

import errno
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.support.api import Api
from tests.support.mount import MountProcess, mount_store, pyfuse3_build
from tests.support.server import ServerProcess

OPEN_REQUESTS = ("open", "release", "flush", "opendir", "releasedir")


@pytest.fixture
def ro(tmp_path: Path, shared_server: ServerProcess, shared_api: Api, store: dict[str, Any]) -> Any:
    sid = str(store["id"])
    for i in range(300):  # more names than one READDIR answer holds
        shared_api.create_memory(sid, f"/many/n{i:03}.md", f"note {i}\n")
    shared_api.create_memory(sid, "/a.md", "alpha\n")
    proc = mount_store(tmp_path, shared_server.url, sid, "--read-only", "--sync-interval", "3600")
    try:
        yield proc
    finally:
        proc.cleanup()


def opens(proc: MountProcess) -> dict[str, int]:
    got = proc.fuse_requests()
    return {k: got.get(k, 0) for k in OPEN_REQUESTS}


@pytest.mark.pyfuse3_builds
def test_warm_reads_and_listings_send_no_open_requests(ro: MountProcess) -> None:
    root = ro.mountpoint
    used = pyfuse3_build(ro)["zero_message_opens_used"]
    assert (root / "a.md").read_text() == "alpha\n"
    assert len(os.listdir(root / "many")) == 300
    before = opens(ro)
    for _ in range(5):
        assert (root / "a.md").read_text() == "alpha\n"
        assert sorted(os.listdir(root / "many"))[:2] == ["n000.md", "n001.md"]
    grep = subprocess.run(
        ["grep", "-rl", "note 29", str(root)], capture_output=True, text=True, check=True
    )
    assert sorted(Path(p).name for p in grep.stdout.split()) == [
        "n029.md",
        *[f"n{i}.md" for i in range(290, 300)],
    ]
    after = opens(ro)
    spent = {k: after[k] - before[k] for k in OPEN_REQUESTS}
    # The patched build asks for them; this kernel (Linux >= 4.19) serves them.
    assert used == ro.mount_status()["pyfuse3"]["zero_message_opens"]
    if used:
        assert spent == dict.fromkeys(OPEN_REQUESTS, 0), spent
    else:  # a stock pyfuse3 (or a kernel without no-open support): one OPEN per open
        assert spent["open"] >= 5 + 301 and spent["release"] == spent["open"], spent


def test_a_large_listing_names_every_entry_once(ro: MountProcess) -> None:
    names = sorted(os.listdir(ro.mountpoint / "many"))
    assert names == [f"n{i:03}.md" for i in range(300)]
    listed = subprocess.run(
        ["ls", "-f", str(ro.mountpoint / "many")], capture_output=True, text=True, check=True
    ).stdout.split()
    assert sorted(listed) == sorted([".", "..", *names])


def test_pulls_reach_cached_pages_and_listings(
    ro: MountProcess, shared_api: Api, store: dict[str, Any]
) -> None:
    sid = str(store["id"])
    root = ro.mountpoint
    a = next(m for m in shared_api.list_memories(sid) if m["path"] == "/a.md")
    assert (root / "a.md").read_text() == "alpha\n"
    assert "b.md" not in os.listdir(root)
    shared_api.update_memory(sid, a["id"], content="alpha, changed remotely\n")
    shared_api.create_memory(sid, "/b.md", "beta\n")
    ro.sync()
    assert (root / "a.md").read_text() == "alpha, changed remotely\n"
    assert (root / "b.md").read_text() == "beta\n"
    assert sorted(os.listdir(root)) == [".anthropic-memory-store", "a.md", "b.md", "many"]


def test_every_write_is_erofs(ro: MountProcess) -> None:
    f = ro.mountpoint / "a.md"
    for flags in (os.O_WRONLY, os.O_RDWR, os.O_WRONLY | os.O_APPEND, os.O_WRONLY | os.O_TRUNC):
        with pytest.raises(OSError) as info:
            os.open(f, flags)
        assert info.value.errno == errno.EROFS, flags
    with pytest.raises(OSError) as info:
        (ro.mountpoint / "new.md").write_text("x\n")
    assert info.value.errno == errno.EROFS
    fd = os.open(f, os.O_RDONLY)
    try:
        os.fsync(fd)  # nothing of its own to sync, and no error for trying
        assert os.read(fd, 100) == b"alpha\n"
    finally:
        os.close(fd)
    assert f.read_text() == "alpha\n"
