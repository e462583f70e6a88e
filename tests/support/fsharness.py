"""Drive `MemFs` handlers directly (no kernel): a Tree + StoreState over a CacheDir."""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Awaitable, Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pyfuse3
import pytest
import trio

from memfs.mount.fs import MemFs
from memfs.paths import sha256_hex
from memfs.state.cachedir import CacheDir
from memfs.state.node import Kind, Node
from memfs.state.store_state import StoreState
from memfs.state.tree import Tree

STORE_ID = "memstore_unit"
CTX: Any = SimpleNamespace(uid=0, gid=0, pid=1, umask=0o022)
O_RD, O_WR, O_RW = os.O_RDONLY, os.O_WRONLY, os.O_RDWR


class Waiter:
    """The daemon's content waiter: `deliver` decides what happens while a read waits."""

    def __init__(self) -> None:
        self.calls: list[int] = []
        self.deliver: Callable[[Node], Awaitable[None]] | None = None

    async def wait_for(self, node: Node) -> str | None:
        self.calls.append(node.ino)
        if self.deliver is None:
            await trio.sleep_forever()
        else:
            await self.deliver(node)
        return None


def fields(**on: bool) -> Any:
    names = (
        "update_atime",
        "update_mtime",
        "update_ctime",
        "update_mode",
        "update_uid",
        "update_gid",
        "update_size",
    )
    return SimpleNamespace(**{n: on.get(n[len("update_") :], False) for n in names})


def attrs(**values: int) -> pyfuse3.EntryAttributes:
    a = pyfuse3.EntryAttributes()
    for k, v in values.items():
        setattr(a, k, v)
    return a


async def fails(errno_value: int, coro: Awaitable[Any]) -> None:
    """Await `coro` and require it to fail with exactly this errno."""
    with pytest.raises(pyfuse3.FUSEError) as info:
        await coro
    assert info.value.errno == errno_value, (
        f"expected {errno.errorcode[errno_value]}, got "
        f"{errno.errorcode.get(info.value.errno, info.value.errno)}"
    )


