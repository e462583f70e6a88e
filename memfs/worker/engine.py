"""memfs as the memory engine of the `anthropic` SDK's self-hosted `EnvironmentWorker`.

The SDK materialises a session's memory stores itself (`SessionMemoryStores`, a
download into plain folders). `MemfsSessionStores` has the same public surface, but
mounts the stores with memfs instead: one `memfs session … --daemon` per mount root (the
parent directory of the stores' `mount_path`s, `/mnt/memory` in practice), which mounts
each store at its `mount_path` with a daemon of its own, driven over their control
sockets. The daemon stays trio in its own process; this side runs
on the SDK's anyio event loop and never blocks it.

`memfs.worker.sdk.environment_worker(client, …)` puts it into the SDK's worker, and
`memfs-worker` (memfs/worker/cli.py) runs that worker. Docs: docs/worker.md.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

import anyio

from memfs.control import protocol, registry
from memfs.control.client import arequest
from memfs.control.protocol import A, Answer, ErrorAnswer
from memfs.paths import MARKER_PATH, MAX_CONTENT_BYTES, MAX_STORES_PER_SESSION

try:
    from anthropic.lib.tools._memories import (
        DEFAULT_MEMORY_SYNC_INTERVAL,
        MEMORY_FLUSH_TIMEOUT,
        MemoryDeleteMode,
        SessionMemoryError,
        _check_sync_interval,
    )
except ImportError as e:  # pragma: no cover - the extra is missing
    raise ImportError(
        "memfs.worker.engine needs the anthropic SDK: pip install 'memfs[anthropic]'"
    ) from e
try:  # 2.17: tool writes go through the engine (`write_file`), in the SDK's words
    from anthropic.lib.tools._memories import (
        NOT_CONFIRMED,
        NOT_SAVED,
        MemoryWriteError,
    )
    from anthropic.lib.tools._memories import REQUEST_TIMEOUT as SDK_REQUEST_TIMEOUT
except ImportError:  # 2.16 never calls `write_file`; the same words, for its tests
    NOT_SAVED = "not saved to memory, so the change was not made"
    NOT_CONFIRMED = (
        "the memory store did not confirm the change, so read the file again before you retry"
    )
    SDK_REQUEST_TIMEOUT = 30.0

    class MemoryWriteError(Exception):  # type: ignore[no-redef]
        """A write to a memory file failed. The message is for the agent."""


if TYPE_CHECKING:
    from anthropic import AsyncAnthropic
    from anthropic.types.beta import BetaManagedAgentsSession

log = logging.getLogger("memfs.worker")

#: How long `download` waits for every mount of a session to be live.
START_TIMEOUT = 120.0
#: The bound on one control request that is not a teardown pass: the SDK's bound on
#: each try of its own memory requests (2.17's `REQUEST_TIMEOUT`), no looser.
REQUEST_TIMEOUT = SDK_REQUEST_TIMEOUT

NO_TOKEN = (
    "cannot mount the session's memories: the client has no sessions token; the memory "
    "endpoints reject the environment key, so the work item's `secret` must carry "
    "`sessions_token`, or set `memory_sync_interval=None` to run without memory"
)


@dataclass
class _Store:
    memory_store_id: str
    path: Path  # the mount path as configured
    read_only: bool


@dataclass
class _Mount:
    """One `memfs session` under one root: a daemon (and a mount) per store."""

    root: Path
    stores: list[_Store]
    spec_file: Path
    infos: list[dict[str, Any]] = field(default_factory=list)  # one a store's mount
    pid: int = 0  # the session's process


class MemfsSessionStores:
    """The memory stores attached to one session, mounted with memfs.

    Same public surface and refusals as the SDK's `SessionMemoryStores`; what each verb
    means for a mount:

    - `download`: mount every store at its `mount_path` and return once all are live
      (content streams in behind the mount);
    - `sync_if_due`: one sync pass of every store when `sync_interval` has passed since
      the last (the daemon also syncs on the same interval by itself);
    - `finish`: the session's last sync, deletes included (once, at a clean end);
    - `flush_writes`: a pass that pushes new and changed files and sends no deletes;
    - `restore_missing`: files a stopped tool call left missing are put back from the
      store instead of being deleted there (see `StoreSync.restore_missing`);
    - `dispose`: unmount (after a final bounded pass, which sends no deletes unless
      `finish` ran) and remove every directory `download` created.

    The daemon's journal keeps every un-pushed byte across a crash of this process: the
    next mount of the same store (same cache directory) pushes it.
    """

    def __init__(
        self,
        client: AsyncAnthropic,
        *,
        workdir: str | os.PathLike[str],
        sync_interval: float = DEFAULT_MEMORY_SYNC_INTERVAL,
        sync_deletions: MemoryDeleteMode = "enabled",
        cache_dir: str | os.PathLike[str] | None = None,
        start_timeout: float = START_TIMEOUT,
        allow_other: bool = False,
    ) -> None:
        _check_sync_interval(sync_interval)
        self._client = client
        self._workdir = workdir
        self._sync_interval = sync_interval
        self._sync_deletions: MemoryDeleteMode = sync_deletions
        self._cache_dir = Path(cache_dir) if cache_dir is not None else None
        self._start_timeout = start_timeout
        self._allow_other = allow_other  # tools that run as another user than the worker
        self._last_sync = time.monotonic()
        self._finished = False
        self._mounts: list[_Mount] = []
        self._created: list[Path] = []  # directories download made, parents first

    # -- the SDK's surface ----------------------------------------------------------
    @property
    def roots(self) -> list[Path]:
        """Every attached store's folder (resolved, as the SDK reports it)."""
        return [Path(os.path.realpath(s.path)) for m in self._mounts for s in m.stores]

    @property
    def read_only_roots(self) -> list[Path]:
        return [
            Path(os.path.realpath(s.path)) for m in self._mounts for s in m.stores if s.read_only
        ]

    def _store_root(self, resource: Any) -> Path:
        """The store's `mount_path` verbatim (refused when unusable), as the SDK does."""
        if resource.mount_path:
            p = PurePosixPath(resource.mount_path)
            if not p.is_absolute() or ".." in p.parts or str(p) == "/":
                raise SessionMemoryError(
                    f"memory store mount_path is not a clean absolute path: "
                    f"{resource.mount_path!r} (memory_store_id={resource.memory_store_id})"
                )
            return Path(str(p))
        return Path(self._workdir) / "memory" / str(resource.name or resource.memory_store_id)

    async def download(self, session: BetaManagedAgentsSession) -> None:
        """Mount every attached store; `SessionMemoryError` on the first that cannot be."""
        resources = [r for r in session.resources if r.type == "memory_store"]
        if not resources:
            return
        if len(resources) > MAX_STORES_PER_SESSION:
            raise SessionMemoryError(
                f"a session can attach at most {MAX_STORES_PER_SESSION} memory stores; "
                f"this one attaches {len(resources)}"
            )
        env = self._daemon_env()
        groups = self._plan(resources)
        try:
            for root, members in groups.items():
                self._prepare_root(root, members[0][1].memory_store_id)
                await self._mount(root, members, env)
        except BaseException:
            with anyio.CancelScope(shield=True):
                await self.dispose()
            raise
        self._last_sync = time.monotonic()

    def _plan(self, resources: list[Any]) -> dict[Path, list[tuple[Any, _Store]]]:
        """The stores grouped by mount root; refused if anything is at a store's path."""
        groups: dict[Path, list[tuple[Any, _Store]]] = {}
        for r in resources:
            path = self._store_root(r)
            if os.path.lexists(path):
                raise SessionMemoryError(
                    f"something already exists at the memory store's path: {path} "
                    f"(memory_store_id={r.memory_store_id}); it must not exist when the "
                    "session starts"
                )
            store = _Store(r.memory_store_id, path, r.access == "read_only")
            groups.setdefault(path.parent, []).append((r, store))
        return groups

    async def sync_if_due(self) -> None:
        """One pass of every store when the interval has passed. Never raises."""
        if time.monotonic() - self._last_sync < self._sync_interval:
            return
        await self._each(protocol.Sync())
        self._last_sync = time.monotonic()

    async def finish(self) -> None:
        """The session's last sync, deletes included; raises on a second call."""
        if self._finished:
            raise RuntimeError(
                "finish() was already called: it is the session's last sync and runs once"
            )
        self._finished = True
        await self._each(protocol.Sync(), MEMORY_FLUSH_TIMEOUT)
        self._last_sync = time.monotonic()

    async def flush_writes(self) -> None:
        """Push new and changed files; send no deletes. Never raises."""
        await self._each(protocol.Flush(), MEMORY_FLUSH_TIMEOUT)

    async def restore_missing(self) -> None:
        """Have the files that are missing now come back instead of being deleted."""
        await self._each(protocol.Restore())

    async def write_file(
        self, path: Path, content: str, replacing: str | None, *, lock: anyio.Lock
    ) -> bool:
        """The SDK's `write` and `edit` tools (2.17): save `content` at `path` in its store
        and return once the store has it; `False`, doing nothing, outside every store.

        `replacing` is the text the file must still have (an edit); `lock` is the SDK's,
        held as the SDK holds it, so no sync of this session runs meanwhile. The file is
        written through the mount, then its daemon pushes that one file and answers with
        the store's word (`memfs.sync.engine.StoreSync.push_path`). Raises
        `MemoryWriteError` with the SDK's texts: a refusal puts the file back as it was;
        another session's change of the same memory first makes the file the store's
        version (the agent's bytes kept as a conflict copy); no answer within the SDK's
        `MEMORY_FLUSH_TIMEOUT` leaves the write in the mount, pushed later.
        """
        found = await anyio.to_thread.run_sync(self._store_at, path)
        if found is None:
            return False
        store, info, rel = found
        error = f"{NOT_CONFIRMED}: no answer within {MEMORY_FLUSH_TIMEOUT:g} seconds"
        with anyio.move_on_after(MEMORY_FLUSH_TIMEOUT):
            async with lock:
                data = _writable(store, rel, content)
                before = await anyio.to_thread.run_sync(_write_through, Path(path), data, replacing)
                sha = hashlib.sha256(data).hexdigest()
                try:
                    answer = await arequest(info, protocol.Push(path=rel, merge=False, sha=sha))
                except OSError as e:
                    raise MemoryWriteError(f"{NOT_CONFIRMED}: {e}") from e
                if isinstance(answer, ErrorAnswer):
                    raise MemoryWriteError(f"{NOT_CONFIRMED}: {answer.error}")
                if answer.ok:
                    return True
                error = await _not_saved(answer.outcome, answer.why, Path(path), data, before)
        raise MemoryWriteError(error)

    def _store_at(self, path: Path) -> tuple[_Store, dict[str, Any], str] | None:
        """The store whose folder holds `path`, its daemon and the path in the mount
        ('/a/b.md'); None outside every store."""
        real = os.path.realpath(path)
        for mount in self._mounts:
            for store in mount.stores:
                root = os.path.realpath(store.path)
                if real == root or not real.startswith(root + os.sep):
                    continue
                info = next((i for i in mount.infos if i.get("mountpoint") == root), None)
                if info is None:
                    raise MemoryWriteError(f"{NOT_CONFIRMED}: the memory store is not mounted")
                return store, info, real[len(root) :]
        return None

    async def dispose(self) -> None:
        """Unmount every store and remove what `download` created. Never raises."""
        mounts, self._mounts = self._mounts, []
        for mount in mounts:
            try:
                await self._unmount(mount)
            except Exception as e:
                log.warning("failed to unmount the memory stores root=%s error=%s", mount.root, e)
            self._remove_store_dirs(mount)
        for path in reversed(self._created):
            self._remove_if_empty(path)
        self._created = []

    # -- mounting ---------------------------------------------------------------------
    def _daemon_env(self) -> dict[str, str]:
        """The daemon's environment: this process's, with only the session's credential."""
        env = {
            k: v
            for k, v in os.environ.items()
            if k
            not in (
                "ANTHROPIC_WORK_SECRET",
                "ANTHROPIC_AUTH_TOKEN",
                "ANTHROPIC_API_KEY",
                "ANTHROPIC_ENVIRONMENT_KEY",
            )
        }
        token = getattr(self._client, "auth_token", None)
        key = getattr(self._client, "api_key", None)
        if token:
            env["ANTHROPIC_AUTH_TOKEN"] = token
        elif key:
            env["ANTHROPIC_API_KEY"] = key
        else:
            raise SessionMemoryError(NO_TOKEN)
        env["ANTHROPIC_BASE_URL"] = str(self._client.base_url).rstrip("/")
        return env

    def _prepare_root(self, root: Path, store_id: str) -> None:
        """The mount root must exist and be writable; missing ancestors are created."""
        missing: list[Path] = []
        p = root
        while not os.path.lexists(p):
            missing.append(p)
            p = p.parent
        try:
            for d in reversed(missing):
                d.mkdir()
                self._created.append(d)
            if not os.access(root, os.W_OK | os.X_OK):
                raise PermissionError(13, "Permission denied", str(root))
        except OSError as e:
            raise SessionMemoryError(
                f"cannot create the memory store's folder: {root} (memory_store_id="
                f"{store_id}): {e}; the worker host must make this mount path writable"
            ) from e

    async def _mount(
        self, root: Path, members: list[tuple[Any, _Store]], env: dict[str, str]
    ) -> None:
        spec = {
            "resources": [
                {
                    "type": "memory_store",
                    "memory_store_id": r.memory_store_id,
                    "access": "read_only" if s.read_only else "read_write",
                    "mount_path": str(s.path),
                    "name": r.name,
                    "instructions": r.instructions or "",
                }
                for r, s in members
            ]
        }
        fd, name = tempfile.mkstemp(prefix="memfs-session-", suffix=".json")
        with os.fdopen(fd, "w") as f:
            json.dump(spec, f)
        mount = _Mount(root, [s for _, s in members], Path(name))
        cmd = [
            sys.executable,
            "-m",
            "memfs.cli",
            "session",
            name,
            "--root",
            str(root),
            "--daemon",
            "--sync-interval",
            str(self._sync_interval),
            "--deletions",
            self._sync_deletions,
            "--flush-timeout",
            str(MEMORY_FLUSH_TIMEOUT),
            "--deletes-when-asked",  # deletes only at sync_if_due and finish
        ]
        if self._cache_dir is not None:
            cmd += ["--cache-dir", str(self._cache_dir)]
        if self._allow_other:
            cmd.append("--allow-other")
        self._mounts.append(mount)  # from here on, dispose cleans it up
        with anyio.fail_after(self._start_timeout):
            done = await anyio.run_process(cmd, env=env, check=False, stdin=subprocess.DEVNULL)
        if done.returncode != 0:
            lines = [ln for ln in done.stderr.decode(errors="replace").splitlines() if ln.strip()]
            message = lines[-1] if lines else f"memfs session exited with {done.returncode}"
            message = message.removeprefix("memfs: ")
            raise SessionMemoryError(message)
        if not _own_daemons(mount):
            raise SessionMemoryError(f"the memfs daemons for {root} are not registered")
        for s in mount.stores:
            log.info(
                "mounted memory store memory_store_id=%s path=%s access=%s",
                s.memory_store_id,
                s.path,
                "read_only" if s.read_only else "read_write",
            )

    async def _unmount(self, mount: _Mount) -> None:
        # Cut off while starting, its daemons may have mounted anyway.
        if not (mount.infos or _own_daemons(mount)):
            return
        answers: list[protocol.UnmountAnswer | ErrorAnswer] = []

        async def one(info: dict[str, Any]) -> None:
            if not self._finished:
                # A session that did not end cleanly sends no deletes: what it removed
                # may be a stopped call's half-done move. Its edits are still pushed.
                await _ask(info, protocol.Restore(sync=False), bound=REQUEST_TIMEOUT)
            answers.append(await _ask(info, protocol.Unmount(), bound=MEMORY_FLUSH_TIMEOUT + 15))

        try:
            async with anyio.create_task_group() as tg:  # every store's final sync at once
                for info in mount.infos:
                    tg.start_soon(one, info)
        finally:
            for answer in answers:
                _log_left(mount, answer)
            for _ in range(300):  # the session exits right after its stores; bounded at 15 s
                if not (mount.pid and registry.pid_alive(mount.pid)):
                    break
                await anyio.sleep(0.05)
            await anyio.to_thread.run_sync(_force_gone, mount)

    def _remove_store_dirs(self, mount: _Mount) -> None:
        """Store directories the session left (never a live mount's)."""
        for store in mount.stores:
            self._remove_if_empty(store.path)
        with _quiet():
            mount.spec_file.unlink()

    def _remove_if_empty(self, path: Path) -> None:
        if path in self._created or not os.path.ismount(path):
            with _quiet():
                path.rmdir()

    # -- control requests -------------------------------------------------------------
    async def _each(self, req: protocol.Asks[Answer], bound: float = REQUEST_TIMEOUT) -> None:
        """Ask every daemon; log failures, never raise (mid-session syncs never do)."""

        async def one(mount: _Mount, info: dict[str, Any]) -> None:
            try:
                answer = await _ask(info, req, bound=bound)
            except Exception as e:
                log.warning("memory request failed op=%s root=%s error=%s", req.op, mount.root, e)
                return
            if not answer.ok:
                log.warning(
                    "memory request failed op=%s root=%s error=%s",
                    req.op,
                    mount.root,
                    _failure(answer),
                )

        async with anyio.create_task_group() as tg:
            for mount in self._mounts:
                for info in mount.infos:
                    tg.start_soon(one, mount, info)


