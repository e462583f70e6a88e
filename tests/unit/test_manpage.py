"""The man pages and shell completion scripts scripts/install writes: man(1) renders and
finds them, bash and zsh complete the commands, options and choices the parser defines.
Each command of docs/operations.md §11 runs as written (only /path/to/memfs replaced)."""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from memfs.cli.conflict_commands import CONFLICT_ACTIONS
from memfs.cli.main import build_parser
from memfs.cli.manpage import commands, options
from tests.support.units import BIN, REPO, STANDARD_PATH, example

SHARE = BIN.parent / "share"
CAPTURE = REPO / "tests" / "support" / "capture_completion.zsh"


def _need(program: str, path: Path | None = None) -> None:
    if shutil.which(program) if path is None else path.exists():
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"{program} is required under CI=true (scripts/install installs it)")
    pytest.skip(f"{program} is not installed")


def _doc_lines(name: str) -> list[str]:
    """The commands of an example, with this checkout in place of /path/to/memfs."""
    return [
        line.split("  #")[0].strip().replace("/path/to/memfs", str(REPO))
        for line in example(name).splitlines()
        if line.strip() and not line.startswith("#")
    ]


def _env(**extra: str) -> dict[str, str]:
    return {
        "PATH": f"{BIN}:{STANDARD_PATH}",
        "HOME": os.environ.get("HOME", "/root"),
        "LANG": "C.UTF-8",
        **extra,
    }


def _print(*args: str) -> str:
    return subprocess.run(
        [sys.executable, "-m", "memfs.cli", *args],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    ).stdout


def _plain(text: str) -> str:
    """man's output without overstrike bold/underline."""
    return re.sub(r".\x08", "", text)


def _parser_tree() -> dict[str, argparse.ArgumentParser]:
    return {" ".join(c.words): c.parser for c in commands(build_parser())}


def test_install_put_the_pages_where_man_finds_them() -> None:
    _need("man")
    assert (SHARE / "man" / "man1" / "memfs.1").is_file(), "run scripts/install"
    assert (SHARE / "man" / "man8" / "mount.fuse.memfs.8").is_file()
    assert (SHARE / "bash-completion" / "completions" / "memfs").is_file()
    assert (SHARE / "zsh" / "site-functions" / "_memfs").is_file()
    for page, section in (("memfs", 1), ("mount.fuse.memfs", 8)):
        found = subprocess.run(
            ["man", "-w", page], capture_output=True, text=True, env=_env(), timeout=30
        )
        assert found.stdout.strip() == str(SHARE / "man" / f"man{section}" / f"{page}.{section}"), (
            found.stderr
        )


def test_man_renders_every_command_and_option() -> None:
    _need("man")
    tree = _parser_tree()
    rendered = {}
    for line in _doc_lines("man"):
        done = subprocess.run(
            ["bash", "-c", line],
            capture_output=True,
            text=True,
            cwd=REPO,
            timeout=60,
            env=_env(MANPAGER="cat", PAGER="cat", MANWIDTH="200"),
        )
        assert done.returncode == 0 and done.stdout, (line, done.stderr)
        rendered[line] = _plain(done.stdout)
    page = rendered["man memfs"]
    assert rendered["man -l .venv/share/man/man1/memfs.1"] == page
    for heading in ("NAME", "SYNOPSIS", "GLOBAL OPTIONS", "COMMANDS", "EXIT STATUS", "ENVIRONMENT"):
        assert re.search(rf"^{heading}$", page, re.M), heading
    for words, parser in tree.items():
        if words != "memfs":
            assert re.search(rf"^\s+{re.escape(words)}\b", page, re.M), words
        for action in options(parser):
            for name in action.option_strings:
                assert name in page, (words, name)
    helper = rendered["man mount.fuse.memfs"]
    from memfs.cli.mounthelper import OPTIONS

    for option in OPTIONS:
        assert re.search(rf"^\s+{option.name}\b", helper, re.M), option.name


