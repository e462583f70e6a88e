"""A writable mount with --zero-message-opens: the kernel sends no OPEN, RELEASE or FLUSH
(OPEN and FLUSH answer ENOSYS once), so a warm `cat` or `grep -r` costs no request, and
every write still lands, is pushed, and is named in the audit trail. What moves or is
given up (docs/reliability.md, "Zero-message opens") is asserted here too: O_TRUNC
arrives as SETATTR, and bytes that only turn out invalid later (written out of order)
are refused at fsync and at the push, not at close. On a stock pyfuse3 the flag changes
nothing (one OPEN per open, EILSEQ at close), and these tests check that instead."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from memfs.state.utf8 import NOT_UTF8
from tests.support.api import Api
from tests.support.files import store_contents
from tests.support.mount import MountProcess, mount_store
from tests.support.server import ServerProcess

# A refusal that waits for new content (`status --json`, refused_files).
PERMANENT = {"transient": False, "next_retry": None}

pytestmark = [pytest.mark.fuse, pytest.mark.deadline(180)]

OPEN_REQUESTS = ("open", "release", "flush")
PYTHON3 = os.path.join(os.path.dirname(sys.executable), "python3")


@pytest.fixture
def zw(tmp_path: Path, shared_server: ServerProcess, shared_api: Api, store: dict[str, Any]) -> Any:
    sid = str(store["id"])
    for i in range(20):
        shared_api.create_memory(sid, f"/many/n{i:02}.md", f"note {i}\n")
    shared_api.create_memory(sid, "/a.md", "alpha\n")
    shared_api.create_memory(sid, "/long.md", "0123456789\n" * 10)
    proc = mount_store(
        tmp_path, shared_server.url, sid, "--zero-message-opens", "--sync-interval", "3600"
    )
    try:
        yield proc
    finally:
        proc.cleanup()


def used(proc: MountProcess) -> bool:
    """Whether this build and kernel serve zero-message opens (else: the stock path)."""
    pyfuse3 = proc.mount_status()["pyfuse3"]
    assert pyfuse3["zero_message_opens_used"] == pyfuse3["zero_message_opens"]
    return bool(pyfuse3["zero_message_opens_used"])


def opens(proc: MountProcess) -> dict[str, int]:
    got = proc.fuse_requests()
    return {k: got.get(k, 0) for k in OPEN_REQUESTS}


def sh(script: str, cwd: Path) -> None:
    subprocess.run(["sh", "-c", script], cwd=cwd, check=True, timeout=30)


def test_warm_reads_cost_no_open_requests(zw: MountProcess) -> None:
    root = zw.mountpoint
    assert (root / "a.md").read_text() == "alpha\n"
    subprocess.run(["grep", "-rq", "nothing like this", str(root)], check=False)
    before = opens(zw)
    for _ in range(5):
        assert (root / "a.md").read_text() == "alpha\n"
    grep = subprocess.run(
        ["grep", "-rl", "note 1", str(root / "many")], capture_output=True, text=True, check=True
    )
    assert sorted(Path(p).name for p in grep.stdout.split()) == [
        "n01.md",
        *[f"n{i}.md" for i in range(10, 20)],
    ]
    spent = {k: v - before[k] for k, v in opens(zw).items()}
    if used(zw):
        assert spent == dict.fromkeys(OPEN_REQUESTS, 0), spent
    else:
        assert spent["open"] >= 5 + 20 and spent["release"] == spent["open"], spent


def test_shell_writes_land_locally_and_in_the_store(
    zw: MountProcess, shared_api: Api, store: dict[str, Any]
) -> None:
    root = zw.mountpoint
    sh("echo short > long.md", root)  # O_TRUNC of a longer file: SETATTR(size=0)
    assert (root / "long.md").read_text() == "short\n"
    sh("echo more >> long.md", root)
    sh("sed -i s/short/brief/ long.md", root)
    assert (root / "long.md").read_text() == "brief\nmore\n"
    big = "".join(f"line {i}\n" for i in range(5_000))  # many WRITEs
    subprocess.run(
        [PYTHON3, "-c", "import sys; open('big.md', 'w').write(sys.stdin.read())"],
        input=big,
        text=True,
        cwd=root,
        check=True,
        timeout=30,
    )
    (root / ".a.md.tmp").write_text("alpha, saved\n")  # an editor's save
    os.replace(root / ".a.md.tmp", root / "a.md")
    sh(
        "truncate -s 3 many/n00.md && printf 'x' | dd of=many/n01.md bs=1 seek=2 "
        "conv=notrunc status=none",
        root,
    )
    local = {
        "/long.md": "brief\nmore\n",
        "/big.md": big,
        "/a.md": "alpha, saved\n",
        "/many/n00.md": "not",
        "/many/n01.md": "noxe 1\n",
    }
    for path, text in local.items():
        assert (root / path.lstrip("/")).read_text() == text, path
    zw.sync()
    remote = store_contents(shared_api, str(store["id"]))
    for path, text in local.items():
        assert remote[path] == text, path
    assert remote["/many/n02.md"] == "note 2\n"
    if used(zw):  # the one OPEN and FLUSH answered ENOSYS, then none
        assert opens(zw) == {"open": 1, "release": 0, "flush": 1}


def test_an_append_after_a_pulled_change_lands_after_it(
    zw: MountProcess, shared_api: Api, store: dict[str, Any]
) -> None:
    sid = str(store["id"])
    root = zw.mountpoint
    assert (root / "a.md").read_text() == "alpha\n"  # the kernel knows its size
    a = next(m for m in shared_api.list_memories(sid) if m["path"] == "/a.md")
    shared_api.update_memory(sid, a["id"], content="alpha, much longer after a remote edit\n")
    zw.sync()
    sh("echo local >> a.md", root)
    expected = "alpha, much longer after a remote edit\nlocal\n"
    assert (root / "a.md").read_text() == expected
    zw.sync()
    assert store_contents(shared_api, str(store["id"]))["/a.md"] == expected


def test_an_append_on_a_descriptor_opened_before_a_pull_lands_at_the_end(
    zw: MountProcess, shared_api: Api, store: dict[str, Any]
) -> None:
    sid = str(store["id"])
    root = zw.mountpoint
    fd = os.open(root / "a.md", os.O_WRONLY | os.O_APPEND)
    try:
        a = next(m for m in shared_api.list_memories(sid) if m["path"] == "/a.md")
        shared_api.update_memory(sid, a["id"], content="alpha, much longer after a remote edit\n")
        zw.sync()
        os.write(fd, b"local\n")  # the kernel's size is the old one: memfs moves it
        expected = "alpha, much longer after a remote edit\nlocal\n"
        assert os.fstat(fd).st_size == len(expected)  # and the kernel's size follows
    finally:
        os.close(fd)
    assert (root / "a.md").read_text() == expected
    zw.sync()
    assert store_contents(shared_api, sid)["/a.md"] == expected


def test_a_shell_write_is_pushed_soon_after_its_close(
    zw: MountProcess, shared_api: Api, store: dict[str, Any]
) -> None:
    if not used(zw):
        pytest.skip("a stock pyfuse3: RELEASE says when a writer closed, as always")
    sid = str(store["id"])
    took = []
    for i in range(3):
        sh(f"echo closed {i} > soon{i}.md", zw.mountpoint)
        start = time.monotonic()
        while store_contents(shared_api, sid).get(f"/soon{i}.md") != f"closed {i}\n":
            assert time.monotonic() - start < 10, "never pushed"
            time.sleep(0.02)
        took.append(time.monotonic() - start)
    # 0.2 s after the close (push soon), not after the 2 s quiet spell
    assert sorted(took)[1] < 1.5, took
    watch = zw.mount_status()["close_watch"]
    assert watch["active"] and watch["closes"] >= 3 and watch["overflows"] == 0, watch


def test_non_utf8_is_refused_at_the_write_and_later_bytes_at_fsync_and_the_push(
    zw: MountProcess, shared_api: Api, store: dict[str, Any]
) -> None:
    sid = str(store["id"])
    f = zw.mountpoint / "bin.md"
    fd = os.open(f, os.O_WRONLY | os.O_CREAT, 0o644)
    os.write(fd, "ok é".encode()[:-1])  # a sequence cut at the end of a write: not yet
    os.write(fd, "é".encode()[1:] + b"\n")  # ... and finished by the next
    with pytest.raises(OSError) as info:
        os.write(fd, b"\xff\xfe\n")  # invalid as written: refused at once
    assert info.value.errno == errno.EILSEQ
    os.fsync(fd)  # what landed is valid
    os.close(fd)
    assert f.read_bytes() == "ok é\n".encode()  # the refused write changed nothing
    # ... but what came before it is held back, as after EFBIG: a refused write says
    # the file is not what its writer meant, until a write or truncate succeeds.
    zw.memfs("sync", str(zw.mountpoint), check=False)  # exit 1: a file was refused
    status = zw.mount_status()["stores"][0]
    assert status["refused_files"] == [{"path": "/bin.md", "why": NOT_UTF8, **PERMANENT}], status
    assert "/bin.md" not in store_contents(shared_api, sid)
    with f.open("a") as again:
        again.write("fine\n")
    zw.sync()
    assert store_contents(shared_api, sid)["/bin.md"] == "ok é\nfine\n"
    # Bytes written out of order (a continuation after a hole) are only invalid once
    # the rest never comes: refused at fsync and at the push, and kept.
    g = zw.mountpoint / "holes.md"
    fd = os.open(g, os.O_WRONLY | os.O_CREAT, 0o644)
    os.pwrite(fd, "é".encode()[1:] + b"\n", 4)
    with pytest.raises(OSError) as info:
        os.fsync(fd)
    assert info.value.errno == errno.EILSEQ
    if used(zw):
        os.close(fd)  # no FLUSH: close cannot refuse
    else:
        with pytest.raises(OSError) as info:
            os.close(fd)
        assert info.value.errno == errno.EILSEQ
    assert g.read_bytes() == b"\0\0\0\0\xa9\n"  # nothing lost
    zw.memfs("sync", str(zw.mountpoint), check=False)  # exit 1: a file was refused
    status = zw.mount_status()["stores"][0]
    assert status["refused_files"] == [
        {"path": "/holes.md", "why": "content is not valid UTF-8", **PERMANENT}
    ], status
    assert "/holes.md" not in store_contents(shared_api, sid)
    g.write_text("ok now\n")
    zw.sync()
    assert store_contents(shared_api, sid)["/holes.md"] == "ok now\n"


def test_the_trail_names_each_writer(zw: MountProcess) -> None:
    f = zw.mountpoint / "notes.md"
    subprocess.run(["sh", "-c", f"echo one > {f}"], check=True, timeout=30)
    subprocess.run(
        [PYTHON3, "-c", f"open({str(f)!r}, 'a').write('two\\n')"], check=True, timeout=30
    )
    subprocess.run(["sed", "-i", "s/one/uno/", str(f)], check=True, timeout=30)
    subprocess.run(["sh", "-c", f"echo three >> {f}"], check=True, timeout=30)
    assert f.read_text() == "uno\ntwo\nthree\n"
    out = zw.memfs("audit", str(zw.mountpoint), "--json").stdout
    seen = [
        (r["comm"], r["op"], r["path"]) for r in json.loads(out)["records"] if r["kind"] == "change"
    ]
    temp = seen[3][2]
    assert seen == [
        ("sh", "create", "/notes.md"),
        ("sh", "write", "/notes.md"),
        ("python3", "write", "/notes.md"),
        ("sed", "create", temp),
        ("sed", "write", temp),
        ("sed", "rename", temp),
        ("sh", "write", "/notes.md"),
    ]


def test_open_files_and_refusals(zw: MountProcess) -> None:
    root = zw.mountpoint
    fd = os.open(root / "many" / "n03.md", os.O_RDONLY)
    try:
        os.unlink(root / "many" / "n03.md")
        assert os.read(fd, 100) == b"note 3\n"  # an open file outlives its name
    finally:
        os.close(fd)
    marker = root / ".anthropic-memory-store"
    before = marker.read_bytes()
    try:
        fd = os.open(marker, os.O_WRONLY)  # root may open 0444 files for write
    except PermissionError:
        pass  # the kernel's mode check, for everyone else
    else:
        try:
            with pytest.raises(OSError) as info:
                os.write(fd, b"x")
            assert info.value.errno == errno.EPERM
        finally:
            os.close(fd)
    assert marker.read_bytes() == before
    with pytest.raises(IsADirectoryError):
        os.open(root / "many", os.O_WRONLY)
