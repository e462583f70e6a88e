"""Who is looking at the console: one login, then a session cookie.

The console takes the API's credentials: the admin key (`--api-key`) or a scoped token.
The credential stays on the server, in a session kept in memory and named by a random
cookie (HttpOnly, SameSite=Strict, path /console); a token is checked again on every
request through the same `TokenCheck` the API uses, so a revoked or expired token stops
working within `tokens.CACHE_SECONDS`. Every form carries the session's CSRF token.
Sessions live in one server instance: behind a load balancer, pin the console to one.

Only a login makes a session the server keeps, so requests without a cookie never push
a live session out. A server without a key keeps none at all: its sessions are only a
random cookie, and their CSRF token an HMAC of it under a key of this process, so ten
thousand cookieless requests (each of which needs a session to render its forms) no
longer flushed every open browser's session and lost the text it was about to save.
"""

from __future__ import annotations

import hmac
import re
import secrets
import time
from collections import OrderedDict
from dataclasses import dataclass

from memfs.server import errors, tokens
from memfs.server.db import Storage
from memfs.server.wire import Actor, api_key_id

COOKIE = "memfs_console"
LOGIN_COOKIE = "memfs_console_login"
SESSION_SECONDS = 8 * 3600
MAX_SESSIONS = 10_000
"""Oldest sessions are forgotten past this many logins (each is a few hundred bytes)."""
_SID = re.compile(r"[A-Za-z0-9_-]{43}")  # secrets.token_urlsafe(32)


@dataclass
class Session:
    """One logged-in browser. `credential` is None on a server without a key."""

    sid: str
    csrf: str
    credential: str | None
    is_token: bool
    expires: float

    @property
    def actor(self) -> Actor:
        """How versions written through the console name their writer (as the API does)."""
        return ("api_actor", api_key_id(self.credential or ""))


class Sessions:
    """The console's sessions, bounded, oldest first out."""

    def __init__(self, db: Storage, api_key: str | None) -> None:
        if api_key is not None and not api_key:
            raise ValueError("an empty admin key would let an empty password in")
        self.db = db
        self.api_key = api_key
        self.check = tokens.TokenCheck()
        self._by_sid: OrderedDict[str, Session] = OrderedDict()
        self._csrf_key = secrets.token_bytes(32)  # the open console's CSRF tokens

    @property
    def open(self) -> bool:
        """Without `--api-key` the server accepts any request, and so does the console."""
        return self.api_key is None

    def lookup(self, sid: str | None) -> Session | None:
        if not sid:
            return None
        if self.open:
            return self._open_session(sid) if _SID.fullmatch(sid) else None
        session = self._by_sid.get(sid)
        if session is None:
            return None
        if session.expires < time.time():
            del self._by_sid[sid]
            return None
        return session

    def _open_session(self, sid: str) -> Session:
        """A session of the console without a key: kept nowhere, made again from its id."""
        csrf = hmac.new(self._csrf_key, sid.encode("ascii"), "sha256").hexdigest()
        return Session(sid, csrf, None, False, time.time() + SESSION_SECONDS)

    def start(self, credential: str | None, *, is_token: bool) -> Session:
        if self.open and credential is None:
            return self._open_session(secrets.token_urlsafe(32))
        session = Session(
            sid=secrets.token_urlsafe(32),
            csrf=secrets.token_urlsafe(32),
            credential=credential,
            is_token=is_token,
            expires=time.time() + SESSION_SECONDS,
        )
        self._by_sid[session.sid] = session
        while len(self._by_sid) > MAX_SESSIONS:
            self._by_sid.popitem(last=False)
        return session

    def end(self, sid: str | None) -> None:
        if sid:
            self._by_sid.pop(sid, None)

    def login(self, credential: str) -> Session:
        """A session for `credential`, or the ApiError (401) that says why not."""
        credential = credential.strip()
        if not credential and not self.open:
            raise errors.unauthorized("give the admin key or a token")
        if tokens.is_token(credential):
            self.grant(credential)
            return self.start(credential, is_token=True)
        if self.api_key is not None and not hmac.compare_digest(
            credential.encode("utf-8"), self.api_key.encode("utf-8")
        ):
            raise errors.unauthorized("invalid API key")
        return self.start(None if self.open else credential, is_token=False)

    def grant(self, token: str) -> tokens.Grant:
        """The token's grant now (revocation and expiry apply), or 401."""
        token_id = self.check.token_id(token)
        hit, record = self.check.cached(token_id)
        if not hit:
            record = self.db.token_record(token_id)
            self.check.remember(token_id, record)
        return self.check.grant(token, token_id, record)

    @staticmethod
    def csrf_ok(session: Session, presented: str | None) -> bool:
        return presented is not None and hmac.compare_digest(
            presented.encode("utf-8"), session.csrf.encode("utf-8")
        )
