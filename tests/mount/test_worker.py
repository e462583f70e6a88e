"""The SDK's own `EnvironmentWorker` with memfs as its memory engine (memfs/worker/engine.py).

Real parts only: the installed `anthropic` SDK's worker, session tool runner and agent
toolset (`beta_agent_toolset_20260401`, given the engine's roots by the SDK itself), a
stand-in control plane on 127.0.0.1 (tests/support/controlplane.py), a real `memfs
serve` behind it for the memory endpoints, and real `memfs session` daemons over FUSE.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from anthropic import AsyncAnthropic
from anthropic.lib.tools._memories import SessionMemoryError

from memfs.worker.engine import NOT_CONFIRMED, NOT_SAVED, MemfsSessionStores
from memfs.worker.sdk import ADDED_IN, environment_worker, sdk_version
from tests.support.api import Api
from tests.support.controlplane import (
    ENV_ID,
    SESSION_ID,
    TOKEN,
    WORK_ID,
    Call,
    ControlPlane,
    Posted,
    Script,
    work_secret,
)
from tests.support.daemonwatch import DaemonWatch
from tests.support.deadline import eventually
from tests.support.files import store_files
from tests.support.mount import is_mounted
from tests.support.server import ServerProcess, start_server

pytestmark = pytest.mark.fuse


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with start_server(tmp_path_factory.mktemp("worker-db") / "memfs.db", api_key=TOKEN) as proc:
        yield proc


@pytest.fixture
def api(server: ServerProcess) -> Iterator[Api]:
    with Api(server.url, TOKEN) as client:
        yield client


@pytest.fixture
def host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, daemons: DaemonWatch) -> Iterator[Path]:
    """A worker host: a private runtime dir (short: socket paths), a cache, a root; the
    log of the `memfs session --daemon` children it starts is watched."""
    for cache in ("cache", "c"):
        daemons.watch_log(tmp_path / cache / "memfs.log")
    runtime = Path(tempfile.mkdtemp(prefix="mfs-wk-", dir="/tmp"))
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    for name in (
        "ANTHROPIC_WORK_SECRET",
        "ANTHROPIC_AUTH_TOKEN",
        "ANTHROPIC_API_KEY",
        "ANTHROPIC_BASE_URL",
        "ANTHROPIC_ENVIRONMENT_KEY",
    ):
        monkeypatch.delenv(name, raising=False)
    root = tmp_path / "mnt-memory"
    root.mkdir()
    (tmp_path / "work").mkdir()
    try:
        yield root
    finally:
        for store in ("notes", "reference"):  # never leave a mount behind a failed test
            if is_mounted(root / store):
                os.system(f"fusermount3 -u -z {root / store}")
        shutil.rmtree(runtime, ignore_errors=True)


def make_stores(
    api: Api, root: Path
) -> tuple[dict[str, Any], dict[str, Any], list[dict[str, Any]]]:
    notes = api.create_store("Notes")
    ref = api.create_store("Reference")
    api.create_memory(notes["id"], "/notes.md", "first line\n")
    api.create_memory(notes["id"], "/keep/old.md", "old\n")
    api.create_memory(ref["id"], "/facts.md", "the sky is blue\n")
    resources = [
        {
            "type": "memory_store",
            "memory_store_id": notes["id"],
            "access": "read_write",
            "name": "Notes",
            "mount_path": str(root / "notes"),
            "instructions": "",
        },
        {
            "type": "memory_store",
            "memory_store_id": ref["id"],
            "access": "read_only",
            "name": "Reference",
            "mount_path": str(root / "reference"),
            "instructions": "",
        },
    ]
    return notes, ref, resources


def handle(
    plane: ControlPlane,
    workdir: Path,
    *,
    cancel_when: Callable[[], bool] | None = None,
    **options: Any,
) -> BaseException | None:
    """Run `handle_item()` of a memfs worker against the stand-in; its error, if any."""
    caught: list[BaseException] = []

    async def main() -> None:
        client = AsyncAnthropic(base_url=plane.url, api_key="unused", max_retries=2)
        worker = environment_worker(
            client,
            workdir=str(workdir),
            memory_sync_interval=5,
            max_idle=5,
            cache_dir=str(workdir.parent / "cache"),
            **options,
        )
        with anyio.fail_after(240):
            await serve(worker)

    async def serve(worker: Any) -> None:
        async with anyio.create_task_group() as tg:

            async def run() -> None:
                try:
                    await worker.handle_item(
                        work_id=WORK_ID,
                        environment_id=ENV_ID,
                        session_id=SESSION_ID,
                        work_secret=work_secret(),
                    )
                except Exception as e:
                    caught.append(e)
                tg.cancel_scope.cancel()

            tg.start_soon(run)
            if cancel_when is not None:
                for _ in range(4000):  # bounded: 200 s
                    if cancel_when():
                        break
                    await anyio.sleep(0.05)
                tg.cancel_scope.cancel()

    anyio.run(main)
    return caught[0] if caught else None


def test_a_session_from_claim_to_teardown(api: Api, host: Path) -> None:
    """claim → mount → tool calls → syncs → session end → final sync → unmount."""
    notes, ref, resources = make_stores(api, host)
    n, r = host / "notes", host / "reference"
    seen: dict[str, Any] = {}

    def after(index: int, posted: Posted) -> None:
        if index == 0:  # the first call ran inside a live mount
            seen["mounted"] = [is_mounted(n), is_mounted(r), is_mounted(host)]
        if index == 2:  # a sync mid-session: the write reached the store already
            eventually(
                lambda: "new.md" in store_files(api, notes["id"]),
                "a mid-session sync",
                timeout=30,
                interval=0.1,
            )

    script = Script(
        resources=resources,
        after_result=after,
        calls=[
            Call("read", {"file_path": str(n / "notes.md")}),
            Call("write", {"file_path": str(n / "new.md"), "content": "written by the agent\n"}),
            Call(
                "edit",
                {
                    "file_path": str(n / "notes.md"),
                    "old_string": "first line",
                    "new_string": "edited line",
                },
            ),
            Call("bash", {"command": f"rm {n}/keep/old.md && echo via-bash > {n}/bash.md"}),
            Call("write", {"file_path": str(r / "facts.md"), "content": "overwritten\n"}),
            Call(
                "edit",
                {"file_path": str(r / "facts.md"), "old_string": "blue", "new_string": "green"},
            ),
            Call("bash", {"command": f"echo x > {r}/facts.md; echo rc=$?"}),
            Call("read", {"file_path": str(r / "facts.md")}),
        ],
    )
    with ControlPlane(script, api.client.base_url.__str__()) as plane:
        error = handle(plane, host.parent / "work")
        assert error is None
        assert not plane.unknown, plane.unknown
        assert plane.stopped.is_set()
        assert plane.heartbeats >= 1
        results = plane.results
    assert seen["mounted"] == [True, True, False]  # a mount per store; the root is none
    assert [p.is_error for p in results] == [False, False, False, False, True, True, False, False]
    assert "first line" in results[0].text
    assert "read-only" in results[4].text.lower() and "read-only" in results[5].text.lower()
    assert "Read-only file system" in results[6].text and "rc=1" in results[6].text
    assert "the sky is blue" in results[7].text
    # Edits reached the store, the bash delete too (a clean end's final sync); the
    # read-only store is as it was.
    assert store_files(api, notes["id"]) == {
        "notes.md": "edited line\n",
        "new.md": "written by the agent\n",
        "bash.md": "via-bash\n",
    }
    assert store_files(api, ref["id"]) == {"facts.md": "the sky is blue\n"}
    # Unmounted, and the root is as empty as before.
    assert not is_mounted(host)
    assert os.listdir(host) == []


@pytest.mark.parametrize("end", ["error", "cancel"])
def test_a_session_that_errors_or_is_cancelled_loses_nothing_acknowledged(
    api: Api, host: Path, end: str
) -> None:
    """Every call whose result was posted has its edit in the store; removals of a
    session that did not end cleanly are not sent as deletes."""
    notes, _, resources = make_stores(api, host)
    n = host / "notes"
    script = Script(
        resources=resources,
        end="error" if end == "error" else "hang",
        calls=[
            Call("write", {"file_path": str(n / "late.md"), "content": "just before the end\n"}),
            Call(
                "edit",
                {"file_path": str(n / "notes.md"), "old_string": "first", "new_string": "last"},
            ),
            Call("bash", {"command": f"mv {n}/keep/old.md /tmp/mfs-moved-away-$$.md"}),
        ],
    )
    with ControlPlane(script, str(api.client.base_url)) as plane:
        if end == "error":
            error = handle(plane, host.parent / "work")
            assert error is not None and "revoked" in str(error)
        else:
            error = handle(plane, host.parent / "work", cancel_when=lambda: len(plane.results) == 3)
            assert error is None
        assert plane.stopped.is_set()
        assert [p.is_error for p in plane.results] == [False, False, False]
    files = store_files(api, notes["id"])
    assert files["late.md"] == "just before the end\n"
    assert files["notes.md"] == "last line\n"
    assert files["keep/old.md"] == "old\n"  # not a delete: the session did not end cleanly
    assert not is_mounted(host)
    assert os.listdir(host) == []


def test_a_bash_write_into_a_read_only_store_as_another_user_is_erofs(api: Api, host: Path) -> None:
    """The worker's tools may run as a non-root user: EROFS for them too.

    A read-only store is a kernel `ro` mount: EROFS for every user before memfs is asked.
    """
    # A root other users can reach (pytest's temporary directories are private).
    root = Path(tempfile.mkdtemp(prefix="mfs-wk-root-", dir="/tmp"))
    root.chmod(0o755)
    try:
        _, ref, resources = make_stores(api, root)
        r = root / "reference"
        script = Script(
            resources=resources,
            calls=[
                Call(
                    "bash",
                    {
                        "command": "cd / && setpriv --reuid=65534 --regid=65534 "
                        f"--clear-groups sh -c 'cat {r}/facts.md; "
                        f"echo x > {r}/facts.md; echo x > {r}/new.md'; "
                        "echo rc=$?"
                    },
                ),
            ],
        )
        with ControlPlane(script, str(api.client.base_url)) as plane:
            assert handle(plane, host.parent / "work", allow_other=True) is None
            text = plane.results[0].text
        assert "the sky is blue" in text, text  # the other user can read it
        assert text.count("Read-only file system") == 2, text
        assert store_files(api, ref["id"]) == {"facts.md": "the sky is blue\n"}
        assert os.listdir(root) == []
    finally:
        for store in ("notes", "reference"):
            if is_mounted(root / store):
                os.system(f"fusermount3 -u -z {root / store}")
        shutil.rmtree(root, ignore_errors=True)


def test_restore_missing_puts_back_what_a_stopped_call_moved_away(api: Api, host: Path) -> None:
    """A call that was stopped may have moved files away and not put them back: after
    `restore_missing` they are back, and the store never loses them."""
    notes, _, resources = make_stores(api, host)
    n = host / "notes"

    async def main() -> None:
        from anthropic.types.beta import BetaManagedAgentsSession

        client = AsyncAnthropic(base_url=str(api.client.base_url), auth_token=TOKEN)
        session = BetaManagedAgentsSession.construct(resources=[_resource(r) for r in resources])
        engine = MemfsSessionStores(
            client,
            workdir=str(host.parent / "work"),
            sync_interval=5,
            cache_dir=host.parent / "cache",
        )
        await engine.download(session)
        try:
            shutil.move(n / "notes.md", host.parent / "work" / "stash.md")  # moved away
            os.rename(n / "keep" / "old.md", n / "keep" / "old.md.tmp")  # renamed
            (n / "fresh.md").write_text("a new file\n")
            await engine.restore_missing()
            assert (n / "notes.md").read_text() == "first line\n"
            assert (n / "keep" / "old.md").read_text() == "old\n"
            assert (n / "keep" / "old.md.tmp").read_text() == "old\n"
            await engine.finish()  # a final sync: deletes would go out now
        finally:
            await engine.dispose()

    anyio.run(main)
    assert store_files(api, notes["id"]) == {
        "notes.md": "first line\n",
        "keep/old.md": "old\n",
        "keep/old.md.tmp": "old\n",
        "fresh.md": "a new file\n",
    }
    assert os.listdir(host) == []


def test_a_stopped_call_that_moved_files_away_loses_nothing(api: Api, host: Path) -> None:
    """The SDK stops a running `bash` call (the session stopped waiting for it) after it
    moved files out and before it put them back: the worker's `on_call_stopped` has memfs
    restore them, so the clean end's final sync (deletes included) deletes nothing."""
    notes, _, resources = make_stores(api, host)
    n = host / "notes"
    stash = host.parent / "stash"
    script = Script(
        resources=resources,
        calls=[
            Call(
                "bash",
                {
                    "command": f"mkdir -p {stash} && mv {n}/notes.md {n}/keep {stash}/ "
                    f"&& sleep 120 && mv {stash}/* {n}/"
                },
            ),
            Call("read", {"file_path": str(n / "notes.md")}),
        ],
    )
    with ControlPlane(script, str(api.client.base_url)) as plane:

        def interrupt_when_moved() -> None:
            eventually(
                lambda: (stash / "keep" / "old.md").exists(), "the move", timeout=60, interval=0.1
            )
            plane.interrupt(0)

        watcher = threading.Thread(target=interrupt_when_moved, daemon=True)
        watcher.start()
        assert handle(plane, host.parent / "work") is None
        watcher.join(5)
        results = plane.results
    assert results[0].is_error and "was stopped" in results[0].text
    assert not results[1].is_error and "first line" in results[1].text
    assert store_files(api, notes["id"]) == {"notes.md": "first line\n", "keep/old.md": "old\n"}
    assert os.listdir(host) == []


