"""`memfs log / show / diff / restore` through the real CLI, on live mounts of a real
`memfs serve`: versions with their actors, exact bytes both ways, restores that are new
changes (never rewritten history), and read-only stores that show history but refuse."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from memfs.server.wire import api_key_id
from tests.support.api import Api
from tests.support.mount import QUIET, MountProcess, cli_bytes, cli_ok
from tests.support.server import ServerProcess

pytestmark = [pytest.mark.fuse, pytest.mark.deadline(180)]

MOUNT_KEY = "history-mount-key"
REMOTE_KEY = "history-remote-key"
MOUNT_ACTOR = {"type": "api_actor", "api_key_id": api_key_id(MOUNT_KEY)}
REMOTE_ACTOR = {"type": "api_actor", "api_key_id": api_key_id(REMOTE_KEY)}


def start_mount(
    tmp_path: Path, url: str, store_id: str, *extra: str, name: str = "mnt"
) -> MountProcess:
    """A mount writing as MOUNT_KEY (the shared server accepts any key and names it;
    MountProcess drops ANTHROPIC_API_KEY, so it goes as a bearer token). It syncs only
    when asked, so no pass lands between a test's steps."""
    mountpoint = tmp_path / name
    args = [
        "mount",
        store_id,
        str(mountpoint),
        "--cache-dir",
        str(tmp_path / f"{name}-c"),
        *QUIET,
        *extra,
    ]
    return MountProcess(
        args,
        mountpoint,
        url=url,
        log_path=tmp_path / f"{name}.log",
        env={"ANTHROPIC_AUTH_TOKEN": MOUNT_KEY},
    ).start()


@pytest.fixture
def keyed(
    tmp_path: Path, shared_server: ServerProcess, store: dict[str, Any]
) -> Iterator[MountProcess]:
    proc = start_mount(tmp_path, shared_server.url, str(store["id"]))
    try:
        yield proc
    finally:
        proc.cleanup()


@pytest.fixture
def remote(shared_server: ServerProcess) -> Iterator[Api]:
    """Another writer of the same store, with its own key (its own actor)."""
    with Api(shared_server.url, REMOTE_KEY) as client:
        yield client


def log(mount: MountProcess, path: str) -> dict[str, Any]:
    answer: dict[str, Any] = json.loads(cli_ok(mount, "log", path, "--json"))
    return answer


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def memory_at(api: Api, store_id: str, path: str) -> dict[str, Any]:
    (found,) = [m for m in api.list_memories(store_id) if m["path"] == path]
    return api.get_memory(store_id, found["id"])


V1 = b"one\n"
V2 = b"two\n"
V3 = "thr\u00e9e\r\nno newline at the end".encode()
V4 = b"four, from elsewhere\n"


