"""Run `memfs mount` / `memfs session` as a real daemon process over a real FUSE mount.

`fuse_usable()` decides whether this machine can mount; under CI=true a machine that
cannot is a failure, never a skip (`require_fuse`).
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tests.support import daemonwatch
from tests.support.deadline import eventually

READY_MARK = "memfs: mounted at "


def fuse_problem() -> str | None:
    """Why FUSE can't be used here, or None."""
    if not os.path.exists("/dev/fuse"):
        return "/dev/fuse does not exist"
    if not os.access("/dev/fuse", os.R_OK | os.W_OK):
        return "/dev/fuse is not accessible"
    if shutil.which("fusermount3") is None:
        return "fusermount3 is not installed"
    return None


def require_fuse() -> None:
    import pytest  # here, so the benchmarks (scripts/benchmarks) can use this module

    problem = fuse_problem()
    if problem is None:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"FUSE is required under CI=true: {problem}")
    pytest.skip(f"FUSE unavailable: {problem}")


def is_mounted(path: Path) -> bool:
    real = os.path.realpath(path)
    with open("/proc/self/mounts") as f:
        return any(line.split()[1] == real for line in f)


def lazy_unmount(path: Path) -> None:
    """Detach a mount a dead or killed daemon left behind (no-op if nothing is mounted)."""
    if is_mounted(path):
        subprocess.run(
            ["fusermount3", "-u", "-z", str(path)], capture_output=True, check=False, timeout=30
        )


