"""`memfs serve token …` and `memfs serve copy`: offline administration of a database.

They open the database directly (as `memfs serve` does, migrating it) and need no
running server; on PostgreSQL any host that can reach the database can issue tokens.
"""

from __future__ import annotations

import argparse
import json
import sys

from memfs.config import ExitCode
from memfs.logs import plural
from memfs.server import tokens
from memfs.server.backends import UnknownBackend, describe_spec, open_storage
from memfs.server.copy import CopyRefused, copy_database
from memfs.server.db import DatabaseUnavailable, Storage
from memfs.server.errors import ApiError


def _fail(message: str, code: int = ExitCode.USAGE) -> int:
    print(f"memfs serve: {message}", file=sys.stderr, flush=True)
    return code


def _open(spec: str | None) -> Storage:
    return open_storage(spec, pool_size=2)


def run_token(args: argparse.Namespace) -> int:
    try:
        if args.token_command == "create":
            scopes = dict(tokens.parse_scope(s) for s in args.store)
            ttl = tokens.parse_duration(args.ttl)
    except ValueError as exc:
        return _fail(str(exc))
    try:
        db = _open(args.db)
    except (UnknownBackend, DatabaseUnavailable) as exc:
        return _fail(f"cannot use the database {describe_spec(args.db)}: {exc}")
    try:
        if args.token_command == "create":
            try:
                record = db.create_token(scopes, ttl)
            except ApiError as exc:
                return _fail(exc.message, ExitCode.FAILED)
            if args.json:
                print(json.dumps(record, indent=2))
            else:
                print(record["token"])
                print(
                    f"memfs serve: token {record['id']} expires {record['expires_at']}",
                    file=sys.stderr,
                )
            return ExitCode.OK
        if args.token_command == "list":
            listed = db.list_tokens()
            if args.json:
                print(json.dumps(listed, indent=2))
            for item in () if args.json else listed:
                shown = " ".join(
                    f"{k}:{'ro' if v == tokens.READ_ONLY else 'rw'}"
                    for k, v in sorted(item["scopes"].items())
                )
                state = "revoked" if item["revoked_at"] else f"expires {item['expires_at']}"
                print(f"{item['id']}  {state}  {shown}")
            return ExitCode.OK
        if not db.revoke_token(args.token_id):
            return _fail(f"no token {args.token_id}", ExitCode.FAILED)
        return ExitCode.OK
    finally:
        db.close()


def run_copy(args: argparse.Namespace) -> int:
    if args.source == args.target:
        return _fail("--from and --to are the same database")
    opened: list[Storage] = []
    try:
        for spec in (args.source, args.target):
            try:
                opened.append(_open(spec))
            except (UnknownBackend, DatabaseUnavailable) as exc:
                return _fail(f"cannot use the database {describe_spec(spec)}: {exc}")
        try:
            report = copy_database(opened[0], opened[1])
        except CopyRefused as exc:
            return _fail(str(exc), ExitCode.FAILED)
        except ApiError as exc:
            return _fail(exc.message, ExitCode.FAILED)
        c = report.counts
        print(
            f"memfs serve: copied {plural(c['stores'], 'store')}, "
            f"{plural(c['memories'], 'memory', 'memories')}, "
            f"{plural(c['versions'], 'version')}, {plural(c['tokens'], 'token')} to "
            f"{describe_spec(args.target)}; verified sha256={report.digest}"
        )
        return ExitCode.OK
    finally:
        for db in opened:
            db.close()


def add_arguments(serve: argparse.ArgumentParser) -> None:
    """`serve token {create,list,revoke}` and `serve copy` under the serve command."""
    sub = serve.add_subparsers(dest="serve_command", metavar="ACTION")
    token = sub.add_parser("token", help="issue, list and revoke scoped bearer tokens")
    tsub = token.add_subparsers(dest="token_command", required=True, metavar="ACTION")
    create = tsub.add_parser("create", help="issue a token bound to stores; prints it")
    create.add_argument(
        "--store",
        action="append",
        required=True,
        metavar="ID[:ro]",
        help="a store the token opens, read_write, or read_only with :ro (repeatable)",
    )
    create.add_argument("--ttl", default="8h", help="lifetime, e.g. 30m, 8h, 7d (default 8h)")
    create.add_argument("--json", action="store_true", help="print the token record as JSON")
    listing = tsub.add_parser("list", help="every token's id, scopes and expiry")
    listing.add_argument("--json", action="store_true", help="print JSON for scripts")
    revoke = tsub.add_parser("revoke", help="revoke a token by id (tok_…)")
    revoke.add_argument("token_id", metavar="TOKEN_ID", help="the token's id (tok_…)")
    for p in (create, listing, revoke):
        p.add_argument(
            "--db",
            default=argparse.SUPPRESS,
            help="SQLite file or postgresql:// URL (as for serve)",
        )
    copy = sub.add_parser(
        "copy",
        help="copy every store, memory, version and token "
        "into an empty database (any backend to any backend)",
    )
    copy.add_argument(
        "--from",
        dest="source",
        required=True,
        metavar="DB",
        help="the database to read: SQLite file or postgresql:// URL",
    )
    copy.add_argument(
        "--to",
        dest="target",
        required=True,
        metavar="DB",
        help="the empty database to fill: SQLite file or postgresql:// URL",
    )


def run(args: argparse.Namespace) -> int:
    if args.serve_command == "token":
        return run_token(args)
    return run_copy(args)
