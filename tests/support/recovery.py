"""Recovering a dead mount under a writer that keeps going (an agent's shell), with the
command `memfs status` printed (issue 35, item 1)."""

from __future__ import annotations

import contextlib
import errno
import os
import shlex
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any
from unittest import mock


class Appender(threading.Thread):
    """A writer that keeps going, as an agent's shell does: appends a numbered line to
    `path` every 3 ms and records which appends were acknowledged."""

    def __init__(self, path: Path) -> None:
        super().__init__(daemon=True)
        self.path = path
        self.acked: list[str] = []
        self.errors: Counter[str] = Counter()
        self.halt = threading.Event()

    def run(self) -> None:
        n = 0
        while not self.halt.is_set():
            line = f"line {n}\n"
            n += 1
            try:
                fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            except OSError as e:
                self.errors[errno.errorcode[e.errno]] += 1
            else:
                try:
                    os.write(fd, line.encode())
                    self.acked.append(line)  # acknowledged: it must reach the store
                except OSError as e:
                    self.errors[errno.errorcode[e.errno]] += 1
                finally:
                    with contextlib.suppress(OSError):
                        os.close(fd)
            time.sleep(0.003)

    def stop(self) -> None:
        self.halt.set()
        self.join(10)


def recover(command: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """Run the command `memfs status` printed, as a user would."""
    argv = shlex.split(command)
    assert argv[0] == "memfs" and argv[-1] == "--daemon", argv
    return subprocess.run(
        [sys.executable, "-m", "memfs.cli", *argv[1:]],
        env=env,
        capture_output=True,
        text=True,
        timeout=90,
    )


def recover_under_a_writer(
    dead: Path, status: Callable[[], dict[str, Any]], env: dict[str, str]
) -> tuple[Appender, subprocess.CompletedProcess[str]]:
    """Recover the dead mount at `dead` while a writer appends to `dead/log.md` (from
    before the command until well after the new mount is live)."""
    (answer,) = status()["mounts"]
    assert answer["state"] == "dead", answer
    writer = Appender(dead / "log.md")
    lister = Lister()
    runtime = {"XDG_RUNTIME_DIR": env["XDG_RUNTIME_DIR"]} if "XDG_RUNTIME_DIR" in env else {}
    with mock.patch.dict(os.environ, runtime):  # the daemon's registry, for the lister
        writer.start()
        lister.start()
        try:
            time.sleep(0.2)
            recovered = recover(answer["recover"], env)
            time.sleep(0.5)  # the writer reaches the new mount
        finally:
            writer.stop()
            lister.stop()
    assert lister.scans > 0
    return writer, recovered


class Lister(threading.Thread):
    """`memfs status` elsewhere, as often as it can: the registry scan it runs removes
    the entries of gone daemons whose mount is not dead (memfs.control.registry)."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.scans = 0
        self.halt = threading.Event()

    def run(self) -> None:
        from memfs.control import registry

        while not self.halt.is_set():
            registry.registered_mounts()
            self.scans += 1
            time.sleep(0.0005)

    def stop(self) -> None:
        self.halt.set()
        self.join(10)
