"""`memfs redact PATH@VERSION`: erase one old version's content from the store for good.

PATH is a file in a live mount or `STORE_ID:/path`, as for `memfs log`. The version is
resolved like `memfs show`'s (`memver_…` or `~N`); the store itself refuses the head
version of a live memory, and that refusal is shown as the API words it. The redaction
is asked of the store directly, with the credentials in the environment: a mount's
daemon holds none it would lend, and a redaction is an administrator's act.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Awaitable, Callable
from typing import TypeVar

import trio

from memfs.cli import history_commands
from memfs.config import ExitCode
from memfs.errors import CommandFailed, ConfigError, StoreAuthError, StoreError, StoreUnavailable
from memfs.store import history
from memfs.store.client import MemoryVersion, StoreClient
from memfs.store.connection import INTERACTIVE_FIRST_BYTE, ClientConfig, make_http_client

_T = TypeVar("_T")


def add_command(command: Callable[..., argparse.ArgumentParser]) -> None:
    p = command(
        "redact",
        help="erase an old version's content and path from the store for good "
        "(the head version is refused: write a new version first)",
    )
    p.add_argument(
        "target",
        metavar="PATH@VERSION",
        help="a file in a live mount or STORE_ID:/path, then @memver_… or @~N",
    )
    p.add_argument("--yes", action="store_true", help="do not ask for confirmation")


def run(args: argparse.Namespace) -> int:
    try:
        return _redact(args)
    except CommandFailed as e:
        print(f"memfs: {e}", file=sys.stderr)
        return e.code
    except KeyboardInterrupt:
        print("memfs: interrupted", file=sys.stderr)
        return ExitCode.INTERRUPTED


def _redact(args: argparse.Namespace) -> int:
    path, spec = history.split_version(args.target)
    if spec is None or not path.strip():  # a usage error, before any mount is looked for
        shown = f"{args.target}: " if args.target.strip() else ""
        raise CommandFailed(
            f"{shown}name the version to redact (PATH@memver_… or PATH@~N)", ExitCode.USAGE
        )
    t = history_commands.target(args.target, getattr(args, "api_url", None))
    answer = history_commands.ask(t, "log")
    store_id, memory_id = answer.memory_store_id, answer.memory_id
    if memory_id is None:
        raise CommandFailed(f"{t.shown}: the store keeps no versions of it")
    config = _config(t.api_url)
    versions = _call(config, t.shown, _versions, store_id, memory_id)
    try:
        chosen = history.pick(versions, t.spec)
    except history.HistoryError as e:
        raise CommandFailed(f"{t.shown}: {e}") from None
    label = f"{answer.path}@{chosen.id}"
    if chosen.redacted_at is not None:
        print(f"{label} was already redacted at {chosen.redacted_at}")
        return ExitCode.OK
    if not args.yes and not _confirm(label, chosen):
        print("memfs: nothing redacted", file=sys.stderr)
        return ExitCode.FAILED
    done = _call(config, label, _redact_one, store_id, chosen.id)
    print(f"redacted {label} (its content and path are gone; redacted_at {done.redacted_at})")
    return ExitCode.OK


def _confirm(label: str, version: MemoryVersion) -> bool:
    if not sys.stdin.isatty():
        raise CommandFailed(
            "redact erases content for good: confirm on a terminal, or pass --yes",
            ExitCode.USAGE,
        )
    print(
        f"{label}: {version.operation} by {history.actor_name(version.created_by)} "
        f"at {version.created_at}, {version.content_size_bytes} bytes"
    )
    reply = input("Erase this version's content and path from the store for good? [y/N] ")
    return reply.strip().lower() in ("y", "yes")


def _config(api_url: str | None) -> ClientConfig:
    try:
        return ClientConfig.from_env(api_url)
    except ConfigError as e:
        raise CommandFailed(str(e), ExitCode.USAGE) from None


def _call(config: ClientConfig, shown: str, fn: Callable[..., Awaitable[_T]], *args: str) -> _T:
    """Run one async store call; its failures as the one-line errors the CLI prints."""
    try:
        return trio.run(fn, config, *args)
    except StoreUnavailable as e:
        raise CommandFailed(f"{e} (is the server running?)", ExitCode.UNREACHABLE) from None
    except StoreAuthError as e:
        raise CommandFailed(str(e), ExitCode.USAGE) from None
    except StoreError as e:
        raise CommandFailed(f"{shown}: {e}") from None


async def _versions(config: ClientConfig, store_id: str, memory_id: str) -> list[MemoryVersion]:
    async with make_http_client(config) as http:
        client = StoreClient(http, first_byte_timeout=INTERACTIVE_FIRST_BYTE)
        return await history.versions_of(client, store_id, memory_id)


async def _redact_one(config: ClientConfig, store_id: str, version_id: str) -> MemoryVersion:
    async with make_http_client(config) as http:
        client = StoreClient(http, first_byte_timeout=INTERACTIVE_FIRST_BYTE)
        return await client.redact_version(store_id, version_id)