def _resource(data: dict[str, Any]) -> Any:
    from anthropic.types.beta.sessions import BetaManagedAgentsMemoryStoreResource

    return BetaManagedAgentsMemoryStoreResource.construct(**data)


def test_refusals_before_anything_mounts(api: Api, host: Path) -> None:
    """The reference's refusals, with its wording, raised as `SessionMemoryError`."""
    notes, _, resources = make_stores(api, host)
    work = host.parent / "work"

    async def download(client: AsyncAnthropic, res: list[dict[str, Any]]) -> str:
        from anthropic.types.beta import BetaManagedAgentsSession

        engine = MemfsSessionStores(client, workdir=str(work), cache_dir=host.parent / "c")
        with pytest.raises(SessionMemoryError) as info:
            await engine.download(
                BetaManagedAgentsSession.construct(resources=[_resource(r) for r in res])
            )
        await engine.dispose()
        return str(info.value)

    async def main() -> None:
        ok = AsyncAnthropic(base_url=str(api.client.base_url), auth_token=TOKEN)
        (host / "notes").mkdir()
        assert await download(ok, resources[:1]) == (
            f"something already exists at the memory store's path: {host}/notes "
            f"(memory_store_id={notes['id']}); it must not exist when the session starts"
        )
        (host / "notes").rmdir()
        bad = {**resources[0], "mount_path": f"{host}/../escape"}
        assert await download(ok, [bad]) == (
            f"memory store mount_path is not a clean absolute path: '{host}/../escape' "
            f"(memory_store_id={notes['id']})"
        )
        many = [
            {**resources[0], "memory_store_id": f"memstore_{i}", "mount_path": f"{host}/s{i}"}
            for i in range(9)
        ]
        assert await download(ok, many) == (
            "a session can attach at most 8 memory stores; this one attaches 9"
        )
        (host.parent / "a-file").write_text("not a directory\n")
        under_file = {**resources[0], "mount_path": f"{host.parent}/a-file/memory/notes"}
        assert await download(ok, [under_file]) == (
            f"cannot create the memory store's folder: {host.parent}/a-file/memory "
            f"(memory_store_id={notes['id']}): [Errno 20] Not a directory: "
            f"'{host.parent}/a-file/memory'; the worker host must make this mount path "
            "writable"
        )
        missing = {**resources[0], "memory_store_id": "memstore_missing"}
        assert await download(ok, [missing]) == "memory store memstore_missing does not exist"
        anonymous = AsyncAnthropic(base_url=str(api.client.base_url), api_key=None, auth_token=None)
        assert "has no sessions token" in await download(anonymous, resources[:1])

    anyio.run(main)
    assert os.listdir(host) == []


