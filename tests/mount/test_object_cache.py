"""The object cache on a live mount: garbage collection, --cache-max-size, a full disk.

- Objects no journal row (or live node) names are removed when the daemon starts.
- `--cache-max-size` evicts clean contents only; evicted files keep their size and read
  back byte for byte (fetched again), and a rename of one still reaches the store.
- A full cache disk (a 1 MiB tmpfs mounted by the test) answers the writer ENOSPC,
  the daemon lives on, and nothing acknowledged is lost (kill -9, more space, restart).
"""

from __future__ import annotations

import errno
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.api import Api
from tests.support.deadline import eventually
from tests.support.files import store_files
from tests.support.mount import MountProcess, mount_store
from tests.support.server import ServerProcess


def objects(cache: Path) -> dict[str, int]:
    """sha -> size of every object file in a cache directory."""
    found = {}
    for shard in (cache / "objects").iterdir():
        for obj in shard.iterdir():
            found[obj.name] = obj.stat().st_size
    return found


def wait_for_log(mount: MountProcess, text: str, timeout: float = 20.0) -> str:
    return eventually(
        mount.log,
        f"{text!r} in the log",
        until=lambda log: text in log,
        timeout=timeout,
        interval=0.1,
    )


@pytest.mark.deadline(120)
def test_start_removes_objects_no_journal_row_names(
    tmp_path: Path, shared_server: ServerProcess, shared_api: Api, store: dict[str, object]
) -> None:
    store_id = str(store["id"])
    ids = [shared_api.create_memory(store_id, f"/n{i}.md", f"first {i}\n")["id"] for i in range(5)]
    mount = mount_store(tmp_path, shared_server.url, store_id)
    cache = tmp_path / "mnt-cache"
    try:
        root = mount.mountpoint
        assert [(root / f"n{i}.md").read_text() for i in range(5)] == [
            f"first {i}\n" for i in range(5)
        ]
        for i, memory_id in enumerate(ids):
            shared_api.update_memory(store_id, memory_id, content=f"second {i}\n")
        mount.sync()
        assert [(root / f"n{i}.md").read_text() for i in range(5)] == [
            f"second {i}\n" for i in range(5)
        ]
        assert mount.stop() == 0
        assert len(objects(cache)) == 10  # the first contents are garbage now
        mount = mount_store(tmp_path, shared_server.url, store_id)
        wait_for_log(mount, "object cache collected")
        assert len(objects(cache)) == 5
        assert [(root / f"n{i}.md").read_text() for i in range(5)] == [
            f"second {i}\n" for i in range(5)
        ]
    finally:
        mount.cleanup()


