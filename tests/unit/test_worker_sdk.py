"""The one patch point memfs.worker.engine relies on, checked against the installed SDK.

When a new `anthropic` release changes what the patch assumes (the module name
`WorkItemRun` builds its engine from, the engine's surface, its constructor), these
tests fail with the reason, before any session could be served the wrong way.
"""

from __future__ import annotations

import argparse
import logging
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
from anthropic import AsyncAnthropic
from anthropic.lib.environments import EnvironmentWorker, _worker
from anthropic.lib.tools._memories import SessionMemoryStores

from memfs.worker import cli as worker_cli
from memfs.worker import sdk as worker_sdk
from memfs.worker.engine import MemfsSessionStores
from memfs.worker.sdk import (
    ENGINE_SURFACE,
    SDK_RANGE,
    SDKMismatch,
    check_sdk_internals,
    environment_worker,
)

REPO = Path(__file__).resolve().parents[2]


def test_the_installed_sdk_is_one_the_patch_point_was_checked_against() -> None:
    check_sdk_internals()  # raises SDKMismatch naming every difference


def test_the_engine_has_the_sdk_engines_whole_public_surface() -> None:
    public = {n for n in dir(SessionMemoryStores) if not n.startswith("_")}
    version = worker_sdk.sdk_version()
    newer = {n for n, since in worker_sdk.ADDED_IN.items() if version < since}
    assert public == set(ENGINE_SURFACE) - newer
    for name in ENGINE_SURFACE:  # the newer ones too: one engine serves the whole range
        assert hasattr(MemfsSessionStores, name), name


def test_a_tool_write_reaches_the_engine_as_the_sdk_passes_it() -> None:
    """2.17's WorkItemRun hands the tools `partial(engine.write_file, lock=its lock)`;
    on 2.16 the tools write the file themselves and never call it."""
    sdk_write = getattr(SessionMemoryStores, "write_file", None)
    if worker_sdk.sdk_version() < worker_sdk.ADDED_IN["write_file"]:
        assert sdk_write is None
        return
    assert sdk_write is not None
    assert worker_sdk._parameters(sdk_write) == worker_sdk._parameters(
        MemfsSessionStores.write_file
    )
    assert "write_file" in _worker.WorkItemRun._run_tools.__code__.co_names


def test_a_changed_write_file_fails_loudly(monkeypatch: pytest.MonkeyPatch) -> None:
    if worker_sdk.sdk_version() < worker_sdk.ADDED_IN["write_file"]:
        assert not hasattr(SessionMemoryStores, "write_file")  # added by 2.17: none to check
        return

    async def other(self: Any, path: Path, content: str, *, lock: Any) -> bool:
        return False

    monkeypatch.setattr(SessionMemoryStores, "write_file", other)
    with pytest.raises(SDKMismatch, match="the SDK's write_file takes"):
        check_sdk_internals()


def test_the_pinned_range_is_the_one_in_pyproject() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    assert extras["anthropic"] == [SDK_RANGE]
    assert "memfs[anthropic]" in extras["test"]


def test_only_a_memfs_worker_gets_the_memfs_engine() -> None:
    client = AsyncAnthropic(base_url="http://127.0.0.1:9", auth_token="t")
    worker = environment_worker(client, workdir="/tmp")
    assert isinstance(worker, EnvironmentWorker)
    build = _worker.SessionMemoryStores
    assert getattr(build, "_memfs_dispatch", False)
    # Outside a memfs worker's run/handle_item: the SDK's own engine, untouched.
    assert type(build(client, workdir="/tmp")) is SessionMemoryStores
    token = worker_sdk._ENGINE.set(worker._engine)  # type: ignore[attr-defined]
    try:
        assert type(build(client, workdir="/tmp", sync_interval=5.0)) is MemfsSessionStores
    finally:
        worker_sdk._ENGINE.reset(token)
    environment_worker(client)  # installing twice keeps one dispatcher
    assert _worker.SessionMemoryStores is build