def test_a_work_item_without_a_sessions_token_fails_with_the_sdk_wording(
    api: Api, host: Path
) -> None:
    _, _, resources = make_stores(api, host)
    script = Script(resources=resources, calls=[], end="hang")
    with ControlPlane(script, str(api.client.base_url)) as plane:
        caught: list[BaseException] = []

        async def main() -> None:
            client = AsyncAnthropic(base_url=plane.url, api_key="unused", max_retries=0)
            worker = environment_worker(client, workdir=str(host.parent / "work"))
            try:
                await worker.handle_item(
                    work_id=WORK_ID,
                    environment_id=ENV_ID,
                    session_id=SESSION_ID,
                    work_secret=work_secret(None),
                    environment_key="sk-ant-envkey-standin",
                )
            except SessionMemoryError as e:
                caught.append(e)

        anyio.run(main)
        requests = plane.requests
    assert len(caught) == 1, requests
    assert str(caught[0]).startswith(
        "cannot mount the session's memories: the work item carried no sessions token "
        f"(work_id={WORK_ID}, session_id={SESSION_ID})"
    )
    assert os.listdir(host) == []


def test_stores_under_two_roots_get_a_mount_each(api: Api, host: Path) -> None:
    """Mount paths with different parents: one daemon per parent; a missing parent is
    created, and removed again at dispose."""
    _, _, resources = make_stores(api, host)
    other = host.parent / "elsewhere" / "memory"
    resources[1]["mount_path"] = str(other / "reference")

    async def main() -> None:
        from anthropic.types.beta import BetaManagedAgentsSession

        client = AsyncAnthropic(base_url=str(api.client.base_url), auth_token=TOKEN)
        engine = MemfsSessionStores(
            client, workdir=str(host.parent / "work"), cache_dir=host.parent / "cache"
        )
        await engine.download(
            BetaManagedAgentsSession.construct(resources=[_resource(r) for r in resources])
        )
        try:
            assert engine.roots == [host / "notes", other / "reference"]
            assert engine.read_only_roots == [other / "reference"]
            assert is_mounted(host / "notes") and is_mounted(other / "reference")
            assert (host / "notes" / "notes.md").read_text() == "first line\n"
            assert (other / "reference" / "facts.md").read_text() == "the sky is blue\n"
        finally:
            await engine.dispose()

    anyio.run(main)
    assert not is_mounted(host / "notes") and not (host.parent / "elsewhere").exists()
    assert os.listdir(host) == []


