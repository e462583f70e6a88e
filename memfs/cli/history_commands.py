"""`memfs log | show | diff | restore`: a memory's past from the shell.

PATH is a file in a live mount (the daemon answers: it knows the file's memory id and
holds the credentials) or `STORE_ID:/path` (this process asks the store itself, with
the credentials in the environment). A restore never rewrites history: through a mount
it is a new local change, written as an atomic save and pushed by the next sync pass
with a precondition; for `STORE_ID:/path` it is an update with a precondition.
Nothing here is imported before one of these commands runs (cli.py stays quick).
"""

from __future__ import annotations

import argparse
import difflib
import errno
import json
import logging
import os
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from memfs.config import ExitCode
from memfs.control import protocol, registry
from memfs.control.client import request
from memfs.control.codec import to_wire
from memfs.errors import CommandFailed
from memfs.mount.display import printable

COMMANDS = ("log", "show", "diff", "restore")
STORE_FORM = re.compile(r"([A-Za-z0-9][A-Za-z0-9_-]*):(/.*)")
# The temporary name of an atomic restore: excluded from sync (DEFAULT_EXCLUDES has
# `.#*`), so no pass can push it before it is renamed over the file.
TEMP_PREFIX = ".#memfs-restore-"
ASK_TIMEOUT = 60.0


def add_commands(command: Callable[..., argparse.ArgumentParser]) -> None:
    """The parsers; `command(name, help=...)` is main.py's sub-command factory."""
    where = (
        "a file in a live mount, or STORE_ID:/path (then the store is asked "
        "directly, with the credentials in the environment)"
    )
    p = command("log", help="a memory's versions, newest first")
    p.add_argument("path", metavar="PATH", help=where)
    p.add_argument("--json", action="store_true", help="one JSON document on stdout")
    p = command("show", help="print one version's content (PATH@VERSION; default head)")
    p.add_argument(
        "path",
        metavar="PATH[@VERSION]",
        help="VERSION: a memver_ id, head, or ~N (N versions before the newest)",
    )
    p = command(
        "diff",
        help="unified diff between two versions, or a version and the "
        "local file (default: the store's head against the local file)",
    )
    p.add_argument("path", metavar="PATH[@A]", help=f"{where}; A: a version (default head)")
    p.add_argument(
        "other",
        metavar="@B",
        nargs="?",
        help="the other side: @VERSION or @local (default @local in a mount)",
    )
    p = command(
        "restore", help="write an old version back as a new change (history is never rewritten)"
    )
    p.add_argument("path", metavar="PATH", help=where)
    p.add_argument("--to", required=True, metavar="VERSION", help="a memver_ id, head, or ~N")
    p.add_argument(
        "--force", action="store_true", help="overwrite local changes that were not pushed yet"
    )


def run(args: argparse.Namespace) -> int:
    handler = {"log": _log, "show": _show, "diff": _diff, "restore": _restore}
    return run_guarded(handler[args.command], args)


def run_guarded(handler: Callable[[argparse.Namespace], int], args: argparse.Namespace) -> int:
    """One command's exit: a `CommandFailed` or Ctrl-C is one line on stderr."""
    if getattr(args, "log_level", "info") != "debug":
        # As in `memfs store`: retry notices would only precede the one-line error.
        logging.getLogger("memfs.client").setLevel(logging.ERROR)
    try:
        return handler(args)
    except CommandFailed as e:
        print(f"memfs: {printable(str(e))}", file=sys.stderr)
        return e.code
    except KeyboardInterrupt:
        print("memfs: interrupted", file=sys.stderr)
        return ExitCode.INTERRUPTED


# --------------------------------------------------------------------------- targets


@dataclass
class Target:
    """What PATH names: a file in a mount (`info`, `rel`, `local`) or a store path."""

    shown: str
    spec: str | None
    info: dict[str, Any] | None = None
    rel: str = ""
    local: str = ""
    store_id: str = ""
    path: str = ""
    api_url: str | None = None


