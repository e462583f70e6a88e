"""The composition root: builds a mount, owns its one nursery, starts and stops it.

Start-up: check the mount point and FUSE, reach each store, open its cache directory
(locked), load its journal and merge the store's listing (pushing what a previous run
left, with preconditions), then mount. Content streams in behind the live mount.

Teardown (SIGINT, SIGTERM, `memfs unmount`, or an external `fusermount3 -u`): writes
start failing with EROFS, the sync loops stop, every store runs one final pass within
one bound, then the mount goes away. A bug in any task ends the nursery; the mount is
then left dead (ENOTCONN) rather than unmounted, so nothing can write into the bare
directory underneath, and the journal keeps every dirty byte for the next start.
"""

from __future__ import annotations

import errno
import logging
import os
import select
import shutil
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pyfuse3
import trio

from memfs import logs
from memfs.cache import CacheDir
from memfs.client import (
    INTERACTIVE_FIRST_BYTE,
    ClientConfig,
    RetryPolicy,
    StoreClient,
    StoreInfo,
    make_http_client,
)
from memfs.config import ExitCode
from memfs.control import ControlServer, runtime_dir
from memfs.errors import ConfigError, MemfsError, NotFound, StoreAuthError, StoreUnavailable
from memfs.fs import MemFs
from memfs.notify import KernelNotifier, Notifier
from memfs.sync import DEFAULT_EXCLUDES, DeletionMode, PassResult, StoreSync
from memfs.tree import Node, StoreState, Tree

log = logging.getLogger("memfs.daemon")


JOURNAL_NAME = "journal.sqlite"
LISTED_META = "listed_at"  # journal meta: when a start last merged the store's listing


def _now_iso() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


class StartError(MemfsError):
    """Start-up failed before anything was mounted; `exit_code` says how."""

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.exit_code = exit_code


@dataclass
class StoreSpec:
    store_id: str
    read_only: bool = False
    dir_name: str | None = None  # the store's directory under a session root
    name: str = ""
    instructions: str = ""


@dataclass
class MountConfig:
    mountpoint: str
    stores: list[StoreSpec]
    single: bool = True
    cache_dir: Path | None = None
    interval: float = 15.0
    deletions: DeletionMode = "enabled"
    excludes: tuple[str, ...] = DEFAULT_EXCLUDES
    flush_timeout: float = 30.0
    cache_max_bytes: int | None = None  # --cache-max-size: clean contents per store
    content_timeout: float = 30.0
    api_url: str | None = None
    allow_other: bool = False
    log_file: str | None = None  # None: stderr in the foreground, a file with --daemon
    restart: str = ""  # the command that starts this mount again (dead-mount recovery)
    environ: dict[str, str] = field(default_factory=lambda: dict(os.environ))


def default_cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    return Path(base) / "memfs"


def check_fuse() -> None:
    if not os.path.exists("/dev/fuse"):
        raise StartError("FUSE is unavailable: /dev/fuse does not exist (load the fuse "
                         "module, or give the container --device /dev/fuse)", 2)
    if not os.access("/dev/fuse", os.R_OK | os.W_OK):
        raise StartError("FUSE is unavailable: /dev/fuse is not readable and writable by "
                         "this user", 2)
    if os.getuid() != 0 and shutil.which("fusermount3") is None:
        raise StartError("FUSE is unavailable: fusermount3 is not installed "
                         "(apt-get install fuse3)", 2)


def _dead_memfs_mount(path: str) -> bool:
    try:
        with open("/proc/self/mounts") as f:
            for line in f:
                parts = line.split()
                if len(parts) > 2 and parts[1] == path and parts[2].startswith("fuse"):
                    return True
    except OSError:
        pass
    return False


def clear_dead_mount(path: str) -> bool:
    """Clear a dead FUSE mount (its daemon was killed) at `path`; True if one was cleared.

    The kernel may still answer `stat` from its attribute cache, so ask `statvfs`, which
    always reaches the (gone) daemon and fails with ENOTCONN.
    """
    real = os.path.realpath(path)
    try:
        os.statvfs(real)
        return False
    except OSError as e:
        if e.errno != errno.ENOTCONN or not _dead_memfs_mount(real):
            return False
    subprocess.run(["fusermount3", "-u", "-z", real], check=False, capture_output=True)
    if os.path.ismount(real):
        subprocess.run(["umount", "-l", real], check=False, capture_output=True)
    if os.path.ismount(real):
        return False
    log.info("cleared a dead mount left by a killed daemon mountpoint=%s", real)
    return True


