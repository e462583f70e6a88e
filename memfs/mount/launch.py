"""Running a mount: in the foreground, or forked into the background (`--daemon`).

The `--daemon` child reports through a pipe: `ok <mountpoint>` once the mount is live,
or `<exit code> <reason>`; the parent returns only then. Ctrl-C in the parent before
readiness stops the child (`_abort_start`): nothing is left running.
"""

from __future__ import annotations

import errno
import logging
import os
import select
import signal
import sys
import time
from collections.abc import Callable
from typing import NoReturn

import trio

from memfs import logs
from memfs.config import ExitCode, MountConfig, default_cache_root, private_dir
from memfs.errors import ConfigError, StartError
from memfs.mount import display, systemd
from memfs.mount.daemon import Daemon
from memfs.mount.preflight import clear_dead_mount
from memfs.mount.supervisor import run_session

log = logging.getLogger("memfs.daemon")


def _abort_start(pid: int, read_fd: int, config: MountConfig) -> int:
    """Ctrl-C on `mount --daemon` before readiness: stop the child, wait, say one line.

    SIGTERM makes the child abandon its start (nothing mounted) or, if it went live in
    the meantime, run its normal teardown; either way nothing is left running.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not cut this short
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    bound = time.monotonic() + config.flush_timeout + 15
    message = b""
    while time.monotonic() < bound:
        ready, _, _ = select.select([read_fd], [], [], 0.2)
        if ready:
            chunk = os.read(read_fd, 4096)
            if not chunk:
                break
            message += chunk
    os.close(read_fd)
    while time.monotonic() < bound:
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        time.sleep(0.05)
    else:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        clear_dead_mount(config.mountpoint)
    if message.startswith(b"ok "):
        print(
            "memfs: interrupted; the mount had just gone live and was stopped again "
            "(final sync done)",
            file=sys.stderr,
        )
    else:
        print("memfs: interrupted before the mount was live; nothing was mounted", file=sys.stderr)
    return ExitCode.INTERRUPTED


def launch(config: MountConfig, *, daemonize: bool) -> int:
    """Run a mount in the foreground, or fork and return once it is live (`--daemon`)."""
    return _launch(lambda ready: _run_mount(config, ready), config, daemonize=daemonize)


def launch_session(configs: list[MountConfig], *, daemonize: bool) -> int:
    """Run a session (one store daemon per store, `memfs/mount/supervisor.py`) in the
    foreground, or fork and return once every store is live (`--daemon`)."""

    def serve_store(config: MountConfig, ready_fd: int) -> int:
        return _report(ready_fd, lambda ready: _run_mount(config, ready))

    return _launch(
        lambda ready: run_session(configs, ready, serve_store), configs[0], daemonize=daemonize
    )


Serve = Callable[[Callable[[str], None]], int]


def _launch(serve: Serve, config: MountConfig, *, daemonize: bool) -> int:
    os.umask(0o077)  # journal, objects, conflict copies and logs are the user's alone
    if not daemonize:
        return _run_foreground(serve, config)
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid > 0:
        os.close(write_fd)
        return _wait_for_child(pid, read_fd, config)
    _run_child(read_fd, write_fd, serve, config)


def _run_mount(config: MountConfig, ready: Callable[[str], None]) -> int:
    """One daemon in this process; what its final sync could not push goes to stderr."""
    daemon = Daemon(config)
    code = trio.run(daemon.run, ready)
    for line in display.left_lines(daemon.flush_report):
        _tell(line)
    return code


def _tell(line: str) -> None:
    """A line on stderr, which may be a terminal that was closed (SIGHUP stopped us):
    then the line is lost with it, and stderr goes to /dev/null so that nothing at exit
    writes to it again; the exit code still says what was left."""
    try:
        print(line, file=sys.stderr, flush=True)
    except OSError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stderr.fileno())
        os.close(devnull)


def _run_foreground(serve: Serve, config: MountConfig) -> int:
    """The mount (or session) in this process, with a terminal to report to."""
    where = config.session_root or config.mountpoint

    def say_ready(mountpoint: str) -> None:
        print(
            f"memfs: mounted at {mountpoint}; stop with Ctrl-C or `memfs unmount {where}`",
            file=sys.stderr,
            flush=True,
        )
        systemd.notify(f"READY=1\nSTATUS=mounted at {mountpoint}")  # Type=notify

    try:
        return serve(say_ready)
    except StartError as e:
        print(f"memfs: {e}", file=sys.stderr)
        return e.exit_code
    except ConfigError as e:
        print(f"memfs: {e}", file=sys.stderr)
        return 2


def _wait_for_child(pid: int, read_fd: int, config: MountConfig) -> int:
    """The parent of `--daemon`: wait for the child's "ok" or its refusal, and say it."""
    said = b""
    try:
        # Until EOF, or the "ok" line: a session's store daemons hold the pipe open.
        while not (said.startswith(b"ok ") and said.endswith(b"\n")):
            chunk = os.read(read_fd, 4096)
            if not chunk:
                break
            said += chunk
    except KeyboardInterrupt:
        return _abort_start(pid, read_fd, config)
    os.close(read_fd)
    message = said.decode(errors="replace")
    if message.startswith("ok "):
        where = config.log_file or (config.cache_dir or default_cache_root()) / "memfs.log"
        print(
            f"memfs: mounted at {message[3:].strip()} (pid {pid}); logs: {where}",
            file=sys.stderr,
        )
        return 0
    exit_word, _, text = message.partition(" ")
    print(f"memfs: {text or 'the daemon exited before the mount was live'}", file=sys.stderr)
    return int(exit_word) if exit_word.isdigit() else 1


def _open_daemon_log(config: MountConfig) -> str | None:
    """stderr is gone: log to `memfs.log` in the cache root, where a user finds it; the
    reason it cannot be used, or None."""
    path = (config.cache_dir or default_cache_root()) / "memfs.log"
    level = logging.getLevelName(logging.getLogger().level).lower()
    try:
        private_dir(path.parent, "cache directory")
        logs.configure(level, str(path), private=True)
    except ConfigError as e:
        return str(e)
    except OSError as e:
        why = "a symlink" if e.errno == errno.ELOOP else f"not usable ({e.strerror})"
        return f"the log file {path} is {why}; remove it or pass --log-file"
    return None


def _run_child(read_fd: int, write_fd: int, serve: Serve, config: MountConfig) -> NoReturn:
    """The daemon child: its own session, no terminal, reports readiness through the pipe."""
    os.close(read_fd)
    os.setsid()
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    code = 2
    try:
        if config.log_file is None and (refusal := _open_daemon_log(config)):
            os.write(write_fd, f"2 {refusal}".encode())
        else:
            code = _report(write_fd, serve)
    finally:
        logging.shutdown()
        os._exit(code)


def _report(write_fd: int, serve: Serve) -> int:
    """`serve` with its readiness, or why it did not start, written to `write_fd`."""

    def signal_ready(mountpoint: str) -> None:
        os.write(write_fd, f"ok {mountpoint}\n".encode())
        os.close(write_fd)

    try:
        return serve(signal_ready)
    except StartError as e:
        os.write(write_fd, f"{e.exit_code} {e}".encode())
        return e.exit_code
    except ConfigError as e:
        os.write(write_fd, f"2 {e}".encode())
        return 2
    except BaseException:
        log.exception("the daemon crashed")
        return 1
