"""A store's engine under test: real `Tree`/`StoreState`/`CacheDir` in a temp folder,
`StoreSync` against the real server app in-process (`ApiStore`: `Storage` on SQLite
behind `httpx.ASGITransport`, with recording and scripted faults in front).

Local edits go through the same `StoreState` calls the FUSE handlers make. Shared by
the engine's unit tests (tests/unit/test_sync_*.py).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import trio

from memfs.paths import sha256_hex
from memfs.state.cachedir import CacheDir
from memfs.state.node import Node
from memfs.state.store_state import StoreState
from memfs.state.tree import Tree
from memfs.store.client import StoreClient
from memfs.store.connection import ClientConfig, make_http_client
from memfs.store.transport import RetryPolicy
from memfs.sync.engine import StoreSync
from memfs.sync.notify import NullNotifier
from memfs.sync.plan import PassResult
from tests.support.apistore import ApiStore


def sha(text: str) -> str:
    return sha256_hex(text.encode())


def read_copy(path: str) -> str:
    """A conflict copy's bytes (a small local file: a blocking read is fine in a test)."""
    with open(path, encoding="utf-8") as f:
        return f.read()


class Harness:
    """One store's local state, its engine and the store behind it (`fake`: the real
    server app, named for the faults a test scripts in front of it)."""

    def __init__(
        self,
        tmp_path: Path,
        *,
        read_only: bool = False,
        retry: RetryPolicy | None = None,
        **sync_kw: Any,
    ) -> None:
        self.tmp_path = tmp_path
        self.fake = ApiStore(tmp_path / "server")
        self.retry = retry or RetryPolicy.none()
        self.sync_kw = sync_kw
        self.read_only = read_only
        self.http = make_http_client(
            ClientConfig("http://store.test"), transport=self.fake.transport()
        )
        self._open()

    def _open(self) -> None:
        store_id = self.fake.store_id
        self.cache = CacheDir(self.tmp_path / "cache", store_id)
        self.tree = Tree(uid=0, gid=0)
        self.state = StoreState(self.tree, store_id, self.cache, read_only=self.read_only)
        self.notifier = NullNotifier()
        self.client = StoreClient(self.http, retry=self.retry)
        self.sync = StoreSync(self.state, self.client, self.notifier, **self.sync_kw)
        self.sync.check_scope = True  # every pass's scope checked against a full walk

    def restart(self, *, read_only: bool | None = None) -> None:
        """Drop every in-memory structure (a kill -9) and reopen the cache directory."""
        self.cache.close()
        if read_only is not None:
            self.read_only = read_only
        self._open()

    async def aclose(self) -> None:
        self.cache.close()
        await self.http.aclose()
        self.fake.close()

    async def start(self) -> None:
        await self.sync.start()

    async def sync_once(self, *, final: bool = False) -> PassResult:
        return await self.sync.run_pass(final=final)

    # -- local file operations, as the FUSE handlers make them ------------------------
    def node(self, path: str) -> Node:
        node = self.state.root
        for name in path.strip("/").split("/"):
            assert node.children is not None, path
            node = node.children[name]
        return node

    def exists(self, path: str) -> bool:
        try:
            self.node(path)
        except KeyError:
            return False
        return True

    def mkdirs(self, path: str) -> Node:
        node = self.state.root
        for name in path.strip("/").split("/"):
            if not name:
                continue
            assert node.children is not None
            child = node.children.get(name)
            node = child if child is not None else self.state.mkdir(node, name, 0o755)
        return node

    def write(self, path: str, text: str, *, keep_open: bool = False) -> Node:
        parent_path, name = path.rsplit("/", 1)
        parent = self.mkdirs(parent_path)
        assert parent.children is not None
        node = parent.children.get(name)
        if node is None:
            node = self.state.create_file(parent, name, 0o644)
        self.state.truncate(node, 0)
        self.state.write(node, 0, text.encode())
        if keep_open:
            node.open_handles += 1
            node.open_writers += 1
        return node

    def close(self, node: Node) -> None:
        node.open_handles -= 1
        node.open_writers -= 1

    def read(self, path: str) -> str | None:
        data = self.state.content(self.node(path))
        return None if data is None else data.decode()

    def unlink(self, path: str) -> None:
        parent_path, name = path.rsplit("/", 1)
        self.state.unlink(self.node(parent_path) if parent_path else self.state.root, name)

    def rename(self, old: str, new: str) -> None:
        op, on = old.rsplit("/", 1)
        np_, nn = new.rsplit("/", 1)
        self.state.rename(
            self.node(op) if op else self.state.root,
            on,
            self.mkdirs(np_) if np_ else self.state.root,
            nn,
            noreplace=False,
        )

    def local_files(self) -> dict[str, str | None]:
        return {
            n.store_path(): (lambda d: None if d is None else d.decode())(self.state.content(n))
            for n in self.state.walk_files()
        }


async def synced(h: Harness, files: dict[str, str]) -> dict[str, str]:
    """Seed the store, start, fetch every content; returns path -> memory id."""
    h.fake.add_many(files.items())
    await h.start()
    await h.sync.fetcher.fetch_all_missing()  # what `run()` does first: contents stream in
    for path in files:
        assert h.read(path) == files[path]
    ids = {m["path"]: mid for mid, m in h.fake.memories.items()}
    return {path: ids[path] for path in files}


@asynccontextmanager
async def running(h: Harness) -> AsyncIterator[None]:
    """`start()` then `run()` in the background, as the daemon does."""
    await h.start()
    async with trio.open_nursery() as nursery:
        await nursery.start(h.sync.run)
        yield
        nursery.cancel_scope.cancel()
