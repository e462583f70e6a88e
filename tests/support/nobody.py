"""Run the memfs CLI as `nobody` where root would not be refused (CI runs as root)."""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess


def run_cli_as_nobody(argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """`memfs ARGV` with the real uid and gid of `nobody`, in a forked child.

    Everything memfs needs is imported before the privileges drop, so the test does not
    depend on `nobody` being able to read the checkout or its virtualenv (a CI clone
    may live in a private directory).
    """
    import importlib
    import pkgutil

    import memfs
    import memfs.cli.main

    for module in pkgutil.walk_packages(memfs.__path__, "memfs."):
        importlib.import_module(module.name)  # loaded now: the child cannot read the checkout

    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child reports through the pipe
        code, err = 70, ""
        try:
            os.close(read_fd)
            os.setgroups([])
            os.setgid(65534)
            os.setuid(65534)
            os.environ.clear()
            os.environ.update(env)
            buf = io.StringIO()
            with contextlib.redirect_stderr(buf):
                code = memfs.cli.main.main(argv)
            err = buf.getvalue()
        except BaseException as e:
            err = f"child failed: {e!r}"
        finally:
            os.write(write_fd, json.dumps([code, err]).encode())
            os._exit(0)
    os.close(write_fd)
    chunks = []
    while chunk := os.read(read_fd, 65536):
        chunks.append(chunk)
    os.close(read_fd)
    os.waitpid(pid, 0)
    code, err = json.loads(b"".join(chunks))
    return subprocess.CompletedProcess(argv, int(code), "", str(err))
