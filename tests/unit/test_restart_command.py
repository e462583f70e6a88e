"""The command `memfs status` prints for a dead mount starts it again with every option
it was started with (issue 34: it dropped --cache-max-size, --log-level and
--metrics-addr, and no test saw it). Every option the declaration (memfs/cli/options.py)
gives `memfs mount` or `memfs session` is set to its example, a value other than its
default; the restart command, parsed back by the same parser, must give the same
values. An option added to the declaration is covered without an edit here."""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path

import pytest

from memfs.cli.main import build_parser
from memfs.cli.options import GLOBAL, OPTIONS, Command, restart_command

# How this one start runs, not an option of the mount: a restart always has --daemon.
NOT_CARRIED = {"daemon"}


def _all_options(command: Command) -> list[str]:
    """Every option of `command`, each set to a value other than its default."""
    parser = build_parser()
    flags: list[str] = []
    for option in OPTIONS:
        if command not in option.commands and option.commands != GLOBAL:
            continue
        if not option.restart:
            continue
        given = [option.flag]
        if option.takes_value:
            assert option.example is not None, f"give {option.flag} an example"
            given.append(option.example)
        assert getattr(parser.parse_args(_start(command) + given), option.dest) != (
            option.parse_default
        ), f"{option.flag}'s example is its default"
        flags += given
    return flags


def _start(command: Command, tmp_path: Path = Path("/t")) -> list[str]:
    """The command's positionals and its cache directory (restart_command names it)."""
    if command == "mount":
        where = ["memstore_x", str(tmp_path / "mnt")]
    else:
        where = [str(tmp_path / "s.json"), "--root", str(tmp_path / "mnt")]
    return [command, *where, "--cache-dir", str(tmp_path / "c")]


def _parsed_back(args: argparse.Namespace, tmp_path: Path) -> tuple[str, argparse.Namespace]:
    dirs = {"memstore_x": str(tmp_path / "c")}
    cmd = restart_command(args, str(tmp_path / "mnt"), dirs, args.api_url)  # as cli._restart
    words = shlex.split(cmd)
    assert words[0] == "memfs" and words[-1] == "--daemon"
    return cmd, build_parser().parse_args(words[1:])


@pytest.mark.parametrize("command", ["mount", "session"])
def test_the_restart_command_carries_every_option(command: Command, tmp_path: Path) -> None:
    args = build_parser().parse_args(_start(command, tmp_path) + _all_options(command))
    cmd, again = _parsed_back(args, tmp_path)
    dropped = {
        dest: (value, getattr(again, dest, None))
        for dest, value in vars(args).items()
        if dest not in NOT_CARRIED and getattr(again, dest, None) != value
    }
    assert dropped == {}, f"the restart command {cmd!r} drops or changes {dropped}"


def test_a_restart_names_no_default(tmp_path: Path) -> None:
    args = build_parser().parse_args(_start("mount", tmp_path))
    cmd, _ = _parsed_back(args, tmp_path)
    assert cmd == f"memfs mount memstore_x {tmp_path}/mnt --cache-dir {tmp_path}/c --daemon"
