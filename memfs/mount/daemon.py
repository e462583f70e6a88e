"""The composition root: builds a mount, owns its one nursery, starts and stops it.

Start-up: check the mount point and FUSE, reach the store, open its cache directory
(locked), load its journal and merge the store's listing (pushing what a previous run
left, with preconditions), then mount: over the dead mount a killed daemon left, if any,
which stays until then (`overmount.py`). Content streams in behind the live mount.

Teardown (SIGINT, SIGTERM, SIGHUP, `memfs unmount`, or an external `fusermount3 -u`): writes
start failing with EROFS, the sync loop stops, the store gets one final pass within
one bound, then the mount goes away. A bug in any task ends the nursery; the mount is
then left dead (ENOTCONN) rather than unmounted, so nothing can write into the bare
directory underneath, and the journal keeps every dirty byte for the next start.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pyfuse3
import trio

from memfs import metrics
from memfs.audit import Trail
from memfs.config import (
    STOP_SIGNALS,
    ExitCode,
    MountConfig,
    StoreSpec,
    default_cache_root,
    private_dir,
)
from memfs.control.protocol import RefusedPath, UnmountAnswer
from memfs.control.recovery import fuse_mount_count
from memfs.control.registry import socket_path
from memfs.control.server import ControlServer
from memfs.errors import (
    ConfigError,
    MemfsError,
    StartError,
    StoreAuthError,
    StoreError,
    StoreUnavailable,
)
from memfs.mount import overmount
from memfs.mount.answers import Answers
from memfs.mount.closewatch import CloseWatch
from memfs.mount.display import Display
from memfs.mount.fs import MemFs
from memfs.mount.notifier import KernelNotifier
from memfs.mount.preflight import (
    START_RETRY,
    check_fuse,
    check_outside,
    lookup_store,
    prepare_mountpoint,
)
from memfs.mount.storedir import mount_target, remove_store_dir
from memfs.state.cachedir import JOURNAL_NAME, CacheDir
from memfs.state.node import Node
from memfs.state.store_state import StoreState
from memfs.state.tree import Tree
from memfs.store.client import StoreClient, StoreInfo
from memfs.store.connection import INTERACTIVE_FIRST_BYTE, ClientConfig, make_http_client
from memfs.sync.engine import StoreSync
from memfs.sync.notify import Notifier
from memfs.sync.plan import PassResult

log = logging.getLogger("memfs.daemon")


def _now_iso() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


class Daemon:
    """One FUSE mount serving one store (`memfs mount`, or one store of a session)."""

    def __init__(self, config: MountConfig, *, notifier: Notifier | None = None) -> None:
        self.config = config
        self.notifier = notifier or KernelNotifier()
        self.tree = Tree(
            uid=os.getuid() if config.uid is None else config.uid,
            gid=os.getgid() if config.gid is None else config.gid,
            umask=config.umask,
        )
        # The one store, once opened (`_open_store`): its sync (and through it its
        # state), what it said of itself (None when it started offline), its cache.
        self._sync: StoreSync | None = None
        self.info: StoreInfo | None = None
        self._cache: CacheDir | None = None
        self.trail = Trail()  # the store's audit trail (memfs/audit.py)
        self.ops: MemFs | None = None
        self._stop = trio.Event()
        self._flushed = trio.Event()
        self._flush_report = UnmountAnswer(
            ok=True, seconds=0.0, unpushed={}, refused={}, stopped=False, outcomes={}
        )
        self._flush_scope = trio.CancelScope()  # the third Ctrl-C cancels the final flush
        self._flushing = False
        self._flush_signals = 0  # signals heard during the final flush
        self._display: Display | None = None
        self.http: httpx.AsyncClient | None = None
        self.mountpoint = config.mountpoint  # resolved before mounting; never stat'ed after
        self._metrics_url: str | None = None  # where --metrics-addr is served

    @property
    def sync(self) -> StoreSync:
        """The store's sync; there is one once the start opened the store."""
        assert self._sync is not None, "the store is not open yet"
        return self._sync

    # -- waiting for content (the handlers' only await on remote work) ---------------
    async def wait_for(self, node: Node) -> str | None:
        return await self.sync.wait_content(node)

    # -- start ----------------------------------------------------------------------
    async def _lookup(self, store_id: str, cache_dir: Path) -> tuple[StoreInfo | None, str]:
        """The store's info, or (None, why) when unreachable but a local copy can serve."""
        try:
            return await lookup_store(self.start_client(), store_id), ""
        except StartError as e:
            if e.exit_code != ExitCode.UNREACHABLE:
                raise
            if not (cache_dir / JOURNAL_NAME).exists():
                raise StartError(
                    f"{e}; there is no local copy of {store_id} in "
                    f"{cache_dir} to start offline from",
                    e.exit_code,
                ) from None
            return None, str(e)

    async def _read_only(self, spec: StoreSpec, info: StoreInfo) -> bool:
        """Read-only when asked to be, when the store is archived, or when the credential
        may only read it (asked once at start; a store that stops answering now, or
        answers the probe in a way it cannot read, is judged writable, as before)."""
        if spec.read_only:
            return True
        if info.archived_at is not None:
            log.warning(
                "memory store is archived; mounting it read-only memory_store_id=%s",
                spec.store_id,
            )
            return True
        try:
            writable = await self.start_client().may_write(spec.store_id)
        except StoreAuthError as e:
            raise StartError(str(e), ExitCode.USAGE) from None
        except StoreError:
            return False
        if not writable:
            log.warning(
                "the credential may only read this memory store; mounting it read-only "
                "memory_store_id=%s",
                spec.store_id,
            )
        return not writable

    async def _open_store(self, client: StoreClient) -> None:
        cfg = self.config
        spec = cfg.store
        cache_root = cfg.cache_dir or default_cache_root()
        cache_dir = (
            cache_root
            if (cfg.session_root is None and cfg.cache_dir)
            else cache_root / spec.store_id
        )
        info, reason = await self._lookup(spec.store_id, cache_dir)
        if info is not None:
            self.info = info
            spec.read_only = await self._read_only(spec, info)
        try:
            cache = CacheDir(cache_dir, spec.store_id)
        except ConfigError as e:
            raise StartError(str(e), 2) from None
        self._cache = cache
        self.trail.open(spec.store_id, cache.root)
        offline = info is None
        if offline:
            if cache.never_synced():
                raise StartError(
                    f"{reason}; the local copy in {cache_dir} was never "
                    "synced, so there is nothing to start offline from",
                    ExitCode.UNREACHABLE,
                )
            # A warm cache: serve the journal's tree now, push when the store answers.
            log.warning(
                "memory store unreachable; starting offline from the local "
                "copy; changes are journaled and pushed once it answers "
                "memory_store_id=%s cache=%s error=%s",
                spec.store_id,
                cache_dir,
                reason,
            )
        state = StoreState(self.tree, spec.store_id, cache, read_only=spec.read_only)
        sync = StoreSync(
            state,
            client,
            self.notifier,
            interval=cfg.interval,
            deletions=cfg.deletions,
            excludes=cfg.excludes,
            flush_timeout=cfg.flush_timeout,
            cache_max_bytes=cfg.cache_max_bytes,
            trail=self.trail,
            deletes_when_asked=cfg.deletes_when_asked,
            push_soon=cfg.push_soon,
            probe_budget=cfg.probe_budget,
            watch=cfg.watch,
        )
        self._sync = sync
        if self._display is not None:
            self._display.watch("", sync.progress)
        try:
            await sync.start(offline=offline)
            if not offline:
                cache.mark_listed(_now_iso())
        except MemfsError as e:
            # Unreachable or failing (5xx after retries): 3; refused credentials: 2.
            code = (
                ExitCode.UNREACHABLE
                if isinstance(e, StoreUnavailable)
                else ExitCode.USAGE
                if isinstance(e, StoreAuthError)
                else ExitCode.FAILED
            )
            raise StartError(
                f"failed to download memory store memory_store_id={sync.store_id}: {e}", code
            ) from None

    def _serve_metrics(self, addr: str) -> None:
        try:
            sock = metrics.listen(addr)
        except (OSError, ValueError) as e:
            raise StartError(str(e), ExitCode.USAGE) from None
        metrics.start(sock)
        self._metrics_url = metrics.url_of(sock)
        metrics.watch_stores(
            lambda: [] if self._sync is None else [(self._sync.store_id, self._sync.statistics())]
        )

    def start_client(self) -> StoreClient:
        assert self.http is not None
        return StoreClient(self.http, retry=START_RETRY, first_byte_timeout=INTERACTIVE_FIRST_BYTE)

    def _mount_options(self) -> set[str]:
        options = set(pyfuse3.default_options)
        # The mount table's source is the store id, as in an fstab line, so `mount -a`
        # sees that line is mounted already.
        options |= {f"fsname={self.config.store.store_id}", "subtype=memfs"}
        if self.sync.state.read_only:
            options.add("ro")  # read-only at the VFS layer, before we are even asked
        if self.config.allow_other:
            options.add("allow_other")
        return options

    async def run(self, ready: Callable[[str], None] | None = None) -> int:
        """Mount, serve until stopped, tear down; returns the process exit code."""
        # Open for the whole run: a signal before the mount is live aborts the start
        # (nothing mounted, nothing left running); after it, it starts the teardown.
        with trio.open_signal_receiver(*STOP_SIGNALS) as signals:
            return await self._run(ready, signals)

    async def _run(self, ready: Callable[[str], None] | None, signals: Any) -> int:
        cfg = self.config
        check_fuse()
        mountpoint, dead = self._mountpoint()
        self.mountpoint = mountpoint
        # A killed daemon's dead mount stays until the new mount is ready (or goes on
        # top of it): the mount point is never a bare directory writes could land in.
        over_dead = dead and overmount.plan_over_dead(mountpoint)
        fuse_fd: int | None = None  # the /dev/fuse descriptor of a mount over a dead one
        cache_root = cfg.cache_dir or default_cache_root()
        check_outside(mountpoint, "cache directory", cache_root)
        try:
            made_cache_root = _private_cache_root(cache_root)
        except ConfigError as e:
            raise StartError(str(e), 2) from None
        check_outside(mountpoint, "runtime directory", socket_path(mountpoint).parent)
        if cfg.metrics_addr is not None:
            self._serve_metrics(cfg.metrics_addr)
        client_config = ClientConfig.from_env(cfg.api_url, cfg.environ)
        # 16 connections: 8 uploads and a few downloads in flight. More only adds pool
        # bookkeeping: a 2,000-file flush took 17.5 s with 32 uploads, 9.0 s with 8.
        self.http = make_http_client(client_config, max_connections=16)
        mounted = False
        crashed = False
        try:
            client = StoreClient(self.http)
            # On a terminal: the listing as it streams, and what the last run left.
            self._display = self._terminal({"listing": "listing", "pushing": "pushing"})
            try:
                await self._start_stores(client, signals)
            finally:
                if self._display is not None:
                    self._display.close()
                    self._display = None
            options = self._mount_options()
            self.ops = MemFs(
                self.sync.state,
                self,
                content_timeout=cfg.content_timeout,
                read_only_vfs="ro" in options,
                zero_message_writes=cfg.zero_message_opens,
                xattrs=cfg.xattrs,
                read_spin_us=cfg.read_spin_us,
            )
            self.ops.trail = self.trail
            self.sync.pusher.last_request = self.ops.last_answered  # uploads give way to it
            # Made before the mount: a recovery takes the dead daemon's registry entry over
            # right before its mount stops looking dead (`claim`), so that a `memfs status`
            # elsewhere does not remove it, and the socket bound next, as stale.
            handlers = Answers(
                self.sync,
                info=self.info,
                mountpoint=mountpoint,
                fs=self.ops,
                client=self.start_client,
                stopping=self._stop.is_set,
                unmount=self.stop_and_flush,
            )
            control = ControlServer(mountpoint, self._describe(), handlers.table())
            if cfg.mount_dir is not None:  # checked again; for root, the held directory's fd
                target = mount_target(cfg.mount_dir, mountpoint, cfg.store.store_id)
            else:  # over a dead mount, or once it is cleared (overmount.py)
                target, fuse_fd = overmount.target(
                    mountpoint, options, dead=dead, over=over_dead, claim=control.publish
                )
            try:
                pyfuse3.init(self.ops, target, options)
            except RuntimeError as e:
                overmount.abandon(mountpoint, fuse_fd)
                raise StartError(f"FUSE mount failed at {mountpoint}: {e}", 2) from None
            mounted = True
            self.trail.mount("mounted", self.places())
            log.info(
                "mounted memory stores=%s mountpoint=%s memories=%d",
                self.sync.store_id,
                mountpoint,
                self.sync.state.statistics().memories,
            )
            if not self.ops.noflush:
                log.info(
                    "pyfuse3 has no FileInfo.noflush (a stock build); every close of "
                    "a read-only file costs a FLUSH request mountpoint=%s pyfuse3=%s",
                    mountpoint,
                    self.ops.statistics().pyfuse3.version,
                )
            try:
                return await self._serve(mountpoint, ready, signals, control)
            except BaseException:
                crashed = True
                raise
        finally:
            if mounted:
                if not crashed:
                    overmount.unmount_over(mountpoint, fuse_fd)  # libfuse did not mount it
                # A crash leaves the mount dead (ENOTCONN), never a bare directory.
                pyfuse3.close(unmount=not crashed)
                if over_dead and not crashed:
                    overmount.clear_dead_mounts(mountpoint)  # the one it went over
            if mounted:
                self.trail.mount("crashed" if crashed else "unmounted", self.places())
            self.trail.close()
            if self._cache is not None:
                self._cache.close()
            if made_cache_root and not mounted:
                with contextlib.suppress(OSError):  # a refused start leaves nothing behind
                    os.rmdir(cache_root)
            if cfg.mount_dir is not None and not crashed:
                remove_store_dir(cfg.mount_dir)  # the session made it for this mount
            with trio.CancelScope(shield=True):
                await self.http.aclose()

    def _mountpoint(self) -> tuple[str, bool]:
        """The mount point, and whether a dead mount is there (a killed daemon's)."""
        cfg = self.config
        if cfg.mount_dir is None:
            return prepare_mountpoint(cfg.mountpoint)
        # A session's store: made and held open by the session, never looked up.
        return cfg.mountpoint, False

    async def _start_stores(self, client: StoreClient, signals: Any) -> None:
        """`_open_store`, abandoned cleanly if a stop signal arrives first."""
        heard: list[str] = []

        async def watch(scope: trio.CancelScope) -> None:
            async for signum in signals:
                heard.append(signal.Signals(signum).name)
                scope.cancel()
                return

        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(watch, nursery.cancel_scope)
                await self._open_store(client)
                nursery.cancel_scope.cancel()
        except BaseExceptionGroup as group:
            first = _first(group, StartError)
            if first is not None:
                raise first from None
            raise
        if heard:
            log.debug("start abandoned on signal=%s mountpoint=%s", heard[0], self.mountpoint)
            raise StartError(
                f"interrupted ({heard[0]}) before the mount was live; nothing was mounted",
                ExitCode.INTERRUPTED,
            )

    async def _serve(
        self,
        mountpoint: str,
        ready: Callable[[str], None] | None,
        signals: Any,
        control: ControlServer,
    ) -> int:
        assert self.ops is not None
        ops = self.ops
        stacked = fuse_mount_count(mountpoint)  # ours, and any dead one it went over
        fuse_gone = trio.Event()

        async def fuse_main() -> None:
            try:
                ops.start_loop()
                await pyfuse3.main()
                if not self._stop.is_set():
                    _log_outside_end(mountpoint, stacked)
            finally:
                fuse_gone.set()
                self._stop.set()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(fuse_main)
            sync_scope = trio.CancelScope()

            async def run_sync() -> None:
                with sync_scope:
                    async with trio.open_nursery() as inner:
                        await inner.start(self.sync.run)
                        await trio.sleep_forever()

            nursery.start_soon(run_sync)
            # Appends memfs moved to its own end: the kernel drops what it guessed.
            ops.stale_inode = lambda ino: nursery.start_soon(
                self.notifier.invalidate_inodes, [ino], ops.state.veils.drop
            )
            if ops.write_flags:  # zero-message opens asked on a writable mount
                ops.close_watch = CloseWatch(mountpoint, ops.writer_closed)
                ops.tree.closes_seen = await nursery.start(ops.close_watch.run)
                if ops.tree.closes_seen:
                    self.sync.before_asked = ops.close_watch.drain
            await nursery.start(control.serve)
            await nursery.start(self._watch_signals, signals)
            if ready is not None:
                ready(mountpoint)
            await self._stop.wait()
            # Teardown: refuse writes, stop the loop, one last bounded pass.
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

    async def _watch_signals(
        self, signals: Any, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        task_status.started()
        async for signum in signals:  # open since start-up: no signal is missed
            name = signal.Signals(signum).name
            if not self._flushing:
                log.info("stopping on signal=%s", name)
                self._stop.set()
                continue
            if signum == signal.SIGHUP:
                # A closed terminal hangs up every process of it, some more than once:
                # not a person pressing Ctrl-C again; the final sync goes on.
                log.debug("signal during the final sync ignored signal=%s", name)
                continue
            self._flush_signals += 1
            if self._flush_signals == 1:
                # One more chance: a second Ctrl-C is often impatience, not intent.
                left = self._unpushed_count()
                log.warning(
                    "the final sync is still pushing; one more signal stops it "
                    "signal=%s files=%d mountpoint=%s",
                    name,
                    left,
                    self.mountpoint,
                )
                _say(
                    f"the final sync is still pushing {_files(left)}; press Ctrl-C once "
                    "more to stop it and keep them in the journal for the next start"
                )
            elif not self._flush_scope.cancel_called:
                log.warning(
                    "final sync stopped by a signal; what is not pushed stays in "
                    "the journal signal=%s mountpoint=%s",
                    name,
                    self.mountpoint,
                )
                self._flush_scope.cancel()

    def _unpushed_count(self) -> int:
        return sum(len(paths) for paths in self._left_behind().values())

    def _left_behind(self) -> dict[str, list[str]]:
        """The changed paths not in the store yet, by store id (none when read-only)."""
        sync = self.sync
        if sync.state.read_only:
            return {}
        stats = sync.statistics()
        paths = (
            list(stats.dirty_files)
            + [r.path for r in stats.refused_files if r.transient]  # the start retries
            + [p for p in stats.pending_delete_paths if p and sync.deletions == "enabled"]
        )
        return {sync.store_id: paths} if paths else {}

    def _refused(self) -> dict[str, list[RefusedPath]]:
        """The files the store refused for good (until their content changes), which it
        does not have, by store id (none when read-only)."""
        sync = self.sync
        if sync.state.read_only:
            return {}
        files = [r for r in sync.statistics().refused_files if not r.transient]
        return (
            {sync.store_id: [RefusedPath(path=r.path, why=r.why) for r in files]} if files else {}
        )

    async def _final_flush(self) -> int:
        t0 = time.monotonic()
        sync = self.sync
        results: dict[str, PassResult] = {}

        pending = self._unpushed_count()
        if pending:
            log.info("final sync started files=%d mountpoint=%s", pending, self.mountpoint)
        display = self._terminal({"pushing": "flushing"})
        self._flushing = True
        try:
            with self._flush_scope:
                if display is not None:
                    display.watch("", sync.progress)
                if not sync.state.read_only:
                    results[sync.store_id] = await sync.final_sync()
        finally:
            self._flushing = False
            if display is not None:
                display.close()
        left, refused = self._left_behind(), self._refused()
        stopped = self._flush_scope.cancelled_caught
        self._flush_report = UnmountAnswer(
            ok=not left and not refused,
            seconds=round(time.monotonic() - t0, 3),
            unpushed=left,
            refused=refused,
            stopped=stopped,
            outcomes={k: v.outcome for k, v in results.items()},
        )
        for store_id, paths in left.items():
            log.warning(
                "memory flush left changed files un-pushed; they stay in the "
                "journal for the next start memory_store_id=%s files=%d paths=%s",
                store_id,
                len(paths),
                ",".join(paths[:20]),
            )
        for store_id, files in refused.items():
            log.warning(
                "the store refused these files, so it does not have them; they stay "
                "only in the cache until their content changes memory_store_id=%s "
                "files=%d paths=%s",
                store_id,
                len(files),
                ",".join(f.path for f in files[:20]),
            )
        if stopped:
            _say(
                f"final sync stopped; {_files(self._unpushed_count())} not pushed, kept "
                "in the journal: the next start pushes them"
            )
            return ExitCode.INTERRUPTED
        return 0 if self._flush_report.ok else 1

    def places(self) -> dict[str, str]:
        """Where the store shows: at the mount point (the audit trail's mount lines)."""
        return {self.sync.store_id: self.mountpoint}

    def _terminal(self, names: dict[str, str]) -> Display | None:
        """Progress on a terminal; not from a session's store daemons, which share one."""
        return None if self.config.session_root is not None else Display.for_terminal(names)

    # -- control ---------------------------------------------------------------------
    def _describe(self) -> dict[str, Any]:
        # The cache directories and the restart command outlive a killed daemon here:
        # `memfs status` reads them to explain a dead mount (memfs/control/recovery.py).
        return {
            "mode": "single" if self.config.session_root is None else "session",
            "session": self.config.session_root,
            "session_pid": os.getppid() if self.config.session_root is not None else None,
            "metrics": self._metrics_url,  # a session's endpoint merges its stores' (supervisor)
            "stores": [self.sync.store_id],
            "caches": {self.sync.store_id: str(self.sync.state.cache.root.resolve())},
            "excludes": list(self.config.excludes),
            "restart": self.config.restart,
        }

    @property
    def flush_report(self) -> UnmountAnswer:
        """What the final sync pushed and left (`memfs unmount`'s answer)."""
        return self._flush_report

    async def stop_and_flush(self) -> UnmountAnswer:
        """Start the teardown (as a signal does); the final sync's report once done."""
        self._stop.set()
        await self._flushed.wait()
        return self._flush_report


def _log_outside_end(mountpoint: str, stacked: int) -> None:
    """Say how the FUSE session ended without us: an unmount (umount or fusermount3 -u)
    takes the mount away; an aborted connection (/sys/fs/fuse/connections/N/abort)
    leaves it in the mount table, dead. `stacked`: the FUSE mounts at the mount point
    while ours was live (more than one over a dead mount). /proc/self/mounts never
    touches the mount."""
    if fuse_mount_count(mountpoint) >= stacked:
        log.warning(
            "the FUSE connection was aborted from outside; running the final sync; the "
            "mount point stays dead until unmounted mountpoint=%s",
            mountpoint,
        )
    else:
        log.info(
            "the mount was unmounted from outside (umount or fusermount3 -u); "
            "running the final sync mountpoint=%s",
            mountpoint,
        )


def _say(message: str) -> None:
    """A line for the person at the terminal (a foreground mount's stderr)."""
    try:
        print(f"memfs: {message}", file=sys.stderr, flush=True)
    except OSError:
        pass  # stderr is gone (a --daemon child writes to /dev/null, never fails)


def _files(n: int) -> str:
    return f"{n} changed file" + ("" if n == 1 else "s")


def _first(group: BaseExceptionGroup[Any], kind: type[StartError]) -> StartError | None:
    for exc in group.exceptions:
        if isinstance(exc, kind):
            return exc
        if isinstance(exc, BaseExceptionGroup):
            found = _first(exc, kind)
            if found is not None:
                return found
    return None


def _private_cache_root(path: Path) -> bool:
    """The cache root made private (`private_dir`); True when this call created it."""
    missing = not os.path.lexists(path)
    private_dir(path, "cache directory")
    return missing
