"""The options of a mount, each declared once (`OPTIONS`), and what is derived from them:
the argparse arguments of `memfs mount` and `memfs session` (and the global options
every command takes), the `MountConfig` a command line makes, and the command that
starts a mount again (`restart_command`). The mount(8) helper (`mounthelper.py`) takes
its `-o` names from here, and the man pages and completion read the parser.

Adding an option: one `Option(...)` below, its `MountConfig` field in memfs/config.py
(whose default is the option's default), and the code that uses it. The tests
(tests/unit/test_restart_command.py, test_mounthelper.py) walk `OPTIONS`, so a new one
is covered without another edit.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, get_args

from memfs.config import (
    DEFAULT_EXCLUDES,
    MAX_READ_SPIN_US,
    DeletionMode,
    MountConfig,
    check_interval,
)

# The commands an option belongs to: `memfs mount`, `memfs session`, `memfs serve`,
# or every command (GLOBAL: accepted before or after the command's words).
Command = Literal["mount", "session", "serve"]
GLOBAL: frozenset[Command] = frozenset()
BOTH: frozenset[Command] = frozenset({"mount", "session"})
MOUNT: frozenset[Command] = frozenset({"mount"})
SESSION: frozenset[Command] = frozenset({"session"})

_FIELD: Any = object()  # "the MountConfig field's default", written once, in config.py


def _config_default(field: str) -> Any:
    return MountConfig.__dataclass_fields__[field].default


@dataclass(frozen=True)
class Option:
    """One option: its flag as argparse takes it and what it means elsewhere."""

    flag: str  # "--sync-interval"
    dest: str  # the argparse attribute
    help: str
    action: Literal["store", "store_true", "store_false", "append"] = "store"
    type: Callable[[str], Any] | None = None
    default: Any = None  # _FIELD: the MountConfig field's default
    metavar: str | None = None
    choices: Sequence[str] | None = None
    commands: frozenset[Command] = BOTH
    session_help: str | None = None  # where `memfs session` says it differently
    # The MountConfig field it sets; `to_config` checks the parsed value and turns it
    # into the field's (a ValueError is a usage error: `memfs: MESSAGE`, exit 2).
    field: str | None = None
    to_config: Callable[[Any], Any] | None = None
    # mount(8)'s `-o` name, the metavar of its `name=VALUE` form (default: `metavar`)
    # and its own help text (default: `help`); None: not a mount(8) option.
    mount_option: str | None = None
    mount_value: str | None = None
    mount_help: str | None = None
    # The restart command carries it (when it differs from the default), written by
    # `restart_text` (default: str, `:g` for a float); False: restart_command places it.
    restart: bool = True
    restart_text: Callable[[Any], str] | None = None
    example: str | None = None  # a value other than the default (tests, the docs)

    @property
    def takes_value(self) -> bool:
        return self.action in ("store", "append")

    @property
    def parse_default(self) -> Any:
        """The value argparse gives when the option is not on the command line."""
        if self.action == "store_true":
            return False
        if self.action == "store_false":
            return True
        if self.default is _FIELD:
            assert self.field is not None, self.flag
            return _config_default(self.field)
        return self.default

    def text(self, value: Any) -> str:
        if self.restart_text is not None:
            return self.restart_text(value)
        return f"{value:g}" if isinstance(value, float) else str(value)


def _owner_id(text: str) -> int:
    """A uid or gid for --uid/--gid: a number, as rclone and sshfs take it."""
    try:
        value = int(text, 10)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 <= value < 2**32 - 1:
        raise argparse.ArgumentTypeError(f"out of range: {value}")
    return value


def _umask(text: str) -> int:
    """--umask in octal, as umask(1) prints it (022, 0077)."""
    try:
        value = int(text, 8)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an octal mask: {text!r}") from None
    if not 0 <= value <= 0o777:
        raise argparse.ArgumentTypeError(f"not a mask of permission bits: {text!r}")
    return value


_UNITS = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4}


def parse_size(text: str) -> int:
    """'200M' -> 209715200: bytes, or K/M/G/T (binary; an optional trailing B or iB)."""
    value = text.strip().upper().removesuffix("IB").removesuffix("B")
    unit = value[-1:] if value[-1:] in _UNITS else ""
    number = value[:-1] if unit else value
    try:
        size = float(number) * _UNITS[unit]
    except ValueError:
        raise ValueError(f"--cache-max-size: not a size: {text!r} (e.g. 500M)") from None
    if size < 0:
        raise ValueError("--cache-max-size must not be negative")
    return int(size)


def _check(ok: Callable[[Any], bool], message: str) -> Callable[[Any], Any]:
    def check(value: Any) -> Any:
        if not ok(value):
            raise ValueError(message)
        return value

    return check


def _metrics_addr(value: str | None) -> str | None:
    if value is not None:
        from memfs.metrics import parse_addr  # prometheus_client: only when asked

        parse_addr(value)
    return value


LOG_LEVELS = ("debug", "info", "warning", "error")
LOG_FORMATS = ("text", "json")
_SPIN = _config_default("read_spin_us")
_BUDGET = _config_default("probe_budget")
_INTERVAL = _config_default("interval")
_FLUSH = _config_default("flush_timeout")

OPTIONS: tuple[Option, ...] = (
    # the global options (memfs/cli/main.py adds them to every command)
    Option(
        "--api-url",
        "api_url",
        "Memory Stores API base URL (default: $ANTHROPIC_BASE_URL, else the hosted API)",
        metavar="URL",
        commands=GLOBAL,
        field="api_url",
        mount_option="api_url",
        example="http://127.0.0.1:9",
    ),
    Option(
        "--log-level",
        "log_level",
        "least severe log lines shown (default info)",
        default="info",
        choices=LOG_LEVELS,
        commands=GLOBAL,
        mount_option="log_level",
        mount_value="LEVEL",
        example="debug",
    ),
    Option(
        "--log-file",
        "log_file",
        "append log lines to FILE (default: stderr; with --daemon, memfs.log "
        "in --cache-dir, default ~/.cache/memfs/memfs.log)",
        metavar="FILE",
        commands=GLOBAL,
        field="log_file",
        mount_option="log_file",
        restart_text=os.path.abspath,
        example="/var/log/memfs-test.log",
    ),
    Option(
        "--log-format",
        "log_format",
        "text: `DATE TIME LEVEL logger: message key=value…`; json: "
        "one JSON object a line (default text)",
        default="text",
        choices=LOG_FORMATS,
        commands=GLOBAL,
        example="json",
    ),
    # `memfs mount` and `memfs session`, in the order their --help lists them
    Option(
        "--open-requests",
        "zero_message_opens",
        "have the kernel send OPEN, RELEASE and FLUSH again, as without the patched "
        "pyfuse3: EILSEQ also at close(2), the audit trail's writer per open, a push at "
        "the writer's RELEASE without the close watch (docs/reliability.md, "
        '"Zero-message opens"). By default a warm cat costs no request. Read-only '
        "mounts, and a session's read-only stores, never send them",
        action="store_false",
        field="zero_message_opens",
        mount_option="open_requests",
    ),
    Option(
        "--zero-message-opens",
        "zero_message_opens_named",
        "the default: kept for the command lines that name it",
        action="store_true",
        mount_option="zero_message_opens",
        restart=False,
    ),
    Option(
        "--read-spin-us",
        "read_spin_us",
        "after answering a request, keep reading for the next one this long before "
        "sleeping (a waiting process's next request comes within microseconds; being "
        "woken on another CPU costs more). Needs the patched pyfuse3; 0: sleep at once "
        f'(default {_SPIN}; docs/performance.md, "Round trips")',
        type=int,
        default=_FIELD,
        metavar="MICROSECONDS",
        field="read_spin_us",
        to_config=_check(
            lambda v: 0 <= v <= MAX_READ_SPIN_US,
            f"--read-spin-us must be between 0 and {MAX_READ_SPIN_US}",
        ),
        mount_option="read_spin_us",
        example="3",
    ),
    Option(
        "--sync-interval",
        "sync_interval",
        f"seconds between sync passes (default {_INTERVAL:g}, minimum 5)",
        type=float,
        default=_FIELD,
        metavar="SECONDS",
        field="interval",
        to_config=lambda v: check_interval(float(v)),
        mount_option="sync_interval",
        example="7",
    ),
    Option(
        "--probe-budget",
        "probe_budget",
        "probes for remote changes sooner than the interval, per store-hour, "
        f"where the server offers no watch (default {_BUDGET}; 0: the interval only)",
        type=int,
        default=_FIELD,
        metavar="N",
        field="probe_budget",
        to_config=_check(lambda v: v >= 0, "--probe-budget must not be negative"),
        mount_option="probe_budget",
        example="17",
    ),
    Option(
        "--no-watch",
        "watch",
        "do not use memfs serve's watch; probe for remote changes instead",
        action="store_false",
        field="watch",
        mount_option="no_watch",
    ),
    Option(
        "--deletions",
        "deletions",
        "what a local delete does in the store: "
        "delete the memory, only log it, or nothing (default enabled)",
        default=_FIELD,
        choices=get_args(DeletionMode),
        field="deletions",
        mount_option="deletions",
        mount_value="MODE",
        example="log_only",
    ),
    Option(
        "--no-push-soon",
        "push_soon",
        "push a change at the next interval or memfs sync, not about a second "
        'after it settles (docs/sync.md, "Push soon")',
        action="store_false",
        field="push_soon",
        mount_option="no_push_soon",
    ),
    Option(
        "--deletes-when-asked",
        "deletes_when_asked",
        "send local deletes only in a pass someone asked for (memfs sync, the "
        "worker's sync) and the final sync; push soon and the interval push new and "
        "changed files only (what the SDK worker adapter's sessions use)",
        action="store_true",
        field="deletes_when_asked",
        mount_option="deletes_when_asked",
    ),
    Option(
        "--exclude",
        "exclude",
        "file names that stay local-only, never pushed (repeatable; "
        "editor and OS temporary files always are)",
        action="append",
        metavar="GLOB",
        field="excludes",
        to_config=lambda v: tuple(DEFAULT_EXCLUDES) + tuple(v or ()),
        mount_option="exclude",
        mount_help="file names that stay local-only, never "
        "pushed; repeat the option for more than one (a GLOB cannot contain a comma)",
        example="*.tmp",
    ),
    Option(
        "--cache-max-size",
        "cache_max_size",
        "bound on the clean contents cached per store, e.g. 200M "
        "(unpushed changes are never evicted; default: no bound)",
        metavar="SIZE",
        field="cache_max_bytes",
        to_config=lambda v: parse_size(v) if v else None,
        mount_option="cache_max_size",
        example="200M",
    ),
    Option(
        "--flush-timeout",
        "flush_timeout",
        f"bound on the final sync at unmount (default {_FLUSH:g})",
        type=float,
        default=_FIELD,
        metavar="SECONDS",
        field="flush_timeout",
        to_config=_check(lambda v: v > 0, "--flush-timeout must be positive"),
        mount_option="flush_timeout",
        example="9",
    ),
    Option(
        "--allow-other",
        "allow_other",
        "let other users in (needs user_allow_other in /etc/fuse.conf)",
        action="store_true",
        field="allow_other",
        mount_option="allow_other",
    ),
    Option(
        "--uid",
        "uid",
        "the user id files and directories appear to belong to (default: the mounting user's)",
        type=_owner_id,
        metavar="UID",
        field="uid",
        mount_option="uid",
        example="1234",
    ),
    Option(
        "--gid",
        "gid",
        "the group id they appear to belong to (default: the mounting user's)",
        type=_owner_id,
        metavar="GID",
        field="gid",
        mount_option="gid",
        example="4321",
    ),
    Option(
        "--umask",
        "umask",
        "permission bits shown are 0666 for files and 0777 for directories "
        "minus UMASK, in octal, e.g. 077 (default: the modes kept per file, 0644 "
        "and 0755 unless chmod changed them)",
        type=_umask,
        metavar="UMASK",
        field="umask",
        mount_option="umask",
        restart_text=lambda v: f"{v:03o}",
        example="027",
    ),
    Option(
        "--daemon",
        "daemon",
        "run in the background; return once the mount is live "
        "(default: the foreground, until Ctrl-C)",
        action="store_true",
        restart=False,  # a restart always runs in the background
    ),
    Option(
        "--metrics-addr",
        "metrics_addr",
        "serve Prometheus metrics at http://HOST:PORT/metrics "
        "(default: off; see docs/operations.md)",
        metavar="HOST:PORT",
        commands=frozenset({"mount", "session", "serve"}),
        field="metrics_addr",
        to_config=_metrics_addr,
        example="127.0.0.1:9999",
    ),
    # `memfs mount` only
    Option(
        "--read-only",
        "read_only",
        "refuse every change (EROFS), even for root",
        action="store_true",
        commands=MOUNT,  # the StoreSpec's, not a MountConfig field: commands.mount
        mount_option="ro",
    ),
    Option(
        "--no-xattrs",
        "xattrs",
        "answer extended-attribute requests ENOSYS, so the kernel stops asking: "
        "no GETXATTR per `ls -la` entry or per write; the user.memfs.* attributes "
        'are then not shown (docs/performance.md, "Extended attributes")',
        action="store_false",
        commands=MOUNT,
        field="xattrs",
        mount_option="no_xattrs",
    ),
    Option(
        "--xattrs",
        "session_xattrs",
        "show the user.memfs.* extended attributes in each store; a session's stores "
        "answer xattr requests ENOSYS by default (agents read none; `memfs status FILE` "
        'tells a person what they told; docs/performance.md, "Extended attributes")',
        action="store_true",
        commands=SESSION,
        field="xattrs",
    ),
    Option(
        "--cache-dir",
        "cache_dir",
        "this mount's cache directory (default: ~/.cache/memfs/STORE_ID)",
        session_help="cache root; each store gets STORE_ID below it (default: ~/.cache/memfs)",
        field="cache_dir",
        to_config=lambda v: Path(v).expanduser() if v else None,
        mount_option="cache_dir",
        mount_value="DIR",
        restart=False,  # restart_command names the directory the mount used
    ),
)
BY_DEST = {o.dest: o for o in OPTIONS}


def _add(parser: argparse._ActionsContainer, option: Option, help_text: str, default: Any) -> None:
    kw: dict[str, Any] = {"dest": option.dest, "action": option.action, "help": help_text}
    if option.takes_value:
        kw.update(type=option.type, metavar=option.metavar, choices=option.choices)
    kw["default"] = default
    parser.add_argument(option.flag, **{k: v for k, v in kw.items() if v is not None})


def add_arguments(parser: argparse.ArgumentParser, command: Command) -> None:
    """The options of `command`, in OPTIONS' order."""
    for option in OPTIONS:
        if command in option.commands:
            text = option.session_help if command == "session" else None
            _add(parser, option, text or option.help, option.parse_default)


