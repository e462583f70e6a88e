"""`--metrics-addr` on a live mount: every metric moves with the work it counts."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.api import Api
from tests.support.metrics import free_port, scrape, value
from tests.support.mount import QUIET, MountProcess, mount_store
from tests.support.server import ServerProcess


@pytest.mark.deadline(180)
def test_a_live_mount_counts_its_work(
    tmp_path: Path, shared_server: ServerProcess, shared_api: Api, store: dict[str, object]
) -> None:
    sid = str(store["id"])
    shared = shared_api.create_memory(sid, "/shared.md", "v1\n")
    port = free_port()
    url = f"http://127.0.0.1:{port}/metrics"
    proc = mount_store(
        tmp_path,
        shared_server.url,
        sid,
        "--metrics-addr",
        f"127.0.0.1:{port}",
        *QUIET,
    )
    try:
        root = proc.mountpoint
        before = scrape(url)
        assert value(before, "memfs_sync_passes_total", store=sid, outcome="ok") == 1
        assert value(before, "memfs_store_requests_total", kind="list_memories", status="200") >= 1
        assert value(before, "memfs_memories", store=sid) == 1
        assert value(before, "memfs_dirty_files", store=sid) == 0

        for i in range(3):
            (root / f"new-{i}.md").write_text(f"note {i}\n" * 100)
        with pytest.raises(OSError):  # EILSEQ from write(2): held back, not pushed
            with open(root / "binary.dat", "wb") as f:
                f.write(b"\xff\xfe not text")
        (root / "shared.md").write_text("local edit\n")
        shared_api.update_memory(sid, shared["id"], content="remote edit\n")

        written = scrape(url)
        assert value(written, "memfs_dirty_files", store=sid) == 4
        assert value(written, "memfs_refused_files", store=sid) == 1
        assert value(written, "memfs_fuse_operations_total", op="write", result="ok") >= 4
        assert value(written, "memfs_fuse_operations_total", op="write", result="EILSEQ") == 1
        # each new name was looked up first: a negative entry (answered "ok", inode 0)
        # where the kernel may cache it, ENOENT where it must not
        assert (
            value(written, "memfs_fuse_operations_total", op="lookup", result="ok")
            + value(written, "memfs_fuse_operations_total", op="lookup", result="ENOENT")
        ) >= 4

        proc.sync_held_back()  # exit 1: binary.dat is refused
        after = scrape(url)
        assert value(after, "memfs_sync_passes_total", store=sid, outcome="ok") == 2
        assert value(after, "memfs_conflicts_total", store=sid) == 1
        assert value(after, "memfs_store_requests_total", kind="create_memory", status="200") == 3
        assert value(after, "memfs_push_seconds_count", kind="create") == 3
        assert value(after, "memfs_push_seconds_sum", kind="create") > 0
        up = value(after, "memfs_store_bytes_total", direction="up")
        assert up - value(before, "memfs_store_bytes_total", direction="up") > 3 * 800
        assert value(after, "memfs_store_bytes_total", direction="down") > value(
            before, "memfs_store_bytes_total", direction="down"
        )
        assert value(after, "memfs_dirty_files", store=sid) == 0
        assert value(after, "memfs_refused_files", store=sid) == 1
        assert value(after, "memfs_memories", store=sid) == 5  # the conflict copy is in the cache
        assert value(after, "process_resident_memory_bytes") > 0
        assert (root / "shared.md").read_text() == "remote edit\n"  # the store won
    finally:
        proc.expect_exit(1)  # binary.dat is not in the store: named at the stop
        assert proc.stop() == 1
        proc.cleanup()


def test_a_bad_or_taken_metrics_address_refuses_the_start(
    tmp_path: Path, shared_server: ServerProcess, store: dict[str, object]
) -> None:
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    env_url = {"ANTHROPIC_BASE_URL": shared_server.url}

    def mount(addr: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [
                sys.executable,
                "-m",
                "memfs.cli",
                "mount",
                str(store["id"]),
                str(mnt),
                "--cache-dir",
                str(tmp_path / "cache"),
                "--metrics-addr",
                addr,
            ],
            env={**os.environ, **env_url},
            capture_output=True,
            text=True,
            timeout=60,
        )

    bad = mount("9100")
    assert bad.returncode == 2
    assert "--metrics-addr '9100': expected HOST:PORT" in bad.stderr
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        busy = mount(f"127.0.0.1:{port}")
    assert busy.returncode == 2
    assert (
        f"cannot listen on --metrics-addr 127.0.0.1:{port}: the port is already in use"
        in busy.stderr
    )
    assert not list(mnt.iterdir())


@pytest.mark.deadline(120)
def test_a_session_reports_each_store(
    tmp_path: Path, shared_server: ServerProcess, shared_api: Api
) -> None:
    notes = shared_api.create_store("Notes")["id"]
    team = shared_api.create_store("Team")["id"]
    shared_api.create_memory(team, "/a.md", "a\n")
    shared_api.create_memory(team, "/b.md", "b\n")
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
    root = tmp_path / "memory"
    root.mkdir()
    port = free_port()
    proc = MountProcess(
        [
            "session",
            str(spec),
            "--root",
            str(root),
            "--cache-dir",
            str(tmp_path / "cache"),
            "--sync-interval",
            "3600",
            "--no-push-soon",
            "--metrics-addr",
            f"127.0.0.1:{port}",
        ],
        root,
        url=shared_server.url,
        log_path=tmp_path / "session.log",
    )
    proc.env["ANTHROPIC_API_KEY"] = "anything"  # a session needs a credential
    proc.start()
    try:
        (root / "notes" / "new.md").write_text("new\n")
        samples = scrape(f"http://127.0.0.1:{port}/metrics")
        assert value(samples, "memfs_memories", store=notes) == 1
        assert value(samples, "memfs_dirty_files", store=notes) == 1
        assert value(samples, "memfs_memories", store=team) == 2
        assert value(samples, "memfs_dirty_files", store=team) == 0
        assert value(samples, "memfs_sync_passes_total", store=team, outcome="ok") == 1
        assert value(samples, "memfs_fuse_operations_total", op="create", result="ok") == 1
    finally:
        assert proc.stop() == 0
        proc.cleanup()