@pytest.mark.deadline(120)
def test_cache_max_size_evicts_clean_contents_that_read_back(
    tmp_path: Path, shared_server: ServerProcess, shared_api: Api, store: dict[str, object]
) -> None:
    store_id = str(store["id"])
    texts = {f"m{i}.md": f"{i}" * 10_000 for i in range(8)}
    for name, text in texts.items():
        shared_api.create_memory(store_id, "/" + name, text)
    mount = mount_store(tmp_path, shared_server.url, store_id)
    cache = tmp_path / "mnt-cache"
    try:
        root = mount.mountpoint
        assert {n: (root / n).read_text() for n in texts} == texts
        assert mount.stop() == 0
        assert sum(objects(cache).values()) == 80_000
        mount = mount_store(tmp_path, shared_server.url, store_id, "--cache-max-size", "30K")
        wait_for_log(mount, "evicted=5")
        assert sum(objects(cache).values()) <= 30 * 1024
        # sizes are known without the bytes; the bytes come back on demand
        assert {n: (root / n).stat().st_size for n in texts} == {n: 10_000 for n in texts}
        out = subprocess.run(
            ["cat", *(str(root / n) for n in sorted(texts))],
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        )
        assert out.stdout == "".join(texts[n] for n in sorted(texts))
        # an evicted file renamed: the push brings its content in first
        assert mount.stop() == 0
        mount = mount_store(tmp_path, shared_server.url, store_id, "--cache-max-size", "0")
        wait_for_log(mount, "evicted=8")
        os.rename(root / "m0.md", root / "renamed.md")
        for _ in range(3):
            mount.sync()
            if "renamed.md" in store_files(shared_api, store_id):
                break
        expected = {n: t for n, t in texts.items() if n != "m0.md"}
        expected["renamed.md"] = texts["m0.md"]
        assert store_files(shared_api, store_id) == expected
        assert "Traceback" not in mount.log()
    finally:
        mount.cleanup()


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 1 MiB tmpfs (the test runs as root, like the rest of the FUSE tier)."""
    disk = tmp_path / "disk"
    disk.mkdir()
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1M,mode=0700", "tmpfs", str(disk)],
        check=True,
        capture_output=True,
    )
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False, capture_output=True)


@pytest.mark.deadline(180)
@pytest.mark.daemon_log(r"ERROR memfs\.fs: content did not arrive in time .* path=/seed\.md ")
def test_full_cache_disk_is_enospc_and_loses_nothing_acknowledged(
    tmp_path: Path,
    shared_server: ServerProcess,
    shared_api: Api,
    store: dict[str, object],
    small_disk: Path,
) -> None:
    store_id = str(store["id"])
    cache = small_disk / "cache"
    args = ("--cache-dir", str(cache), "--sync-interval", "300")

    def start(log: str, *extra: str) -> MountProcess:
        return MountProcess(
            ["mount", store_id, str(tmp_path / "mnt"), *args, *extra],
            tmp_path / "mnt",
            url=shared_server.url,
            log_path=tmp_path / log,
        ).start()

    # a memory whose content is evicted, so that reading it needs room in the cache
    shared_api.create_memory(store_id, "/seed.md", "from the store\n")
    mount = start("mnt0.log")
    try:
        root = mount.mountpoint
        assert (root / "seed.md").read_text() == "from the store\n"
        assert mount.stop() == 0
        mount = start("mnt.log", "--cache-max-size", "0")
        wait_for_log(mount, "evicted=1")
        acknowledged: dict[str, str] = {"seed.md": "from the store\n"}
        failure: OSError | None = None
        for i in range(200):
            name, text = f"f{i:03}.md", f"{i:03}" * 6_000 + "\n"  # 18 KB each
            try:
                with open(root / name, "w") as f:
                    f.write(text)
            except OSError as e:
                failure = e
                break
            acknowledged[name] = text
        assert failure is not None, "a 1 MiB cache disk never filled"
        assert failure.errno == errno.ENOSPC, failure
        assert len(acknowledged) >= 5
        # the daemon lives on and still shows every acknowledged byte; content that has
        # no room in the cache answers EIO
        for name, text in acknowledged.items():
            if name != "seed.md":
                assert (root / name).read_text() == text
        with pytest.raises(OSError) as info:
            (root / "seed.md").read_text()
        assert info.value.errno == errno.EIO
        assert mount.proc is not None and mount.proc.poll() is None
        # space again: the next pass pushes exactly what was acknowledged; the file whose
        # write was refused is held back (state refused), never pushed as what it holds
        subprocess.run(["mount", "-o", "remount,size=64M", str(small_disk)], check=True)
        mount.sync()
        assert store_files(shared_api, store_id) == acknowledged

        def seed() -> str:
            try:
                return (root / "seed.md").read_text()
            except OSError as e:
                assert e.errno == errno.EIO  # a failed download answers EIO at once for 5 s
                raise

        content = eventually(
            seed, "seed.md readable again", ignoring=(OSError,), timeout=20, interval=0.5
        )
        assert content == "from the store\n"
        (root / "after.md").write_text("after\n")
        acknowledged["after.md"] = "after\n"
        mount.kill()  # kill -9: only the journal is left
        mount = start("mnt2.log")
        mount.sync()
        stored = store_files(shared_api, store_id)
        assert {n: stored[n] for n in acknowledged} == acknowledged
        # the refusal could not reach the full journal: after a restart the file shows
        # its last acknowledged state (created, empty), never the refused bytes
        assert all(stored[n] == "" for n in set(stored) - set(acknowledged)), stored.keys()
        assert "Traceback" not in mount.log()
    finally:
        mount.cleanup()