class MountProcess:
    """One daemon in the foreground (so tests can SIGTERM or SIGKILL it).

    The benchmarks reuse it with `log_level="info"` (debug logging costs throughput)
    and a finer `poll_interval` (readiness is timed from `ready_s`).
    """

    poll_interval = 0.02  # seconds between looks for the ready line

    def __init__(
        self,
        args: Sequence[str],
        mountpoint: Path,
        *,
        url: str,
        log_path: Path,
        env: dict[str, str] | None = None,
        log_level: str = "debug",
        memfs: Sequence[str] = (sys.executable, "-m", "memfs.cli"),
    ) -> None:
        self.args = list(args)
        self.program = list(memfs)  # another install's `bin/memfs` (tests of installs)
        self.mountpoint = mountpoint
        self.url = url
        self.log_path = log_path
        self.log_level = log_level
        self.env = {**os.environ, "ANTHROPIC_BASE_URL": url, **(env or {})}
        self.env.pop("ANTHROPIC_API_KEY", None)
        self.proc: subprocess.Popen[bytes] | None = None
        self.ready_s = 0.0  # seconds from launch until the mount was live (last start)
        self.expected_exit = 0  # what the watch (tests/support/daemonwatch.py) accepts
        self._stderr = b""
        self.problems: list[str] = []  # how its runs ended, when not as expected
        self._finished = True  # no run in flight that `cleanup` has not seen to
        watch = daemonwatch.current()
        if watch is not None:
            watch.daemons.append(self)

    @property
    def name(self) -> str:
        return "the daemon's output"

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def start(self, timeout: float = 30.0) -> MountProcess:
        """Launch and wait, bounded, for the ready line; on any failure nothing is left
        running or mounted."""
        try:
            self.mountpoint.mkdir(parents=True, exist_ok=True)
        except OSError as e:  # a dead mount a killed daemon left: the daemon clears it
            if e.errno != errno.ENOTCONN:
                raise
        try:
            return self._launch(timeout)
        except BaseException:
            self.cleanup()
            raise

    def _launch(self, timeout: float) -> MountProcess:
        self.cleanup()  # a restart: the last run is judged before it is forgotten
        self._finished = False
        self.expected_exit = 0
        cmd = [
            *self.program,
            "--log-level",
            self.log_level,
            "--log-file",
            str(self.log_path),
            *self.args,
        ]
        t0 = time.perf_counter()
        self.proc = subprocess.Popen(
            cmd,
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        deadline = time.monotonic() + timeout
        assert self.proc.stderr is not None
        os.set_blocking(self.proc.stderr.fileno(), False)
        seen = b""
        while time.monotonic() < deadline:
            chunk = self.proc.stderr.read() or b""
            seen += chunk
            if READY_MARK.encode() in seen:
                self.ready_s = time.perf_counter() - t0
                return self
            if self.proc.poll() is not None:
                seen += self.proc.stderr.read() or b""
                self.expected_exit = self.proc.returncode  # reported right here
                raise RuntimeError(
                    f"memfs exited {self.proc.returncode}: {seen.decode()}\n{self.log()}"
                )
            time.sleep(self.poll_interval)
        self.kill()
        raise RuntimeError(f"memfs did not become ready: {seen.decode()}\n{self.log()}")

    def log(self) -> str:
        try:
            return self.log_path.read_text()
        except FileNotFoundError:
            return ""

    def outputs(self) -> list[str]:
        """Its log, and what it wrote to stderr (a crash before logging is set up)."""
        return [self.log(), self._stderr.decode(errors="replace")]

    def expect_exit(self, code: int) -> None:
        """Declare the exit code this test makes the daemon end with (default 0)."""
        self.expected_exit = code

    def memfs(
        self, *args: str, timeout: float = 60.0, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        """Run a `memfs` CLI command against this mount's server."""
        result = subprocess.run(
            [*self.program, *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if check and result.returncode != 0:
            raise AssertionError(
                f"memfs {' '.join(args)} failed {result.returncode}: {result.stderr}"
            )
        return result

    def mount_status(self) -> dict[str, Any]:
        """This mount's `memfs status --json` entry (stores, fuse_requests, pyfuse3)."""
        import json

        out = self.memfs("status", str(self.mountpoint), "--json").stdout
        mount: dict[str, Any] = json.loads(out)["mounts"][0]
        return mount

    def fuse_requests(self) -> dict[str, int]:
        """FUSE requests the daemon has answered so far, by handler."""
        counts: dict[str, int] = self.mount_status()["fuse_requests"]
        return counts

    def sync(self) -> subprocess.CompletedProcess[str]:
        return self.memfs("sync", str(self.mountpoint))

    def sync_held_back(self) -> str:
        """`memfs sync` while the store lacks some of this mount's changes (a file it
        refused, or a merge it could not hold): the pass runs, and it exits 1 naming
        them. Its stdout."""
        result = self.memfs("sync", str(self.mountpoint), check=False)
        assert result.returncode == 1, (result.stdout, result.stderr)
        assert "  refused: " in result.stdout or "  conflict: " in result.stdout, result.stdout
        return result.stdout

    def wait(self, timeout: float = 60.0) -> int:
        assert self.proc is not None
        return self.proc.wait(timeout=timeout)

    def stop(self, timeout: float = 60.0) -> int:
        """SIGTERM: final flush, unmount, exit."""
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.wait(timeout)

    def kill(self) -> None:
        """SIGKILL: no teardown; the dead mount stays until cleared. A daemon the signal
        found already in its exit (a SIGTERM's flush that just finished) keeps its 0:
        the exit has begun when `poll` still says running."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
            if self.proc.returncode != 0:
                self.expected_exit = -signal.SIGKILL

    def dump_stacks(self) -> None:
        """SIGUSR1: the daemon writes every thread's stack to its log (faulthandler)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGUSR1)

    def cleanup(self, stop_timeout: float = 90.0) -> None:
        """Stop it as a user would (SIGTERM: final flush, unmount), bounded: one that
        does not exit in time dumps its stacks to its log and is killed."""
        if self._finished or self.proc is None:
            return
        self._finished = True
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(stop_timeout)
            except subprocess.TimeoutExpired:
                self.dump_stacks()
                time.sleep(1)
                self.kill()
                self.problems.append(
                    f"the daemon did not exit within {stop_timeout:g}s of SIGTERM "
                    "(its stacks are in its log)"
                )
        lazy_unmount(self.mountpoint)
        if self.proc.stderr is not None:
            self._stderr += self.proc.stderr.read() or b""
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()
        code = self.proc.returncode
        if code != self.expected_exit:
            self.problems.append(f"the daemon exited {code}, not {self.expected_exit}")

    def finish(self) -> list[str]:
        """`cleanup`, then what was wrong with how it ended."""
        self.cleanup()
        return [f"{self.args[0]} at {self.mountpoint}: {p}" for p in self.problems]


# A mount that syncs only when asked: no interval pass, push soon, watch or probe comes
# between a test's steps, so each step's outcome is known.
QUIET = ("--sync-interval", "3600", "--no-push-soon", "--no-watch", "--probe-budget", "0")


def mount_store(
    tmp_path: Path,
    url: str,
    store_id: str,
    *extra: str,
    name: str = "mnt",
    cache: str | None = None,
    memfs: Sequence[str] = (sys.executable, "-m", "memfs.cli"),
) -> MountProcess:
    mountpoint = tmp_path / name
    cache_dir = tmp_path / (cache or f"{name}-cache")
    args = ["mount", store_id, str(mountpoint), "--cache-dir", str(cache_dir), *extra]
    if os.environ.get("MEMFS_TEST_OPEN_REQUESTS") == "1" and "--zero-message-opens" not in extra:
        # The suite in the opt-out (docs/reliability.md §3); a test that names the
        # default (tests/mount/test_zero_message_writes.py) keeps it.
        args.append("--open-requests")
    log_path = tmp_path / f"{name}.log"
    return MountProcess(args, mountpoint, url=url, log_path=log_path, memfs=memfs).start()


def pyfuse3_build(mount: MountProcess) -> dict[str, Any]:
    """The mount's pyfuse3 levers; under MEMFS_TEST_PYFUSE3=patched|stock (.ci/run) the
    build must be that one, so a quiet fallback cannot send a test down the other
    branch unseen (docs/pyfuse3-patch.md)."""
    levers: dict[str, Any] = mount.mount_status()["pyfuse3"]
    wanted = os.environ.get("MEMFS_TEST_PYFUSE3")
    if wanted is not None:
        patched = "+memfs." in str(levers["version"])
        assert patched == (wanted == "patched"), (wanted, levers)
        assert levers["noflush"] == patched, levers
        assert levers["read_spin"] == patched, levers
    return levers


def one_line(
    result: subprocess.CompletedProcess[str], code: int, pattern: str, context: str = ""
) -> None:
    """A refused command: exit `code` and one stderr line that matches `pattern` whole."""
    lines = result.stderr.strip().splitlines()
    assert result.returncode == code, (context, result.stderr)
    assert len(lines) == 1, (context, result.stderr)
    assert re.fullmatch(pattern, lines[0]), (context, lines[0])


def xattrs(path: Path) -> dict[str, Any]:
    return {name: os.getxattr(path, name).decode() for name in os.listxattr(path)}


def cli_bytes(mount: MountProcess, *args: str) -> subprocess.CompletedProcess[bytes]:
    """The real CLI in `mount`'s environment, stdout as bytes (show and diff are byte
    exact)."""
    return subprocess.run(
        [sys.executable, "-m", "memfs.cli", *args], env=mount.env, capture_output=True, timeout=60
    )


def cli_ok(mount: MountProcess, *args: str) -> bytes:
    """`cli_bytes` that must exit 0; its stdout."""
    result = cli_bytes(mount, *args)
    assert result.returncode == 0, (args, result.stderr.decode())
    return result.stdout


OUTSIDE_UNMOUNT_BUSY_S = 5.0  # how long an outside unmount is retried while it says busy


def unmount_from_outside(
    *argv: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """`umount`/`fusermount3 -u` as a user runs it, retried while it answers "busy": a
    writer's close queued for the close watch holds the mount until the daemon has read
    it (docs/reliability.md §3, "a retry succeeds"). Any other failure is returned; busy
    past OUTSIDE_UNMOUNT_BUSY_S fails the test."""
    return eventually(
        lambda: subprocess.run(list(argv), capture_output=True, text=True, timeout=30, env=env),
        f"{argv[0]} no longer answering busy",
        timeout=OUTSIDE_UNMOUNT_BUSY_S,
        until=lambda done: done.returncode == 0 or "busy" not in done.stderr.lower(),
    )
