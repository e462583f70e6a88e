"""Races between writers that must not lose a write (issue 36, "Races lose acknowledged
writes"): a real mount with push soon and the watch, another client writing through the
API at the same time, and the write patterns of real tools.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.support.api import Api
from tests.support.mount import MountProcess, is_mounted, lazy_unmount, mount_store
from tests.support.recovery import recover
from tests.support.server import ServerProcess

pytestmark = pytest.mark.fuse


def _api_writer(api: Api, sid: str, mid: str, stop: threading.Event, every: float) -> int:
    """Rewrite the first line of the memory through the API until told to stop."""
    n = 0
    while not stop.is_set():
        current = api.get_memory(sid, mid)["content"]
        lines = current.split("\n")
        lines[0] = f"api {n}"
        try:
            api.update_memory(
                sid,
                mid,
                content="\n".join(lines),
                precondition={"type": "content_sha256", "content_sha256": _sha(current)},
            )
            n += 1
        except Exception:
            pass  # the mount's push won the race: read again
        stop.wait(every)
    return n


def _api_edit(api: Api, sid: str, mid: str, edit: Callable[[str], str]) -> None:
    """One edit through the API as a careful client makes it: on the content it read
    (a precondition), read again when another writer came first. Without one, a
    mount's push landing between the read and the write is overwritten: a loss the
    test would blame on memfs (a clean-clone run lost 5 lines so)."""
    for _ in range(50):
        current = api.get_memory(sid, mid)["content"]
        try:
            api.update_memory(
                sid,
                mid,
                content=edit(current),
                precondition={"type": "content_sha256", "content_sha256": _sha(current)},
            )
            return
        except Exception:
            time.sleep(0.05)  # a mount pushed first: read again
    raise AssertionError("the API edit never won its precondition")


def _versions_since(api: Api, sid: str, t0: float) -> list[dict[str, Any]]:
    """The store's versions made since `t0` (time.time()), of the newest 100."""
    since = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t0))
    page = api.request("GET", f"/v1/memory_stores/{sid}/memory_versions", params={"limit": 100})
    return [v for v in page.json()["data"] if v["created_at"] >= since]


def _sha(text: str) -> str:
    import hashlib

    return hashlib.sha256(text.encode()).hexdigest()


def test_vim_saves_racing_an_api_writer_lose_nothing(
    tmp_path: Path, server: ServerProcess, api: Api
) -> None:
    """60 vim saves 50 ms apart while the API rewrites the first line every 150 ms:
    every save vim made is in the file when vim returns, and in the store at the end.

    vim refuses to write a file that changed since it read it (its mtime check, "The
    file has been changed since reading it"), here when a pull lands the API's change
    between vim's read and its write. In -es mode it asks on stdin; with no answer it
    quits with exit 0 and nothing written, on any filesystem (a local disk too), which
    is what a save "lost with exit 0" was. Answered "n", the buffer stays modified and
    the script exits 3: a refusal vim reports, the other writer's change kept."""
    assert shutil.which("vim"), "vim is one of scripts/install's packages"
    sid = str(api.create_store("vim-race")["id"])
    mid = api.create_memory(sid, "/notes.md", "api start\nbody\n")["id"]
    mount = mount_store(tmp_path, server.url, sid, name="m")
    f = mount.mountpoint / "notes.md"
    stop = threading.Event()
    writer = threading.Thread(target=_api_writer, args=(api, sid, mid, stop, 0.15))
    writer.start()
    saved, refused, lost_at_once = [], [], []
    try:
        for i in range(60):
            done = subprocess.run(
                ["vim", "-u", "NONE", "-N", "-es", "-c", f"$put ='saved {i}'", "-c", "w",
                 "-c", "if &modified | cquit 3 | endif", "-c", "q", str(f)],
                input=b"n\n", capture_output=True, timeout=30,
            )  # fmt: skip
            assert done.returncode in (0, 3), done.stderr
            if done.returncode == 3:
                refused.append(i)
                continue
            saved.append(i)
            if f"saved {i}\n" not in f.read_text():
                lost_at_once.append(i)
            time.sleep(0.05)
    finally:
        stop.set()
        writer.join(30)
    mount.sync()
    final = api.get_memory(sid, mid)["content"]
    assert lost_at_once == []
    missing = [i for i in saved if f"saved {i}\n" not in final]
    assert missing == [], final
    assert len(refused) <= 15, refused  # vim's own refusals stay the exception


