"""`memfs conflicts`: the conflict copies a mount kept (list, show, restore, drop).

A conflict copy holds the local bytes that lost to the store's version where both sides
changed the same lines. The daemon keeps them in its cache directory; this asks every
live mount (or one) over its control socket. A restore writes the bytes back through
the mount as an atomic save, a new local change the next pass pushes.
"""

from __future__ import annotations

import argparse
import base64
import json
import sys
from collections.abc import Callable
from typing import Any, Literal

from memfs.cli.history_commands import ASK_TIMEOUT, run_guarded, write_through_mount
from memfs.cli.manpage import LeadingWords
from memfs.config import ExitCode
from memfs.control import protocol, registry
from memfs.control.client import request
from memfs.control.codec import to_wire
from memfs.errors import CommandFailed
from memfs.logs import plural
from memfs.mount.display import printable
from memfs.paths import sha256_hex

CONFLICT_ACTIONS = {
    "show": "print a conflict copy",
    "restore": "put the losing bytes back as a new change",
    "drop": "delete a conflict copy",
}


def add_command(command: Callable[..., argparse.ArgumentParser]) -> None:
    """The parser; `command(name, help=...)` is main.py's sub-command factory."""
    p = command(
        "conflicts",
        help="the conflict copies kept for a mount: list, show, "
        "restore (put the losing bytes back as a new change), drop",
        usage="memfs conflicts [MOUNT] [--json]\n"
        "       memfs conflicts show|restore|drop ID [--mount MOUNT] [--force]",
    )
    p.add_argument(
        "words",
        nargs="*",
        metavar="ARG",
        action=LeadingWords,
        words=list(CONFLICT_ACTIONS.items()),
        help="[MOUNT], or ACTION ID",
    )
    p.add_argument(
        "--mount",
        metavar="MOUNT",
        help="look for ID in this mount only (default: every live mount)",
    )
    p.add_argument("--json", action="store_true", help="one JSON document on stdout")
    p.add_argument(
        "--force",
        action="store_true",
        help="restore: overwrite local changes that were not pushed yet",
    )


def run(args: argparse.Namespace) -> int:
    return run_guarded(_conflicts, args)


def _request(
    info: dict[str, Any], req: protocol.Conflicts
) -> protocol.ConflictsAnswer | protocol.ErrorAnswer:
    try:
        return request(info, req, timeout=ASK_TIMEOUT)
    except TimeoutError:
        raise CommandFailed(
            f"the daemon of {info['mountpoint']} did not answer within {ASK_TIMEOUT:g}s"
        ) from None
    except OSError as e:
        raise CommandFailed(f"the daemon of {info['mountpoint']} did not answer: {e}") from None


def _mounts(path: str | None) -> list[dict[str, Any]]:
    if path is None:
        return registry.live_mounts()
    info = registry.find_mount(path)
    infos = [info] if info is not None else registry.session_mounts(path)  # a session root
    if not infos:
        raise CommandFailed(f"no live memfs mount at {path}")
    return infos


def _conflicts(args: argparse.Namespace) -> int:
    words = list(args.words)
    if words and words[0] in CONFLICT_ACTIONS:
        if len(words) != 2:
            raise CommandFailed(f"usage: memfs conflicts {words[0]} ID", ExitCode.USAGE)
        return _conflict_action(words[0], words[1], args)
    if len(words) > 1:
        raise CommandFailed("usage: memfs conflicts [MOUNT] | show|restore|drop ID", ExitCode.USAGE)
    mount = words[0] if words else args.mount
    answers = []
    for info in _mounts(mount):
        try:
            answer = _request(info, protocol.Conflicts(what="list"))
        except CommandFailed:
            if mount is not None:
                raise
            continue  # gone while we asked
        if isinstance(answer, protocol.ErrorAnswer):
            print(f"memfs: {info['mountpoint']}: {answer.error}", file=sys.stderr)
            continue
        answers.append(answer)
    if args.json:
        print(json.dumps({"mounts": [to_wire(a) for a in answers]}, indent=2))
        return ExitCode.OK
    if not answers:
        print("no live memfs mounts")
    for answer in answers:
        found = answer.conflicts or []
        print(f"{answer.mountpoint}: {plural(len(found), 'conflict copy', 'conflict copies')}")
        for c in found:
            won = c.remote_version or "an unrecorded version"
            state = f"  restored {c.restored_at}" if c.restored_at else ""
            print(printable(f"  {c.id}  {c.at}  {c.path}  {c.size} B  lost to {won}{state}"))
            print(printable(f"            copy: {c.copy}"))
    return ExitCode.OK


def _find_conflict(
    conflict_id: str, mount: str | None, what: Literal["get", "drop"]
) -> tuple[dict[str, Any], protocol.KeptCopy, protocol.ConflictsAnswer]:
    """The mount that holds the copy, the copy (`conflict` or `dropped`), the answer."""
    infos = _mounts(mount)
    for info in infos:
        try:
            answer = _request(info, protocol.Conflicts(what=what, id=conflict_id))
        except CommandFailed:
            if mount is not None:
                raise
            continue  # a daemon going away while we ask every mount is not an error
        if isinstance(answer, protocol.ConflictsAnswer):
            kept = answer.dropped if what == "drop" else answer.conflict
            if kept is None:
                raise CommandFailed(f"the daemon of {info['mountpoint']} named no conflict copy")
            return info, kept, answer
        if mount is not None or not answer.error.startswith("unknown op"):
            if not answer.missing:
                raise CommandFailed(answer.error)
    raise CommandFailed(
        f"no conflict copy {conflict_id!r} in {mount or 'any live mount'} (see `memfs conflicts`)"
    )


def _conflict_action(action: str, conflict_id: str, args: argparse.Namespace) -> int:
    if action == "drop":
        _, gone, _ = _find_conflict(conflict_id, args.mount, "drop")
        print(f"dropped conflict copy {gone.id} of {gone.path} ({gone.copy})")
        return ExitCode.OK
    info, kept, answer = _find_conflict(conflict_id, args.mount, "get")
    data = base64.b64decode(answer.content_b64 or "")
    if action == "show":
        sys.stdout.buffer.write(data)
        sys.stdout.flush()
        return ExitCode.OK
    local_path, local = kept.local_path, answer.local
    if local_path is None or local is None:
        raise CommandFailed(f"the daemon of {info['mountpoint']} did not say where {kept.id} goes")
    if answer.access == "read_only":
        raise CommandFailed(f"{local_path} is in a read-only store; restore writes nothing to it")
    if isinstance(local, protocol.CopyTarget) and local.sha == sha256_hex(data):
        print(f"{local_path} already holds the bytes of conflict copy {kept.id}; nothing written")
        return ExitCode.OK
    if isinstance(local, protocol.CopyTarget) and local.dirty and not args.force:
        raise CommandFailed(
            f"{local_path} has local changes that were not pushed yet; push them "
            "first (memfs sync), or pass --force to overwrite them"
        )
    write_through_mount(local_path, data)
    _request(info, protocol.Conflicts(what="restored", id=kept.id))
    print(
        f"{local_path}: the bytes of conflict copy {kept.id} are back as a local "
        "change; the next sync pass pushes them with a precondition (if the memory "
        "changed again they lose again, and are kept again)"
    )
    return ExitCode.OK


# --------------------------------------------------------------------------- audit
