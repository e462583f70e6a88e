"""`memfs store …`: manage stores (the copies in and out of folders are store_copy.py).

Every command is a thin layer over `StoreClient`. Data goes to stdout (a table, or JSON
with `--json`); errors, refusal lists and the progress bar go to stderr. Exit codes
follow `memfs.cli.main`: 0 ok, 1 failed (incl. store not found, refused files), 2 usage,
configuration or credentials, 3 the store could not be reached.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import sys
from collections.abc import Awaitable, Callable

import trio

from memfs.cli import store_copy
from memfs.cli.common import CLI_RETRY, emit_json, error, get_store
from memfs.config import ExitCode
from memfs.errors import (
    CommandFailed,
    ConfigError,
    StoreAuthError,
    StoreError,
    StoreUnavailable,
)
from memfs.mount.display import printable
from memfs.paths import (
    MARKER_PATH,
)
from memfs.store.client import StoreClient, StoreInfo
from memfs.store.connection import INTERACTIVE_FIRST_BYTE, ClientConfig, make_http_client

# --------------------------------------------------------------------------- arguments


def run(args: argparse.Namespace) -> int:
    if getattr(args, "log_level", "info") != "debug":
        # Retry notices would only precede the one-line error; --log-level debug shows them.
        logging.getLogger("memfs.client").setLevel(logging.ERROR)
    try:
        config = ClientConfig.from_env(getattr(args, "api_url", None))
        return trio.run(_dispatch, args, config)
    except CommandFailed as exc:
        error(str(exc))
        return exc.code
    except ConfigError as exc:
        error(str(exc))
        return ExitCode.USAGE
    except StoreUnavailable as exc:
        error(f"{exc} (is the server running? check --api-url or ANTHROPIC_BASE_URL)")
        return ExitCode.UNREACHABLE
    except StoreAuthError as exc:
        error(str(exc))
        return ExitCode.USAGE
    except StoreError as exc:
        error(str(exc))
        return ExitCode.FAILED
    except KeyboardInterrupt:
        error("interrupted")
        return 130


async def _dispatch(args: argparse.Namespace, config: ClientConfig) -> int:
    handlers: dict[str, Callable[[StoreClient, argparse.Namespace], Awaitable[int]]] = {
        "create": _create,
        "list": _list,
        "show": _show,
        "archive": _archive,
        "delete": _delete,
        "import": store_copy.import_tree,
        "export": store_copy.export_tree,
    }
    handler = handlers[args.store_command]
    # Bulk copies retry a slow answer too: one timeout among thousands of uploads to a
    # busy server should not end the run; single calls report a hung server at once.
    bulk = args.store_command in ("import", "export")
    retry = dataclasses.replace(CLI_RETRY, retry_timeouts=True) if bulk else CLI_RETRY
    async with make_http_client(config) as http:
        client = StoreClient(http, retry=retry, first_byte_timeout=INTERACTIVE_FIRST_BYTE)
        return await handler(client, args)


def _store_lines(store: StoreInfo) -> list[str]:
    lines = [
        f"id:          {store.id}",
        f"name:        {store.name}",
        f"description: {store.description}",
        f"created_at:  {store.created_at}",
        f"updated_at:  {store.updated_at}",
        f"archived_at: {store.archived_at or '-'}",
    ]
    for key, value in sorted(store.metadata.items()):
        lines.append(f"metadata.{key}: {value}")
    return [printable(line) for line in lines]


# --------------------------------------------------------------------------- simple commands


async def _create(client: StoreClient, args: argparse.Namespace) -> int:
    store = await client.create_store(args.name, args.description)
    if args.json:
        emit_json(store.to_json())
    else:
        print(store.id)
    return ExitCode.OK


async def _list(client: StoreClient, args: argparse.Namespace) -> int:
    stores = await client.list_stores(include_archived=args.archived)
    if args.json:
        emit_json([s.to_json() for s in stores])
        return ExitCode.OK
    if not stores:
        print("no memory stores", file=sys.stderr)
        return ExitCode.OK
    width = max(len(s.id) for s in stores)
    print(f"{'ID':<{width}}  {'CREATED':<20}  {'STATE':<8}  NAME")
    for s in stores:
        state = "archived" if s.archived_at else "active"
        print(printable(f"{s.id:<{width}}  {s.created_at[:19]:<20}  {state:<8}  {s.name}"))
    return ExitCode.OK


async def _show(client: StoreClient, args: argparse.Namespace) -> int:
    store = await get_store(client, args.store_id)
    memories = await client.list_memories(store.id)
    count = sum(1 for m in memories if m.path != MARKER_PATH)
    size = sum(m.content_size_bytes for m in memories if m.path != MARKER_PATH)
    if args.json:
        emit_json({**store.to_json(), "memories": count, "bytes": size})
    else:
        print("\n".join(_store_lines(store)))
        print(f"memories:    {count}\nbytes:       {size}")
    return ExitCode.OK


async def _archive(client: StoreClient, args: argparse.Namespace) -> int:
    await get_store(client, args.store_id)
    store = await client.archive_store(args.store_id)
    if args.json:
        emit_json(store.to_json())
    else:
        print(f"archived {store.id} ({printable(store.name)}); it is now read-only")
    return ExitCode.OK


async def _delete(client: StoreClient, args: argparse.Namespace) -> int:
    store = await get_store(client, args.store_id)  # a missing store is said first
    if not args.yes and not sys.stdin.isatty():
        raise CommandFailed(
            f"refusing to delete {store.id} without --yes (stdin is not a terminal)", ExitCode.USAGE
        )
    if not args.yes:
        prompt = (
            f"Delete memory store {store.id} ({printable(store.name)}) with all its "
            "memories and versions? This cannot be undone. [y/N] "
        )
        answer = await trio.to_thread.run_sync(_ask, prompt)
        if answer.strip().lower() not in ("y", "yes"):
            raise CommandFailed("not deleted")
    await client.delete_store(store.id)
    if args.json:
        emit_json({"id": store.id, "deleted": True})
    else:
        print(f"deleted {store.id}")
    return ExitCode.OK


def _ask(prompt: str) -> str:
    sys.stderr.write(prompt)
    sys.stderr.flush()
    return sys.stdin.readline()
