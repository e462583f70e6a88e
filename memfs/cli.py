"""Argument parsing and exit codes only; every command's work lives in its module.

Exit codes: 0 success, 1 the operation failed, 2 bad usage or configuration,
3 the store or server could not be reached.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_UNREACHABLE = 3


def _add_api_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--api-url",
        help="Memory Stores API base URL (default: $ANTHROPIC_BASE_URL or the hosted API)",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="memfs", description="Mount Memory Stores as ordinary directories."
    )
    parser.add_argument("--log-level", default="info",
                        choices=["debug", "info", "warning", "error"])
    parser.add_argument("--log-file", help="append logs to this file instead of stderr")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    serve = sub.add_parser("serve", help="run a Memory Stores API server on SQLite")
    serve.add_argument("--db", help="database file (default: the user's data directory)")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8765)
    serve.add_argument("--api-key", help="require this key (x-api-key or Bearer)")
    serve.add_argument("--max-memories", type=int, default=10_000,
                       help="memories per store (default 10000)")

    store = sub.add_parser("store", help="manage memory stores")
    _add_api_options(store)
    from memfs import storecli

    storecli.add_arguments(store)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    from memfs import logs

    logs.configure(args.log_level, args.log_file)
    if args.command == "serve":
        from memfs.server import run_server

        return run_server(
            db=args.db, host=args.host, port=args.port,
            api_key=args.api_key, max_memories=args.max_memories,
        )
    if args.command == "store":
        from memfs import storecli

        return storecli.run(args)
    parser.error(f"unknown command {args.command}")
    return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
