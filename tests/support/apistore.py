"""The real store server in-process, for the engine's unit tests: `memfs serve`'s ASGI
app over a real `Storage` (SQLite in a temporary folder), reached through
`httpx.ASGITransport`. No rule of the API is written again here.

What a test adds in front of it: every request is recorded (`requests`, `ops`,
`writes`), faults can be scripted (answer with an error instead of applying, or apply
and then lose the answer), `before_write` runs just before a write reaches the server
(to race it), and the memories endpoint of versions can be switched off. Direct edits
(`add`, `edit`, `remove`) go through `Storage` itself, as another client's would.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import httpx

from memfs.server.app import create_app
from memfs.server.sqlite import Database

OTHER_CLIENT = ("api_actor", "apikey_other")  # who makes the direct edits


@dataclass
class Fault:
    op: str  # store | versions | list | retrieve | create | update | delete
    status: int | None = None  # answer with this error instead of applying
    error_type: str = "api_error"
    lose_answer: bool = False  # apply, then drop the connection before the answer
    times: int = 1
    path: str | None = None  # only requests about this memory path
    headers: dict[str, str] = field(default_factory=dict)
    message: str = "scripted error"


@dataclass
class Seen:
    op: str
    method: str
    memory_id: str | None
    params: dict[str, str]
    body: dict[str, Any] | None


class ApiStore:
    """One store on a real server app, with recording and fault scripting in front."""

    def __init__(self, folder: Path) -> None:
        self.db = Database.open(folder / "store.sqlite")
        self.store_id: str = self.db.create_store("unit", "", {})["id"]
        self._app = httpx.ASGITransport(create_app(self.db, threads=0))
        self.requests: list[Seen] = []
        self.faults: list[Fault] = []
        self.versions_supported = True
        # Called with (op, memory_id, body) before a write is applied: lets a test race it.
        self.before_write: Callable[[str, str | None, dict[str, Any] | None], None] | None = None

    def transport(self) -> httpx.AsyncBaseTransport:
        return _Front(self)

    def close(self) -> None:
        self.db.close()

    # -- direct (out-of-band) edits, as another client would make them --------------
    def add(self, path: str, content: str) -> str:
        memory = self.db.create_memory(self.store_id, path, content, OTHER_CLIENT, full=False)
        return str(memory["id"])

    def add_many(self, items: Iterable[tuple[str, str]]) -> None:
        """Seed in one transaction (a thousand memories in one commit, not a thousand)."""
        self.db.bulk_create_memories(self.store_id, items, OTHER_CLIENT)

    def edit(self, mid: str, *, content: str | None = None, path: str | None = None) -> None:
        self.db.update_memory(
            self.store_id,
            mid,
            content=content,
            path=path,
            precondition_sha=None,
            actor=OTHER_CLIENT,
            full=False,
        )

    def remove(self, mid: str) -> None:
        self.db.delete_memory(self.store_id, mid, expected_sha=None, actor=OTHER_CLIENT)

    @property
    def memories(self) -> dict[str, dict[str, str]]:
        """Memory id -> {"path", "content"}, as the store holds them now."""
        found: dict[str, dict[str, str]] = {}
        page = None
        while True:
            items, page = self.db.list_memories(
                self.store_id, path_prefix=None, depth=0, limit=100, page=page, full=True
            )
            for m in items:
                found[m["id"]] = {"path": m["path"], "content": m["content"]}
            if page is None:
                return found

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
        message: str = "scripted error",
    ) -> None:
        self.faults.append(
            Fault(
                op,
                status,
                error_type,
                times=times,
                path=path,
                headers=headers or {},
                message=message,
            )
        )

    def lose_answer(self, op: str, *, times: int = 1, path: str | None = None) -> None:
        self.faults.append(Fault(op, lose_answer=True, times=times, path=path))

    def ops(self, *names: str) -> list[Seen]:
        return [s for s in self.requests if not names or s.op in names]

    def writes(self) -> list[Seen]:
        return self.ops("create", "update", "delete")

    # -- in front of the server -----------------------------------------------------
    def _seen(self, request: httpx.Request) -> Seen:
        store = f"/v1/memory_stores/{self.store_id}"
        rest = request.url.path.removeprefix(store).strip("/")
        kind, _, mid = rest.partition("/")
        body = json.loads(request.content) if request.content else None
        params = dict(request.url.params)
        if kind == "memory_versions":
            return Seen("versions", request.method, None, params, body)
        if kind != "memories":  # the store itself, or another store
            return Seen("store", request.method, None, params, body)
        op = {"GET": "retrieve" if mid else "list", "POST": "update" if mid else "create"}
        return Seen(
            op.get(request.method, "delete"), request.method, unquote(mid) or None, params, body
        )

    def _about(self, seen: Seen) -> str | None:
        """The memory path a request is about (for faults scripted for one path)."""
        if seen.body and seen.body.get("path"):
            return str(seen.body["path"])
        if seen.memory_id is not None:
            return self.memories.get(seen.memory_id, {}).get("path")
        return None

    def _fault(self, seen: Seen) -> Fault | None:
        candidates = [f for f in self.faults if f.op == seen.op and f.times > 0]
        if not candidates:
            return None
        about = self._about(seen)
        fault = next((f for f in candidates if f.path is None or f.path == about), None)
        if fault is not None:
            fault.times -= 1
        return fault

    async def handle(self, request: httpx.Request) -> httpx.Response:
        seen = self._seen(request)
        self.requests.append(seen)
        if seen.op == "versions" and not self.versions_supported:
            return _error(404, "not_found_error", "no versions here")
        fault = self._fault(seen)
        if fault is not None and fault.status is not None:
            response = _error(fault.status, fault.error_type, fault.message)
            response.headers.update(fault.headers)
            return response
        if seen.op in ("create", "update", "delete") and self.before_write is not None:
            self.before_write(seen.op, seen.memory_id, seen.body)
        response = await self._app.handle_async_request(request)
        if fault is not None and fault.lose_answer:
            await response.aread()
            raise httpx.ReadError("connection lost before the answer", request=request)
        return response


class _Front(httpx.AsyncBaseTransport):
    def __init__(self, store: ApiStore) -> None:
        self.store = store

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        return await self.store.handle(request)


def _error(status: int, etype: str, message: str = "scripted error") -> httpx.Response:
    return httpx.Response(
        status,
        json={
            "type": "error",
            "error": {"type": etype, "message": message},
            "request_id": "req_scripted",
        },
    )
