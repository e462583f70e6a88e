"""The pure parts of scoped tokens and migrations: parsing, the scope rule table."""

from __future__ import annotations

import pytest

from memfs.server import actions, errors, migrations, tokens
from memfs.server.backends import UnknownBackend, check_spec
from memfs.server.pg import redact_url

A, B = "memstore_A", "memstore_B"
GRANT = tokens.Grant("tok_x", {A: tokens.READ_WRITE, B: tokens.READ_ONLY}, "9999")


@pytest.mark.parametrize(
    ("text", "seconds"), [("90s", 90), ("30m", 1800), ("8h", 28800), ("7d", 604800)]
)
def test_durations(text: str, seconds: int) -> None:
    assert tokens.parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["0h", "8", "h", "-1h", "1.5h", "8 hours", ""])
def test_bad_durations(text: str) -> None:
    with pytest.raises(ValueError):
        tokens.parse_duration(text)


def test_scopes() -> None:
    assert tokens.parse_scope(A) == (A, tokens.READ_WRITE)
    assert tokens.parse_scope(A + ":rw") == (A, tokens.READ_WRITE)
    assert tokens.parse_scope(A + ":ro") == (A, tokens.READ_ONLY)
    for bad in ("mem_x", A + ":x", ":ro", ""):
        with pytest.raises(ValueError):
            tokens.parse_scope(bad)


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [
        ("GET", f"/v1/memory_stores/{A}/memories", None),
        ("POST", f"/v1/memory_stores/{A}/memories", None),
        ("POST", f"/v1/memory_stores/{A}/memory_versions/v/redact", None),
        ("POST", f"/v1/memory_stores/{A}", 403),
        ("POST", f"/v1/memory_stores/{A}/archive", 403),
        ("DELETE", f"/v1/memory_stores/{A}", 403),
        ("GET", f"/v1/memory_stores/{B}/memories/m", None),
        ("POST", f"/v1/memory_stores/{B}/memories/m", 403),
        ("DELETE", f"/v1/memory_stores/{B}/memories/m", 403),
        ("GET", "/v1/memory_stores/memstore_C", 404),
        ("DELETE", "/v1/memory_stores/memstore_C/memories/m", 404),
        ("GET", "/v1/memory_stores", None),
        ("POST", "/v1/memory_stores", 403),
    ],
)
def test_authorize(method: str, path: str, status: int | None) -> None:
    if status is None:
        tokens.authorize_request(GRANT, method, path)
        return
    with pytest.raises(errors.ApiError) as info:
        tokens.authorize_request(GRANT, method, path)
    assert info.value.status == status


def test_token_shape() -> None:
    token_id, token = tokens.new_token()
    check = tokens.TokenCheck()
    assert check.token_id(token) == token_id
    for bad in ("memfs_tok_", token + "x", token[:-1], token.replace("memfs_tok_", "memfs_tok-")):
        with pytest.raises(errors.ApiError):
            check.token_id(bad)


def test_migrations_refuse_newer_and_list_pending() -> None:
    assert [n for n, _ in migrations.pending(0, migrations.SQLITE_STEPS)] == list(
        range(1, migrations.LATEST + 1)
    )
    assert migrations.pending(migrations.LATEST, migrations.POSTGRES_STEPS) == []
    with pytest.raises(migrations.SchemaTooNew):
        migrations.pending(migrations.LATEST + 1, migrations.SQLITE_STEPS)


def test_backend_choice_and_redaction() -> None:
    for ok in (None, "store.db", "/a/b.db", "postgresql://h/db", "postgres://h/db", "a:b"):
        check_spec(ok)
    for bad in ("mysql://h/db", "sqlite:///x.db", "file://x"):
        with pytest.raises(UnknownBackend):
            check_spec(bad)
    assert redact_url("postgresql://u:pw@h:5/db") == "postgresql://u:***@h:5/db"
    assert redact_url("postgresql://u@h/db") == "postgresql://u@h/db"


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [
        ("PUT", f"/v1/memory_stores/{A}", 403),  # no such route; the store's own need
        ("POST", f"/v1/memory_stores/{A}/memfs/watch", None),  # a write, routed or not
        ("POST", f"/v1/memory_stores/{B}/memfs/watch", 403),
        ("HEAD", f"/v1/memory_stores/{B}/memfs/watch", None),
        ("DELETE", "/v1/memory_stores/", 403),
        ("GET", "/healthz", None),
    ],
)
def test_a_request_no_action_matches_needs_what_its_route_needs(
    method: str, path: str, status: int | None
) -> None:
    if status is None:
        tokens.authorize_request(GRANT, method, path)
        return
    with pytest.raises(errors.ApiError) as info:
        tokens.authorize_request(GRANT, method, path)
    assert info.value.status == status


def test_the_console_asks_the_need_the_api_route_has() -> None:
    """An action asked by name (the console) and by its route (the API) needs the same."""
    for action in actions.ACTIONS:
        path = action.route.replace("{store_id}", A).replace("{memory_id}", "m")
        path = path.replace("{version_id}", "v")
        assert actions.need_of(action.method, path) == action.need, action.name
