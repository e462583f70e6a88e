"""Transport rules of the store server: headers, auth, request ids, errors, routing."""

from __future__ import annotations

import re
import socket
from pathlib import Path
from typing import Any

import httpx
import pytest

from memfs.paths import BETA_MANAGED_AGENTS, BETA_MEMORY
from tests.support.api import REQ_ID, Api, assert_error
from tests.support.deadline import eventually
from tests.support.postgres import BACKENDS, start_on
from tests.support.server import ServerProcess, start_server


def raw(
    url: str, method: str, path: str, *, headers: dict[str, str] | None = None, **kw: Any
) -> httpx.Response:
    with httpx.Client(base_url=url, timeout=10) as client:
        return client.request(method, path, headers=headers or {}, **kw)


def test_request_id_on_every_response(shared_api: Api) -> None:
    ok = shared_api.request("GET", "/v1/memory_stores")
    assert ok.status_code == 200
    assert REQ_ID.match(ok.headers["request-id"])
    again = shared_api.request("GET", "/v1/memory_stores")
    assert again.headers["request-id"] != ok.headers["request-id"]
    assert_error(
        shared_api.request("GET", "/v1/memory_stores/memstore_nope"), 404, "not_found_error"
    )


@pytest.mark.parametrize(
    "beta",
    [
        BETA_MEMORY,
        BETA_MANAGED_AGENTS,
        f"some-other-beta,{BETA_MEMORY}",
        f"{BETA_MANAGED_AGENTS} , other",
        f"{BETA_MEMORY},{BETA_MEMORY}",
    ],
)
def test_one_beta_value_is_accepted(shared_server: ServerProcess, beta: str) -> None:
    resp = raw(shared_server.url, "GET", "/v1/memory_stores", headers={"anthropic-beta": beta})
    assert resp.status_code == 200, resp.text


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"anthropic-beta": "files-api-2025-04-14"},
        {"anthropic-beta": f"{BETA_MEMORY},{BETA_MANAGED_AGENTS}"},
    ],
)
def test_missing_or_double_beta_is_400(
    shared_server: ServerProcess, headers: dict[str, str]
) -> None:
    resp = raw(shared_server.url, "GET", "/v1/memory_stores", headers=headers)
    assert_error(resp, 400, "invalid_request_error")


def test_both_betas_in_two_headers_is_400(shared_server: ServerProcess) -> None:
    with httpx.Client(base_url=shared_server.url) as client:
        req = client.build_request("GET", "/v1/memory_stores")
        req.headers = httpx.Headers(
            [
                ("host", req.url.netloc.decode()),
                ("anthropic-beta", BETA_MEMORY),
                ("anthropic-beta", BETA_MANAGED_AGENTS),
            ]
        )
        assert_error(client.send(req), 400, "invalid_request_error")


def test_no_key_configured_means_no_auth(shared_server: ServerProcess) -> None:
    resp = raw(
        shared_server.url, "GET", "/v1/memory_stores", headers={"anthropic-beta": BETA_MEMORY}
    )
    assert resp.status_code == 200


@pytest.fixture(scope="module", params=BACKENDS)
def keyed_server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Any:
    proc = start_on(
        request.param, request, tmp_path_factory.mktemp("keyed"), api_key="sk-test-SECRET-value"
    )
    yield proc
    proc.stop()


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"x-api-key": "wrong"},
        {"authorization": "Bearer wrong"},
        {"authorization": "sk-test-SECRET-value"},
        {"authorization": "Basic sk-test-SECRET-value"},
    ],
)
def test_bad_or_missing_key_is_401(keyed_server: ServerProcess, headers: dict[str, str]) -> None:
    resp = raw(
        keyed_server.url,
        "GET",
        "/v1/memory_stores",
        headers={"anthropic-beta": BETA_MEMORY, **headers},
    )
    body = assert_error(resp, 401, "authentication_error")
    assert "sk-test-SECRET-value" not in resp.text
    assert "wrong" not in body["error"]["message"]


def test_auth_comes_before_the_beta_check(keyed_server: ServerProcess) -> None:
    assert_error(raw(keyed_server.url, "GET", "/v1/memory_stores"), 401, "authentication_error")


@pytest.mark.parametrize(
    "headers",
    [
        {"x-api-key": "sk-test-SECRET-value"},
        {"authorization": "Bearer sk-test-SECRET-value"},
        {"authorization": "bearer sk-test-SECRET-value"},
        {"x-api-key": "wrong", "authorization": "Bearer sk-test-SECRET-value"},
    ],
)
def test_good_key_by_header_or_bearer(keyed_server: ServerProcess, headers: dict[str, str]) -> None:
    resp = raw(
        keyed_server.url,
        "GET",
        "/v1/memory_stores",
        headers={"anthropic-beta": BETA_MEMORY, **headers},
    )
    assert resp.status_code == 200, resp.text


