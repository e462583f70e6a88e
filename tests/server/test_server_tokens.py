"""Scoped tokens (`memfs serve token create`): the server itself keeps a token inside its
stores and a read-only token out of every write, on both backends."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anthropic
import httpx
import pytest

from memfs.paths import BETA_MEMORY
from memfs.server import tokens
from memfs.server.backends import open_storage
from tests.support.api import Api, assert_error
from tests.support.deadline import eventually
from tests.support.server import REPO_ROOT, ServerProcess, start_server

ADMIN = "sk-admin-key"


def serve(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "memfs.cli", "serve", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO_ROOT,
    )


def issue(server: ServerProcess, *scopes: str, ttl: str = "1h") -> str:
    """What `memfs serve token create` does, in-process (the CLI is tested below)."""
    db = open_storage(server.db, pool_size=1)
    try:
        grants = dict(tokens.parse_scope(s) for s in scopes)
        token: str = db.create_token(grants, tokens.parse_duration(ttl))["token"]
    finally:
        db.close()
    assert token.startswith("memfs_tok_")
    return token


def issue_cli(db: str, *scopes: str) -> str:
    args = [a for s in scopes for a in ("--store", s)]
    result = serve("token", "create", "--db", db, *args, "--ttl", "1h")
    assert result.returncode == 0, result.stderr
    assert result.stderr.startswith("memfs serve: token tok_")
    return result.stdout.strip()


def bearer(server: ServerProcess, token: str) -> httpx.Client:
    return httpx.Client(
        base_url=server.url,
        timeout=30,
        headers={"authorization": f"Bearer {token}", "anthropic-beta": BETA_MEMORY},
    )


@dataclass
class Fixture:
    store: str
    memory: str
    old_version: str

    def reads(self) -> list[tuple[str, str, dict[str, Any]]]:
        s = f"/v1/memory_stores/{self.store}"
        return [
            ("GET", s, {}),
            ("GET", f"{s}/memories", {}),
            ("GET", f"{s}/memories/{self.memory}", {}),
            ("GET", f"{s}/memory_versions", {}),
            ("GET", f"{s}/memory_versions/{self.old_version}", {}),
        ]

    def writes(self) -> list[tuple[str, str, dict[str, Any]]]:
        s = f"/v1/memory_stores/{self.store}"
        return [
            ("POST", s, {"json": {"name": "renamed"}}),
            ("POST", f"{s}/archive", {}),
            ("DELETE", s, {}),
            ("POST", f"{s}/memories", {"json": {"path": "/new.md", "content": "n"}}),
            ("POST", f"{s}/memories/{self.memory}", {"json": {"content": "changed"}}),
            ("DELETE", f"{s}/memories/{self.memory}", {}),
            ("POST", f"{s}/memory_versions/{self.old_version}/redact", {}),
        ]


def make_store(api: Api, name: str) -> Fixture:
    sid = api.create_store(name)["id"]
    mem = api.create_memory(sid, "/a.md", "one")
    old = mem["memory_version_id"]
    api.update_memory(sid, mem["id"], content="two")
    return Fixture(sid, mem["id"], old)


def snapshot(api: Api, f: Fixture) -> Any:
    store = api.request("GET", f"/v1/memory_stores/{f.store}").json()
    versions = api.request(
        "GET", f"/v1/memory_stores/{f.store}/memory_versions", params={"view": "full"}
    ).json()["data"]
    return store, [api.get_memory(f.store, m["id"]) for m in api.list_memories(f.store)], versions


@pytest.fixture
def two(api: Api) -> Iterator[tuple[Fixture, Fixture]]:
    yield make_store(api, "mine"), make_store(api, "theirs")


def test_a_token_never_sees_another_store(
    server: ServerProcess, api: Api, two: tuple[Fixture, Fixture]
) -> None:
    mine, theirs = two
    before = snapshot(api, theirs)
    with bearer(server, issue(server, mine.store)) as client:
        for method, url, kw in theirs.reads() + theirs.writes():
            assert_error(client.request(method, url, **kw), 404, "not_found_error")
        listed = client.get("/v1/memory_stores").json()["data"]
        assert [s["id"] for s in listed] == [mine.store]
        for method, url, kw in mine.reads():
            assert client.request(method, url, **kw).status_code == 200, url
    assert snapshot(api, theirs) == before


def test_a_read_only_token_is_refused_every_write(
    server: ServerProcess, api: Api, two: tuple[Fixture, Fixture]
) -> None:
    mine, _ = two
    before = snapshot(api, mine)
    with bearer(server, issue(server, f"{mine.store}:ro")) as client:
        for method, url, kw in mine.writes():
            assert_error(client.request(method, url, **kw), 403, "permission_error")
        assert_error(client.post("/v1/memory_stores", json={"name": "x"}), 403, "permission_error")
        for method, url, kw in mine.reads():
            assert client.request(method, url, **kw).status_code == 200, url
    assert snapshot(api, mine) == before


def test_a_read_write_token_writes_memories_but_not_the_store(
    server: ServerProcess, api: Api, two: tuple[Fixture, Fixture]
) -> None:
    mine, theirs = two
    with bearer(server, issue(server, mine.store, f"{theirs.store}:ro")) as client:
        s = f"/v1/memory_stores/{mine.store}"
        made = client.post(f"{s}/memories", json={"path": "/b.md", "content": "b"})
        assert made.status_code == 200, made.text
        assert (
            client.post(f"{s}/memories/{made.json()['id']}", json={"content": "b2"}).status_code
            == 200
        )
        assert client.post(f"{s}/memory_versions/{mine.old_version}/redact").status_code == 200
        assert client.delete(f"{s}/memories/{made.json()['id']}").status_code == 200
        for method, url, kw in mine.writes()[:3]:  # update, archive, delete the store
            assert_error(client.request(method, url, **kw), 403, "permission_error")
        assert_error(
            client.post(
                f"/v1/memory_stores/{theirs.store}/memories", json={"path": "/c.md", "content": "c"}
            ),
            403,
            "permission_error",
        )
    assert api.request("GET", s).json()["archived_at"] is None


def test_expired_malformed_unknown_and_revoked_tokens_are_401(
    server: ServerProcess, api: Api, two: tuple[Fixture, Fixture]
) -> None:
    mine, _ = two
    expired = issue(server, mine.store, ttl="1s")
    revoked = issue_cli(server.db, mine.store)
    listed = json.loads(serve("token", "list", "--db", server.db, "--json").stdout)
    revoked_id = next(t["id"] for t in listed if t["id"][4:] == revoked[10:34])
    assert serve("token", "revoke", "--db", server.db, revoked_id).returncode == 0
    good = issue(server, mine.store)
    unknown = good[:-4] + ("aaaa" if not good.endswith("aaaa") else "bbbb")
    url = f"/v1/memory_stores/{mine.store}/memories"
    with bearer(server, expired) as client:  # until its one second has passed (bounded)
        eventually(
            lambda: client.get(url).status_code,
            "the one-second token expired",
            until=lambda code: code == 401,
            timeout=15,
            interval=0.1,
        )
    for token in (
        expired,
        revoked,
        unknown,
        "memfs_tok_short",
        good + "x",
        "memfs_tok_" + "!" * 56,
    ):
        with bearer(server, token) as client:
            body = assert_error(client.get(url), 401, "authentication_error")
            assert token not in json.dumps(body)
    with bearer(server, good) as client:
        assert client.get(url).status_code == 200


def test_token_create_refusals(tmp_path: Path) -> None:
    db = open_storage(str(tmp_path / "t.db"))
    sid = db.create_store("x", "", {})["id"]
    db.close()
    for args, code, text in (
        (["--store", "memstore_nope"], 1, "not found"),
        (["--store", "bad"], 2, "is not STORE_ID"),
        (["--store", f"{sid}:rx"], 2, "is not STORE_ID"),
        (["--store", sid, "--ttl", "0h"], 2, "is not a duration"),
        (["--store", sid, "--ttl", "8 hours"], 2, "is not a duration"),
    ):
        result = serve("token", "create", "--db", str(tmp_path / "t.db"), *args)
        assert result.returncode == code, (args, result.stderr)
        assert result.stderr.count("\n") == 1 and text in result.stderr, result.stderr
        assert result.stdout == ""


def test_tokens_with_an_admin_key_sdk_and_client(tmp_path: Path) -> None:
    """With --api-key, a token stands in for the key (never beyond its scope); the SDK and
    memfs's own client (ANTHROPIC_AUTH_TOKEN) use it as a bearer token."""
    server = start_server(tmp_path / "store.db", api_key=ADMIN)
    try:
        with Api(server.url, ADMIN) as admin:
            mine, theirs = make_store(admin, "mine"), make_store(admin, "theirs")
            token = issue_cli(server.db, f"{mine.store}:ro")
            with anthropic.Anthropic(auth_token=token, base_url=server.url, max_retries=0) as sdk:
                memories = sdk.beta.memory_stores.memories
                assert [m.path for m in memories.list(mine.store)] == ["/a.md"]
                with pytest.raises(anthropic.PermissionDeniedError):
                    memories.create(mine.store, path="/x.md", content="x")
                with pytest.raises(anthropic.NotFoundError):
                    memories.list(theirs.store).data  # noqa: B018
            with anthropic.Anthropic(api_key="sk-wrong", base_url=server.url, max_retries=0) as sdk:
                with pytest.raises(anthropic.AuthenticationError):
                    sdk.beta.memory_stores.list().data  # noqa: B018
            env = {
                "PATH": "/usr/bin:/bin",
                "ANTHROPIC_BASE_URL": server.url,
                "ANTHROPIC_AUTH_TOKEN": token,
            }
            out = subprocess.run(
                [sys.executable, "-m", "memfs.cli", "store", "list", "--json"],
                env=env,
                capture_output=True,
                text=True,
                timeout=60,
                cwd=REPO_ROOT,
            )
            assert out.returncode == 0, out.stderr
            assert [s["id"] for s in json.loads(out.stdout)] == [mine.store]
    finally:
        server.stop()
