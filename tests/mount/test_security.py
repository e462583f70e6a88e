"""Security battery: read-only is read-only at the VFS layer for root and for other
users, other users get only the modes shown, and a hostile store can neither reach
outside the mount and the cache directory, nor crash the daemon, nor hang a system call.

Every system call on a mount runs in a child process (or a thread) with a timeout, so a
hang is a test failure, never a hung CI job. Operations as another user run through
`setpriv --reuid=65534 --regid=65534 --clear-groups` (nobody).
"""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from memfs.paths import MARKER_NAME, MAX_CONTENT_BYTES, marker_content
from tests.support.api import Api
from tests.support.deadline import eventually
from tests.support.hostile import Hostile
from tests.support.mount import MountProcess, is_mounted, require_fuse
from tests.support.server import ServerProcess

pytestmark = [pytest.mark.fuse, pytest.mark.deadline(240)]


NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
SYS_PY = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable

# --------------------------------------------------------------------------- helpers

# Runs a list of operations and prints {label: "ok" | "ok:<detail>" | "<ERRNO>"}.
# Standalone (stdlib only), so it runs as nobody with the system python.
OPS_SCRIPT = r"""
import errno, json, mmap, os, sys

def run(op, a):
    if op == "open":
        fd = os.open(a["path"], a["flags"], 0o644); os.close(fd); return None
    if op == "read":
        with open(a["path"], "rb") as f: return f.read().decode(errors="replace")
    if op == "stat":
        return oct(os.stat(a["path"]).st_mode & 0o7777)
    if op == "statvfs": os.statvfs(a["path"]); return None
    if op == "listdir":
        return ",".join(sorted(os.listdir(a["path"])))
    if op == "mkdir": os.mkdir(a["path"]); return None
    if op == "unlink": os.unlink(a["path"]); return None
    if op == "rmdir": os.rmdir(a["path"]); return None
    if op == "rename": os.rename(a["src"], a["dst"]); return None
    if op == "chmod": os.chmod(a["path"], a["mode"]); return None
    if op == "chown": os.chown(a["path"], a["uid"], a["gid"]); return None
    if op == "utime":
        os.utime(a["path"], tuple(a["times"]) if a.get("times") else None); return None
    if op == "truncate": os.truncate(a["path"], a["size"]); return None
    if op == "setxattr": os.setxattr(a["path"], a["name"], b"1"); return None
    if op == "removexattr": os.removexattr(a["path"], a["name"]); return None
    if op == "getxattr": return os.getxattr(a["path"], a["name"]).decode()
    if op == "access_w":  # access(2) itself: os.access hides the errno
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.access(a["path"].encode(), os.W_OK) != 0:
            raise OSError(ctypes.get_errno(), "access")
        return None
    if op == "link": os.link(a["src"], a["dst"]); return None
    if op == "symlink": os.symlink(a["src"], a["dst"]); return None
    if op == "mknod": os.mknod(a["path"], 0o100644); return None
    if op == "mkfifo": os.mkfifo(a["path"]); return None
    if op == "write":
        fd = os.open(a["path"], a["flags"])
        try: os.write(fd, b"x")
        finally: os.close(fd)
        return None
    if op == "mmap_shared_write":
        fd = os.open(a["path"], os.O_RDONLY)
        try:
            m = mmap.mmap(fd, 0, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ | mmap.PROT_WRITE)
            m[0:1] = b"X"; m.flush(); m.close()
        finally: os.close(fd)
        return None
    if op == "mmap_private_write":
        fd = os.open(a["path"], os.O_RDONLY)
        try:
            m = mmap.mmap(fd, 0, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ | mmap.PROT_WRITE)
            m[0:1] = b"X"; seen = m[0:1].decode(); m.close()
        finally: os.close(fd)
        with open(a["path"], "rb") as f: return seen + "|" + f.read().decode()
    if op == "copy_file_range":
        src = os.open(a["src"], os.O_RDONLY)
        try:
            dst = os.open(a["dst"], a["flags"], 0o644)
            try: return str(os.copy_file_range(src, dst, 5))
            finally: os.close(dst)
        finally: os.close(src)
    if op == "fallocate":
        fd = os.open(a["path"], a["flags"])
        try: os.posix_fallocate(fd, 0, 4096)
        finally: os.close(fd)
        return None
    raise ValueError(op)

out = {}
for label, op, a in json.loads(sys.argv[1]):
    try:
        detail = run(op, a)
        out[label] = "ok" if detail is None else "ok:" + detail
    except OSError as e:
        out[label] = errno.errorcode.get(e.errno, str(e.errno))
print(json.dumps(out))
"""