def test_groff_finds_nothing_to_warn_about() -> None:
    _need("groff")
    for page in ("memfs", "mount.fuse.memfs"):
        done = subprocess.run(
            ["groff", "-man", "-Tutf8", "-ww", "-z"],
            input=_print("--print-manpage", page),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0 and not done.stderr, (page, done.stderr)


BASH_COMPLETE = r"""
complete_line() {  # what Tab offers at the end of $1, as bash calls the function
    local line=$1 spec function
    read -ra COMP_WORDS <<< "$line"
    [[ $line == *" " ]] && COMP_WORDS+=("")
    COMP_CWORD=$((${#COMP_WORDS[@]} - 1)) COMP_LINE=$line COMP_POINT=${#line}
    spec=$(complete -p memfs) || return 1
    function=${spec#*-F }; function=${function%% *}
    COMPREPLY=()
    "$function" memfs "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD-1]}"
    printf '%s\n' "${COMPREPLY[@]}"
    echo "<<end>>"
}
"""

LINES = [
    "memfs ",
    "memfs st",
    "memfs store ",
    "memfs mount --",
    "memfs mount --deletions ",
    "memfs --log-level ",
    "memfs serve token ",
    "memfs sync /tm",
    "memfs conflicts ",
    "memfs conflicts drop --mo",
]


def _expected() -> dict[str, set[str]]:
    tree = _parser_tree()
    subs = {
        w: {c.words[-1] for c in commands(build_parser()) if " ".join(c.words[:-1]) == w}
        for w in tree
    }
    mount_options = {n for a in options(tree["memfs mount"]) for n in a.option_strings}
    return {
        "memfs ": subs["memfs"],
        "memfs st": {s for s in subs["memfs"] if s.startswith("st")},
        "memfs store ": subs["memfs store"],
        "memfs mount --": {n for n in mount_options if n.startswith("--")},
        "memfs mount --deletions ": {"enabled", "log_only", "disabled"},
        "memfs --log-level ": {"debug", "info", "warning", "error"},
        "memfs serve token ": subs["memfs serve token"],
        "memfs sync /tm": {"/tmp"},
        # not subparsers (the same place takes a MOUNT), but completed as such
        "memfs conflicts ": set(CONFLICT_ACTIONS),
        "memfs conflicts drop --mo": {"--mount"},
    }


def _bash(setup: str, home: Path) -> dict[str, set[str]]:
    script = (
        setup + "\n" + BASH_COMPLETE + "".join(f"complete_line {_sq(line)}\n" for line in LINES)
    )
    done = subprocess.run(
        ["bash", "-c", script], capture_output=True, text=True, timeout=60, env=_env(HOME=str(home))
    )
    assert done.returncode == 0, done.stderr
    chunks = done.stdout.split("<<end>>\n")
    return {
        line: {w for w in chunk.splitlines() if w}
        for line, chunk in zip(LINES, chunks, strict=False)
    }


def _sq(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


def test_bash_completion_sourced(tmp_path: Path) -> None:
    (source,) = [line for line in _doc_lines("completion") if line.startswith("source ")]
    assert _bash(source, tmp_path) == _expected()


def test_bash_completion_loaded_on_demand(tmp_path: Path) -> None:
    """The docs' two lines write the script where bash-completion looks for it; its
    loader then finds it the first time `memfs` is completed."""
    loader = Path("/usr/share/bash-completion/bash_completion")
    _need("bash-completion", loader)
    writes = [
        line
        for line in _doc_lines("completion")
        if line.startswith(("mkdir ", "memfs --print-completion bash"))
    ]
    assert len(writes) == 2
    for line in writes:
        done = subprocess.run(
            ["bash", "-c", line],
            capture_output=True,
            text=True,
            timeout=60,
            env=_env(HOME=str(tmp_path)),
        )
        assert done.returncode == 0, done.stderr
    assert (tmp_path / ".local/share/bash-completion/completions/memfs").is_file()
    setup = f"source {loader}\n! complete -p memfs 2>/dev/null && __load_completion memfs"
    assert _bash(setup, tmp_path) == _expected()


def test_zsh_completion(tmp_path: Path) -> None:
    _need("zsh")
    (fpath,) = [line for line in _doc_lines("completion") if line.startswith("fpath=(")]
    expected = _expected()
    for line in LINES:
        done = subprocess.run(
            ["zsh", "-f", str(CAPTURE), fpath, line],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=tmp_path,
            env=_env(HOME=str(tmp_path)),
        )
        assert done.returncode == 0, done.stderr
        offered = {w.split(" -- ")[0] for w in done.stdout.splitlines() if w}
        if line.endswith("/tm"):  # zsh completes the path segment, not the whole word
            offered = {
                "/" + w.rstrip("/") if not w.startswith("/") else w.rstrip("/") for w in offered
            }
        assert offered == expected[line], line
    described = subprocess.run(
        ["zsh", "-f", str(CAPTURE), fpath, "memfs "],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        env=_env(HOME=str(tmp_path)),
    ).stdout
    assert "mount -- mount one memory store at a directory" in described
