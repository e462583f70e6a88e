"""Ids, timestamps, actors and page cursors: the small wire formats of spec §2."""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import secrets
import string
import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from memfs.server import errors

BASE62 = string.digits + string.ascii_uppercase + string.ascii_lowercase
ID_CHARS = 24
PAGE_PREFIX = "page_"

Actor = tuple[str, str]
"""(actor type, id): ("api_actor", "apikey_…"), ("session_actor", "sesn_…"), …"""

_ACTOR_ID_FIELD = {
    "api_actor": "api_key_id",
    "session_actor": "session_id",
    "user_actor": "user_id",
    "service_account_actor": "service_account_id",
}


def new_id(prefix: str) -> str:
    """`prefix` + 24 random base62 characters, the shape the hosted API's ids have."""
    return prefix + _base62(secrets.token_bytes(18), ID_CHARS)


def _base62(data: bytes, length: int) -> str:
    n = int.from_bytes(data, "big")
    out = []
    for _ in range(length):
        n, r = divmod(n, 62)
        out.append(BASE62[r])
    return "".join(out)


def api_key_id(credential: str) -> str:
    """A stable, non-reversible id for a credential, so versions can name the key."""
    digest = hashlib.sha256(b"memfs-api-key:" + credential.encode("utf-8")).digest()
    return "apikey_" + _base62(digest, ID_CHARS)


def actor_json(actor_type: str | None, actor_id: str | None) -> dict[str, str] | None:
    if actor_type is None or actor_id is None:
        return None
    return {"type": actor_type, _ACTOR_ID_FIELD[actor_type]: actor_id}


_TS_FORMAT = "%Y-%m-%dT%H:%M:%S.%fZ"
_clock_lock = threading.Lock()
_last_us = 0


def now() -> str:
    """RFC 3339 UTC with microseconds, strictly increasing within this process.

    Fixed width, so SQL string order is time order; strictly increasing, so "newest first"
    never depends on the tie-break for writes made by one server.
    """
    global _last_us
    with _clock_lock:
        us = max(time.time_ns() // 1000, _last_us + 1)
        _last_us = us
    return datetime.fromtimestamp(us / 1_000_000, UTC).strftime(_TS_FORMAT)


def after(ts: str) -> str:
    """The stored timestamp one microsecond after `ts`."""
    parsed = datetime.strptime(ts, _TS_FORMAT).replace(tzinfo=UTC)
    return (parsed + timedelta(microseconds=1)).strftime(_TS_FORMAT)


def parse_timestamp(value: str, name: str) -> str:
    """A query-string RFC 3339 time, normalized to the stored format (naive means UTC)."""
    text = value.strip()
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        try:  # an unencoded '+' in a query string arrives as a space
            parsed = datetime.fromisoformat(text.replace(" ", "+"))
        except ValueError:
            raise errors.invalid(f"{name} must be an RFC 3339 timestamp") from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.astimezone(UTC).strftime(_TS_FORMAT)


def encode_cursor(kind: str, key: list[Any]) -> str:
    """An opaque `page_…` token holding the last key of the page (keyset paging)."""
    raw = json.dumps({"k": kind, "v": key}, separators=(",", ":"), ensure_ascii=False)
    return PAGE_PREFIX + base64.urlsafe_b64encode(raw.encode("utf-8")).decode("ascii").rstrip("=")


def decode_cursor(token: str, kind: str) -> list[Any]:
    bad = errors.invalid("page is not a valid cursor for this listing")
    if not token.startswith(PAGE_PREFIX):
        raise bad
    body = token[len(PAGE_PREFIX) :]
    try:
        raw = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
        data = json.loads(raw.decode("utf-8"))
    except (ValueError, binascii.Error, UnicodeDecodeError):
        raise bad from None
    if not isinstance(data, dict) or data.get("k") != kind or not isinstance(data.get("v"), list):
        raise bad
    value: list[Any] = data["v"]
    return value
