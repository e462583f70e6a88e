"""Argument parsing and exit codes only; every command's work lives in its module.

Exit codes: 0 success, 1 the operation failed, 2 bad usage or configuration,
3 the store or server could not be reached, 130 interrupted (Ctrl-C).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import Any

from memfs.config import ExitCode

STORE_IMPORT_CONCURRENCY = 16


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
    # The same options after the command name (`memfs mount … --log-file F`).
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--log-level", default=argparse.SUPPRESS,
                        choices=["debug", "info", "warning", "error"])
    common.add_argument("--log-file", default=argparse.SUPPRESS,
                        help="append logs to this file instead of stderr")
    from memfs import manpage

    manpage.add_arguments(parser)  # --print-manpage, --print-completion
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, **kw: Any) -> argparse.ArgumentParser:
        return sub.add_parser(name, parents=[common], **kw)

    serve = command("serve", help="run a Memory Stores API server (SQLite or PostgreSQL)")
    serve.add_argument("--db", help="SQLite file (default: the user's data directory) "
                       "or postgresql://… URL")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8765)
    serve.add_argument("--api-key", help="require this key (x-api-key or Bearer)")
    serve.add_argument("--max-memories", type=int, default=10_000,
                       help="memories per store (default 10000)")
    serve.add_argument("--faults", metavar="SPEC",
                       help="test only: inject faults, e.g. error=0.2,drop_after=0.05,seed=1 "
                       "(see docs/server.md)")
    serve.add_argument("--pool-size", type=int, default=8,
                       help="database connections and worker threads (default 8)")
    serve.add_argument("--shutdown-timeout", type=float, default=10.0, metavar="SECONDS",
                       help="on SIGTERM, how long requests in flight may finish (default 10)")
    from memfs.server.admin import add_arguments as add_serve_actions

    add_serve_actions(serve)

    store = command("store", help="manage memory stores")
    _add_api_options(store)
    _add_store_arguments(store)

    mount = command("mount", help="mount one memory store at a directory")
    _add_api_options(mount)
    mount.add_argument("store_id", metavar="STORE_ID")
    mount.add_argument("mountpoint", metavar="MOUNTPOINT")
    _add_mount_options(mount)
    mount.add_argument("--read-only", action="store_true",
                       help="refuse every change (EROFS), even for root")
    mount.add_argument("--cache-dir", help="this mount's cache directory "
                       "(default: ~/.cache/memfs/STORE_ID)")

    session = command("session", help="mount a session's stores (up to 8) under one root")
    _add_api_options(session)
    session.add_argument("spec", metavar="SPEC.json",
                         help='a session object, or {"resources": [...]}')
    session.add_argument("--root", default="/mnt/memory",
                         help="the session root (default /mnt/memory)")
    _add_mount_options(session)
    session.add_argument("--cache-dir", help="cache root; each store gets STORE_ID below it "
                         "(default: ~/.cache/memfs)")

    sync = command("sync", help="sync a mount now and wait for the result")
    sync.add_argument("path", metavar="PATH")
    sync.add_argument("--json", action="store_true")
    sync.add_argument("--timeout", type=float, default=120.0)

    status = command("status", help="show live mounts and their sync state")
    status.add_argument("path", metavar="PATH", nargs="?")
    status.add_argument("--json", action="store_true")

    unmount = command("unmount", help="final sync, then unmount (refused while busy)")
    unmount.add_argument("path", metavar="PATH")
    unmount.add_argument("--timeout", type=float, default=90.0)
    busy = unmount.add_mutually_exclusive_group()
    busy.add_argument("--lazy", action="store_true",
                      help="detach now; the final sync runs when the last process using "
                      "the mount lets go")
    busy.add_argument("--force", action="store_true",
                      help="final sync, then unmount even if processes use it (they get "
                      "ENOTCONN); memfs mounts nested inside are unmounted first")
    return parser


def _add_store_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="store_command", required=True, metavar="ACTION")

    def command(name: str, help_text: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_text, description=help_text)
        p.add_argument("--json", action="store_true", help="print JSON for scripts")
        return p

    p = command("create", "create a memory store")
    p.add_argument("name")
    p.add_argument("--description", default="", help="shown to agents (≤1024 chars)")
    p = command("list", "list memory stores, newest first")
    p.add_argument("--archived", action="store_true", help="include archived stores")
    p = command("show", "show a store and how many memories it holds")
    p.add_argument("store_id", metavar="ID")
    p = command("archive", "archive a store (read-only, one-way)")
    p.add_argument("store_id", metavar="ID")
    p = command("delete", "delete a store and all its memories and versions")
    p.add_argument("store_id", metavar="ID")
    p.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    p = command("import", "upload a folder tree as memories (skips identical files)")
    p.add_argument("store_id", metavar="ID")
    p.add_argument("directory", metavar="DIR")
    p.add_argument("--concurrency", type=int, default=STORE_IMPORT_CONCURRENCY,
                   help=f"uploads in flight (default {STORE_IMPORT_CONCURRENCY})")
    p = command("export", "write every memory as a file under DIR")
    p.add_argument("store_id", metavar="ID")
    p.add_argument("directory", metavar="DIR")


def _add_mount_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--sync-interval", type=float, default=15.0, metavar="SECONDS",
                        help="seconds between sync passes (default 15, minimum 5)")
    parser.add_argument("--deletions", choices=["enabled", "log_only", "disabled"],
                        default="enabled", help="what a local delete does in the store")
    parser.add_argument("--exclude", action="append", metavar="GLOB",
                        help="file names that stay local-only (repeatable)")
    parser.add_argument("--cache-max-size", metavar="SIZE",
                        help="bound on the clean contents cached per store, e.g. 200M "
                        "(unpushed changes are never evicted; default: no bound)")
    parser.add_argument("--flush-timeout", type=float, default=30.0, metavar="SECONDS",
                        help="bound on the final sync at unmount (default 30)")
    parser.add_argument("--allow-other", action="store_true",
                        help="let other users in (needs user_allow_other in /etc/fuse.conf)")
    parser.add_argument("--daemon", action="store_true",
                        help="return once the mount is live")


def main(argv: Sequence[str] | None = None) -> int:
    try:
        return _main(argv)
    except KeyboardInterrupt:  # Ctrl-C anywhere: one line, never a traceback
        print("memfs: interrupted", file=sys.stderr)
        return ExitCode.INTERRUPTED
    except BrokenPipeError:  # stdout's reader left early (`| head`, `| grep -q`)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return ExitCode.FAILED


def _main(argv: Sequence[str] | None) -> int:
    words = sys.argv[1:] if argv is None else list(argv)
    # mount(8) runs us as /sbin/mount.fuse.memfs; fuse3's mount.fuse as `memfs STORE_ID …`
    fuse3_form = bool(words) and words[0].startswith("memstore_")
    if fuse3_form or (argv is None and os.path.basename(sys.argv[0]) == "mount.fuse.memfs"):
        from memfs import mounthelper

        translated = mounthelper.translate(words)
        if isinstance(translated, int):
            return translated
        words = translated
    parser = build_parser()
    args = parser.parse_args(words)
    from memfs import logs

    logs.configure(args.log_level, args.log_file)
    if args.command == "serve" and args.serve_command is not None:
        from memfs.server import admin

        return admin.run(args)
    if args.command == "serve":
        from memfs.server import run_server

        return run_server(
            db=args.db, host=args.host, port=args.port,
            api_key=args.api_key, max_memories=args.max_memories, faults=args.faults,
            pool_size=args.pool_size, shutdown_timeout=args.shutdown_timeout,
        )
    if args.command == "store":
        from memfs import storecli

        return storecli.run(args)
    from memfs import commands

    handler = {"mount": commands.mount, "session": commands.session, "sync": commands.sync,
               "status": commands.status, "unmount": commands.unmount}.get(args.command)
    if handler is not None:
        return handler(args)
    parser.error(f"unknown command {args.command}")
    return ExitCode.USAGE


if __name__ == "__main__":
    sys.exit(main())
