"""A session: one store daemon per store, forked from here and watched to the end.

pyfuse3 serves one FUSE session per process, and a store's access decides how its
superblock is mounted (`ro`, `default_permissions`), so each store of a session is a
`Daemon` of its own at `<root>/<mount_path>`, exactly as `memfs mount` runs one. This
process (the session's) makes each store's directory, forks the daemons (they share its
imported code, copy-on-write, kept out of the collector's sight: `gc.freeze`), waits
until every one is live, and then passes signals on and waits for them. A session is
all or nothing: a store that fails to start, or a store daemon that ends, stops the
others. The store daemons die with this process (PR_SET_PDEATHSIG): a killed session
leaves dead mounts, as a killed `memfs mount` does.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import logging
import os
import select
import signal
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass

from memfs import metrics
from memfs.config import STOP_SIGNALS, ExitCode, MountConfig
from memfs.control import registry
from memfs.control.recovery import is_dead_mount
from memfs.errors import StartError
from memfs.mount.preflight import clear_dead_mount
from memfs.mount.storedir import close_store_dir, make_store_dir, open_root, remove_store_dir

log = logging.getLogger("memfs.session")

SIGNALS = set(STOP_SIGNALS)
POLL_S = 0.05
PR_SET_PDEATHSIG = 1


@dataclass
class Member:
    """One store's daemon, as the session sees it."""

    config: MountConfig
    pid: int
    ready_fd: int | None  # open until the daemon has said "ok" or why not
    said: bytes = b""
    live: bool = False
    code: int | None = None  # its exit code, once reaped

    @property
    def store_id(self) -> str:
        return self.config.store.store_id


def run_session(
    configs: list[MountConfig],
    ready: Callable[[str], None],
    serve_store: Callable[[MountConfig, int], int],
) -> int:
    """Start every store's daemon, call `ready` once all are live, wait for the end.

    `serve_store(config, ready_fd)` runs one store's daemon in its forked child and
    returns its exit code; it writes `ok <mountpoint>` or `<code> <reason>` to `ready_fd`.
    Raises `StartError` (naming the store that failed, and why) with every store
    stopped and its directory removed.
    """
    signal.pthread_sigmask(signal.SIG_BLOCK, SIGNALS)  # taken by sigtimedwait below
    metrics_sock = _metrics_socket(configs)
    held = open_root(str(configs[0].session_root))  # checked again, and held from here on
    members: list[Member] = []
    # What is alive now (the imported code, mostly) goes to the collector's permanent
    # generation: a full collection in a store daemon would otherwise write to every
    # object's header and copy the pages it shares with this process (measured on a
    # session of 8 stores after one full collection in each daemon: 183 MB PSS without
    # the freeze, 134 MB with it).
    gc.collect()
    gc.freeze()
    try:
        for config in configs:
            store = config.store
            if is_dead_mount(config.mountpoint):
                made = None  # a killed session's: the store's daemon mounts over it
            else:
                made = make_store_dir(held, str(store.dir_name), store.store_id)
            config.mount_dir = made
            members.append(_fork(config, members, serve_store))
            # The store's daemon holds it from here; the next ones must not (an fd on the
            # directory under the mount reads as "in use" to `memfs unmount`).
            if made is not None:
                close_store_dir(made)
        _await_live(members)
        if metrics_sock is not None:
            root = str(configs[0].session_root)
            metrics.serve_merged(
                metrics_sock,
                lambda: [
                    str(i["metrics"]) for i in registry.session_mounts(root) if i.get("metrics")
                ],
            )
        ready(", ".join(m.config.mountpoint for m in members))
        return _serve(members)
    finally:
        _stop(members, signal.SIGTERM)
        _reap_all(members)
        for config in configs:
            if config.mount_dir is not None:
                remove_store_dir(config.mount_dir)
            elif config.store.dir_name and not os.path.ismount(config.mountpoint):
                # A recovered store's, mounted over its dead mount (both gone now): the
                # directory the killed session made. rmdir follows no link.
                with contextlib.suppress(OSError):
                    os.rmdir(str(config.store.dir_name), dir_fd=held.fd)
        held.close()


def _metrics_socket(configs: list[MountConfig]) -> socket.socket | None:
    """`--metrics-addr` of a session: bound here before anything starts (a taken port
    refuses the session), served merged; each store daemon serves on a loopback port
    of its own, which its registry entry names."""
    addr = configs[0].metrics_addr
    if addr is None:
        return None
    try:
        sock = metrics.listen(addr)
    except (OSError, ValueError) as e:
        raise StartError(str(e), ExitCode.USAGE) from None
    for config in configs:
        config.metrics_addr = "127.0.0.1:0"
    return sock


