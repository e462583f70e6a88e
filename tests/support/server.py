"""Run `memfs serve` as a real process on 127.0.0.1, the peer of every integration test.

Each `ServerProcess` is watched as the mount daemons are (tests/support/daemonwatch.py):
one a test starts is checked at that test's teardown, one started outside any test (a
session or module fixture's) is checked at each test's teardown and by `retire()`.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from memfs.server.sqlite import Database
from tests.support import daemonwatch

READY_PREFIX = "memfs serve: listening on "
REPO_ROOT = Path(__file__).resolve().parents[2]
SEED_ACTOR = ("api_actor", "apikey_seed")


class ServerStartError(RuntimeError):
    """The server exited or stayed silent instead of printing its listening line."""


class ServerProcess:
    """One `memfs serve` process; `start()` again restarts it on the same db (and port)."""

    def __init__(
        self,
        db_path: Path | str,
        *,
        api_key: str | None = None,
        extra_args: Sequence[str] = (),
        log_path: Path | None = None,
        log_level: str = "debug",
        env: Mapping[str, str] | None = None,
    ) -> None:
        # `db` is what --db gets: a SQLite path, or a postgresql:// URL (then pass log_path).
        self.db = str(db_path)
        self.is_url = "://" in self.db
        self.db_path = Path(db_path) if not self.is_url else Path(str(log_path))
        self.log_level = log_level
        self.api_key = api_key
        self.extra_args = list(extra_args)
        # the admin key goes in the environment, as an operator should give it (not argv)
        self.env = {k: v for k, v in os.environ.items() if k != "MEMFS_SERVE_API_KEY"}
        self.env.update(env or {}, PYTHONUNBUFFERED="1")
        if api_key is not None:
            self.env["MEMFS_SERVE_API_KEY"] = api_key
        if log_path is None and self.is_url:
            raise ValueError("a server on a database URL needs a log_path")
        self.log_path = log_path or self.db_path.with_name(self.db_path.name + ".log")
        self.proc: subprocess.Popen[bytes] | None = None
        self.url = ""
        self.port = 0
        # for the watch: how the runs ended, and how much of the log has been judged
        self.problems: list[str] = []
        self.expected_exit = 0
        self._exit_declared = False  # the test ends this run itself (`expect_exit`)
        self._asked = False  # stop() or kill() ended this run
        self._judged = True  # no run in flight that `_judge_run` has not seen to
        self._checked = self._log_size()  # what the log held before is another's
        self._excused: list[str] = []  # judged text from before a failed spawn
        watch = daemonwatch.current()
        if watch is not None:
            watch.daemons.append(self)
        else:
            daemonwatch.OUTLIVING.append(self)

    @property
    def name(self) -> str:
        return f"the log of memfs serve --db {self.db} ({self.log_path})"

    def command(self, port: int) -> list[str]:
        cmd = [
            sys.executable,
            "-m",
            "memfs.cli",
            "--log-level",
            self.log_level,
            "serve",
            "--port",
            str(port),
            "--db",
            self.db,
        ]
        return cmd + self.extra_args

    def start(self, timeout: float = 20.0) -> ServerProcess:
        """Start (or restart) and wait, bounded, for the listening line."""
        if self.proc is not None and self.proc.poll() is None:
            raise RuntimeError("server is already running")
        if self.port:
            before = self._log_size()
            try:
                return self._spawn(self.port, timeout)
            except ServerStartError:
                # the old port was taken meanwhile: any free port will do, and what the
                # refused start logged is no fault of the server
                self._excuse_from(before)
        return self._spawn(0, timeout)

    def _spawn(self, port: int, timeout: float) -> ServerProcess:
        self._judge_run()  # a restart: the last run is judged before it is forgotten
        self._judged = self._asked = self._exit_declared = False
        self.expected_exit = 0
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                self.command(port),
                stdout=subprocess.PIPE,
                stderr=log,
                stdin=subprocess.DEVNULL,
                cwd=REPO_ROOT,
                env=self.env,
            )
        line = self._read_ready_line(timeout)
        self.url = line[len(READY_PREFIX) :].strip()
        self.port = int(self.url.rsplit(":", 1)[1])
        return self

    def _read_ready_line(self, timeout: float) -> str:
        assert self.proc is not None and self.proc.stdout is not None
        deadline = time.monotonic() + timeout
        buffer = b""
        fd = self.proc.stdout.fileno()
        while b"\n" not in buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self.kill()
                raise ServerStartError(f"no listening line within {timeout}s\n{self.log_tail()}")
            ready, _, _ = select.select([fd], [], [], remaining)
            if ready:
                chunk = os.read(fd, 4096)
                if not chunk:
                    code = self.proc.wait(timeout=5)
                    self._asked, self.expected_exit = True, code  # reported right here
                    raise ServerStartError(f"server exited with {code}\n{self.log_tail()}")
                buffer += chunk
        line = buffer.split(b"\n", 1)[0].decode()
        if not line.startswith(READY_PREFIX):
            self.kill()
            raise ServerStartError(f"unexpected first line {line!r}\n{self.log_tail()}")
        return line

    def log_tail(self, lines: int = 30) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def stop(self, timeout: float = 10.0) -> int | None:
        """SIGTERM and wait; SIGKILL if it does not exit in time. Returns the exit code."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self._asked = True
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.dump_stacks()
                time.sleep(1)
                self.proc.kill()
                self.proc.wait()
                self.expected_exit = self.proc.returncode  # reported here instead
                self.problems.append(f"the server did not exit within {timeout:g}s of SIGTERM")
        self._close_pipe()
        return self.proc.returncode

    def kill(self) -> None:
        """SIGKILL: no shutdown code runs, as in a crash."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self._asked = True
            self.proc.kill()
            self.proc.wait()
            if self.proc.returncode != 0:  # not one already in its exit
                self.expected_exit = -signal.SIGKILL
        self._close_pipe()

    def expect_exit(self, code: int) -> None:
        """Declare that the test ends this run itself (a signal of its own), with `code`."""
        self.expected_exit, self._exit_declared = code, True

    def dump_stacks(self) -> None:
        """SIGUSR1: the server writes every thread's stack to its log (faulthandler)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGUSR1)

    # ---------------------------------------------------------------- the watch

    def _judge_run(self) -> None:
        """Note what was wrong with how the last run ended, once it has."""
        if self._judged or self.proc is None or self.proc.poll() is None:
            return
        self._judged = True
        code = self.proc.returncode
        if not self._asked and not self._exit_declared:
            self.problems.append(f"the server exited {code} by itself, before its test ended")
        elif code != self.expected_exit:
            self.problems.append(f"the server exited {code}, not {self.expected_exit}")

    def _reported(self) -> list[str]:
        found, self.problems = self.problems, []
        return [f"memfs serve --db {self.db}: {p}" for p in found]

    def finish(self) -> list[str]:
        """Stop it (SIGTERM) if still running; what was wrong with how its runs ended."""
        if self.proc is not None and self.proc.poll() is None:
            self.stop()
        self._judge_run()
        return self._reported()

    def ended(self) -> list[str]:
        """For a server that outlives its tests: what was wrong, if it is no longer running."""
        self._judge_run()
        return self._reported()

    def outputs(self) -> list[str]:
        """What it logged (its log holds its stderr) since the last look; while it runs,
        up to the last whole line."""
        running = self.proc is not None and self.proc.poll() is None
        data = self._log_bytes(self._checked)
        if running:
            data = data[: data.rfind(b"\n") + 1]
        self._checked += len(data)
        texts, self._excused = [*self._excused, data.decode(errors="replace")], []
        return texts

    def retire(self) -> None:
        """Stop a server that outlived its tests (a session or module fixture's); raise
        if it exited badly or logged an ERROR line or a traceback since the last test."""
        if self in daemonwatch.OUTLIVING:
            daemonwatch.OUTLIVING.remove(self)
        found = self.finish() + daemonwatch.DaemonWatch().judge(self)
        if found:
            raise AssertionError("\n\n".join(found))

    def _log_size(self) -> int:
        try:
            return self.log_path.stat().st_size
        except OSError:
            return 0

    def _log_bytes(self, start: int, end: int | None = None) -> bytes:
        try:
            with open(self.log_path, "rb") as f:
                f.seek(start)
                return f.read() if end is None else f.read(max(0, end - start))
        except OSError:
            return b""

    def _excuse_from(self, offset: int) -> None:
        """Keep the log up to `offset` for judging, and skip what was logged since."""
        self._excused.append(self._log_bytes(self._checked, offset).decode(errors="replace"))
        self._checked = self._log_size()

    def _close_pipe(self) -> None:
        if self.proc is not None and self.proc.stdout is not None:
            self.proc.stdout.close()

    def __enter__(self) -> ServerProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        if self in daemonwatch.OUTLIVING and exc[0] is None:
            self.retire()
        else:
            self.stop()  # the test's watch judges it


def start_server(
    db_path: Path | str,
    *,
    api_key: str | None = None,
    extra_args: Sequence[str] = (),
    log_path: Path | None = None,
    env: Mapping[str, str] | None = None,
) -> ServerProcess:
    """Start `memfs serve --port 0 --db db_path` and wait until it listens."""
    return ServerProcess(
        db_path, api_key=api_key, extra_args=extra_args, log_path=log_path, env=env
    ).start()


def seed_bulk(db_path: Path, store_id: str, items: list[tuple[str, str]]) -> None:
    """Seed memories through the server's bulk path (one transaction on its database);
    far faster than one API call a memory for the suites that need thousands."""
    db = Database.open(db_path)
    try:
        db.bulk_create_memories(store_id, items, SEED_ACTOR)
    finally:
        db.close()
