"""The patch point: an `EnvironmentWorker` whose sessions use `MemfsSessionStores`.

`environment_worker(client, …)` is the one-line switch. The SDK has no public hook for
its memory engine, so this module uses one patch point,
`anthropic.lib.environments._worker.SessionMemoryStores` (the name
`WorkItemRun.__init__` builds its engine from), replaced by a dispatcher that builds a
`MemfsSessionStores` only inside a memfs worker and the SDK's own class everywhere else.
`check_sdk_internals()` verifies, before the patch goes in, that the installed SDK still
looks the way the patch assumes; tests/unit/test_worker_sdk.py runs it against the
installed SDK. Docs: docs/worker.md.
"""

from __future__ import annotations

import contextvars
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from memfs.worker.engine import MemfsSessionStores

if TYPE_CHECKING:
    from anthropic import AsyncAnthropic
    from anthropic.lib.environments import EnvironmentWorker

#: The SDK releases the patch point was checked against (pyproject's `anthropic` extra
#: pins the same range; a test keeps the two equal, and .ci/run runs the worker tests
#: on the oldest release of it too). A new SDK release: widen both, and a green run.
SDK_RANGE = "anthropic>=2.16.0,<2.18"
SDK_MIN, SDK_BELOW = (
    tuple(int(n) for n in bound.split(".")) for bound in SDK_RANGE.split(">=")[1].split(",<")
)

_ENGINE: contextvars.ContextVar[Callable[..., Any] | None] = contextvars.ContextVar(
    "memfs_worker_engine", default=None
)
#: The engine methods the SDK's WorkItemRun calls (checked against its bytecode).
ENGINE_SURFACE = (
    "download",
    "roots",
    "read_only_roots",
    "sync_if_due",
    "restore_missing",
    "finish",
    "flush_writes",
    "dispose",
    "write_file",  # the agent's write and edit tools save through the engine
)
#: Engine methods of `ENGINE_SURFACE` that later SDK releases added, by that release.
ADDED_IN = {"write_file": (2, 17, 0)}


class SDKMismatch(RuntimeError):
    """The installed SDK is not one the patch point was checked against."""


def sdk_version() -> tuple[int, ...]:
    import anthropic

    parts = []
    for piece in anthropic.__version__.split(".")[:3]:
        digits = "".join(c for c in piece if c.isdigit())
        parts.append(int(digits or 0))
    return tuple(parts)


def check_sdk_internals() -> None:
    """Fail loudly unless the SDK still builds its engine the way the patch assumes."""
    from anthropic.lib.environments import _worker
    from anthropic.lib.tools import _memories

    version = sdk_version()
    problems: list[str] = []
    if not SDK_MIN <= version < SDK_BELOW:
        problems.append(f"anthropic {'.'.join(map(str, version))} is outside {SDK_RANGE}")
    current = getattr(_worker, "SessionMemoryStores", None)
    if current is not _memories.SessionMemoryStores and not getattr(
        current, "_memfs_dispatch", False
    ):
        problems.append(
            "anthropic.lib.environments._worker.SessionMemoryStores is not the SDK's engine class"
        )
    run = getattr(_worker, "WorkItemRun", None)
    init = getattr(run, "__init__", None)
    if init is None or "SessionMemoryStores" not in init.__code__.co_names:
        problems.append(
            "WorkItemRun.__init__ no longer builds its engine from the module "
            "name SessionMemoryStores"
        )
    import inspect

    params = set(inspect.signature(_memories.SessionMemoryStores.__init__).parameters)
    if not {"client", "workdir", "sync_interval", "sync_deletions"} <= params:
        problems.append(f"SessionMemoryStores takes {sorted(params)}")
    used: set[str] = set()
    for value in vars(run).values() if run is not None else ():
        code = getattr(value, "__code__", None)
        if code is not None:
            used |= set(code.co_names)
    public = {n for n in dir(_memories.SessionMemoryStores) if not n.startswith("_")}
    missing = sorted((public & used) - set(ENGINE_SURFACE))
    if missing:
        problems.append(f"WorkItemRun uses engine members memfs does not provide: {missing}")
    absent = sorted(
        name for name in set(ENGINE_SURFACE) - public if version >= ADDED_IN.get(name, SDK_MIN)
    )
    if absent:
        problems.append(f"the SDK's engine no longer has {absent}")
    sdk_write = getattr(_memories.SessionMemoryStores, "write_file", None)
    if sdk_write is not None and _parameters(sdk_write) != _parameters(
        MemfsSessionStores.write_file
    ):
        problems.append(f"the SDK's write_file takes {_parameters(sdk_write)}")
    if problems:
        raise SDKMismatch(
            "memfs.worker.engine cannot drive this SDK: "
            + "; ".join(problems)
            + f" (checked: {SDK_RANGE}; see docs/worker.md)"
        )


def _parameters(method: Callable[..., Any]) -> list[tuple[str, str]]:
    """A method's parameters by name and kind (positional or keyword-only)."""
    import inspect

    return [(p.name, p.kind.name) for p in inspect.signature(method).parameters.values()]


def install_patch() -> None:
    """Route `WorkItemRun`'s engine through a dispatcher (idempotent, checked first)."""
    from anthropic.lib.environments import _worker

    check_sdk_internals()
    current = getattr(_worker, "SessionMemoryStores")  # noqa: B009 - not re-exported
    if getattr(current, "_memfs_dispatch", False):
        return
    original: Callable[..., Any] = current

    def dispatch(client: Any, **options: Any) -> Any:
        factory = _ENGINE.get()
        return original(client, **options) if factory is None else factory(client, **options)

    dispatch._memfs_dispatch = True  # type: ignore[attr-defined]
    dispatch._memfs_original = original  # type: ignore[attr-defined]
    setattr(_worker, "SessionMemoryStores", dispatch)  # noqa: B010 - the patch point


def _worker_class() -> type[EnvironmentWorker]:
    from anthropic.lib.environments import EnvironmentWorker

    class MemfsEnvironmentWorker(EnvironmentWorker):
        """An `EnvironmentWorker` whose sessions mount their memory stores with memfs."""

        _memfs_options: dict[str, Any]

        def _engine(self, client: Any, **options: Any) -> MemfsSessionStores:
            return MemfsSessionStores(client, **options, **self._memfs_options)

        async def run(self) -> None:
            token = _ENGINE.set(self._engine)
            try:
                await super().run()
            finally:
                _ENGINE.reset(token)

        async def handle_item(self, **kwargs: Any) -> None:
            token = _ENGINE.set(self._engine)
            try:
                await super().handle_item(**kwargs)
            finally:
                _ENGINE.reset(token)

    return MemfsEnvironmentWorker


def environment_worker(
    client: AsyncAnthropic,
    *,
    cache_dir: str | os.PathLike[str] | None = None,
    allow_other: bool = False,
    **options: Any,
) -> EnvironmentWorker:
    """An `EnvironmentWorker(client, **options)` whose sessions use memfs for memory.

    `options` are the SDK constructor's (environment_id, environment_key, workdir,
    memory_sync_interval, memory_sync_deletions, …); `cache_dir` is memfs's cache root;
    `allow_other` lets users other than the worker's into the mounts (tools that run as
    another user; a non-root worker needs `user_allow_other` in /etc/fuse.conf).
    """
    install_patch()
    worker = _worker_class()(client, **options)
    worker._memfs_options = {  # type: ignore[attr-defined]
        "cache_dir": cache_dir,
        "allow_other": allow_other,
    }
    return worker
