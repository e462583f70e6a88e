"""What the commands that talk to a store directly share (`memfs store …`, its import
and export, and the history commands when no mount serves the path): the retry policy
of a command, the store looked up by id, and how names, JSON and errors are printed."""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from memfs.errors import CommandFailed, NotFound, Rejected, missing_store
from memfs.mount.display import printable
from memfs.store.client import StoreClient, StoreInfo
from memfs.store.transport import RetryPolicy

PROG = "memfs store"
# A CLI should say "unreachable" within seconds, not after a minute of back-off.
CLI_RETRY = RetryPolicy(
    max_attempts=3, base_delay=0.25, max_delay=10.0, deadline=30.0, retry_timeouts=False
)


def error(message: str) -> None:
    print(f"{PROG}: error: {printable(message)}", file=sys.stderr)


def warn(message: str) -> None:
    print(f"{PROG}: warning: {printable(message)}", file=sys.stderr)


def show_path(text: str) -> str:
    """A name that JSON and a UTF-8 stdout can carry: undecodable bytes become \\xNN."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = os.fsencode(text).decode("utf-8", "backslashreplace")
    return text


def emit_json(value: Any) -> None:
    text = json.dumps(value, indent=2, ensure_ascii=False)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates from a server: JSON escapes still work
        text = json.dumps(value, indent=2)
    print(text)


async def get_store(client: StoreClient, store_id: str) -> StoreInfo:
    try:
        return await client.retrieve_store(store_id)
    except NotFound:
        raise CommandFailed(missing_store(store_id)) from None
    except Rejected as exc:
        raise CommandFailed(f"invalid memory store id {store_id!r}: {exc.message}") from None