def target(arg: str, api_url: str | None = None) -> Target:
    from memfs.store.history import split_version

    path, spec = split_version(arg)
    form = STORE_FORM.fullmatch(path)
    if form is not None and not os.path.exists(path):
        return Target(path, spec, store_id=form[1], path=form[2], api_url=api_url)
    info = registry.find_mount(path)
    if info is None:
        raise CommandFailed(
            f"no live memfs mount at {path} (for a store, name the memory as STORE_ID:/path)"
        )
    mountpoint = str(info["mountpoint"])
    real = os.path.realpath(path)
    rel = real[len(mountpoint) :] or "/"
    return Target(path, spec, info=info, rel=rel, local=os.path.abspath(path))


def ask(
    t: Target, what: Literal["log", "show"], version: str | None = None
) -> protocol.HistoryAnswer:
    """The history answer for `t` (see memfs/store/history.py), or CommandFailed."""
    answer: protocol.HistoryAnswer | protocol.ErrorAnswer
    if t.info is not None:
        try:
            answer = request(
                t.info,
                protocol.History(what=what, path=t.rel, version=version),
                timeout=ASK_TIMEOUT,
            )
        except TimeoutError:
            raise CommandFailed(f"the daemon did not answer within {ASK_TIMEOUT:g}s") from None
        except OSError as e:
            raise CommandFailed(f"the daemon did not answer: {e}") from None
    else:
        answer, _ = _direct(t, what, version)
    if isinstance(answer, protocol.ErrorAnswer):
        raise CommandFailed(
            f"{t.shown}: {answer.error}",
            ExitCode.UNREACHABLE if answer.unreachable else ExitCode.FAILED,
        )
    return answer


# What a restore in the store did: {ok, error} | {ok, unchanged} | {ok, memory_id, version}
Restored = dict[str, Any]
Direct = tuple[protocol.HistoryAnswer | protocol.ErrorAnswer, Restored | None]


def _direct(t: Target, what: str, version: str | None, restore: bool = False) -> Direct:
    """The same answer as a daemon's, asked of the store by this process (and with
    `restore`, what writing the chosen version back did)."""
    import trio

    from memfs.errors import ConfigError, StoreAuthError, StoreError, StoreUnavailable
    from memfs.store.connection import ClientConfig

    try:
        config = ClientConfig.from_env(t.api_url)
        result: Direct = trio.run(_direct_async, config, t, what, version, restore)
        return result
    except ConfigError as e:
        raise CommandFailed(str(e), ExitCode.USAGE) from None
    except StoreUnavailable as e:
        raise CommandFailed(
            f"{e} (is the server running? check --api-url or ANTHROPIC_BASE_URL)",
            ExitCode.UNREACHABLE,
        ) from None
    except StoreAuthError as e:
        raise CommandFailed(str(e), ExitCode.USAGE) from None
    except StoreError as e:
        raise CommandFailed(f"{t.shown}: {e}") from None


async def _direct_async(
    config: Any, t: Target, what: str, version: str | None, restore: bool
) -> Direct:
    from memfs.cli.common import CLI_RETRY
    from memfs.errors import NotFound
    from memfs.mount.answers import version_answer
    from memfs.store import history
    from memfs.store.client import StoreClient
    from memfs.store.connection import INTERACTIVE_FIRST_BYTE, make_http_client

    async with make_http_client(config) as http:
        client = StoreClient(http, retry=CLI_RETRY, first_byte_timeout=INTERACTIVE_FIRST_BYTE)
        try:
            store = await client.retrieve_store(t.store_id)
        except NotFound:
            return protocol.error(f"memory store {t.store_id} does not exist"), None
        memory_id = await history.find_memory(client, t.store_id, t.path)
        if memory_id is None:
            return protocol.error(
                "the store has no memory at this path, and none was deleted there recently"
            ), None
        versions = await history.versions_of(client, t.store_id, memory_id)
        answer = protocol.HistoryAnswer(
            ok=True,
            memory_store_id=t.store_id,
            path=t.path,
            memory_id=memory_id,
            access="read_only" if store.archived_at else "read_write",
            local=None,
            versions=[version_answer(v) for v in versions],
        )
        if what != "show":
            return answer, None
        try:
            chosen = history.pick(versions, version)
            content = await history.content_of(client, t.store_id, chosen)
        except history.HistoryError as e:
            return protocol.error(str(e)), None
        answer.version = version_answer(chosen)
        answer.content = content
        if not restore:
            return answer, None
        return answer, await _restore_in_store(client, t, memory_id, content, answer, versions)


