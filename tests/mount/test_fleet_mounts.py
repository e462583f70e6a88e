"""Three mounts of one store, each talking to a different `memfs serve` instance over one
PostgreSQL database: they converge with nothing lost, also when an instance is killed
mid-load and the database restarts under the others."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from memfs.server import tokens
from memfs.server.backends import open_storage
from tests.support.api import Api
from tests.support.mount import MountProcess, mount_store, require_fuse
from tests.support.postgres import PostgresCluster
from tests.support.server import ServerProcess, start_server

pytestmark = pytest.mark.fuse


def local_tree(root: Path) -> dict[str, str]:
    return {
        "/" + str(p.relative_to(root)): p.read_text()
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.name != ".anthropic-memory-store"
    }


def store_tree(api: Api, sid: str) -> dict[str, str]:
    return {m["path"]: api.get_memory(sid, m["id"])["content"] for m in api.list_memories(sid)}


@pytest.fixture
def instances(postgres: PostgresCluster, tmp_path: Path) -> Iterator[list[ServerProcess]]:
    url = postgres.database("mounts")
    procs = [start_server(url, log_path=tmp_path / f"server{i}.log") for i in range(3)]
    try:
        yield procs
    finally:
        for proc in procs:
            proc.stop()


def write_load(root: Path, tag: str, n: int, expected: dict[str, str]) -> None:
    for i in range(n):
        (root / tag).mkdir(exist_ok=True)
        (root / tag / f"note-{i:03d}.md").write_text(f"{tag} {i}\n")
        expected[f"/{tag}/note-{i:03d}.md"] = f"{tag} {i}\n"
    (root / f"{tag}.md").write_text(f"edited by {tag}")
    expected[f"/{tag}.md"] = f"edited by {tag}"


def converge(mounts: list[MountProcess]) -> None:
    for _ in range(2):
        for m in mounts:
            m.sync()


def test_three_mounts_on_three_instances_converge(
    tmp_path: Path, instances: list[ServerProcess]
) -> None:
    require_fuse()
    api = Api(instances[0].url)
    sid = str(api.create_store("fleet")["id"])
    expected = {f"/m{i}.md": "seed" for i in range(3)}
    for path in expected:
        api.create_memory(sid, path, "seed")
    mounts = [mount_store(tmp_path, p.url, sid, name=f"m{i}") for i, p in enumerate(instances)]
    try:
        loads = [
            threading.Thread(target=write_load, args=(m.mountpoint, f"m{i}", 40, expected))
            for i, m in enumerate(mounts)
        ]
        for t in loads:
            t.start()
        for t in loads:
            t.join()
        converge(mounts)
        assert store_tree(api, sid) == expected
        for m in mounts:
            assert local_tree(m.mountpoint) == expected
        assert all(m.stop() == 0 for m in mounts)
    finally:
        for m in mounts:
            m.cleanup()
        api.close()


def test_kill_9_of_an_instance_and_a_database_restart_lose_nothing(
    tmp_path: Path, instances: list[ServerProcess], postgres: PostgresCluster
) -> None:
    require_fuse()
    api = Api(instances[0].url)
    sid = str(api.create_store("fleet-crash")["id"])
    expected: dict[str, str] = {}
    mounts = [mount_store(tmp_path, p.url, sid, name=f"m{i}") for i, p in enumerate(instances)]
    try:
        loads = [
            threading.Thread(target=write_load, args=(m.mountpoint, f"m{i}", 60, expected))
            for i, m in enumerate(mounts)
        ]
        for t in loads:
            t.start()
        mounts[1].memfs("sync", str(mounts[1].mountpoint), check=False)
        instances[1].kill()  # mid-load: its mount keeps writing locally
        postgres.restart()  # every other instance loses its connections
        for t in loads:
            t.join()
        instances[1].start()  # same port: mount 1 finds it again
        converge(mounts)
        assert store_tree(api, sid) == expected
        for m in mounts:
            assert local_tree(m.mountpoint) == expected
        assert all(m.stop() == 0 for m in mounts)
    finally:
        for m in mounts:
            m.cleanup()
        api.close()


def test_a_mount_on_a_scoped_token(tmp_path: Path, instances: list[ServerProcess]) -> None:
    """The daemon uses a scoped token as its bearer token: it reads and writes its store,
    a read-only token serves a --read-only mount, and another store stays out of reach."""
    require_fuse()
    api = Api(instances[0].url)
    mine = str(api.create_store("mine")["id"])
    theirs = str(api.create_store("theirs")["id"])
    api.create_memory(mine, "/seed.md", "seed")
    api.create_memory(theirs, "/secret.md", "secret")
    db = open_storage(instances[0].db, pool_size=1)
    try:
        rw = db.create_token({mine: tokens.READ_WRITE}, 3600)["token"]
        ro = db.create_token({mine: tokens.READ_ONLY, theirs: tokens.READ_ONLY}, 3600)["token"]
    finally:
        db.close()
    writer = MountProcess(
        ["mount", mine, str(tmp_path / "w"), "--cache-dir", str(tmp_path / "w-cache")],
        tmp_path / "w",
        url=instances[1].url,
        log_path=tmp_path / "w.log",
        env={"ANTHROPIC_AUTH_TOKEN": rw},
    )
    reader = MountProcess(
        [
            "mount",
            mine,
            str(tmp_path / "r"),
            "--read-only",
            "--cache-dir",
            str(tmp_path / "r-cache"),
        ],
        tmp_path / "r",
        url=instances[2].url,
        log_path=tmp_path / "r.log",
        env={"ANTHROPIC_AUTH_TOKEN": ro},
    )
    try:
        writer.start()
        assert (writer.mountpoint / "seed.md").read_text() == "seed"
        (writer.mountpoint / "new.md").write_text("from a token")
        writer.sync()
        assert store_tree(api, mine) == {"/seed.md": "seed", "/new.md": "from a token"}
        reader.start()
        assert local_tree(reader.mountpoint) == store_tree(api, mine)
        refused = MountProcess(
            ["mount", theirs, str(tmp_path / "x"), "--cache-dir", str(tmp_path / "x-cache")],
            tmp_path / "x",
            url=instances[0].url,
            log_path=tmp_path / "x.log",
            env={"ANTHROPIC_AUTH_TOKEN": rw},
        )
        with pytest.raises(RuntimeError, match="exited"):
            refused.start()
        refused.cleanup()
        assert writer.stop() == 0 and reader.stop() == 0
    finally:
        writer.cleanup()
        reader.cleanup()
        api.close()
