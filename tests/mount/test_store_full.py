"""A refusal whose cause passes is retried (issue 24 item 9).

A real `memfs serve --max-memories 2` is the full store: a create is refused with "the
memory store is full". That refusal is transient: once space is freed the file arrives
without being written again, by the back-off's own retry, by `memfs sync`, and after a
remount. A permanent refusal (not UTF-8) waits for new content. `memfs status` says
which is which, why, and when the next retry is.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.api import Api
from tests.support.deadline import eventually
from tests.support.files import store_files
from tests.support.mount import QUIET, MountProcess, mount_store, xattrs
from tests.support.server import ServerProcess, start_server
from tests.support.terminal import on_a_terminal

pytestmark = [pytest.mark.fuse, pytest.mark.deadline(240)]

FULL = "the memory store is full: it holds the maximum of 2 memories"


@pytest.fixture
def small(tmp_path: Path) -> Iterator[ServerProcess]:
    with start_server(tmp_path / "small.db", extra_args=["--max-memories", "2"]) as proc:
        yield proc


def refused(mount: MountProcess) -> dict[str, dict[str, Any]]:
    out = mount.memfs("status", str(mount.mountpoint), "--json").stdout
    (s,) = json.loads(out)["mounts"][0]["stores"]
    return {r["path"]: r for r in s["refused_files"]}


def test_a_create_refused_by_a_full_store_arrives_once_space_is_freed(
    tmp_path: Path, small: ServerProcess
) -> None:
    with Api(small.url) as api:
        sid = api.create_store("Full")["id"]
        first = api.create_memory(sid, "/a.md", "a\n")
        api.create_memory(sid, "/b.md", "b\n")
        mount = mount_store(
            tmp_path,
            small.url,
            sid,
            *QUIET,
        )
        root = mount.mountpoint
        try:
            (root / "c.md").write_text("waits for space\n")
            with pytest.raises(OSError):
                (root / "bin.md").write_bytes(b"\xff\xfe not utf-8")
            # A refused upload is exit 1, naming it (it was 0: issue 35 item 11)
            out = mount.sync_held_back()
            assert f"refused: /c.md ({FULL}; transient, next retry " in out, out
            held = refused(mount)
            assert held["/c.md"]["why"] == FULL and held["/c.md"]["transient"] is True
            assert held["/c.md"]["next_retry"] is not None
            assert held["/bin.md"]["transient"] is False and held["/bin.md"]["next_retry"] is None
            assert xattrs(root / "c.md")["user.memfs.state"] == "refused"
            code, text, _ = on_a_terminal(
                [sys.executable, "-m", "memfs.cli", "status", str(root)], mount.env
            )
            assert code == 0, text
            assert f"refused: /c.md ({FULL}; transient, next retry " in text, text
            assert "refused: /bin.md (content is not valid UTF-8; permanent, until its " in text

            # Space frees: the back-off's retry pushes it; nobody writes or syncs.
            api.delete_memory(sid, first["id"])
            eventually(
                lambda: "c.md" in store_files(api, sid),
                "the retried create",
                timeout=60,
                interval=0.2,
            )
            assert store_files(api, sid)["c.md"] == "waits for space\n"
            eventually(
                lambda: "/c.md" not in refused(mount), "the status update", timeout=10, interval=0.2
            )
            assert xattrs(root / "c.md")["user.memfs.state"] == "clean"
            assert "/bin.md" in refused(mount)  # waits for new content

            # Full again: `memfs sync` retries at once once space is freed.
            (root / "d.md").write_text("synced when asked\n")
            mount.memfs("sync", str(root), check=False)
            assert refused(mount)["/d.md"]["transient"] is True
            api.delete_memory(
                sid, next(m["id"] for m in api.list_memories(sid) if m["path"] == "/b.md")
            )
            mount.memfs("sync", str(root), check=False)
            assert store_files(api, sid)["d.md"] == "synced when asked\n"

            # Full again, across a remount: the journal keeps it dirty, the start pushes it.
            (root / "e.md").write_text("pushed after a remount\n")
            mount.memfs("sync", str(root), check=False)
            assert refused(mount)["/e.md"]["transient"] is True
            mount.expect_exit(1)  # unpushed and refused files are named at the stop
            assert mount.stop() == 1
            api.delete_memory(
                sid, next(m["id"] for m in api.list_memories(sid) if m["path"] == "/c.md")
            )
            mount.start()
            assert store_files(api, sid)["e.md"] == "pushed after a remount\n"
            assert set(refused(mount)) == {"/bin.md"}
            mount.expect_exit(1)  # /bin.md is still not in the store at teardown
        finally:
            mount.cleanup()
