"""The command line's conventions (issue 15), through the real CLI against `memfs serve`:
--version, global options anywhere, each subcommand's own usage, one wording per error,
help for every option, and log lines that split into `key=value` fields (or JSON)."""

from __future__ import annotations

import argparse
import ast
import itertools
import json
import logging
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from memfs import __version__, logs
from memfs.cli.main import build_parser
from memfs.config import ExitCode
from tests.support.api import Api
from tests.support.hung import HungServer
from tests.support.loglines import LOG_LINE
from tests.support.server import REPO_ROOT, ServerProcess, start_server

pytestmark = pytest.mark.deadline(120)


@pytest.fixture
def server(shared_server: ServerProcess) -> ServerProcess:
    """The session's SQLite server: these tests are about the CLI, not the backends."""
    return shared_server


@pytest.fixture
def api(shared_api: Api) -> Api:
    return shared_api


def env_for(url: str | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANTHROPIC_")}
    if url is not None:
        env["ANTHROPIC_BASE_URL"] = url
    return env


def memfs(
    *args: str,
    url: str | None = None,
    env: dict[str, str] | None = None,
    stdin: Any = subprocess.DEVNULL,
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "memfs.cli", *args],
        env=env if env is not None else env_for(url),
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        stdin=stdin,
        timeout=60,
    )


def test_version(server: ServerProcess) -> None:
    out = memfs("--version")
    assert (out.returncode, out.stdout.strip()) == (0, f"memfs {__version__}"), out.stderr
    assert "--version" in memfs("--help").stdout


def test_global_options_are_accepted_after_the_action_words(
    server: ServerProcess, api: Api
) -> None:
    store_id = api.create_store("Globals")["id"]
    nowhere = env_for("http://127.0.0.1:9")  # the environment points at nothing
    for args in (
        ["store", "list", "--api-url", server.url],
        ["store", "--api-url", server.url, "list"],
        ["--api-url", server.url, "store", "list"],
        ["store", "list", "--api-url", server.url, "--log-level", "debug", "--log-format", "json"],
        ["store", "show", store_id, "--api-url", server.url, "--log-level", "error"],
    ):
        out = memfs(*args, env=nowhere)
        assert out.returncode == 0, (args, out.stderr)
        assert store_id in out.stdout, args
    # a value after the action word wins over one before it
    out = memfs(
        "--api-url", "http://127.0.0.1:9", "store", "list", "--api-url", server.url, env=nowhere
    )
    assert out.returncode == 0, out.stderr
    # every command takes them (status needs no server; a log file is opened)
    log = server.db_path.with_name("globals.log")
    out = memfs(
        "status",
        "--log-level",
        "debug",
        "--log-file",
        str(log),
        "--log-format",
        "json",
        "--api-url",
        server.url,
        "--json",
        env=nowhere,
    )
    assert out.returncode == 0, out.stderr
    assert log.exists()
    for args in (
        ["serve", "token", "list", "--log-level", "debug", "--help"],
        ["mount", "x", "y", "--log-format", "json", "--help"],
        ["session", "s.json", "--api-url", server.url, "--help"],
        ["sync", "p", "--log-file", "f", "--help"],
        ["unmount", "p", "--log-level", "error", "--help"],
    ):
        assert memfs(*args).returncode == 0, args


@pytest.mark.parametrize(
    ("args", "prog"),
    [
        (["mount", "--bogus", "memstore_x", "/tmp"], "memfs mount"),
        (["store", "list", "--bogus"], "memfs store list"),
        (["store", "--bogus", "list"], "memfs store"),
        (["status", "--bogus"], "memfs status"),
        (["sync", "/tmp", "--timeout", "soon"], "memfs sync"),
        (["serve", "token", "list", "--bogus"], "memfs serve token list"),
        (["--bogus", "status"], "memfs"),
    ],
)
def test_each_subcommand_shows_its_own_usage(
    server: ServerProcess, args: list[str], prog: str
) -> None:
    out = memfs(*args, url=server.url)
    assert out.returncode == ExitCode.USAGE, out.stderr
    assert out.stderr.startswith(f"usage: {prog} "), out.stderr
    assert f"\n{prog}: error: " in out.stderr, out.stderr