def test_four_versions_with_actors_then_show_diff_restore_round_trip_exact_bytes(
    keyed: MountProcess, remote: Api, store: dict[str, Any]
) -> None:
    sid = str(store["id"])
    f = keyed.mountpoint / "plan.md"
    f.write_bytes(V1)
    keyed.sync()
    subprocess.run(["sh", "-c", f"printf 'two\\n' > {f}"], check=True)
    keyed.sync()
    f.write_bytes(V3)
    keyed.sync()
    memory = memory_at(remote, sid, "/plan.md")
    remote.update_memory(sid, memory["id"], content=V4.decode())
    keyed.sync()
    assert f.read_bytes() == V4

    answer = log(keyed, str(f))
    assert answer["memory_id"] == memory["id"] and answer["path"] == "/plan.md"
    assert answer["local"]["state"] == "clean"
    versions = answer["versions"]
    assert [v["operation"] for v in versions] == ["modified", "modified", "modified", "created"]
    assert [v["created_by"] for v in versions] == [REMOTE_ACTOR] + [MOUNT_ACTOR] * 3
    assert [v["content_sha256"] for v in versions] == [sha(V4), sha(V3), sha(V2), sha(V1)]
    assert [v["content_size_bytes"] for v in versions] == [len(V4), len(V3), len(V2), len(V1)]
    text = cli_ok(keyed, "log", str(f)).decode()
    assert f"api:{api_key_id(REMOTE_KEY)}" in text.splitlines()[1]
    assert "(head)" in text.splitlines()[1]

    # show: every version, by ~N and by id, byte for byte
    for n, data in enumerate([V4, V3, V2, V1]):
        assert cli_ok(keyed, "show", f"{f}@~{n}") == data
        assert cli_ok(keyed, "show", f"{f}@{versions[n]['id']}") == data
    assert cli_ok(keyed, "show", str(f)) == V4

    # diff: head against the local file, then two versions; `patch` rebuilds the bytes
    assert cli_ok(keyed, "diff", str(f)) == b""
    f.write_bytes(b"five\n")
    assert cli_ok(keyed, "diff", str(f)).decode().splitlines()[2:] == [
        "@@ -1 +1 @@",
        "-four, from elsewhere",
        "+five",
    ]
    between = cli_ok(keyed, "diff", f"{f}@~2", "@~1")
    assert between.decode().splitlines()[:2] == [
        f"--- {f}@{versions[2]['id']}",
        f"+++ {f}@{versions[1]['id']}",
    ]
    rebuilt = keyed.mountpoint.parent / "rebuilt.md"
    rebuilt.write_bytes(V2)
    subprocess.run(["patch", "-s", str(rebuilt)], input=between, check=True, timeout=30)
    assert rebuilt.read_bytes() == V3

    # restore: refused over an unpushed change, then forced; a new version, same memory
    refused = cli_bytes(keyed, "restore", str(f), "--to", "~1")
    assert refused.returncode == 1
    assert b"local changes that were not pushed" in refused.stderr
    assert f.read_bytes() == b"five\n"
    cli_ok(keyed, "restore", str(f), "--to", "~1", "--force")
    assert f.read_bytes() == V3
    keyed.sync()
    after = log(keyed, str(f))["versions"]
    assert len(after) == 5 and after[1:] == versions
    assert after[0]["created_by"] == MOUNT_ACTOR
    assert after[0]["content_sha256"] == sha(V3)
    head = memory_at(remote, sid, "/plan.md")
    assert head["id"] == memory["id"]
    assert head["content"].encode() == V3
    assert cli_ok(keyed, "show", f"{sid}:/plan.md") == V3
    # a restore to what the file already holds writes nothing
    assert b"nothing written" in cli_ok(keyed, "restore", str(f), "--to", "head")
    keyed.sync()
    assert len(log(keyed, str(f))["versions"]) == 5


def test_a_deleted_file_is_found_by_its_path_and_restored_as_a_new_memory(
    keyed: MountProcess, remote: Api, store: dict[str, Any]
) -> None:
    sid = str(store["id"])
    d = keyed.mountpoint / "notes"
    d.mkdir()
    f = d / "gone.md"
    f.write_bytes(b"keep me\n")
    keyed.sync()
    old_id = memory_at(remote, sid, "/notes/gone.md")["id"]
    f.unlink()
    d.rmdir()
    keyed.sync()
    assert remote.list_memories(sid) == []

    answer = log(keyed, str(f))
    assert answer["memory_id"] == old_id
    assert answer["local"]["exists"] is False
    assert [v["operation"] for v in answer["versions"]] == ["deleted", "created"]
    shown = cli_bytes(keyed, "show", f"{f}@~0")
    assert shown.returncode == 1 and b"deletion; it has no content" in shown.stderr
    assert cli_ok(keyed, "show", str(f)) == b"keep me\n"  # head: the newest with content

    cli_ok(keyed, "restore", str(f), "--to", "~1")
    assert f.read_bytes() == b"keep me\n"
    keyed.sync()
    back = memory_at(remote, sid, "/notes/gone.md")
    assert back["content"] == "keep me\n" and back["id"] != old_id
    assert [p.name for p in d.iterdir()] == ["gone.md"]  # no temporary file left


