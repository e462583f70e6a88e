"""Crash tests: `kill -9` of the daemon at random points, and of the server under load.

The promise under test: nothing acknowledged is lost. A change is acknowledged when the
system call that completes it returned: `close(2)` of a written file (or `fsync(2)`
before it), `rename(2)`, `unlink(2)`. Each trial runs a writer that makes random
changes and records each one as it is acknowledged, kills the daemon with SIGKILL at a
random moment (during writes, in the middle of a sync pass started with `memfs sync`,
or in the middle of the final flush after SIGTERM), restarts it on the same cache
directory, and checks that the mount shows every acknowledged change; then a full sync
must make the store show exactly the same. The one change in flight at the kill may
have happened or not; whatever the restarted mount shows for it becomes the truth the
store must then agree with.

Seeded: `MEMFS_CRASH_SEED=N` repeats a run. 50 trials in CI, 500 with `--long`.
"""

from __future__ import annotations

import errno
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.support.api import Api
from tests.support.files import MARKER, local_files, store_files
from tests.support.mount import mount_store, require_fuse
from tests.support.server import ServerProcess, start_server

pytestmark = [pytest.mark.fuse, pytest.mark.deadline(900)]


PATHS = [f"{d}/f{i}.md" for d in ("a", "b", "a/deep") for i in range(4)]
SEED = int(os.environ.get("MEMFS_CRASH_SEED", "20261202"))


class Writer(threading.Thread):
    """Random changes to a mount; `acked` is the state every acknowledged change left,
    `in_flight` the paths of the one change whose system call had not returned."""

    def __init__(
        self, root: Path, model: dict[str, str], rng: random.Random, max_ops: int, tag: str
    ) -> None:
        super().__init__(daemon=True)
        self.root = root
        self.acked = dict(model)
        self.rng = rng
        self.max_ops = max_ops
        self.tag = tag
        self.in_flight: set[str] = set()
        self.ops = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            for n in range(self.max_ops):
                self.one(n)
                self.ops += 1
        except OSError as e:
            if e.errno not in (errno.ENOTCONN, errno.ECONNABORTED, errno.EROFS, errno.EIO):
                self.error = e
        except BaseException as e:
            self.error = e

    def one(self, n: int) -> None:
        rng, root = self.rng, self.root
        path = rng.choice(PATHS)
        text = f"{self.tag} op {n} {rng.random():.6f}\n" * rng.randint(1, 40)
        kind = rng.choice(["write", "write", "append", "fsync", "rename", "unlink"])
        if kind in ("rename", "unlink") and path not in self.acked:
            kind = "write"
        self.in_flight = {path}
        if kind == "write":
            with open(root / path, "w") as f:
                f.write(text)
            self.acked[path] = text
        elif kind == "append":
            with open(root / path, "a") as f:
                f.write(text)
            self.acked[path] = self.acked.get(path, "") + text
        elif kind == "fsync":
            f = open(root / path, "w")  # the fsync is the acknowledgement
            try:
                f.write(text)
                f.flush()
                os.fsync(f.fileno())
                self.acked[path] = text
            finally:
                try:
                    f.close()
                except OSError:
                    pass
        elif kind == "rename":
            target = rng.choice(PATHS)
            if target == path:
                return
            self.in_flight = {path, target}
            os.rename(root / path, root / target)
            self.acked[target] = self.acked.pop(path)
        else:
            os.unlink(root / path)
            del self.acked[path]
        self.in_flight = set()


def settle(model: dict[str, str], seen: dict[str, str], in_flight: set[str]) -> None:
    """Adopt what the mount shows for the in-flight paths; everything else must match."""
    for path in in_flight:
        if path in seen:
            model[path] = seen[path]
        else:
            model.pop(path, None)


