"""The final sync pushes what is dirty first (issue 24 item 10).

Against a slow server, listing a big store takes longer than the whole flush bound. The
unmount's last pass used to list first and was cut off before it pushed the one changed
file; on an ephemeral sandbox that file is lost. Now the dirty file goes up first, on
its baseline's precondition, and the listing gets what is left of the bound.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.support.api import Api
from tests.support.mount import mount_store
from tests.support.server import ServerProcess, start_server
from tests.support.slowproxy import SlowProxy

pytestmark = [pytest.mark.fuse, pytest.mark.deadline(240)]

MEMORIES = 1500  # 15 listing pages
DELAY = 1.0  # seconds added to each request: listing takes ~15 s
BOUND = 10  # --flush-timeout: shorter than the listing, far longer than one push


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    with start_server(tmp_path / "big.db") as proc:
        yield proc


def test_unmount_pushes_the_changed_file_before_listing_a_slow_big_store(
    tmp_path: Path, server: ServerProcess
) -> None:
    with Api(server.url) as api, SlowProxy(server.port) as proxy:
        sid = api.create_store("Big")["id"]
        with ThreadPoolExecutor(8) as pool:
            list(
                pool.map(
                    lambda i: api.create_memory(sid, f"/n/{i:04}.md", f"{i}\n"), range(MEMORIES)
                )
            )
        mount = mount_store(
            tmp_path,
            proxy.url,
            sid,
            "--sync-interval",
            "3600",
            "--no-push-soon",
            "--flush-timeout",
            str(BOUND),
        )
        root = mount.mountpoint
        try:
            changed = root / "n" / "0007.md"
            assert changed.read_text() == "7\n"
            proxy.delay = DELAY  # from now on every request is slow
            changed.write_text("the one change\n")
            arrived: list[float] = []

            def watch() -> None:  # past the proxy: the store as it is
                memory_id = next(
                    m["id"] for m in api.list_memories(sid) if m["path"] == "/n/0007.md"
                )
                deadline = time.monotonic() + 60
                while time.monotonic() < deadline:
                    if api.get_memory(sid, memory_id)["content"] == "the one change\n":
                        arrived.append(time.monotonic())
                        return
                    time.sleep(0.1)

            watcher = threading.Thread(target=watch)
            watcher.start()
            t0 = time.monotonic()
            done = mount.memfs("unmount", str(root), check=False, timeout=120)
            took = time.monotonic() - t0
            watcher.join()
            assert done.returncode == 0, done.stderr
            assert arrived, "the changed file never reached the store"
            assert arrived[0] - t0 < BOUND / 2, (arrived[0] - t0, took)
            # the listing afterwards was cut off by the bound, and said so
            assert "final memory sync cut off" in mount.log()
        finally:
            mount.cleanup()


def test_a_remote_rename_that_races_the_push_is_followed_not_undone(
    tmp_path: Path, shared_server: ServerProcess, shared_api: Api, store: dict[str, object]
) -> None:
    """Edited here, renamed in the store meanwhile: the final sync's first upload (no
    listing) sends the content on its precondition and the store keeps its new path.
    The listing after it must follow that rename, not take it for a local one and move
    the memory back."""
    sid = str(store["id"])
    memory = shared_api.create_memory(sid, "/draft.md", "v1\n")
    mount = mount_store(
        tmp_path, shared_server.url, sid, "--sync-interval", "3600", "--no-push-soon"
    )
    root = mount.mountpoint
    try:
        (root / "draft.md").write_text("v2, edited here\n")
        shared_api.update_memory(sid, memory["id"], path="/final.md")
        done = mount.memfs("unmount", str(root), check=False)
        assert done.returncode == 0, done.stderr
        (after,) = shared_api.list_memories(sid)
        assert after["id"] == memory["id"] and after["path"] == "/final.md"
        assert shared_api.get_memory(sid, memory["id"])["content"] == "v2, edited here\n"
    finally:
        mount.cleanup()
