"""The one HTTP client memfs uses to talk to a Memory Store (hosted API or `memfs serve`).

Configuration and the `httpx` client (`ClientConfig`, `make_http_client`) are in
`memfs.store.connection`, sending a request (retries, back-off, error mapping) in
`memfs.store.transport`; this module is the calls:

- `StoreClient`: typed calls over an injected `httpx.AsyncClient`. Every failure is a
  `memfs.errors` class (`StoreUnavailable` is the only transient one, retried by the
  transport). Lost answers are settled here where the API allows it: a retried create
  that meets its own memory (same path, same sha) succeeds, and a retried delete that
  meets a 404 counts as deleted.

Content from the wire is kept as the `str` JSON decoding gives. JSON can carry lone
surrogates (`"\\ud800"`), which no UTF-8 byte sequence represents; such content is
surfaced, never repaired: `FullMemory.content_bytes()` raises `InvalidContent` for it,
and `FullMemory.is_utf8` lets a caller check first. Never call `content.encode()`
yourself without handling `UnicodeEncodeError`.
"""

from __future__ import annotations

import logging
import urllib.parse
from collections.abc import AsyncIterator, Mapping
from typing import Any, Literal, TypeAlias, TypedDict, Unpack

import httpx

from memfs import metrics
from memfs.errors import NotFound, PathConflict, Rejected, StoreAuthError, StoreError
from memfs.logs import Repeated
from memfs.paths import BETA_MANAGED_AGENTS, MAX_MEMORIES_PER_STORE, RemoteMemory, sha256_hex
from memfs.store.connection import BACKGROUND_FIRST_BYTE
from memfs.store.transport import DEFAULT_RETRY, RETRY, RetryPolicy, Transport
from memfs.store.wire import (
    MAX_FULL_PAGE,
    MAX_ITEM_JSON,
    MAX_MEMORY_JSON,
    MAX_PAGE,
    _Malformed,
    _obj,
    _page,
    _parse_full,
    _parse_head,
    _parse_memory,
    _parse_store,
    _parse_version,
    _str,
)
from memfs.store.wire import (
    FullMemory as FullMemory,
)
from memfs.store.wire import (
    MemoryItem as MemoryItem,
)
from memfs.store.wire import (
    MemoryPage as MemoryPage,
)
from memfs.store.wire import (
    MemoryPrefix as MemoryPrefix,
)
from memfs.store.wire import (
    MemoryVersion as MemoryVersion,
)
from memfs.store.wire import (
    StoreInfo as StoreInfo,
)
from memfs.store.wire import (
    WatchAnswer as WatchAnswer,
)

log = logging.getLogger("memfs.client")

View: TypeAlias = Literal["basic", "full"]
# The most memories one listing may yield: a full store, and a page more for what
# creates and renames made while it was paged through.
MAX_LISTED = MAX_MEMORIES_PER_STORE + MAX_PAGE


class VersionFilters(TypedDict, total=False):
    """The filters of `GET /v1/memory_stores/{id}/memory_versions` (None: not filtered)."""

    memory_id: str | None
    operation: str | None
    session_id: str | None
    api_key_id: str | None
    created_at_gte: str | None
    created_at_lte: str | None
    view: View


def _seg(value: str, what: str) -> str:
    """One URL path segment from an opaque id; never lets an id escape its route."""
    if not isinstance(value, str) or value in ("", ".", ".."):
        raise Rejected(f"invalid {what} {value!r}")
    try:
        return urllib.parse.quote(value, safe="")
    except UnicodeEncodeError:
        raise Rejected(f"invalid {what} {value!r}: not UTF-8") from None


