"""Run a command with stdout on a pseudo-terminal: what a person at a shell sees."""

from __future__ import annotations

import os
import pty
import subprocess


def on_a_terminal(
    cmd: list[str], env: dict[str, str] | None, *, timeout: float = 60
) -> tuple[int, str, str]:
    """Exit code, the terminal's text (\\r\\n as \\n) and stderr of `cmd`."""
    leader, follower = pty.openpty()
    try:
        proc = subprocess.Popen(cmd, env=env, stdout=follower, stderr=subprocess.PIPE)
    finally:
        os.close(follower)
    chunks = []
    try:
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # EIO: every writer is gone and the terminal is drained
                break
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(leader)
    _, err = proc.communicate(timeout=timeout)
    return proc.returncode, b"".join(chunks).decode().replace("\r\n", "\n"), err.decode()
