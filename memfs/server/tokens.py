"""Scoped credentials: bearer tokens bound to stores, each read_write or read_only.

A sandbox host runs agent code, so the credential it holds must open only the stores its
session was given, and only as far as it was given them. A token is
`memfs_tok_` + 24 id characters + 32 secret characters (base62). The database keeps its
id, the SHA-256 of the whole token (never the token), its scopes and its expiry, so every
instance on the database honours it and a copied database keeps it.

What a token may do (enforced in `authorize`, before routing, by the server itself, and
by the console for each action it stands for), by what its action needs
(memfs/server/actions.py, one table):
- a store outside its scopes does not exist (404), whatever the method;
- `read_only`: reads only; any other method on its store is 403 `permission_error`;
- `read_write`: memories and versions of its stores; the store itself (update, archive,
  delete) and creating stores stay with the admin key (403);
- `GET /v1/memory_stores` lists only its stores.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import secrets
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from memfs.server import actions, errors
from memfs.server.wire import _TS_FORMAT, _base62, now

PREFIX = "memfs_tok_"
READ_WRITE = "read_write"
READ_ONLY = "read_only"
_SHAPE = re.compile(r"^memfs_tok_([0-9A-Za-z]{24})[0-9A-Za-z]{32}$")
_STORE_PATH = re.compile(r"^/v1/memory_stores/([^/]+)(/.*)?$")
_DURATION = re.compile(r"^(\d+)([smhd])$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
CACHE_SECONDS = 5.0
"""How long an instance trusts a looked-up token before asking the database again
(bounds how late a revocation takes effect)."""


@dataclass(frozen=True)
class Grant:
    """What one presented token may touch."""

    token_id: str
    scopes: dict[str, str]
    expires_at: str


def parse_duration(text: str) -> int:
    """`90s`, `30m`, `8h`, `7d` -> seconds; ValueError otherwise."""
    match = _DURATION.match(text.strip())
    if match is None or int(match.group(1)) == 0:
        raise ValueError(f"{text!r} is not a duration like 30m, 8h or 7d")
    return int(match.group(1)) * _UNITS[match.group(2)]


def parse_scope(text: str) -> tuple[str, str]:
    """`ID` (read_write) or `ID:ro` / `ID:rw` -> (store id, access)."""
    store_id, _, mode = text.partition(":")
    access = {"": READ_WRITE, "rw": READ_WRITE, "ro": READ_ONLY}.get(mode)
    if not store_id.startswith("memstore_") or access is None:
        raise ValueError(f"{text!r} is not STORE_ID, STORE_ID:ro or STORE_ID:rw")
    return store_id, access


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def new_token() -> tuple[str, str]:
    """(token id, token)."""
    ident = _base62(secrets.token_bytes(18), 24)
    return "tok_" + ident, PREFIX + ident + _base62(secrets.token_bytes(24), 32)


def expiry(seconds: int) -> str:
    return (datetime.now(UTC) + timedelta(seconds=seconds)).strftime(_TS_FORMAT)


def is_token(credential: str) -> bool:
    return credential.startswith(PREFIX)


class TokenCheck:
    """Turns a presented token into a Grant, or the 401 that says why not."""

    def __init__(self) -> None:
        self._cache: dict[str, tuple[float, dict[str, Any] | None]] = {}
        self._lock = threading.Lock()

    def token_id(self, token: str) -> str:
        match = _SHAPE.match(token)
        if match is None:
            raise errors.unauthorized("malformed token: not a memfs token")
        return "tok_" + match.group(1)

    def cached(self, token_id: str) -> tuple[bool, dict[str, Any] | None]:
        with self._lock:
            hit = self._cache.get(token_id)
        if hit is None or time.monotonic() - hit[0] > CACHE_SECONDS:
            return False, None
        return True, hit[1]

    def remember(self, token_id: str, record: dict[str, Any] | None) -> None:
        with self._lock:
            if len(self._cache) > 10_000:
                self._cache.clear()
            self._cache[token_id] = (time.monotonic(), record)

    @staticmethod
    def grant(token: str, token_id: str, record: dict[str, Any] | None) -> Grant:
        if record is None or not hmac.compare_digest(record["hash"], token_hash(token)):
            raise errors.unauthorized("invalid token")
        if record["revoked_at"] is not None:
            raise errors.unauthorized("the token was revoked")
        if record["expires_at"] <= now():
            raise errors.unauthorized("the token has expired")
        scopes: dict[str, str] = json.loads(record["scopes"])
        return Grant(token_id, scopes, record["expires_at"])


def authorize_request(grant: Grant, method: str, path: str) -> None:
    """Raise the 404 or 403 a token gets for this request; return if it may proceed."""
    match = _STORE_PATH.match(path)
    if match is None and path.rstrip("/") != actions.STORES:
        return  # not a store route: the router answers (404), or a route judges itself
    authorize(grant, actions.need_of(method, path), None if match is None else match.group(1))


def authorize(grant: Grant, need: actions.Need, store_id: str | None) -> None:
    """Raise the 404 or 403 a token gets for an action that needs `need` of `store_id`
    (None: of the stores as a whole); return if it may proceed."""
    if store_id is None:
        if need == actions.ADMIN:
            raise errors.forbidden("a store token cannot create memory stores")
        return
    access = grant.scopes.get(store_id)
    if access is None:
        raise errors.not_found(f"memory store {store_id} not found")
    if need in (actions.LIST, actions.READ):
        return
    if access != READ_WRITE:
        raise errors.forbidden(f"this token may only read memory store {store_id}")
    if need == actions.ADMIN:
        raise errors.forbidden("a store token cannot change, archive or delete the store")
