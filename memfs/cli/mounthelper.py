"""`mount -t fuse.memfs STORE_ID DIR -o OPTS` and fstab lines: mount(8)'s helper protocol
turned into a `memfs mount … --daemon` command line.

mount(8) runs `/sbin/mount.fuse.memfs SOURCE DIR [-sfnvrw] [-N NS] [-o OPTS]` with a reset
PATH and without HOME or XDG_RUNTIME_DIR at boot, and expects the helper to return once
the filesystem is mounted. fuse3's own mount.fuse runs `memfs SOURCE DIR -o OPTS` for a
`memfs#STORE_ID` source of type `fuse`; `memfs.cli.main` hands that form here too. Either way
every check and message is `memfs mount`'s own: this module only translates, and
`memfs.cli.main` (installed a second time as `mount.fuse.memfs`) runs the result.
"""

from __future__ import annotations

import os
import pwd
import shlex
import sys
from collections.abc import Sequence
from dataclasses import dataclass

from memfs.cli import options
from memfs.config import ExitCode, read_private_file
from memfs.errors import ConfigError

PROG = "mount.fuse.memfs"
SOURCE_PREFIX = "memfs#"  # fuse3's `TYPE#SOURCE` convention for fstab lines of type fuse


@dataclass(frozen=True)
class Option:
    """One `-o` option and the `memfs` flag it becomes."""

    name: str
    flag: str | None  # None: handled here (rw, env_file)
    value: str | None = None  # metavar of `name=VALUE`; None for a bare word
    help: str = ""
    global_flag: bool = False  # a global option: it goes before the word `mount`


def _derived(option: options.Option) -> Option:
    assert option.mount_option is not None
    value = (option.mount_value or option.metavar) if option.takes_value else None
    return Option(
        option.mount_option,
        option.flag,
        value,
        option.mount_help or option.help,
        global_flag=option.commands == options.GLOBAL,
    )


# The `-o` options of memfs/cli/options.py (ro and rw first, the global ones last), and
# the helper's own.
_OWN = {o.mount_option: _derived(o) for o in options.OPTIONS if o.mount_option is not None}
OPTIONS = (
    _OWN.pop("ro"),
    Option("rw", None, help="writable (the default)"),
    *sorted(_OWN.values(), key=lambda o: o.global_flag),
    Option(
        "env_file",
        None,
        "FILE",
        help="read KEY=VALUE lines (systemd's EnvironmentFile "
        "format: # comments, optional quotes) into the environment first: the "
        "credentials (ANTHROPIC_API_KEY=…, ANTHROPIC_AUTH_TOKEN=…) and "
        "ANTHROPIC_BASE_URL. It must be mode 0600, owned by the user or root; "
        "credentials never go in fstab",
    ),
)
BY_NAME = {o.name: o for o in OPTIONS}

# Generic fstab and mount(8) words that mean nothing more for memfs. A memfs mount is
# always nosuid,nodev (libfuse's default), keeps no access times of its own and is
# mounted by the daemon, so asking for suid, dev or an atime policy changes nothing.
IGNORED = frozenset(
    {
        "defaults",
        "auto",
        "noauto",
        "user",
        "nouser",
        "users",
        "owner",
        "group",
        "nofail",
        "_netdev",
        "suid",
        "nosuid",
        "dev",
        "nodev",
        "exec",
        "async",
        "atime",
        "noatime",
        "relatime",
        "norelatime",
        "strictatime",
        "nostrictatime",
        "diratime",
        "nodiratime",
        "lazytime",
        "nolazytime",
        "default_permissions",
    }
)
IGNORED_PREFIXES = ("x-", "comment=")  # x-systemd.*, x-gvfs-*: for other programs


class UsageError(Exception):
    """A helper command line or option memfs cannot honour (exit 2)."""


@dataclass
class Request:
    source: str
    mountpoint: str
    argv: list[str]  # the `memfs` command line (without the program name)
    env_file: str | None
    fake: bool
    verbose: bool


@dataclass
class _Flags:
    """mount(8)'s own flags, as the helper's arguments gave them."""

    fake: bool = False
    verbose: bool = False
    sloppy: bool = False
    read_only: bool | None = None


def _take_flag(flags: _Flags, letter: str) -> None:
    """One letter of a `-fvsrwn` group."""
    if letter == "f":
        flags.fake = True
    elif letter == "v":
        flags.verbose = True
    elif letter == "s":
        flags.sloppy = True
    elif letter in "rw":
        flags.read_only = letter == "r"
    elif letter != "n":  # -n: no /etc/mtab to write; nothing to do
        raise UsageError(f"unknown flag -{letter}")


