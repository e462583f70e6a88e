"""The audit trail through the real CLI on live mounts: each change names the process
that made it (`sh`, `python3`, `sed`, ...) and the version it became, and a `kill -9`
of the daemon loses none of the changes it acknowledged."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.api import Api
from tests.support.mount import MountProcess, mount_store
from tests.support.server import ServerProcess

pytestmark = [pytest.mark.fuse, pytest.mark.deadline(180)]

# Named python3 whatever sys.executable is called: the trail shows the command name.
PYTHON3 = os.path.join(os.path.dirname(sys.executable), "python3")


def trail(mount: MountProcess, *args: str) -> list[dict[str, Any]]:
    out = mount.memfs("audit", str(mount.mountpoint), "--json", *args).stdout
    records: list[dict[str, Any]] = json.loads(out)["records"]
    return records


def changes(records: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
    return [(r["comm"], r["op"], r["path"]) for r in records if r["kind"] == "change"]


def versions(mount: MountProcess, path: Path) -> list[str]:
    answer = json.loads(mount.memfs("log", str(path), "--json").stdout)
    return [v["id"] for v in answer["versions"]]


def run(*cmd: str) -> None:
    subprocess.run(cmd, check=True, timeout=30)


def test_each_change_names_its_process_and_the_version_it_became(
    quiet: MountProcess, shared_api: Api, store: dict[str, Any]
) -> None:
    sid = str(store["id"])
    f = quiet.mountpoint / "notes.md"
    run("sh", "-c", f"echo one > {f}")
    quiet.sync()
    run(PYTHON3, "-c", f"open({str(f)!r}, 'a').write('two\\n')")
    quiet.sync()
    run("sed", "-i", "s/one/uno/", str(f))
    quiet.sync()
    v3, v2, v1 = versions(quiet, f)
    assert f.read_text() == "uno\ntwo\n"

    # a conflict: the store changed the same lines meanwhile, so this edit loses and is
    # kept (an append after them would merge: neighbouring changes do, issue 36)
    (memory,) = shared_api.list_memories(sid)
    won = shared_api.update_memory(sid, memory["id"], content="remote\n")
    run("sh", "-c", f"echo mine > {f}")
    quiet.sync()
    run("rm", str(f))
    run("mkdir", str(quiet.mountpoint / "d"))
    quiet.sync()
    assert shared_api.list_memories(sid) == []

    records = trail(quiet)
    assert records[0]["kind"] == "mount" and records[0]["op"] == "mounted"
    assert records[0]["mount_path"] == str(quiet.mountpoint)
    seen = [r for r in records if r["kind"] == "change"]
    temp = seen[3]["path"]
    assert changes(records) == [
        ("sh", "create", "/notes.md"),
        ("sh", "write", "/notes.md"),
        ("python3", "write", "/notes.md"),
        ("sed", "create", temp),
        ("sed", "write", temp),
        ("sed", "rename", temp),
        ("sh", "truncate", "/notes.md"),
        ("sh", "write", "/notes.md"),
        ("rm", "unlink", "/notes.md"),
        ("mkdir", "mkdir", "/d"),
    ]
    assert seen[5]["to"] == "/notes.md"
    became = [(r["outcome"] or {}).get("version") for r in seen]
    assert became[:6] == [v1, v1, v2, v3, v3, v3]
    for overwrite in seen[6:8]:
        assert overwrite["outcome"]["op"] == "conflict"
        assert overwrite["outcome"]["version"] == won["memory_version_id"]
    assert seen[8]["outcome"]["op"] == "deleted"
    assert seen[9]["outcome"]["op"] == "local"
    for r in seen:
        assert r["pid"] > 0 and r["uid"] == os.getuid()
        assert r["local_path"] == str(quiet.mountpoint) + r["path"]

    text = quiet.memfs("audit", str(quiet.mountpoint)).stdout
    assert f"pushed as {v2}" in text.splitlines()[3] and "python3[" in text
    assert "lost a conflict to" in text and "deleted in the store" in text
    # --path takes a path in the mount and follows atomic saves into it
    only = trail(quiet, "--path", str(f))
    assert changes(only) == changes(records)[:9]
    assert trail(quiet, "--path", "/d") == [seen[9]]
    assert trail(quiet, "--since", "0s") == []
    # the trail holds no contents
    raw = b"".join(
        p.read_bytes() for p in (quiet.mountpoint.parent / "mnt-cache").glob("audit.jsonl*")
    )
    assert b"uno" not in raw and b"mine" not in raw and b"remote" not in raw


def test_the_trail_survives_kill_9_with_every_acknowledged_change(
    tmp_path: Path, shared_server: ServerProcess, shared_api: Api, store: dict[str, Any]
) -> None:
    sid = str(store["id"])
    first = mount_store(tmp_path, shared_server.url, sid, "--sync-interval", "3600")
    try:
        root = first.mountpoint
        run("sh", "-c", f"for i in $(seq 1 25); do echo $i > {root}/f$i.md; done")
        run(PYTHON3, "-c", f"open({str(root / 'py.md')!r}, 'w').write('py\\n')")
        run("mkdir", str(root / "sub"))
        run("mv", str(root / "f1.md"), str(root / "sub" / "moved.md"))
        run("rm", str(root / "f2.md"))
        run("truncate", "-s", "1", str(root / "f3.md"))
        first.kill()  # SIGKILL: no teardown, the mount is left dead
        expected = (
            [("sh", "create", f"/f{i}.md") for i in range(1, 26)]
            + [("sh", "write", f"/f{i}.md") for i in range(1, 26)]
            + [
                ("python3", "create", "/py.md"),
                ("python3", "write", "/py.md"),
                ("mkdir", "mkdir", "/sub"),
                ("mv", "rename", "/f1.md"),
                ("rm", "unlink", "/f2.md"),
                ("truncate", "truncate", "/f3.md"),
            ]
        )
        dead = trail(first)  # read from the cache directory of the dead mount
        assert sorted(changes(dead)) == sorted(expected)
        fates = {(r["op"], r["path"]): r["outcome"] for r in dead if r["kind"] == "change"}
        assert fates.pop(("mkdir", "/sub"))["op"] == "local"
        assert fates.pop(("create", "/f2.md"))["op"] == "removed"  # never pushed
        assert fates.pop(("write", "/f2.md"))["op"] == "removed"
        assert set(fates.values()) == {None}  # the rest waits for the next start
    finally:
        first.cleanup()
    again = MountProcess(
        first.args, first.mountpoint, url=shared_server.url, log_path=tmp_path / "again.log"
    ).start()
    try:
        records = trail(again)
        assert [r["op"] for r in records if r["kind"] == "mount"] == ["mounted", "mounted"]
        assert sorted(changes(records)) == sorted(expected)  # nothing lost, nothing twice
        stored = {m["path"] for m in shared_api.list_memories(sid)}
        assert "/sub/moved.md" in stored and "/f2.md" not in stored
        by_path = {(r["op"], r["path"]): r for r in records if r["kind"] == "change"}
        assert by_path[("rename", "/f1.md")]["outcome"]["op"] == "pushed"
        assert by_path[("write", "/py.md")]["outcome"]["op"] == "pushed"
        assert by_path[("truncate", "/f3.md")]["outcome"]["op"] == "pushed"
    finally:
        again.cleanup()