def test_a_missing_store_has_one_wording(server: ServerProcess, tmp_path: Path) -> None:
    # `store …` and `mount` say the same thing about a store that is not there
    wanted = "memory store memstore_nope does not exist"
    shown = memfs("store", "show", "memstore_nope", url=server.url)
    assert shown.stderr.strip() == f"memfs store: error: {wanted}", shown.stderr
    assert shown.returncode == ExitCode.FAILED
    (tmp_path / "mnt").mkdir()
    mounted = memfs(
        "mount",
        "memstore_nope",
        str(tmp_path / "mnt"),
        "--cache-dir",
        str(tmp_path / "cache"),
        url=server.url,
    )
    if "FUSE is unavailable" not in mounted.stderr:
        assert mounted.stderr.strip() == f"memfs: {wanted}", mounted.stderr
        assert mounted.returncode == ExitCode.FAILED


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("", "the store name must not be empty"),
        ("x" * 256, "the store name is 256 characters; at most 255"),
        ("tab\there", "the store name must not contain control characters"),
    ],
)
def test_a_bad_store_name_is_a_usage_error(
    server: ServerProcess, api: Api, name: str, why: str
) -> None:
    before = {s["id"] for s in api.request("GET", "/v1/memory_stores").json()["data"]}
    out = memfs("store", "create", name, url=server.url)
    assert out.returncode == ExitCode.USAGE, out.stderr
    assert out.stderr.startswith("usage: memfs store create "), out.stderr
    assert out.stderr.strip().endswith(f"memfs store create: error: argument name: {why}")
    assert "status=400" not in out.stderr and "request_id" not in out.stderr
    after = {s["id"] for s in api.request("GET", "/v1/memory_stores").json()["data"]}
    assert before == after


def test_deleting_a_missing_store_says_so_before_asking_for_yes(
    server: ServerProcess, api: Api
) -> None:
    out = memfs("store", "delete", "NOPE", url=server.url)  # stdin is not a terminal
    assert (out.returncode, out.stderr.strip()) == (
        ExitCode.FAILED,
        "memfs store: error: memory store NOPE does not exist",
    )
    # a store that exists still needs --yes without a terminal
    store_id = api.create_store("Keep me")["id"]
    out = memfs("store", "delete", store_id, url=server.url)
    assert out.returncode == ExitCode.USAGE
    assert "without --yes" in out.stderr
    assert api.request("GET", f"/v1/memory_stores/{store_id}").status_code == 200


def test_a_redact_without_a_version_is_a_usage_error(tmp_path: Path) -> None:
    """Issue 35 item 11: `memfs redact ""` exited 1; an argument naming no version (or
    no path) is a usage error, exit 2, before any mount or store is asked."""
    for target, shown in (
        ("", ""),
        ("@~1", "@~1: "),
        (str(tmp_path / "a.md"), f"{tmp_path}/a.md: "),
    ):
        out = memfs("redact", target, "--yes", url="http://127.0.0.1:9")
        assert out.returncode == ExitCode.USAGE, (target, out.stderr)
        assert out.stderr.strip() == (
            f"memfs: {shown}name the version to redact (PATH@memver_… or PATH@~N)"
        )


def test_counts_are_plural_words(server: ServerProcess, api: Api, tmp_path: Path) -> None:
    store_id = api.create_store("Plurals")["id"]
    api.create_memory(store_id, "/one.md", "1\n")
    api.create_memory(store_id, "/two.md", "2\n")
    api.create_memory(store_id, "/three.md", "3\n")
    out_dir = tmp_path / "out"
    (out_dir / "one.md").mkdir(parents=True)  # a directory where a memory goes
    (out_dir / "two.md").mkdir()
    out = memfs("store", "export", store_id, str(out_dir), url=server.url)
    assert out.returncode == ExitCode.FAILED
    assert "memfs store: 2 memories not exported (see warnings above)" in out.stderr
    assert "(ies)" not in out.stderr and "(s)" not in out.stdout + out.stderr
    assert re.search(r"exported 1 memory \(\d+ bytes\)", out.stdout), out.stdout
    src = tmp_path / "src"
    src.mkdir()
    (src / "bad.md").write_bytes(b"\xff not utf-8")
    out = memfs("store", "import", store_id, str(src), url=server.url)
    assert "refused 1 file the API would reject:" in out.stderr, out.stderr


