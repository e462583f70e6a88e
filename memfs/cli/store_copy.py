"""`memfs store import` and `memfs store export`: a folder tree into a store and back.

Import scans the tree first (no symlink followed, names and sizes checked) so the
refusal list is complete before anything is sent, then uploads with bounded
concurrency, only what changed. Export writes every file relative to an open directory
with O_NOFOLLOW, so neither a hostile path from the server nor a symlink already there
can redirect a write outside it.
"""

from __future__ import annotations

import argparse
import os
import stat
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TextIO

import trio

from memfs.cli.common import PROG, emit_json, get_store, show_path, warn
from memfs.config import ExitCode
from memfs.errors import CommandFailed, InvalidContent, Rejected, StoreError, StoreUnavailable
from memfs.logs import plural
from memfs.mount.display import Bar, on_terminal, printable
from memfs.paths import (
    MARKER_NAME,
    MARKER_PATH,
    MAX_CONTENT_BYTES,
    NAME_MAX,
    PathRejected,
    RemoteMemory,
    check_memory_path,
    local_name,
    sha256_hex,
)
from memfs.store.client import FullMemory, StoreClient

# --------------------------------------------------------------------------- progress


class Progress:
    """One line on stderr ("importing 212 of 300 files"), only on a terminal."""

    def __init__(
        self, label: str, total: int | None, stream: TextIO | None = None, unit: str = "files"
    ) -> None:
        self.done = 0
        self.bar = Bar(label, total, unit, stream) if on_terminal(stream) else None

    def advance(self, n: int = 1) -> None:
        self.done += n
        if self.bar is not None:
            self.bar.update(self.done)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


# --------------------------------------------------------------------------- import


@dataclass
class _Candidate:
    rel: str
    full: str
    path: str


@dataclass
class _ImportResult:
    created: int = 0
    updated: int = 0
    unchanged: int = 0
    refused: list[dict[str, str]] = field(default_factory=list)
    failed: list[dict[str, str]] = field(default_factory=list)
    unreachable: bool = False


def scan_tree(root: str) -> tuple[list[_Candidate], list[dict[str, str]]]:
    """Files to upload under `root`, plus the ones the API would refuse (with why).

    Never follows symlinks; skips the marker at the top; checks names and sizes here so
    the refusal list is complete before anything is sent.
    """
    candidates: list[_Candidate] = []
    refused: list[dict[str, str]] = []

    def refuse(rel: str, reason: str) -> None:
        refused.append({"file": show_path(rel), "reason": reason})

    def walk(directory: str, prefix: str) -> None:
        try:
            entries = sorted(os.scandir(directory), key=lambda e: e.name)
        except OSError as exc:
            refuse(prefix.rstrip("/") or ".", f"cannot read directory: {exc.strerror}")
            return
        for entry in entries:
            rel = prefix + entry.name
            if not prefix and entry.name == MARKER_NAME:
                continue
            try:
                info = entry.stat(follow_symlinks=False)
            except OSError as exc:
                refuse(rel, f"cannot stat: {exc.strerror}")
                continue
            if stat.S_ISLNK(info.st_mode):
                refuse(rel, "symbolic link (not followed)")
            elif stat.S_ISDIR(info.st_mode):
                walk(entry.path, rel + "/")
            elif not stat.S_ISREG(info.st_mode):
                refuse(rel, "not a regular file")
            else:
                path = "/" + rel
                try:
                    path.encode("utf-8")
                except UnicodeEncodeError:
                    refuse(rel, "file name is not valid UTF-8")
                    continue
                try:
                    check_memory_path(path)
                except PathRejected as exc:
                    refuse(rel, f"path not allowed: {exc.reason}")
                    continue
                if info.st_size > MAX_CONTENT_BYTES:
                    refuse(
                        rel, f"too large ({info.st_size} bytes; the limit is {MAX_CONTENT_BYTES})"
                    )
                    continue
                candidates.append(_Candidate(rel, entry.path, path))

    walk(root, "")
    return candidates, refused


