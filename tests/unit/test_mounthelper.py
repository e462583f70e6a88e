"""mount(8)'s helper arguments become the `memfs mount` command line they mean, and
everything memfs cannot honour is refused by name (the real mounts are in
tests/mount/test_mount_helper.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from memfs.cli.mounthelper import UsageError, load_env_file, parse

STORE = "memstore_0123456789abcdefghijklmn"


def argv(*args: str) -> list[str]:
    return parse(args).argv


def test_plain_and_fstab_forms() -> None:
    assert argv(STORE, "/mnt/p") == ["mount", STORE, "/mnt/p", "--daemon"]
    assert argv(f"memfs#{STORE}", "/mnt/p", "-o", "rw") == argv(STORE, "/mnt/p")
    # mount(8) at boot: -n, generic and systemd words, the type; fuse3 adds dev,suid
    assert argv(
        STORE,
        "/mnt/p",
        "-n",
        "-o",
        "defaults,_netdev,nofail,noauto,dev,suid,x-systemd.automount,comment=x",
        "-t",
        "fuse.memfs",
    ) == argv(STORE, "/mnt/p")


def test_options_become_flags() -> None:
    got = argv(
        STORE,
        "/mnt/p",
        "-o",
        "ro,allow_other,uid=1000,gid=100,umask=022,sync_interval=30,deletions=log_only,"
        "exclude=*.tmp,exclude=.#*,cache_dir=/c,cache-max-size=200M,"
        "flush_timeout=60,api_url=http://h:1,log_level=debug,log_file=/l",
    )
    assert got == [  # the global options go before the word `mount`
        "--api-url",
        "http://h:1",
        "--log-level",
        "debug",
        "--log-file",
        "/l",
        "mount",
        STORE,
        "/mnt/p",
        "--daemon",
        "--allow-other",
        "--uid",
        "1000",
        "--gid",
        "100",
        "--umask",
        "022",
        "--sync-interval",
        "30",
        "--deletions",
        "log_only",
        "--exclude",
        "*.tmp",
        "--exclude",
        ".#*",
        "--cache-dir",
        "/c",
        "--cache-max-size",
        "200M",
        "--flush-timeout",
        "60",
        "--read-only",
    ]
    assert argv(STORE, "/mnt/p", "-r")[-1] == "--read-only"
    assert "--read-only" not in argv(STORE, "/mnt/p", "-r", "-o", "rw")
    env_file = parse([STORE, "/m", "-o", "env_file=/etc/memfs/p.env"]).env_file
    assert env_file == "/etc/memfs/p.env"
    request = parse([STORE, "/m", "-fv"])
    assert request.fake and request.verbose


def test_every_mount_option_means_what_its_flag_means() -> None:
    """Each `-o` name of the declaration (memfs/cli/options.py) gives `memfs mount` the
    value its flag gives: a new option with a mount(8) name is covered here."""
    from memfs.cli.main import build_parser
    from memfs.cli.options import OPTIONS

    parser = build_parser()
    bare = parser.parse_args(argv(STORE, "/m"))
    named = [o for o in OPTIONS if o.mount_option is not None]
    assert {o.mount_option for o in named} >= {"ro", "sync_interval", "no_xattrs", "log_file"}
    for option in named:
        value = option.example or "/x"
        given = f"{option.mount_option}={value}" if option.takes_value else option.mount_option
        by_helper = parser.parse_args(argv(STORE, "/m", "-o", given))
        start = ["mount", STORE, "/m", "--daemon"]
        by_flag = parser.parse_args([*start, option.flag, *([value] if option.takes_value else [])])
        assert vars(by_helper) == vars(by_flag) != vars(bare), given


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([STORE], "usage: mount.fuse.memfs STORE_ID MOUNTPOINT"),
        ([STORE, "/m", "/x"], "usage: mount.fuse.memfs STORE_ID MOUNTPOINT"),
        (["memfs#", "/m"], "no store id in the source 'memfs#'"),
        ([STORE, "/m", "-o", "noexec"], "unknown mount option 'noexec'"),
        ([STORE, "/m", "-o", "ro=1"], "mount option 'ro=1': write it as ro"),
        ([STORE, "/m", "-o", "cache_dir"], "mount option 'cache_dir': write it as cache_dir=DIR"),
        ([STORE, "/m", "-t", "fuse.sshfs"], "-t fuse.sshfs: this helper mounts fuse.memfs"),
        ([STORE, "/m", "-N", "/proc/1/ns/mnt"], "-N (another mount namespace) is not"),
        ([STORE, "/m", "-x"], "unknown flag -x"),
        ([STORE, "/m", "-o"], "-o needs a value"),
    ],
)
def test_refused(args: list[str], message: str) -> None:
    with pytest.raises(UsageError) as refused:
        parse(args)
    assert str(refused.value).startswith(message)


def test_sloppy_ignores_unknown_options(capsys: pytest.CaptureFixture[str]) -> None:
    assert argv(STORE, "/m", "-s", "-o", "noexec,ro")[-1] == "--read-only"
    assert "ignoring the unknown mount option 'noexec' (-s)" in capsys.readouterr().err


def test_env_file(tmp_path: Path) -> None:
    path = tmp_path / "p.env"
    path.write_text(
        "# credentials\n\nANTHROPIC_API_KEY=sk-1\nexport A='x y'\nB=\"q\"\n; note\nC=\n"
    )
    path.chmod(0o600)
    assert load_env_file(str(path)) == {"ANTHROPIC_API_KEY": "sk-1", "A": "x y", "B": "q", "C": ""}
    path.write_text("ANTHROPIC_API_KEY=sk-1\nnot a line\n")
    with pytest.raises(UsageError, match="line 2 is not KEY=VALUE"):
        load_env_file(str(path))


def test_an_env_file_others_can_read_or_choose_is_refused(tmp_path: Path) -> None:
    """It holds credentials and names the server a (root) daemon talks to (issue 24)."""
    path = tmp_path / "p.env"
    path.write_text("ANTHROPIC_API_KEY=sk-1\n")
    path.chmod(0o644)
    with pytest.raises(UsageError, match=r"is open to other users \(mode 644\); chmod 600 it"):
        load_env_file(str(path))
    path.chmod(0o600)
    link = tmp_path / "link.env"
    link.symlink_to(path)
    with pytest.raises(UsageError, match="is a symlink"):
        load_env_file(str(link))
    if os.geteuid() == 0:
        os.chown(path, 65534, 65534)
        with pytest.raises(UsageError, match="is owned by uid 65534"):
            load_env_file(str(path))


def test_the_cli_hands_the_fuse3_form_to_the_helper() -> None:
    """fuse3's mount.fuse runs `memfs STORE_ID DIR -o OPTS`: `-f` proves where it went."""
    done = subprocess.run(
        [sys.executable, "-m", "memfs.cli", STORE, "/mnt/p", "-o", "ro", "-f"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == (f"memfs: would run: memfs mount {STORE} /mnt/p --daemon --read-only\n")
    usage = subprocess.run(
        [sys.executable, "-m", "memfs.cli", STORE, "/mnt/p", "-o", "nope"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert usage.returncode == 2
    assert usage.stderr == "memfs: unknown mount option 'nope' (see mount.fuse.memfs(8))\n"


def test_operations_lists_every_option() -> None:
    """docs/operations.md §4's option table names each `-o` option the helper takes."""
    from memfs.cli.mounthelper import OPTIONS
    from tests.support.units import OPERATIONS

    text = OPERATIONS.read_text()
    table = text[text.index("| `-o` option | becomes |") :]
    table = table[: table.index("\n\n")]
    for option in OPTIONS:
        written = f"`{option.name}={option.value}`" if option.value else f"`{option.name}`"
        assert written in table, written