def test_store_form_reads_history_and_restores_with_a_precondition(
    keyed: MountProcess, remote: Api, store: dict[str, Any]
) -> None:
    sid = str(store["id"])
    created = remote.create_memory(sid, "/a.md", "first\n")
    remote.update_memory(sid, created["id"], content="second\n")
    answer = log(keyed, f"{sid}:/a.md")
    assert answer["local"] is None
    assert [v["created_by"] for v in answer["versions"]] == [REMOTE_ACTOR] * 2
    assert cli_ok(keyed, "diff", f"{sid}:/a.md").decode().splitlines()[2:] == [
        "@@ -1 +1 @@",
        "-first",
        "+second",
    ]
    out = cli_ok(keyed, "restore", f"{sid}:/a.md", "--to", "~1").decode()
    assert "as new version memver_" in out
    assert remote.get_memory(sid, created["id"])["content"] == "first\n"
    versions = log(keyed, f"{sid}:/a.md")["versions"]
    assert len(versions) == 3 and versions[0]["created_by"] == MOUNT_ACTOR
    missing = cli_bytes(keyed, "log", f"{sid}:/never.md")
    assert missing.returncode == 1 and b"no memory at this path" in missing.stderr


def test_read_only_stores_show_history_and_refuse_every_restore(
    tmp_path: Path, shared_server: ServerProcess, shared_api: Api, remote: Api
) -> None:
    sid = str(shared_api.create_store("History RO")["id"])
    created = remote.create_memory(sid, "/fact.md", "v1\n")
    remote.update_memory(sid, created["id"], content="v2\n")
    ro = start_mount(tmp_path, shared_server.url, sid, "--read-only", name="ro")
    try:
        f = ro.mountpoint / "fact.md"
        answer = log(ro, str(f))
        assert answer["access"] == "read_only"
        assert len(answer["versions"]) == 2
        assert cli_ok(ro, "show", f"{f}@~1") == b"v1\n"
        assert cli_ok(ro, "diff", f"{f}@~1").decode().splitlines()[2:] == [
            "@@ -1 +1 @@",
            "-v1",
            "+v2",
        ]
        refused = cli_bytes(ro, "restore", str(f), "--to", "~1")
        assert refused.returncode == 1 and b"read-only store" in refused.stderr
        assert f.read_bytes() == b"v2\n"
        assert not [n for n in os.listdir(ro.mountpoint) if n.startswith(".#")]
    finally:
        ro.cleanup()
    archived = shared_api.request("POST", f"/v1/memory_stores/{sid}/archive")
    assert archived.status_code == 200, archived.text
    refused = cli_bytes(ro, "restore", f"{sid}:/fact.md", "--to", "~1")
    assert refused.returncode == 1 and b"archived (read-only)" in refused.stderr
    assert len(log(ro, f"{sid}:/fact.md")["versions"]) == 2


