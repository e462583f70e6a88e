"""Run `memfs serve` as a real process on 127.0.0.1, the peer of every integration test."""

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
            try:
                return self._spawn(self.port, timeout)
            except ServerStartError:
                pass  # the old port was taken meanwhile: any free port will do
        return self._spawn(0, timeout)

    def _spawn(self, port: int, timeout: float) -> ServerProcess:
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
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._close_pipe()
        return self.proc.returncode

    def kill(self) -> None:
        """SIGKILL: no shutdown code runs, as in a crash."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self._close_pipe()

    def _close_pipe(self) -> None:
        if self.proc is not None and self.proc.stdout is not None:
            self.proc.stdout.close()

    def __enter__(self) -> ServerProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


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