def prepare_mountpoint(path: str, *, allow_nonempty: bool = False) -> str:
    """Refuse a mount point memfs can't use; clear a dead mount a killed daemon left."""
    real = os.path.realpath(path)
    clear_dead_mount(real)
    try:
        st = os.stat(real)
    except FileNotFoundError:
        raise StartError(f"mount point {path} does not exist", 2) from None
    except OSError as e:
        raise StartError(f"mount point {path} cannot be used: {e.strerror}", 2) from None
    if not stat.S_ISDIR(st.st_mode):
        raise StartError(f"mount point {path} is not a directory", 2)
    if os.path.ismount(real):
        raise StartError(f"mount point {path} is already a mount", 2)
    if not allow_nonempty and os.listdir(real):
        raise StartError(f"mount point {path} is not empty", 2)
    return real


def check_outside(mountpoint: str, what: str, path: Path) -> None:
    """The daemon writes its cache and control files itself: inside its own mount that
    would be a request to itself from the event loop, a deadlock."""
    real = os.path.realpath(path)
    if real == mountpoint or real.startswith(mountpoint.rstrip("/") + "/"):
        raise StartError(f"the {what} {path} is inside the mount point {mountpoint}; "
                         "choose one outside it", 2)


async def lookup_store(client: StoreClient, store_id: str) -> StoreInfo:
    """The store's record, or the start-up error a user can act on."""
    try:
        return await client.retrieve_store(store_id)
    except NotFound:
        raise StartError(f"memory store {store_id} does not exist") from None
    except StoreUnavailable as e:
        raise StartError(f"{e} (is the server running? check --api-url or "
                         "ANTHROPIC_BASE_URL)", ExitCode.UNREACHABLE) from None
    except StoreAuthError as e:
        raise StartError(f"the store server refused the credentials: {e}", 2) from None


# Someone waits for a mount to start: a hung or down server is reported in seconds
# (one first-byte bound; refused connections get two quick retries), not a minute.
START_RETRY = RetryPolicy(max_attempts=3, base_delay=0.25, max_delay=2.0, deadline=10.0,
                          retry_timeouts=False)


