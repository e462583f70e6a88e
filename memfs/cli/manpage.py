"""Man pages (memfs(1), mount.fuse.memfs(8)) and bash/zsh completion, generated from the
argparse definitions, so they list exactly the commands and options the CLI accepts.

`memfs --print-manpage [PAGE]` and `memfs --print-completion bash|zsh` print them;
scripts/install writes them under .venv/share.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from memfs.config import ExitCode

PAGES = ("memfs", "mount.fuse.memfs")
SHELLS = ("bash", "zsh")

EXIT_MEANINGS = {
    ExitCode.OK: "success",
    ExitCode.FAILED: "the operation ran and failed (for a mount: changes were left "
    "un-pushed at unmount; they stay in the journal)",
    ExitCode.USAGE: "bad usage or configuration: the command line, the environment or "
    "the credentials",
    ExitCode.UNREACHABLE: "the store or server could not be reached",
    ExitCode.INTERRUPTED: "interrupted (Ctrl-C, SIGTERM or SIGHUP) before the command finished",
}

ENVIRONMENT = (
    ("ANTHROPIC_WORK_SECRET", "a work item's secret; its sessions_token is used (first choice)"),
    ("ANTHROPIC_AUTH_TOKEN", "a bearer token (second choice)"),
    (
        "ANTHROPIC_API_KEY",
        "an API key (third choice); any value for a memfs serve started without --api-key",
    ),
    ("ANTHROPIC_BASE_URL", "the Memory Stores API (default: the hosted API); --api-url wins"),
    (
        "MEMFS_SERVE_API_KEY",
        "memfs serve: the admin key every request must carry (not in argv, where ps shows it)",
    ),
    (
        "PGPASSWORD, PGPASSFILE, PGSERVICEFILE",
        "memfs serve: the PostgreSQL password, read by libpq (keep it out of the --db URL)",
    ),
    ("XDG_CACHE_HOME", "cache directories go to $XDG_CACHE_HOME/memfs (default ~/.cache/memfs)"),
    (
        "XDG_RUNTIME_DIR",
        "live mounts register in $XDG_RUNTIME_DIR/memfs (default "
        "/tmp/memfs-UID); status, sync and unmount look there",
    ),
)


@dataclass
class Command:
    """One level of the command tree: `memfs`, `memfs store`, `memfs store create`…"""

    words: tuple[str, ...]
    parser: argparse.ArgumentParser
    help: str
    subcommands: list[tuple[str, str]]  # (name, help) in definition order


def commands(
    parser: argparse.ArgumentParser, words: tuple[str, ...] = ("memfs",), help_text: str = ""
) -> Iterator[Command]:
    """Every parser of the tree, depth first, in definition order."""
    subs: list[tuple[str, str, argparse.ArgumentParser]] = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help or "" for a in action._choices_actions}
            seen: set[int] = set()
            for name, child in action.choices.items():
                if id(child) not in seen:  # aliases share one parser
                    seen.add(id(child))
                    subs.append((name, helps.get(name, ""), child))
    yield Command(
        words,
        parser,
        help_text or parser.description or "",
        [(name, text) for name, text, _ in subs],
    )
    for name, text, child in subs:
        yield from commands(child, (*words, name), text)


class LeadingWords(argparse._StoreAction):
    """A positional whose first word may be an action (`memfs conflicts show ID`), not
    a subparser because the same place takes a path: completion offers the actions as
    it offers subcommands. `words` are `(action, help)` pairs."""

    def __init__(self, *args: Any, words: Sequence[tuple[str, str]] = (), **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.words = tuple(words)


def options(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    return [a for a in parser._actions if a.option_strings and a.help is not argparse.SUPPRESS]


def positionals(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    return [
        a
        for a in parser._actions
        if not a.option_strings and not isinstance(a, argparse._SubParsersAction)
    ]


def takes_value(action: argparse.Action) -> bool:
    return action.nargs != 0


def metavar(action: argparse.Action) -> str:
    if action.metavar is not None:
        return str(action.metavar)
    if action.choices is not None:
        return "{" + ",".join(str(c) for c in action.choices) + "}"
    return action.dest.upper()


# ---- man(7) ---------------------------------------------------------------------------


def _text(value: str) -> str:
    """Plain text for groff: backslashes, leading control characters, non-ASCII."""
    out = value.replace("\\", "\\e").replace("-", "\\-")
    out = "".join(c if ord(c) < 128 else f"\\[u{ord(c):04X}]" for c in out)
    return "\n".join("\\&" + line if line[:1] in (".", "'") else line for line in out.split("\n"))


def _bold(value: str) -> str:
    return f"\\fB{_text(value)}\\fR"


def _italic(value: str) -> str:
    return f"\\fI{_text(value)}\\fR"


def _option_head(action: argparse.Action) -> str:
    names = ", ".join(_bold(o) for o in action.option_strings)
    if not takes_value(action):
        return names
    value = _italic(metavar(action))
    return f"{names} [{value}]" if action.nargs == "?" else f"{names} {value}"


def _entry(head: str, text: str | None) -> list[str]:
    """One `.TP` item; a definition without help text gets no empty body line."""
    return [".TP", head, _text(text)] if text else [".TP", head]


def _synopsis(command: Command) -> str:
    parts = [_bold(" ".join(command.words))]
    if options(command.parser):
        parts.append("[\\fIoptions\\fR]")
    for action in positionals(command.parser):
        name = _italic(metavar(action))
        parts.append(f"[{name}]" if action.nargs == "?" else name)
    if command.subcommands:
        parts.append(_italic("ACTION") + " ...")
    return " ".join(parts)


def _title(page: str, section: int) -> list[str]:
    from memfs import __version__

    return [
        f'.TH "{page.upper()}" "{section}" "" "memfs {__version__}" '
        f'"{"User Commands" if section == 1 else "System Administration"}"'
    ]


def _exit_status() -> list[str]:
    lines = [".SH EXIT STATUS"]
    for code in ExitCode:
        lines += [
            ".TP",
            _bold(str(int(code))),
            _text(EXIT_MEANINGS.get(code, code.name.lower().replace("_", " "))),
        ]
    return lines


def memfs_page(parser: argparse.ArgumentParser) -> str:
    tree = list(commands(parser))
    top_options = {tuple(a.option_strings) for a in options(parser)}
    lines = [
        *_title("memfs", 1),
        ".SH NAME",
        "memfs \\- mount Memory Stores as ordinary directories through FUSE",
        ".SH SYNOPSIS",
        f"{_bold('memfs')} [\\fIglobal options\\fR] "
        f"{_italic('COMMAND')} [\\fIoptions\\fR] [\\fIarguments\\fR]",
        ".SH DESCRIPTION",
        _text(parser.description or ""),
        ".SH GLOBAL OPTIONS",
    ]
    for action in options(parser):
        lines += _entry(_option_head(action), action.help)
    lines.append(".SH COMMANDS")
    for command in tree[1:]:
        lines += [".SS " + _synopsis(command), _text(command.help)]
        for action in positionals(command.parser):
            if action.help:  # a bare positional is in the synopsis already
                lines += _entry(_italic(metavar(action)), action.help)
        for action in options(command.parser):
            if tuple(action.option_strings) in top_options:
                continue  # a global option: listed once, above
            lines += _entry(_option_head(action), action.help)
    lines += _exit_status()
    lines.append(".SH ENVIRONMENT")
    for name, text in ENVIRONMENT:
        lines += [".TP", _bold(name), _text(text)]
    lines += [
        ".SH FILES",
        ".TP",
        _bold("~/.cache/memfs/STORE_ID"),
        _text(
            "a store's cache: content objects, the journal of unpushed "
            "changes (journal.sqlite and extents.log), conflict copies, the audit trail; "
            "memfs mount --cache-dir DIR uses DIR itself, memfs session "
            "--cache-dir DIR uses DIR/STORE_ID"
        ),
        ".TP",
        _bold("~/.cache/memfs/memfs.log"),
        _text("the log of --daemon mounts without --log-file; with --cache-dir DIR, DIR/memfs.log"),
        ".SH SEE ALSO",
        "\\fBmount.fuse.memfs\\fR(8), \\fBfusermount3\\fR(1), "
        "docs/operations.md in the memfs sources",
    ]
    return "\n".join(lines) + "\n"


def mount_helper_page(parser: argparse.ArgumentParser) -> str:
    from memfs.cli import mounthelper

    lines = [
        *_title("mount.fuse.memfs", 8),
        ".SH NAME",
        "mount.fuse.memfs \\- mount(8) helper for memfs: a memory store in fstab",
        ".SH SYNOPSIS",
        f"{_bold('mount -t fuse.memfs')} {_italic('STORE_ID')} "
        f"{_italic('MOUNTPOINT')} [{_bold('-o')} {_italic('OPTION')}[,...]]",
        ".br",
        f"{_italic('STORE_ID')} {_italic('MOUNTPOINT')} {_bold('fuse.memfs')} "
        f"{_italic('OPTION')}[,...] 0 0  (in /etc/fstab)",
        ".SH DESCRIPTION",
        _text(
            "mount(8) runs this helper for filesystems of type fuse.memfs. It "
            "becomes `memfs mount STORE_ID MOUNTPOINT --daemon` with the options "
            "below, and returns once the mount is live. The source may also be "
            "written memfs#STORE_ID. umount(8) unmounts; the daemon then runs "
            "its final sync and exits."
        ),
        ".SH OPTIONS",
    ]
    for option in mounthelper.OPTIONS:
        head = _bold(option.name) + (f"={_italic(option.value)}" if option.value else "")
        text = option.help
        if option.flag:
            text = f"{text} ({option.flag})"
        lines += [".TP", head, _text(text)]
    lines += [
        ".PP",
        _text(
            "Accepted and ignored: "
            + ", ".join(sorted(mounthelper.IGNORED))
            + ", and x-* and comment= options (they are for other "
            "programs). memfs mounts are always nosuid,nodev. Any other "
            "option is refused (exit 2), unless -s is given."
        ),
        ".PP",
        _text(
            "Flags from mount(8): -f (print the memfs command, mount "
            "nothing), -v (print it, then mount), -r (read-only), -w, "
            "-s (ignore unknown options), -n (nothing to do)."
        ),
    ]
    lines += _exit_status()
    lines += [
        ".SH SEE ALSO",
        "\\fBmemfs\\fR(1), \\fBmount\\fR(8), \\fBfstab\\fR(5), \\fBumount\\fR(8)",
    ]
    return "\n".join(lines) + "\n"


# ---- completion -----------------------------------------------------------------------


@dataclass
class _Level:
    key: str
    subcommands: list[tuple[str, str]]
    options: list[tuple[str, str]]  # (option string, help)
    valued: list[str]
    choices: dict[str, list[str]]


def _levels(parser: argparse.ArgumentParser) -> list[_Level]:
    levels = []
    for command in commands(parser):
        opts: list[tuple[str, str]] = []
        valued: list[str] = []
        choices: dict[str, list[str]] = {}
        for action in options(command.parser):
            for name in action.option_strings:
                opts.append((name, action.help or ""))
                if takes_value(action):
                    valued.append(name)
                    if action.choices is not None:
                        choices[name] = [str(c) for c in action.choices]
        key = " ".join(command.words)
        words = [
            w for a in positionals(command.parser) if isinstance(a, LeadingWords) for w in a.words
        ]
        levels.append(_Level(key, command.subcommands + words, opts, valued, choices))
        levels += [_Level(f"{key} {word}", [], opts, valued, choices) for word, _ in words]
    return levels


def _sq(value: str) -> str:
    """A single-quoted shell word (bash and zsh alike)."""
    return "'" + value.replace("'", "'\\''") + "'"


def _one_line(text: str) -> str:
    return " ".join(text.split())


BASH_BODY = r"""
_memfs() {
    local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]}
    local level=memfs word i skip=0
    for ((i = 1; i < COMP_CWORD; i++)); do
        word=${COMP_WORDS[i]}
        if ((skip)); then skip=0; continue; fi
        if [[ $word == -* ]]; then
            [[ " ${_memfs_valued[$level]} " == *" $word "* ]] && skip=1
        elif [[ " ${_memfs_subs[$level]} " == *" $word "* ]]; then
            level="$level $word"
        fi
    done
    if ((skip)); then
        local choices=${_memfs_choices["$level $prev"]}
        if [[ -n $choices ]]; then
            COMPREPLY=($(compgen -W "$choices" -- "$cur"))
        else
            compopt -o filenames 2>/dev/null
            COMPREPLY=($(compgen -f -- "$cur"))
        fi
    elif [[ $cur == -* ]]; then
        COMPREPLY=($(compgen -W "${_memfs_opts[$level]}" -- "$cur"))
    elif [[ -n ${_memfs_subs[$level]} ]]; then
        COMPREPLY=($(compgen -W "${_memfs_subs[$level]}" -- "$cur"))
    else
        compopt -o filenames 2>/dev/null
        COMPREPLY=($(compgen -f -- "$cur"))
    fi
}
complete -F _memfs memfs
"""


def bash_completion(parser: argparse.ArgumentParser) -> str:
    subs, opts, valued, choices = [], [], [], []
    for level in _levels(parser):
        key = _sq(level.key)
        if level.subcommands:
            subs.append(f"[{key}]={_sq(' '.join(n for n, _ in level.subcommands))}")
        opts.append(f"[{key}]={_sq(' '.join(dict.fromkeys(o for o, _ in level.options)))}")
        if level.valued:
            valued.append(f"[{key}]={_sq(' '.join(level.valued))}")
        for name, values in level.choices.items():
            choices.append(f"[{_sq(level.key + ' ' + name)}]={_sq(' '.join(values))}")
    lines = [
        "# bash completion for memfs: generated by `memfs --print-completion bash`",
        "# from the CLI's argument definitions; do not edit.",
    ]
    for name, items in (("subs", subs), ("opts", opts), ("valued", valued), ("choices", choices)):
        lines.append(f"declare -gA _memfs_{name}=(")
        lines += [f"    {item}" for item in items]
        lines.append(")")
    return "\n".join(lines) + "\n" + BASH_BODY.lstrip("\n")


ZSH_BODY = r"""
local level=memfs word i skip=0
for ((i = 2; i < CURRENT; i++)); do
    word=${words[i]}
    if ((skip)); then skip=0; continue; fi
    if [[ $word == -* ]]; then
        [[ " ${_memfs_valued[$level]} " == *" $word "* ]] && skip=1
    elif [[ " ${_memfs_names[$level]} " == *" $word "* ]]; then
        level="$level $word"
    fi
