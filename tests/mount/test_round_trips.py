"""Round trips the kernel no longer makes, and what writers keep: FOPEN_NOFLUSH on
read-only opens and cached directory listings (cache_readdir) when the installed
pyfuse3 has them (scripts/install builds it with scripts/pyfuse3-levers.patch), and
today's behaviour, with one log line, when it is a stock build. Passes on both builds;
.ci/run runs it on each (the `pyfuse3_builds` marker)."""

from __future__ import annotations

import errno
import os
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.api import Api
from tests.support.files import store_files
from tests.support.mount import MountProcess, mount_store, pyfuse3_build, require_fuse
from tests.support.server import ServerProcess

pytestmark = [pytest.mark.fuse, pytest.mark.pyfuse3_builds]

STOCK_LINE = "pyfuse3 has no FileInfo.noflush (a stock build)"


def delta(before: dict[str, int], after: dict[str, int], key: str) -> int:
    return after.get(key, 0) - before.get(key, 0)


@pytest.fixture
def open_mount(
    tmp_path: Path, shared_server: ServerProcess, store: dict[str, object]
) -> Iterator[MountProcess]:
    """A mount with --open-requests: the kernel sends OPEN, FLUSH and RELEASE (without
    it, on the patched build, it sends none: tests/mount/test_zero_message_writes.py)."""
    require_fuse()
    proc = mount_store(tmp_path, shared_server.url, str(store["id"]), "--open-requests")
    try:
        yield proc
    finally:
        proc.cleanup()


def test_read_only_close_sends_no_flush_when_pyfuse3_can(open_mount: MountProcess) -> None:
    mount = open_mount
    f = mount.mountpoint / "note.md"
    f.write_text("hello\n")
    assert f.read_text() == "hello\n"  # warm: the page cache holds it
    levers = pyfuse3_build(mount)
    before = mount.fuse_requests()
    for _ in range(3):
        assert f.read_text() == "hello\n"
    after = mount.fuse_requests()
    assert delta(before, after, "open") == 3 and delta(before, after, "release") == 3
    if levers["noflush"]:
        assert delta(before, after, "flush") == 0
        assert STOCK_LINE not in mount.log()
    else:
        assert delta(before, after, "flush") == 3
        assert mount.log().count(STOCK_LINE) == 1


def test_writers_still_flush_and_get_eilseq_at_close(open_mount: MountProcess) -> None:
    """Bytes that are valid as written but never completed (a continuation after a hole,
    written out of order) are refused at close: EILSEQ at the write takes the rest."""
    mount = open_mount
    f = mount.mountpoint / "bin.md"
    before = mount.fuse_requests()
    fd = os.open(f, os.O_CREAT | os.O_WRONLY, 0o644)
    os.pwrite(fd, b"\xa9 not utf-8\n", 2)
    with pytest.raises(OSError) as info:
        os.close(fd)
    assert info.value.errno == errno.EILSEQ
    fd = os.open(f, os.O_RDWR)  # read-write is a writer too: its close still checks
    os.pwrite(fd, b"\xa9", 40)
    with pytest.raises(OSError) as info:
        os.close(fd)
    assert info.value.errno == errno.EILSEQ
    assert delta(before, mount.fuse_requests(), "flush") >= 2
    assert f.read_bytes().startswith(b"\0\0\xa9")  # a reader of refused bytes is fine
    os.truncate(f, 0)
    f.write_text("fixed\n")
    assert f.read_text() == "fixed\n"