def _fork(
    config: MountConfig, others: list[Member], serve_store: Callable[[MountConfig, int], int]
) -> Member:
    read_fd, write_fd = os.pipe()
    parent = os.getpid()
    pid = os.fork()
    if pid > 0:
        os.close(write_fd)
        return Member(config, pid, read_fd)
    code = 1
    try:
        os.close(read_fd)
        for other in others:
            if other.ready_fd is not None:
                os.close(other.ready_fd)
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # dies with the session
        if os.getppid() != parent:
            os._exit(1)  # the session is already gone
        os.setpgid(0, 0)  # a terminal's Ctrl-C reaches the session only, which passes it on
        signal.pthread_sigmask(signal.SIG_UNBLOCK, SIGNALS)
        code = serve_store(config, write_fd)
    finally:
        logging.shutdown()
        os._exit(code)


def _await_live(members: list[Member]) -> None:
    """Until every daemon says "ok"; on a refusal or a signal, `StartError`."""
    while not all(m.live for m in members):
        heard = signal.sigtimedwait(SIGNALS, 0)
        if heard is not None:
            name = signal.Signals(heard.si_signo).name
            log.debug("session start abandoned on signal=%s", name)
            raise StartError(
                f"interrupted ({name}) before the session was live; nothing stays mounted",
                ExitCode.INTERRUPTED,
            )
        fds = [m.ready_fd for m in members if m.ready_fd is not None]
        readable, _, _ = select.select(fds, [], [], POLL_S)
        for m in members:
            if m.ready_fd is None or m.ready_fd not in readable:
                continue
            chunk = os.read(m.ready_fd, 4096)
            m.said += chunk
            if chunk:
                continue
            os.close(m.ready_fd)
            m.ready_fd = None
            m.live = m.said.startswith(b"ok ")
            if not m.live:
                raise _failed(m, members)


def _failed(m: Member, members: list[Member]) -> StartError:
    exit_word, _, text = m.said.decode(errors="replace").partition(" ")
    reason = text or "the daemon exited before the mount was live"
    log.error(
        "a store of the session failed to start; stopping the others "
        "memory_store_id=%s mountpoint=%s error=%s",
        m.store_id,
        m.config.mountpoint,
        reason,
    )
    others = len(members) - 1
    stopped = "other store is" if others == 1 else f"{others} other stores are"
    return StartError(
        f"memory store {m.store_id} at {m.config.mountpoint} did not start"
        + (f"; the session's {stopped} stopped" if others else "")
        + f"\nmemfs: {reason}",
        int(exit_word) if exit_word.isdigit() else ExitCode.FAILED,
    )


def _serve(members: list[Member]) -> int:
    """Pass a stop signal on; when one daemon ends, stop the rest; the worst code."""
    stopping = False
    while any(m.code is None for m in members):
        heard = signal.sigtimedwait(SIGNALS, POLL_S)
        if heard is not None:
            stopping = True
            _stop(members, heard.si_signo)
        for m in members:
            if m.code is None and _reaped(m) and not stopping:
                stopping = True
                log.info(
                    "a store's daemon ended; stopping the session's other stores "
                    "memory_store_id=%s mountpoint=%s code=%d",
                    m.store_id,
                    m.config.mountpoint,
                    m.code,
                )
                _stop(members, signal.SIGTERM)
    return max(m.code or 0 for m in members)


def _reaped(m: Member) -> bool:
    """Reap `m` if it has exited; its directory goes with it."""
    pid, status = os.waitpid(m.pid, os.WNOHANG)
    if pid == 0:
        return False
    code = os.waitstatus_to_exitcode(status)
    m.code = code if code >= 0 else ExitCode.FAILED  # killed by a signal
    if m.config.mount_dir is not None:
        remove_store_dir(m.config.mount_dir)
    return True


def _stop(members: list[Member], signum: int) -> None:
    for m in members:
        if m.code is None:
            try:
                os.kill(m.pid, signum)
            except ProcessLookupError:
                pass


def _reap_all(members: list[Member]) -> None:
    """Wait for every daemon (they run their final sync), bounded; one that overruns
    is killed and its mount cleared."""
    bound = time.monotonic() + max((m.config.flush_timeout for m in members), default=0) + 15
    while any(m.code is None for m in members) and time.monotonic() < bound:
        for m in members:
            if m.code is None:
                _reaped(m)
        time.sleep(POLL_S)
    for m in members:
        if m.code is None:
            os.kill(m.pid, signal.SIGKILL)
            os.waitpid(m.pid, 0)
            m.code = ExitCode.FAILED
            clear_dead_mount(m.config.mountpoint)
            if m.config.mount_dir is not None:
                remove_store_dir(m.config.mount_dir)