def add_global_arguments(group: argparse._ActionsContainer, *, top: bool) -> None:
    """The options every command takes. Below the top level they default to SUPPRESS,
    so a value given earlier on the command line is not reset by a later parser."""
    for option in OPTIONS:
        if option.commands == GLOBAL:
            _add(group, option, option.help, option.parse_default if top else argparse.SUPPRESS)


def config_values(args: Any) -> dict[str, Any]:
    """The MountConfig fields the command line sets (ValueError: a bad value)."""
    values: dict[str, Any] = {}
    for option in OPTIONS:
        if option.field is None or not hasattr(args, option.dest):
            continue  # not an option of this command: the field keeps its default
        value = getattr(args, option.dest)
        values[option.field] = value if option.to_config is None else option.to_config(value)
    return values


def restart_flags(args: Any, **given: Any) -> list[str]:
    """The options of `args` that differ from their defaults, as flags (`given`
    overrides a value, e.g. the API URL the environment chose)."""
    words: list[str] = []
    command = getattr(args, "command", None)
    for option in OPTIONS:
        if not option.restart or (option.commands and command not in option.commands):
            continue
        value = given.get(option.dest, getattr(args, option.dest, option.parse_default))
        if value == option.parse_default:
            continue
        if not option.takes_value:
            words.append(option.flag)
        elif option.action == "append":
            for item in value:
                words += [option.flag, option.text(item)]
        else:
            words += [option.flag, option.text(value)]
    return words


def restart_command(
    args: Any, mountpoint: str, cache_dirs: dict[str, str], api_url: str | None
) -> str:
    """The command line that starts this mount again (absolute paths, same options,
    in the background), for a dead mount's recovery hint (memfs/control/recovery.py)."""
    if args.command == "session":
        source = (
            [os.path.abspath(args.spec)]
            if args.spec is not None
            else ["--session-id", args.session_id]
        )
        cmd = ["memfs", "session", *source, "--root", mountpoint]
        if args.cache_dir:
            cmd += ["--cache-dir", os.path.abspath(os.path.expanduser(args.cache_dir))]
    else:
        cache_dir = next(iter(cache_dirs.values()))
        cmd = ["memfs", "mount", args.store_id, mountpoint, "--cache-dir", cache_dir]
    cmd += restart_flags(args, api_url=api_url)
    cmd.append("--daemon")
    return shlex.join(cmd)


def field_defaults() -> dict[str, Any]:
    """MountConfig's defaults of the fields an option sets (what a bare command gives)."""
    return {
        f.name: f.default
        for f in dataclasses.fields(MountConfig)
        if any(o.field == f.name for o in OPTIONS)
    }
