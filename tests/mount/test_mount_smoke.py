"""The basic promise: a store appears as a directory, and edits reach the store."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.support.api import Api
from tests.support.mount import MountProcess, is_mounted


def test_listing_content_and_marker(
    shared_api: Api, store: dict[str, object], mount: MountProcess
) -> None:
    store_id = str(store["id"])
    root = mount.mountpoint
    assert (root / ".anthropic-memory-store").read_bytes() == f"version 1\n{store_id}".encode()
    (root / "notes").mkdir()
    (root / "notes" / "a.md").write_text("hello\n")
    subprocess.run(["sed", "-i", "s/hello/bye/", str(root / "notes" / "a.md")], check=True)
    mount.sync()
    memories = {m["path"]: m for m in shared_api.list_memories(store_id)}
    assert set(memories) == {"/notes/a.md"}
    assert shared_api.get_memory(store_id, memories["/notes/a.md"]["id"])["content"] == "bye\n"


def test_sigterm_flushes_and_unmounts(
    shared_api: Api, store: dict[str, object], mount: MountProcess
) -> None:
    (mount.mountpoint / "late.md").write_text("written just before stop")
    assert mount.stop() == 0
    assert not is_mounted(mount.mountpoint)
    paths = [m["path"] for m in shared_api.list_memories(str(store["id"]))]
    assert paths == ["/late.md"]
    assert list(Path(mount.mountpoint).iterdir()) == []