class Daemon:
    """One FUSE mount serving one or several stores."""

    def __init__(self, config: MountConfig, *, notifier: Notifier | None = None) -> None:
        self.config = config
        self.notifier = notifier or KernelNotifier()
        self.tree = Tree(uid=os.getuid(), gid=os.getgid())
        self.syncs: list[StoreSync] = []
        self.infos: dict[str, StoreInfo] = {}
        self.caches: list[CacheDir] = []
        self.ops: MemFs | None = None
        self._stop = trio.Event()
        self._flushed = trio.Event()
        self._flush_report: dict[str, Any] = {}
        self.http: httpx.AsyncClient | None = None
        self.mountpoint = config.mountpoint  # resolved before mounting; never stat'ed after

    # -- waiting for content (the handlers' only await on remote work) ---------------
    async def wait_for(self, store: StoreState, node: Node) -> None:
        for sync in self.syncs:
            if sync.state is store:
                await sync.wait_content(node)
                return

    def request_stop(self) -> None:
        self._stop.set()

    # -- start ----------------------------------------------------------------------
    async def _open_stores(self, client: StoreClient) -> None:
        cfg = self.config
        cache_root = cfg.cache_dir or default_cache_root()
        offline: set[str] = set()
        for spec in cfg.stores:
            cache_dir = (cache_root if (cfg.single and cfg.cache_dir) else
                         cache_root / spec.store_id)
            try:
                info: StoreInfo | None = await lookup_store(self._start_client(),
                                                            spec.store_id)
            except StartError as e:
                if e.exit_code != ExitCode.UNREACHABLE:
                    raise
                if not (cache_dir / JOURNAL_NAME).exists():
                    raise StartError(f"{e}; there is no local copy of {spec.store_id} in "
                                     f"{cache_dir} to start offline from", e.exit_code
                                     ) from None
                info, reason = None, str(e)
            read_only = spec.read_only
            if info is not None:
                self.infos[spec.store_id] = info
                if info.archived_at is not None and not read_only:
                    log.warning("memory store is archived; mounting it read-only "
                                "memory_store_id=%s", spec.store_id)
                    read_only = spec.read_only = True
            try:
                cache = CacheDir(cache_dir, spec.store_id)
            except ConfigError as e:
                raise StartError(str(e), 2) from None
            self.caches.append(cache)
            if info is None:
                if cache.journal.get_meta(LISTED_META) is None and cache.journal.is_empty():
                    raise StartError(f"{reason}; the local copy in {cache_dir} was never "
                                     "synced, so there is nothing to start offline from",
                                     ExitCode.UNREACHABLE)
                # A warm cache: serve the journal's tree now, push when the store answers.
                log.warning("memory store unreachable; starting offline from the local "
                            "copy; changes are journaled and pushed once it answers "
                            "memory_store_id=%s cache=%s error=%s",
                            spec.store_id, cache_dir, reason)
                offline.add(spec.store_id)
            state = StoreState(self.tree, spec.store_id, spec.dir_name or "", cache,
                               read_only=read_only,
                               parent=None if cfg.single else self.tree.root)
            sync = StoreSync(state, client, self.notifier, interval=cfg.interval,
                             deletions=cfg.deletions, excludes=cfg.excludes,
                             flush_timeout=cfg.flush_timeout,
                             cache_max_bytes=cfg.cache_max_bytes)
            self.syncs.append(sync)
        if not cfg.single:
            self.tree.root.mode = 0o555

        async def start_one(sync: StoreSync) -> None:
            try:
                await sync.start(offline=sync.store_id in offline)
                if sync.store_id not in offline:
                    sync.state.journal.set_meta(LISTED_META, _now_iso())
            except StoreUnavailable as e:
                raise StartError(str(e), ExitCode.UNREACHABLE) from None
            except StoreAuthError as e:
                raise StartError(f"the store server refused the credentials: {e}", 2) from None
            except MemfsError as e:
                raise StartError(f"failed to download memory store memory_store_id="
                                 f"{sync.store_id}: {e}") from None

        try:
            async with trio.open_nursery() as nursery:
                for sync in self.syncs:
                    nursery.start_soon(start_one, sync)
        except BaseExceptionGroup as group:
            first = _first(group, StartError)
            if first is not None:
                raise first from None
            raise

    def _start_client(self) -> StoreClient:
        assert self.http is not None
        return StoreClient(self.http, retry=START_RETRY,
                           first_byte_timeout=INTERACTIVE_FIRST_BYTE)

    def _mount_options(self) -> set[str]:
        options = set(pyfuse3.default_options)
        options |= {"fsname=memfs", "subtype=memfs"}
        if all(s.state.read_only for s in self.syncs) and self.config.single:
            options.add("ro")  # read-only at the VFS layer, before we are even asked
        if self.config.allow_other:
            options.add("allow_other")
        if self._own_permissions:
            options.discard("default_permissions")  # memfs checks, after EROFS
        return options

    @property
    def _own_permissions(self) -> bool:
        """Session mounts mix read-only and writable stores under one superblock: with
        the kernel checking modes, a non-root writer into a read-only store would get
        EACCES before memfs could answer EROFS (docs/reliability.md)."""
        return not self.config.single

    async def run(self, ready: Callable[[str], None] | None = None) -> int:
        """Mount, serve until stopped, tear down; returns the process exit code."""
        # Open for the whole run: a signal before the mount is live aborts the start
        # (nothing mounted, nothing left running); after it, it starts the teardown.
        with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            return await self._run(ready, signals)

    async def _run(self, ready: Callable[[str], None] | None, signals: Any) -> int:
        cfg = self.config
        check_fuse()
        mountpoint = self.mountpoint = prepare_mountpoint(
            cfg.mountpoint, allow_nonempty=not cfg.single)
        check_outside(mountpoint, "cache directory", cfg.cache_dir or default_cache_root())
        check_outside(mountpoint, "runtime directory", runtime_dir())
        client_config = ClientConfig.from_env(cfg.api_url, cfg.environ)
        # 16 connections: 8 uploads and a few downloads in flight. More only adds pool
        # bookkeeping: a 2,000-file flush took 17.5 s with 32 uploads, 9.0 s with 8.
        self.http = make_http_client(client_config, max_connections=16)
        mounted = False
        crashed = False
        try:
            client = StoreClient(self.http)
            await self._start_stores(client, signals)
            self.ops = MemFs(self.tree, self, content_timeout=cfg.content_timeout,
                             own_permissions=self._own_permissions)
            try:
                pyfuse3.init(self.ops, mountpoint, self._mount_options())
            except RuntimeError as e:
                raise StartError(f"FUSE mount failed at {mountpoint}: {e}", 2) from None
            mounted = True
            total = sum(s.state.statistics()["memories"] for s in self.syncs)
            log.info("mounted memory stores=%s mountpoint=%s memories=%d",
                     ",".join(s.store_id for s in self.syncs), mountpoint, total)
            if not self.ops.noflush:
                log.info("pyfuse3 has no FileInfo.noflush (a stock build); every close of "
                         "a read-only file costs a FLUSH request mountpoint=%s pyfuse3=%s",
                         mountpoint, self.ops.statistics()["pyfuse3"]["version"])
            try:
                return await self._serve(mountpoint, ready, signals)
            except BaseException:
                crashed = True
                raise
        finally:
            if mounted:
                # A crash leaves the mount dead (ENOTCONN), never a bare directory.
                pyfuse3.close(unmount=not crashed)
            for cache in self.caches:
                cache.close()
            with trio.CancelScope(shield=True):
                await self.http.aclose()

    async def _start_stores(self, client: StoreClient, signals: Any) -> None:
        """`_open_stores`, abandoned cleanly if SIGINT/SIGTERM arrives first."""
        heard: list[str] = []

        async def watch(scope: trio.CancelScope) -> None:
            async for signum in signals:
                heard.append(signal.Signals(signum).name)
                scope.cancel()
                return

        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(watch, nursery.cancel_scope)
                await self._open_stores(client)
                nursery.cancel_scope.cancel()
        except BaseExceptionGroup as group:
            first = _first(group, StartError)
            if first is not None:
                raise first from None
            raise
        if heard:
            log.debug("start abandoned on signal=%s mountpoint=%s", heard[0], self.mountpoint)
            raise StartError(f"interrupted ({heard[0]}) before the mount was live; "
                             "nothing was mounted", ExitCode.INTERRUPTED)

    async def _serve(self, mountpoint: str, ready: Callable[[str], None] | None,
                     signals: Any) -> int:
        assert self.ops is not None
        control = ControlServer(mountpoint, self._describe(), self._control)
        fuse_gone = trio.Event()

        async def fuse_main() -> None:
            try:
                await pyfuse3.main()
                if not self._stop.is_set():
                    log.info("the mount was unmounted from outside (fusermount3 -u); "
                             "running the final sync mountpoint=%s", mountpoint)
            finally:
                fuse_gone.set()
                self._stop.set()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(fuse_main)
            sync_scope = trio.CancelScope()

            async def run_syncs() -> None:
                with sync_scope:
                    async with trio.open_nursery() as inner:
                        for sync in self.syncs:
                            await inner.start(sync.run)
                        await trio.sleep_forever()

            nursery.start_soon(run_syncs)
            await nursery.start(control.serve)
            await nursery.start(self._watch_signals, signals)
            if ready is not None:
                ready(mountpoint)
            await self._stop.wait()
            # Teardown: refuse writes, stop the loops, one last bounded pass each.
            self.ops.closing = True
            sync_scope.cancel()
            with trio.CancelScope(shield=True):
                code = await self._final_flush()
                self._flushed.set()
                with trio.move_on_after(2):  # let an `unmount` request send its answer
                    await control.wait_idle()
            if not fuse_gone.is_set():
                pyfuse3.terminate()
                with trio.move_on_after(5):
                    await fuse_gone.wait()
            nursery.cancel_scope.cancel()
        log.info("unmounted mountpoint=%s", mountpoint)
        return code

    async def _watch_signals(self, signals: Any, *,
                             task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                             ) -> None:
        task_status.started()
        async for signum in signals:  # open since start-up: no signal is missed
            log.info("stopping on signal=%s", signal.Signals(signum).name)
            self._stop.set()

    async def _final_flush(self) -> int:
        t0 = time.monotonic()
        results: dict[str, PassResult] = {}

        async def one(sync: StoreSync) -> None:
            if sync.state.read_only:
                return
            results[sync.store_id] = await sync.final_sync()

        async with trio.open_nursery() as nursery:
            for sync in self.syncs:
                nursery.start_soon(one, sync)
        left: dict[str, list[str]] = {}
        for sync in self.syncs:
            if sync.state.read_only:
                continue
            stats = sync.statistics()
            paths = stats["dirty_files"] + [p for p in stats["pending_delete_paths"]
                                            if p and sync.deletions == "enabled"]
            if paths:
                left[sync.store_id] = paths
        self._flush_report = {
            "ok": not left, "seconds": round(time.monotonic() - t0, 3),
            "unpushed": left,
            "outcomes": {k: v.outcome for k, v in results.items()},
        }
        for store_id, paths in left.items():
            log.warning("memory flush left %d changed files un-pushed; they stay in the "
                        "journal for the next start memory_store_id=%s paths=%s",
                        len(paths), store_id, ",".join(paths[:20]))
        return 0 if not left else 1

    # -- control ---------------------------------------------------------------------
    def _describe(self) -> dict[str, Any]:
        # The cache directories and the restart command outlive a killed daemon here:
        # `memfs status` reads them to explain a dead mount (memfs/recovery.py).
        return {"mode": "single" if self.config.single else "session",
                "stores": [s.store_id for s in self.syncs],
                "caches": {s.store_id: str(c.root.resolve())
                           for s, c in zip(self.syncs, self.caches, strict=True)},
                "excludes": list(self.config.excludes),
                "restart": self.config.restart}

    def status(self) -> dict[str, Any]:
        stores = []
        for sync in self.syncs:
            info = self.infos.get(sync.store_id)
            root = self.mountpoint if self.config.single else os.path.join(
                self.mountpoint, sync.state.root.name)
            stores.append({
                "memory_store_id": sync.store_id,
                "name": info.name if info else "",
                "mount_path": root,
                "access": "read_only" if sync.state.read_only else "read_write",
                "interval_s": sync.interval,
                "deletions": sync.deletions,
                **sync.statistics(),
            })
        return {"ok": True, "mountpoint": self.mountpoint,
                "pid": os.getpid(), "stores": stores,
                **(self.ops.statistics() if self.ops is not None else {})}

    async def _control(self, request: dict[str, Any]) -> dict[str, Any]:
        op = request.get("op")
        if op == "status":
            return self.status()
        if op == "sync":
            results: dict[str, Any] = {}

            async def one(sync: StoreSync) -> None:
                r = await sync.sync_now()
                results[sync.store_id] = {"outcome": r.outcome, "error": r.error,
                                          "pulled": r.pulled, "pushed": r.pushed,
                                          "deleted": r.deleted, "conflicts": r.conflicts,
                                          "duration_s": round(r.duration_s, 3)}

            async with trio.open_nursery() as nursery:
                for sync in self.syncs:
                    nursery.start_soon(one, sync)
            ok = all(r["outcome"] == "ok" for r in results.values())
            return {"ok": ok, "stores": results}
        if op == "flush":
            flushed: dict[str, Any] = {}

            async def flush_one(sync: StoreSync) -> None:
                if sync.state.read_only:
                    return
                r = await sync.flush_writes()
                flushed[sync.store_id] = {"outcome": r.outcome, "error": r.error,
                                          "pushed": r.pushed}

            async with trio.open_nursery() as nursery:
                for sync in self.syncs:
                    nursery.start_soon(flush_one, sync)
            return {"ok": all(r["outcome"] == "ok" for r in flushed.values()),
                    "stores": flushed}
        if op == "restore":
            restored: dict[str, int] = {}
            for sync in self.syncs:
                if not sync.state.read_only:
                    restored[sync.store_id] = await sync.restore_missing()
            if request.get("sync", True) and any(restored.values()):
                async with trio.open_nursery() as nursery:
                    for sync in self.syncs:
                        if restored.get(sync.store_id):
                            nursery.start_soon(sync.sync_now)
            return {"ok": True, "restored": restored}
        if op == "unmount":
            self._stop.set()
            await self._flushed.wait()
            return self._flush_report
        return {"ok": False, "error": f"unknown op {op!r}"}