done
local -a described
if ((skip)); then
    local choices=${_memfs_choices[$level ${words[CURRENT-1]}]}
    if [[ -n $choices ]]; then
        compadd -- ${=choices}
    else
        _files
    fi
elif [[ $PREFIX == -* ]]; then
    described=(${(f)_memfs_opts[$level]})
    _describe -t options option described
elif [[ -n ${_memfs_subs[$level]} ]]; then
    described=(${(f)_memfs_subs[$level]})
    _describe -t commands command described
else
    _files
fi
"""


def _zsh_described(items: Sequence[tuple[str, str]]) -> str:
    """`name:description` lines for _describe (a colon in a name is escaped)."""
    return "\n".join(name.replace(":", "\\:") + ":" + _one_line(text) for name, text in items)


def zsh_completion(parser: argparse.ArgumentParser) -> str:
    subs, names, opts, valued, choices = [], [], [], [], []
    for level in _levels(parser):
        key = _sq(level.key)
        if level.subcommands:
            subs.append(f"{key} {_sq(_zsh_described(level.subcommands))}")
            names.append(f"{key} {_sq(' '.join(n for n, _ in level.subcommands))}")
        unique = list(dict.fromkeys(level.options))
        opts.append(f"{key} {_sq(_zsh_described(unique))}")
        if level.valued:
            valued.append(f"{key} {_sq(' '.join(level.valued))}")
        for name, values in level.choices.items():
            choices.append(f"{_sq(level.key + ' ' + name)} {_sq(' '.join(values))}")
    lines = [
        "#compdef memfs",
        "# zsh completion for memfs: generated by `memfs --print-completion zsh`",
        "# from the CLI's argument definitions; do not edit.",
    ]
    for name, items in (
        ("subs", subs),
        ("names", names),
        ("opts", opts),
        ("valued", valued),
        ("choices", choices),
    ):
        lines.append(f"typeset -gA _memfs_{name}")
        lines.append(f"_memfs_{name}=(")
        lines += [f"    {item}" for item in items]
        lines.append(")")
    return "\n".join(lines) + "\n" + ZSH_BODY.lstrip("\n")


# ---- the CLI's options ----------------------------------------------------------------


class _PrintAction(argparse.Action):
    """Print a generated file for the parser it belongs to, then exit 0 (like --version)."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kw: Any) -> None:
        self.render = kw.pop("render")
        super().__init__(option_strings, dest, **kw)

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        sys.stdout.write(self.render(parser, values))
        parser.exit(0)


def _manpage(parser: argparse.ArgumentParser, page: str | None) -> str:
    return mount_helper_page(parser) if page == "mount.fuse.memfs" else memfs_page(parser)


def _completion(parser: argparse.ArgumentParser, shell: str) -> str:
    return zsh_completion(parser) if shell == "zsh" else bash_completion(parser)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """`--print-manpage [PAGE]` and `--print-completion SHELL` on the top-level parser."""
    parser.add_argument(
        "--print-manpage",
        action=_PrintAction,
        render=_manpage,
        nargs="?",
        choices=PAGES,
        metavar="PAGE",
        help="print a man page (memfs, the default, or mount.fuse.memfs) and exit",
    )
    parser.add_argument(
        "--print-completion",
        action=_PrintAction,
        render=_completion,
        choices=SHELLS,
        metavar="SHELL",
        help="print the bash or zsh completion script and exit",
    )
