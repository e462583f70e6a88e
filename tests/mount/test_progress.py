"""Progress on long work, on a terminal only (a pty here), and the final flush's Ctrl-C.

On a terminal: the listing streaming at start-up, what a previous run left being pushed,
`memfs sync` pushing, and the final flush at Ctrl-C. On a pipe: nothing, so JSON stays
clean. During the final flush a second Ctrl-C asks once more and a third stops it, the
unpushed files staying in the journal for the next start.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.api import Api
from tests.support.deadline import eventually
from tests.support.mount import QUIET, MountProcess, lazy_unmount, mount_store
from tests.support.server import ServerProcess, start_server
from tests.support.tty import PtyProcess


def env_for(url: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANTHROPIC_")}
    return {**env, "ANTHROPIC_BASE_URL": url, "TERM": "xterm"}


def mount_args(store_id: str, tmp_path: Path, *extra: str) -> list[str]:
    return [
        "--log-level",
        "debug",
        "--log-file",
        str(tmp_path / "mnt.log"),
        "mount",
        store_id,
        str(tmp_path / "mnt"),
        "--cache-dir",
        str(tmp_path / "cache"),
        *QUIET,
        *extra,
    ]


@pytest.fixture
def pty_mounts(tmp_path: Path) -> Iterator[list[PtyProcess]]:
    started: list[PtyProcess] = []
    (tmp_path / "mnt").mkdir()
    try:
        yield started
    finally:
        for p in started:
            p.close()
        lazy_unmount(tmp_path / "mnt")


def wait_for_file(path: Path, text: str, timeout: float = 60.0) -> None:
    eventually(
        path.read_text,
        f"{text!r} in {path}",
        until=lambda got: text in got,
        ignoring=(FileNotFoundError,),
        timeout=timeout,
    )


@pytest.mark.deadline(120)
def test_start_up_and_final_flush_on_a_terminal(
    tmp_path: Path, shared_server: ServerProcess, shared_api: Api, pty_mounts: list[PtyProcess]
) -> None:
    sid = shared_api.create_store("listing")["id"]
    for i in range(120):
        shared_api.create_memory(sid, f"/d{i % 4}/m{i}.md", f"{i}\n")
    p = PtyProcess(mount_args(sid, tmp_path), env_for(shared_server.url))
    pty_mounts.append(p)
    p.wait_for("memfs: mounted at ")
    assert re.search(r"^listing 120 memories", p.text, re.M), p.text
    for i in range(5):
        (tmp_path / "mnt" / f"new{i}.md").write_text("new\n")
    p.proc.send_signal(signal.SIGINT)
    assert p.wait() == 0, p.text
    assert re.search(r"^flushing 5 of 5 files \[#+\]", p.text, re.M), p.text
    assert "press Ctrl-C once more" not in p.text
    assert len(shared_api.list_memories(sid)) == 125


@pytest.mark.deadline(240)
def test_second_ctrl_c_asks_third_stops_and_the_journal_keeps_the_files(
    tmp_path: Path, pty_mounts: list[PtyProcess]
) -> None:
    server = start_server(tmp_path / "store.db")
    try:
        with Api(server.url) as api:
            sid = api.create_store("stalled")["id"]
        proc = MountProcess(
            mount_args(sid, tmp_path, "--flush-timeout", "600")[4:],
            tmp_path / "mnt",
            url=server.url,
            log_path=tmp_path / "mnt.log",
        )
        proc.start()
        try:
            for i in range(13):
                (tmp_path / "mnt" / f"f{i:02}.md").write_text(f"{i}\n")
            assert proc.proc is not None and proc.proc.stderr is not None
            os.kill(server.proc.pid, signal.SIGSTOP)  # the store stops answering
            try:
                proc.proc.send_signal(signal.SIGINT)
                wait_for_file(proc.log_path, "final sync started files=13")
                proc.proc.send_signal(signal.SIGINT)
                seen = read_until(proc, "press Ctrl-C once more")
                assert (
                    "the final sync is still pushing 13 changed files; press Ctrl-C "
                    "once more to stop it and keep them in the journal"
                ) in seen
                proc.proc.send_signal(signal.SIGINT)
                proc.expect_exit(130)
                code = proc.wait(60)
                seen += (proc.proc.stderr.read() or b"").decode()
            finally:
                os.kill(server.proc.pid, signal.SIGCONT)
            assert code == 130, seen
            assert (
                "memfs: final sync stopped; 13 changed files not pushed, kept in the "
                "journal: the next start pushes them"
            ) in seen
            named = ", ".join(f"/f{i:02}.md" for i in range(10))
            assert (
                f"memfs: 13 changed files of {sid} could not be pushed; they stay in "
                f"the journal for the next start: {named} and 3 more"
            ) in seen
        finally:
            proc.cleanup()

        # The next start, on a terminal, pushes what the journal kept. The final sync
        # pushes first, so the creates it had sent when the store stopped answering
        # land once the store goes on: the start settles those as its own (no copy, no
        # second create) and pushes the rest.
        p = PtyProcess(mount_args(sid, tmp_path), env_for(server.url))
        pty_mounts.append(p)
        p.wait_for("memfs: mounted at ")
        pushed = re.search(r"^pushing (\d+) of \1 files \[#+\]", p.text, re.M)
        assert pushed is not None and 1 <= int(pushed.group(1)) <= 13, p.text
        with Api(server.url) as api:
            assert sorted(m["path"] for m in api.list_memories(sid)) == [
                f"/f{i:02}.md" for i in range(13)
            ]
        p.proc.send_signal(signal.SIGINT)
        assert p.wait() == 0, p.text
    finally:
        server.stop()


def read_until(proc: MountProcess, text: str, timeout: float = 60.0) -> str:
    assert proc.proc is not None and proc.proc.stderr is not None
    stderr = proc.proc.stderr
    seen: list[str] = []

    def more() -> str:
        seen.append((stderr.read() or b"").decode())
        return "".join(seen)

    return eventually(more, f"{text!r} on stderr", until=lambda got: text in got, timeout=timeout)


@pytest.mark.deadline(180)
def test_sync_and_unmount_show_pushing_on_a_terminal_and_stay_clean_on_a_pipe(
    tmp_path: Path,
) -> None:
    # Each memory request waits up to 300 ms, so pushing 80 files takes a while.
    server = start_server(
        tmp_path / "store.db", extra_args=["--faults", "latency_ms=300,paths=memories,seed=1"]
    )
    try:
        with Api(server.url) as api:
            sid = api.create_store("slow")["id"]
        proc = mount_store(
            tmp_path,
            server.url,
            sid,
            *QUIET,
        )
        try:
            for i in range(80):
                (proc.mountpoint / f"n{i}.md").write_text(f"{i}\n")
            p = PtyProcess(["sync", str(proc.mountpoint)], env_for(server.url))
            try:
                assert p.wait(120) == 0, p.text
            finally:
                p.close()
            assert re.search(r"pushing \d+ of 80 files", p.text), p.text
            assert "pushing 80 of 80 files" in p.text, p.text  # where it ended
            assert "listing" not in p.text
            assert re.search(rf"{sid}: ok .*pushed=80", p.text), p.text

            for i in range(80):
                (proc.mountpoint / f"n{i}.md").write_text(f"{i} again\n")
            piped = subprocess.run(
                [sys.executable, "-m", "memfs.cli", "sync", str(proc.mountpoint), "--json"],
                env=env_for(server.url),
                capture_output=True,
                text=True,
                timeout=120,
            )
            assert piped.returncode == 0, piped.stderr
            answer = json.loads(piped.stdout)  # `status --json`'s schema
            [store] = answer["mounts"][0]["stores"]
            assert store["last_pass"]["outcome"] == "ok" and store["last_pass"]["pushed"] == 80
            assert piped.stderr == ""

            for i in range(80):
                (proc.mountpoint / f"n{i}.md").write_text(f"{i} for the final sync\n")
            p = PtyProcess(["unmount", str(proc.mountpoint)], env_for(server.url))
            try:
                assert p.wait(120) == 0, p.text
            finally:
                p.close()
            assert re.search(r"flushing \d+ of 80 files", p.text), p.text
            assert proc.wait(60) == 0
            assert proc.proc is not None and proc.proc.stderr is not None
            assert "flushing" not in (proc.proc.stderr.read() or b"").decode()
        finally:
            proc.cleanup()
    finally:
        server.stop()
