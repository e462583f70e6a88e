"""Run a real `memfs` process with a pseudo-terminal as stdin, stdout and stderr.

What a person at a terminal sees (progress bars drawn only on a TTY) is read back from
the pty's master side by a thread, so the child never blocks on a full pty buffer.
"""

from __future__ import annotations

import os
import pty
import re
import subprocess
import sys
import threading
import time
from collections.abc import Sequence

# ANSI control sequences tqdm may write (cursor moves, line clears).
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


class PtyProcess:
    def __init__(self, args: Sequence[str], env: dict[str, str]) -> None:
        master, slave = pty.openpty()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "memfs.cli", *args],
            env=env,
            stdin=slave,
            stdout=slave,
            stderr=slave,
        )
        os.close(slave)
        self._master = master
        self._raw = bytearray()
        self._lock = threading.Lock()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        while True:
            try:
                chunk = os.read(self._master, 65536)
            except OSError:  # EIO: every holder of the slave side has closed it
                return
            if not chunk:
                return
            with self._lock:
                self._raw += chunk

    @property
    def text(self) -> str:
        """Everything shown so far, with control sequences removed and \\r as newlines."""
        with self._lock:
            raw = bytes(self._raw)
        return _ANSI.sub("", raw.decode(errors="replace")).replace("\r", "\n")

    def wait_for(self, pattern: str, timeout: float = 60.0) -> re.Match[str]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = re.search(pattern, self.text)
            if found:
                return found
            if self.proc.poll() is not None:
                self._reader.join(5)
                found = re.search(pattern, self.text)
                if found:
                    return found
                raise AssertionError(
                    f"exited {self.proc.returncode} before {pattern!r}:\n{self.text}"
                )
            time.sleep(0.05)
        raise AssertionError(f"no {pattern!r} within {timeout}s:\n{self.text}")

    def wait(self, timeout: float = 90.0) -> int:
        code = self.proc.wait(timeout)
        self._reader.join(5)
        return code

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self._reader.join(5)
        try:
            os.close(self._master)
        except OSError:
            pass


def run_in_pty(args: Sequence[str], env: dict[str, str], timeout: float = 120.0) -> tuple[int, str]:
    """Run to the end on a terminal: (exit code, what the terminal showed)."""
    p = PtyProcess(args, env)
    try:
        return p.wait(timeout), p.text
    finally:
        p.close()
