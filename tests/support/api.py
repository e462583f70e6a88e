"""A small synchronous client for tests that change a store directly, over HTTP."""

from __future__ import annotations

import re
from typing import Any

import httpx

from memfs.paths import ANTHROPIC_VERSION, BETA_MEMORY

REQ_ID = re.compile(r"^req_[0-9A-Za-z]{24}$")


class ApiCallFailed(AssertionError):
    """A call a test expected to succeed did not; carries the response for the message."""

    def __init__(self, response: httpx.Response) -> None:
        super().__init__(
            f"{response.request.method} {response.request.url} -> "
            f"{response.status_code}: {response.text[:500]}"
        )
        self.response = response


class Api:
    """httpx.Client with the API's headers; helpers raise ApiCallFailed on non-200."""

    def __init__(self, base_url: str, api_key: str | None = None, *, timeout: float = 30.0) -> None:
        headers = {"anthropic-version": ANTHROPIC_VERSION, "anthropic-beta": BETA_MEMORY}
        if api_key is not None:
            headers["x-api-key"] = api_key
        self.client = httpx.Client(base_url=base_url, headers=headers, timeout=timeout)

    def close(self) -> None:
        self.client.close()

    def __enter__(self) -> Api:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def request(self, method: str, url: str, **kw: Any) -> httpx.Response:
        return self.client.request(method, url, **kw)

    def _ok(self, response: httpx.Response) -> Any:
        if response.status_code != 200:
            raise ApiCallFailed(response)
        return response.json()

    def create_store(self, name: str, description: str = "") -> dict[str, Any]:
        body = {"name": name, "description": description}
        result: dict[str, Any] = self._ok(self.request("POST", "/v1/memory_stores", json=body))
        return result

    def create_memory(self, store_id: str, path: str, content: str) -> dict[str, Any]:
        result: dict[str, Any] = self._ok(
            self.request(
                "POST",
                f"/v1/memory_stores/{store_id}/memories",
                json={"path": path, "content": content},
            )
        )
        return result

    def update_memory(self, store_id: str, memory_id: str, **body: Any) -> dict[str, Any]:
        result: dict[str, Any] = self._ok(
            self.request("POST", f"/v1/memory_stores/{store_id}/memories/{memory_id}", json=body)
        )
        return result

    def delete_memory(self, store_id: str, memory_id: str) -> None:
        self._ok(self.request("DELETE", f"/v1/memory_stores/{store_id}/memories/{memory_id}"))

    def get_memory(self, store_id: str, memory_id: str) -> dict[str, Any]:
        result: dict[str, Any] = self._ok(
            self.request("GET", f"/v1/memory_stores/{store_id}/memories/{memory_id}")
        )
        return result

    def list_memories(self, store_id: str) -> list[dict[str, Any]]:
        """Every memory of the store (all pages, basic view), in path order."""
        items: list[dict[str, Any]] = []
        params: dict[str, Any] = {"view": "basic", "limit": 100}
        while True:
            page = self._ok(
                self.request("GET", f"/v1/memory_stores/{store_id}/memories", params=params)
            )
            items.extend(page["data"])
            if not page["next_page"]:
                return items
            params["page"] = page["next_page"]


def assert_error(resp: httpx.Response, status: int, error_type: str) -> dict[str, Any]:
    assert resp.status_code == status, resp.text
    body: dict[str, Any] = resp.json()
    assert body["type"] == "error"
    assert body["error"]["type"] == error_type
    assert isinstance(body["error"]["message"], str) and body["error"]["message"]
    assert body["request_id"] == resp.headers["request-id"]
    assert REQ_ID.match(body["request_id"])
    return body