def test_every_option_has_help_with_its_default() -> None:
    """Walk every parser: each option and positional says what it is, and an option
    with a default names it (with the unit, for times)."""
    problems = []

    def walk(parser: argparse.ArgumentParser) -> None:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for child in action.choices.values():
                    walk(child)
                continue
            if isinstance(action, argparse._HelpAction | argparse._VersionAction):
                continue
            name = f"{parser.prog} {'/'.join(action.option_strings) or action.dest}"
            if not action.help or action.help == argparse.SUPPRESS:
                problems.append(f"{name}: no help")
                continue
            default = action.default
            if isinstance(action, argparse._StoreFalseAction):
                continue  # `--no-x` turns a default-on feature off: its help says what
            if not action.option_strings or default in (None, False, "", argparse.SUPPRESS):
                continue
            shown = f"{default:g}" if isinstance(default, float) else str(default)
            if f"default {shown}" not in action.help:
                problems.append(f"{name}: default {default!r} not in {action.help!r}")
            if isinstance(default, float) and action.metavar != "SECONDS":
                problems.append(f"{name}: a time without its unit (metavar SECONDS)")

    walk(build_parser())
    assert problems == []


def test_the_help_the_issue_named(server: ServerProcess) -> None:
    def help_of(*args: str) -> str:
        return " ".join(memfs(*args, "--help").stdout.split())  # unwrapped

    serve = help_of("serve")
    assert "--host HOST address to listen on (default 127.0.0.1: this host only)" in serve
    assert "--port PORT TCP port to listen on; 0 picks a free one (default 8765)" in serve
    sync = help_of("sync")
    assert "--json print the result as JSON (the schema of `status --json`)" in sync
    assert (
        "--timeout SECONDS stop waiting after SECONDS; the pass goes on in the daemon (default 120)"
    ) in sync
    unmount = help_of("unmount")
    assert (
        "--timeout SECONDS stop waiting after SECONDS; the daemon goes on with the "
        "final sync, then unmounts (default 90)"
    ) in unmount


def test_unreachable_errors_say_each_thing_once(server: ServerProcess, tmp_path: Path) -> None:
    def stutters(line: str) -> bool:
        # "ReadTimeout: ReadTimeout", "the store refused …: the store refused …"
        words = re.split(r"[:;]\s+", line)
        return (
            any(a.strip() and a == b for a, b in itertools.pairwise(words))
            or re.search(r"\b(\w+Error|\w+Timeout): \1\b", line) is not None
            or re.search(r"\b[A-Z]\w+(Error|Timeout): ", line) is not None
        )

    with HungServer() as hung:
        for url in ("http://127.0.0.1:9", hung.url):
            out = memfs("store", "list", url=url)
            assert out.returncode == ExitCode.UNREACHABLE, out.stderr
            [line] = out.stderr.strip().splitlines()
            assert line.startswith(f"memfs store: error: cannot reach the store at {url}: ")
            assert not stutters(line), line
    keyed = start_server(tmp_path / "keyed.db", api_key="right")
    try:
        env = {**env_for(keyed.url), "ANTHROPIC_API_KEY": "wrong"}
        out = memfs("store", "list", env=env)
        assert out.returncode == ExitCode.USAGE
        [line] = out.stderr.strip().splitlines()
        assert line.count("refused the credentials") == 1 and not stutters(line), line
    finally:
        keyed.stop()


def _server_log(tmp_path: Path, fmt: str) -> str:
    """A server's whole log, in `fmt`, across start, requests, a fault and stop."""
    log = tmp_path / f"serve-{fmt}.log"
    proc = ServerProcess(
        tmp_path / f"{fmt}.db",
        log_path=log,
        extra_args=["--log-format", fmt, "--faults", "error=1,paths=/x"],
    )
    proc.start()
    try:
        with Api(proc.url) as api:
            api.create_store("Logged")
            api.request("GET", "/x/memory_stores")  # an injected fault is logged
    finally:
        assert proc.stop() == 0
    return log.read_text()


