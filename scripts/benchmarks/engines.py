"""The things measured and the server they talk to, each as a process the harness owns.

`memfs serve` and `memfs mount` are the test suite's own helpers (`tests/support/server.py`,
`tests/support/mount.py`) run at `info` log level; rclone and the reference worker are
started here. Every started mount is in `LIVE` until cleaned up, so a failing case
leaves no mount behind (`cleanup_all`).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any, Protocol

from tests.support.mount import MountProcess, is_mounted, lazy_unmount
from tests.support.server import ServerProcess

from .common import PY, REPO


class Cleanable(Protocol):
    def cleanup(self) -> None: ...


LIVE: list[Cleanable] = []  # mounts to clean up whatever happens


def cleanup_all() -> None:
    for mount in list(LIVE):
        with contextlib.suppress(Exception):
            mount.cleanup()


def start_server(db: Path, logfile: Path, *extra_args: str) -> ServerProcess:
    """`memfs serve` (SQLite) on 127.0.0.1, a free port; its url is `.url`; `extra_args`
    go after `serve` (e.g. other options of a section's server)."""
    return ServerProcess(db, log_path=logfile, log_level="info", extra_args=extra_args).start(
        timeout=30
    )


class MemfsMount(MountProcess):
    """`memfs mount STORE MNT` in the foreground, with the harness's interval and timeouts
    (at `info` log level unless told: debug logging costs throughput)."""

    poll_interval = 0.002  # readiness is timed: look for the ready line often

    def __init__(
        self,
        store_id: str,
        mnt: Path,
        cache: Path,
        url: str,
        logfile: Path,
        *,
        interval: float = 15.0,
        flush_timeout: float = 120.0,
        extra: tuple[str, ...] = (),
        log_level: str = "info",
    ) -> None:
        args = [
            "mount",
            store_id,
            str(mnt),
            "--cache-dir",
            str(cache),
            "--sync-interval",
            str(interval),
            "--flush-timeout",
            str(flush_timeout),
            *extra,
        ]
        super().__init__(args, mnt, url=url, log_path=logfile, log_level=log_level)
        self._real = os.path.realpath(mnt)  # now: later it would stat the mount

    def start(self, timeout: float = 180) -> MemfsMount:
        """Start the daemon; `ready_s` is then the seconds from launch until the mount is live."""
        LIVE.append(self)
        super().start(timeout)
        return self

    def cli(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        return self.memfs(*args, timeout=timeout, check=False)

    def fuse_requests(self) -> dict[str, int]:
        """The daemon's FUSE requests by handler, over its control socket (no CLI
        process, and nothing that touches the mount)."""
        from memfs.control import protocol, registry
        from memfs.control.client import request

        sock = registry.socket_path(self._real)
        answer = request(str(sock), protocol.Status(), timeout=30)
        return dict(answer.fuse_requests) if isinstance(answer, protocol.StatusAnswer) else {}

    def status(self) -> dict[str, Any]:
        r = self.cli("status", str(self.mountpoint), "--json", timeout=30)
        data = json.loads(r.stdout)
        mounts = data.get("mounts", [data])
        return dict(mounts[0]["stores"][0])

    def wait_content(self, timeout: float = 120) -> None:
        """Until the background download has every content (bounded)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.status().get("missing_content", 0) == 0:
                return
            time.sleep(0.2)
        raise RuntimeError("content did not arrive in time")

    def stop(self, timeout: float = 300) -> int:
        """SIGTERM: final flush, unmount, exit; whatever happens, nothing stays mounted."""
        if self.proc is None:
            return 0
        try:
            return super().stop(timeout)
        finally:
            self.cleanup()

    def cleanup(self) -> None:
        super().cleanup()
        if self in LIVE:
            LIVE.remove(self)


class RcloneMount:
    """`rclone mount` of a local directory (a local-path remote), --vfs-cache-mode writes."""

    def __init__(self, src: Path, mnt: Path, cache: Path, logfile: Path) -> None:
        self.src, self.mnt, self.cache, self.logfile = src, mnt, cache, logfile
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 60) -> float:
        self.mnt.mkdir(parents=True, exist_ok=True)
        t0 = time.perf_counter()
        with open(self.logfile, "ab") as errlog:
            self.proc = subprocess.Popen(
                [
                    "rclone",
                    "mount",
                    str(self.src),
                    str(self.mnt),
                    "--vfs-cache-mode",
                    "writes",
                    "--cache-dir",
                    str(self.cache),
                ],
                env={**os.environ, "RCLONE_CONFIG": str(self.cache / "rclone.conf")},
                stdin=subprocess.DEVNULL,
                stdout=errlog,
                stderr=errlog,
            )
        LIVE.append(self)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if is_mounted(self.mnt):
                return time.perf_counter() - t0
            if self.proc.poll() is not None:
                raise RuntimeError(f"rclone exited {self.proc.returncode}")
            time.sleep(0.005)
        self.cleanup()
        raise RuntimeError("rclone mount not ready")

    def stop(self, timeout: float = 120) -> int:
        if self.proc is None:
            return 0
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)  # rclone finishes uploads and unmounts
        try:
            code = self.proc.wait(timeout)
        finally:
            self.cleanup()
        return code

    def cleanup(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        lazy_unmount(self.mnt)
        if self in LIVE:
            LIVE.remove(self)


class RefWorker:
    """The reference worker (anthropic SDK `SessionMemoryStores`) in one long-lived process.

    Like the real worker it is started once (interpreter and SDK import paid once, timed
    apart); each `download` materialises one store in a new folder, `sync` runs one
    recurring sync pass over the last download. The process is `refworker.py`.
    """

    def __init__(self, url: str, logfile: Path) -> None:
        self.url, self.logfile = url, logfile
        self.proc: subprocess.Popen[str] | None = None
        self.startup_s = 0.0

    def start(self, timeout: float = 120) -> float:
        t0 = time.perf_counter()
        with open(self.logfile, "a") as errlog:
            self.proc = subprocess.Popen(
                [PY, "-m", "scripts.benchmarks.refworker", self.url],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=errlog,
                text=True,
                cwd=REPO,
            )
        self._answer(timeout)
        self.startup_s = time.perf_counter() - t0
        return self.startup_s

    def _answer(self, timeout: float) -> dict[str, Any]:
        assert self.proc is not None and self.proc.stdout is not None
        stdout = self.proc.stdout
        box: list[str] = []
        t = threading.Thread(target=lambda: box.append(stdout.readline()), daemon=True)
        t.start()
        t.join(timeout)
        if not box or not box[0]:
            self.stop()
            raise RuntimeError("the reference worker did not answer")
        answer: dict[str, Any] = json.loads(box[0])
        if not answer.get("ok"):
            raise RuntimeError(f"reference worker failed: {answer}")
        return answer

    def _ask(self, request: dict[str, Any], timeout: float) -> dict[str, Any]:
        assert self.proc is not None and self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        return self._answer(timeout)

    def download(self, store_id: str, root: Path, timeout: float = 600) -> dict[str, Any]:
        return self._ask({"op": "download", "store": store_id, "root": str(root)}, timeout)

    def sync(self, timeout: float = 600) -> dict[str, Any]:
        return self._ask({"op": "sync"}, timeout)

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            with contextlib.suppress(OSError, ValueError):
                assert self.proc.stdin is not None
                self.proc.stdin.write(json.dumps({"op": "quit"}) + "\n")
                self.proc.stdin.flush()
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
