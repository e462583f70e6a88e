"""Excludes decide only about local files the store does not have (issue 24, item 8).

A memory created elsewhere under an editor-temporary name (`x~`, `.x.swp`, `#x#`,
`4913`, `.#x`) is synced like any other through a real mount: a local edit is pushed,
a remote edit is pulled, a conflict keeps a copy, a delete is pushed. A new local file
with such a name stays local.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.support.api import Api
from tests.support.files import store_contents
from tests.support.mount import QUIET, cli_ok, mount_store, xattrs
from tests.support.server import ServerProcess

pytestmark = [pytest.mark.fuse, pytest.mark.deadline(240)]

NAMES = ("x~", ".x.swp", "#x#", "4913", ".#x")


def test_a_memory_with_an_excluded_name_is_synced_like_any_other(
    tmp_path: Path, shared_server: ServerProcess, shared_api: Api, store: dict[str, Any]
) -> None:
    sid = str(store["id"])
    ids = {
        f"/{d}/{n}": shared_api.create_memory(sid, f"/{d}/{n}", "base\n")["id"]
        for d in ("edit", "pull", "both", "gone")
        for n in NAMES
    }
    mount = mount_store(
        tmp_path,
        shared_server.url,
        sid,
        *QUIET,
    )
    try:
        root = mount.mountpoint
        for n in NAMES:
            (root / "edit" / n).write_text(f"local edit of {n}\n")
            shared_api.update_memory(sid, ids[f"/pull/{n}"], content=f"remote edit of {n}\n")
            shared_api.update_memory(sid, ids[f"/both/{n}"], content=f"remote wins {n}\n")
            (root / "both" / n).write_text(f"local loses {n}\n")
            (root / "gone" / n).unlink()
            (root / "new").mkdir(exist_ok=True)
            (root / "new" / n).write_text("a local temporary\n")
        status = mount.mount_status()["stores"][0]
        assert status["dirty"] == 2 * len(NAMES), status  # edit/ and both/, not new/
        assert xattrs(root / "edit" / "x~")["user.memfs.state"] == "dirty"
        mount.sync()
        held = store_contents(shared_api, sid)
        for n in NAMES:
            assert held[f"/edit/{n}"] == f"local edit of {n}\n", n
            assert (root / "pull" / n).read_text() == f"remote edit of {n}\n", n
            assert (root / "both" / n).read_text() == f"remote wins {n}\n", n
            assert held[f"/both/{n}"] == f"remote wins {n}\n", n
            assert f"/gone/{n}" not in held, n
            assert f"/new/{n}" not in held, n  # a local temporary stays local
            assert (root / "new" / n).read_text() == "a local temporary\n"
        answer = json.loads(cli_ok(mount, "conflicts", str(root), "--json"))
        kept = {c["path"] for c in answer["mounts"][0]["conflicts"]}
        assert kept == {f"/both/{n}" for n in NAMES}, kept
        status = mount.mount_status()["stores"][0]
        assert status["dirty"] == 0 and status["excluded"] == len(NAMES), status
    finally:
        mount.cleanup()
