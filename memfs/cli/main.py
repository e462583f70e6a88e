"""Argument parsing and exit codes only; every command's work lives in its module.

Exit codes are `memfs.config.ExitCode` (the table in docs/operations.md).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import Any

from memfs.cli import options
from memfs.config import ExitCode
from memfs.errors import ConfigError

STORE_IMPORT_CONCURRENCY = 16
STORE_ID_HELP = "the store's id (memstore_…)"
STORE_NAME_MAX = 255


def _store_name(text: str) -> str:
    """The server's rules for a name, checked here so a bad one is a usage error
    (exit 2) with `store create`'s usage, not the server's 400 after a round trip."""
    if not text:
        raise argparse.ArgumentTypeError("the store name must not be empty")
    if len(text) > STORE_NAME_MAX:
        raise argparse.ArgumentTypeError(
            f"the store name is {len(text)} characters; at most {STORE_NAME_MAX}"
        )
    if any(ord(ch) < 0x20 or 0x7F <= ord(ch) < 0xA0 for ch in text):
        raise argparse.ArgumentTypeError("the store name must not contain control characters")
    return text


class _Parser(argparse.ArgumentParser):
    """An argument parser whose errors show its own usage, not the top level's.

    argparse hands a subcommand's unknown arguments up to the top-level parser, which
    then prints `memfs`'s usage for a mistake made after `memfs mount`.
    """

    def parse_known_args(  # type: ignore[override]
        self,
        args: Sequence[str] | None = None,
        namespace: argparse.Namespace | None = None,
    ) -> tuple[argparse.Namespace, list[str]]:
        parsed, extras = super().parse_known_args(args, namespace)
        if extras:
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        return parsed, extras


def _add_global_options(parser: argparse.ArgumentParser, *, top: bool) -> None:
    """The options every command takes, before or after the action words.

    Below the top level they default to SUPPRESS, so a value given earlier on the
    command line is not reset by a later parser that did not see one.
    """

    group = parser.add_argument_group("global options (accepted before or after the command)")
    options.add_global_arguments(group, top=top)


def _subparsers(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in dict.fromkeys(action.choices.values()):
                found += [child, *_subparsers(child)]
    return found


def build_parser() -> argparse.ArgumentParser:
    from memfs import __version__

    parser = _Parser(prog="memfs", description="Mount Memory Stores as ordinary directories.")
    parser.add_argument(
        "--version",
        action="version",
        version=f"memfs {__version__}",
        help="print the version and exit",
    )
    _add_global_options(parser, top=True)
    from memfs.cli import manpage

    manpage.add_arguments(parser)  # --print-manpage, --print-completion
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, **kw: Any) -> argparse.ArgumentParser:
        return sub.add_parser(name, description=kw.get("help"), **kw)

    serve = command("serve", help="run a Memory Stores API server (SQLite or PostgreSQL)")
    serve.add_argument(
        "--db", help="SQLite file (default: the user's data directory) or postgresql://… URL"
    )
    serve.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to listen on (default 127.0.0.1: this host only)",
    )
    serve.add_argument(
        "--port",
        type=int,
        default=8765,
        help="TCP port to listen on; 0 picks a free one (default 8765)",
    )
    key = serve.add_mutually_exclusive_group()
    key.add_argument(
        "--api-key-file",
        metavar="FILE",
        help="require the key in FILE (mode 0600) as x-api-key or Bearer; or set "
        "MEMFS_SERVE_API_KEY (default: accept any request)",
    )
    key.add_argument(
        "--api-key",
        metavar="KEY",
        help="the same, but every local user sees KEY in ps: prefer --api-key-file "
        "(default: accept any request)",
    )
    serve.add_argument(
        "--max-memories",
        type=int,
        default=10_000,
        metavar="N",
        help="memories per store (default 10000)",
    )
    serve.add_argument(
        "--faults",
        metavar="SPEC",
        help="test only: inject faults, e.g. error=0.2,drop_after=0.05,seed=1 (see docs/server.md)",
    )
    serve.add_argument(
        "--pool-size",
        type=int,
        default=8,
        metavar="N",
        help="database connections and worker threads (default 8)",
    )
    serve.add_argument(
        "--shutdown-timeout",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="on SIGTERM, how long requests in flight may finish (default 10)",
    )
    serve.add_argument(
        "--max-watchers",
        type=int,
        default=1000,
        metavar="N",
        help="watches (memfs's change feed) open at once; more get 429 and probe "
        "(default 1000; 0 turns the watch off)",
    )
    serve.add_argument(
        "--allowed-host",
        dest="allowed_hosts",
        action="append",
        metavar="NAME",
        help="without a key, also answer requests to host NAME (repeatable; default: only "
        "localhost, names under .localhost and IP addresses, against DNS rebinding)",
    )
    serve.add_argument(
        "--no-console",
        dest="console",
        action="store_false",
        help="do not serve the web console at /console (docs/console.md)",
    )
    options.add_arguments(serve, "serve")  # --metrics-addr
    from memfs.server.admin import add_arguments as add_serve_actions

    add_serve_actions(serve)

    store = command("store", help="manage memory stores")
    _add_store_arguments(store)

    mount = command("mount", help="mount one memory store at a directory")
    mount.add_argument("store_id", metavar="STORE_ID", help="the store's id (memstore_…)")
    mount.add_argument("mountpoint", metavar="MOUNTPOINT", help="an existing empty directory")
    options.add_arguments(mount, "mount")  # memfs/cli/options.py

    session = command("session", help="mount a session's stores (up to 8) under one root")
    session.add_argument(
        "spec",
        metavar="SPEC.json",
        nargs="?",
        help='a session object, or {"resources": [...]}; without it, the '
        "session named by --session-id is read from the Sessions API",
    )
    session.add_argument(
        "--session-id",
        metavar="ID",
        help="read the session object from GET /v1/sessions/ID (default: "
        "$ANTHROPIC_SESSION_ID when no SPEC.json is given)",
    )
    session.add_argument(
        "--root",
        default="/mnt/memory",
        help="the session root, an existing directory; relative paths "
        "are taken from the current directory (default /mnt/memory)",
    )
    options.add_arguments(session, "session")

    sync = command("sync", help="sync a mount now and wait for the result")
    sync.add_argument(
        "path",
        metavar="PATH",
        help="the mount point or a directory in it (a pass of the store), or a file in "
        "it (push that file now and wait for the store's answer)",
    )
    sync.add_argument(
        "--json",
        action="store_true",
        help="print the result as JSON (the schema of `status --json`)",
    )
    sync.add_argument(
        "--full",
        action="store_true",
        help="list the whole store (reconciliation) instead of reading its change feed",
    )
    sync.add_argument(
        "--timeout",
        type=float,
        default=120.0,
        metavar="SECONDS",
        help="stop waiting after SECONDS; the pass goes on in the daemon (default 120)",
    )

    status = command("status", help="show live mounts and their sync state")
    status.add_argument(
        "path",
        metavar="PATH",
        nargs="?",
        help="the mount point, or any path inside it (default: every mount of this user)",
    )
    status.add_argument(
        "--json",
        action="store_true",
        help="print JSON (also the default when stdout is not a terminal)",
    )

    unmount = command("unmount", help="final sync, then unmount (refused while busy)")
    unmount.add_argument("path", metavar="PATH", help="the mount point, or any path inside it")
    unmount.add_argument(
        "--timeout",
        type=float,
        default=90.0,
        metavar="SECONDS",
        help="stop waiting after SECONDS; the daemon goes on with the "
        "final sync, then unmounts (default 90)",
    )
    busy = unmount.add_mutually_exclusive_group()
    busy.add_argument(
        "--lazy",
        action="store_true",
        help="detach now; the final sync runs when the last process using the mount lets go",
    )
    busy.add_argument(
        "--force",
        action="store_true",
        help="final sync, then unmount even if processes use it (they get "
        "ENOTCONN); memfs mounts nested inside are unmounted first",
    )
    from memfs.cli import audit_command, conflict_commands, history_commands

    history_commands.add_commands(command)  # log, show, diff, restore
    conflict_commands.add_command(command)
    audit_command.add_command(command)
    from memfs.cli import redact_command

    redact_command.add_command(command)
    for child in _subparsers(parser):
        _add_global_options(child, top=False)
    return parser


def _add_store_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="store_command", required=True, metavar="ACTION")

    def command(name: str, help_text: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_text, description=help_text)
        p.add_argument("--json", action="store_true", help="print JSON for scripts")
        return p

    p = command("create", "create a memory store")
    p.add_argument("name", type=_store_name, help="the store's name (1 to 255 characters)")
    p.add_argument(
        "--description", default="", help="shown to agents, up to 1024 characters (default: none)"
    )
    p = command("list", "list memory stores, newest first")
    p.add_argument("--archived", action="store_true", help="include archived stores")
    p = command("show", "show a store and how many memories it holds")
    p.add_argument("store_id", metavar="ID", help=STORE_ID_HELP)
    p = command("archive", "archive a store (read-only, one-way)")
    p.add_argument("store_id", metavar="ID", help=STORE_ID_HELP)
    p = command("delete", "delete a store and all its memories and versions")
    p.add_argument("store_id", metavar="ID", help=STORE_ID_HELP)
    p.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    p = command("import", "upload a folder tree as memories (skips identical files)")
    p.add_argument("store_id", metavar="ID", help=STORE_ID_HELP)
    p.add_argument("directory", metavar="DIR", help="the folder to upload")
    p.add_argument(
        "--concurrency",
        type=int,
        default=STORE_IMPORT_CONCURRENCY,
        metavar="N",
        help=f"uploads in flight (default {STORE_IMPORT_CONCURRENCY})",
    )
    p = command("export", "write every memory as a file under DIR")
    p.add_argument("store_id", metavar="ID", help=STORE_ID_HELP)
    p.add_argument("directory", metavar="DIR", help="where the files go (created if missing)")


def main(argv: Sequence[str] | None = None) -> int:
    try:
        return _main(argv)
    except KeyboardInterrupt:  # Ctrl-C anywhere: one line, never a traceback
        print("memfs: interrupted", file=sys.stderr)
        return ExitCode.INTERRUPTED
    except ConfigError as e:  # e.g. no private runtime directory: one line, never a traceback
        print(f"memfs: {e}", file=sys.stderr)
        return ExitCode.USAGE
    except BrokenPipeError:  # stdout's reader left early (`| head`, `| grep -q`)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return ExitCode.FAILED


def _main(argv: Sequence[str] | None) -> int:
    words = sys.argv[1:] if argv is None else list(argv)
    # mount(8) runs us as /sbin/mount.fuse.memfs; fuse3's mount.fuse as `memfs STORE_ID …`
    fuse3_form = bool(words) and words[0].startswith("memstore_")
    if fuse3_form or (argv is None and os.path.basename(sys.argv[0]) == "mount.fuse.memfs"):
        from memfs.cli import mounthelper

        translated = mounthelper.translate(words)
        if isinstance(translated, int):
            return translated
        words = translated
    parser = build_parser()
    args = parser.parse_args(words)
    from memfs import logs

    logs.configure(args.log_level, args.log_file, args.log_format)
    if args.command == "serve" and args.serve_command is not None:
        from memfs.server import admin

        return admin.run(args)
    if args.command == "serve":
        from memfs.server.run import admin_key, run_server

        try:
            api_key = admin_key(args.api_key, args.api_key_file, os.environ)
        except ConfigError as exc:
            print(f"memfs serve: {exc}", file=sys.stderr, flush=True)
            return ExitCode.USAGE
        return run_server(
            db=args.db,
            host=args.host,
            port=args.port,
            api_key=api_key,
            max_memories=args.max_memories,
            faults=args.faults,
            pool_size=args.pool_size,
            shutdown_timeout=args.shutdown_timeout,
            metrics_addr=args.metrics_addr,
            console=args.console,
            max_watchers=args.max_watchers,
            allowed_hosts=args.allowed_hosts or (),
        )
    if args.command == "store":
        from memfs.cli import store_commands

        return store_commands.run(args)
    from memfs.cli import commands, history_commands

    if args.command in history_commands.COMMANDS:
        return history_commands.run(args)
    if args.command == "conflicts":
        from memfs.cli import conflict_commands

        return conflict_commands.run(args)
    if args.command == "audit":
        from memfs.cli import audit_command

        return audit_command.run(args)
    if args.command == "redact":
        from memfs.cli import redact_command

        return redact_command.run(args)
    handler = {
        "mount": commands.mount,
        "session": commands.session,
        "sync": commands.sync,
        "status": commands.status,
        "unmount": commands.unmount,
    }.get(args.command)
    if handler is not None:
        return handler(args)
    parser.error(f"unknown command {args.command}")
    return ExitCode.USAGE