def test_a_changed_sdk_fails_loudly(monkeypatch: pytest.MonkeyPatch) -> None:
    """What a release that builds its engine differently would look like."""

    def new_init(self: Any, **kw: Any) -> None:
        self._memory = object()

    monkeypatch.setattr(_worker.WorkItemRun, "__init__", new_init)
    with pytest.raises(SDKMismatch, match="no longer builds its engine from the module name"):
        check_sdk_internals()
    monkeypatch.undo()
    monkeypatch.setattr(worker_sdk, "SDK_BELOW", (2, 16, 0))
    with pytest.raises(SDKMismatch, match=r"is outside anthropic>=2\.16\.0,<2\.18"):
        environment_worker(AsyncAnthropic(base_url="http://127.0.0.1:9", auth_token="t"))


def test_memfs_worker_commands_refuse_missing_settings_with_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in (
        "ANTHROPIC_ENVIRONMENT_ID",
        "ANTHROPIC_ENVIRONMENT_KEY",
        "ANTHROPIC_WORK_ID",
        "ANTHROPIC_SESSION_ID",
        "ANTHROPIC_WORK_SECRET",
    ):
        monkeypatch.delenv(name, raising=False)
    assert worker_cli.main(["poll"]) == 2
    assert capsys.readouterr().err == (
        "memfs-worker: poll needs --environment-id (or ANTHROPIC_ENVIRONMENT_ID) and "
        "ANTHROPIC_ENVIRONMENT_KEY\n"
    )
    monkeypatch.setattr("sys.stdin", None)
    assert worker_cli.main(["handle-item"]) == 2
    assert capsys.readouterr().err == (
        "memfs-worker: handle_item: work_id is required — pass it or set ANTHROPIC_WORK_ID\n"
    )


def _worker_cli(*args: str) -> subprocess.CompletedProcess[str]:
    """The installed `memfs-worker` command (the console script), as a user runs it."""
    return subprocess.run(
        [str(Path(sys.executable).parent / "memfs-worker"), *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_worker_command_names_itself_and_documents_every_option() -> None:
    from memfs import __version__

    version = _worker_cli("--version")
    assert version.returncode == 0 and version.stdout == f"memfs-worker {__version__}\n"
    top = _worker_cli("--help")
    assert top.returncode == 0 and top.stdout.startswith("usage: memfs-worker "), top.stdout
    assert "python -m" not in top.stdout
    for command in ("poll", "handle-item"):
        done = _worker_cli(command, "--help")
        assert done.stdout.startswith(f"usage: memfs-worker {command} "), done.stdout
        parser = worker_cli._parser()
        (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        for action in [*parser._actions, *sub.choices[command]._actions]:
            assert action.help or not action.option_strings, (command, action.option_strings)
        # the cache root's layout, as `memfs session --cache-dir` (which the worker runs) has it
        assert "DIR/STORE_ID" in done.stdout and "DIR/memfs.log" in done.stdout, done.stdout


def test_http_requests_are_logged_at_debug_only(tmp_path: Path) -> None:
    """httpx logs each request at INFO: `memfs-worker` shows them only with --log-level
    debug, as DEBUG lines; memfs's own commands never (their lines stay key=value)."""
    from memfs import logs

    request = "HTTP Request: GET http://127.0.0.1/v1/environments/env/work/poll 200 OK"
    lines = {}
    for level, worker in (("info", True), ("debug", True), ("debug", False)):
        path = tmp_path / f"{level}-{worker}.log"
        logs.configure(level, str(path), http_requests=worker)
        try:
            for name in logs.HTTP_REQUEST_LOGGERS:  # httpx, and the SDK's copy of it
                logging.getLogger(name).info(request)
            logging.getLogger("memfs.worker").info("mounted memory store")
        finally:
            logging.shutdown()
            logs.configure("warning")
        lines[level, worker] = [line.split(" ", 2)[2] for line in path.read_text().splitlines()]
    mounted = "INFO memfs.worker: mounted memory store"
    assert lines["info", True] == lines["debug", False] == [mounted]
    assert lines["debug", True] == [
        *[f"DEBUG {name}: {request}" for name in logs.HTTP_REQUEST_LOGGERS],
        mounted,
    ]
