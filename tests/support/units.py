"""The shipped systemd units and the fenced examples of docs/operations.md, read the way
systemd and a reader would, so tests can run them as written."""

from __future__ import annotations

import re
import shlex
import socket
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
UNITS = REPO / "contrib" / "systemd"
OPERATIONS = REPO / "docs" / "operations.md"
BIN = Path(sys.executable).parent
STANDARD_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def example(name: str, doc: Path = OPERATIONS) -> str:
    """The fenced block right after `<!-- example: NAME -->`."""
    found = re.search(
        rf"<!-- example: {re.escape(name)} -->\n\s*```[a-z]*\n(.*?)\n\s*```", doc.read_text(), re.S
    )
    assert found, f"{doc.name} has no example {name!r}"
    return found.group(1) + "\n"


def parse_unit(text: str) -> dict[str, list[tuple[str, str]]]:
    """Section -> [(key, value)] in order; `\\` continues a line, `#`/`;` lines are
    comments (systemd's syntax, the subset the shipped units use)."""
    sections: dict[str, list[tuple[str, str]]] = {}
    section = ""
    pending = ""
    for raw in text.splitlines():
        line = pending + raw.strip()
        pending = ""
        if line.endswith("\\"):
            pending = line[:-1] + " "
            continue
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1]
            sections.setdefault(section, [])
            continue
        key, _, value = line.partition("=")
        sections.setdefault(section, []).append((key.strip(), value.strip()))
    return sections


def values(unit: dict[str, list[tuple[str, str]]], section: str, key: str) -> list[str]:
    return [v for k, v in unit.get(section, []) if k == key]


def unescape_instance(instance: str) -> str:
    """`\\xNN` back to the character it escapes."""
    return re.sub(r"\\x([0-9a-f]{2})", lambda m: chr(int(m.group(1), 16)), instance)


def escape_path(path: str) -> str:
    """`systemd-escape --path PATH`, run for real."""
    done = subprocess.run(
        ["systemd-escape", "--path", path], capture_output=True, text=True, check=True, timeout=10
    )
    return done.stdout.strip()


def command(line: str, env: dict[str, str], instance: str = "") -> tuple[str, list[str]]:
    """An Exec*= line -> (its prefix characters, argv): specifiers (%i, %I, %f, %%) and
    `${VAR}` / `$VAR` words expanded as systemd does."""
    prefix = re.match(r"[-+@!:]*", line)
    flags = prefix.group(0) if prefix else ""
    body = line[len(flags) :]
    unescaped = unescape_instance(instance.replace("-", "/"))  # `-` is `/`, `\x2d` is `-`
    specifiers = {"i": instance, "I": unescaped, "f": "/" + unescaped, "%": "%"}
    body = re.sub(r"%(.)", lambda m: specifiers[m.group(1)], body)
    argv = []
    for word in shlex.split(body):
        whole = re.fullmatch(r"\$(\w+)|\$\{(\w+)\}", word)
        if whole:  # `$VAR` alone: split on whitespace; an unset one is no word at all
            argv += env.get(whole.group(1) or whole.group(2), "").split()
        else:
            argv.append(re.sub(r"\$\{(\w+)\}", lambda m: env.get(m.group(1), ""), word))
    return flags, argv


def read_env_file(path: Path) -> dict[str, str]:
    found = {}
    for line in path.read_text().splitlines():
        if line.strip() and not line.lstrip().startswith(("#", ";")):
            key, _, value = line.partition("=")
            found[key.strip()] = value.strip()
    return found


class NotifySocket:
    """A stand-in for systemd's NOTIFY_SOCKET: collects what the service sends."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(str(path))
        self.messages: list[str] = []

    def wait_for(self, word: str, timeout: float) -> list[str]:
        """Every message until one carries the line `word` (e.g. READY=1); bounded."""
        self.sock.settimeout(timeout)
        while not any(word in m.splitlines() for m in self.messages):
            self.messages.append(self.sock.recv(4096).decode())
        return self.messages

    def close(self) -> None:
        self.sock.close()
