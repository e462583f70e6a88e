"""The wire format of the Memory Stores API: its objects, their parsing, its errors.

`StoreClient` (memfs/store/client.py) makes the calls and `Transport`
(memfs/store/transport.py) sends them; this module turns answers into
typed objects (`StoreInfo`, `RemoteMemory`, `FullMemory`, `MemoryVersion`) and error
answers into `memfs.errors` (`error_from_response`). A malformed answer is `_Malformed`
here and a `StoreError` naming the call in the client.
"""

from __future__ import annotations

import email.utils
import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeAlias

import httpx

from memfs.errors import (
    Conflict,
    InvalidContent,
    NotFound,
    PathConflict,
    PreconditionFailed,
    Rejected,
    StoreAuthError,
    StoreError,
    StoreUnavailable,
)
from memfs.paths import MAX_CONTENT_BYTES, MAX_PATH_BYTES, RemoteMemory, is_sha256_hex

# --------------------------------------------------------------------------- data


@dataclass(frozen=True)
class StoreInfo:
    id: str
    name: str
    description: str
    metadata: dict[str, str] = field(hash=False)
    created_at: str
    updated_at: str
    archived_at: str | None

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "name": self.name,
            "description": self.description,
            "metadata": dict(self.metadata),
            "created_at": self.created_at,
            "updated_at": self.updated_at,
            "archived_at": self.archived_at,
        }


@dataclass(frozen=True, slots=True)
class MemoryPrefix:
    """A directory roll-up from a `depth=1` listing; `path` ends with '/'."""

    path: str


@dataclass(frozen=True, slots=True)
class FullMemory:
    """A memory with its content. `content` may hold lone surrogates: use `content_bytes`."""

    memory: RemoteMemory
    content: str

    @property
    def is_utf8(self) -> bool:
        try:
            self.content.encode("utf-8")
        except UnicodeEncodeError:
            return False
        return True

    def content_bytes(self) -> bytes:
        """The content as UTF-8; `InvalidContent` if the server sent unencodable text."""
        try:
            return self.content.encode("utf-8")
        except UnicodeEncodeError:
            raise InvalidContent(
                f"memory {self.memory.id} at {self.memory.path!r} has content that is "
                "not valid UTF-8 (lone surrogates from the server)"
            ) from None


MemoryItem: TypeAlias = RemoteMemory | MemoryPrefix | FullMemory


@dataclass(frozen=True, slots=True)
class MemoryPage:
    items: list[MemoryItem]
    next_page: str | None


@dataclass(frozen=True)
class MemoryVersion:
    """One immutable version. path/content/sha/size are None when redacted or deleted."""

    id: str
    memory_id: str
    memory_store_id: str
    operation: str
    path: str | None
    content: str | None
    content_sha256: str | None
    content_size_bytes: int | None
    created_at: str
    created_by: dict[str, Any] = field(hash=False)
    redacted_at: str | None
    redacted_by: dict[str, Any] | None = field(hash=False)


@dataclass(frozen=True)
class WatchAnswer:
    """memfs serve's watch answer: the store's newest version id (None: it has none) and,
    when the head moved past the `after` asked with, the versions after it, newest first,
    as (id, created_at) (None: the server named none, docs/server.md)."""

    head: str | None
    newer: tuple[tuple[str, str], ...] | None = None
    # Of `newer`, the deletes: (version id, memory id). A delete's answer names no
    # version, so a mount knows its own deletes' echoes by the memory.
    deletes: tuple[tuple[str, str], ...] = ()


# --------------------------------------------------------------------------- parsing


class _Malformed(Exception):
    pass


def _str(obj: Mapping[str, Any], key: str, default: str | None = None) -> str:
    value = obj.get(key, default)
    if not isinstance(value, str):
        raise _Malformed(f"field {key!r} is missing or not a string")
    return value


def _opt_str(obj: Mapping[str, Any], key: str) -> str | None:
    value = obj.get(key)
    if value is not None and not isinstance(value, str):
        raise _Malformed(f"field {key!r} is not a string")
    return value


def _int(obj: Mapping[str, Any], key: str) -> int:
    value = obj.get(key)
    if isinstance(value, bool) or not isinstance(value, int):
        raise _Malformed(f"field {key!r} is missing or not an integer")
    return value