class Harness:
    """One store mounted in memory; `reload()` rebuilds everything from the journal."""

    def __init__(
        self,
        tmp: Path,
        *,
        read_only: bool = False,
        store_id: str = STORE_ID,
        cache_name: str = "cache",
    ) -> None:
        self.tmp = tmp
        self.store_id = store_id
        self.cache_path = tmp / cache_name
        self._open(read_only)

    def _open(self, read_only: bool) -> None:
        self.tree = Tree(uid=os.getuid(), gid=os.getgid())
        self.cache = CacheDir(self.cache_path, self.store_id)
        self.state = StoreState(self.tree, self.store_id, self.cache, read_only=read_only)
        self.loaded = self.state.load_journal()
        self.waiter = Waiter()
        # No kernel here to cache a negative entry: a missing name is plain ENOENT.
        self.fs = MemFs(self.state, self.waiter, content_timeout=0.3, negative_timeout=0.0)
        # Plain handles whichever pyfuse3 is installed (the levers are tested on mounts).
        self.fs.noflush = self.fs.cache_readdir = False

    def reload(self, *, read_only: bool = False) -> None:
        self.cache.close()
        self._open(read_only)

    def close(self) -> None:
        self.cache.close()

    # -- path helpers -------------------------------------------------------------------
    async def ino(self, path: str) -> int:
        ino = pyfuse3.ROOT_INODE
        for name in [p for p in path.split("/") if p]:
            ino = (await self.fs.lookup(ino, name.encode(), CTX)).st_ino
        return ino

    async def parent(self, path: str) -> tuple[int, bytes]:
        head, _, name = path.rpartition("/")
        return await self.ino(head or "/"), name.encode()

    def node(self, path: str) -> Node:
        cur = self.state.root
        for name in [p for p in path.split("/") if p]:
            assert cur.children is not None, path
            cur = cur.children[name]
        return cur

    async def write_file(self, path: str, data: bytes, *, mode: int = 0o644) -> int:
        parent, name = await self.parent(path)
        assert parent is not None
        try:
            ino = (await self.fs.lookup(parent, name, CTX)).st_ino
            fi = await self.fs.open(ino, O_WR | os.O_TRUNC, CTX)
        except pyfuse3.FUSEError as e:
            assert e.errno == errno.ENOENT
            fi, a = await self.fs.create(parent, name, stat.S_IFREG | mode, O_WR, CTX)
            ino = a.st_ino
        if data:
            assert await self.fs.write(fi.fh, 0, data) == len(data)
        await self.fs.flush(fi.fh)
        await self.fs.release(fi.fh)
        return ino

    async def read_file(self, path: str) -> bytes:
        fi = await self.fs.open(await self.ino(path), O_RD, CTX)
        try:
            return await self.fs.read(fi.fh, 0, 1 << 20)
        finally:
            await self.fs.release(fi.fh)

    async def mkdir(self, path: str, mode: int = 0o755) -> int:
        parent, name = await self.parent(path)
        return (await self.fs.mkdir(parent, name, stat.S_IFDIR | mode, CTX)).st_ino

    async def rename(self, old: str, new: str, flags: int = 0) -> None:
        op, on = await self.parent(old)
        np, nn = await self.parent(new)
        await self.fs.rename(op, on, np, nn, flags, CTX)

    async def unlink(self, path: str) -> None:
        parent, name = await self.parent(path)
        await self.fs.unlink(parent, name, CTX)

    async def rmdir(self, path: str) -> None:
        parent, name = await self.parent(path)
        await self.fs.rmdir(parent, name, CTX)

    # -- simulating what a pull lands (the sync engine's job) ----------------------------
    def seed(self, path: str, content: bytes, memory_id: str) -> Node:
        """A synced memory, as the sync engine leaves it: clean, content in objects."""
        state = self.state
        parent_path, name = path.rsplit("/", 1)
        parent = state.ensure_dirs(parent_path or "/")
        sha = state.objects.put(content)
        node = state.tree.new_node(Kind.FILE, name, parent, state.file_mode(), 1)
        node.memory_id, node.base_sha, node.base_path = memory_id, sha, path
        node.sha, node.size = sha, len(content)
        state.by_memory[memory_id] = node
        node.entry_id = state.journal.insert(
            path=path,
            kind="file",
            mode=node.mode,
            mtime_ns=1,
            memory_id=memory_id,
            base_sha=sha,
            base_path=path,
            sha=sha,
            dirty=0,
        )
        return node

    def remote_only(self, path: str, content: bytes, memory_id: str) -> Node:
        """A listed memory whose content has not arrived yet (not in the object store)."""
        node = self.seed(path, content, memory_id)
        sha = sha256_hex(content)
        obj = self.state.objects._path(sha)
        obj.unlink()
        self.state.objects._lru.pop(sha, None)
        return node


def snapshot(h: Harness) -> dict[str, Any]:
    """Everything a restart must reproduce: names, kinds, modes, contents, sync state."""
    out: dict[str, Any] = {}
    stack = [h.state.root]
    while stack:
        node = stack.pop()
        assert node.children is not None
        for name, child in node.children.items():
            path = child.store_path()
            if child.is_dir:
                out[path] = ("dir", child.mode)
                stack.append(child)
            elif child.kind is Kind.FILE:
                out[path] = (
                    "file",
                    child.mode,
                    child.mtime_ns,
                    h.state.content(child),
                    child.state_name(),
                    child.memory_id,
                    child.base_sha,
                    child.base_path,
                    child.dirty,
                    child.refused_sha,
                )
            else:
                out[path] = ("marker", bytes(h.state.content(child) or b""))
            assert name == child.name
    out["tombstones"] = sorted(
        (mid, t.base_path, t.base_sha) for mid, t in h.state.tombstones.items()
    )
    out["stats"] = h.state.statistics()
    return out