def _writable(store: _Store, rel: str, content: str) -> bytes:
    """`content` as the bytes to write, or the SDK's refusal of what no store saves."""
    if store.read_only:
        raise MemoryWriteError(f"{NOT_SAVED}: the memory store is read-only.")
    if rel == "/" + MARKER_PATH:
        raise MemoryWriteError(f"{NOT_SAVED}: this file marks the folder as a memory store.")
    try:
        data = content.encode("utf-8")
    except UnicodeEncodeError as e:
        raise MemoryWriteError(f"{NOT_SAVED}: the content is not valid UTF-8 ({e.reason}).") from e
    if len(data) > MAX_CONTENT_BYTES:
        raise MemoryWriteError(
            f"{NOT_SAVED}: the content is {len(data):,} bytes; a memory holds at most "
            f"{MAX_CONTENT_BYTES:,}."
        )
    return data


def _write_through(path: Path, data: bytes, replacing: str | None) -> bytes | None:
    """Write `data` at `path` (in the mount); what the file held before (None: nothing).
    `replacing`: the text the file must still have, else nothing is written."""
    try:
        before: bytes | None = path.read_bytes()
    except FileNotFoundError:
        before = None
    if replacing is not None and before != replacing.encode("utf-8"):
        raise MemoryWriteError(
            f"{NOT_SAVED}: the file changed in the meantime. Read it again before you retry."
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return before


async def _not_saved(outcome: str, why: str, path: Path, data: bytes, before: bytes | None) -> str:
    """The agent's error for a `push` answer that is not ok; a refused write is undone."""
    if outcome == "refused":
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(_put_back, path, data, before)
        return f"{NOT_SAVED}: {why}"
    if outcome == "conflict":
        why = why or "another session changed this memory first"
        return f"{NOT_SAVED}: {why}. Read the file again before you retry."
    return f"{NOT_CONFIRMED}: {why}" if why else NOT_CONFIRMED


def _put_back(path: Path, data: bytes, before: bytes | None) -> None:
    """Undo a refused write, unless the file changed again since."""
    try:
        if path.read_bytes() != data:
            return
        if before is None:
            path.unlink()
        else:
            path.write_bytes(before)
    except OSError as e:
        log.warning("could not undo a refused memory write path=%s error=%s", path, e)


async def _ask(info: dict[str, Any], req: protocol.Asks[A], *, bound: float) -> A | ErrorAnswer:
    """One request on a store daemon's control socket, given up after `bound` seconds."""
    with anyio.fail_after(bound):
        return await arequest(info, req)


def _log_left(mount: _Mount, answer: protocol.UnmountAnswer | ErrorAnswer) -> None:
    """What a store's final sync left: changed files not pushed, files refused."""
    if isinstance(answer, ErrorAnswer):
        return
    for store_id, paths in answer.unpushed.items():
        log.warning(
            "memory flush left changed files un-pushed; they stay in the "
            "journal for the next mount root=%s memory_store_id=%s files=%d paths=%s",
            mount.root,
            store_id,
            len(paths),
            ",".join(paths[:20]),
        )
    for store_id, files in answer.refused.items():
        log.warning(
            "the store refused these files, so it does not have them; they stay "
            "only in the cache until their content changes root=%s "
            "memory_store_id=%s files=%d paths=%s",
            mount.root,
            store_id,
            len(files),
            ",".join(f"{f.path} ({f.why})" for f in files[:20]),
        )


def _own_daemons(mount: _Mount) -> bool:
    """Find the live daemons of this mount's session (one per store); any?"""
    mount.infos = registry.session_mounts(str(mount.root))
    if mount.infos:
        mount.pid = int(mount.infos[0].get("session_pid") or 0)
    return bool(mount.infos)


def _force_gone(mount: _Mount) -> None:
    """A session that did not exit in time is stopped, and its mounts detached."""
    if mount.pid and registry.pid_alive(mount.pid):
        log.warning(
            "the memfs daemon did not exit; stopping it pid=%d root=%s", mount.pid, mount.root
        )
        with _quiet():
            os.kill(mount.pid, signal.SIGTERM)
    for store in mount.stores:
        if os.path.ismount(store.path):
            subprocess.run(
                ["fusermount3", "-u", "-z", str(store.path)], check=False, capture_output=True
            )


def _failure(answer: Answer) -> str:
    """Why an answer is not ok: its error, or the failed stores of a `sync` answer (their
    last pass) or a `flush` answer."""
    if isinstance(answer, ErrorAnswer):
        return answer.error
    done: dict[str, protocol.LastPass | protocol.Flushed | None] = {}
    if isinstance(answer, protocol.StatusAnswer):
        done = {s.memory_store_id: s.last_pass for s in answer.stores}
    elif isinstance(answer, protocol.FlushAnswer):
        done = dict(answer.stores)
    named = [f"{k}: {d.error or d.outcome}" for k, d in done.items() if d and d.outcome != "ok"]
    return ", ".join(named) or "failed"


class _quiet:
    """Suppress OSError: teardown steps that find their work already done."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, *rest: object) -> bool:
        return kind is not None and issubclass(kind, OSError)