def _first(group: BaseExceptionGroup[Any], kind: type[StartError]) -> StartError | None:
    for exc in group.exceptions:
        if isinstance(exc, kind):
            return exc
        if isinstance(exc, BaseExceptionGroup):
            found = _first(exc, kind)
            if found is not None:
                return found
    return None


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
        print("memfs: interrupted; the mount had just gone live and was stopped again "
              "(final sync done)", file=sys.stderr)
    else:
        print("memfs: interrupted before the mount was live; nothing was mounted",
              file=sys.stderr)
    return ExitCode.INTERRUPTED


def launch(config: MountConfig, *, daemonize: bool) -> int:
    """Run a mount in the foreground, or fork and return once it is live (`--daemon`)."""
    os.umask(0o077)  # journal, objects, conflict copies and logs are the user's alone
    if not daemonize:
        def say_ready(mountpoint: str) -> None:
            print(f"memfs: mounted at {mountpoint}; stop with Ctrl-C or "
                  f"`memfs unmount {mountpoint}`", file=sys.stderr, flush=True)

        daemon = Daemon(config)
        try:
            code = trio.run(daemon.run, say_ready)
        except StartError as e:
            print(f"memfs: {e}", file=sys.stderr)
            return e.exit_code
        except ConfigError as e:
            print(f"memfs: {e}", file=sys.stderr)
            return 2
        for store_id, paths in (daemon._flush_report.get("unpushed") or {}).items():
            print(f"memfs: {len(paths)} changed files of {store_id} could not be pushed; "
                  f"they stay in the journal for the next start: {', '.join(paths[:10])}",
                  file=sys.stderr)
        return code

    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid > 0:
        os.close(write_fd)
        chunks: list[bytes] = []
        try:
            while chunk := os.read(read_fd, 4096):
                chunks.append(chunk)
        except KeyboardInterrupt:
            return _abort_start(pid, read_fd, config)
        os.close(read_fd)
        message = b"".join(chunks).decode(errors="replace")
        if message.startswith("ok "):
            where = config.log_file or (config.cache_dir or default_cache_root()) / "memfs.log"
            print(f"memfs: mounted at {message[3:]} (pid {pid}); logs: {where}",
                  file=sys.stderr)
            return 0
        exit_word, _, text = message.partition(" ")
        print(f"memfs: {text or 'the daemon exited before the mount was live'}",
              file=sys.stderr)
        return int(exit_word) if exit_word.isdigit() else 1

    # The daemon child: its own session, no terminal, reports readiness through the pipe.
    os.close(read_fd)
    os.setsid()
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    if config.log_file is None:  # stderr is gone: keep the logs where a user finds them
        log_path = (config.cache_dir or default_cache_root()) / "memfs.log"
        log_path.parent.mkdir(parents=True, exist_ok=True)
        logs.configure(logging.getLevelName(logging.getLogger().level).lower(),
                       str(log_path))

    def signal_ready(mountpoint: str) -> None:
        os.write(write_fd, f"ok {mountpoint}".encode())
        os.close(write_fd)

    code = 1
    try:
        code = trio.run(Daemon(config).run, signal_ready)
    except StartError as e:
        os.write(write_fd, f"{e.exit_code} {e}".encode())
        code = e.exit_code
    except ConfigError as e:
        os.write(write_fd, f"2 {e}".encode())
        code = 2
    except BaseException:
        log.exception("the daemon crashed")
        code = 1
    finally:
        logging.shutdown()
        os._exit(code)
