"""What an unmount leaves behind is named (issue 24 item 11): files the store refused
(too large, not UTF-8) are not in the store, so `memfs unmount` names each with its
reason and exits 1, as operations.md's exit-code table promises; a dead mount's
`memfs status` lists them apart from the changes the next start pushes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.api import Api
from tests.support.files import store_files
from tests.support.mount import MountProcess, is_mounted
from tests.support.refusals import tool_fails

pytestmark = [pytest.mark.fuse, pytest.mark.deadline(180)]

TOO_LARGE = "a write past 102400 bytes was refused (File too large)"
NOT_UTF8 = "content is not valid UTF-8"


def _refuse_two(root: Path, tmp_path: Path) -> None:
    """/big.md refused by its size, /bin.md by its encoding; /kept.md is fine."""
    (root / "kept.md").write_text("kept\n")
    big = tmp_path / "big.txt"
    big.write_text("b" * 200_000)
    tool_fails("cp", str(big), str(root / "big.md"), message="File too large")
    binary = tmp_path / "bin"
    binary.write_bytes(b"\xff\xfe not utf-8")
    tool_fails("cp", str(binary), str(root / "bin.md"), message="Invalid or incomplete")


@pytest.mark.parametrize("how", ["unmount", "sigterm"])
def test_unmount_names_every_refused_file_and_exits_1(
    how: str,
    tmp_path: Path,
    quiet: MountProcess,
    shared_api: Api,
    store: dict[str, object],
) -> None:
    store_id = str(store["id"])
    proc = quiet
    root = proc.mountpoint
    try:
        _refuse_two(root, tmp_path)
        proc.expect_exit(1)
        if how == "unmount":
            done = proc.memfs("unmount", str(root), check=False)
            assert done.returncode == 1, done.stderr
            said = done.stderr
        else:
            assert proc.stop() == 1
            proc.cleanup()  # collects what the daemon wrote to stderr
            said = proc.outputs()[1]
        assert not is_mounted(root)
        assert store_files(shared_api, store_id) == {"kept.md": "kept\n"}
        assert (
            f"memfs: 2 files of {store_id} not in the store, which refused them; only the "
            "cache holds them until their content changes: "
            f"/big.md ({TOO_LARGE}), /bin.md ({NOT_UTF8})"
        ) in said, said
        assert "changed file" not in said, said  # nothing else was left
        warned = [
            line
            for line in proc.log().splitlines()
            if "the store refused these files, so it does not have them" in line
        ]
        assert len(warned) == 1 and "files=2 paths=/big.md,/bin.md" in warned[0], proc.log()
    finally:
        proc.cleanup()


def test_a_dead_mount_does_not_count_refused_files_as_pushed_at_the_next_start(
    tmp_path: Path, quiet: MountProcess, store: dict[str, object]
) -> None:
    store_id = str(store["id"])
    proc = quiet
    root = proc.mountpoint
    try:
        _refuse_two(root, tmp_path)
        proc.sync_held_back()
        (root / "kept.md").write_text("edited\n")
        proc.kill()
        result = proc.memfs("status", str(root), check=False)
        assert result.returncode == 1, result.stderr
        (answer,) = json.loads(result.stdout)["mounts"]
        assert answer["state"] == "dead"
        assert answer["unpushed"] == {store_id: ["/kept.md"]}
        assert answer["refused"] == {
            store_id: [{"path": "/big.md", "why": TOO_LARGE}, {"path": "/bin.md", "why": NOT_UTF8}]
        }
        assert "1 changed file is in the journal" in result.stderr, result.stderr
        assert (
            "2 files the store refused, only in the cache: the next start does not push "
            f"them until their content changes: /big.md ({TOO_LARGE}), /bin.md ({NOT_UTF8})"
        ) in result.stderr, result.stderr
    finally:
        proc.cleanup()
