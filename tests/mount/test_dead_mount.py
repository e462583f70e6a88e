"""A mount whose daemon was killed: `memfs status` says it is dead, what the journal
still holds, and the one command that recovers it, and that command works (issue 12,
item 2)."""

from __future__ import annotations

import errno
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.api import Api
from tests.support.files import local_files, store_files
from tests.support.mount import is_mounted, mount_store
from tests.support.server import ServerProcess

pytestmark = pytest.mark.deadline(180)


def test_status_explains_a_dead_mount_and_the_command_that_recovers_it(
    tmp_path: Path, shared_server: ServerProcess, shared_api: Api, store: dict[str, object]
) -> None:
    store_id = str(store["id"])
    # No push soon: the two changes below must still be unpushed when the daemon dies.
    proc = mount_store(
        tmp_path, shared_server.url, store_id, "--sync-interval", "300", "--no-push-soon"
    )
    root = proc.mountpoint
    try:
        (root / "kept.md").write_text("kept\n")
        (root / "edited.md").write_text("first\n")
        (root / "sub").mkdir()
        proc.sync()
        (root / "edited.md").write_text("second\n")
        (root / "sub" / "new.md").write_text("new\n")
        expected = local_files(root)
        proc.kill()
        with pytest.raises(OSError) as dead:
            os.listdir(root)
        assert dead.value.errno == errno.ENOTCONN

        for where in (root, root / "sub"):
            result = proc.memfs("status", str(where), check=False)
            assert result.returncode == 1, result.stderr
            assert "Traceback" not in result.stderr
            (answer,) = json.loads(result.stdout)["mounts"]
            assert answer["state"] == "dead" and answer["mountpoint"] == str(root)
            assert sorted(answer["unpushed"][store_id]) == ["/edited.md", "/sub/new.md"]
            assert "dead" in result.stderr and "2 changed files" in result.stderr
            assert f"recover with: {answer['recover']}" in result.stderr
        listing = json.loads(proc.memfs("status").stdout)["mounts"]
        assert [m["state"] for m in listing if m["mountpoint"] == str(root)] == ["dead"]

        command = shlex.split(answer["recover"])
        assert command[0] == "memfs"
        recovered = subprocess.run(
            [sys.executable, "-m", "memfs.cli", *command[1:]],
            env=proc.env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert recovered.returncode == 0, recovered.stderr
        assert local_files(root) == expected
        proc.sync()
        assert store_files(shared_api, store_id) == expected
        alive = json.loads(proc.memfs("status", str(root)).stdout)["mounts"][0]
        assert alive["ok"] and alive["stores"][0]["dirty"] == 0
        proc.memfs("unmount", str(root))
        assert not is_mounted(root)
    finally:
        proc.cleanup()