def test_two_sessions_sharing_a_store_see_each_other_live(api: Api, host: Path) -> None:
    """Two worker sessions mount one store (each its own root and cache, a 60 s interval):
    a file one session writes is readable in the other without a sync call, by the
    watch (docs/sync.md, "Learning of remote changes"), and two appenders keep both lines."""
    notes, _, resources = make_stores(api, host)
    other = host.parent / "second" / "memory"
    shared = [resources[0], {**resources[0], "mount_path": str(other / "notes")}]

    def seen(check: Callable[[], bool], what: str) -> None:
        eventually(check, what, timeout=10)

    def lines(path: Path) -> set[str]:
        return set(path.read_text().splitlines()) if path.exists() else set()

    def share(one: Path, two: Path) -> None:
        (one / "from-one.md").write_text("written by one\n")
        seen(lambda: lines(two / "from-one.md") == {"written by one"}, "one's file in two")
        (two / "from-two.md").write_text("written by two\n")
        seen(lambda: lines(one / "from-two.md") == {"written by two"}, "two's file in one")
        for root, line in ((one, "one adds"), (two, "two adds")):
            with open(root / "notes.md", "a") as f:
                f.write(line + "\n")
        both = {"first line", "one adds", "two adds"}
        for root in (one, two):
            seen(lambda root=root: lines(root / "notes.md") == both, f"both lines in {root}")

    async def main() -> None:
        from anthropic.types.beta import BetaManagedAgentsSession

        client = AsyncAnthropic(base_url=str(api.client.base_url), auth_token=TOKEN)
        engines = [
            MemfsSessionStores(
                client, workdir=str(host.parent / "work"), sync_interval=60, cache_dir=cache
            )
            for cache in (host.parent / "cache", host.parent / "c")
        ]
        try:
            for engine, resource in zip(engines, shared, strict=True):
                session = BetaManagedAgentsSession.construct(resources=[_resource(resource)])
                await engine.download(session)
            await anyio.to_thread.run_sync(share, host / "notes", other / "notes")
        finally:
            for engine in engines:
                await engine.dispose()

    anyio.run(main)
    content = store_files(api, notes["id"])["notes.md"]
    assert sorted(content.splitlines()) == ["first line", "one adds", "two adds"]