class StoreClient:
    """Typed calls of the Memory Stores API over an injected `httpx.AsyncClient`.

    The http client supplies the base URL and the credential (see `make_http_client`);
    `Transport` sends each call with its retries. Every method raises only `StoreError`
    subclasses (plus `ValueError` for a programming error).
    """

    def __init__(
        self,
        http: httpx.AsyncClient,
        *,
        retry: RetryPolicy = DEFAULT_RETRY,
        first_byte_timeout: float = BACKGROUND_FIRST_BYTE,
    ) -> None:
        self._transport = Transport(http, retry=retry, first_byte_timeout=first_byte_timeout)
        # A listing repeats every pass: its bad records are logged once per cause.
        self._malformed = Repeated(
            log,
            "the server listed a malformed memory; skipping it "
            "memory_store_id=%s memory_id=%s error=%s",
        )
        self._duplicate = Repeated(
            log,
            "the server listed a memory id twice; skipping all but the first "
            "memory_store_id=%s memory_id=%s path=%s",
        )

    # ---------------------------------------------------------------- sessions

    async def retrieve_session(self, session_id: str) -> dict[str, Any]:
        """The session object: `memfs session --session-id` mounts its resources."""
        data = await self._transport.request(
            "GET",
            f"/v1/sessions/{_seg(session_id, 'session id')}",
            op="retrieve_session",
            beta=BETA_MANAGED_AGENTS,
        )
        if not isinstance(data, dict):
            raise StoreError(
                "retrieve_session: malformed answer from the server: not a JSON object"
            )
        return data

    # ---------------------------------------------------------------- stores

    async def retrieve_store(self, store_id: str) -> StoreInfo:
        data = await self._transport.request(
            "GET",
            f"/v1/memory_stores/{_seg(store_id, 'store id')}",
            op="retrieve_store",
            store_id=store_id,
        )
        return self._transport.parse("retrieve_store", _parse_store, data)

    async def may_write(self, store_id: str) -> bool:
        """Whether the credential may change this store, asked without changing it.

        The API has no call that names a credential's access, so this asks the store's
        own check: a create with neither path nor content, which no server accepts. A
        read-only credential (a `memfs serve` token scoped `:ro`) is refused before the
        body is read, 403 `permission_error`; a writable one gets 400 for the body.
        """
        try:
            await self._transport.request(
                "POST",
                f"/v1/memory_stores/{_seg(store_id, 'store id')}/memories",
                op="probe_access",
                store_id=store_id,
                body={},
            )
        except StoreAuthError as e:
            if e.status == 403 and e.error_type == "permission_error":
                return False
            raise
        except Rejected:
            return True
        return True

    async def list_stores(self, *, include_archived: bool = False) -> list[StoreInfo]:
        """Every store (all pages), newest first."""
        stores: list[StoreInfo] = []
        page: str | None = None
        while True:
            data = await self._transport.request(
                "GET",
                "/v1/memory_stores",
                op="list_stores",
                params={
                    "limit": MAX_PAGE,
                    "page": page,
                    "include_archived": "true" if include_archived else None,
                },
            )
            items, page = self._transport.parse("list_stores", _page, data)
            stores.extend(
                self._transport.parse("list_stores", _parse_store, item) for item in items
            )
            if page is None:
                return stores

    async def create_store(
        self, name: str, description: str = "", metadata: Mapping[str, str] | None = None
    ) -> StoreInfo:
        body: dict[str, Any] = {"name": name}
        if description:
            body["description"] = description
        if metadata:
            body["metadata"] = dict(metadata)
        data = await self._transport.request(
            "POST", "/v1/memory_stores", op="create_store", body=body
        )
        return self._transport.parse("create_store", _parse_store, data)

    async def update_store(
        self,
        store_id: str,
        *,
        name: str | None = None,
        description: str | None = None,
        metadata: Mapping[str, str | None] | None = None,
    ) -> StoreInfo:
        """Patch a store; in `metadata` a None value deletes that key."""
        body: dict[str, Any] = {}
        if name is not None:
            body["name"] = name
        if description is not None:
            body["description"] = description
        if metadata is not None:
            body["metadata"] = dict(metadata)
        data = await self._transport.request(
            "POST",
            f"/v1/memory_stores/{_seg(store_id, 'store id')}",
            op="update_store",
            store_id=store_id,
            body=body,
        )
        return self._transport.parse("update_store", _parse_store, data)

    async def archive_store(self, store_id: str) -> StoreInfo:
        data = await self._transport.request(
            "POST",
            f"/v1/memory_stores/{_seg(store_id, 'store id')}/archive",
            op="archive_store",
            store_id=store_id,
        )
        return self._transport.parse("archive_store", _parse_store, data)

    async def delete_store(self, store_id: str) -> None:
        """Delete a store and everything in it; a retry that meets 404 counts as done."""

        async def settle(error: StoreError) -> Any:
            return {} if isinstance(error, NotFound) else None

        await self._transport.request(
            "DELETE",
            f"/v1/memory_stores/{_seg(store_id, 'store id')}",
            op="delete_store",
            store_id=store_id,
            settle=settle,
        )

    # ---------------------------------------------------------------- memories

    def _memories_url(self, store_id: str, memory_id: str | None = None) -> str:
        url = f"/v1/memory_stores/{_seg(store_id, 'store id')}/memories"
        if memory_id is not None:
            url += "/" + _seg(memory_id, "memory id")
        return url

    async def list_memories_page(
        self,
        store_id: str,
        *,
        page: str | None = None,
        view: View = "basic",
        path_prefix: str | None = None,
        depth: int | None = None,
        limit: int = MAX_PAGE,
    ) -> MemoryPage:
        """One page of a listing. `limit` is capped at 100 (20 with view="full")."""
        limit = max(1, min(limit, MAX_FULL_PAGE if view == "full" else MAX_PAGE))
        data = await self._transport.request(
            "GET",
            self._memories_url(store_id),
            op="list_memories",
            store_id=store_id,
            memory_path=path_prefix,
            params={
                "view": view,
                "limit": limit,
                "page": page,
                "path_prefix": path_prefix,
                "depth": depth,
            },
            max_body=limit * (MAX_MEMORY_JSON if view == "full" else MAX_ITEM_JSON) + 4096,
        )
        items, next_page = self._transport.parse("list_memories", _page, data)
        if len(items) > limit:
            raise StoreError(
                f"list_memories: the store sent {len(items)} items for a page of at most "
                f"{limit}; refused"
            )
        out: list[MemoryItem] = []
        for raw in items:
            if not isinstance(raw, dict):
                # One bad record must not stop a whole store from syncing.
                self._malformed.warning(
                    (store_id, None), store_id, None, "a list item is not a JSON object"
                )
                continue
            item: dict[str, Any] = raw
            kind = item.get("type", "memory")
            if kind == "memory_prefix":
                if depth == 1:
                    out.append(
                        MemoryPrefix(
                            self._transport.parse("list_memories", lambda o: _str(o, "path"), item)
                        )
                    )
            elif kind == "memory":
                parser = _parse_full if view == "full" else _parse_memory
                try:
                    out.append(parser(item))
                except _Malformed as e:
                    memory_id = str(item.get("id"))[:80]
                    self._malformed.warning((store_id, memory_id), store_id, memory_id, e)
            else:
                log.debug("skipping unknown list item type=%s memory_store_id=%s", kind, store_id)
        return MemoryPage(out, next_page)

    async def iter_memories(
        self,
        store_id: str,
        *,
        view: View = "basic",
        path_prefix: str | None = None,
        depth: int | None = None,
        page_size: int = MAX_PAGE,
    ) -> AsyncIterator[MemoryItem]:
        """Stream a listing page by page: `RemoteMemory` (basic), `FullMemory` (full;
        page size capped at 20), and `MemoryPrefix` roll-ups only when depth=1.
        The server may list the reserved marker path; callers skip it. A memory id
        listed again is skipped: two files cannot be one memory."""
        page: str | None = None
        seen: set[str] = set()
        listed = 0
        while True:
            result = await self.list_memories_page(
                store_id,
                page=page,
                view=view,
                path_prefix=path_prefix,
                depth=depth,
                limit=page_size,
            )
            listed += len(result.items)
            if listed > MAX_LISTED:  # each held by the caller: bound them
                raise StoreError(
                    f"list_memories: the store listed more than {MAX_LISTED} memories "
                    f"(a store holds at most {MAX_MEMORIES_PER_STORE}); refused"
                )
            for item in result.items:
                memory = item.memory if isinstance(item, FullMemory) else item
                if isinstance(memory, RemoteMemory):
                    if memory.id in seen:
                        self._duplicate.warning(
                            (store_id, memory.id), store_id, memory.id, memory.path
                        )
                        continue
                    seen.add(memory.id)
                yield item
            if result.next_page is None:
                return
            page = result.next_page

    async def list_memories(self, store_id: str) -> list[RemoteMemory]:
        """The whole store, basic view, 100 per page (the cheap diffing listing)."""
        return [
            item async for item in self.iter_memories(store_id) if isinstance(item, RemoteMemory)
        ]

    async def retrieve_memory(self, store_id: str, memory_id: str) -> FullMemory:
        data = await self._transport.request(
            "GET",
            self._memories_url(store_id, memory_id),
            op="retrieve_memory",
            store_id=store_id,
            params={"view": "full"},
            max_body=MAX_MEMORY_JSON,
        )
        return self._transport.parse(
            "retrieve_memory", lambda v: _parse_full(_obj(v, "memory")), data
        )

    async def _retrieve_basic(self, store_id: str, memory_id: str) -> dict[str, Any]:
        data = await self._transport.request(
            "GET",
            self._memories_url(store_id, memory_id),
            op="retrieve_memory",
            store_id=store_id,
            params={"view": "basic"},
        )
        return self._transport.parse("retrieve_memory", lambda v: _obj(v, "memory"), data)

    async def create_memory(self, store_id: str, path: str, content: str) -> RemoteMemory:
        """Create a memory; never overwrites (`PathConflict` if the path is taken).

        If an attempt's answer was lost and the retry meets a path conflict on the same
        path with the same sha, the first attempt succeeded: that memory is returned.
        """
        try:
            sha = sha256_hex(content.encode("utf-8"))
        except UnicodeEncodeError:
            raise Rejected("create_memory: content is not valid UTF-8 (lone surrogates)") from None

        async def settle(error: StoreError) -> Any:
            if not isinstance(error, PathConflict) or error.conflicting_path != path:
                return None
            if not error.conflicting_memory_id:
                return RETRY  # the docs say: retry when the id is unknown
            try:
                found = await self._retrieve_basic(store_id, error.conflicting_memory_id)
            except NotFound:
                return RETRY  # deleted meanwhile: the path may be free now
            if found.get("path") == path and found.get("content_sha256") == sha:
                log.info(
                    "create settled by sha after a lost answer memory_store_id=%s "
                    "path=%s memory_id=%s",
                    store_id,
                    path,
                    error.conflicting_memory_id,
                )
                return found
            return None

        with metrics.push_timer("create"):
            data = await self._transport.request(
                "POST",
                self._memories_url(store_id),
                op="create_memory",
                store_id=store_id,
                memory_path=path,
                params={"view": "basic"},
                body={"path": path, "content": content},
                settle=settle,
            )
        return self._transport.parse(
            "create_memory", lambda v: _parse_memory(_obj(v, "memory")), data
        )

    async def update_memory(
        self,
        store_id: str,
        memory_id: str,
        *,
        content: str | None = None,
        path: str | None = None,
        precondition_sha256: str | None = None,
    ) -> RemoteMemory:
        """Change content and/or path (a rename keeps the id).

        With `precondition_sha256` the update applies only if the stored sha matches
        (`PreconditionFailed` otherwise). Retrying after a lost answer is safe: the
        server answers 200 when the stored state already equals the request.
        """
        if content is None and path is None:
            raise ValueError("update_memory needs content or path")
        body: dict[str, Any] = {}
        if content is not None:
            body["content"] = content
        if path is not None:
            body["path"] = path
        if precondition_sha256 is not None:
            body["precondition"] = {"type": "content_sha256", "content_sha256": precondition_sha256}
        with metrics.push_timer("update"):
            data = await self._transport.request(
                "POST",
                self._memories_url(store_id, memory_id),
                op="update_memory",
                store_id=store_id,
                memory_path=path,
                params={"view": "basic"},
                body=body,
            )
        return self._transport.parse(
            "update_memory", lambda v: _parse_memory(_obj(v, "memory")), data
        )

    async def delete_memory(
        self, store_id: str, memory_id: str, *, expected_sha256: str | None = None
    ) -> None:
        """Delete a memory (only if its sha is `expected_sha256`, when given).

        A 404 on the first attempt is `NotFound`; on a retry it means the lost first
        attempt deleted it, so it counts as success.
        """

        async def settle(error: StoreError) -> Any:
            return {} if isinstance(error, NotFound) else None

        with metrics.push_timer("delete"):
            await self._transport.request(
                "DELETE",
                self._memories_url(store_id, memory_id),
                op="delete_memory",
                store_id=store_id,
                params={"expected_content_sha256": expected_sha256},
                settle=settle,
            )

    # ---------------------------------------------------------------- versions

    async def iter_versions(
        self, store_id: str, *, page_size: int = MAX_PAGE, **filters: Unpack[VersionFilters]
    ) -> AsyncIterator[MemoryVersion]:
        """Stream versions, newest first, page by page."""
        view = filters.get("view", "basic")
        limit = max(1, min(page_size, MAX_FULL_PAGE if view == "full" else MAX_PAGE))
        url = f"/v1/memory_stores/{_seg(store_id, 'store id')}/memory_versions"
        params: dict[str, Any] = {
            "memory_id": filters.get("memory_id"),
            "operation": filters.get("operation"),
            "session_id": filters.get("session_id"),
            "api_key_id": filters.get("api_key_id"),
            "created_at[gte]": filters.get("created_at_gte"),
            "created_at[lte]": filters.get("created_at_lte"),
            "view": view,
            "limit": limit,
        }
        page: str | None = None
        while True:
            data = await self._transport.request(
                "GET", url, op="list_versions", store_id=store_id, params={**params, "page": page}
            )
            items, page = self._transport.parse("list_versions", _page, data)
            for item in items:
                yield self._transport.parse("list_versions", _parse_version, item)
            if page is None:
                return

    async def list_versions(
        self, store_id: str, *, limit: int | None = None, **filters: Unpack[VersionFilters]
    ) -> list[MemoryVersion]:
        """Versions newest first; `limit` caps how many are returned (None: all)."""
        out: list[MemoryVersion] = []
        if limit is not None and limit <= 0:
            return out
        page_size = MAX_PAGE if limit is None else min(limit, MAX_PAGE)
        async for version in self.iter_versions(store_id, page_size=page_size, **filters):
            out.append(version)
            if limit is not None and len(out) >= limit:
                break
        return out

    async def watch_head(self, store_id: str) -> str | None:
        """The store's newest version id through memfs serve's watch, at once: where a
        watch starts, and whether the server has one (`NotFound`: it has not)."""
        return (await self._watch(store_id, {})).head

    async def watch(self, store_id: str, *, after: str | None, seconds: float) -> WatchAnswer:
        """memfs serve's watch (docs/server.md, "The watch"): the store's newest version
        id once it is not `after` (with the versions after `after` if the server names
        them), or `after` when `seconds` pass. One attempt: the caller falls back to
        probing on any error."""
        return await self._watch(store_id, {"after": after or "", "timeout": f"{seconds:g}"})

    async def _watch(self, store_id: str, params: dict[str, Any]) -> WatchAnswer:
        seconds = float(params.get("timeout", 0))
        data = await self._transport.long_poll(
            f"/v1/memory_stores/{_seg(store_id, 'store id')}/memfs/watch", params, seconds
        )
        return self._transport.parse("watch", _parse_head, data)

    async def retrieve_version(self, store_id: str, version_id: str) -> MemoryVersion:
        data = await self._transport.request(
            "GET",
            f"/v1/memory_stores/{_seg(store_id, 'store id')}/memory_versions/"
            f"{_seg(version_id, 'version id')}",
            op="retrieve_version",
            store_id=store_id,
            params={"view": "full"},
        )
        return self._transport.parse("retrieve_version", _parse_version, data)

    async def redact_version(self, store_id: str, version_id: str) -> MemoryVersion:
        data = await self._transport.request(
            "POST",
            f"/v1/memory_stores/{_seg(store_id, 'store id')}/memory_versions/"
            f"{_seg(version_id, 'version id')}/redact",
            op="redact_version",
            store_id=store_id,
            body={},
        )
        return self._transport.parse("redact_version", _parse_version, data)