def _obj(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _Malformed(f"{what} is not a JSON object")
    return value


def _parse_store(data: Any) -> StoreInfo:
    obj = _obj(data, "memory store")
    metadata = obj.get("metadata") or {}
    if not isinstance(metadata, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()
    ):
        raise _Malformed("field 'metadata' is not a map of strings")
    return StoreInfo(
        id=_str(obj, "id"),
        name=_str(obj, "name"),
        description=_opt_str(obj, "description") or "",
        metadata=dict(metadata),
        created_at=_str(obj, "created_at", ""),
        updated_at=_str(obj, "updated_at", ""),
        archived_at=_opt_str(obj, "archived_at"),
    )


def _sha(obj: Mapping[str, Any], key: str) -> str:
    """A content sha exactly as the API defines it: it names files in the local cache,
    so anything else (a path, `..`) from a hostile server must never get through."""
    value = _str(obj, key)
    if not is_sha256_hex(value):
        raise _Malformed(f"{key} is not 64 lowercase hex characters")
    return value


def _size(obj: Mapping[str, Any], key: str) -> int:
    """A content size within the API's limit: the size is shown by `stat` before the
    content arrives, and no content is ever larger (a size of 2^63 or -5 was EIO)."""
    value = _int(obj, key)
    if not 0 <= value <= MAX_CONTENT_BYTES:
        raise _Malformed(f"{key} is outside 0..{MAX_CONTENT_BYTES}")
    return value


def _id(obj: Mapping[str, Any], key: str) -> str:
    """An id memfs sends back in URLs: a lone surrogate could not be (the fetch crashed)."""
    value = _str(obj, key)
    if value in ("", ".", "..") or not _sendable(value):
        raise _Malformed(f"field {key!r} is not a usable id")
    return value


# The most JSON one memory can take on the wire: every byte of its content and path
# escaped as `\uXXXX` (6 characters), plus its other fields. A longer answer is not a
# memory the API can hold, so the client stops reading there.
MAX_ITEM_JSON = 6 * MAX_PATH_BYTES + 4096
MAX_MEMORY_JSON = 6 * MAX_CONTENT_BYTES + MAX_ITEM_JSON
# The API's page sizes: at most 100 items a page, 20 with the full view.
MAX_PAGE = 100
MAX_FULL_PAGE = 20
# The most any answer may take: a full page of memories at the API's limits. A single
# memory, and a page of the basic view, are bounded tighter where they are asked for.
MAX_ANSWER_BYTES = MAX_FULL_PAGE * MAX_MEMORY_JSON + MAX_ITEM_JSON


def _parse_memory(obj: Mapping[str, Any]) -> RemoteMemory:
    return RemoteMemory(
        id=_id(obj, "id"),
        path=_str(obj, "path"),
        content_sha256=_sha(obj, "content_sha256"),
        content_size_bytes=_size(obj, "content_size_bytes"),
        memory_version_id=_str(obj, "memory_version_id", ""),
        created_at=_str(obj, "created_at", ""),
        updated_at=_str(obj, "updated_at", ""),
    )


def _parse_full(obj: Mapping[str, Any]) -> FullMemory:
    content = obj.get("content")
    if not isinstance(content, str):
        raise _Malformed("field 'content' is missing in a full view")
    if len(content) > MAX_CONTENT_BYTES or (
        len(content.encode("utf-8", "surrogatepass")) > MAX_CONTENT_BYTES
    ):
        raise _Malformed(f"its content is over the API's limit of {MAX_CONTENT_BYTES} bytes")
    return FullMemory(_parse_memory(obj), content)


def _parse_version(data: Any) -> MemoryVersion:
    obj = _obj(data, "memory version")
    created_by = obj.get("created_by") or {}
    redacted_by = obj.get("redacted_by")
    if not isinstance(created_by, dict) or not (
        redacted_by is None or isinstance(redacted_by, dict)
    ):
        raise _Malformed("an actor is not a JSON object")
    return MemoryVersion(
        id=_id(obj, "id"),
        memory_id=_id(obj, "memory_id"),
        memory_store_id=_str(obj, "memory_store_id", ""),
        operation=_str(obj, "operation"),
        path=_opt_str(obj, "path"),
        content=_opt_str(obj, "content"),
        content_sha256=None if obj.get("content_sha256") is None else _sha(obj, "content_sha256"),
        content_size_bytes=(
            None if obj.get("content_size_bytes") is None else _size(obj, "content_size_bytes")
        ),
        created_at=_str(obj, "created_at", ""),
        created_by=created_by,
        redacted_at=_opt_str(obj, "redacted_at"),
        redacted_by=redacted_by,
    )


def _parse_head(data: Any) -> WatchAnswer:
    """The watch's answer. Its head goes back to the server as `after`, so it must be
    sendable (not a lone surrogate); `newer`, if any, must be a list of versions whose
    first is the head, or it is not used."""
    obj = _obj(data, "watch answer")
    head = obj.get("head")
    if head is not None and (not isinstance(head, str) or not _sendable(head)):
        raise _Malformed("head is not a usable version id")
    raw = obj.get("newer")
    newer: tuple[tuple[str, str], ...] | None = None
    if isinstance(raw, list) and raw:
        items = [(v.get("id"), v.get("created_at")) for v in raw if isinstance(v, dict)]
        if len(items) == len(raw) and all(
            isinstance(i, str) and isinstance(at, str) for i, at in items
        ):
            newer = tuple((str(i), str(at)) for i, at in items)
        if newer is not None and newer[0][0] != head:
            newer = None
    if newer is None or not isinstance(raw, list):
        return WatchAnswer(head)
    deletes = tuple(
        (str(v["id"]), str(v["memory_id"]))
        for v in raw
        if v.get("operation") == "deleted" and isinstance(v.get("memory_id"), str)
    )
    return WatchAnswer(head, newer, deletes)


def _page(data: Any) -> tuple[list[Any], str | None]:
    obj = _obj(data, "list response")
    items = obj.get("data")
    if not isinstance(items, list):
        raise _Malformed("field 'data' is missing or not a list")
    cursor = _opt_str(obj, "next_page") or None
    if cursor is not None and not _sendable(cursor):
        raise _Malformed("field 'next_page' cannot be sent back in a URL")
    return items, cursor


def _sendable(text: str) -> bool:
    """Text that can go back to the server in a query string (UTF-8: a lone surrogate
    from a JSON escape cannot)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


# --------------------------------------------------------------------------- errors


def parse_retry_after(headers: httpx.Headers) -> float | None:
    """Seconds from `retry-after-ms`, or `retry-after` (seconds or an HTTP date)."""
    ms = headers.get("retry-after-ms")
    if ms:
        try:
            return max(0.0, float(ms) / 1000.0)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def error_from_response(
    response: httpx.Response, *, scrub: Callable[[str], str] = str
) -> StoreError:
    """Map an error response (status + `error.type`) to the `memfs.errors` tree.

    Tolerates any body: non-JSON or oddly shaped errors are classified by status alone.
    """
    status = response.status_code
    error_type: str | None = None
    message: str | None = None
    request_id = response.headers.get("request-id")
    extra: dict[str, Any] = {}
    try:
        body = json.loads(response.content)
    except ValueError:
        body = None
    if isinstance(body, dict):
        rid = body.get("request_id")
        if isinstance(rid, str) and rid:
            request_id = request_id or rid
        err = body.get("error")
        if isinstance(err, dict):
            extra = err
            if isinstance(err.get("type"), str):
                error_type = err["type"]
            if isinstance(err.get("message"), str):
                message = scrub(err["message"])[:500]
    if message is None:
        message = f"HTTP {status}" + ("" if isinstance(body, dict) else " (no JSON error body)")
    kwargs: dict[str, Any] = {
        "status": status,
        "error_type": error_type,
        "request_id": request_id,
    }
    error: StoreError
    if status in (401, 403):
        error = StoreAuthError(f"the store refused the credentials: {message}", **kwargs)
    elif status == 404:
        error = NotFound(message, **kwargs)
    elif status == 412 or (status == 409 and error_type == "memory_precondition_failed_error"):
        error = PreconditionFailed(message, **kwargs)
    elif status == 409 and error_type == "memory_path_conflict_error":
        conflict = PathConflict(message, **kwargs)
        mid, cpath = extra.get("conflicting_memory_id"), extra.get("conflicting_path")
        conflict.conflicting_memory_id = mid if isinstance(mid, str) else ""
        conflict.conflicting_path = cpath if isinstance(cpath, str) else ""
        error = conflict
    elif status == 409:
        error = Conflict(message, **kwargs)
    elif status in (400, 413, 422):
        error = Rejected(message, **kwargs)
    elif status in (408, 425, 429) or status >= 500:
        unavailable = StoreUnavailable(message, **kwargs)
        unavailable.retry_after = parse_retry_after(response.headers)
        error = unavailable
    else:
        error = StoreError(message, **kwargs)
    return error