def test_api_actor_names_the_key_stably(keyed_server: ServerProcess) -> None:
    with Api(keyed_server.url, "sk-test-SECRET-value") as api:
        store = api.create_store("actors")
        a = api.create_memory(store["id"], "/a", "1")
        b = api.create_memory(store["id"], "/b", "2")
        versions = api.request("GET", f"/v1/memory_stores/{store['id']}/memory_versions").json()[
            "data"
        ]
    actors = {v["memory_id"]: v["created_by"] for v in versions}
    assert actors[a["id"]] == actors[b["id"]]
    actor = actors[a["id"]]
    assert actor["type"] == "api_actor"
    assert re.match(r"^apikey_[0-9A-Za-z]{24}$", actor["api_key_id"])
    assert "SECRET" not in actor["api_key_id"]


def test_session_header_records_a_session_actor(shared_api: Api) -> None:
    store = shared_api.create_store("sessions")
    resp = shared_api.request(
        "POST",
        f"/v1/memory_stores/{store['id']}/memories",
        json={"path": "/s.md", "content": "x"},
        headers={"x-memfs-session-id": "sesn_0123456789abcdefABCDEF01"},
    )
    assert resp.status_code == 200
    versions = shared_api.request("GET", f"/v1/memory_stores/{store['id']}/memory_versions").json()[
        "data"
    ]
    assert versions[0]["created_by"] == {
        "type": "session_actor",
        "session_id": "sesn_0123456789abcdefABCDEF01",
    }
    bad = shared_api.request("GET", "/v1/memory_stores", headers={"x-memfs-session-id": "user_1"})
    assert_error(bad, 400, "invalid_request_error")


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/"),
        ("GET", "/v1/nothing"),
        ("GET", "/v1/memory_stores/"),
        ("PUT", "/v1/memory_stores"),
        ("PATCH", "/v1/memory_stores/memstore_x/memories/mem_x"),
        ("GET", "/v1/memory_stores/memstore_x/memories/mem_x/extra"),
    ],
)
def test_unknown_routes_are_404(shared_api: Api, method: str, path: str) -> None:
    assert_error(shared_api.request(method, path), 404, "not_found_error")


@pytest.mark.parametrize("content", [b"{", b"[1,2]", b'"text"', b"\xff\xfe", b"", b"null"])
def test_malformed_json_is_400(shared_api: Api, content: bytes) -> None:
    resp = shared_api.request(
        "POST", "/v1/memory_stores", content=content, headers={"content-type": "application/json"}
    )
    assert_error(resp, 400, "invalid_request_error")


def test_unknown_body_field_is_400(shared_api: Api) -> None:
    resp = shared_api.request("POST", "/v1/memory_stores", json={"name": "x", "nme": "y"})
    assert_error(resp, 400, "invalid_request_error")


def test_oversized_body_is_413(shared_api: Api) -> None:
    store = shared_api.create_store("big")
    resp = shared_api.request(
        "POST",
        f"/v1/memory_stores/{store['id']}/memories",
        json={"path": "/big", "content": "x" * 1_100_000},
    )
    assert_error(resp, 413, "request_too_large")


def test_debug_log_has_one_line_per_request_and_no_secrets(tmp_path: Path) -> None:
    proc = start_server(tmp_path / "store.db", api_key="sk-test-LOGGED-key")
    try:
        with Api(proc.url, "sk-test-LOGGED-key") as api:
            store = api.create_store("logs")
            api.create_memory(store["id"], "/private/notes.md", "TOPSECRET-CONTENT")
            api.request(
                "GET",
                f"/v1/memory_stores/{store['id']}/memories",
                params={"path_prefix": "/private/"},
            )
    finally:
        proc.stop()
    log = proc.log_path.read_text()
    assert "method=POST path=/v1/memory_stores status=200 ms=" in log
    assert re.search(r"method=GET path=/v1/memory_stores/memstore_\w+/memories status=200 ms=", log)
    assert "sk-test-LOGGED-key" not in log
    assert "TOPSECRET-CONTENT" not in log
    assert "path_prefix" not in log


def test_client_gone_mid_body_is_no_server_error(tmp_path: Path) -> None:
    # a daemon killed while pushing (the kill -9 trials do this) leaves a request whose
    # body never arrives: the server notes it and goes on, no traceback, nothing stored
    proc = start_server(tmp_path / "store.db")
    try:
        with Api(proc.url) as api:
            store = api.create_store("gone")
            host, port = proc.url.split("://", 1)[1].rsplit(":", 1)
            head = (
                f"POST /v1/memory_stores/{store['id']}/memories HTTP/1.1\r\n"
                f"Host: {host}\r\nanthropic-version: 2023-06-01\r\n"
                f"anthropic-beta: {BETA_MEMORY}\r\ncontent-type: application/json\r\n"
                "content-length: 1000\r\n\r\n"
            )
            with socket.create_connection((host, int(port)), timeout=10) as sock:
                sock.sendall(head.encode() + b'{"path": "/half", "content": "')
            eventually(
                lambda: "client went away" in proc.log_path.read_text(),
                "the server's note of the client that went away",
                timeout=10,
            )
            assert api.list_memories(store["id"]) == []
            assert api.request("GET", "/v1/memory_stores").status_code == 200
    finally:
        assert proc.stop() == 0
    log = proc.log_path.read_text()
    assert "Traceback" not in log and " ERROR " not in log, log
