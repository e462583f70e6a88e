"""An in-memory fake of the memories endpoints, for `httpx.MockTransport`.

Just enough of the API for the sync engine: list (basic/full, paged), retrieve, create
(never overwrites; path conflicts carry the conflicting id), update (content and/or
path, the `content_sha256` precondition with the idempotency carve-out), delete (with
`expected_content_sha256`). Every request is recorded, and faults can be scripted:
answer with an error instead of applying, or apply and then lose the answer.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

import httpx

from memfs.paths import overlaps, sha256_hex

STORE = "memstore_unit"


@dataclass
class Fault:
    op: str  # list | retrieve | create | update | delete
    status: int | None = None  # answer with this error instead of applying
    error_type: str = "api_error"
    lose_answer: bool = False  # apply, then drop the connection before the answer
    times: int = 1
    path: str | None = None  # only requests about this memory path
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class Seen:
    op: str
    method: str
    memory_id: str | None
    params: dict[str, str]
    body: dict[str, Any] | None


class FakeStore:
    def __init__(self, store_id: str = STORE) -> None:
        self.store_id = store_id
        self.memories: dict[str, dict[str, Any]] = {}  # id -> {path, content}
        self.requests: list[Seen] = []
        self.faults: list[Fault] = []
        self._ids = itertools.count(1)
        self.versions_supported = True
        # Called with (op, memory_id, body) before a write is applied: lets a test race it.
        self.before_write: Callable[[str, str | None, dict[str, Any] | None], None] | None = None

    # -- direct (out-of-band) edits, as another client would make them --------------
    def add(self, path: str, content: str) -> str:
        mid = f"mem_{next(self._ids):04d}"
        self.memories[mid] = {"path": path, "content": content}
        return mid

    def edit(self, mid: str, *, content: str | None = None, path: str | None = None) -> None:
        if content is not None:
            self.memories[mid]["content"] = content
        if path is not None:
            self.memories[mid]["path"] = path

    def remove(self, mid: str) -> None:
        del self.memories[mid]

    def by_path(self) -> dict[str, str]:
        return {m["path"]: m["content"] for m in self.memories.values()}

    def id_of(self, path: str) -> str:
        return next(mid for mid, m in self.memories.items() if m["path"] == path)

    # -- scripting ------------------------------------------------------------------
    def fail(
        self,
        op: str,
        status: int,
        error_type: str = "api_error",
        *,
        times: int = 1,
        path: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        self.faults.append(
            Fault(op, status, error_type, times=times, path=path, headers=headers or {})
        )

    def lose_answer(self, op: str, *, times: int = 1, path: str | None = None) -> None:
        self.faults.append(Fault(op, lose_answer=True, times=times, path=path))

    def ops(self, *names: str) -> list[Seen]:
        return [s for s in self.requests if not names or s.op in names]

    def writes(self) -> list[Seen]:
        return self.ops("create", "update", "delete")

    # -- the handler ----------------------------------------------------------------
    def _json(self, mid: str, *, full: bool) -> dict[str, Any]:
        m = self.memories[mid]
        data = m["content"].encode("utf-8")
        return {
            "type": "memory",
            "id": mid,
            "memory_store_id": self.store_id,
            "path": m["path"],
            "content": m["content"] if full else None,
            "content_sha256": sha256_hex(data),
            "content_size_bytes": len(data),
            "memory_version_id": f"memver_{mid}",
            "created_at": "2026-01-01T00:00:00Z",
            "updated_at": "2026-01-01T00:00:00Z",
        }

    @staticmethod
    def _error(
        status: int, etype: str, message: str = "fake error", **extra: Any
    ) -> httpx.Response:
        return httpx.Response(
            status,
            json={
                "type": "error",
                "error": {"type": etype, "message": message, **extra},
                "request_id": "req_fake",
            },
        )

    def _path_taken(self, path: str, exclude: str | None = None) -> str | None:
        for mid, m in self.memories.items():
            if mid != exclude and overlaps(m["path"], path):
                return mid
        return None

    def head(self) -> str:
        """The newest version id: changes with every real change of the store's state."""
        state = sorted((mid, m["path"], m["content"]) for mid, m in self.memories.items())
        return "memver_" + sha256_hex(repr(state).encode())[:24]

    def handle(self, request: httpx.Request) -> httpx.Response:
        prefix = f"/v1/memory_stores/{self.store_id}/memories"
        url_path = request.url.path
        if url_path == f"/v1/memory_stores/{self.store_id}/memory_versions":
            self.requests.append(Seen("versions", "GET", None, dict(request.url.params), None))
            if not self.versions_supported:
                return self._error(404, "not_found_error", "no versions here")
            data = [
                {
                    "type": "memory_version",
                    "id": self.head(),
                    "memory_id": "mem_x",
                    "memory_store_id": self.store_id,
                    "operation": "modified",
                    "created_at": "2026-01-01T00:00:00Z",
                    "created_by": {},
                }
            ]
            return httpx.Response(
                200, json={"data": data if self.memories else [], "next_page": None}
            )
        if not url_path.startswith(prefix):
            return self._error(404, "not_found_error", "unknown store")
        rest = url_path[len(prefix) :].strip("/")
        mid = unquote(rest) if rest else None
        params = dict(request.url.params)
        body = json.loads(request.content) if request.content else None
        if request.method == "GET":
            op = "retrieve" if mid else "list"
        elif request.method == "POST":
            op = "update" if mid else "create"
        else:
            op = "delete"
        self.requests.append(Seen(op, request.method, mid, params, body))
        about = (body or {}).get("path") or (
            self.memories[mid]["path"] if mid and mid in self.memories else None
        )
        fault = next(
            (
                f
                for f in self.faults
                if f.op == op and f.times > 0 and (f.path is None or f.path == about)
            ),
            None,
        )
        if fault is not None:
            fault.times -= 1
            if fault.status is not None:
                response = self._error(fault.status, fault.error_type)
                response.headers.update(fault.headers)
                return response
        if op in ("create", "update", "delete") and self.before_write is not None:
            self.before_write(op, mid, body)
        response = self._apply(op, mid, params, body)
        if fault is not None and fault.lose_answer:
            raise httpx.ReadError("connection lost before the answer", request=request)
        return response

    def _apply(
        self, op: str, mid: str | None, params: dict[str, str], body: dict[str, Any] | None
    ) -> httpx.Response:
        if op == "list":
            full = params.get("view") == "full"
            limit = int(params.get("limit", "20"))
            start = int(params.get("page", "page_0")[5:])
            ids = sorted(self.memories, key=lambda i: self.memories[i]["path"])
            chunk = ids[start : start + limit]
            more = start + limit < len(ids)
            return httpx.Response(
                200,
                json={
                    "data": [self._json(i, full=full) for i in chunk],
                    "next_page": f"page_{start + limit}" if more else None,
                },
            )
        if op == "create":
            assert body is not None
            taken = self._path_taken(body["path"])
            if taken is not None:
                return self._error(
                    409,
                    "memory_path_conflict_error",
                    "path taken",
                    conflicting_memory_id=taken,
                    conflicting_path=self.memories[taken]["path"],
                )
            new = self.add(body["path"], body["content"])
            return httpx.Response(200, json=self._json(new, full=False))
        assert mid is not None
        if mid not in self.memories:
            return self._error(404, "not_found_error", "no such memory")
        m = self.memories[mid]
        current = sha256_hex(m["content"].encode("utf-8"))
        if op == "retrieve":
            return httpx.Response(200, json=self._json(mid, full=params.get("view") != "basic"))
        if op == "delete":
            expected = params.get("expected_content_sha256")
            if expected is not None and expected != current:
                return self._error(409, "memory_precondition_failed_error", "changed")
            del self.memories[mid]
            return httpx.Response(200, json={"id": mid, "type": "memory_deleted"})
        assert body is not None
        content = body.get("content", m["content"])
        path = body.get("path", m["path"])
        pre = body.get("precondition")
        if pre is not None and pre["content_sha256"] != current:
            if content == m["content"] and path == m["path"]:
                return httpx.Response(200, json=self._json(mid, full=False))
            return self._error(409, "memory_precondition_failed_error", "changed")
        taken = self._path_taken(path, exclude=mid)
        if taken is not None:
            return self._error(
                409,
                "memory_path_conflict_error",
                "path taken",
                conflicting_memory_id=taken,
                conflicting_path=self.memories[taken]["path"],
            )
        m["content"], m["path"] = content, path
        return httpx.Response(200, json=self._json(mid, full=False))
