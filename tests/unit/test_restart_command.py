"""The command `memfs status` prints for a dead mount starts it again with every option
it was started with (issue 34: it dropped --cache-max-size, --log-level and
--metrics-addr, and no test saw it). Every option of `memfs mount` is given a value
other than its default; the restart command, parsed back by the same parser, must give
the same values. An option added later without a value here fails the test."""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path

from memfs.cli.main import build_parser
from memfs.control.recovery import restart_command

# A value other than the default for every option of `memfs mount` that takes one.
VALUES = {
    "api_url": "http://127.0.0.1:9",
    "log_level": "debug",
    "log_file": "/var/log/memfs-test.log",
    "log_format": "json",
    "sync_interval": "7",
    "deletions": "log_only",
    "flush_timeout": "9",
    "probe_budget": "17",
    "read_spin_us": "3",
    "exclude": "*.tmp",
    "cache_max_size": "200M",
    "uid": "1234",
    "gid": "4321",
    "umask": "027",
    "metrics_addr": "127.0.0.1:9999",
}
# Not options of the mount itself: where it is, and how this one start runs.
NOT_CARRIED = {"help", "store_id", "mountpoint", "cache_dir", "daemon", "command", "version"}


def _mount_parser(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action.choices["mount"]
    raise AssertionError("no mount command")


def test_the_restart_command_carries_every_mount_option(tmp_path: Path) -> None:
    parser = build_parser()
    argv = ["mount", "memstore_x", str(tmp_path / "mnt"), "--cache-dir", str(tmp_path / "c")]
    flags: list[str] = []
    for action in _mount_parser(parser)._actions:
        if action.dest in NOT_CARRIED or not action.option_strings:
            continue
        flag = action.option_strings[-1]
        if isinstance(action, argparse._StoreConstAction):  # store_true / store_false
            flags.append(flag)
            continue
        assert action.dest in VALUES, f"give {flag} a value in VALUES"
        value = VALUES[action.dest]
        assert parser.parse_args([*argv, flag, value]).__dict__[action.dest] != action.default
        flags += [flag, value]
    args = parser.parse_args([*argv, *flags])
    dirs = {"memstore_x": str(tmp_path / "c")}
    cmd = restart_command(args, str(tmp_path / "mnt"), dirs, args.api_url)  # as cli._restart
    words = shlex.split(cmd)
    assert words[0] == "memfs" and "--daemon" in words
    again = parser.parse_args(words[1:])
    dropped = {
        dest: (value, getattr(again, dest, None))
        for dest, value in vars(args).items()
        if dest not in NOT_CARRIED and getattr(again, dest, None) != value
    }
    assert dropped == {}, f"the restart command {cmd!r} drops or changes {dropped}"
