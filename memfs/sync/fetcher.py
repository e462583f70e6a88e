"""Content fetching for one store: the only code that downloads memory contents.

The sync pass lists shas and paths only; contents come in here, three ways: streamed in
behind a fresh mount (`run`, full-view pages first), fetched for a pass's pulls before
they land (`fetch`), and fetched at once for a reader that waits (`wait`). Each sha has
at most one waiter event; a download that fails wakes its readers at once (they answer
EIO, told why), and for `FETCH_RETRY_AFTER` seconds a new reader of that sha answers at
once too, so the kernel's retry of a failed read does not wait out the bound a second time.
Content that does not match its listed sha is never kept: a file must not show bytes the
store does not have as its memory's (issue 24 item 12).

It only ever adds objects to the object store (`StoreState.objects`); nodes and the
journal are the sync pass's to change.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from dataclasses import dataclass

import trio

from memfs.errors import InvalidContent, NotFound, StoreError
from memfs.logs import Repeated
from memfs.paths import RemoteMemory, sha256_hex
from memfs.state.node import Node
from memfs.state.store_state import StoreState
from memfs.store.client import FullMemory, StoreClient

log = logging.getLogger("memfs.sync")

# A read of content whose download just failed answers EIO at once for this long.
FETCH_RETRY_AFTER = 5.0
# Full-view pages carry 20 memories a request: the page size of a streamed batch.
PAGE = 20


@dataclass(frozen=True)
class FetcherStatistics:
    missing_content: int  # contents known to be wanted and not local yet
    waiting_readers: int  # shas a reader (or a pass) waits for


class ContentFetcher:
    """Brings one store's memory contents into its object store."""

    def __init__(self, state: StoreState, client: StoreClient, *, concurrency: int = 16) -> None:
        self.state = state
        self.client = client
        self.store_id = state.store_id
        self.limit = trio.CapacityLimiter(concurrency)
        self._arrived: dict[str, trio.Event] = {}
        self._missing: dict[str, str] = {}  # sha -> memory id, content not yet local
        self._failed: dict[str, tuple[float, str]] = {}  # sha -> when and why it last failed
        # The same memory fails the same way at every read and every pass: once per cause.
        self._fetch_failed = Repeated(
            log, "failed to fetch memory content memory_store_id=%s memory_id=%s error=%s"
        )
        self._not_utf8 = Repeated(
            log,
            "the server sent content that is not valid UTF-8; ignoring it "
            "memory_store_id=%s path=%s",
        )
        self._sha_mismatch = Repeated(
            log,
            "the server's content does not match its sha; ignoring it memory_store_id=%s path=%s",
        )
        self._urgent_send, self._urgent_recv = trio.open_memory_channel[tuple[str, str]](10_000)

    def statistics(self) -> FetcherStatistics:
        return FetcherStatistics(len(self._missing), len(self._arrived))

    # -- verbs ------------------------------------------------------------------------
    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Serve urgent fetches for the mount's lifetime; stream the backlog in once."""
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._urgent_fetcher)
            task_status.started()
            await self.fetch_all_missing()

    async def wait(self, node: Node) -> str | None:
        """Wait until `node`'s content is local (the caller bounds the wait); why it is
        not, when its download failed."""
        sha = node.sha
        if sha is None or self.state.objects.has(sha):
            return None
        failed = self._failed.get(sha)
        if failed is not None and time.monotonic() - failed[0] < FETCH_RETRY_AFTER:
            return failed[1]  # it just failed: answer now (EIO) instead of waiting out the bound
        event = self._arrived.setdefault(sha, trio.Event())
        self.want(sha, node.memory_id)
        try:
            await event.wait()
        except trio.Cancelled:
            # The reader's bound ran out (a store that never answers): the kernel's
            # retry of the same read gets EIO at once instead of a second full wait.
            self._failed[sha] = (time.monotonic(), "the last download did not finish in time")
            raise
        failed = self._failed.get(sha)
        return None if failed is None else failed[1]

    def want(self, sha: str, memory_id: str | None) -> None:
        """Fetch `sha` soon, without waiting for it."""
        if memory_id is not None:
            self._missing[sha] = memory_id
        try:
            self._urgent_send.send_nowait((sha, memory_id or ""))
        except trio.WouldBlock:
            pass  # the background download or the next pass brings it anyway

    async def fetch(self, memories: list[RemoteMemory]) -> None:
        """Bring the contents of `memories` into the object store before a pass lands them."""
        needed = [m for m in memories if not self.state.objects.has(m.content_sha256)]
        if not needed:
            return
        async with trio.open_nursery() as nursery:
            for memory in needed:
                nursery.start_soon(self._fetch_one, memory.id, memory.content_sha256)

    def store(self, full: FullMemory) -> None:
        """Keep content the caller already has (a retrieve after a lost race)."""
        data = self._usable(full)
        if data is not None:
            self.state.objects.put(data, full.memory.content_sha256)
            self._arrive(full.memory.content_sha256)

    async def fetch_all_missing(self) -> None:
        """Stream every missing content in (after start-up), full-view pages first."""
        groups: Counter[str] = Counter()
        for n in self.state.walk_files():
            if (
                n.sha is not None
                and n.memory_id is not None
                and n.data is None
                and not self.state.objects.has(n.sha)
                and n.sha not in self.state.objects.evicted
            ):  # on demand only
                self._missing[n.sha] = n.memory_id
                path = n.store_path()
                groups[path[: path.index("/", 1) + 1] if path.count("/") > 1 else ""] += 1
        if not self._missing:
            return
        t0 = time.monotonic()
        count = len(self._missing)
        if count > 64:
            # Full-view pages beat single retrieves; several top-level directories
            # stream side by side, since one cursor is sequential.
            prefixes = sorted(p for p, k in groups.items() if p and k >= PAGE)
            streams: list[str | None] = list(prefixes) if len(prefixes) > 1 else [None]
            limit = trio.CapacityLimiter(4)
            async with trio.open_nursery() as nursery:
                for prefix in streams:
                    nursery.start_soon(self._stream_contents, prefix, limit)
        async with trio.open_nursery() as nursery:
            for sha, memory_id in list(self._missing.items()):
                nursery.start_soon(self._fetch_one, memory_id, sha)
        log.info(
            "downloaded memory contents memory_store_id=%s memories=%d ms=%d",
            self.store_id,
            count,
            int((time.monotonic() - t0) * 1000),
        )

    # -- internals ----------------------------------------------------------------------
    async def _fetch_one(self, memory_id: str, sha: str) -> FullMemory | None:
        async with self.limit:
            if self.state.objects.has(sha):
                self._arrive(sha)
                return None
            try:
                full = await self.client.retrieve_memory(self.store_id, memory_id)
            except NotFound:
                # deleted since the listing; the next pass removes it
                self._give_up(sha, "the memory was deleted in the store")
                return None
            except StoreError as e:
                self._fetch_failed.warning((self.store_id, memory_id), self.store_id, memory_id, e)
                self._give_up(sha, f"the download failed: {e}")
                return None
            try:
                self.store(full)
            except OSError as e:  # the cache disk: readers get EIO, a later pass retries
                self._cannot_keep(e)
                self._give_up(sha, f"the cache directory cannot keep it: {e.strerror or e}")
                return None
            if not self.state.objects.has(sha):
                self._give_up(sha, self._why_unusable(full, sha))
            return full

    def _cannot_keep(self, e: OSError) -> None:
        log.warning(
            "cannot keep memory contents in the cache directory memory_store_id=%s error=%s",
            self.store_id,
            e.strerror or e,
        )

    def _usable(self, full: FullMemory) -> bytes | None:
        """The content as it may be kept under its sha: UTF-8, and matching the sha."""
        memory = full.memory
        try:
            data = full.content_bytes()
        except InvalidContent:
            self._not_utf8.warning((self.store_id, memory.id), self.store_id, memory.path)
            return None
        if sha256_hex(data) != memory.content_sha256:
            self._sha_mismatch.warning((self.store_id, memory.id), self.store_id, memory.path)
            return None
        return data

    @staticmethod
    def _why_unusable(full: FullMemory, sha: str) -> str:
        if not full.is_utf8:
            return "the server sent content that is not valid UTF-8"
        if full.memory.content_sha256 != sha:
            return "the memory changed in the store since the listing"
        return "the server's content does not match its sha"

    def _give_up(self, sha: str, why: str) -> None:
        """Wake the readers waiting for `sha` now; they answer EIO, told `why`."""
        self._failed[sha] = (time.monotonic(), why)
        event = self._arrived.pop(sha, None)
        if event is not None:
            event.set()

    def _arrive(self, sha: str) -> None:
        self._failed.pop(sha, None)
        self._missing.pop(sha, None)
        event = self._arrived.pop(sha, None)
        if event is not None:
            event.set()

    async def _urgent_fetcher(self) -> None:
        async with trio.open_nursery() as nursery:
            async for sha, memory_id in self._urgent_recv:
                if memory_id and not self.state.objects.has(sha):
                    nursery.start_soon(self._fetch_one, memory_id, sha)
                elif self.state.objects.has(sha):
                    self._arrive(sha)

    async def _stream_contents(self, prefix: str | None, limit: trio.CapacityLimiter) -> None:
        async with limit:
            batch: list[FullMemory] = []
            try:
                async for item in self.client.iter_memories(
                    self.store_id, view="full", path_prefix=prefix
                ):
                    if isinstance(item, FullMemory) and item.memory.content_sha256 in self._missing:
                        batch.append(item)
                    if len(batch) >= PAGE:
                        await self._store_batch(batch)
                        batch = []
                await self._store_batch(batch)
            except StoreError as e:
                log.warning(
                    "failed to download memory contents memory_store_id=%s error=%s",
                    self.store_id,
                    e,
                )
            except OSError as e:  # the cache disk is full: what is missing is read on demand
                self._cannot_keep(e)

    async def _store_batch(self, batch: list[FullMemory]) -> None:
        """Write a page of contents from a worker thread: creating thousands of object
        files on the event loop delayed every FUSE request behind them (a cold mount of
        10,000 memories spent ~1 s of loop time in open())."""
        ready: list[tuple[bytes, str]] = []
        for full in batch:
            data = self._usable(full)
            if data is not None:
                ready.append((data, full.memory.content_sha256))
        objects = self.state.objects
        await trio.to_thread.run_sync(objects.write_files, [(sha, d) for d, sha in ready])
        for data, sha in ready:
            objects.put(data, sha)  # already on disk: only remembered
            self._arrive(sha)