async def _restore_in_store(
    client: Any,
    t: Target,
    memory_id: str,
    content: str,
    answer: protocol.HistoryAnswer,
    versions: list[Any],
) -> Restored:
    """An update with the current sha as precondition (or a create, if it was deleted)."""
    from memfs.errors import PathConflict, PreconditionFailed
    from memfs.paths import sha256_hex

    if answer.access == "read_only":
        return {
            "ok": False,
            "error": f"{t.store_id} is archived (read-only); restore writes nothing to it",
        }
    sha = sha256_hex(content.encode("utf-8", "surrogatepass"))
    newest = versions[0]
    try:
        if newest.operation == "deleted":
            memory = await client.create_memory(t.store_id, t.path, content)
        elif newest.content_sha256 == sha and newest.path == t.path:
            return {"ok": True, "unchanged": True}
        else:
            memory = await client.update_memory(
                t.store_id,
                memory_id,
                content=content,
                path=None if newest.path == t.path else t.path,
                precondition_sha256=newest.content_sha256,
            )
    except PreconditionFailed:
        return {
            "ok": False,
            "error": "the memory changed while restoring; nothing was "
            "written (run the restore again)",
        }
    except PathConflict as e:
        return {"ok": False, "error": f"another memory holds the path now ({e})"}
    return {"ok": True, "memory_id": memory.id, "version": memory.memory_version_id}


# --------------------------------------------------------------------------- commands


def _log(args: argparse.Namespace) -> int:
    t = target(args.path, args.api_url)
    answer = ask(t, "log")
    if args.json:
        print(json.dumps(to_wire(answer), indent=2))
        return ExitCode.OK
    local = answer.local
    where = (
        f"{answer.path}  memory {answer.memory_id or '-'}  store "
        f"{answer.memory_store_id} ({answer.access})"
    )
    if local is not None:
        where += f"  local: {local.state}"
    print(where)
    versions = answer.versions
    if not versions:
        print("  no versions in the store yet (the file was never pushed)")
    head = next((v.id for v in versions if v.operation != "deleted"), None)
    for n, v in enumerate(versions):
        size = "-" if v.content_size_bytes is None else f"{v.content_size_bytes} B"
        sha = (v.content_sha256 or "-")[:12]
        line = f"  ~{n:<3} {v.id}  {v.created_at}  {v.actor:<24} {v.operation:<9} {size:>9}  {sha}"
        if v.path != answer.path:
            line += f"  at {v.path}"
        if v.redacted_at:
            line += "  (redacted)"
        if v.id == head and versions[0].operation != "deleted":
            line += "  (head)"
        print(printable(line))
    return ExitCode.OK


def _show(args: argparse.Namespace) -> int:
    t = target(args.path, args.api_url)
    _, content = _shown(t, ask(t, "show", t.spec))
    sys.stdout.buffer.write(_bytes(content))
    sys.stdout.flush()
    return ExitCode.OK


def _shown(t: Target, answer: protocol.HistoryAnswer) -> tuple[str, str]:
    """The id and content of the version a `show` answer chose."""
    if answer.version is None or answer.content is None:
        raise CommandFailed(f"{t.shown}: the answer names no version")
    return answer.version.id, answer.content


def _bytes(content: str) -> bytes:
    return content.encode("utf-8", "surrogatepass")


