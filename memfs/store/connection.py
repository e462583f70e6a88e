"""Where the store is, how to authenticate, and the `httpx` client that carries both.

- `ClientConfig`: base URL and credentials from flags and the environment. It never
  prints a credential (its repr names only where the credential came from).
- `make_http_client`: an `httpx.AsyncClient` with the API's fixed headers, the
  credential, a connection pool sized for concurrent transfers, and timeouts.

`memfs.store.client.StoreClient` makes the typed calls over such a client.
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
import json
import os
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field

import httpx

from memfs.errors import ConfigError
from memfs.paths import ANTHROPIC_VERSION, BETA_MEMORY

DEFAULT_BASE_URL = "https://api.anthropic.com"
CREDENTIAL_HINT = (
    "set ANTHROPIC_API_KEY (x-api-key), ANTHROPIC_AUTH_TOKEN (bearer token) "
    "or ANTHROPIC_WORK_SECRET (a work item's secret)"
)


@dataclass(frozen=True)
class ClientConfig:
    """Where the store is and how to authenticate; safe to log (`repr` hides secrets).

    `auth_header` is `(name, value)` or None; `credential_source` names the variable it
    came from, which is all a message or log line ever shows.
    """

    base_url: str
    auth_header: tuple[str, str] | None = field(default=None, repr=False, compare=False)
    credential_source: str | None = None

    def __repr__(self) -> str:
        kind = self.credential_source or "none"
        if self.auth_header is not None:
            kind += f" ({self.auth_header[0]})"
        return f"ClientConfig(base_url={self.base_url!r}, credentials={kind})"

    __str__ = __repr__

    @classmethod
    def from_env(
        cls, api_url: str | None = None, environ: Mapping[str, str] | None = None
    ) -> ClientConfig:
        """Read the base URL and credentials (work secret > auth token > API key > none).

        Empty variables count as unset. A work secret that is set but unusable is a
        `ConfigError`: falling back to another credential would only fail later with a
        confusing 401 (the memory endpoints reject environment keys).
        """
        env = os.environ if environ is None else environ
        base = api_url or env.get("ANTHROPIC_BASE_URL", "").strip() or DEFAULT_BASE_URL
        base_url = _check_base_url(base)
        secret = env.get("ANTHROPIC_WORK_SECRET", "").strip()
        if secret:
            token = decode_work_secret(secret)
            return cls(base_url, ("authorization", f"Bearer {token}"), "ANTHROPIC_WORK_SECRET")
        token = env.get("ANTHROPIC_AUTH_TOKEN", "").strip()
        if token:
            return cls(base_url, ("authorization", f"Bearer {token}"), "ANTHROPIC_AUTH_TOKEN")
        key = env.get("ANTHROPIC_API_KEY", "").strip()
        if key:
            return cls(base_url, ("x-api-key", key), "ANTHROPIC_API_KEY")
        return cls(base_url, None, None)


def _check_base_url(url: str) -> str:
    try:
        parsed = httpx.URL(url)
    except httpx.InvalidURL as exc:
        raise ConfigError(f"invalid API URL {url!r}: {exc}") from None
    if parsed.scheme not in ("http", "https") or not parsed.host:
        raise ConfigError(f"invalid API URL {url!r}: expected http(s)://host[:port]")
    if parsed.userinfo:
        raise ConfigError("the API URL must not contain credentials; use the environment")
    return str(parsed).rstrip("/")


def decode_work_secret(secret: str) -> str:
    """The `sessions_token` of a work-item secret (base64url JSON, padding optional)."""
    problem = "ANTHROPIC_WORK_SECRET is not a valid work-item secret"
    text = secret.strip()
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
        payload = json.loads(raw.decode("utf-8"))
    except (binascii.Error, ValueError):
        raise ConfigError(f"{problem} (expected base64url-encoded JSON)") from None
    if not isinstance(payload, dict):
        raise ConfigError(f"{problem} (its JSON is not an object)")
    token = payload.get("sessions_token")
    if not isinstance(token, str) or not token.strip():
        raise ConfigError(f"{problem} (it has no sessions_token; the memory endpoints need one)")
    return token.strip()


def is_loopback(url: str) -> bool:
    host = httpx.URL(url).host
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


# A server must accept within CONNECT_TIMEOUT and start answering (status line and
# headers) within a first-byte bound: short for a person waiting (the CLI, a mount's
# start), longer for background passes behind a busy server. TRANSFER_TIMEOUT bounds
# each gap inside a body being sent or received, the long bound for big transfers. No
# bound is looser than the SDK's own per-try bound on its memory requests (30 s, the
# `anthropic` 2.17 worker's `REQUEST_TIMEOUT`): a worker host sees the same patience.
CONNECT_TIMEOUT = 5.0
INTERACTIVE_FIRST_BYTE = 5.0
BACKGROUND_FIRST_BYTE = 30.0
TRANSFER_TIMEOUT = 30.0


_TLS_CONTEXTS: dict[tuple[bool, str | None, str | None], ssl.SSLContext] = {}


def tls_context(trust_env: bool) -> ssl.SSLContext:
    """The TLS context httpx would make (`trust_env` reads SSL_CERT_FILE and
    SSL_CERT_DIR), made once per process and setting: loading the CA bundle costs
    about 1 MB of OpenSSL heap per context. A session's store daemons are forked after
    the session made its own client, so they share the one context's pages."""
    key = (trust_env, os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR"))
    context = _TLS_CONTEXTS.get(key)
    if context is None:
        context = _TLS_CONTEXTS[key] = httpx.create_ssl_context(trust_env=trust_env)
    return context


def make_http_client(
    config: ClientConfig,
    *,
    max_connections: int = 32,
    transport: httpx.AsyncBaseTransport | None = None,
) -> httpx.AsyncClient:
    """An AsyncClient for `StoreClient`: fixed headers, the credential, pooling, timeouts.

    The pool holds `max_connections` keep-alive connections so a flush of many small
    uploads reuses them. The pool timeout is generous because waiting for a free
    connection is normal under load; a slow or dead server fails on connect/read.
    Proxy variables are ignored for loopback URLs (a local `memfs serve`).
    """
    headers = {
        "anthropic-version": ANTHROPIC_VERSION,
        "anthropic-beta": BETA_MEMORY,
        "accept": "application/json",
        "user-agent": "memfs/0.1",
    }
    if config.auth_header is not None:
        headers[config.auth_header[0]] = config.auth_header[1]
    trust_env = not is_loopback(config.base_url)
    return httpx.AsyncClient(
        base_url=config.base_url,
        verify=tls_context(trust_env),
        headers=headers,
        limits=httpx.Limits(
            max_connections=max_connections,
            max_keepalive_connections=max_connections,
            keepalive_expiry=30.0,
        ),
        timeout=httpx.Timeout(
            connect=CONNECT_TIMEOUT, read=TRANSFER_TIMEOUT, write=TRANSFER_TIMEOUT, pool=120.0
        ),
        transport=transport,
        trust_env=trust_env,
        follow_redirects=False,
    )