def _eventually(check: Callable[[], bool], what: str, within: float = 20.0) -> float:
    t0 = time.monotonic()
    while not check():
        assert time.monotonic() - t0 < within, f"not within {within:g}s: {what}"
        time.sleep(0.02)
    return time.monotonic() - t0


def _text(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def test_renames_meeting_appends_from_another_mount_are_kept(
    tmp_path: Path, server: ServerProcess, api: Api
) -> None:
    """Mount a renames 20 files while mount b appends to each of them: every rename is
    kept (before: 14 of 20 undone, "moved both locally and remotely"), every appended
    line is at the new path, also through a's unmount."""
    sid = str(api.create_store("rename-race")["id"])
    for i in range(20):
        api.create_memory(sid, f"/f{i:02d}.md", f"file {i}\n")
    a = mount_store(tmp_path, server.url, sid, name="a")
    b = mount_store(tmp_path, server.url, sid, name="b")
    stop = threading.Event()
    appended: dict[int, int] = dict.fromkeys(range(20), 0)

    def append() -> None:
        while not stop.is_set():
            for i in range(20):
                for name in (f"f{i:02d}.md", f"g{i:02d}.md"):
                    try:  # O_APPEND without O_CREAT: a file moved away is not made anew
                        fd = os.open(b.mountpoint / name, os.O_WRONLY | os.O_APPEND)
                    except FileNotFoundError:
                        continue
                    try:
                        os.write(fd, f"b {appended[i]}\n".encode())
                    finally:
                        os.close(fd)
                    appended[i] += 1
                    break
            stop.wait(0.05)

    writer = threading.Thread(target=append)
    writer.start()
    try:
        for i in range(20):
            (a.mountpoint / f"f{i:02d}.md").rename(a.mountpoint / f"g{i:02d}.md")
            time.sleep(0.1)
        time.sleep(1)
    finally:
        stop.set()
        writer.join(30)
    b.sync()
    a.sync()
    b.sync()
    a.memfs("unmount", str(a.mountpoint))
    assert a.wait() == 0
    paths = {m["path"]: m for m in api.list_memories(sid)}
    assert sorted(paths) == [f"/g{i:02d}.md" for i in range(20)]
    for i in range(20):
        content = api.get_memory(sid, paths[f"/g{i:02d}.md"]["id"])["content"]
        missing = [n for n in range(appended[i]) if f"b {n}\n" not in content]
        assert missing == [], (i, content)


def test_a_steady_stream_of_appends_reaches_the_other_mount_within_two_seconds(
    tmp_path: Path, server: ServerProcess, api: Api
) -> None:
    """One append every 50 ms for 8 s: the other mount sees each line < 2 s later
    (before: p50 6.9 s, max 15 s; only the interval pushed)."""
    sid = str(api.create_store("stream")["id"])
    api.create_memory(sid, "/log.md", "start\n")
    a = mount_store(tmp_path, server.url, sid, name="a")
    b = mount_store(tmp_path, server.url, sid, name="b")
    _eventually(lambda: _text(b.mountpoint / "log.md") == "start\n", "b has the file")
    written: dict[int, float] = {}
    seen: dict[int, float] = {}
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set() or len(seen) < len(written):
            content = _text(b.mountpoint / "log.md")
            now = time.monotonic()
            for n in list(written):
                if n not in seen and f"line {n}\n" in content:
                    seen[n] = now
            if time.monotonic() - max(written.values(), default=now) > 10:
                return
            time.sleep(0.02)

    watcher = threading.Thread(target=watch)
    watcher.start()
    t0 = time.monotonic()
    n = 0
    while time.monotonic() - t0 < 8:
        with open(a.mountpoint / "log.md", "a") as f:
            f.write(f"line {n}\n")
        written[n] = time.monotonic()
        n += 1
        time.sleep(0.05)
    stop.set()
    watcher.join(30)
    lags = sorted(seen[k] - written[k] for k in seen)
    assert len(seen) == len(written), f"{len(written) - len(seen)} lines never seen"
    assert lags[-1] < 2.0, f"p50 {lags[len(lags) // 2]:.2f}s max {lags[-1]:.2f}s"


def test_a_file_held_open_and_written_is_seen_within_the_interval(
    tmp_path: Path, server: ServerProcess, api: Api
) -> None:
    """A log a long-running process keeps open: its flushed lines reach the other mount
    within the interval, not at its close (before: 140 s and counting)."""
    sid = str(api.create_store("held-open")["id"])
    a = mount_store(tmp_path, server.url, sid, "--sync-interval", "5", name="a")
    b = mount_store(tmp_path, server.url, sid, name="b")
    with open(a.mountpoint / "held.log", "w") as f:
        f.write("first\n")
        f.flush()
        took = _eventually(lambda: _text(b.mountpoint / "held.log") == "first\n", "first", 15)
        f.write("second\n")
        f.flush()
        took2 = _eventually(
            lambda: _text(b.mountpoint / "held.log") == "first\nsecond\n", "second", 15
        )
    # Pushed one interval (5 s) after it was written, then a pass later on the other mount
    # (before: never, while the file stayed open under the watch); loaded CI adds seconds.
    assert took < 10 and took2 < 10


def test_four_appending_mounts_and_one_api_write_lose_no_line_to_a_copy(
    tmp_path: Path, server: ServerProcess, api: Api
) -> None:
    """Four mounts append to one memory every 0.2 s for 8 s; one write through the API
    comes in the middle. Every acknowledged line is in the store, none only in a conflict
    copy (before: 36-236 of ~1,130, and a merge storm of 35-48 versions a second)."""
    sid = str(api.create_store("appenders")["id"])
    mid = api.create_memory(sid, "/log.md", "top\n")["id"]
    mounts = [mount_store(tmp_path, server.url, sid, name=f"m{k}") for k in range(4)]
    for m in mounts:
        _eventually(lambda m=m: _text(m.mountpoint / "log.md") != "", "the file everywhere")
    stop = threading.Event()
    acked: list[str] = []
    lock = threading.Lock()

    def append(k: int) -> None:
        n = 0
        while not stop.is_set():
            line = f"m{k} {n}\n"
            with open(mounts[k].mountpoint / "log.md", "a") as f:
                f.write(line)
            with lock:
                acked.append(line)
            n += 1
            stop.wait(0.2)

    writers = [threading.Thread(target=append, args=(k,)) for k in range(4)]
    t0 = time.time()
    for w in writers:
        w.start()
    time.sleep(4)
    _api_edit(api, sid, mid, lambda text: text.replace("top\n", "top (edited by the API)\n"))
    time.sleep(4)
    stop.set()
    for w in writers:
        w.join(30)
    for _ in range(2):
        for m in mounts:
            m.sync()
    final = api.get_memory(sid, mid)["content"]
    lost = [line for line in acked if line not in final]
    assert lost == [], f"{len(lost)} of {len(acked)} lines not in the store"
    assert "top (edited by the API)\n" in final
    versions = _versions_since(api, sid, t0)
    # Four writers pushing at most once a second each, plus the API's write.
    assert len(versions) <= 4 * (time.time() - t0 + 2) + 1


def _conflict_copies(m: MountProcess) -> list[str]:
    """The bytes of every conflict copy `memfs conflicts` lists for mount `m`."""
    answer = json.loads(m.memfs("conflicts", str(m.mountpoint), "--json").stdout)
    (one,) = answer["mounts"]
    return [
        m.memfs("conflicts", "show", c["id"], "--mount", str(m.mountpoint)).stdout
        for c in one["conflicts"]
    ]


def test_four_appending_mounts_and_one_killed_and_recovered_lose_no_line_to_a_copy(
    tmp_path: Path, server: ServerProcess, api: Api
) -> None:
    """Four mounts append to one memory every 0.2 s; in the middle one daemon is killed
    with SIGKILL, and its mount recovered with the command `memfs status` prints while
    its appender keeps going (ENOTCONN while dead, then the new mount). Every
    acknowledged line is in the store, none only in a conflict copy, and the versions
    stay paced (before: 36-236 of ~1,130 lines only in copies, 35-48 versions a second
    for 6-11 s after the one extra change; issue 36)."""
    sid = str(api.create_store("appenders-kill")["id"])
    mid = api.create_memory(sid, "/log.md", "top\n")["id"]
    mounts = [mount_store(tmp_path, server.url, sid, name=f"m{k}") for k in range(4)]
    for m in mounts:
        _eventually(lambda m=m: _text(m.mountpoint / "log.md") != "", "the file everywhere")
    # Killed with SIGKILL (`kill` tells the watch to expect it); the recovered daemon
    # runs in the background and logs to the same file (the command names it), which
    # the watch checks with the killed one's.
    killed = mounts[1]
    root = killed.mountpoint
    stop = threading.Event()
    acked: list[str] = []
    errors: list[Counter[str]] = [Counter() for _ in mounts]
    lock = threading.Lock()

    def append(k: int) -> None:
        n = 0
        while not stop.is_set():
            line = f"m{k} {n}\n"
            n += 1
            try:  # acknowledged once write and close returned without an error
                fd = os.open(mounts[k].mountpoint / "log.md", os.O_WRONLY | os.O_APPEND)
                try:
                    os.write(fd, line.encode())
                finally:
                    os.close(fd)
            except OSError as e:
                errors[k][errno.errorcode.get(e.errno or 0, str(e.errno))] += 1
            else:
                with lock:
                    acked.append(line)
            stop.wait(0.2)

    writers = [threading.Thread(target=append, args=(k,)) for k in range(4)]
    t0 = time.time()
    try:
        for w in writers:
            w.start()
        time.sleep(4)
        killed.kill()
        with lock:
            before_kill = [line for line in acked if line.startswith("m1 ")]
        time.sleep(1)  # its appender meets the dead mount
        status = killed.memfs("status", str(root), check=False)
        assert status.returncode == 1, status.stderr
        (answer,) = json.loads(status.stdout)["mounts"]
        assert answer["state"] == "dead", answer
        recovered = recover(answer["recover"], killed.env)
        assert recovered.returncode == 0, recovered.stderr
        with lock:
            at_recovery = sum(1 for line in acked if line.startswith("m1 "))
        time.sleep(4)
    finally:
        stop.set()
        for w in writers:
            w.join(30)
    try:
        for _ in range(2):
            for m in mounts:
                m.sync()
        final = set(api.get_memory(sid, mid)["content"].splitlines(keepends=True))
        copied = {
            line
            for m in mounts
            for text in _conflict_copies(m)
            for line in text.splitlines(keepends=True)
        }
        # A dead mount answers ENOTCONN (ECONNABORTED: the one request in flight at the
        # kill); the others never fail.
        assert set(errors[1]) <= {"ENOTCONN", "ECONNABORTED"} and errors[1]["ENOTCONN"] > 0
        assert [errors[k] for k in (0, 2, 3)] == [Counter()] * 3, errors
        after = sum(1 for line in acked if line.startswith("m1 ")) - at_recovery
        assert before_kill and after > 0, (len(before_kill), after)
        # docs/reliability.md §2: a daemon crash, kill -9 or OOM kill keeps "every
        # acknowledged change" (the journal is written before the system call answers),
        # and the recovery pushes it: so every line the killed mount acknowledged before
        # the kill, fsynced or not, is in the store, as are all the others.
        lost_at_kill = [line for line in before_kill if line not in final]
        assert lost_at_kill == [], (
            f"{len(lost_at_kill)} lines acknowledged before the kill not in the store "
            f"({len(copied.intersection(lost_at_kill))} of them in a conflict copy)"
        )
        lost = [line for line in acked if line not in final]
        in_copies = [line for line in lost if line in copied]
        assert in_copies == [], f"{len(in_copies)} of {len(acked)} lines only in a copy"
        assert lost == [], f"{len(lost)} of {len(acked)} lines not in the store"
        versions = _versions_since(api, sid, t0)
        # Four writers pushing at most once a second each, plus the recovery's push of
        # what the journal held.
        assert len(versions) <= 4 * (time.time() - t0 + 2) + 1
        killed.memfs("unmount", str(root))
        assert not is_mounted(root)
        for m in (mounts[0], mounts[2], mounts[3]):
            assert m.stop() == 0  # while the server is up: its final pass has nothing left
    finally:
        if is_mounted(root):  # the recovered daemon, on a failure above
            killed.memfs("unmount", str(root), check=False)
        for _ in range(4):  # a dead mount, and the one that went over it
            lazy_unmount(root)


def _tree(root: Path) -> dict[str, str]:
    """Every file under `root` with its text, by store path."""
    return {
        "/" + str(p.relative_to(root)): p.read_text()
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.name != ".anthropic-memory-store"
    }


def test_a_file_in_one_mount_where_another_has_a_directory_converges(
    tmp_path: Path, server: ServerProcess, api: Api
) -> None:
    """Mount a makes 15 files `c<i>` while mount b makes 15 directories `c<i>/` with a
    file in each (issue 36 item 7; before: 10-20 files a mount unpushable forever, and
    `memfs sync` said ok). The store takes one shape for each name, both mounts show
    it, the other side's bytes are a conflict copy, and `memfs sync` exits 0 only
    once nothing is left unsettled."""
    sid = str(api.create_store("shapes")["id"])
    a = mount_store(tmp_path, server.url, sid, name="a")
    b = mount_store(tmp_path, server.url, sid, name="b")

    def files() -> None:
        for i in range(15):
            (a.mountpoint / f"c{i}").write_text(f"a's file {i}\n")

    def dirs() -> None:
        for i in range(15):
            (b.mountpoint / f"c{i}").mkdir()
            (b.mountpoint / f"c{i}" / "note.md").write_text(f"b's note {i}\n")

    writers = [threading.Thread(target=files), threading.Thread(target=dirs)]
    for w in writers:
        w.start()
    for w in writers:
        w.join(30)
    t0 = time.monotonic()
    while True:
        codes = [m.memfs("sync", str(m.mountpoint), check=False) for m in (a, b)]
        for r in codes:
            assert r.returncode in (0, 1), (r.stdout, r.stderr)
            # exit 1 names what is left: never "ok" with something unsettled
            assert (r.returncode == 1) == ("unsettled: " in r.stdout), r.stdout
        if all(r.returncode == 0 for r in codes):
            break
        assert time.monotonic() - t0 < 30, [r.stdout for r in codes]
    store: dict[str, str] = {}
    for m in api.list_memories(sid):
        store[m["path"]] = api.get_memory(sid, m["id"])["content"]
    for i in range(15):  # one shape for each name
        shapes = [p for p in (f"/c{i}", f"/c{i}/note.md") if p in store]
        assert len(shapes) == 1, (i, sorted(store))
    for m in (a, b):
        _eventually(lambda m=m: _tree(m.mountpoint) == store, f"{m.mountpoint} shows the store")
    kept: list[str] = []
    for m in (a, b):
        answer = json.loads(m.memfs("conflicts", str(m.mountpoint), "--json").stdout)
        for c in answer["mounts"][0]["conflicts"]:
            kept.append(m.memfs("conflicts", "show", c["id"]).stdout)
    losers = [f"a's file {i}\n" for i in range(15) if f"/c{i}" not in store]
    losers += [f"b's note {i}\n" for i in range(15) if f"/c{i}/note.md" not in store]
    assert sorted(kept) == sorted(losers)
