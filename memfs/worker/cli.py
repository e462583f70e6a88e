"""`memfs-worker`: serve self-hosted sessions with the SDK's `EnvironmentWorker`, memory
mounted by memfs (the commands docs/worker.md uses)."""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
from collections.abc import Sequence
from typing import Any

import anyio
from anthropic.lib.tools._memories import DEFAULT_MEMORY_SYNC_INTERVAL, SessionMemoryError

from memfs import logs
from memfs.config import STOP_SIGNALS
from memfs.worker.sdk import SDKMismatch, environment_worker

log = logging.getLogger("memfs.worker")


def _secret_from_stdin() -> None:
    """`ant beta:worker poll --on-work` hands the work item JSON on stdin."""
    if os.environ.get("ANTHROPIC_WORK_SECRET") or sys.stdin is None or sys.stdin.isatty():
        return
    try:
        item = json.loads(sys.stdin.read() or "null")
    except ValueError:
        return
    if isinstance(item, dict) and isinstance(item.get("secret"), str) and item["secret"]:
        os.environ["ANTHROPIC_WORK_SECRET"] = item["secret"]


def _parser() -> argparse.ArgumentParser:
    from memfs import __version__

    parser = argparse.ArgumentParser(
        prog="memfs-worker",
        description="Serve self-hosted sessions with the SDK's EnvironmentWorker, memory "
        "stores mounted by memfs.",
    )
    parser.add_argument("--version", action="version", version=f"memfs-worker {__version__}")
    parser.add_argument(
        "--log-level",
        default="info",
        choices=["debug", "info", "warning", "error"],
        help="least severe log lines shown (default info; HTTP requests are debug)",
    )
    parser.add_argument(
        "--log-file",
        metavar="FILE",
        default=None,
        help="append the worker's log lines to FILE (default: stderr); each mount daemon "
        "logs to memfs.log in the cache root (--cache-dir, default ~/.cache/memfs)",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    item = sub.add_parser(
        "handle-item",
        help="serve one claimed work item (an --on-work "
        "script); reads ANTHROPIC_* and the work item JSON on stdin",
    )
    poll = sub.add_parser("poll", help="poll an environment and serve its sessions forever")
    poll.add_argument(
        "--environment-id",
        default=os.environ.get("ANTHROPIC_ENVIRONMENT_ID"),
        help="the environment to poll (default $ANTHROPIC_ENVIRONMENT_ID)",
    )
    for p in (item, poll):
        p.add_argument("--workdir", default=None, help="the tools' working directory")
        p.add_argument(
            "--cache-dir",
            default=None,
            metavar="DIR",
            help="memfs cache root: each store's cache is DIR/STORE_ID, the mount daemons "
            "log to DIR/memfs.log (default ~/.cache/memfs)",
        )
        p.add_argument(
            "--sync-interval",
            type=float,
            default=DEFAULT_MEMORY_SYNC_INTERVAL,
            metavar="SECONDS",
            help="seconds between the sessions' memory sync passes (default "
            f"{DEFAULT_MEMORY_SYNC_INTERVAL:g}, as the SDK's memory_sync_interval)",
        )
        p.add_argument(
            "--deletions",
            choices=["enabled", "log_only", "disabled"],
            default="enabled",
            help="what a local delete does in the store (default enabled)",
        )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logs.configure(args.log_level, args.log_file, http_requests=True)
    from anthropic import AsyncAnthropic

    options: dict[str, Any] = {
        "workdir": args.workdir,
        "memory_sync_interval": args.sync_interval,
        "memory_sync_deletions": args.deletions,
    }
    if args.command == "handle-item":
        _secret_from_stdin()
    else:
        key = os.environ.get("ANTHROPIC_ENVIRONMENT_KEY")
        if not args.environment_id or not key:
            print(
                "memfs-worker: poll needs --environment-id (or ANTHROPIC_ENVIRONMENT_ID) "
                "and ANTHROPIC_ENVIRONMENT_KEY",
                file=sys.stderr,
            )
            return 2
        options.update(environment_id=args.environment_id, environment_key=key)

    async def serve() -> None:
        worker = environment_worker(AsyncAnthropic(), cache_dir=args.cache_dir, **options)
        with anyio.open_signal_receiver(*STOP_SIGNALS) as signals:
            async with anyio.create_task_group() as tg:

                async def stop_on_signal() -> None:
                    async for signum in signals:
                        log.info(
                            "stopping; the session gets its teardown signal=%s",
                            signal.Signals(signum).name,
                        )
                        tg.cancel_scope.cancel()
                        return

                tg.start_soon(stop_on_signal)
                try:
                    if args.command == "handle-item":
                        await worker.handle_item()
                    else:
                        await worker.run()
                except Exception as e:  # raised below, outside the task group
                    failed.append(e)
                tg.cancel_scope.cancel()
        if failed:
            raise failed[0]

    failed: list[Exception] = []

    try:
        anyio.run(serve)
    except ValueError as e:  # a missing ANTHROPIC_* variable or credential
        print(f"memfs-worker: {e}", file=sys.stderr)
        return 2
    except (SessionMemoryError, SDKMismatch) as e:
        print(f"memfs-worker: {e}", file=sys.stderr)
        return 1
    return 0