def test_cached_listings_follow_remote_and_local_changes(
    shared_api: Api, store: dict[str, Any], mount: MountProcess
) -> None:
    """With cache_readdir a second listing costs no READDIR; a pull that adds, removes
    or moves a name drops the listing; a local change is seen at once."""
    sid = str(store["id"])
    root = mount.mountpoint
    shared_api.create_memory(sid, "/d/a.md", "a\n")
    gone = shared_api.create_memory(sid, "/d/gone.md", "g\n")
    away = shared_api.create_memory(sid, "/d/away.md", "w\n")
    mount.sync()
    d = root / "d"
    assert sorted(os.listdir(d)) == ["a.md", "away.md", "gone.md"]
    levers = pyfuse3_build(mount)
    before = mount.fuse_requests()
    assert sorted(os.listdir(d)) == ["a.md", "away.md", "gone.md"]
    readdirs = delta(before, mount.fuse_requests(), "readdir")
    assert (readdirs == 0) if levers["cache_readdir"] else (readdirs >= 1), readdirs
    assert sorted(os.listdir(root)) == [".anthropic-memory-store", "d"]
    # Only names added: no dentry the kernel holds changes, the listings still must.
    shared_api.create_memory(sid, "/d/only-added.md", "o\n")
    shared_api.create_memory(sid, "/top.md", "t\n")
    mount.sync()
    assert sorted(os.listdir(d)) == ["a.md", "away.md", "gone.md", "only-added.md"]
    assert sorted(os.listdir(root)) == [".anthropic-memory-store", "d", "top.md"]
    shared_api.create_memory(sid, "/d/new.md", "n\n")
    shared_api.delete_memory(sid, gone["id"])
    shared_api.update_memory(sid, away["id"], path="/e/away.md")
    shared_api.create_memory(sid, "/new-top.md", "t\n")
    mount.sync()
    assert sorted(os.listdir(d)) == ["a.md", "new.md", "only-added.md"]
    assert sorted(os.listdir(root / "e")) == ["away.md"]
    assert sorted(os.listdir(root)) == [".anthropic-memory-store", "d", "e", "new-top.md", "top.md"]
    (d / "local.md").write_text("l\n")
    os.rename(d / "a.md", d / "b.md")
    assert sorted(os.listdir(d)) == ["b.md", "local.md", "new.md", "only-added.md"]
    os.unlink(d / "new.md")
    assert sorted(os.listdir(d)) == ["b.md", "local.md", "only-added.md"]


def test_ls_l_asks_for_acls_once_per_inode(mount: MountProcess) -> None:
    """With FUSE_POSIX_ACL the kernel keeps the (absent) ACLs: a second `ls -la` asks
    only security.selinux (no cache holds it), one GETXATTR per entry instead of two;
    umask and chmod behave as before, and an ACL still cannot be stored."""
    d = mount.mountpoint / "acl"
    d.mkdir()
    for i in range(20):
        (d / f"f{i:02}.md").write_text("x\n")
    subprocess.run(["ls", "-la", str(d)], check=True, capture_output=True)
    before = mount.fuse_requests()
    subprocess.run(["ls", "-la", str(d)], check=True, capture_output=True)
    after = mount.fuse_requests()
    asked = delta(before, after, "getxattr")
    if pyfuse3_build(mount)["cache_readdir_used"]:
        # The entries' security.selinux, and a few for "." and ".."; without the ACL
        # cache it is two for each entry and three for each directory (46).
        assert asked <= 20 + 8, asked
    else:
        # A stock pyfuse3 cannot keep the listing: the second `ls` reads it again with
        # READDIRPLUS, and the kernel asks for the ACLs again (47 measured, as without
        # the ACL cache): the saving needs the cached listing, so no count is asserted.
        assert delta(before, after, "readdir") > 0, (before, after)
        assert asked > 0, asked
    old = os.umask(0o027)
    try:
        (d / "masked.md").write_text("m\n")
        os.mkdir(d / "sub", 0o777)
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(d / "masked.md").st_mode) == 0o640
    assert stat.S_IMODE(os.stat(d / "sub").st_mode) == 0o750
    os.chmod(d / "masked.md", 0o600)
    assert stat.S_IMODE(os.stat(d / "masked.md").st_mode) == 0o600
    # An ACL granting one more user read access: "\x02\0\0\0" is the xattr version.
    acl = b"\x02\0\0\0" + b"".join(
        tag.to_bytes(2, "little") + perm.to_bytes(2, "little") + ident.to_bytes(4, "little")
        for tag, perm, ident in (
            (1, 6, 0xFFFFFFFF),
            (2, 4, 65534),
            (4, 0, 0xFFFFFFFF),
            (0x10, 4, 0xFFFFFFFF),
            (0x20, 0, 0xFFFFFFFF),
        )
    )
    with pytest.raises(OSError) as info:
        os.setxattr(d / "masked.md", "system.posix_acl_access", acl)
    assert info.value.errno in (errno.ENOTSUP, errno.EOPNOTSUPP)
    assert stat.S_IMODE(os.stat(d / "masked.md").st_mode) == 0o600


def xattr_requests(mount: MountProcess, command: str) -> int:
    """The xattr requests (get, list, set) `command` (a shell line in the mount) costs."""
    before = mount.fuse_requests()
    subprocess.run(command, shell=True, cwd=mount.mountpoint, check=True, capture_output=True)
    after = mount.fuse_requests()
    return sum(delta(before, after, k) for k in ("getxattr", "listxattr", "setxattr"))


