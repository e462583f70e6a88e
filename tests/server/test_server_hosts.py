"""DNS rebinding (issue 35 item 6): a `memfs serve` without an API key answers only
requests whose Host is this machine's own name (localhost, a name under .localhost, an
IP address) or one given with `--allowed-host`; with a key every Host is served, since
every API request needs the key and the console's cookie is SameSite=Strict.

A web page under a name whose DNS answer is 127.0.0.1 is same-origin with the server
for the browser, which sends that name as Host: without the check such a page read
every store and edited a memory of the README's own `memfs serve`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx

from memfs.paths import ANTHROPIC_VERSION, BETA_MEMORY
from tests.support.server import ServerProcess, start_server

HEADERS = {"anthropic-version": ANTHROPIC_VERSION, "anthropic-beta": BETA_MEMORY}


def answer(
    server: ServerProcess,
    path: str,
    host: str,
    *,
    method: str = "GET",
    json: Any = None,
    headers: dict[str, str] | None = None,
) -> httpx.Response:
    """A request to the server's real address carrying `host` as its Host header."""
    with httpx.Client(base_url=server.url, timeout=10) as client:
        return client.request(
            method, path, json=json, headers={**HEADERS, "host": host, **(headers or {})}
        )


def test_without_a_key_only_this_hosts_names_are_answered(tmp_path: Path) -> None:
    server = start_server(tmp_path / "s.db")
    try:
        port = server.port
        made = answer(server, "/v1/memory_stores", f"127.0.0.1:{port}", method="POST",
                      json={"name": "mine"})  # fmt: skip
        assert made.status_code == 200, made.text
        sid = made.json()["id"]
        for host in (
            f"127.0.0.1:{port}", "127.0.0.1", f"127.8.9.10:{port}", f"localhost:{port}",
            "LOCALHOST", "localhost.", f"app.localhost:{port}", f"[::1]:{port}",
            f"192.0.2.7:{port}",
        ):  # fmt: skip
            assert answer(server, "/v1/memory_stores", host).status_code == 200, host
        for host in (f"rebound.example:{port}", "rebound.example", "127.0.0.1.nip.io", "x"):
            for path in ("/v1/memory_stores", f"/v1/memory_stores/{sid}", "/console/",
                         "/readyz"):  # fmt: skip
                refused = answer(server, path, host)
                assert refused.status_code == 421, (host, path, refused.text)
                error = refused.json()["error"]
                assert error["type"] == "invalid_request_error"
                assert "--allowed-host" in error["message"], error
        # a write under such a name changes nothing
        refused = answer(server, f"/v1/memory_stores/{sid}/memories", "rebound.example",
                         method="POST", json={"path": "/x.md", "content": "planted"})  # fmt: skip
        assert refused.status_code == 421
        listed = answer(server, f"/v1/memory_stores/{sid}/memories", "localhost")
        assert listed.json()["data"] == []
    finally:
        assert server.stop() == 0
    assert "Traceback" not in server.log_tail(10_000)


def test_allowed_host_serves_the_names_given(tmp_path: Path) -> None:
    extra = ["--allowed-host", "memfs.example", "--allowed-host", "Other.Example."]
    server = start_server(tmp_path / "s.db", extra_args=extra)
    try:
        for host in ("memfs.example", f"memfs.example:{server.port}", "other.example"):
            assert answer(server, "/v1/memory_stores", host).status_code == 200, host
        assert answer(server, "/v1/memory_stores", "third.example").status_code == 421
        assert answer(server, "/console/", "memfs.example").status_code == 200
    finally:
        assert server.stop() == 0


def test_with_a_key_every_host_needs_the_key(tmp_path: Path) -> None:
    server = start_server(tmp_path / "s.db", api_key="sk-hosts")
    try:
        keyed = {"x-api-key": "sk-hosts"}
        assert (
            answer(server, "/v1/memory_stores", "memfs.example", headers=keyed).status_code == 200
        )
        assert answer(server, "/v1/memory_stores", "memfs.example").status_code == 401
        login = answer(server, "/console/", "memfs.example")
        assert login.status_code == 303 and "/console/login" in login.headers["location"]
    finally:
        assert server.stop() == 0