def test_the_teardown_names_the_files_the_store_refused(
    api: Api, host: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A file the store cannot take (not UTF-8) is only in the cache after the session:
    the teardown names it and why (issue 24 item 11)."""
    notes, _, resources = make_stores(api, host)
    n = host / "notes"
    script = Script(
        resources=resources,
        calls=[
            Call(
                "bash",
                {"command": f"printf 'ok\\n' > {n}/fine.md; printf '\\377\\376' > {n}/bin.md"},
            ),
        ],
    )
    with caplog.at_level("WARNING", logger="memfs.worker"):
        with ControlPlane(script, api.client.base_url.__str__()) as plane:
            assert handle(plane, host.parent / "work") is None
    assert store_files(api, notes["id"])["fine.md"] == "ok\n"
    assert "bin.md" not in store_files(api, notes["id"])
    (line,) = [
        r.getMessage()
        for r in caplog.records
        if r.getMessage().startswith("the store refused these files")
    ]
    assert (
        f"memory_store_id={notes['id']} files=1 paths=/bin.md (content is not valid UTF-8)" in line
    )


# -- 2.17: the agent's write and edit tools save through the engine (`write_file`) -------

needs_write_file = pytest.mark.skipif(
    sdk_version() < ADDED_IN["write_file"],
    reason="this anthropic release has no write_file: its tools write the file themselves",
)


@needs_write_file
def test_a_tool_write_is_in_the_store_when_the_tool_returns(api: Api, host: Path) -> None:
    notes, _, resources = make_stores(api, host)
    n = host / "notes"
    seen: list[dict[str, str]] = []

    def after(index: int, posted: Posted) -> None:
        seen.append(store_files(api, notes["id"]))  # at once: no wait, no sync asked

    script = Script(
        resources=resources,
        after_result=after,
        calls=[
            Call("write", {"file_path": str(n / "deep/new.md"), "content": "agent\r\nline\n"}),
            Call(
                "edit",
                {"file_path": str(n / "notes.md"), "old_string": "first", "new_string": "1st"},
            ),
        ],
    )
    with ControlPlane(script, api.client.base_url.__str__()) as plane:
        assert handle(plane, host.parent / "work") is None
        results = plane.results
    assert [p.is_error for p in results] == [False, False], results
    assert seen[0]["deep/new.md"] == "agent\r\nline\n"
    assert seen[1]["notes.md"] == "1st line\n"


@needs_write_file
def test_a_tool_write_the_store_refuses_is_an_error_and_leaves_no_file(
    tmp_path: Path, host: Path
) -> None:
    """Too big, a full store, an archived store: the SDK's error, the file as before."""
    with start_server(
        tmp_path / "full.db", api_key=TOKEN, extra_args=["--max-memories", "2"]
    ) as srv:
        with Api(srv.url, TOKEN) as api:
            notes, _, resources = make_stores(api, host)  # notes holds 2: it is full
            n = host / "notes"
            files: list[list[str]] = []

            def after(index: int, posted: Posted) -> None:
                files.append(sorted(os.listdir(n)))
                if index == 2:
                    api.request("POST", f"/v1/memory_stores/{notes['id']}/archive")

            script = Script(
                resources=resources,
                after_result=after,
                calls=[
                    Call("write", {"file_path": str(n / "new.md"), "content": "no room\n"}),
                    Call("write", {"file_path": str(n / "big.md"), "content": "x" * 102_401}),
                    Call(
                        "edit",
                        {
                            "file_path": str(n / "notes.md"),
                            "old_string": "first",
                            "new_string": "1",
                        },
                    ),
                    Call("write", {"file_path": str(n / "notes.md"), "content": "archived\n"}),
                    Call("read", {"file_path": str(n / "notes.md")}),
                ],
            )
            with ControlPlane(script, srv.url) as plane:
                handle(plane, host.parent / "work")
                results = plane.results
            assert [p.is_error for p in results] == [True, True, False, True, False], results
            for i in (0, 1, 3):
                assert f"{n}" in results[i].text and NOT_SAVED in results[i].text, results[i]
            assert "full" in results[0].text
            assert "102,400" in results[1].text
            assert "archived" in results[3].text
            assert files[0] == files[1] == [".anthropic-memory-store", "keep", "notes.md"]
            assert results[4].text.endswith("1 line\n") or "1 line" in results[4].text
            assert store_files(api, notes["id"]) == {"notes.md": "1 line\n", "keep/old.md": "old\n"}


@needs_write_file
def test_a_tool_write_racing_another_sessions_change_gets_the_conflict_error(
    api: Api, host: Path
) -> None:
    """Another session changes the memory between the agent's read and its write: the
    SDK's 409 error; the file is the store's version; the agent's bytes a conflict copy."""
    notes, _, resources = make_stores(api, host)
    n = host / "notes"
    seen: dict[str, str] = {}
    plane_ref: list[ControlPlane] = []

    def after(index: int, posted: Posted) -> None:
        plane = plane_ref[0]
        if index == 0:  # the mount must not hear of it before the write: hold its watch
            plane.watch_gate.clear()
            (memory,) = [m for m in api.list_memories(notes["id"]) if m["path"] == "/notes.md"]
            api.update_memory(notes["id"], memory["id"], content="another session\n")
        if index == 1:
            seen["file"] = (n / "notes.md").read_text()
            plane.watch_gate.set()

    script = Script(
        resources=resources,
        after_result=after,
        calls=[
            Call("read", {"file_path": str(n / "notes.md")}),
            Call("write", {"file_path": str(n / "notes.md"), "content": "the agent\n"}),
        ],
    )
    with ControlPlane(script, api.client.base_url.__str__()) as plane:
        plane_ref.append(plane)
        assert handle(plane, host.parent / "work") is None
        results = plane.results
    assert results[1].is_error, results[1]
    assert NOT_SAVED in results[1].text and "Read the file again" in results[1].text
    assert seen["file"] == "another session\n"
    assert store_files(api, notes["id"])["notes.md"] == "another session\n"
    copies = list((host.parent / "cache").rglob("conflicts/*"))
    assert any(c.is_file() and c.read_bytes() == b"the agent\n" for c in copies), copies


@needs_write_file
def test_a_tool_write_the_store_does_not_confirm_in_time_is_kept_and_pushed_later(
    api: Api, host: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from memfs.worker import engine

    monkeypatch.setattr(engine, "MEMORY_FLUSH_TIMEOUT", 2.0)  # the SDK's 30 s, shortened
    notes, _, resources = make_stores(api, host)
    n = host / "notes"
    plane_ref: list[ControlPlane] = []

    def after(index: int, posted: Posted) -> None:
        plane = plane_ref[0]
        if index == 0:
            plane.write_gate.clear()
        if index == 1:
            assert "late.md" not in store_files(api, notes["id"])
            plane.write_gate.set()

    script = Script(
        resources=resources,
        after_result=after,
        calls=[
            Call("read", {"file_path": str(n / "notes.md")}),
            Call("write", {"file_path": str(n / "late.md"), "content": "late\n"}),
            Call("read", {"file_path": str(n / "late.md")}),
        ],
    )
    with ControlPlane(script, api.client.base_url.__str__()) as plane:
        plane_ref.append(plane)
        assert handle(plane, host.parent / "work") is None
        results = plane.results
    assert results[1].is_error and NOT_CONFIRMED in results[1].text, results[1]
    assert "no answer within 2 seconds" in results[1].text
    assert not results[2].is_error and "late" in results[2].text  # the write is there
    assert store_files(api, notes["id"])["late.md"] == "late\n"  # and reached the store
