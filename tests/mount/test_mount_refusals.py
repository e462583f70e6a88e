"""Refusals at the system call on a real mount: read-only, links, size, names, UTF-8,
the marker, xattrs, statfs and modes."""

from __future__ import annotations

import errno
import json
import os
import socket
import stat
import subprocess
import tempfile
import unicodedata
from collections.abc import Iterator
from pathlib import Path

import pytest

from memfs.paths import MAX_CONTENT_BYTES, sha256_hex
from tests.support.api import Api
from tests.support.files import MARKER
from tests.support.mount import MountProcess, mount_store, require_fuse, xattrs
from tests.support.refusals import refused, tool_fails
from tests.support.server import ServerProcess


@pytest.fixture
def ro_mount(
    tmp_path: Path, shared_server: ServerProcess, shared_api: Api, store: dict[str, object]
) -> Iterator[MountProcess]:
    require_fuse()
    store_id = str(store["id"])
    shared_api.create_memory(store_id, "/notes/a.md", "remote\n")
    shared_api.create_memory(store_id, "/top.md", "top\n")
    proc = mount_store(tmp_path, shared_server.url, store_id, "--read-only", name="ro")
    try:
        yield proc
    finally:
        proc.cleanup()


def test_read_only_mount_refuses_every_mutation_even_for_root(
    tmp_path: Path, ro_mount: MountProcess, shared_api: Api, store: dict[str, object]
) -> None:
    root = ro_mount.mountpoint
    a = root / "notes/a.md"
    outside = tmp_path / "outside.md"
    outside.write_text("outside\n")
    assert a.read_text() == "remote\n"
    for flags in (os.O_WRONLY, os.O_RDWR, os.O_RDONLY | os.O_TRUNC, os.O_WRONLY | os.O_APPEND):
        refused(errno.EROFS, os.open, a, flags)
    refused(errno.EROFS, os.open, root / "new.md", os.O_CREAT | os.O_WRONLY, 0o644)
    refused(errno.EROFS, os.mkdir, root / "dir")
    refused(errno.EROFS, os.unlink, a)
    refused(errno.EROFS, os.rmdir, root / "notes")
    refused(errno.EROFS, os.rename, a, root / "notes/b.md")
    refused(errno.EROFS, os.rename, root / "notes", root / "other")
    refused(errno.EROFS, os.chmod, a, 0o600)
    refused(errno.EROFS, os.utime, a, None)
    refused(errno.EROFS, os.truncate, a, 0)
    refused(errno.EROFS, os.link, a, root / "hard")
    refused(errno.EROFS, os.symlink, "a.md", root / "sym")
    refused(errno.EROFS, os.mknod, root / "node.md", stat.S_IFREG | 0o644)
    refused(errno.EROFS, os.mkfifo, root / "fifo")
    refused(errno.EROFS, os.setxattr, a, "user.x", b"1")
    refused(errno.EROFS, os.removexattr, a, "user.memfs.state")
    with open(a, "rb") as f:  # a read handle can't write
        refused(errno.EBADF, os.write, f.fileno(), b"x")
    tool_fails("fallocate", "-l", "10", str(a), message="Read-only file system")
    tool_fails("touch", str(a), message="Read-only file system")
    tool_fails("sh", "-c", f"echo x >> {a}", message="Read-only file system")
    # rename in (mv copies across file systems) and out (the unlink fails)
    tool_fails("mv", str(outside), str(root / "in.md"), message="Read-only file system")
    assert outside.exists()
    tool_fails(
        "mv", str(root / "top.md"), str(tmp_path / "out.md"), message="Read-only file system"
    )
    assert (root / "top.md").read_text() == "top\n"
    # modes 0444/0555, the mount point too
    assert stat.S_IMODE(a.stat().st_mode) == 0o444
    assert stat.S_IMODE((root / "notes").stat().st_mode) == 0o555
    assert stat.S_IMODE(root.stat().st_mode) == 0o555
    assert stat.S_IMODE((root / MARKER).stat().st_mode) == 0o444
    assert sorted(os.listdir(root)) == [MARKER, "notes", "top.md"]
    assert sorted(m["path"] for m in shared_api.list_memories(str(store["id"]))) == [
        "/notes/a.md",
        "/top.md",
    ]


def test_links_devices_fifos_and_sockets_are_eperm(mount: MountProcess) -> None:
    root = mount.mountpoint
    (root / "a.md").write_text("a")
    refused(errno.EPERM, os.symlink, "a.md", root / "sym")
    refused(errno.EPERM, os.link, root / "a.md", root / "hard")
    refused(errno.EPERM, os.mkfifo, root / "fifo")
    refused(errno.EPERM, os.mknod, root / "chr", stat.S_IFCHR | 0o600, os.makedev(1, 3))
    refused(errno.EPERM, os.mknod, root / "blk", stat.S_IFBLK | 0o600, os.makedev(7, 0))
    sock = socket.socket(socket.AF_UNIX)
    try:
        refused(errno.EPERM, sock.bind, str(root / "sock"))
    finally:
        sock.close()
    tool_fails("ln", "-s", "a.md", str(root / "sym2"), message="Operation not permitted")
    assert sorted(os.listdir(root)) == [MARKER, "a.md"]