def test_no_xattrs_stops_the_kernel_asking(
    tmp_path: Path, shared_server: ServerProcess, shared_api: Api
) -> None:
    """--no-xattrs answers the first xattr request ENOSYS and the kernel asks no more:
    a second `ls -la` and shell writes cost no GETXATTR (the default mount: one per entry
    and one per write); `getfattr` says "Operation not supported"; vim and `cp -a`
    (which copies xattrs) still write their files."""
    costs = {}
    for flags in ((), ("--no-xattrs",)):
        sid = str(shared_api.create_store("xattrs")["id"])
        for i in range(20):
            shared_api.create_memory(sid, f"/d/f{i:02}.md", f"note {i}\n")
        name = "fast" if flags else "default"
        mount = mount_store(tmp_path, shared_server.url, sid, *flags, name=name)
        try:
            assert mount.mount_status()["xattrs"] is not bool(flags)
            xattr_requests(mount, "ls -la d")
            costs[name] = (
                xattr_requests(mount, "ls -la d"),
                xattr_requests(mount, "for i in $(seq 10); do echo x >> d/f01.md; done"),
            )
            dump = subprocess.run(
                ["getfattr", "-d", "d/f02.md"], cwd=mount.mountpoint, capture_output=True, text=True
            )
            src = tmp_path / f"src-{name}.md"
            src.write_text("copied\n")
            os.setxattr(src, "user.origin", b"elsewhere")
            subprocess.run(["cp", "-a", str(src), "d/copied.md"], cwd=mount.mountpoint, check=True)
            vim = [
                "vim",
                "-u",
                "NONE",
                "-n",
                "-es",
                "-c",
                "normal Goedited",
                "-c",
                "wq",
                "d/f03.md",
            ]
            subprocess.run(vim, cwd=mount.mountpoint, check=True)
            assert (mount.mountpoint / "d" / "copied.md").read_text() == "copied\n"
            assert (mount.mountpoint / "d" / "f03.md").read_text() == "note 3\nedited\n"
            mount.sync()
            files = store_files(shared_api, sid)
            assert files["d/copied.md"] == "copied\n" and files["d/f03.md"] == "note 3\nedited\n"
            if flags:
                assert dump.returncode == 1 and "Operation not supported" in dump.stderr, dump
            else:
                assert 'user.memfs.state="clean"' in dump.stdout, dump
        finally:
            mount.cleanup()
    assert costs["fast"] == (0, 0), costs
    assert costs["default"][0] >= 20 and costs["default"][1] >= 10, costs


def daemon_cpu_s(mount: MountProcess) -> float:
    assert mount.proc is not None
    fields = Path(f"/proc/{mount.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_the_loop_reads_on_after_an_answer_only_briefly(
    tmp_path: Path, shared_server: ServerProcess, shared_api: Api
) -> None:
    """The patched loop reads on for the next request (`--read-spin-us`, 50 by default)
    before it sleeps, and takes queued requests without a round through the event loop.
    Eight writers at once land every line; once they stop, the daemon sleeps (no
    reading on forever); `--read-spin-us 0` turns it off; a stock build reports 0."""
    for flags in ((), ("--read-spin-us", "0")):
        sid = str(shared_api.create_store("spin")["id"])
        mount = mount_store(tmp_path, shared_server.url, sid, *flags, name=f"m{len(flags)}")
        try:
            levers = pyfuse3_build(mount)
            assert levers["read_spin_us"] == (50 if levers["read_spin"] and not flags else 0)
            script = 'for i in $(seq 200); do echo "$W $i" >> "w$W.md"; done'
            writers = [
                subprocess.Popen(
                    ["bash", "-c", script], cwd=mount.mountpoint, env={**os.environ, "W": str(w)}
                )
                for w in range(8)
            ]
            assert all(p.wait(timeout=120) == 0 for p in writers)
            for w in range(8):
                lines = (mount.mountpoint / f"w{w}.md").read_text().splitlines()
                assert lines == [f"{w} {i}" for i in range(1, 201)]
            before = daemon_cpu_s(mount)
            time_idle = 2.0
            subprocess.run(["sleep", str(time_idle)], check=True)
            assert daemon_cpu_s(mount) - before < 0.25 * time_idle  # asleep, not spinning
        finally:
            mount.stop()