def test_a_session_shows_each_store_history_audit_and_refuses_the_read_only_one(
    tmp_path: Path, shared_server: ServerProcess, shared_api: Api, remote: Api
) -> None:
    notes = str(shared_api.create_store("Notes")["id"])
    team = str(shared_api.create_store("Team")["id"])
    fact = remote.create_memory(team, "/fact.md", "v1\n")
    remote.update_memory(team, fact["id"], content="v2\n")
    spec = tmp_path / "spec.json"
    spec.write_text(
        json.dumps(
            {
                "resources": [
                    {"type": "memory_store", "memory_store_id": notes, "access": "read_write"},
                    {"type": "memory_store", "memory_store_id": team, "access": "read_only"},
                ]
            }
        )
    )
    root = tmp_path / "root"
    root.mkdir()
    runtime = Path(tempfile.mkdtemp(prefix="mfs-rt-", dir="/tmp"))
    proc = MountProcess(
        [
            "session",
            str(spec),
            "--root",
            str(root),
            "--cache-dir",
            str(tmp_path / "session-cache"),
            "--sync-interval",
            "3600",
        ],
        root,
        url=shared_server.url,
        log_path=tmp_path / "session.log",
        env={"ANTHROPIC_AUTH_TOKEN": MOUNT_KEY, "XDG_RUNTIME_DIR": str(runtime)},
    )
    proc.start()
    try:
        mine = root / "notes" / "a.md"
        subprocess.run(["sh", "-c", f"echo hello > {mine}"], check=True)
        proc.sync()
        answer = log(proc, str(mine))
        assert answer["memory_store_id"] == notes and answer["path"] == "/a.md"
        (version,) = answer["versions"]
        assert version["created_by"] == MOUNT_ACTOR
        trail = json.loads(cli_ok(proc, "audit", str(root), "--path", str(mine), "--json"))
        assert [
            (r["comm"], r["op"], r["local_path"], r["outcome"]["version"]) for r in trail["records"]
        ] == [("sh", "create", str(mine), version["id"]), ("sh", "write", str(mine), version["id"])]
        theirs = root / "team" / "fact.md"
        answer = log(proc, str(theirs))
        assert answer["access"] == "read_only" and len(answer["versions"]) == 2
        assert cli_ok(proc, "show", f"{theirs}@~1") == b"v1\n"
        refused = cli_bytes(proc, "restore", str(theirs), "--to", "~1")
        assert refused.returncode == 1 and b"read-only store" in refused.stderr
        assert remote.get_memory(team, fact["id"])["content"] == "v2\n"
        for where, why in [
            (root, b"no live memfs mount at"),  # the root is no mount; each store is one
            (root / "team", b"a store's directory is not a memory"),
            (root / "other" / "x.md", b"no live memfs mount at"),
        ]:
            wrong = cli_bytes(proc, "log", str(where))
            assert wrong.returncode == 1 and why in wrong.stderr, wrong.stderr
    finally:
        proc.cleanup()
        shutil.rmtree(runtime, ignore_errors=True)


def test_redact_erases_an_old_version_in_a_mount_and_by_store_path(
    keyed: MountProcess, remote: Api, store: dict[str, Any]
) -> None:
    sid = str(store["id"])
    f = keyed.mountpoint / "secret.md"
    f.write_bytes(b"token=hunter2\n")
    keyed.sync()
    f.write_bytes(b"token=<removed>\n")
    keyed.sync()
    f.write_bytes(b"nothing secret\n")
    keyed.sync()

    # without a terminal, nothing is erased unless --yes says so
    asked = cli_bytes(keyed, "redact", f"{f}@~2")
    assert asked.returncode == 2 and b"--yes" in asked.stderr
    unnamed = cli_bytes(keyed, "redact", str(f), "--yes")
    assert unnamed.returncode == 2 and b"name the version" in unnamed.stderr

    versions = log(keyed, str(f))["versions"]
    oldest = versions[2]["id"]
    done = cli_bytes(keyed, "redact", f"{f}@~2", "--yes")
    assert done.returncode == 0, done.stderr
    assert f"redacted /secret.md@{oldest}".encode() in done.stdout
    gone = remote.request(
        "GET", f"/v1/memory_stores/{sid}/memory_versions/{oldest}", params={"view": "full"}
    ).json()
    assert gone["content"] is None and gone["redacted_at"]
    shown = cli_bytes(keyed, "show", f"{f}@~2")
    assert shown.returncode == 1 and b"hunter2" not in shown.stdout + shown.stderr

    # the store form; the head version is refused with the API's own words
    middle = versions[1]["id"]
    by_store = cli_bytes(keyed, "redact", f"{sid}:/secret.md@{middle}", "--yes")
    assert by_store.returncode == 0, by_store.stderr
    head = cli_bytes(keyed, "redact", f"{sid}:/secret.md@~0", "--yes")
    assert head.returncode == 1 and b"is the current version" in head.stderr
    assert f.read_bytes() == b"nothing secret\n"
