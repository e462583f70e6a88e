"""In-process checks of the ASGI app: the request-hook seam and the 500 envelope."""

from __future__ import annotations

from pathlib import Path

import httpx
from starlette.types import Scope

from memfs.paths import BETA_MEMORY
from memfs.server import errors
from memfs.server.app import create_app
from memfs.server.sqlite import Database

HEADERS = {"anthropic-beta": BETA_MEMORY}


async def test_hooks_can_inject_errors(tmp_path: Path) -> None:
    db = Database.open(tmp_path / "s.db")
    calls: list[str] = []

    async def hook(scope: Scope) -> None:
        calls.append(scope["path"])
        if scope["path"].endswith("/overloaded"):
            raise errors.ApiError(529, "overloaded_error", "injected")

    app = create_app(db, hooks=[hook])
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        ok = await client.get("/v1/memory_stores", headers=HEADERS)
        assert ok.status_code == 200
        bad = await client.get("/v1/overloaded", headers=HEADERS)
        assert bad.status_code == 529
        body = bad.json()
        assert body["error"] == {"type": "overloaded_error", "message": "injected"}
        assert body["request_id"] == bad.headers["request-id"]
    assert calls == ["/v1/memory_stores", "/v1/overloaded"]
    db.close()


async def test_unexpected_errors_are_a_500_envelope(tmp_path: Path) -> None:
    db = Database.open(tmp_path / "s.db")

    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("boom")

    db.get_store = broken  # type: ignore[method-assign,assignment]
    app = create_app(db)
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        resp = await client.get("/v1/memory_stores/memstore_x", headers=HEADERS)
    assert resp.status_code == 500
    body = resp.json()
    assert body["error"]["type"] == "api_error"
    assert "boom" not in resp.text
    assert body["request_id"] == resp.headers["request-id"]
    db.close()
