"""`memfs audit`: every change a mount accepted, who made it, and what sync did with it.

Read from the audit trail in the cache directory (memfs/audit.py), so it works for a
live mount, a killed one, or a cache directory with no mount at all.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from memfs.cli.history_commands import run_guarded
from memfs.config import ExitCode
from memfs.control import registry
from memfs.errors import CommandFailed
from memfs.mount.display import printable


def add_command(command: Callable[..., argparse.ArgumentParser]) -> None:
    """The parser; `command(name, help=...)` is main.py's sub-command factory."""
    p = command(
        "audit",
        help="every change a mount accepted: when, which process, and "
        "what sync did with it (read from the cache directory)",
    )
    p.add_argument(
        "mount",
        metavar="MOUNT",
        nargs="?",
        help="a live or dead (killed) mount; or give --cache-dir",
    )
    p.add_argument("--since", metavar="WHEN", help="30m, 2h, 1d (ago), or an ISO time")
    p.add_argument(
        "--path",
        metavar="PATH",
        help="only changes to PATH or below it (a path in the mount, or a store path)",
    )
    p.add_argument(
        "--cache-dir",
        metavar="DIR",
        help="read the trail in DIR (a store's "
        "cache directory, or a session's cache root) without a mount",
    )
    p.add_argument("--json", action="store_true", help="one JSON document on stdout")


def run(args: argparse.Namespace) -> int:
    return run_guarded(_audit, args)


def _trail_dirs(args: argparse.Namespace) -> tuple[list[Path], list[str]]:
    """The cache directories to read, and the mount's exclude patterns."""
    from memfs.audit import TRAIL_NAME

    if args.cache_dir:
        root = Path(args.cache_dir).expanduser()
        if (root / TRAIL_NAME).exists() or not root.is_dir():
            return [root], []
        return sorted(p.parent for p in root.glob(f"*/{TRAIL_NAME}")), []
    if args.mount is None:
        raise CommandFailed("name a MOUNT, or the trail's --cache-dir", ExitCode.USAGE)
    found = registry.find_mount(args.mount) or registry.find_dead_mount(args.mount)
    infos = [found] if found is not None else registry.session_mounts(args.mount)
    if not infos:
        raise CommandFailed(
            f"no memfs mount at {args.mount} (after an unmount, read the trail with --cache-dir)"
        )
    dirs = [Path(str(d)) for info in infos for d in (info.get("caches") or {}).values()]
    return dirs, [str(e) for e in infos[0].get("excludes") or []]


def _audit(args: argparse.Namespace) -> int:
    from memfs import audit

    dirs, excludes = _trail_dirs(args)
    for d in dirs:
        trail_file = d / audit.TRAIL_NAME
        if trail_file.exists() and not os.access(trail_file, os.R_OK):
            raise CommandFailed(
                f"cannot read the audit trail {trail_file}: permission denied "
                "(run as the user the mount runs as)"
            )
    try:
        since = audit.parse_since(args.since) if args.since else None
    except ValueError as e:
        raise CommandFailed(str(e), ExitCode.USAGE) from None
    records = audit.outcomes(audit.read_trail(dirs), excludes)
    audit.place(records)
    # --path is a path in the mount (relative to here, or absolute) or a store path.
    wanted = (args.path, os.path.abspath(args.path)) if args.path else ()
    shown = list(audit.select(records, since=since, paths=wanted))
    if wanted:
        shown = [r for r in shown if r.get("kind") == "change"]
    else:
        shown = [r for r in shown if r.get("kind") in ("change", "mount")]
    if args.json:
        print(json.dumps({"records": shown}, indent=2))
        return ExitCode.OK
    for r in shown:
        print(printable(audit_line(r)))
    return ExitCode.OK


def audit_line(r: dict[str, Any]) -> str:
    at = str(r.get("at", ""))[:23] + "Z"
    if r.get("kind") == "mount":
        return f"{at}  memfs[{r.get('pid')}]  {r.get('op')}  {r.get('mount_path') or ''}"
    who = f"{r.get('comm')}[{r.get('pid')}]"
    where = str(r.get("local_path") or r.get("path"))
    if r.get("op") == "rename":
        where += f" -> {r.get('local_to') or r.get('to')}"
    if r.get("op") == "truncate":
        where += f" (to {r.get('size')} B)"
    return f"{at}  {who:<20} {r.get('op'):<8} {where}  => {describe(r.get('outcome'))}"


def describe(outcome: dict[str, Any] | None) -> str:
    """What became of a change, in words."""
    if not outcome:
        return "not pushed yet"
    op = outcome.get("op")
    if op == "pushed":
        return f"pushed as {outcome.get('version') or 'a new version'}"
    if op == "conflict":
        return (
            f"lost a conflict to {outcome.get('version') or 'the remote version'}; "
            f"the local bytes are kept ({outcome.get('copy')})"
        )
    if op == "refused":
        return f"refused by the store: {outcome.get('why')}"
    if op == "deleted":
        return "deleted in the store"
    if op == "undeleted":
        return f"not deleted: {outcome.get('why')}"
    if op == "kept":
        return f"not deleted ({outcome.get('why')})"
    if op == "local":
        return f"local only ({outcome.get('why')})"
    if op == "removed":
        return str(outcome.get("why"))
    return str(op)