def test_kill_9_daemon_at_random_points_loses_nothing_acknowledged(
    request: pytest.FixtureRequest, tmp_path: Path, shared_server: ServerProcess, shared_api: Api
) -> None:
    require_fuse()
    trials = 500 if request.config.getoption("--long") else 50
    rng = random.Random(SEED)
    sid = str(shared_api.create_store("crash trials")["id"])
    model: dict[str, str] = {}
    kinds = {"writes": 0, "mid-pass": 0, "mid-flush": 0}
    proc = mount_store(tmp_path, shared_server.url, sid)
    for d in ("a", "b", "a/deep"):
        (proc.mountpoint / d).mkdir(parents=True, exist_ok=True)
    t_start = time.monotonic()
    try:
        for trial in range(trials):
            root = proc.mountpoint
            kind = rng.choice(list(kinds))
            kinds[kind] += 1
            writer = Writer(root, model, rng, max_ops=rng.randint(5, 40), tag=f"t{trial}")
            if kind == "writes":
                writer.start()
                time.sleep(rng.uniform(0, 0.25))
                proc.kill()
                writer.join(20)
            else:
                writer.run()  # all acknowledged before the kill
                if kind == "mid-pass":
                    syncing = subprocess.Popen(
                        [sys.executable, "-m", "memfs.cli", "sync", str(root)],
                        env=proc.env,
                        stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL,
                    )
                    time.sleep(rng.uniform(0, 0.3))
                    proc.kill()
                    syncing.wait(30)
                else:
                    assert proc.proc is not None
                    proc.proc.send_signal(signal.SIGTERM)
                    time.sleep(rng.uniform(0, 0.3))
                    proc.kill()
            assert not writer.is_alive(), f"trial {trial}: a system call hung after kill"
            assert writer.error is None, f"trial {trial}: {writer.error!r}"
            proc.cleanup()
            model = writer.acked
            proc = mount_store(tmp_path, shared_server.url, sid)  # same cache directory
            seen = local_files(proc.mountpoint)
            settle(model, seen, writer.in_flight)
            assert seen == model, (
                f"trial {trial} ({kind}, seed {SEED}): the mount lost acknowledged changes"
            )
            proc.sync()
            assert store_files(shared_api, sid) == model, (
                f"trial {trial} ({kind}, seed {SEED}): the store disagrees after a sync"
            )
            assert local_files(proc.mountpoint) == model
        assert proc.stop() == 0
        assert store_files(shared_api, sid) == model
    finally:
        proc.cleanup()
    print(f"{trials} trials {kinds} in {time.monotonic() - t_start:.0f}s, seed {SEED}")


def test_kill_9_of_the_server_under_load(tmp_path: Path) -> None:
    """The mount keeps answering while its server is dead; edits reach the store once
    the server is back, including those whose answers were lost in the crash."""
    require_fuse()
    server = start_server(tmp_path / "store.db")
    try:
        with Api(server.url) as api:
            sid = str(api.create_store("server crash")["id"])
        proc = mount_store(tmp_path, server.url, sid, "--sync-interval", "5")
        try:
            root = proc.mountpoint
            expected: dict[str, str] = {}
            slow: list[float] = []
            stop = threading.Event()

            def write_many(prefix: str, count: int) -> None:
                for i in range(count):
                    if stop.is_set():
                        return
                    t0 = time.monotonic()
                    text = f"{prefix} {i}\n" * 20
                    (root / f"{prefix}-{i:03d}.md").write_text(text)
                    expected[f"{prefix}-{i:03d}.md"] = text
                    slow.append(time.monotonic() - t0)

            # load: a background `memfs sync` loop while files are written
            def sync_loop() -> None:
                while not stop.is_set():
                    subprocess.run(
                        [sys.executable, "-m", "memfs.cli", "sync", str(root), "--timeout", "60"],
                        env=proc.env,
                        capture_output=True,
                        timeout=90,
                    )

            syncer = threading.Thread(target=sync_loop, daemon=True)
            syncer.start()
            write_many("before", 150)
            server.kill()  # mid-upload, with passes in flight
            write_many("during", 100)
            (root / "before-000.md").write_text("edited while the server was dead\n")
            expected["before-000.md"] = "edited while the server was dead\n"
            os.unlink(root / "before-001.md")
            del expected["before-001.md"]
            assert sorted(os.listdir(root)) == sorted([MARKER, *expected])
            # syscalls never waited on the dead server
            assert max(slow) < 2.0, f"slowest write {max(slow):.2f}s"
            failed = proc.memfs("sync", str(root), "--timeout", "120", check=False)
            assert failed.returncode == 1
            stop.set()
            syncer.join(120)
            server.start()  # same db and, normally, the same port
            if server.url != proc.url:
                pytest.skip("the server's port was taken while it was down")
            proc.sync()
            with Api(server.url) as api:
                assert store_files(api, sid) == expected
            assert local_files(root) == expected
            assert "memory sync failed" in proc.log()
            assert proc.stop() == 0
        finally:
            proc.cleanup()
    finally:
        server.stop()