def test_an_unnamed_temporary_file_is_eopnotsupp(mount: MountProcess) -> None:
    """`open(O_TMPFILE)` (docs/reliability.md §3): memfs makes no file without a name,
    and tools fall back to a named one (Python's `tempfile` does, unlinked at once)."""
    root = mount.mountpoint
    refused(errno.EOPNOTSUPP, os.open, root, os.O_TMPFILE | os.O_RDWR, 0o600)
    with tempfile.TemporaryFile(dir=root) as f:
        f.write(b"scratch\n")
        f.seek(0)
        assert f.read() == b"scratch\n"
    assert sorted(os.listdir(root)) == [MARKER]


def test_efbig_past_the_content_limit(
    shared_api: Api, store: dict[str, object], mount: MountProcess, tmp_path: Path
) -> None:
    root = mount.mountpoint
    path = root / "big.md"
    fd = os.open(path, os.O_CREAT | os.O_WRONLY, 0o644)
    try:
        assert os.write(fd, b"x" * MAX_CONTENT_BYTES) == MAX_CONTENT_BYTES
        refused(errno.EFBIG, os.write, fd, b"y")
    finally:
        os.close(fd)
    refused(errno.EFBIG, os.truncate, path, MAX_CONTENT_BYTES + 1)
    assert path.stat().st_size == MAX_CONTENT_BYTES
    huge = tmp_path / "huge.md"
    huge.write_bytes(b"z" * (MAX_CONTENT_BYTES + 5000))
    tool_fails("cp", str(huge), str(root / "huge.md"), message="File too large")
    tool_fails("truncate", "-s", "200K", str(path), message="File too large")
    mount.sync_held_back()
    # its last write was refused: held back (tests/mount/test_refused_writes.py)
    assert shared_api.list_memories(str(store["id"])) == []
    os.truncate(path, MAX_CONTENT_BYTES)  # a successful truncate ends the refusal
    assert "refused: /huge.md (" in mount.sync_held_back()  # still not in the store
    memories = {m["path"]: m for m in shared_api.list_memories(str(store["id"]))}
    assert memories["/big.md"]["content_size_bytes"] == MAX_CONTENT_BYTES
    assert "/huge.md" not in memories
    mount.expect_exit(1)  # /huge.md is not in the store: named at the stop


def test_paths_the_api_would_reject(mount: MountProcess) -> None:
    root = mount.mountpoint
    (root / "ok.md").write_text("ok")
    rootb = os.fsencode(root)
    for name, code in (
        (b"x" * 1024, errno.ENAMETOOLONG),
        (unicodedata.normalize("NFD", "café.md").encode(), errno.EINVAL),
        (b"ctl\x01.md", errno.EINVAL),
        ("zw\u200b.md".encode(), errno.EINVAL),
        (b"bad\xff.md", errno.EINVAL),
    ):
        target = rootb + b"/" + name
        refused(code, os.open, target, os.O_CREAT | os.O_WRONLY, 0o644)
        refused(code, os.mkdir, target)
        refused(code, os.rename, rootb + b"/ok.md", target)
    deep = root
    for i in range(19):
        deep = deep / f"d{i}"
    os.makedirs(deep)
    (deep / "leaf.md").write_text("20 segments is fine")
    refused(errno.ENAMETOOLONG, os.mkdir, deep / "d19")
    long_dir = root / ("L" * 250) / ("L" * 250) / ("L" * 250) / ("L" * 250)
    os.makedirs(long_dir)
    refused(errno.ENAMETOOLONG, os.open, long_dir / ("n" * 30), os.O_CREAT | os.O_WRONLY)
    assert sorted(os.listdir(root)) == [MARKER, "L" * 250, "d0", "ok.md"]


def test_non_utf8_content_is_eilseq_at_the_write_and_never_uploaded(
    shared_api: Api, store: dict[str, object], mount: MountProcess
) -> None:
    root = mount.mountpoint
    path = root / "latin1.md"
    fd = os.open(path, os.O_CREAT | os.O_WRONLY, 0o644)
    try:
        os.write(fd, b"caf")
        refused(errno.EILSEQ, os.write, fd, "é\n".encode("latin-1"))  # nothing of it lands
        os.write(fd, b"e\n")
        os.pwrite(fd, "é".encode()[1:], 8)  # after a hole: invalid only if never completed
        refused(errno.EILSEQ, os.fsync, fd)
    finally:
        if mount.mount_status()["pyfuse3"]["zero_message_opens_used"]:
            os.close(fd)  # no FLUSH: a close cannot refuse
        else:
            refused(errno.EILSEQ, os.close, fd)
    (root / "fine.md").write_text("fine\n")
    attrs = xattrs(path)
    assert attrs["user.memfs.state"] == "refused"
    assert "UTF-8" in attrs["user.memfs.refused"]
    dump = subprocess.run(
        ["getfattr", "-d", str(path)], capture_output=True, text=True, check=True
    ).stdout
    assert 'user.memfs.state="refused"' in dump
    status = json.loads(mount.memfs("status", str(root), "--json").stdout)
    text = json.dumps(status)
    assert "/latin1.md" in text and '"refused": 1' in text
    out = mount.sync_held_back()
    assert "refused: /latin1.md (content is not valid UTF-8; permanent" in out, out
    paths = [m["path"] for m in shared_api.list_memories(str(store["id"]))]
    assert paths == ["/fine.md"]
    assert path.read_bytes() == b"cafe\n\0\0\0\xa9"  # kept locally
    assert "not valid UTF-8" in mount.log()
    # fixing it makes it sync
    path.write_text("café\n")
    assert xattrs(path)["user.memfs.state"] == "dirty"
    mount.sync()
    paths = [m["path"] for m in shared_api.list_memories(str(store["id"]))]
    assert paths == ["/fine.md", "/latin1.md"]