def _diff(args: argparse.Namespace) -> int:
    t = target(args.path, args.api_url)
    other = args.other
    if other is not None:
        if not other.startswith("@"):
            raise CommandFailed(f"{other}: the other side is @VERSION or @local", ExitCode.USAGE)
        other = other[1:]
    if t.info is None:
        if other == "local":
            raise CommandFailed(
                "STORE_ID:/path has no local file; compare two versions", ExitCode.USAGE
            )
        a_spec, b_spec = t.spec or "~1", other or "head"
    else:
        a_spec, b_spec = t.spec or "head", other or "local"
    a_label, a = _side(t, a_spec)
    b_label, b = _side(t, b_spec)
    sys.stdout.buffer.write(unified(a, b, a_label, b_label))
    sys.stdout.flush()
    return ExitCode.OK


def _side(t: Target, spec: str) -> tuple[str, bytes]:
    if spec == "local":
        try:
            with open(t.local, "rb") as f:
                return f"{t.shown} (local)", f.read()
        except FileNotFoundError:
            return f"{t.shown} (absent locally)", b""
        except OSError as e:
            raise CommandFailed(f"cannot read {t.local}: {e.strerror}") from None
    version, content = _shown(t, ask(t, "show", spec))
    return f"{t.shown}@{version}", _bytes(content)


def unified(a: bytes, b: bytes, a_label: str, b_label: str) -> bytes:
    """A unified diff of two contents, bytes exact (`\\ No newline at end of file`)."""
    left = a.decode("utf-8", "surrogateescape").splitlines(keepends=True)
    right = b.decode("utf-8", "surrogateescape").splitlines(keepends=True)
    out: list[str] = []
    for line in difflib.unified_diff(left, right, a_label, b_label):
        if line.endswith("\n"):
            out.append(line)
        else:
            out.append(line + "\n\\ No newline at end of file\n")
    return "".join(out).encode("utf-8", "surrogateescape")


def _restore(args: argparse.Namespace) -> int:
    from memfs.paths import sha256_hex

    t = target(args.path, args.api_url)
    if t.spec is not None:
        raise CommandFailed("name the version with --to, not PATH@VERSION", ExitCode.USAGE)
    if t.info is None:
        answer, done = _direct(t, "show", args.to, restore=True)
        if isinstance(answer, protocol.ErrorAnswer):
            raise CommandFailed(f"{t.shown}: {answer.error}")
        version, _ = _shown(t, answer)
        assert done is not None  # asked with restore=True
        if not done.get("ok"):
            raise CommandFailed(f"{t.shown}: {done['error']}")
        if done.get("unchanged"):
            print(f"{t.shown} already has the content of {version}; nothing written")
        else:
            print(f"{t.shown}: restored the content of {version} as new version {done['version']}")
        return ExitCode.OK
    answer = ask(t, "show", args.to)
    version, content = _shown(t, answer)
    if answer.access == "read_only":
        raise CommandFailed(f"{t.shown} is in a read-only store; restore writes nothing to it")
    local = answer.local
    data = _bytes(content)
    if isinstance(local, protocol.LocalFile) and local.sha == sha256_hex(data):
        print(f"{t.shown} already has the content of {version}; nothing written")
        return ExitCode.OK
    if isinstance(local, protocol.LocalFile) and local.dirty and not args.force:
        raise CommandFailed(
            f"{t.shown} has local changes that were not pushed yet; push them "
            f"first (memfs sync), or pass --force to overwrite them"
        )
    write_through_mount(t.local, data)
    print(
        f"{t.shown}: restored the content of {version} as a local change; the next "
        f"sync pass pushes it as a new version (memfs sync {t.shown} to push now)"
    )
    return ExitCode.OK


def write_through_mount(path: str, data: bytes) -> None:
    """An atomic save into a mount: a temporary file the sync never pushes, renamed over
    `path` (the file keeps its memory id and history)."""
    parent = os.path.dirname(path) or "."
    temp = os.path.join(parent, f"{TEMP_PREFIX}{os.getpid()}")
    try:
        os.makedirs(parent, exist_ok=True)
        with open(temp, "wb") as f:
            f.write(data)
        os.replace(temp, path)
    except OSError as e:
        try:
            os.unlink(temp)
        except OSError:
            pass
        if e.errno == errno.EROFS:
            raise CommandFailed(f"{path} is in a read-only store; nothing was written") from None
        raise CommandFailed(f"cannot write {path}: {e.strerror}") from None