def run_ops(ops: list[tuple[str, str, dict[str, Any]]], *, user: str) -> dict[str, str]:
    """Run `ops` in a child process as `user` ("root" or "nobody"), bounded in time."""
    prefix = NOBODY if user == "nobody" else []
    result = subprocess.run(
        [*prefix, SYS_PY, "-c", OPS_SCRIPT, json.dumps(ops)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    answer: dict[str, str] = json.loads(result.stdout)
    return answer


@pytest.fixture
def open_dir() -> Iterator[Path]:
    """A directory every user can traverse (pytest's tmp_path is 0700 root)."""
    base = Path(tempfile.mkdtemp(prefix="memfs-sec-", dir="/tmp"))
    os.chmod(base, 0o755)
    try:
        yield base
    finally:
        for mp in base.glob("mnt*"):
            if is_mounted(mp):
                subprocess.run(
                    ["fusermount3", "-u", "-z", str(mp)], check=False, capture_output=True
                )
        shutil.rmtree(base, ignore_errors=True)


def start_mount(
    base: Path,
    url: str,
    store_id: str,
    *extra: str,
    name: str = "mnt",
    env: dict[str, str] | None = None,
) -> MountProcess:
    mp = base / name
    mp.mkdir(exist_ok=True)
    os.chmod(mp, 0o755)
    args = ["mount", store_id, str(mp), "--cache-dir", str(base / f"{name}-cache"), *extra]
    return MountProcess(args, mp, url=url, log_path=base / f"{name}.log", env=env).start()


def no_daemon_errors(proc: MountProcess) -> None:
    assert proc.proc is not None and proc.proc.poll() is None, "the daemon died"
    log = proc.log()
    assert "Traceback" not in log, log[-3000:]
    assert "unexpected error in handler" not in log, log[-3000:]


# ---------------------------------------------------------- the read-only table


def read_only_table(root: Path, outside: Path) -> list[tuple[str, str, dict[str, Any]]]:
    a = str(root / "notes/a.md")
    top = str(root / "top.md")
    return [
        ("read", "read", {"path": a}),
        ("open_wronly", "open", {"path": a, "flags": os.O_WRONLY}),
        ("open_rdwr", "open", {"path": a, "flags": os.O_RDWR}),
        ("open_trunc", "open", {"path": a, "flags": os.O_RDONLY | os.O_TRUNC}),
        ("open_append", "open", {"path": a, "flags": os.O_WRONLY | os.O_APPEND}),
        (
            "create",
            "open",
            {"path": str(root / "new.md"), "flags": os.O_CREAT | os.O_WRONLY | os.O_EXCL},
        ),
        ("mkdir", "mkdir", {"path": str(root / "dir")}),
        ("unlink", "unlink", {"path": a}),
        ("rmdir", "rmdir", {"path": str(root / "notes")}),
        ("rename", "rename", {"src": a, "dst": str(root / "notes/b.md")}),
        ("rename_dir", "rename", {"src": str(root / "notes"), "dst": str(root / "other")}),
        ("rename_in", "rename", {"src": str(outside), "dst": str(root / "in.md")}),
        ("rename_out", "rename", {"src": top, "dst": str(outside.with_name("out.md"))}),
        ("chmod", "chmod", {"path": a, "mode": 0o666}),
        ("chown", "chown", {"path": a, "uid": 65534, "gid": 65534}),
        ("utime_now", "utime", {"path": a}),
        ("utime_times", "utime", {"path": a, "times": [1, 2]}),
        ("truncate", "truncate", {"path": a, "size": 0}),
        ("truncate_grow", "truncate", {"path": a, "size": 10}),
        ("setxattr", "setxattr", {"path": a, "name": "user.x"}),
        ("setxattr_memfs", "setxattr", {"path": a, "name": "user.memfs.state"}),
        ("removexattr", "removexattr", {"path": a, "name": "user.memfs.state"}),
        ("link", "link", {"src": a, "dst": str(root / "hard.md")}),
        ("symlink", "symlink", {"src": "a.md", "dst": str(root / "sym")}),
        ("mknod", "mknod", {"path": str(root / "node.md")}),
        ("mkfifo", "mkfifo", {"path": str(root / "fifo")}),
        ("mmap_shared_write", "mmap_shared_write", {"path": a}),
        ("mmap_private_write", "mmap_private_write", {"path": a}),
        (
            "copy_file_range_into",
            "copy_file_range",
            {"src": str(outside), "dst": a, "flags": os.O_WRONLY},
        ),
        (
            "copy_file_range_new",
            "copy_file_range",
            {"src": str(outside), "dst": str(root / "copy.md"), "flags": os.O_WRONLY | os.O_CREAT},
        ),
        ("fallocate", "fallocate", {"path": a, "flags": os.O_WRONLY}),
        ("fallocate_rdonly", "fallocate", {"path": a, "flags": os.O_RDONLY}),
        ("marker_write", "write", {"path": str(root / MARKER_NAME), "flags": os.O_WRONLY}),
        ("read_after", "read", {"path": a}),
    ]


EXPECTED_READ_ONLY = {
    "read": "ok:remote\n",
    "mmap_shared_write": "EACCES",  # not opened for writing: no shared write map
    "mmap_private_write": "ok:X|remote\n",  # a private copy changes, the file never
    "fallocate_rdonly": "EBADF",
    "rename_in": "EXDEV",  # the kernel refuses cross-mount renames first
    "rename_out": "EXDEV",
    "read_after": "ok:remote\n",
}


@pytest.mark.parametrize("user", ["root", "nobody"])
def test_read_only_mount_table(
    user: str, open_dir: Path, shared_server: ServerProcess, shared_api: Api
) -> None:
    require_fuse()
    sid = str(shared_api.create_store(f"ro table {user}")["id"])
    shared_api.create_memory(sid, "/notes/a.md", "remote\n")
    shared_api.create_memory(sid, "/top.md", "top\n")
    before = {m["path"]: m["content_sha256"] for m in shared_api.list_memories(sid)}
    proc = start_mount(open_dir, shared_server.url, sid, "--read-only", "--allow-other")
    try:
        root = proc.mountpoint
        work = open_dir / "work"
        work.mkdir()
        os.chmod(work, 0o777)
        outside = work / "outside.md"
        outside.write_text("outside\n")
        os.chmod(outside, 0o666)
        got = run_ops(read_only_table(root, outside), user=user)
        want = {
            label: EXPECTED_READ_ONLY.get(label, "EROFS")
            for label, _, _ in read_only_table(root, outside)
        }
        assert got == want
        # nothing moved, locally or in the store; the outside file is untouched
        assert sorted(os.listdir(root)) == [MARKER_NAME, "notes", "top.md"]
        assert (root / "notes/a.md").read_text() == "remote\n"
        assert outside.read_text() == "outside\n"
        assert sorted(os.listdir(work)) == ["outside.md"]
        proc.sync()
        assert {m["path"]: m["content_sha256"] for m in shared_api.list_memories(sid)} == before
        no_daemon_errors(proc)
    finally:
        proc.cleanup()


SHELL_WRITES = [  # (label, shell command run in the store's directory)
    ("redirect", "echo x > notes/a.md"),
    ("append", "echo x >> top.md"),
    ("create", "echo x > new.md"),
    ("touch_new", "touch new.md"),
    ("touch", "touch top.md"),
    ("mkdir", "mkdir dir"),
    ("rm", "rm -f top.md"),
    ("rm_r", "rm -rf notes"),
    ("rmdir", "rmdir notes"),
    ("mv", "mv top.md moved.md"),
    ("mv_dir", "mv notes other"),
    ("truncate", "truncate -s 0 top.md"),
    ("chmod", "chmod 666 top.md"),
    ("chown", "chown 65534 top.md"),
    ("setfattr", "setfattr -n user.x -v 1 top.md"),
    ("ln", "ln -s top.md sym"),
    ("python", "python3 -c \"open('top.md', 'w')\""),
]


def shell_writes(directory: Path, user: str) -> dict[str, str]:
    """Each command's exit status and whether it said "Read-only file system"."""
    prefix = NOBODY if user == "nobody" else []
    out = {}
    for label, command in SHELL_WRITES:
        result = subprocess.run(
            [*prefix, "sh", "-c", command],
            cwd=directory,
            capture_output=True,
            text=True,
            timeout=30,
        )
        out[label] = (
            "EROFS"
            if result.returncode != 0 and "Read-only file system" in result.stderr
            else f"{result.returncode}:{result.stderr.strip()}"
        )
    return out


@pytest.fixture(scope="module")
def ro_rw_session(shared_server: ServerProcess) -> Iterator[tuple[Path, str, str]]:
    """A real session mount (--allow-other) with a read_only and a read_write store."""
    require_fuse()
    base = Path(tempfile.mkdtemp(prefix="memfs-sec-", dir="/tmp"))
    os.chmod(base, 0o755)
    with Api(shared_server.url) as api:
        ro = str(api.create_store("session ro")["id"])
        rw = str(api.create_store("session rw")["id"])
        api.create_memory(ro, "/notes/a.md", "remote\n")
        api.create_memory(ro, "/top.md", "top\n")
    root = base / "mnt-session"
    root.mkdir()
    os.chmod(root, 0o755)
    spec = base / "spec.json"
    spec.write_text(
        json.dumps(
            {
                "resources": [
                    {
                        "type": "memory_store",
                        "memory_store_id": ro,
                        "access": "read_only",
                        "mount_path": f"{root}/ro",
                    },
                    {
                        "type": "memory_store",
                        "memory_store_id": rw,
                        "access": "read_write",
                        "mount_path": f"{root}/rw",
                    },
                ]
            }
        )
    )
    runtime = base / "runtime"
    runtime.mkdir(mode=0o700)
    proc = MountProcess(
        [
            "session",
            str(spec),
            "--root",
            str(root),
            "--allow-other",
            "--cache-dir",
            str(base / "session-cache"),
        ],
        root,
        url=shared_server.url,
        log_path=base / "session.log",
    )
    proc.env.update(ANTHROPIC_API_KEY="anything", XDG_RUNTIME_DIR=str(runtime))
    try:
        proc.start()
        yield root, ro, rw
        no_daemon_errors(proc)
    finally:
        proc.cleanup()
        shutil.rmtree(base, ignore_errors=True)


@pytest.mark.parametrize("user", ["root", "nobody"])
def test_read_only_store_in_a_session_is_erofs_for_every_user(
    user: str, ro_rw_session: tuple[Path, str, str], shared_api: Api
) -> None:
    """A read-only store of a session is a `ro` mount of its own: every write into it is
    EROFS from the kernel for root and for other users alike, as on `--read-only`; a
    move between stores is EXDEV, a store's directory cannot go."""
    root, ro, _ = ro_rw_session
    before = {m["path"]: m["content_sha256"] for m in shared_api.list_memories(ro)}
    work = root.parent / f"work-{user}"
    work.mkdir()
    os.chmod(work, 0o777)
    outside = work / "outside.md"
    outside.write_text("outside\n")
    os.chmod(outside, 0o666)
    table = read_only_table(root / "ro", outside)
    got = run_ops(table, user=user)
    assert got == {label: EXPECTED_READ_ONLY.get(label, "EROFS") for label, _, _ in table}
    # The root is the host's own directory (0755, root's): the kernel's answers there.
    gone = "EBUSY" if user == "root" else "EACCES"  # a mount point; no write permission
    assert run_ops(
        [
            ("rmdir_store", "rmdir", {"path": str(root / "ro")}),
            ("rename_store", "rename", {"src": str(root / "rw"), "dst": str(root / "x")}),
            ("to_rw", "rename", {"src": str(root / "ro/top.md"), "dst": str(root / "rw/t.md")}),
            ("from_rw", "rename", {"src": str(root / "rw"), "dst": str(root / "ro/rw")}),
            ("access_w", "access_w", {"path": str(root / "ro/top.md")}),
        ],
        user=user,
    ) == {
        "rmdir_store": gone,
        "rename_store": gone,
        "to_rw": "EXDEV",
        "from_rw": "EXDEV",
        "access_w": "EROFS",
    }
    assert shell_writes(root / "ro", user) == {label: "EROFS" for label, _ in SHELL_WRITES}
    assert sorted(os.listdir(root / "ro")) == [MARKER_NAME, "notes", "top.md"]
    assert (root / "ro/notes/a.md").read_text() == "remote\n"
    assert {m["path"]: m["content_sha256"] for m in shared_api.list_memories(ro)} == before


def other_user_table(root: Path) -> tuple[list[tuple[str, str, dict[str, Any]]], dict[str, str]]:
    """Files the mounting user made in `root`, what nobody tries there and must get."""
    (root / "public.md").write_text("public\n")
    (root / "secret.md").write_text("secret\n")
    os.chmod(root / "secret.md", 0o600)
    (root / "private").mkdir()
    (root / "private/inside.md").write_text("inside\n")
    os.chmod(root / "private", 0o700)
    (root / "shared").mkdir()
    os.chmod(root / "shared", 0o777)
    (root / "open.md").write_text("open\n")
    os.chmod(root / "open.md", 0o666)
    p = str(root)
    ops: list[tuple[str, str, dict[str, Any]]] = [
        ("stat", "stat", {"path": f"{p}/public.md"}),
        ("read", "read", {"path": f"{p}/public.md"}),
        ("write", "write", {"path": f"{p}/public.md", "flags": os.O_WRONLY}),
        ("append", "write", {"path": f"{p}/public.md", "flags": os.O_WRONLY | os.O_APPEND}),
        ("truncate", "truncate", {"path": f"{p}/public.md", "size": 0}),
        ("chmod", "chmod", {"path": f"{p}/public.md", "mode": 0o666}),
        ("chown", "chown", {"path": f"{p}/public.md", "uid": 65534, "gid": 65534}),
        ("utime_times", "utime", {"path": f"{p}/public.md", "times": [1, 2]}),
        ("utime_now", "utime", {"path": f"{p}/public.md"}),
        ("utime_now_open", "utime", {"path": f"{p}/open.md"}),
        ("unlink", "unlink", {"path": f"{p}/public.md"}),
        ("create", "open", {"path": f"{p}/new.md", "flags": os.O_CREAT | os.O_WRONLY}),
        ("mkdir", "mkdir", {"path": f"{p}/newdir"}),
        ("rename", "rename", {"src": f"{p}/public.md", "dst": f"{p}/moved.md"}),
        ("read_secret", "read", {"path": f"{p}/secret.md"}),
        ("list_private", "listdir", {"path": f"{p}/private"}),
        ("read_private", "read", {"path": f"{p}/private/inside.md"}),
        ("mmap_shared_write", "mmap_shared_write", {"path": f"{p}/public.md"}),
        ("write_open", "write", {"path": f"{p}/open.md", "flags": os.O_WRONLY}),
        ("create_shared", "open", {"path": f"{p}/shared/n.md", "flags": os.O_CREAT | os.O_WRONLY}),
        ("read_after", "read", {"path": f"{p}/public.md"}),
    ]
    expected = {
        "stat": "ok:0o644",
        "read": "ok:public\n",
        "write": "EACCES",
        "append": "EACCES",
        "truncate": "EACCES",
        "chmod": "EPERM",
        "chown": "EPERM",
        "utime_times": "EPERM",
        "utime_now": "EACCES",
        "utime_now_open": "ok",
        "unlink": "EACCES",
        "create": "EACCES",
        "mkdir": "EACCES",
        "rename": "EACCES",
        "read_secret": "EACCES",
        "list_private": "EACCES",
        "read_private": "EACCES",
        "mmap_shared_write": "EACCES",
        "write_open": "ok",
        "create_shared": "ok",
        "read_after": "ok:public\n",
    }
    return ops, expected


def check_other_user_results(root: Path) -> None:
    """What nobody may do, it did as the mounting user: owners are fixed."""
    st = os.stat(root / "shared/n.md")
    assert (st.st_uid, st.st_gid) == (0, 0)
    assert (root / "open.md").read_text() == "xpen\n"


def test_allow_other_keeps_other_users_to_the_modes_shown(
    open_dir: Path, shared_server: ServerProcess, shared_api: Api
) -> None:
    require_fuse()
    sid = str(shared_api.create_store("allow other")["id"])
    proc = start_mount(open_dir, shared_server.url, sid, "--allow-other")
    plain = start_mount(open_dir, shared_server.url, sid, name="mnt-private")
    try:
        root = proc.mountpoint
        ops, expected = other_user_table(root)
        ops.append(("private_mount", "listdir", {"path": str(plain.mountpoint)}))
        expected["private_mount"] = "EACCES"
        assert run_ops(ops, user="nobody") == expected
        check_other_user_results(root)
        no_daemon_errors(proc)
    finally:
        proc.cleanup()
        plain.cleanup()


def test_writable_store_in_a_session_keeps_other_users_to_the_modes_shown(
    ro_rw_session: tuple[Path, str, str],
) -> None:
    """A writable store of a session is mounted with `default_permissions`: the kernel
    gives nobody what it gives it on a single mount (the same table as the test above),
    the sticky bit and a 0700 directory included, whatever root looked up first."""
    rw = ro_rw_session[0] / "rw"
    ops, expected = other_user_table(rw)
    (rw / "sticky").mkdir()
    os.chmod(rw / "sticky", 0o1777)
    (rw / "sticky/roots.md").write_text("root's\n")
    os.chmod(rw / "sticky/roots.md", 0o666)
    assert (rw / "private/inside.md").read_text() == "inside\n"  # root's lookups, cached
    p = str(rw)
    ops += [
        ("sticky_unlink", "unlink", {"path": f"{p}/sticky/roots.md"}),
        ("sticky_replace", "rename", {"src": f"{p}/shared/n.md", "dst": f"{p}/sticky/roots.md"}),
        ("sticky_write", "write", {"path": f"{p}/sticky/roots.md", "flags": os.O_WRONLY}),
        ("stat_private", "stat", {"path": f"{p}/private/inside.md"}),
        ("statvfs_private", "statvfs", {"path": f"{p}/private/inside.md"}),
    ]
    expected |= {
        "sticky_unlink": "EPERM",
        "sticky_replace": "EPERM",
        "sticky_write": "ok",
        "stat_private": "EACCES",
        "statvfs_private": "EACCES",
    }
    assert run_ops(ops, user="nobody") == expected
    assert (rw / "sticky/roots.md").read_text() == "xoot's\n"  # its one byte written
    check_other_user_results(rw)
    # the mounting user (root here) and the owner bits still rule for itself
    assert run_ops(
        [
            ("read_private", "read", {"path": str(rw / "private/inside.md")}),
            ("write", "write", {"path": str(rw / "public.md"), "flags": os.O_WRONLY}),
        ],
        user="root",
    ) == {"read_private": "ok:inside\n", "write": "ok"}


def test_cache_directory_is_private_to_the_mounting_user(
    open_dir: Path, shared_server: ServerProcess, shared_api: Api
) -> None:
    """The mount hides files from other users (no --allow-other); the cache dir, which
    holds the same bytes (journal rows, objects), must not hand them out either."""
    require_fuse()
    sid = str(shared_api.create_store("private cache")["id"])
    shared_api.create_memory(sid, "/pulled.md", "pulled secret\n")
    old = os.umask(0o022)  # the usual umask: memfs must not rely on a strict one
    try:
        proc = start_mount(open_dir, shared_server.url, sid)
    finally:
        os.umask(old)
    try:
        (proc.mountpoint / "dirty.md").write_text("dirty secret\n")
        assert (proc.mountpoint / "pulled.md").read_text() == "pulled secret\n"
        cache = open_dir / "mnt-cache"
        objects = [str(p) for p in cache.rglob("*") if p.is_file()]
        assert any("objects" in p for p in objects)
        got = run_ops(
            [(p, "read", {"path": p}) for p in objects]
            + [("mount", "listdir", {"path": str(proc.mountpoint)})],
            user="nobody",
        )
        assert got.pop("mount") == "EACCES"
        leaked = sorted(p for p, v in got.items() if v.startswith("ok"))
        assert leaked == [], "other users can read the cache"
    finally:
        proc.cleanup()


# ------------------------------------------------------------- a hostile store server


def tree_listing(root: Path, skip: tuple[Path, ...] = ()) -> set[str]:
    out = set()
    for dirpath, dirnames, filenames in os.walk(root):
        here = Path(dirpath)
        dirnames[:] = [d for d in dirnames if here / d not in skip]
        for name in dirnames + filenames:
            out.add(str((here / name).relative_to(root)))
    return out


def cache_files_are_expected(cache: Path) -> None:
    """Only the documented layout: journal, lock, the audit trail, objects/ab/<sha>,
    conflicts/…"""
    for p in cache.rglob("*"):
        rel = p.relative_to(cache).parts
        if rel[0] in (
            "journal.sqlite",
            "journal.sqlite-wal",
            "journal.sqlite-shm",
            "extents.log",
            "lock",
            "audit.jsonl",
        ) or re.fullmatch(r"audit\.jsonl\.\d+|extents\.log\.damaged-[\dT-]+", rel[0]):
            assert len(rel) == 1
        elif rel[0] == "objects":
            if len(rel) == 1:
                continue
            if len(rel) == 3:
                assert len(rel[2]) == 64 and rel[2].startswith(rel[1]), p
                assert all(c in "0123456789abcdef" for c in rel[2]), p
            else:
                assert len(rel) == 2 and len(rel[1]) == 2, p
        else:
            assert rel[0] == "conflicts", p


BAD_PATHS = [
    "/../memfs-escape-f3a9.md",
    "/a/../../memfs-escape-f3a9-2.md",
    "/..",
    "/.",
    "/./dot.md",
    "//double.md",
    "/a//b.md",
    "/trailing/",
    "relative.md",
    "",
    "/",
    "/ctl\x01.md",
    "/nul\x00.md",
    "/nl\n.md",
    "/del\x7f.md",
    "/zw\u200b.md",
    "/ls\u2028.md",
    "/cafe\u0301.md",
    "/" + "x" * 1030,
    "/" + "/".join(["s"] * 21),
    "/" + "é" * 600,
]


def test_hostile_paths_never_escape_the_mount(open_dir: Path) -> None:
    require_fuse()
    with Hostile() as srv:
        for p in BAD_PATHS:
            srv.add(p, "hostile\n")
        srv.add("/.anthropic-memory-store", "version 1\nmemstore_other")
        srv.add("/ok.md", "fine\n")
        srv.add("/dir/ok2.md", "fine too\n")
        deep = "/" + "/".join(["d"] * 19) + "/leaf.md"  # 20 segments: allowed
        srv.add(deep, "deep\n")
        srv.add("/" + "y" * 1000 + ".md", "long\n")  # 1,004 bytes: allowed, shown shortened
        before = tree_listing(open_dir)
        proc = start_mount(open_dir, srv.url, srv.store_id, "--sync-interval", "5")
        try:
            root = proc.mountpoint
            names = sorted(os.listdir(root))
            long_name = next(n for n in names if n.startswith("yyy"))
            assert len(long_name) <= 255 and long_name.endswith(".md")
            assert names == sorted([MARKER_NAME, "d", "dir", "ok.md", long_name])
            assert (root / long_name).read_text() == "long\n"
            assert (root / MARKER_NAME).read_bytes() == marker_content(srv.store_id)
            assert (root / "ok.md").read_text() == "fine\n"
            assert (root / "dir/ok2.md").read_text() == "fine too\n"
            assert (root / deep[1:]).read_text() == "deep\n"
            proc.sync()
            log = proc.log()
            skipped = log.count("the server listed a path no memory can have; skipping")
            assert skipped >= len(BAD_PATHS), log[-3000:]
            assert "the server listed the reserved marker path; skipping" in log
            # nothing appeared outside the mount point and the cache directory
            after = tree_listing(open_dir, skip=(root, open_dir / "mnt-cache"))
            assert after - before <= {"mnt", "mnt-cache", "mnt.log"}
            assert not any(
                "memfs-escape-f3a9" in p
                for p in tree_listing(Path("/tmp"), skip=(Path("/tmp/pytest-of-root"), root))
            )
            cache_files_are_expected(open_dir / "mnt-cache")
            no_daemon_errors(proc)
        finally:
            proc.cleanup()


def test_hostile_content_sha_cannot_touch_files_outside_the_cache(open_dir: Path) -> None:
    """`content_sha256` names the object file: a server must not be able to point it at
    `../../victim` or `/abs/victim` (read, or deleted as a "torn object")."""
    require_fuse()
    victim = open_dir / "victim.txt"
    victim.write_text("do not touch\n")
    with Hostile() as srv:
        srv.add("/relative.md", "x", sha="../../victim.txt", size=13)
        srv.add("/absolute.md", "y", sha=str(victim), size=13)
        srv.add("/short.md", "z", sha="ab", size=1)
        srv.add("/ok.md", "fine\n")
        proc = start_mount(open_dir, srv.url, srv.store_id)
        try:
            root = proc.mountpoint
            assert (root / "ok.md").read_text() == "fine\n"
            got = run_ops(
                [
                    (n, "read", {"path": str(root / n)})
                    for n in ("relative.md", "absolute.md", "short.md")
                ],
                user="root",
            )
            # never the victim's bytes; a lying sha is the server's error, not content
            assert all(v != "ok:do not touch\n" for v in got.values()), got
            assert victim.read_text() == "do not touch\n"
            proc.sync()
            assert victim.exists() and victim.read_text() == "do not touch\n"
            cache_files_are_expected(open_dir / "mnt-cache")
            no_daemon_errors(proc)
        finally:
            proc.cleanup()
    assert victim.read_text() == "do not touch\n"


def test_hostile_volume_10000_memories_and_full_size_contents(open_dir: Path) -> None:
    require_fuse()
    with Hostile() as srv:
        for i in range(10_000):
            srv.add(f"/many/m{i:05d}.md", f"memory {i}\n")
        big = {
            f"/big{i}.md": (chr(ord("a") + i) * (MAX_CONTENT_BYTES - 1) + "\n") for i in range(3)
        }
        for p, text in big.items():
            srv.add(p, text)
        srv.add("/multibyte.md", "é" * (MAX_CONTENT_BYTES // 2))  # 102,400 bytes
        t0 = time.monotonic()
        proc = start_mount(open_dir, srv.url, srv.store_id, "--read-only")
        try:
            root = proc.mountpoint
            names = os.listdir(root / "many")
            assert len(names) == 10_000
            assert time.monotonic() - t0 < 60
            for p, text in big.items():
                data = (root / p[1:]).read_bytes()
                assert len(data) == MAX_CONTENT_BYTES and data == text.encode()
            assert (root / "multibyte.md").stat().st_size == MAX_CONTENT_BYTES
            assert (root / "multibyte.md").read_text() == "é" * (MAX_CONTENT_BYTES // 2)
            assert (root / "many/m09999.md").read_text() == "memory 9999\n"
            st = os.statvfs(root)
            assert st.f_files - st.f_ffree >= 10_000
            no_daemon_errors(proc)
        finally:
            proc.cleanup()


def read_bounded(path: Path, results: dict[str, Any]) -> None:
    t0 = time.monotonic()
    try:
        results[path.name] = ("ok", path.read_bytes(), time.monotonic() - t0)
    except OSError as e:
        results[path.name] = (errno.errorcode.get(e.errno or 0), None, time.monotonic() - t0)


def test_unavailable_content_answers_eio_within_the_content_timeout(open_dir: Path) -> None:
    """Invalid UTF-8 on the wire (a lone surrogate in JSON), garbage bodies, an HTML
    answer and a request that is never answered: each read gets EIO within the 30 s
    content timeout, while the rest of the mount keeps answering at once."""
    require_fuse()
    with Hostile() as srv:
        ids = {
            "utf.md": srv.add("/utf.md", "bad \ud800 surrogate"),
            "garbage.md": srv.add("/garbage.md", "garbage"),
            "html.md": srv.add("/html.md", "html"),
            "hang.md": srv.add("/hang.md", "hang"),
        }
        srv.behaviour.update(
            {ids["garbage.md"]: "garbage", ids["html.md"]: "html", ids["hang.md"]: "hang"}
        )
        srv.add("/ok.md", "fine\n")
        proc = start_mount(open_dir, srv.url, srv.store_id, "--read-only")
        try:
            root = proc.mountpoint
            results: dict[str, Any] = {}
            threads = [
                threading.Thread(target=read_bounded, args=(root / n, results), daemon=True)
                for n in ids
            ]
            for t in threads:
                t.start()
            # Once the never-answered retrieve is at the server, hang.md's content is
            # pending in the daemon: the checks below run while it waits, not before.
            eventually(lambda: ids["hang.md"] in srv.retrieved, "hang.md fetched", timeout=30)
            t0 = time.monotonic()
            assert (root / "ok.md").read_text() == "fine\n"
            assert sorted(os.listdir(root)) == sorted([MARKER_NAME, "ok.md", *ids])
            assert os.stat(root / "hang.md").st_size == 4
            assert time.monotonic() - t0 < 2, "the mount stalled behind pending reads"
            hang_read = threads[list(ids).index("hang.md")]
            assert hang_read.is_alive() and "hang.md" not in results, (
                "hang.md's read ended before the checks: they did not run beside it"
            )
            for t in threads:
                t.join(60)
            assert not any(t.is_alive() for t in threads), "a read hung past 60 s"
            for name in ids:
                code, data, _took = results[name]
                assert code == "EIO", (name, code, data)
            slow = {n: round(r[2], 1) for n, r in results.items() if r[2] > 40}
            # the content timeout is 30 s; a read must not wait for it twice
            assert slow == {}, f"reads took longer than the 30 s content timeout: {slow}"
            log = proc.log()
            assert "the server sent content that is not valid UTF-8; ignoring it" in log
            # The real cause where there is one, the timeout only where there is not.
            for name in ("utf.md", "garbage.md", "html.md"):
                assert re.search(
                    rf"memory content unavailable; the read fails with EIO .*path=/{name} ", log
                ), name
            assert (
                "content did not arrive in time memory_store_id=memstore_hostile path=/hang.md"
                in log
            )
            no_daemon_errors(proc)
        finally:
            proc.cleanup()


def test_server_that_hangs_or_answers_garbage_after_mount(open_dir: Path) -> None:
    """Handlers never wait on the network: with the server silent or spewing garbage,
    every system call on cached content answers at once, writes are journaled, `sync`
    reports failure in bounded time, and unmount ends within --flush-timeout."""
    require_fuse()
    with Hostile() as srv:
        srv.add("/a.md", "cached\n")
        proc = start_mount(open_dir, srv.url, srv.store_id, "--flush-timeout", "3")
        try:
            root = proc.mountpoint
            assert (root / "a.md").read_text() == "cached\n"
            for mode in ("hang", "garbage"):
                srv.mode = mode
                t0 = time.monotonic()
                got = run_ops(
                    [
                        ("read", "read", {"path": str(root / "a.md")}),
                        ("list", "listdir", {"path": str(root)}),
                        (
                            "create",
                            "open",
                            {"path": str(root / f"{mode}.md"), "flags": os.O_CREAT | os.O_WRONLY},
                        ),
                        ("mkdir", "mkdir", {"path": str(root / f"{mode}-dir")}),
                        (
                            "rename",
                            "rename",
                            {"src": str(root / f"{mode}-dir"), "dst": str(root / f"{mode}-dir2")},
                        ),
                        (
                            "xattr",
                            "getxattr",
                            {"path": str(root / "a.md"), "name": "user.memfs.state"},
                        ),
                    ],
                    user="root",
                )
                assert time.monotonic() - t0 < 5, mode
                assert got["read"] == "ok:cached\n" and got["create"] == "ok", got
                assert got["mkdir"] == got["rename"] == "ok" and got["xattr"] == "ok:clean"
                t0 = time.monotonic()
                result = proc.memfs("sync", str(root), "--timeout", "5", check=False, timeout=30)
                assert result.returncode == 1, result.stdout
                assert time.monotonic() - t0 < 15
                proc.memfs("status", str(root), "--json")
                assert proc.proc is not None and proc.proc.poll() is None
            srv.mode = "hang"
            t0 = time.monotonic()
            proc.expect_exit(1)
            assert proc.stop(timeout=30) == 1  # unpushed files: exit 1, never a hang
            assert time.monotonic() - t0 < 15
            assert not is_mounted(root)
            assert "memory flush left" in proc.log()
        finally:
            srv.mode = "ok"
            proc.cleanup()


@pytest.mark.parametrize("mode", ["garbage", "hang"])
def test_start_up_against_a_hostile_server_fails_in_bounded_time(
    request: pytest.FixtureRequest, open_dir: Path, mode: str
) -> None:
    """Garbage fails at once; silence fails after the start-up first-byte bound (5 s)."""
    require_fuse()
    with Hostile() as srv:
        srv.mode = mode
        mp = open_dir / "mnt"
        mp.mkdir()
        env = {**os.environ, "ANTHROPIC_BASE_URL": srv.url}
        env.pop("ANTHROPIC_API_KEY", None)
        cmd = [
            sys.executable,
            "-m",
            "memfs.cli",
            "--log-level",
            "error",
            "mount",
            srv.store_id,
            str(mp),
            "--cache-dir",
            str(open_dir / "cache"),
        ]
        t0 = time.monotonic()
        try:
            result = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=150)
        finally:
            if is_mounted(mp):
                subprocess.run(["fusermount3", "-u", "-z", str(mp)], check=False)
        took = time.monotonic() - t0
        assert took < 130
        assert result.returncode == 3, result.stderr
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr
        assert "cannot reach the store at" in result.stderr
        assert not is_mounted(mp)
        assert os.listdir(mp) == []
        print(f"start-up against a {mode} server gave up after {took:.1f}s")


def test_garbage_on_a_control_socket_does_not_end_the_daemon(
    open_dir: Path, shared_server: ServerProcess, shared_api: Api
) -> None:
    require_fuse()
    sid = str(shared_api.create_store("control garbage")["id"])
    runtime = open_dir / "rt"
    runtime.mkdir(mode=0o700)
    proc = start_mount(open_dir, shared_server.url, sid, env={"XDG_RUNTIME_DIR": str(runtime)})
    try:
        sock_path = next((runtime / "memfs").glob("*.sock"))
        assert os.stat(sock_path).st_mode & 0o077 == 0
        for payload in (
            b"\xff\xfe\n",
            b"[1,2]\n",
            b'{"op": "nope"}\n',
            b"x" * 70000,
            b'{"op": "status"',
        ):
            with socket.socket(socket.AF_UNIX) as s:
                s.settimeout(5)
                s.connect(str(sock_path))
                s.sendall(payload)
                s.shutdown(socket.SHUT_WR)
                try:
                    s.recv(65536)
                except TimeoutError:
                    pytest.fail(f"control socket hung on {payload[:20]!r}")
        (proc.mountpoint / "still.md").write_text("alive\n")
        proc.sync()
        assert [m["path"] for m in shared_api.list_memories(sid)] == ["/still.md"]
        no_daemon_errors(proc)
    finally:
        proc.cleanup()


def test_sigkill_of_mount_leaves_no_writable_bare_directory(
    open_dir: Path, shared_server: ServerProcess, shared_api: Api
) -> None:
    require_fuse()
    sid = str(shared_api.create_store("bare dir")["id"])
    proc = start_mount(open_dir, shared_server.url, sid)
    try:
        proc.kill()
        with pytest.raises(OSError) as info:
            (proc.mountpoint / "x.md").write_text("lost?")
        assert info.value.errno == errno.ENOTCONN
    finally:
        proc.cleanup()