def test_server_log_lines_are_key_value(tmp_path: Path) -> None:
    text = _server_log(tmp_path, "text")
    lines = text.strip().splitlines()
    assert any("serving backend=sqlite" in line for line in lines), text
    assert any("fault=error status=" in line for line in lines), text
    for line in lines:
        assert LOG_LINE.fullmatch(line), line


def test_server_logs_json(tmp_path: Path) -> None:
    text = _server_log(tmp_path, "json")
    records = [json.loads(line) for line in text.strip().splitlines()]
    serving = next(r for r in records if r["message"] == "serving")
    assert serving["backend"] == "sqlite" and serving["pool_size"] == 8, serving
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", serving["time"])
    assert (serving["level"], serving["logger"]) == ("info", "memfs.server")
    fault = next(r for r in records if r.get("fault") == "error")
    assert fault["message"] == "" and isinstance(fault["status"], int), fault
    for r in records:
        assert "=" not in r["message"], r


# ------------------------------------------------------------------ the docs are true

DOCS = REPO_ROOT / "docs"


def test_operations_has_the_one_exit_code_table() -> None:
    text = (DOCS / "operations.md").read_text()
    section = text[text.index("### Exit codes") :]
    section = section[: section.index("\n#")]
    rows = re.findall(r"^\| (\d+) \| `(\w+)` \| ", section, re.MULTILINE)
    assert {int(code): name for code, name in rows} == {e.value: e.name for e in ExitCode}
    for doc in [*sorted(DOCS.glob("*.md")), REPO_ROOT / "README.md"]:
        if doc.name != "operations.md":  # one table: the others link to it
            assert not re.search(r"^\| (Exit|Code) \|", doc.read_text(), re.MULTILINE), doc
    # `--daemon` logs to the cache directory by default (tests/mount checks that it does)
    assert "give it `--log-file` to keep its logs" not in text
    assert "it logs to\n`memfs.log` in `--cache-dir`" in text


def _log_calls() -> Iterator[tuple[str, int, str, int]]:
    """(file, line, format string, number of arguments) of every `log.*(...)` call, and
    of every `Repeated(log, "...")` (a warning logged once per cause, memfs/logs.py)."""
    for path in sorted((REPO_ROOT / "memfs").rglob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id == "Repeated"
                and len(node.args) >= 2
            ):
                message = node.args[1]
                assert isinstance(message, ast.Constant), (path, node.lineno)
                text = str(message.value)
                yield f"{path.relative_to(REPO_ROOT)}:{node.lineno}", 1, text, text.count("%")
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id == "log"
                and node.func.attr in ("debug", "info", "warning", "error", "exception", "log")
            ):
                args = node.args[1:] if node.func.attr == "log" else node.args
                level = node.func.attr
                assert args and isinstance(args[0], ast.Constant), (path, node.lineno)
                yield (
                    f"{path.relative_to(REPO_ROOT)}:{node.lineno}",
                    0 if level == "debug" else 1,
                    str(args[0].value),
                    len(args) - 1,
                )


def test_every_log_line_has_the_key_value_form_and_a_troubleshooting_row() -> None:
    rows = [
        line for line in (DOCS / "operations.md").read_text().splitlines() if line.startswith("|")
    ]
    problems = []
    for where, shown, msg, nargs in _log_calls():
        record = logging.LogRecord("memfs", logging.INFO, where, 0, msg, (1,) * nargs, None)
        parts = logs.split(record)
        if parts is None or "=" in parts[0]:
            problems.append(f"{where}: not `message key=%s…`: {msg!r}")
            continue
        head, pairs = parts
        keys = [key for key, _ in pairs]
        if not shown:
            continue  # debug lines need no row
        start = f"`{head}`" if not keys else "`" + (f"{head} " if head else "") + f"{keys[0]}="
        row = next((r for r in rows if start in r), None)
        if row is None:
            problems.append(f"{where}: no docs/operations.md row starts with {start}")
        elif missing := [k for k in keys if f"{k}=" not in row]:
            problems.append(f"{where}: its row lacks {missing}")
    assert problems == []
