"""Each mount option is declared once (memfs/cli/options.py): its default is
MountConfig's, the command line sets its field, and a bad value is refused in words."""

from __future__ import annotations

from pathlib import Path

import pytest

from memfs.cli.main import build_parser
from memfs.cli.options import OPTIONS, config_values, field_defaults
from memfs.config import DEFAULT_EXCLUDES, MountConfig


def test_a_bare_command_line_gives_the_configs_defaults() -> None:
    """The defaults are written once, as MountConfig's: a bare `memfs mount` or `memfs
    session` builds exactly them."""
    # ... except that a session's stores show no xattrs unless --xattrs (agents read none)
    for argv, differ in (
        (["mount", "memstore_x", "/m"], {}),
        (["session", "s.json"], {"xattrs": False}),
    ):
        values = config_values(build_parser().parse_args(argv))
        assert values == {k: differ.get(k, v) for k, v in field_defaults().items() if k in values}
    assert set(config_values(build_parser().parse_args(["mount", "x", "/m"]))) == set(
        field_defaults()
    )


def test_each_option_sets_its_field(tmp_path: Path) -> None:
    for option in OPTIONS:
        if option.field is None or ("mount" not in option.commands and option.commands):
            continue
        given = [option.flag] + ([option.example or str(tmp_path)] if option.takes_value else [])
        values = config_values(build_parser().parse_args(["mount", "x", "/m", *given]))
        config = MountConfig("/m", [], **values)
        assert getattr(config, option.field) != field_defaults()[option.field], option.flag
    values = config_values(build_parser().parse_args(["mount", "x", "/m", "--exclude", "*.o"]))
    assert values["excludes"] == (*DEFAULT_EXCLUDES, "*.o")


@pytest.mark.parametrize(
    ("given", "message"),
    [
        (["--sync-interval", "1"], "the sync interval must be at least 5 seconds"),
        (["--flush-timeout", "0"], "--flush-timeout must be positive"),
        (["--probe-budget", "-1"], "--probe-budget must not be negative"),
        (["--read-spin-us", "10001"], "--read-spin-us must be between 0 and 10000"),
        (["--cache-max-size", "xx"], "--cache-max-size: not a size: 'xx' (e.g. 500M)"),
        (["--metrics-addr", "nope"], "--metrics-addr 'nope': expected HOST:PORT"),
    ],
)
def test_a_bad_value_is_refused_in_words(given: list[str], message: str) -> None:
    args = build_parser().parse_args(["session", "s.json", *given])
    with pytest.raises(ValueError) as refused:
        config_values(args)
    assert str(refused.value).startswith(message)