def test_marker_is_read_only_and_never_uploaded(
    tmp_path: Path, shared_server: ServerProcess, shared_api: Api, store: dict[str, object]
) -> None:
    require_fuse()
    store_id = str(store["id"])
    shared_api.create_memory(store_id, "/" + MARKER, "version 1\nmemstore_forged")
    shared_api.create_memory(store_id, "/real.md", "real")
    proc = mount_store(tmp_path, shared_server.url, store_id)
    try:
        root = proc.mountpoint
        marker = root / MARKER
        assert marker.read_bytes() == f"version 1\n{store_id}".encode()
        assert stat.S_IMODE(marker.stat().st_mode) == 0o444
        if proc.mount_status()["pyfuse3"]["zero_message_opens_used"]:
            # No OPEN to refuse (root may open a 0444 file for write): the write is EPERM.
            fd = os.open(marker, os.O_WRONLY)
            try:
                refused(errno.EPERM, os.write, fd, b"x")
            finally:
                os.close(fd)
        else:  # --open-requests, or a stock pyfuse3: the open is refused
            refused(errno.EPERM, os.open, marker, os.O_WRONLY)
        refused(errno.EPERM, os.open, marker, os.O_RDONLY | os.O_TRUNC)
        refused(errno.EPERM, os.unlink, marker)
        refused(errno.EPERM, os.rename, marker, root / "moved")
        (root / "x.md").write_text("x")
        refused(errno.EPERM, os.rename, root / "x.md", marker)
        refused(errno.EPERM, os.truncate, marker, 0)
        refused(errno.EPERM, os.chmod, marker, 0o644)
        tool_fails("rm", "-f", str(marker), message="Operation not permitted")
        assert marker.read_bytes() == f"version 1\n{store_id}".encode()
        assert "reserved marker path" in proc.log()
        proc.sync()
        memories = {m["path"]: m for m in shared_api.list_memories(store_id)}
        assert set(memories) == {"/" + MARKER, "/real.md", "/x.md"}
        forged = shared_api.get_memory(store_id, memories["/" + MARKER]["id"])
        assert forged["content"] == "version 1\nmemstore_forged"  # untouched, not ours
    finally:
        proc.cleanup()


def test_xattrs_statfs_and_modes(
    shared_api: Api, store: dict[str, object], mount: MountProcess
) -> None:
    root = mount.mountpoint
    (root / "d").mkdir()
    path = root / "d/a.md"
    path.write_text("hello\n")
    assert xattrs(path)["user.memfs.state"] == "dirty"
    mount.sync()
    memory = shared_api.list_memories(str(store["id"]))[0]
    dump = subprocess.run(
        ["getfattr", "-d", str(path)], capture_output=True, text=True, check=True
    ).stdout
    assert f'user.memfs.memory_id="{memory["id"]}"' in dump
    sha = sha256_hex(b"hello\n")
    assert f'user.memfs.sha256="{sha}"' in dump
    assert 'user.memfs.state="clean"' in dump
    refused(errno.ENOTSUP, os.setxattr, path, "user.memfs.state", b"dirty")
    refused(errno.ENOTSUP, os.setxattr, path, "user.mine", b"1")
    refused(errno.ENOTSUP, os.removexattr, path, "user.memfs.state")
    tool_fails(
        "setfattr", "-n", "user.mine", "-v", "1", str(path), message="Operation not supported"
    )
    assert xattrs(path)["user.memfs.state"] == "clean"
    s = os.statvfs(root)
    assert s.f_bsize > 0 and s.f_blocks * s.f_frsize >= 10_000 * MAX_CONTENT_BYTES // 2
    assert 0 < s.f_bavail <= s.f_blocks and s.f_files >= 10_000 and s.f_ffree > 0
    assert s.f_namemax >= 255
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert stat.S_IMODE((root / "d").stat().st_mode) == 0o755
    assert stat.S_IMODE(root.stat().st_mode) == 0o755
    assert (path.stat().st_uid, path.stat().st_gid) == (os.getuid(), os.getgid())
    assert stat.S_IMODE((root / MARKER).stat().st_mode) == 0o444