def _split_args(items: list[str], flags: _Flags) -> tuple[list[str], list[str]]:
    """The arguments -> (positional, mount options); flags land in `flags`."""
    positional: list[str] = []
    options: list[str] = []
    while items:
        arg = items.pop(0)
        if arg in ("-o", "-t", "-N"):
            if not items:
                raise UsageError(f"{arg} needs a value")
            value = items.pop(0)
            if arg == "-o":
                options += [o for o in value.split(",") if o]
            elif arg == "-N":
                raise UsageError("-N (another mount namespace) is not supported")
            elif value not in ("fuse.memfs", "fuse", "memfs"):
                raise UsageError(f"-t {value}: this helper mounts fuse.memfs only")
        elif arg.startswith("-o") and len(arg) > 2:
            options += [o for o in arg[2:].split(",") if o]
        elif arg.startswith("-") and len(arg) > 1 and arg != "--":
            for letter in arg[1:]:
                _take_flag(flags, letter)
        else:
            positional.append(arg)
    return positional, options


def parse(args: Sequence[str]) -> Request:
    """mount(8)'s helper arguments -> the `memfs` command line that does the mount."""
    flags = _Flags()
    positional, options = _split_args(list(args), flags)
    if len(positional) != 2:
        raise UsageError(f"usage: {PROG} STORE_ID MOUNTPOINT [-o OPTION[,OPTION…]]")
    source, mountpoint = positional
    store_id = source.removeprefix(SOURCE_PREFIX)
    if not store_id:
        raise UsageError(f"no store id in the source {source!r}")

    front: list[str] = []
    mount_flags: list[str] = []
    env_file = None
    for option in options:
        name, eq, value = option.partition("=")
        key = name.replace("-", "_")
        spec = _known_option(option, key, flags.sloppy)
        if spec is None:
            continue
        if (spec.value is None) != (not eq):
            form = f"{key}={spec.value}" if spec.value else key
            raise UsageError(f"mount option {option!r}: write it as {form}")
        if key in ("ro", "rw"):
            flags.read_only = key == "ro"
        elif key == "env_file":
            env_file = value
        elif spec.flag is not None and spec.global_flag:
            front += [spec.flag, value] if eq else [spec.flag]
        elif spec.flag is not None:
            mount_flags += [spec.flag, value] if eq else [spec.flag]
    if flags.read_only:
        mount_flags.append("--read-only")
    argv = [*front, "mount", store_id, mountpoint, "--daemon", *mount_flags]
    return Request(source, mountpoint, argv, env_file, flags.fake, flags.verbose)


def _known_option(option: str, key: str, sloppy: bool) -> Option | None:
    """The option's spec; None for one to pass over; an unknown one is refused."""
    spec = BY_NAME.get(key)
    if spec is not None:
        return spec
    if option in IGNORED or option.startswith(IGNORED_PREFIXES):
        return None
    if sloppy:  # -s: mount(8)'s "tolerate options this filesystem lacks"
        print(f"memfs: ignoring the unknown mount option {option!r} (-s)", file=sys.stderr)
        return None
    raise UsageError(f"unknown mount option {option!r} (see {PROG}(8))")


def load_env_file(path: str) -> dict[str, str]:
    """KEY=VALUE lines as systemd's EnvironmentFile= reads them (the common subset), from
    a file private to this user or root: it holds credentials, and names the server."""
    try:
        lines = read_private_file(path, "env_file").splitlines()
    except ConfigError as e:
        raise UsageError(str(e)) from None
    found: dict[str, str] = {}
    for number, line in enumerate(lines, 1):
        text = line.strip()
        if not text or text.startswith(("#", ";")):
            continue
        key, eq, value = text.removeprefix("export ").partition("=")
        key = key.strip()
        if not eq or not key.isidentifier():
            raise UsageError(f"env_file {path} line {number} is not KEY=VALUE")
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        found[key] = value
    return found


def _prepare_environment(env_file: str | None) -> None:
    """The daemon's environment, the same whoever runs mount(8): from a shell, a boot
    (no HOME) or systemd. The control registry goes to /tmp/memfs-<uid>, the place a
    boot-time mount uses too, so `memfs status` finds every mount(8) mount there."""
    if not os.environ.get("HOME"):  # mount(8) at boot: `~/.cache` must still mean root's
        os.environ["HOME"] = pwd.getpwuid(os.getuid()).pw_dir
    os.environ.pop("XDG_RUNTIME_DIR", None)
    if env_file is not None:
        os.environ.update(load_env_file(env_file))


def translate(args: Sequence[str]) -> list[str] | int:
    """The `memfs` command line that does what mount(8) asked, or the exit code when
    there is nothing to run (a refusal, exit 2; `-f`, exit 0). `memfs.cli.main` runs it, so
    every check and message after this point is `memfs mount`'s own."""
    try:
        request = parse(args)
        _prepare_environment(request.env_file)
    except UsageError as e:
        print(f"memfs: {e}", file=sys.stderr)
        return ExitCode.USAGE
    if request.verbose or request.fake:
        print(
            f"memfs: {'would run' if request.fake else 'running'}: "
            f"memfs {shlex.join(request.argv)}",
            file=sys.stderr,
        )
    if request.fake:  # -f: mount(8)'s "do everything but the mount"
        return ExitCode.OK
    return request.argv