def _read_limited(path: str) -> bytes:
    """Read a file without following a symlink swapped in since the scan."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        with os.fdopen(fd, "rb", closefd=False) as f:
            return f.read(MAX_CONTENT_BYTES + 1)
    finally:
        os.close(fd)


async def import_tree(client: StoreClient, args: argparse.Namespace) -> int:
    root = args.directory
    if not await trio.to_thread.run_sync(os.path.isdir, root):
        raise CommandFailed(f"{root!r} is not a directory", ExitCode.USAGE)
    if args.concurrency < 1:
        raise CommandFailed("--concurrency must be at least 1", ExitCode.USAGE)
    store = await get_store(client, args.store_id)
    if store.archived_at:
        raise CommandFailed(f"memory store {store.id} is archived (read-only)")
    candidates, refused = await trio.to_thread.run_sync(scan_tree, root)
    remote = {m.path: m for m in await client.list_memories(store.id)}
    result = _ImportResult(refused=refused)
    progress = Progress("importing", len(candidates))
    send, receive = trio.open_memory_channel[_Candidate](0)

    async def worker(receive: trio.MemoryReceiveChannel[_Candidate]) -> None:
        async with receive:
            async for candidate in receive:
                await _import_one(client, store.id, candidate, remote.get(candidate.path), result)
                progress.advance()

    async with trio.open_nursery() as nursery:
        async with receive:
            for _ in range(min(args.concurrency, max(1, len(candidates)))):
                nursery.start_soon(worker, receive.clone())
        async with send:
            for candidate in candidates:
                await send.send(candidate)
    progress.close()

    result.refused.sort(key=lambda r: r["file"])
    result.failed.sort(key=lambda r: r["file"])
    summary = {
        "store_id": store.id,
        "created": result.created,
        "updated": result.updated,
        "unchanged": result.unchanged,
        "refused": result.refused,
        "failed": result.failed,
    }
    if args.json:
        emit_json(summary)
    else:
        print(
            f"{store.id}: {result.created} created, {result.updated} updated, "
            f"{result.unchanged} unchanged, {len(result.refused)} refused, "
            f"{len(result.failed)} failed"
        )
        if result.refused:
            print(
                f"{PROG}: refused {plural(len(result.refused), 'file')} the API would reject:",
                file=sys.stderr,
            )
            for item in result.refused:
                print(printable(f"  {item['file']}: {item['reason']}"), file=sys.stderr)
        if result.failed:
            print(
                f"{PROG}: {plural(len(result.failed), 'file')} failed to upload:", file=sys.stderr
            )
            for item in result.failed:
                print(printable(f"  {item['file']}: {item['error']}"), file=sys.stderr)
    if result.unreachable:
        return ExitCode.UNREACHABLE
    return ExitCode.FAILED if result.refused or result.failed else ExitCode.OK


async def _import_one(
    client: StoreClient,
    store_id: str,
    candidate: _Candidate,
    remote: RemoteMemory | None,
    result: _ImportResult,
) -> None:
    shown = show_path(candidate.rel)
    try:
        data = await trio.to_thread.run_sync(_read_limited, candidate.full)
    except OSError as exc:
        result.refused.append({"file": shown, "reason": f"cannot read: {exc.strerror}"})
        return
    if len(data) > MAX_CONTENT_BYTES:
        result.refused.append({"file": shown, "reason": "too large (it grew during import)"})
        return
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        result.refused.append({"file": shown, "reason": "not valid UTF-8 text"})
        return
    sha = sha256_hex(data)
    try:
        if remote is not None and remote.content_sha256 == sha:
            result.unchanged += 1
        elif remote is not None:
            await client.update_memory(
                store_id, remote.id, content=text, precondition_sha256=remote.content_sha256
            )
            result.updated += 1
        else:
            await client.create_memory(store_id, candidate.path, text)
            result.created += 1
    except Rejected as exc:
        result.refused.append({"file": shown, "reason": f"the store refused it: {exc.message}"})
    except StoreError as exc:
        if isinstance(exc, StoreUnavailable):
            result.unreachable = True
        result.failed.append({"file": shown, "error": str(exc)})


# --------------------------------------------------------------------------- export


def _write_under(root_fd: int, path: str, data: bytes) -> None:
    """Write `data` at memory `path` below the directory `root_fd`, never leaving it.

    Every component is opened relative to its parent with O_NOFOLLOW, so neither a
    hostile path nor a symlink already in DIR can redirect the write elsewhere.
    """
    # A segment longer than NAME_MAX is written under the alias a mount shows it as.
    segments = [local_name(segment) for segment in path[1:].split("/")]
    fd = os.dup(root_fd)
    try:
        for segment in segments[:-1]:
            try:
                os.mkdir(segment, 0o755, dir_fd=fd)
            except FileExistsError:
                pass
            nfd = os.open(
                segment, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd
            )
            os.close(fd)
            fd = nfd
        out = os.open(
            segments[-1],
            os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC,
            0o644,
            dir_fd=fd,
        )
        try:
            view = memoryview(data)
            while view:
                written = os.write(out, view)
                view = view[written:]
        finally:
            os.close(out)
    finally:
        os.close(fd)


def _write_batch(root_fd: int, batch: Sequence[tuple[str, bytes]]) -> list[tuple[str, str]]:
    errors = []
    for path, data in batch:
        try:
            _write_under(root_fd, path, data)
        except OSError as exc:
            errors.append((path, f"cannot write: {exc.strerror or exc}"))
    return errors


async def export_tree(client: StoreClient, args: argparse.Namespace) -> int:
    store = await get_store(client, args.store_id)
    root = await trio.to_thread.run_sync(os.path.abspath, args.directory)
    try:
        root_fd = await trio.to_thread.run_sync(_open_export_root, root)
    except OSError as exc:
        raise CommandFailed(
            f"cannot use {root!r} as the export directory: {exc.strerror}", ExitCode.USAGE
        ) from None
    written = 0
    total_bytes = 0
    refused: list[dict[str, str]] = []
    total = None
    if on_terminal():  # a total for the bar: one cheap listing (100 a page) first
        total = sum(m.path != MARKER_PATH for m in await client.list_memories(store.id))
    progress = Progress("exporting", total, unit="memories")
    batch: list[tuple[str, bytes]] = []

    async def flush() -> None:
        nonlocal written, total_bytes
        errors = dict(await trio.to_thread.run_sync(_write_batch, root_fd, list(batch)))
        for path, data in batch:
            if path in errors:
                refused.append({"path": show_path(path), "reason": errors[path]})
                warn(f"not exporting {show_path(path)!r}: {errors[path]}")
            else:
                written += 1
                total_bytes += len(data)
        progress.advance(len(batch))
        batch.clear()

    try:
        async for item in client.iter_memories(store.id, view="full"):
            if not isinstance(item, FullMemory):
                continue
            path = item.memory.path
            reason = _export_refusal(item)
            if reason is not None:
                refused.append({"path": show_path(path), "reason": reason})
                warn(f"not exporting {show_path(path)!r}: {reason}")
                continue
            data = item.content_bytes()
            if sha256_hex(data) != item.memory.content_sha256:
                warn(f"{show_path(path)!r}: content does not match its content_sha256")
            shown = "/".join(local_name(s) for s in path.split("/"))
            if shown != path:
                warn(
                    f"{show_path(path)!r} has a name longer than {NAME_MAX} bytes; "
                    f"exported as {show_path(shown)!r}"
                )
            batch.append((path, data))
            if len(batch) >= 20:
                await flush()
        if batch:
            await flush()
    finally:
        os.close(root_fd)
        progress.close()
    if args.json:
        emit_json(
            {
                "store_id": store.id,
                "directory": show_path(root),
                "written": written,
                "bytes": total_bytes,
                "refused": refused,
            }
        )
    else:
        print(
            f"exported {plural(written, 'memory', 'memories')} "
            f"({plural(total_bytes, 'byte')}) from {store.id} "
            f"to {printable(show_path(root))}"
        )
        if refused:
            print(
                f"{PROG}: {plural(len(refused), 'memory', 'memories')} not exported "
                "(see warnings above)",
                file=sys.stderr,
            )
    return ExitCode.FAILED if refused else ExitCode.OK


def _open_export_root(root: str) -> int:
    os.makedirs(root, exist_ok=True)
    return os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)


def _export_refusal(item: FullMemory) -> str | None:
    """Why a listed memory must not become a file, or None if it is safe to write."""
    path = item.memory.path
    if path == MARKER_PATH:
        return "the server listed the reserved marker path; skipping"
    try:
        check_memory_path(path)
    except PathRejected as exc:
        return f"hostile or invalid path from the server: {exc.reason}"
    try:
        item.content_bytes()
    except InvalidContent:
        return "content is not valid UTF-8 (lone surrogates from the server)"
    return None
