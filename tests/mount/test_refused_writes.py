"""A refused write never reaches the store as the bytes it left behind (issue 12 item 4).

`cp` of a 200 KB file answers "File too large" and leaves a file holding only what was
written before the refusal (here nothing). That file is held back in state `refused`,
shown by `memfs status` and the xattrs, until a write or truncate succeeds.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from memfs.paths import MAX_CONTENT_BYTES
from tests.support.api import Api
from tests.support.files import store_files
from tests.support.mount import MountProcess, xattrs
from tests.support.refusals import tool_fails


def status(mount: MountProcess) -> dict[str, object]:
    out = mount.memfs("status", str(mount.mountpoint), "--json")
    store = json.loads(out.stdout)["mounts"][0]["stores"][0]
    assert isinstance(store, dict)
    return store


@pytest.fixture
def big(tmp_path: Path) -> Path:
    """A 200 KB text file: twice what a memory may hold."""
    path = tmp_path / "big.txt"
    path.write_text("b" * 200_000)
    return path


@pytest.mark.deadline(120)
def test_a_copy_refused_with_efbig_is_held_back_until_written(
    big: Path, shared_api: Api, store: dict[str, object], mount: MountProcess
) -> None:
    store_id = str(store["id"])
    root = mount.mountpoint
    (root / "keep.md").write_text("kept\n")
    tool_fails("cp", str(big), str(root / "big.md"), message="File too large")
    binary = shutil.which("ls")
    assert binary is not None and os.path.getsize(binary) > MAX_CONTENT_BYTES
    tool_fails("cp", binary, str(root / "ls.md"), message="File too large")
    # a shell redirection that stops half way: 100 KB written, then EFBIG
    result = subprocess.run(
        ["bash", "-c", f"head -c 150000 {big} > {root}/half.md"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode != 0 and "File too large" in result.stderr
    assert (root / "half.md").stat().st_size <= MAX_CONTENT_BYTES
    for name in ("big.md", "ls.md", "half.md"):
        attrs = xattrs(root / name)
        assert attrs["user.memfs.state"] == "refused", (name, attrs)
        assert "File too large" in attrs["user.memfs.refused"], attrs
    mount.sync_held_back()
    assert store_files(shared_api, store_id) == {"keep.md": "kept\n"}
    s = status(mount)
    assert s["refused"] == 3
    assert sorted(r["path"] for r in s["refused_files"]) == ["/big.md", "/half.md", "/ls.md"]  # type: ignore[attr-defined]
    # a refusal survives a restart (the stop names them and exits 1: the store lacks them)
    mount.expect_exit(1)
    assert mount.stop() == 1
    mount.start()
    assert xattrs(root / "big.md")["user.memfs.state"] == "refused"
    mount.sync_held_back()
    assert store_files(shared_api, store_id) == {"keep.md": "kept\n"}
    # a successful write or truncate ends it, even to the same (empty) content
    (root / "big.md").write_text("small now\n")
    subprocess.run(["truncate", "-s", "0", str(root / "ls.md")], check=True)
    assert xattrs(root / "big.md")["user.memfs.state"] == "dirty"
    assert xattrs(root / "ls.md")["user.memfs.state"] == "dirty"
    assert xattrs(root / "half.md")["user.memfs.state"] == "refused"
    mount.sync_held_back()  # /half.md is still refused
    assert store_files(shared_api, store_id) == {
        "keep.md": "kept\n",
        "big.md": "small now\n",
        "ls.md": "",
    }
    assert status(mount)["refused"] == 1
    assert "Traceback" not in mount.log()
    mount.expect_exit(1)  # /half.md is still refused at teardown: named, exit 1


@pytest.mark.deadline(120)
def test_a_refused_overwrite_keeps_the_memory_as_it_was(
    big: Path, shared_api: Api, store: dict[str, object], mount: MountProcess
) -> None:
    store_id = str(store["id"])
    root = mount.mountpoint
    (root / "notes.md").write_text("version 1\n")
    mount.sync()
    tool_fails("cp", str(big), str(root / "notes.md"), message="File too large")
    assert xattrs(root / "notes.md")["user.memfs.state"] == "refused"
    mount.sync_held_back()
    assert store_files(shared_api, store_id) == {"notes.md": "version 1\n"}
    (root / "notes.md").write_text("version 2\n")
    mount.sync()
    assert store_files(shared_api, store_id) == {"notes.md": "version 2\n"}
